// Argument checks shared by the neighbour ops (knn, radius_neighbors, grid_subsample): query/support point sets
// with optional sorted sample ids. Every check raises (TORCH_CHECK) before any kernel runs; the values (finite
// coordinates, sorted ids) are checked only here, not again by the Python wrappers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include "fsdlite_ops/common.h"

namespace fsdlite::neighbors {

inline void check_coordinates(const at::Tensor& points, const char* op, const char* arg) {
  TORCH_CHECK(points.scalar_type() == at::kFloat || points.scalar_type() == at::kDouble, op, ": ", arg,
              " must be float32 or float64, got ", points.scalar_type());
  check_dim(points, 2, op, arg);
  TORCH_CHECK(points.size(1) >= 1, op, ": ", arg, " must have at least one coordinate column, got shape ",
              points.sizes());
  check_finite(points, op, arg);
}

// Sample ids of the rows of `points`: (N,) int64, sorted non-decreasing.
inline void check_batch(const at::Tensor& batch, const at::Tensor& points, const char* op, const char* arg,
                        const char* points_arg) {
  check_dtype(batch, at::kLong, op, arg);
  check_dim(batch, 1, op, arg);
  check_size(batch, 0, points.size(0), op, arg, points_arg);
  check_same_device(batch, points, op, arg, points_arg);
  if (batch.numel() > 1) {
    const at::Tensor drops = batch.slice(0, 1).lt(batch.slice(0, 0, -1));
    if (!drops.any().item<bool>()) return;
    // the error path: name the first decrease
    const int64_t i = drops.nonzero().select(0, 0).select(0, 0).item<int64_t>();
    TORCH_CHECK(false, op, ": ", arg, " must be sorted non-decreasing (segment-based batching), got ", arg, "[", i,
                "]=", batch.select(0, i).item<int64_t>(), " > ", arg, "[", i + 1, "]=",
                batch.select(0, i + 1).item<int64_t>());
  }
}

inline void check_point_sets(const at::Tensor& query, const at::Tensor& support,
                             const c10::optional<at::Tensor>& query_batch,
                             const c10::optional<at::Tensor>& support_batch, const char* op) {
  check_coordinates(query, op, "query");
  check_coordinates(support, op, "support");
  TORCH_CHECK(query.scalar_type() == support.scalar_type(), op, ": support must have the dtype of query (",
              query.scalar_type(), "), got ", support.scalar_type());
  check_size(support, 1, query.size(1), op, "support", "query.size(1), the dimension D");
  check_same_device(query, support, op, "query", "support");
  TORCH_CHECK(query_batch.has_value() == support_batch.has_value(), op,
              ": query_batch and support_batch must be given together or both omitted");
  if (query_batch.has_value()) {
    check_batch(*query_batch, query, op, "query_batch", "query.size(0)");
    check_batch(*support_batch, support, op, "support_batch", "support.size(0)");
  }
}

}  // namespace fsdlite::neighbors
