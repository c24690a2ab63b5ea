// CUDA kernel of radius_neighbors: one thread per query scans its sample's supports, counts every
// neighbour strictly inside the radius and keeps the nearest max_neighbors sorted in its output row
// (a scratch row of distances alongside; ties keep the lower support index first).
#include <ATen/Dispatch.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <limits>

#include "../knn/neighbors_cuda.cuh"
#include "fsdlite_ops/common.h"
#include "fsdlite_ops/neighbor_inputs.h"
#include "radius_neighbors.h"

namespace fsdlite::radius_neighbors_cuda {

constexpr int kThreads = 256;

template <typename T>
__global__ void radius_kernel(const T* query, const T* support, const int64_t* query_batch,
                              const int64_t* support_batch, int64_t num_query, int64_t num_support, int64_t dim,
                              T radius_sq, int64_t limit, int64_t* index, int64_t* counts, T* scratch) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= num_query) return;
  int64_t first, last;
  neighbors_cuda::support_range(query_batch, support_batch, num_support, row, first, last);
  const T* q = query + row * dim;
  T* row_dist = scratch + row * limit;
  int64_t* row_index = index + row * limit;
  int64_t count = 0;
  for (int64_t j = first; j < last; ++j) {
    const T dist = neighbors_cuda::squared_distance(q, support + j * dim, dim);
    if (!(dist < radius_sq)) continue;
    ++count;
    if (dist < row_dist[limit - 1]) neighbors_cuda::insert_sorted(row_dist, row_index, limit, dist, j);
  }
  counts[row] = count;
}

std::tuple<at::Tensor, at::Tensor> radius_neighbors_cuda(const at::Tensor& query_, const at::Tensor& support_,
                                                         double radius, int64_t max_neighbors,
                                                         const c10::optional<at::Tensor>& query_batch_,
                                                         const c10::optional<at::Tensor>& support_batch_) {
  fsdlite::radius_neighbors::check_args(query_, support_, radius, max_neighbors, query_batch_, support_batch_);
  c10::cuda::CUDAGuard guard(query_.device());
  auto [index, counts] = fsdlite::radius_neighbors::allocate_outputs(query_, support_, max_neighbors);
  const int64_t nq = query_.size(0), ns = support_.size(0), dim = query_.size(1);
  if (nq == 0 || ns == 0) return {index, counts};
  const fsdlite::neighbors::NeighborInputs in(query_, support_, query_batch_, support_batch_);
  const at::Tensor &query = in.query, &support = in.support;
  const int64_t *qb = in.qb, *sb = in.sb;
  at::Tensor scratch = at::full({nq, max_neighbors}, std::numeric_limits<double>::infinity(), query.options());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const dim3 grid(static_cast<unsigned>(ceil_div(nq, kThreads)));
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "radius_neighbors_cuda", [&] {
    const scalar_t radius_sq = static_cast<scalar_t>(radius * radius);
    radius_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
        query.data_ptr<scalar_t>(), support.data_ptr<scalar_t>(), qb, sb, nq, ns, dim, radius_sq, max_neighbors,
        index.data_ptr<int64_t>(), counts.data_ptr<int64_t>(), scratch.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {index, counts};
}

}  // namespace fsdlite::radius_neighbors_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("radius_neighbors", &fsdlite::radius_neighbors_cuda::radius_neighbors_cuda);
}
