// CUDA kernel of segment_reduce.
//   sum/mean: atomicAdd (+ per-segment counts for mean); mul: compare-and-swap multiply;
//   max/min:  pass 1 atomic max/min of the values (NaN skipped), pass 2 atomicMin of the row index
//             among rows equal to the winner (ties -> first row), pass 3 zero-fill empty segments.
// half/bfloat16 are reduced in float, int8/int16/uint8/bool in int64, and cast back (as the CPU kernel: integer
// sums and products wrap, means are exact floors, bool sums / products are 'any' / 'all').
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cfloat>
#include <climits>
#include <limits>
#include <type_traits>

#include "fsdlite_ops/common.h"
#include "segment_reduce.h"

namespace fsdlite::segment_reduce_cuda {
using fsdlite::segment_reduce::Reduce;

constexpr int kThreads = 256;

template <typename T>
__device__ inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return isnan(v);
  else return false;
}

__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

// *p = update(*p) atomically, by compare-and-swap on the value's bits; stops as soon as update keeps the bits.
template <typename T, typename Update>
__device__ inline void atomic_update(T* p, Update update) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomic_update: 4- or 8-byte values only");
  using Bits = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
  Bits* addr = reinterpret_cast<Bits*>(p);
  Bits old = *addr, assumed;
  do {
    assumed = old;
    T cur;
    memcpy(&cur, &assumed, sizeof(T));
    const T next = update(cur);
    Bits next_bits;
    memcpy(&next_bits, &next, sizeof(T));
    if (next_bits == assumed) break;
    old = atomicCAS(addr, assumed, next_bits);
  } while (assumed != old);
}

template <typename T, bool IsMax>
__device__ inline void atomic_extreme(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    atomic_update(p, [v](T cur) { return (IsMax ? v > cur : v < cur) ? v : cur; });
  } else if constexpr (std::is_same_v<T, int>) {
    IsMax ? atomicMax(p, v) : atomicMin(p, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    IsMax ? atomicMax(reinterpret_cast<long long*>(p), static_cast<long long>(v))
          : atomicMin(reinterpret_cast<long long*>(p), static_cast<long long>(v));
  }
}

// *p *= v (integers multiply in unsigned arithmetic: overflow wraps).
template <typename T>
__device__ inline void atomic_mul(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    atomic_update(p, [v](T cur) { return cur * v; });
  } else {
    using U = std::make_unsigned_t<T>;
    atomic_update(p, [v](T cur) { return static_cast<T>(static_cast<U>(cur) * static_cast<U>(v)); });
  }
}

template <typename T>
__global__ void mul_kernel(const T* src, const int64_t* index, int64_t n, int64_t width, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * width) return;
  atomic_mul(out + index[i / width] * width + (i % width), src[i]);
}

template <typename T>
__global__ void sum_kernel(const T* src, const int64_t* index, int64_t n, int64_t width, T* out, int64_t* counts) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * width) return;
  const int64_t row = i / width, f = i % width;
  const int64_t s = index[row];
  atomic_add(out + s * width + f, src[i]);
  if (counts != nullptr && f == 0) atomic_add(counts + s, int64_t(1));
}

template <typename T>
__global__ void mean_kernel(T* out, const int64_t* counts, int64_t num_segments, int64_t width) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= num_segments * width) return;
  const int64_t c = counts[i / width];
  if (c == 0) return;
  if constexpr (std::is_integral_v<T>) {
    const T q = out[i] / static_cast<T>(c);
    out[i] = (out[i] % static_cast<T>(c) != 0 && out[i] < 0) ? q - 1 : q;
  } else {
    out[i] = out[i] / static_cast<T>(c);
  }
}

template <typename T, bool IsMax>
__global__ void extreme_value_kernel(const T* src, const int64_t* index, int64_t n, int64_t width, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * width) return;
  const T v = src[i];
  if (is_nan(v)) return;
  atomic_extreme<T, IsMax>(out + index[i / width] * width + (i % width), v);
}

template <typename T>
__global__ void extreme_arg_kernel(const T* src, const int64_t* index, int64_t n, int64_t width, const T* out,
                                   int64_t* arg) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * width) return;
  const int64_t row = i / width, f = i % width;
  const int64_t o = index[row] * width + f;
  if (src[i] == out[o]) atomicMin(reinterpret_cast<long long*>(arg + o), static_cast<long long>(row));
}

template <typename T>
__global__ void empty_to_zero_kernel(T* out, const int64_t* arg, int64_t total, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < total && arg[i] == n) out[i] = T(0);
}

