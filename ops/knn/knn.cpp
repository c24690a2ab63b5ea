// Schema and shared argument checks of knn.
#include "knn.h"

#include <ATen/ops/full.h>
#include <torch/library.h>

#include <limits>

#include "neighbor_args.h"

namespace fsdlite::knn {

void check_args(const at::Tensor& query, const at::Tensor& support, int64_t k,
                const c10::optional<at::Tensor>& query_batch, const c10::optional<at::Tensor>& support_batch) {
  constexpr const char* op = "knn";
  TORCH_CHECK(k >= 1, op, ": k must be >= 1, got ", k);
  neighbors::check_point_sets(query, support, query_batch, support_batch, op);
  check_output_rows(k, query.size(0), op, "k", "the queries, query.size(0)");
}

std::tuple<at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& query, const at::Tensor& support, int64_t k) {
  at::Tensor index = at::full({query.size(0), k}, support.size(0), query.options().dtype(at::kLong));
  at::Tensor sqdist = at::full({query.size(0), k}, std::numeric_limits<double>::infinity(), query.options());
  return {index, sqdist};
}

}  // namespace fsdlite::knn

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("knn(Tensor query, Tensor support, int k, Tensor? query_batch=None, Tensor? support_batch=None) "
        "-> (Tensor index, Tensor sqdist)");
}
