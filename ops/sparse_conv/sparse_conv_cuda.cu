// CUDA kernels of sparse_conv (see sparse_conv.h), deterministic: the same bits on every run, as on the CPU.
//
// Forward: one launch per kernel offset, in offset order, one thread per (pair, output channel) adding its Cin
// products to the output row. Within an offset every output row appears once (checked), so no two threads of a
// launch write one element and no atomics are needed; offsets are summed in order.
//
// Weight gradient: grad_weight[k] = sum over the pairs of offset k of outer(features[i], grad_out[o]). Stage 1
// splits each offset's pairs into chunks (a chunk never spans two offsets) and sums every chunk's products per
// (input channel, output channel) into its own partial; stage 2 adds each offset's partials in chunk order.
// The input gradient is the transposed convolution (the forward kernel on swapped pairs, sparse_conv/__init__.py).
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/bincount.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "fsdlite_ops/common.h"
#include "sparse_conv.h"

namespace fsdlite::sparse_conv_cuda {

constexpr int kThreads = 256;
constexpr int64_t kMinChunk = 256;              // pairs per weight-gradient chunk at least
constexpr int64_t kMaxPartials = int64_t(1) << 25;  // elements of the stage-1 buffer at most (128 MiB in float32)

// Pairs [0, n) of one offset (in: input rows, orow: output rows): out[orow[j]][c] += x[in[j]] . w[:, c].
template <typename T>
__global__ void offset_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                      const int64_t* __restrict__ in, const int64_t* __restrict__ orow, int64_t n,
                                      int64_t cin, int64_t cout, T* __restrict__ out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n * cout) return;
  const int64_t j = t / cout, c = t % cout;
  const T* xi = x + in[j] * cin;
  const T* wc = w + c;
  T acc = 0;
  for (int64_t ci = 0; ci < cin; ++ci) acc += xi[ci] * wc[ci * cout];
  out[orow[j] * cout + c] += acc;
}

at::Tensor sparse_conv_cuda(const at::Tensor& features_, const at::Tensor& weight_, const at::Tensor& pairs_,
                            const at::Tensor& offset_starts_, int64_t num_out) {
  const int64_t k = sparse_conv::check_args(features_, weight_, pairs_, offset_starts_, num_out);
  const c10::cuda::CUDAGuard guard(features_.device());
  const at::Tensor features = features_.contiguous(), weight = weight_.contiguous(), pairs = pairs_.contiguous();
  const at::Tensor starts = offset_starts_.cpu().contiguous();  // (check_args read them on the host already)
  const int64_t cin = weight.size(1), cout = weight.size(2), p = pairs.size(1);
  at::Tensor out = at::zeros({num_out, cout}, features.options());
  if (p == 0 || cout == 0) return out;
  const int64_t* s = starts.data_ptr<int64_t>();
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "sparse_conv_cuda", [&] {
    const scalar_t* x = features.data_ptr<scalar_t>();
    const scalar_t* w = weight.data_ptr<scalar_t>();
    const int64_t* in = pairs.data_ptr<int64_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t n = s[kk + 1] - s[kk];
      if (n == 0) continue;
      const dim3 blocks(static_cast<unsigned>(ceil_div(n * cout, kThreads)));
      offset_forward_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
          x, w + kk * cin * cout, in + s[kk], in + p + s[kk], n, cin, cout, o);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return out;
}

// Stage 1: block b sums the products of its chunk (pairs [ranges[b], ranges[num_chunks + b]), all of one offset) for
// every (ci, c) into partial[b] (Cin x Cout); the block's threads stride over the Cin * Cout entries.
template <typename T>
__global__ void weight_grad_chunks_kernel(const T* __restrict__ x, const T* __restrict__ g,
                                          const int64_t* __restrict__ in, const int64_t* __restrict__ orow,
                                          const int64_t* __restrict__ ranges, int64_t num_chunks, int64_t cin,
                                          int64_t cout, T* __restrict__ partial) {
  const int64_t b = blockIdx.x, lo = ranges[b], hi = ranges[num_chunks + b];
  for (int64_t e = threadIdx.x; e < cin * cout; e += blockDim.x) {
    const int64_t ci = e / cout, c = e % cout;
    T acc = 0;
    for (int64_t j = lo; j < hi; ++j) acc += x[in[j] * cin + ci] * g[orow[j] * cout + c];
    partial[b * cin * cout + e] = acc;
  }
}

