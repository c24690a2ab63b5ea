// Schemas and shared argument checks of knn_aggregate (see knn_aggregate.h for the semantics).
#include "knn_aggregate.h"

#include <ATen/ops/any.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"

namespace fsdlite::knn_aggregate {

void check_forward_args(const at::Tensor& features, const at::Tensor& index, const at::Tensor& weights) {
  constexpr const char* op = "knn_aggregate";
  check_floating(features, op, "features");
  check_dim(features, 2, op, "features");
  check_dtype(index, at::kLong, op, "index");
  check_dim(index, 2, op, "index");
  check_dtype(weights, features.scalar_type(), op, "weights");
  check_dim(weights, 2, op, "weights");
  check_size(weights, 0, index.size(0), op, "weights", "index.size(0)");
  check_size(weights, 1, index.size(1), op, "weights", "index.size(1)");
  check_same_device(features, index, op, "features", "index");
  check_same_device(features, weights, op, "features", "weights");
  // Ns itself is the padding slot, so the valid range is [0, Ns].
  check_index_range(index, 0, features.size(0) + 1, op, "index");
}

void check_backward_args(const at::Tensor& grad_mean, const at::Tensor& grad_max, const at::Tensor& features,
                         const at::Tensor& index, const at::Tensor& weights, const at::Tensor& argmax) {
  constexpr const char* op = "knn_aggregate_backward";
  check_forward_args(features, index, weights);
  for (const auto* g : {&grad_mean, &grad_max}) {
    const char* name = g == &grad_mean ? "grad_mean" : "grad_max";
    check_dtype(*g, features.scalar_type(), op, name);
    check_dim(*g, 2, op, name);
    check_size(*g, 0, index.size(0), op, name, "index.size(0)");
    check_size(*g, 1, features.size(1), op, name, "features.size(1)");
    check_same_device(*g, features, op, name, "features");
  }
  check_dtype(argmax, at::kLong, op, "argmax");
  check_dim(argmax, 2, op, "argmax");
  check_size(argmax, 0, index.size(0), op, "argmax", "index.size(0)");
  check_size(argmax, 1, features.size(1), op, "argmax", "features.size(1)");
  check_same_device(argmax, features, op, "argmax", "features");
  check_index_range(argmax, 0, index.size(1) + 1, op, "argmax");
  // The kernels read features[index[i, argmax[i, f]]] and write its gradient: a winning slot must be a valid
  // neighbour (index != Ns), or the access lands on the row past the end of features.
  const int64_t k = index.size(1), ns = features.size(0);
  if (k == 0 || argmax.numel() == 0) return;
  const at::Tensor won = argmax.lt(k);
  const at::Tensor padded = at::logical_and(won, index.gather(1, argmax.clamp_max(k - 1)).eq(ns));
  if (padded.any().item<bool>()) {
    const at::Tensor where = padded.nonzero().select(0, 0).cpu();
    const int64_t i = where[0].item<int64_t>(), f = where[1].item<int64_t>();
    const int64_t s = argmax[i][f].item<int64_t>();
    TORCH_CHECK(false, op, ": argmax[", i, ", ", f, "] = ", s, " points at a padded slot (index[", i, ", ", s,
                "] = ", ns, " = features.size(0)); expected the slot of a valid neighbour, or k (", k,
                ") for none");
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& features,
                                                                const at::Tensor& index) {
  const int64_t nq = index.size(0), width = features.size(1);
  at::Tensor mean = at::zeros({nq, width}, features.options());
  at::Tensor max = at::zeros({nq, width}, features.options());
  at::Tensor argmax = at::full({nq, width}, index.size(1), index.options());
  return {mean, max, argmax};
}

}  // namespace fsdlite::knn_aggregate

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("knn_aggregate(Tensor features, Tensor index, Tensor weights) -> (Tensor, Tensor, Tensor)");
  m.def(
      "knn_aggregate_backward(Tensor grad_mean, Tensor grad_max, Tensor features, Tensor index, Tensor weights, "
      "Tensor argmax, bool need_features, bool need_weights) -> (Tensor, Tensor)");
}
