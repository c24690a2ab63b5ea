// CUDA kernels of knn_aggregate.
//   forward:        one thread per (query, feature), loop over the k slots;
//   grad_weights:   one thread per (query, slot), loop over the features;
//   grad_features:  mean part one thread per (query, slot, feature), max part one thread per
//                   (query, feature) for its winning slot; atomicAdd into the source rows.
// half/bfloat16 inputs are computed in float and cast back.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "knn_aggregate.h"

namespace fsdlite::knn_aggregate_cuda {

constexpr int kThreads = 256;

__global__ void count_kernel(const int64_t* index, int64_t nq, int64_t k, int64_t ns, int64_t* counts) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= nq) return;
  int64_t c = 0;
  for (int64_t s = 0; s < k; ++s) c += index[i * k + s] != ns;
  counts[i] = c;
}

template <typename T>
__global__ void forward_kernel(const T* x, const int64_t* index, const T* w, int64_t nq, int64_t k, int64_t ns,
                               int64_t width, T* mean, T* max, int64_t* arg) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= nq * width) return;
  const int64_t i = t / width, f = t % width;
  T sum = 0, best = 0;
  int64_t count = 0, best_slot = k;
  for (int64_t s = 0; s < k; ++s) {
    const int64_t j = index[i * k + s];
    if (j == ns) continue;
    ++count;
    const T v = w[i * k + s] * x[j * width + f];
    sum += v;
    if (isnan(v)) continue;
    if (best_slot == k || v > best) {
      best = v;
      best_slot = s;
    }
  }
  if (count > 0) {
    mean[t] = sum / static_cast<T>(count);
    if (best_slot != k) max[t] = best;
  }
  arg[t] = best_slot;
}

template <typename T>
__global__ void grad_weights_kernel(const T* gmean, const T* gmax, const T* x, const int64_t* index,
                                    const int64_t* arg, const int64_t* counts, int64_t nq, int64_t k, int64_t ns,
                                    int64_t width, T* gw) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= nq * k) return;
  const int64_t i = p / k, s = p % k, j = index[p];
  if (j == ns) return;
  const T inv = T(1) / static_cast<T>(counts[i]);
  T g = 0;
  for (int64_t f = 0; f < width; ++f) {
    T coef = gmean[i * width + f] * inv;
    if (arg[i * width + f] == s) coef += gmax[i * width + f];
    g += coef * x[j * width + f];
  }
  gw[p] = g;
}

// mean part: every (query, slot, feature) adds weights / n_i * grad_mean to its source row
template <typename T>
__global__ void grad_features_mean_kernel(const T* gmean, const T* w, const int64_t* index, const int64_t* counts,
                                          int64_t nq, int64_t k, int64_t ns, int64_t width, T* gx) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= nq * k * width) return;
  const int64_t p = t / width, f = t % width, i = p / k, j = index[p];
  if (j == ns) return;
  atomicAdd(gx + j * width + f, gmean[i * width + f] / static_cast<T>(counts[i]) * w[p]);
}

// max part: every (query, feature) adds weights * grad_max to its winning row only
template <typename T>
__global__ void grad_features_max_kernel(const T* gmax, const int64_t* arg, const T* w, const int64_t* index,
                                         int64_t nq, int64_t k, int64_t width, T* gx) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= nq * width) return;
  const int64_t i = t / width, f = t % width, s = arg[t];
  if (s == k) return;
  atomicAdd(gx + index[i * k + s] * width + f, gmax[t] * w[i * k + s]);
}

inline dim3 grid_for(int64_t total) { return dim3(static_cast<unsigned>(ceil_div(total, kThreads))); }

