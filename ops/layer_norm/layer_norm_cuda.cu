// CUDA kernel of layer_norm_rows: one warp per row; lanes stride over the channels, the mean and then the
// variance are warp-shuffle sums (two passes over the row, which stays in L1/L2), accumulated in float for
// float32 and double for float64.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "layer_norm.h"

namespace fsdlite::layer_norm_cuda {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps per block

template <typename acc_t>
__device__ acc_t warp_sum(acc_t v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename scalar_t>
__global__ void layer_norm_rows_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ weight,
                                       const scalar_t* __restrict__ bias, int64_t n, int64_t c, double eps,
                                       scalar_t* __restrict__ out) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= n) return;  // whole warps exit together: the shuffles below see full warps
  const scalar_t* in = x + row * c;
  scalar_t* o = out + row * c;
  acc_t sum = 0;
  for (int64_t f = threadIdx.x; f < c; f += kWarp) sum += static_cast<acc_t>(in[f]);
  const acc_t mean = warp_sum(sum) / static_cast<acc_t>(c);
  acc_t sq = 0;
  for (int64_t f = threadIdx.x; f < c; f += kWarp) {
    const acc_t d = static_cast<acc_t>(in[f]) - mean;
    sq += d * d;
  }
  const acc_t rstd = acc_t(1) / sqrt(warp_sum(sq) / static_cast<acc_t>(c) + static_cast<acc_t>(eps));
  for (int64_t f = threadIdx.x; f < c; f += kWarp)
    o[f] = static_cast<scalar_t>((static_cast<acc_t>(in[f]) - mean) * rstd * static_cast<acc_t>(weight[f]) +
                                 static_cast<acc_t>(bias[f]));
}

at::Tensor layer_norm_rows_cuda(const at::Tensor& x_, const at::Tensor& weight_, const at::Tensor& bias_,
                                double eps) {
  fsdlite::layer_norm::check_args(x_, weight_, bias_, eps);
  const c10::cuda::CUDAGuard guard(x_.device());
  const at::Tensor x = x_.contiguous(), weight = weight_.contiguous(), bias = bias_.contiguous();
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return out;
  const dim3 block(kWarp, kRowsPerBlock);
  const int64_t blocks = fsdlite::ceil_div(n, kRowsPerBlock);
  TORCH_CHECK(blocks <= 2147483647, "layer_norm_rows: x has ", n, " rows, more than one launch can cover");
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_rows_cuda", [&] {
    layer_norm_rows_kernel<scalar_t><<<static_cast<unsigned>(blocks), block, 0, stream>>>(
        x.data_ptr<scalar_t>(), weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), n, c, eps,
        out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace fsdlite::layer_norm_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) { m.impl("layer_norm_rows", &fsdlite::layer_norm_cuda::layer_norm_rows_cuda); }
