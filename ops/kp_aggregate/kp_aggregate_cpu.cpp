// CPU registration of kp_aggregate / neighbor_aggregate: the shared chunked drivers bound to the
// CPU kernel-point primitives.
#include <torch/library.h>

#include "../kpconv/kp_primitives_cpu.h"
#include "kp_aggregate.h"

namespace fsdlite::kp_aggregate {
namespace {

at::Tensor kp_aggregate_cpu(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                            const at::Tensor& features, const at::Tensor& kernel_points,
                            const c10::optional<at::Tensor>& depthwise, const c10::optional<at::Tensor>& gen_weights,
                            double sigma, c10::string_view influence, c10::string_view aggregation) {
  return kp_aggregate_op(q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights, sigma, influence,
                         aggregation, kp::cpu::primitives());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> kp_aggregate_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const c10::optional<at::Tensor>& depthwise,
    const c10::optional<at::Tensor>& gen_weights, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 3> output_mask) {
  return kp_aggregate_backward_op(grad_out, q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights,
                                  sigma, influence, aggregation, output_mask, kp::cpu::primitives());
}

at::Tensor neighbor_aggregate_cpu(const at::Tensor& neighbors, const at::Tensor& features, const at::Tensor& weights) {
  return neighbor_aggregate_op(neighbors, features, weights, kp::cpu::primitives().chunk_elements);
}

std::tuple<at::Tensor, at::Tensor> neighbor_aggregate_backward_cpu(const at::Tensor& grad_out,
                                                                   const at::Tensor& neighbors,
                                                                   const at::Tensor& features,
                                                                   const at::Tensor& weights,
                                                                   std::array<bool, 2> output_mask) {
  return neighbor_aggregate_backward_op(grad_out, neighbors, features, weights, output_mask,
                                        kp::cpu::primitives().chunk_elements);
}

}  // namespace
}  // namespace fsdlite::kp_aggregate

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("kp_aggregate", &fsdlite::kp_aggregate::kp_aggregate_cpu);
  m.impl("kp_aggregate_backward", &fsdlite::kp_aggregate::kp_aggregate_backward_cpu);
  m.impl("neighbor_aggregate", &fsdlite::kp_aggregate::neighbor_aggregate_cpu);
  m.impl("neighbor_aggregate_backward", &fsdlite::kp_aggregate::neighbor_aggregate_backward_cpu);
}