// half/bfloat16 -> float (computed in float and cast back by the callers).
inline at::Tensor widen(const at::Tensor& t) {
  const bool low = t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
  return (low ? t.to(at::kFloat) : t).contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> knn_aggregate_cuda(const at::Tensor& features_,
                                                                  const at::Tensor& index_,
                                                                  const at::Tensor& weights_) {
  fsdlite::knn_aggregate::check_forward_args(features_, index_, weights_);
  c10::cuda::CUDAGuard guard(features_.device());
  const at::Tensor features = widen(features_), weights = widen(weights_), index = index_.contiguous();
  auto [mean, max, arg] = fsdlite::knn_aggregate::allocate_outputs(features, index);
  const int64_t nq = index.size(0), k = index.size(1), ns = features.size(0), width = features.size(1);
  if (nq > 0 && k > 0 && width > 0) {
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "knn_aggregate_cuda", [&] {
      forward_kernel<scalar_t><<<grid_for(nq * width), kThreads, 0, stream>>>(
          features.data_ptr<scalar_t>(), index.data_ptr<int64_t>(), weights.data_ptr<scalar_t>(), nq, k, ns, width,
          mean.data_ptr<scalar_t>(), max.data_ptr<scalar_t>(), arg.data_ptr<int64_t>());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const auto dtype = features_.scalar_type();
  return {mean.to(dtype), max.to(dtype), arg};
}

std::tuple<at::Tensor, at::Tensor> knn_aggregate_backward_cuda(const at::Tensor& grad_mean_,
                                                               const at::Tensor& grad_max_,
                                                               const at::Tensor& features_,
                                                               const at::Tensor& index_, const at::Tensor& weights_,
                                                               const at::Tensor& argmax_, bool need_features,
                                                               bool need_weights) {
  fsdlite::knn_aggregate::check_backward_args(grad_mean_, grad_max_, features_, index_, weights_, argmax_);
  c10::cuda::CUDAGuard guard(features_.device());
  const at::Tensor gmean = widen(grad_mean_), gmax = widen(grad_max_), features = widen(features_);
  const at::Tensor weights = widen(weights_), index = index_.contiguous(), arg = argmax_.contiguous();
  const int64_t nq = index.size(0), k = index.size(1), ns = features.size(0), width = features.size(1);
  at::Tensor gx = need_features ? at::zeros(features.sizes(), features.options()) : at::empty({0}, features.options());
  at::Tensor gw = need_weights ? at::zeros(weights.sizes(), weights.options()) : at::empty({0}, weights.options());
  if (nq > 0 && k > 0 && width > 0 && ns > 0) {
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    at::Tensor counts = at::empty({nq}, index.options());
    count_kernel<<<grid_for(nq), kThreads, 0, stream>>>(index.data_ptr<int64_t>(), nq, k, ns,
                                                        counts.data_ptr<int64_t>());
    AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "knn_aggregate_backward_cuda", [&] {
      if (need_weights)
        grad_weights_kernel<scalar_t><<<grid_for(nq * k), kThreads, 0, stream>>>(
            gmean.data_ptr<scalar_t>(), gmax.data_ptr<scalar_t>(), features.data_ptr<scalar_t>(),
            index.data_ptr<int64_t>(), arg.data_ptr<int64_t>(), counts.data_ptr<int64_t>(), nq, k, ns, width,
            gw.data_ptr<scalar_t>());
      if (need_features) {
        grad_features_mean_kernel<scalar_t><<<grid_for(nq * k * width), kThreads, 0, stream>>>(
            gmean.data_ptr<scalar_t>(), weights.data_ptr<scalar_t>(), index.data_ptr<int64_t>(),
            counts.data_ptr<int64_t>(), nq, k, ns, width, gx.data_ptr<scalar_t>());
        grad_features_max_kernel<scalar_t><<<grid_for(nq * width), kThreads, 0, stream>>>(
            gmax.data_ptr<scalar_t>(), arg.data_ptr<int64_t>(), weights.data_ptr<scalar_t>(),
            index.data_ptr<int64_t>(), nq, k, width, gx.data_ptr<scalar_t>());
      }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {gx.to(features_.scalar_type()), gw.to(weights_.scalar_type())};
}

}  // namespace fsdlite::knn_aggregate_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("knn_aggregate", &fsdlite::knn_aggregate_cuda::knn_aggregate_cuda);
  m.impl("knn_aggregate_backward", &fsdlite::knn_aggregate_cuda::knn_aggregate_backward_cuda);
}
