// CUDA implementation of the kernel-point chunk primitives (see kp_primitives.h).
// influences: one thread per neighbour slot; gather: one thread per (query, kernel point, channel);
// scatter: one thread per (query, slot, channel) with atomicAdd into the feature gradient;
// kernel_grad: one thread per (query, slot, kernel point) with atomicAdd into (rows, K, 3).
#pragma once

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/ops/empty.h>

#include "kp_primitives.h"

namespace fsdlite::kp::cuda {

constexpr int kThreads = 256;

inline dim3 blocks_for(int64_t total) { return dim3(static_cast<unsigned>(ceil_div(total, kThreads))); }

template <typename T>
__global__ void influences_kernel(Geometry<T> geo, int64_t start, int64_t rows, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * geo.h) return;
  const int64_t r = i / geo.h, s = i % geo.h;
  geo.influences(start + r, s, out + i * geo.k);
}

template <typename T>
__global__ void gather_kernel(const int64_t* nb, const T* x, const T* infl, int64_t start, int64_t rows,
                              int64_t n, int64_t h, int64_t k, int64_t c, T* acc) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * k * c) return;
  const int64_t ch = i % c, kk = (i / c) % k, r = i / (c * k);
  T sum = T(0);
  for (int64_t s = 0; s < h; ++s) {
    const T w = infl[(r * h + s) * k + kk];
    if (w == T(0)) continue;
    const int64_t j = nb[(start + r) * h + s];
    if (j < n) sum += w * x[j * c + ch];
  }
  acc[i] = sum;
}

template <typename T>
__global__ void scatter_kernel(const int64_t* nb, const T* infl, const T* t, int64_t start, int64_t rows, int64_t n,
                               int64_t h, int64_t k, int64_t c, T* gx) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * h * c) return;
  const int64_t ch = i % c, s = (i / c) % h, r = i / (c * h);
  const int64_t j = nb[(start + r) * h + s];
  if (j >= n) return;
  const T* w = infl + (r * h + s) * k;
  T sum = T(0);
  for (int64_t kk = 0; kk < k; ++kk)
    if (w[kk] != T(0)) sum += w[kk] * t[(r * k + kk) * c + ch];
  if (sum != T(0)) atomicAdd(gx + j * c + ch, sum);
}

template <typename T>
__global__ void kernel_grad_kernel(Geometry<T> geo, const T* x, const T* t, int64_t start, int64_t rows, int64_t c,
                                   T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * geo.h * geo.k) return;
  const int64_t kk = i % geo.k, s = (i / geo.k) % geo.h, r = i / (geo.k * geo.h);
  const int64_t q = start + r;
  const int64_t j = geo.neighbor(q, s);
  if (j >= geo.n) return;
  if (geo.nearest && geo.nearest_kernel(q, j) != kk) return;
  T dh[3];
  if (!geo.influence_grad(q, j, kk, dh)) return;
  const T* tk = t + (r * geo.k + kk) * c;
  const T* xr = x + j * c;
  T dot = T(0);
  for (int64_t ch = 0; ch < c; ++ch) dot += tk[ch] * xr[ch];
  for (int a = 0; a < 3; ++a) atomicAdd(out + (r * geo.k + kk) * 3 + a, dot * dh[a]);
}

inline cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

inline void influences(const GeometryTensors& g, int64_t start, at::Tensor& infl) {
  const int64_t rows = infl.size(0);
  if (rows * g.h == 0) return;
  AT_DISPATCH_FLOATING_TYPES(g.q_pts.scalar_type(), "kp_influences_cuda", [&] {
    influences_kernel<scalar_t><<<blocks_for(rows * g.h), kThreads, 0, stream()>>>(g.view<scalar_t>(), start, rows,
                                                                                    infl.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

inline void gather(const GeometryTensors& g, const at::Tensor& x, int64_t start, at::Tensor& acc, at::Tensor& infl,
                   bool compute) {
  const int64_t rows = acc.size(0), c = x.size(1);
  at::Tensor weights = infl.defined() ? infl : at::empty({rows, g.h, g.k}, x.options());
  if (compute) influences(g, start, weights);
  if (rows * g.k * c == 0) return;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "kp_gather_cuda", [&] {
    gather_kernel<scalar_t><<<blocks_for(rows * g.k * c), kThreads, 0, stream()>>>(
        g.neighbors.data_ptr<int64_t>(), x.data_ptr<scalar_t>(), weights.data_ptr<scalar_t>(), start, rows, g.n,
        g.h, g.k, c, acc.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

inline void scatter(const GeometryTensors& g, const at::Tensor& infl, const at::Tensor& t, int64_t start,
                    at::Tensor& gx) {
  const int64_t rows = t.size(0), c = gx.size(1);
  if (rows * g.h * c == 0) return;
  AT_DISPATCH_FLOATING_TYPES(gx.scalar_type(), "kp_scatter_cuda", [&] {
    scatter_kernel<scalar_t><<<blocks_for(rows * g.h * c), kThreads, 0, stream()>>>(
        g.neighbors.data_ptr<int64_t>(), infl.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), start, rows, g.n, g.h,
        g.k, c, gx.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

inline void kernel_grad(const GeometryTensors& g, const at::Tensor& x, const at::Tensor& t, int64_t start,
                        at::Tensor& out) {
  const int64_t rows = t.size(0), c = x.size(1);
  if (rows * g.h * g.k == 0) return;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "kp_kernel_grad_cuda", [&] {
    kernel_grad_kernel<scalar_t><<<blocks_for(rows * g.h * g.k), kThreads, 0, stream()>>>(
        g.view<scalar_t>(), x.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), start, rows, c, out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Chunks of up to 2^26 elements per buffer (256 MiB in float32) keep the GPU busy.
inline Primitives primitives() { return Primitives{&influences, &gather, &scatter, &kernel_grad, int64_t(1) << 26}; }

}  // namespace fsdlite::kp::cuda
