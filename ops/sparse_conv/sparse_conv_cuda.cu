// CUDA kernel of sparse_conv: one thread per (pair, output channel); the pair's offset is found by binary search
// in offset_starts, the Cin products are summed in a register and added to the output with atomicAdd (so the
// summation order, and the last bits of the result, may vary from run to run). The weight gradient has one thread
// per (offset, input channel, output channel) summing that offset's pairs in order (deterministic).
#include <ATen/Dispatch.h>
#include <ATen/ATen.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "sparse_conv.h"

namespace fsdlite::sparse_conv_cuda {

constexpr int kThreads = 256;

template <typename T>
__global__ void forward_kernel(const T* x, const T* w, const int64_t* pairs, const int64_t* starts, int64_t k,
                               int64_t p, int64_t cin, int64_t cout, T* out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= p * cout) return;
  const int64_t j = t / cout, c = t % cout;
  int64_t lo = 0, hi = k;  // offset kk with starts[kk] <= j < starts[kk + 1]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (starts[mid] <= j) lo = mid; else hi = mid;
  }
  const T* xi = x + pairs[j] * cin;
  const T* wk = w + lo * cin * cout + c;
  T acc = 0;
  for (int64_t ci = 0; ci < cin; ++ci) acc += xi[ci] * wk[ci * cout];
  atomicAdd(out + pairs[p + j] * cout + c, acc);
}

at::Tensor sparse_conv_cuda(const at::Tensor& features_, const at::Tensor& weight_, const at::Tensor& pairs_,
                            const at::Tensor& offset_starts_, int64_t num_out) {
  const int64_t k = sparse_conv::check_args(features_, weight_, pairs_, offset_starts_, num_out);
  const c10::cuda::CUDAGuard guard(features_.device());
  const at::Tensor features = features_.contiguous(), weight = weight_.contiguous(), pairs = pairs_.contiguous();
  const at::Tensor starts = offset_starts_.contiguous();
  const int64_t cin = weight.size(1), cout = weight.size(2), p = pairs.size(1);
  at::Tensor out = at::zeros({num_out, cout}, features.options());
  if (p == 0 || cout == 0) return out;
  const dim3 blocks(static_cast<unsigned>(ceil_div(p * cout, kThreads)));
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "sparse_conv_cuda", [&] {
    forward_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        features.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), pairs.data_ptr<int64_t>(),
        starts.data_ptr<int64_t>(), k, p, cin, cout, out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

template <typename T>
__global__ void weight_grad_kernel(const T* x, const T* g, const int64_t* pairs, const int64_t* starts, int64_t k,
                                   int64_t p, int64_t cin, int64_t cout, T* gw) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= k * cin * cout) return;
  const int64_t kk = t / (cin * cout), ci = (t / cout) % cin, c = t % cout;
  T acc = 0;
  for (int64_t j = starts[kk]; j < starts[kk + 1]; ++j) acc += x[pairs[j] * cin + ci] * g[pairs[p + j] * cout + c];
  gw[t] = acc;
}

at::Tensor sparse_conv_weight_grad_cuda(const at::Tensor& features_, const at::Tensor& grad_out_,
                                        const at::Tensor& pairs_, const at::Tensor& offset_starts_) {
  const int64_t k = sparse_conv::check_weight_grad_args(features_, grad_out_, pairs_, offset_starts_);
  const c10::cuda::CUDAGuard guard(features_.device());
  const at::Tensor features = features_.contiguous(), grad_out = grad_out_.contiguous(), pairs = pairs_.contiguous();
  const at::Tensor starts = offset_starts_.contiguous();
  const int64_t cin = features.size(1), cout = grad_out.size(1), p = pairs.size(1);
  at::Tensor grad_weight = at::zeros({k, cin, cout}, features.options());
  if (p == 0 || grad_weight.numel() == 0) return grad_weight;
  const dim3 blocks(static_cast<unsigned>(ceil_div(grad_weight.numel(), kThreads)));
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "sparse_conv_weight_grad_cuda", [&] {
    weight_grad_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        features.data_ptr<scalar_t>(), grad_out.data_ptr<scalar_t>(), pairs.data_ptr<int64_t>(),
        starts.data_ptr<int64_t>(), k, p, cin, cout, grad_weight.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return grad_weight;
}

// The pairs of a neighbour map with ATen ops: nonzero of the (K, Vout) transposed mask lists them offset by offset,
// rows ascending (the CPU kernel's order).
std::tuple<at::Tensor, at::Tensor> sparse_conv_pairs_cuda(const at::Tensor& nbr, int64_t num_in) {
  sparse_conv::check_pairs_args(nbr, num_in);
  const c10::cuda::CUDAGuard guard(nbr.device());
  const int64_t k = nbr.size(1);
  const at::Tensor where = nbr.lt(num_in).t().nonzero();  // (P, 2) [offset, row]
  const at::Tensor offsets = where.select(1, 0), rows = where.select(1, 1);
  const at::Tensor ins = nbr.index({rows, offsets});
  at::Tensor starts = at::zeros({k + 1}, nbr.options());
  if (k > 0) starts.narrow(0, 1, k).copy_(at::bincount(offsets, {}, k).cumsum(0));
  return {at::stack({ins, rows}), starts};
}

}  // namespace fsdlite::sparse_conv_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("sparse_conv", &fsdlite::sparse_conv_cuda::sparse_conv_cuda);
  m.impl("sparse_conv_pairs", &fsdlite::sparse_conv_cuda::sparse_conv_pairs_cuda);
  m.impl("sparse_conv_weight_grad", &fsdlite::sparse_conv_cuda::sparse_conv_weight_grad_cuda);
}
