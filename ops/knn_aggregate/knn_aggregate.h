// knn_aggregate: weighted mean and max of neighbour feature rows, fused (no (N, k, F) tensor).
//
//   features (Ns, F), index (Nq, k) int64 in [0, Ns] (Ns = padding slot), weights (Nq, k):
//   v[i, s, f] = weights[i, s] * features[index[i, s], f] over the valid slots s (index != Ns);
//   mean[i, f] = sum_s v / (number of valid slots), 0 when there is none;
//   max[i, f]  = max_s v (NaN never wins, ties -> first slot), 0 when no slot qualifies;
//   argmax[i, f] = the winning slot in [0, k), or k when none.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace fsdlite::knn_aggregate {

// Validates the forward arguments before any kernel runs (RuntimeError naming the bad argument).
void check_forward_args(const at::Tensor& features, const at::Tensor& index, const at::Tensor& weights);

// Validates the backward arguments (shapes must match the forward call that produced argmax).
void check_backward_args(const at::Tensor& grad_mean, const at::Tensor& grad_max, const at::Tensor& features,
                         const at::Tensor& index, const at::Tensor& weights, const at::Tensor& argmax);

// Allocates (mean, max, argmax): zero-filled values and argmax filled with k.
std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& features,
                                                                const at::Tensor& index);

}  // namespace fsdlite::knn_aggregate
