// CUDA registration of kpconv: the shared chunked drivers bound to the CUDA primitives.
#include <torch/library.h>

#include "kp_primitives_cuda.cuh"
#include "kpconv.h"

namespace fsdlite::kpconv_cuda {

at::Tensor kpconv_cuda(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                       const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
                       const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
                       c10::string_view aggregation) {
  c10::cuda::CUDAGuard guard(features.device());
  return fsdlite::kpconv::kpconv_op(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma,
                                    influence, aggregation, fsdlite::kp::cuda::primitives());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> kpconv_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
    const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 4> output_mask) {
  c10::cuda::CUDAGuard guard(features.device());
  return fsdlite::kpconv::kpconv_backward_op(grad_out, q_pts, s_pts, neighbors, features, kernel_points, weights,
                                             modulations, sigma, influence, aggregation, output_mask,
                                             fsdlite::kp::cuda::primitives());
}

}  // namespace fsdlite::kpconv_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("kpconv", &fsdlite::kpconv_cuda::kpconv_cuda);
  m.impl("kpconv_backward", &fsdlite::kpconv_cuda::kpconv_backward_cuda);
}
