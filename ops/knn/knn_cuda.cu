// CUDA kernel of knn: one thread per query scans its sample's supports (brute force within the
// sample, O(Nq*k) memory: the sorted rows live directly in the outputs).
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "fsdlite_ops/neighbor_inputs.h"
#include "knn.h"
#include "neighbors_cuda.cuh"

namespace fsdlite::knn_cuda {

constexpr int kThreads = 256;

template <typename T>
__global__ void knn_kernel(const T* query, const T* support, const int64_t* query_batch, const int64_t* support_batch,
                           int64_t num_query, int64_t num_support, int64_t dim, int64_t k, int64_t* index, T* sqdist) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= num_query) return;
  int64_t first, last;
  neighbors_cuda::support_range(query_batch, support_batch, num_support, row, first, last);
  const T* q = query + row * dim;
  T* row_dist = sqdist + row * k;
  int64_t* row_index = index + row * k;
  for (int64_t j = first; j < last; ++j) {
    const T dist = neighbors_cuda::squared_distance(q, support + j * dim, dim);
    if (dist < row_dist[k - 1]) neighbors_cuda::insert_sorted(row_dist, row_index, k, dist, j);
  }
}

std::tuple<at::Tensor, at::Tensor> knn_cuda(const at::Tensor& query_, const at::Tensor& support_, int64_t k,
                                            const c10::optional<at::Tensor>& query_batch_,
                                            const c10::optional<at::Tensor>& support_batch_) {
  fsdlite::knn::check_args(query_, support_, k, query_batch_, support_batch_);
  c10::cuda::CUDAGuard guard(query_.device());
  auto [index, sqdist] = fsdlite::knn::allocate_outputs(query_, support_, k);
  const int64_t nq = query_.size(0), ns = support_.size(0), dim = query_.size(1);
  if (nq == 0 || ns == 0) return {index, sqdist};
  const fsdlite::neighbors::NeighborInputs in(query_, support_, query_batch_, support_batch_);
  const at::Tensor &query = in.query, &support = in.support;
  const int64_t *qb = in.qb, *sb = in.sb;
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const dim3 grid(static_cast<unsigned>(ceil_div(nq, kThreads)));
  AT_DISPATCH_FLOATING_TYPES(query.scalar_type(), "knn_cuda", [&] {
    knn_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(query.data_ptr<scalar_t>(), support.data_ptr<scalar_t>(), qb, sb,
                                                        nq, ns, dim, k, index.data_ptr<int64_t>(),
                                                        sqdist.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {index, sqdist};
}

}  // namespace fsdlite::knn_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) { m.impl("knn", &fsdlite::knn_cuda::knn_cuda); }
