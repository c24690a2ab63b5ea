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

// Validated, contiguous arguments of kp_aggregate.
struct Args {
  kp::GeometryTensors g;
  at::Tensor x, dw, gen;  // x (N, C); dw (K, C) or undefined; gen (M, K, W) or undefined
  int64_t c, w;
};

Args check_args(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                const at::Tensor& features, const at::Tensor& kernel_points, const c10::optional<at::Tensor>& depthwise,
                const c10::optional<at::Tensor>& gen_weights, double sigma, c10::string_view influence,
                c10::string_view aggregation);

// Checks grad_out (M, C) of a kp_aggregate backward call.
void check_grad_out(const at::Tensor& grad_out, const Args& a);

// Zero-filled gradients (features, depthwise, gen_weights); unrequested or absent ones are (0,).
std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_grads(const Args& a, std::array<bool, 3> mask);

// Device-generic drivers: chunked correlation through the kernel-point primitives, then ATen
// elementwise products on (rows, K, C) chunks (used by the CUDA build).
at::Tensor forward_chunked(const Args& a, const kp::Primitives& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_chunked(const at::Tensor& grad_out, const Args& a,
                                                                std::array<bool, 3> mask, const kp::Primitives& p);

// Kernel drivers behind the kp_aggregate schemas: forward (M, C) from validated arguments, and the
// gradients (features, depthwise, gen_weights) of grad_out (M, C) under an output mask.
using ForwardDriver = at::Tensor (*)(const Args& a);
using BackwardDriver = std::tuple<at::Tensor, at::Tensor, at::Tensor> (*)(const at::Tensor& grad_out, const Args& a,
                                                                          std::array<bool, 3> mask);

// The kp_aggregate schema bound to a forward driver: validates the arguments, then runs `Driver`.
template <ForwardDriver Driver>
at::Tensor forward_op(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                      const at::Tensor& features, const at::Tensor& kernel_points,
                      const c10::optional<at::Tensor>& depthwise, const c10::optional<at::Tensor>& gen_weights,
                      double sigma, c10::string_view influence, c10::string_view aggregation) {
  const Args a = check_args(q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights, sigma,
                            influence, aggregation);
  kp::check_positions_finite(q_pts, s_pts, kernel_points, "kp_aggregate");
  return Driver(a);
}

// The kp_aggregate_backward schema bound to a backward driver: validates the arguments and grad_out,
// then runs `Driver`.
template <BackwardDriver Driver>
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_op(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const c10::optional<at::Tensor>& depthwise,
    const c10::optional<at::Tensor>& gen_weights, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 3> output_mask) {
  const Args a = check_args(q_pts, s_pts, neighbors, features, kernel_points, depthwise, gen_weights, sigma,
                            influence, aggregation);
  check_grad_out(grad_out, a);
  return Driver(grad_out, a, output_mask);
}

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
