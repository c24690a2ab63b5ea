// Schema and shared argument checks of radius_neighbors.
#include "radius_neighbors.h"

#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>

#include "../knn/neighbor_args.h"

namespace fsdlite::radius_neighbors {

void check_args(const at::Tensor& query, const at::Tensor& support, double radius, int64_t max_neighbors,
                const c10::optional<at::Tensor>& query_batch, const c10::optional<at::Tensor>& support_batch) {
  constexpr const char* op = "radius_neighbors";
  TORCH_CHECK(std::isfinite(radius) && radius > 0, op, ": radius must be finite and > 0, got ", radius);
  TORCH_CHECK(max_neighbors >= 1, op, ": max_neighbors must be >= 1, got ", max_neighbors);
  neighbors::check_point_sets(query, support, query_batch, support_batch, op);
  check_output_rows(max_neighbors, query.size(0), op, "max_neighbors", "the queries, query.size(0)");
}

std::tuple<at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& query, const at::Tensor& support,
                                                    int64_t max_neighbors) {
  const auto options = query.options().dtype(at::kLong);
  return {at::full({query.size(0), max_neighbors}, support.size(0), options), at::zeros({query.size(0)}, options)};
}

}  // namespace fsdlite::radius_neighbors

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("radius_neighbors(Tensor query, Tensor support, float radius, int max_neighbors, "
        "Tensor? query_batch=None, Tensor? support_batch=None) -> (Tensor index, Tensor counts)");
}