// Stage 2: grad_weight[k][e] = sum of partial[b][e] over the chunks b of offset k, in chunk order.
template <typename T>
__global__ void weight_grad_reduce_kernel(const T* __restrict__ partial, const int64_t* __restrict__ offset_chunks,
                                          int64_t k, int64_t per_offset, T* __restrict__ gw) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= k * per_offset) return;
  const int64_t kk = t / per_offset, e = t % per_offset;
  T acc = 0;
  for (int64_t b = offset_chunks[kk]; b < offset_chunks[kk + 1]; ++b) acc += partial[b * per_offset + e];
  gw[t] = acc;
}

at::Tensor sparse_conv_weight_grad_cuda(const at::Tensor& features_, const at::Tensor& grad_out_,
                                        const at::Tensor& pairs_, const at::Tensor& offset_starts_) {
  const int64_t k = sparse_conv::check_weight_grad_args(features_, grad_out_, pairs_, offset_starts_);
  const c10::cuda::CUDAGuard guard(features_.device());
  const at::Tensor features = features_.contiguous(), grad_out = grad_out_.contiguous(), pairs = pairs_.contiguous();
  const at::Tensor starts = offset_starts_.cpu().contiguous();
  const int64_t cin = features.size(1), cout = grad_out.size(1), p = pairs.size(1);
  at::Tensor grad_weight = at::zeros({k, cin, cout}, features.options());
  if (p == 0 || grad_weight.numel() == 0) return grad_weight;
  // Chunks of each offset's pairs: at least kMinChunk pairs, few enough that the partials fit kMaxPartials.
  const int64_t per_offset = cin * cout;
  const int64_t chunk = std::max(kMinChunk, ceil_div(p * per_offset, kMaxPartials));
  const int64_t* s = starts.data_ptr<int64_t>();
  std::vector<int64_t> begins, ends, offset_chunks(1, 0);
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = s[kk]; j < s[kk + 1]; j += chunk) {
      begins.push_back(j);
      ends.push_back(std::min(j + chunk, s[kk + 1]));
    }
    offset_chunks.push_back(static_cast<int64_t>(begins.size()));
  }
  const int64_t num_chunks = static_cast<int64_t>(begins.size());
  begins.insert(begins.end(), ends.begin(), ends.end());  // ranges: the begins, then the ends
  const at::Tensor ranges =
      at::from_blob(begins.data(), {2 * num_chunks}, at::kLong).to(pairs.device(), /*non_blocking=*/false);
  const at::Tensor chunks_of_offset =
      at::from_blob(offset_chunks.data(), {k + 1}, at::kLong).to(pairs.device(), /*non_blocking=*/false);
  at::Tensor partial = at::empty({num_chunks, cin, cout}, features.options());
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "sparse_conv_weight_grad_cuda", [&] {
    weight_grad_chunks_kernel<scalar_t><<<static_cast<unsigned>(num_chunks), kThreads, 0, stream>>>(
        features.data_ptr<scalar_t>(), grad_out.data_ptr<scalar_t>(), pairs.data_ptr<int64_t>(),
        pairs.data_ptr<int64_t>() + p, ranges.data_ptr<int64_t>(), num_chunks, cin, cout,
        partial.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const dim3 blocks(static_cast<unsigned>(ceil_div(k * per_offset, kThreads)));
    weight_grad_reduce_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
        partial.data_ptr<scalar_t>(), chunks_of_offset.data_ptr<int64_t>(), k, per_offset,
        grad_weight.data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
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