// Initial value of a max/min: -inf/+inf for floating types (so a segment holding only -inf/+inf still finds
// its winner in the arg pass), the lowest/highest value for integers.
template <typename T>
T lowest_or_highest(bool is_max) {
  if constexpr (std::numeric_limits<T>::has_infinity) {
    return is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  } else {
    return is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

template <typename T>
void launch(const at::Tensor& src, const at::Tensor& index, int64_t num_segments, Reduce reduce, at::Tensor& out,
            at::Tensor& arg, cudaStream_t stream) {
  const int64_t n = src.size(0);
  const int64_t width = src.numel() / n;
  const int64_t total = n * width;
  const dim3 grid(static_cast<unsigned>(ceil_div(total, kThreads)));
  const T* s = src.data_ptr<T>();
  const int64_t* idx = index.data_ptr<int64_t>();
  T* o = out.data_ptr<T>();
  if (reduce == Reduce::Sum || reduce == Reduce::Mean) {
    at::Tensor counts;
    if (reduce == Reduce::Mean) counts = at::zeros({num_segments}, index.options());
    sum_kernel<T><<<grid, kThreads, 0, stream>>>(s, idx, n, width, o, counts.defined() ? counts.data_ptr<int64_t>() : nullptr);
    if (reduce == Reduce::Mean) {
      const dim3 g2(static_cast<unsigned>(ceil_div(num_segments * width, kThreads)));
      mean_kernel<T><<<g2, kThreads, 0, stream>>>(o, counts.data_ptr<int64_t>(), num_segments, width);
    }
    return;
  }
  if (reduce == Reduce::Mul) {
    mul_kernel<T><<<grid, kThreads, 0, stream>>>(s, idx, n, width, o);  // out starts at 1 (allocate_outputs)
    return;
  }
  const bool is_max = reduce == Reduce::Max;
  out.fill_(lowest_or_highest<T>(is_max));
  if (is_max) extreme_value_kernel<T, true><<<grid, kThreads, 0, stream>>>(s, idx, n, width, o);
  else extreme_value_kernel<T, false><<<grid, kThreads, 0, stream>>>(s, idx, n, width, o);
  extreme_arg_kernel<T><<<grid, kThreads, 0, stream>>>(s, idx, n, width, o, arg.data_ptr<int64_t>());
  const int64_t out_total = out.numel();
  const dim3 g3(static_cast<unsigned>(ceil_div(out_total, kThreads)));
  empty_to_zero_kernel<T><<<g3, kThreads, 0, stream>>>(o, arg.data_ptr<int64_t>(), out_total, n);
}

std::tuple<at::Tensor, at::Tensor> segment_reduce_cuda(const at::Tensor& src_, const at::Tensor& index_,
                                                       int64_t num_segments, c10::string_view reduce_name) {
  const Reduce reduce = fsdlite::segment_reduce::check_args(src_, index_, num_segments, reduce_name);
  c10::cuda::CUDAGuard guard(src_.device());
  const auto dtype = src_.scalar_type();
  const bool low_precision = dtype == at::kHalf || dtype == at::kBFloat16;
  const bool small_int = dtype == at::kChar || dtype == at::kShort || dtype == at::kByte || dtype == at::kBool;
  const bool cast = low_precision || small_int;
  const at::Tensor src = (low_precision ? src_.to(at::kFloat) : small_int ? src_.to(at::kLong) : src_).contiguous();
  const at::Tensor index = index_.contiguous();
  auto [out, arg] = fsdlite::segment_reduce::allocate_outputs(src, num_segments, reduce);
  if (src.size(0) > 0 && src.numel() > 0 && num_segments > 0) {
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    AT_DISPATCH_SWITCH(src.scalar_type(), "segment_reduce_cuda",
                       AT_DISPATCH_CASE(at::kFloat, [&] { launch<float>(src, index, num_segments, reduce, out, arg, stream); })
                       AT_DISPATCH_CASE(at::kDouble, [&] { launch<double>(src, index, num_segments, reduce, out, arg, stream); })
                       AT_DISPATCH_CASE(at::kInt, [&] { launch<int>(src, index, num_segments, reduce, out, arg, stream); })
                       AT_DISPATCH_CASE(at::kLong, [&] { launch<int64_t>(src, index, num_segments, reduce, out, arg, stream); }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  if (cast) out = dtype == at::kBool ? out.ne(0) : out.to(dtype);  // int64 -> small types wraps, as on the CPU
  return {out, arg};
}

}  // namespace fsdlite::segment_reduce_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("segment_reduce", &fsdlite::segment_reduce_cuda::segment_reduce_cuda);
}
