// knn: the k nearest supports of every query within its own sample.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace fsdlite::knn {

// Validates the arguments (raising a RuntimeError naming the bad one).
void check_args(const at::Tensor& query, const at::Tensor& support, int64_t k,
                const c10::optional<at::Tensor>& query_batch, const c10::optional<at::Tensor>& support_batch);

// (Nq, k) int64 index filled with Ns and (Nq, k) squared distances filled with +inf.
std::tuple<at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& query, const at::Tensor& support, int64_t k);

}  // namespace fsdlite::knn
