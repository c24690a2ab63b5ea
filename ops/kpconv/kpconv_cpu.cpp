// CPU registration of kpconv: the shared chunked drivers bound to the CPU primitives.
#include <torch/library.h>

#include "kp_primitives_cpu.h"
#include "kpconv.h"

namespace fsdlite::kpconv {
namespace {

at::Tensor kpconv_cpu(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                      const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
                      const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
                      c10::string_view aggregation) {
  return kpconv_op(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma, influence,
                   aggregation, kp::cpu::primitives());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> kpconv_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
    const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 4> output_mask) {
  return kpconv_backward_op(grad_out, q_pts, s_pts, neighbors, features, kernel_points, weights, modulations,
                            sigma, influence, aggregation, output_mask, kp::cpu::primitives());
}

}  // namespace
}  // namespace fsdlite::kpconv

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("kpconv", &fsdlite::kpconv::kpconv_cpu);
  m.impl("kpconv_backward", &fsdlite::kpconv::kpconv_backward_cpu);
}
