// CPU kernel of radius_neighbors: the KD-trees of knn with a fixed radius bound; every neighbour
// is counted, the nearest max_neighbors are kept (sorted by distance, ties -> lower index).
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "fsdlite_ops/neighbor_inputs.h"
#include "../knn/kdtree.h"
#include "radius_neighbors.h"

namespace fsdlite::radius_neighbors {
namespace {

std::tuple<at::Tensor, at::Tensor> radius_neighbors_cpu(const at::Tensor& query_, const at::Tensor& support_,
                                                        double radius, int64_t max_neighbors,
                                                        const c10::optional<at::Tensor>& query_batch_,
                                                        const c10::optional<at::Tensor>& support_batch_) {
  check_args(query_, support_, radius, max_neighbors, query_batch_, support_batch_);
  auto [index, counts] = allocate_outputs(query_, support_, max_neighbors);
  const int64_t nq = query_.size(0), ns = support_.size(0), dim = query_.size(1);
  if (nq == 0 || ns == 0) return {index, counts};
  const neighbors::NeighborInputs in(query_, support_, query_batch_, support_batch_);
  const at::Tensor &query = in.query, &support = in.support;
  const int64_t *qb = in.qb, *sb = in.sb;
  int64_t* out_index = index.data_ptr<int64_t>();
  int64_t* out_counts = counts.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "radius_neighbors_cpu", [&] {
    const scalar_t radius_sq = static_cast<scalar_t>(radius * radius);  // as torch compares sqdist < r**2
    const neighbors::SegmentedSupport<scalar_t> trees(support.data_ptr<scalar_t>(), ns, dim, sb);
    neighbors::search_queries<scalar_t>(
        trees, query.data_ptr<scalar_t>(), qb, nq, dim,
        [radius_sq] { return neighbors::RadiusResults<scalar_t>(radius_sq); },
        [&](int64_t row, neighbors::RadiusResults<scalar_t>& found) {
          out_counts[row] = found.count();
          found.write(out_index + row * max_neighbors, max_neighbors, ns);
        });
  });
  return {index, counts};
}

}  // namespace
}  // namespace fsdlite::radius_neighbors

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("radius_neighbors", &fsdlite::radius_neighbors::radius_neighbors_cpu); }
