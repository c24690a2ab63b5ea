// CPU kernel of segment_reduce: rows are read once, in order, and accumulated into their segment's output
// row (src streams from memory; the output, usually much smaller, stays in cache). Threads own disjoint
// ranges of segments and skip the rows of other ranges, so the result is deterministic and independent of
// the thread count; processing rows in order makes ties pick the first row. Sums and products of the small
// integer types (int8, int16, uint8, bool) accumulate in int64 and are cast back: sums and products wrap as in
// torch, means are exact floors, and bool sums / products are 'any' / 'all'.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "segment_reduce.h"

namespace fsdlite::segment_reduce {
namespace {

constexpr int64_t kSerialWork = 1 << 16;  // below this many elements one thread does everything

template <typename T>
inline bool is_nan(T v) {
  if constexpr (std::is_integral_v<T>) return false;
  else if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return std::isnan(static_cast<float>(v));
}

// Accumulator of sums and products: float for half/bfloat16, int64 for the small integer types and bool.
template <typename T>
using acc_type = std::conditional_t<std::is_integral_v<T> && (sizeof(T) < 4), int64_t, at::opmath_type<T>>;

// a + b and a * b; integers in unsigned arithmetic, so that overflow wraps (as in torch) instead of being undefined
template <typename acc_t>
inline acc_t wrap_add(acc_t a, acc_t b) {
  if constexpr (std::is_integral_v<acc_t>) {
    using u = std::make_unsigned_t<acc_t>;
    return static_cast<acc_t>(static_cast<u>(a) + static_cast<u>(b));
  } else {
    return a + b;
  }
}

template <typename acc_t>
inline acc_t wrap_mul(acc_t a, acc_t b) {
  if constexpr (std::is_integral_v<acc_t>) {
    using u = std::make_unsigned_t<acc_t>;
    return static_cast<acc_t>(static_cast<u>(a) * static_cast<u>(b));
  } else {
    return a * b;
  }
}

template <typename scalar_t, typename acc_t>
inline scalar_t from_acc(acc_t v) {
  if constexpr (std::is_same_v<scalar_t, bool>) return v != 0;
  else return static_cast<scalar_t>(v);
}

template <typename acc_t>
inline acc_t floor_div(acc_t sum, int64_t count) {
  const acc_t c = static_cast<acc_t>(count);
  const acc_t q = sum / c;
  return (sum % c != 0 && sum < 0) ? q - 1 : q;  // integer mean: floor division, as torch_scatter
}

// Output rows are touched in index order (random): prefetching the row of a later index lets the memory
// accesses of several rows overlap.
constexpr int64_t kPrefetch = 16;

template <typename T>
inline void prefetch_row(const T* base, const int64_t* index, int64_t r, int64_t n, int64_t width) {
  if (r + kPrefetch < n) __builtin_prefetch(base + index[r + kPrefetch] * width, 1);
}

// Sum (and count) -- or multiply -- the rows whose segment lies in [s_begin, s_end) into `acc`, then write `out`
// (mean: divided by the count; empty segments keep the identity). `acc` is `out` itself when scalar_t is its own
// accumulator type; otherwise a buffer initialised with the identity (0 for sums, 1 for products).
template <typename scalar_t, typename acc_t, bool Mul>
void sum_range(const scalar_t* src, const int64_t* index, int64_t n, int64_t width, int64_t s_begin, int64_t s_end,
               bool mean, scalar_t* out, acc_t* acc, int64_t* count) {
  for (int64_t r = 0; r < n; ++r) {
    prefetch_row(acc, index, r, n, width);
    const int64_t s = index[r];
    if (s < s_begin || s >= s_end) continue;
    const scalar_t* row = src + r * width;
    acc_t* a = acc + s * width;
    for (int64_t f = 0; f < width; ++f) {
      a[f] = Mul ? wrap_mul(a[f], static_cast<acc_t>(row[f])) : wrap_add(a[f], static_cast<acc_t>(row[f]));
    }
    if (mean) ++count[s];
  }
  if (!mean && static_cast<void*>(acc) == static_cast<void*>(out)) return;
  for (int64_t s = s_begin; s < s_end; ++s) {
    for (int64_t f = 0; f < width; ++f) {
      acc_t v = acc[s * width + f];
      if (mean && count[s] > 0) {
        if constexpr (std::is_integral_v<acc_t>) v = floor_div(v, count[s]);
        else v = v / static_cast<acc_t>(count[s]);
      }
      out[s * width + f] = from_acc<scalar_t>(v);
    }
  }
}

// Max/min with arg of the rows whose segment lies in [s_begin, s_end); out starts at 0 and arg at n.
// Branch-free update (unpredictable branches would serialise the cache misses of consecutive rows); the
// caller passes an int32 arg scratch when n fits, halving the randomly accessed memory.
template <typename scalar_t, bool IsMax, typename arg_t>
void extreme_range(const scalar_t* src, const int64_t* index, int64_t n, int64_t width, int64_t s_begin,
                   int64_t s_end, scalar_t* out, arg_t* arg) {
  const arg_t empty = static_cast<arg_t>(n);
  for (int64_t r = 0; r < n; ++r) {
    prefetch_row(out, index, r, n, width);
    prefetch_row(arg, index, r, n, width);
    const int64_t s = index[r];
    if (s < s_begin || s >= s_end) continue;
    const scalar_t* row = src + r * width;
    scalar_t* o = out + s * width;
    arg_t* g = arg + s * width;
    for (int64_t f = 0; f < width; ++f) {
      const scalar_t v = row[f];
      // NaN never wins (torch_scatter CPU); strict comparison: ties keep the first row
      const bool take = !is_nan(v) & ((g[f] == empty) | (IsMax ? v > o[f] : v < o[f]));
      o[f] = take ? v : o[f];
      g[f] = take ? static_cast<arg_t>(r) : g[f];
    }
  }
}

template <typename scalar_t>
void reduce_segments(const scalar_t* src, const int64_t* index, int64_t n, int64_t num_segments, int64_t width,
                     Reduce reduce, scalar_t* out, int64_t* arg) {
  using acc_t = acc_type<scalar_t>;
  std::vector<acc_t> acc_buffer;
  acc_t* acc = nullptr;
  const bool mul = reduce == Reduce::Mul;
  if (reduce == Reduce::Sum || reduce == Reduce::Mean || mul) {
    if constexpr (std::is_same_v<acc_t, scalar_t>) {
      acc = out;  // initialised with the identity by allocate_outputs
    } else {
      acc_buffer.assign(num_segments * width, acc_t(mul ? 1 : 0));
      acc = acc_buffer.data();
    }
  }
  std::vector<int64_t> count(reduce == Reduce::Mean ? num_segments : 0, 0);
  int64_t* count_ptr = count.empty() ? nullptr : count.data();
  const bool extreme = reduce == Reduce::Max || reduce == Reduce::Min;
  const bool narrow_arg = extreme && n < std::numeric_limits<int32_t>::max();
  std::vector<int32_t> arg32(narrow_arg ? num_segments * width : 0, static_cast<int32_t>(n));
  auto extremes = [&](auto* arg_ptr, int64_t begin, int64_t end) {
    if (reduce == Reduce::Max) extreme_range<scalar_t, true>(src, index, n, width, begin, end, out, arg_ptr);
    else extreme_range<scalar_t, false>(src, index, n, width, begin, end, out, arg_ptr);
  };
  auto run = [&](int64_t begin, int64_t end) {
    if (narrow_arg) {
      extremes(arg32.data(), begin, end);
      for (int64_t k = begin * width; k < end * width; ++k) arg[k] = arg32[k];
    } else if (extreme) {
      extremes(arg, begin, end);
    } else if (mul) {
      sum_range<scalar_t, acc_t, true>(src, index, n, width, begin, end, false, out, acc, count_ptr);
    } else {
      sum_range<scalar_t, acc_t, false>(src, index, n, width, begin, end, reduce == Reduce::Mean, out, acc, count_ptr);
    }
  };
  if (n * width < kSerialWork || at::get_num_threads() == 1) {
    run(0, num_segments);
  } else {
    at::parallel_for(0, num_segments, 1, run);  // one contiguous segment range per thread
  }
}

std::tuple<at::Tensor, at::Tensor> segment_reduce_cpu(const at::Tensor& src_, const at::Tensor& index_,
                                                      int64_t num_segments, c10::string_view reduce_name) {
  const Reduce reduce = check_args(src_, index_, num_segments, reduce_name);
  const at::Tensor src = src_.contiguous();
  const at::Tensor index = index_.contiguous();
  auto [out, arg] = allocate_outputs(src, num_segments, reduce);
  const int64_t n = src.size(0);
  const int64_t width = n > 0 ? src.numel() / n : out.numel() / std::max<int64_t>(1, num_segments);
  if (n == 0 || num_segments == 0 || width == 0) return {out, arg};
  auto launch = [&](auto tag) {
    using scalar_t = decltype(tag);
    reduce_segments<scalar_t>(src.data_ptr<scalar_t>(), index.data_ptr<int64_t>(), n, num_segments, width, reduce,
                              out.data_ptr<scalar_t>(), arg.numel() ? arg.data_ptr<int64_t>() : nullptr);
  };
  AT_DISPATCH_SWITCH(src.scalar_type(), "segment_reduce_cpu",
                     AT_DISPATCH_CASE_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, [&] { launch(scalar_t{}); })
                     AT_DISPATCH_CASE_INTEGRAL_TYPES([&] { launch(scalar_t{}); })
                     AT_DISPATCH_CASE(at::kBool, [&] { launch(scalar_t{}); }));
  return {out, arg};
}

}  // namespace
}  // namespace fsdlite::segment_reduce

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("segment_reduce", &fsdlite::segment_reduce::segment_reduce_cpu); }
