// CUDA registration of kp_aggregate / neighbor_aggregate: the shared chunked drivers bound to the
// CUDA kernel-point primitives.
#include <torch/library.h>

#include "../kpconv/kp_primitives_cuda.cuh"
#include "kp_aggregate.h"

namespace fsdlite::kp_aggregate_cuda {
namespace kpa = fsdlite::kp_aggregate;

// The chunked drivers on the CUDA primitives, on the features' device (arguments already validated).
at::Tensor forward_cuda(const kpa::Args& a) {
  c10::cuda::CUDAGuard guard(a.x.device());
  return kpa::forward_chunked(a, fsdlite::kp::cuda::primitives());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad_out, const kpa::Args& a,
                                                             std::array<bool, 3> mask) {
  c10::cuda::CUDAGuard guard(a.x.device());
  return kpa::backward_chunked(grad_out, a, mask, fsdlite::kp::cuda::primitives());
}

at::Tensor neighbor_aggregate_cuda(const at::Tensor& neighbors, const at::Tensor& features,
                                   const at::Tensor& weights) {
  c10::cuda::CUDAGuard guard(features.device());
  return kpa::neighbor_aggregate_op(neighbors, features, weights, fsdlite::kp::cuda::primitives().chunk_elements);
}

std::tuple<at::Tensor, at::Tensor> neighbor_aggregate_backward_cuda(const at::Tensor& grad_out,
                                                                    const at::Tensor& neighbors,
                                                                    const at::Tensor& features,
                                                                    const at::Tensor& weights,
                                                                    std::array<bool, 2> output_mask) {
  c10::cuda::CUDAGuard guard(features.device());
  return kpa::neighbor_aggregate_backward_op(grad_out, neighbors, features, weights, output_mask,
                                             fsdlite::kp::cuda::primitives().chunk_elements);
}

}  // namespace fsdlite::kp_aggregate_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  namespace kpa = fsdlite::kp_aggregate;
  m.impl("kp_aggregate", &kpa::forward_op<fsdlite::kp_aggregate_cuda::forward_cuda>);
  m.impl("kp_aggregate_backward", &kpa::backward_op<fsdlite::kp_aggregate_cuda::backward_cuda>);
  m.impl("neighbor_aggregate", &fsdlite::kp_aggregate_cuda::neighbor_aggregate_cuda);
  m.impl("neighbor_aggregate_backward", &fsdlite::kp_aggregate_cuda::neighbor_aggregate_backward_cuda);
}
