// kp_aggregate: fused depthwise / involution aggregation over kernel-point neighbourhoods.
//
// kernel-point mode (KPConvD, KPConvX, KPInv):
//   y[q, c] = sum_k D[k, c] * A[q, k, c / G] * sum_h infl[q, h, k] * x[nb[q, h], c]
//   D (K, C) depthwise weights (optional), A (M, K, W) generated weights (optional), G = C / W.
// neighbour mode (point involution by neighbour slot):
//   y[q, c] = sum_h A[q, h, c / G] * x[nb[q, h], c],   A (M, H, W).
// Both run over chunks of queries and recompute in backward; nothing of size (M, H, C) or
// (M, K, C) is kept.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <array>
#include <tuple>

#include "../kpconv/kp_primitives.h"

namespace fsdlite::kp_aggregate {

at::Tensor kp_aggregate_op(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                           const at::Tensor& features, const at::Tensor& kernel_points,
                           const c10::optional<at::Tensor>& depthwise, const c10::optional<at::Tensor>& gen_weights,
                           double sigma, c10::string_view influence, c10::string_view aggregation,
                           const kp::Primitives& p);

// Gradients (features, depthwise, gen_weights); an unrequested or absent one is an empty (0,) tensor.
std::tuple<at::Tensor, at::Tensor, at::Tensor> kp_aggregate_backward_op(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const c10::optional<at::Tensor>& depthwise,
    const c10::optional<at::Tensor>& gen_weights, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 3> output_mask, const kp::Primitives& p);

at::Tensor neighbor_aggregate_op(const at::Tensor& neighbors, const at::Tensor& features, const at::Tensor& weights,
                                 int64_t chunk_elements);

// Gradients (features, weights); an unrequested one is an empty (0,) tensor.
std::tuple<at::Tensor, at::Tensor> neighbor_aggregate_backward_op(const at::Tensor& grad_out,
                                                                  const at::Tensor& neighbors,
                                                                  const at::Tensor& features,
                                                                  const at::Tensor& weights,
                                                                  std::array<bool, 2> output_mask,
                                                                  int64_t chunk_elements);

}  // namespace fsdlite::kp_aggregate
