// Contiguous inputs of the neighbour ops (knn, radius_neighbors) for their CPU and CUDA kernels: the
// query/support coordinates and the optional sorted sample ids, with raw pointers to the ids.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>

namespace fsdlite::neighbors {

// query (Nq, D) and support (Ns, D) made contiguous; qb / sb point at the contiguous (Nq,) / (Ns,) int64
// sample ids, or are nullptr when the op runs without batches. The arguments must have been validated
// (query_batch and support_batch given together or both omitted).
struct NeighborInputs {
  at::Tensor query, support;
  at::Tensor query_batch, support_batch;  // undefined without batches
  const int64_t* qb = nullptr;
  const int64_t* sb = nullptr;

  NeighborInputs(const at::Tensor& query_, const at::Tensor& support_,
                 const c10::optional<at::Tensor>& query_batch_, const c10::optional<at::Tensor>& support_batch_)
      : query(query_.contiguous()), support(support_.contiguous()) {
    if (query_batch_.has_value()) {
      query_batch = query_batch_->contiguous();
      support_batch = support_batch_->contiguous();
      qb = query_batch.data_ptr<int64_t>();
      sb = support_batch.data_ptr<int64_t>();
    }
  }
};

}  // namespace fsdlite::neighbors
