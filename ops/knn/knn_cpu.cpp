// CPU kernel of knn: a KD-tree per sample, queries searched in parallel; O(N*k) memory.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "fsdlite_ops/neighbor_inputs.h"
#include "kdtree.h"
#include "knn.h"

namespace fsdlite::knn {
namespace {

std::tuple<at::Tensor, at::Tensor> knn_cpu(const at::Tensor& query_, const at::Tensor& support_, int64_t k,
                                           const c10::optional<at::Tensor>& query_batch_,
                                           const c10::optional<at::Tensor>& support_batch_) {
  check_args(query_, support_, k, query_batch_, support_batch_);
  auto [index, sqdist] = allocate_outputs(query_, support_, k);
  const int64_t nq = query_.size(0), ns = support_.size(0), dim = query_.size(1);
  if (nq == 0 || ns == 0) return {index, sqdist};
  const neighbors::NeighborInputs in(query_, support_, query_batch_, support_batch_);
  const at::Tensor &query = in.query, &support = in.support;
  const int64_t *qb = in.qb, *sb = in.sb;
  int64_t* out_index = index.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "knn_cpu", [&] {
    const neighbors::SegmentedSupport<scalar_t> trees(support.data_ptr<scalar_t>(), ns, dim, sb);
    scalar_t* out_dist = sqdist.data_ptr<scalar_t>();
    neighbors::search_queries<scalar_t>(
        trees, query.data_ptr<scalar_t>(), qb, nq, dim, [k] { return neighbors::KnnResults<scalar_t>(k); },
        [&](int64_t row, neighbors::KnnResults<scalar_t>& found) {
          found.write(out_index + row * k, out_dist + row * k, ns);
        });
  });
  return {index, sqdist};
}

}  // namespace
}  // namespace fsdlite::knn

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("knn", &fsdlite::knn::knn_cpu); }
