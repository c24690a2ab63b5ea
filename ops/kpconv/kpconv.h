// kpconv: fused kernel-point convolution (forward and backward drivers shared by CPU and CUDA).
//   y[q] = sum_k ( m[q, k] * sum_h infl[q, h, k] * x[nb[q, h]] ) @ W[k]
// Queries are processed in chunks; the backward recomputes the chunk correlations instead of
// saving them, so neither (M, H, C1) nor (M, K, C1) is ever held for the whole problem.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <array>
#include <tuple>

#include "kp_primitives.h"

namespace fsdlite::kpconv {

// Full ops (argument checks + drivers); each device file binds them to its primitives.
at::Tensor kpconv_op(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                     const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
                     const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
                     c10::string_view aggregation, const kp::Primitives& p);

// Gradients (features, kernel_points, weights, modulations); an output whose mask entry is false
// (or modulations when absent) is an empty (0,) tensor.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> kpconv_backward_op(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
    const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 4> output_mask, const kp::Primitives& p);

}  // namespace fsdlite::kpconv
