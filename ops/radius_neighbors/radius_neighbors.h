// radius_neighbors: supports strictly closer than a radius, nearest first, truncated and padded
// with the shadow index Ns (KPConv convention), plus the untruncated counts.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace fsdlite::radius_neighbors {

// Validates the arguments (raising a RuntimeError naming the bad one).
void check_args(const at::Tensor& query, const at::Tensor& support, double radius, int64_t max_neighbors,
                const c10::optional<at::Tensor>& query_batch, const c10::optional<at::Tensor>& support_batch);

// (Nq, H) int64 index filled with Ns and (Nq,) int64 counts filled with 0.
std::tuple<at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& query, const at::Tensor& support,
                                                    int64_t max_neighbors);

}  // namespace fsdlite::radius_neighbors
