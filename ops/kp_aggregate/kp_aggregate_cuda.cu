// CUDA registration of kp_aggregate / neighbor_aggregate: the shared chunked drivers bound to the
// CUDA kernel-point primitives.
#include <torch/library.h>

#include "../kpconv/kp_primitives_cuda.cuh"
#include "kp_aggregate.h"

namespace fsdlite::kp_aggregate_cuda {
namespace kpa = fsdlite::kp_aggregate;

at::Tensor kp_aggregate_cuda(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                             const at::Tensor& features, const at::Tensor& kernel_points,
                             const c10::optional<at::Tensor>& depthwise, const c10::optional<at::Tensor>& gen_weights,
                             double sigma, c10::string_view influence, c10::string_view aggregation) {
  c10::cuda::CUDAGuard guard(features.device());
  return kpa::forward_chunked(kpa::check_args(q_pts, s_pts, neighbors, features, kernel_points, depthwise,
                                              gen_weights, sigma, influence, aggregation),
                              fsdlite::kp::cuda::primitives());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> kp_aggregate_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const c10::optional<at::Tensor>& depthwise,
    const c10::optional<at::Tensor>& gen_weights, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 3> output_mask) {
  c10::cuda::CUDAGuard guard(features.device());
  const kpa::Args a = kpa::check_args(q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights,
                                      sigma, influence, aggregation);
  kpa::check_grad_out(grad_out, a);
  return kpa::backward_chunked(grad_out, a, output_mask, fsdlite::kp::cuda::primitives());
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
  m.impl("kp_aggregate", &fsdlite::kp_aggregate_cuda::kp_aggregate_cuda);
  m.impl("kp_aggregate_backward", &fsdlite::kp_aggregate_cuda::kp_aggregate_backward_cuda);
  m.impl("neighbor_aggregate", &fsdlite::kp_aggregate_cuda::neighbor_aggregate_cuda);
  m.impl("neighbor_aggregate_backward", &fsdlite::kp_aggregate_cuda::neighbor_aggregate_backward_cuda);
}
