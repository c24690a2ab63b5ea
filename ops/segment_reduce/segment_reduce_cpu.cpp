// CPU kernel of segment_reduce: a stable counting sort of the index turns the scatter into
// independent per-segment reductions (parallel over segments, deterministic, ties -> first row).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "segment_reduce.h"

namespace fsdlite::segment_reduce {
namespace {

// CSR view of `index`: rows of segment s are perm[offsets[s] .. offsets[s+1]) in ascending order.
void build_csr(const int64_t* index, int64_t n, int64_t num_segments, std::vector<int64_t>& offsets,
               std::vector<int64_t>& perm) {
  offsets.assign(num_segments + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++offsets[index[i] + 1];
  for (int64_t s = 0; s < num_segments; ++s) offsets[s + 1] += offsets[s];
  std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
  perm.resize(n);
  for (int64_t i = 0; i < n; ++i) perm[cursor[index[i]]++] = i;
}

template <typename T>
inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else if constexpr (std::is_integral_v<T>) return false;
  else return std::isnan(static_cast<float>(v));
}

template <typename scalar_t>
void reduce_segments(const scalar_t* src, const int64_t* offsets, const int64_t* perm, int64_t num_segments,
                     int64_t width, int64_t n, Reduce reduce, scalar_t* out, int64_t* arg) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, width));
  at::parallel_for(0, num_segments, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc(width);
    for (int64_t s = begin; s < end; ++s) {
      const int64_t first = offsets[s], last = offsets[s + 1];
      if (first == last) continue;  // empty segment: out stays 0, arg stays n
      scalar_t* out_row = out + s * width;
      if (reduce == Reduce::Sum || reduce == Reduce::Mean) {
        std::fill(acc.begin(), acc.end(), acc_t(0));
        for (int64_t p = first; p < last; ++p) {
          const scalar_t* row = src + perm[p] * width;
          for (int64_t f = 0; f < width; ++f) acc[f] += static_cast<acc_t>(row[f]);
        }
        const int64_t count = last - first;
        for (int64_t f = 0; f < width; ++f) {
          if (reduce == Reduce::Sum) {
            out_row[f] = static_cast<scalar_t>(acc[f]);
          } else if constexpr (std::is_integral_v<scalar_t>) {
            // integer mean: floor division, as torch_scatter
            const acc_t q = acc[f] / static_cast<acc_t>(count);
            out_row[f] = static_cast<scalar_t>((acc[f] % static_cast<acc_t>(count) != 0 && acc[f] < 0) ? q - 1 : q);
          } else {
            out_row[f] = static_cast<scalar_t>(acc[f] / static_cast<acc_t>(count));
          }
        }
      } else {
        int64_t* arg_row = arg + s * width;
        const bool is_max = reduce == Reduce::Max;
        for (int64_t p = first; p < last; ++p) {
          const int64_t r = perm[p];
          const scalar_t* row = src + r * width;
          for (int64_t f = 0; f < width; ++f) {
            const scalar_t v = row[f];
            if (is_nan(v)) continue;  // NaN never wins (torch_scatter CPU)
            if (arg_row[f] == n || (is_max ? v > out_row[f] : v < out_row[f])) {  // strict: ties -> first
              out_row[f] = v;
              arg_row[f] = r;
            }
          }
        }
      }
    }
  });
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
  std::vector<int64_t> offsets, perm;
  build_csr(index.data_ptr<int64_t>(), n, num_segments, offsets, perm);
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "segment_reduce_cpu", [&] {
    reduce_segments<scalar_t>(src.data_ptr<scalar_t>(), offsets.data(), perm.data(), num_segments, width, n,
                              reduce, out.data_ptr<scalar_t>(),
                              arg.numel() ? arg.data_ptr<int64_t>() : nullptr);
  });
  return {out, arg};
}

}  // namespace
}  // namespace fsdlite::segment_reduce

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("segment_reduce", &fsdlite::segment_reduce::segment_reduce_cpu); }
