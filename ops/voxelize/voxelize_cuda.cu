// CUDA kernel of voxelize: a global open-addressing hash table (atomicCAS on the key, atomicMin of the
// first point index, atomicAdd of the count); leaders (first points) are numbered in point order with a
// cumulative sum, which gives voxels in first-occurrence order.
#include <ATen/Dispatch.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "voxelize.h"

namespace fsdlite::voxelize_cuda {
using fsdlite::voxelize::Grid;
using fsdlite::voxelize::Outputs;

constexpr int kThreads = 256;
using fsdlite::hash_table::kEmptyWord;

template <typename T>
__global__ void insert_kernel(const T* points, int64_t dims, const int64_t* batch, int64_t n, Grid g,
                              unsigned long long* keys, int* first, int* count, int64_t mask, int64_t* point_coors,
                              int64_t* point_slot, unsigned long long* excluded) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const T* p = points + i * dims;
  int64_t* pc = point_coors + i * 4;
  int64_t v[3];
  bool finite = true, inside = true;
  for (int a = 0; a < 3; ++a) {
    finite = finite && isfinite(p[a]);
    const T q = floor((p[a] - static_cast<T>(g.lower[a])) / static_cast<T>(g.size[a]));
    inside = inside && q >= 0 && q < static_cast<T>(g.shape[a]);
    v[a] = inside ? static_cast<int64_t>(q) : 0;
    inside = inside && v[a] < g.shape[a];
  }
  if (!finite || !inside) {
    atomicAdd(excluded + (finite ? 0 : 1), 1ULL);
    pc[0] = pc[1] = pc[2] = pc[3] = -1;
    point_slot[i] = -1;
    return;
  }
  const int64_t b = batch != nullptr ? batch[i] : 0;
  pc[0] = b;
  pc[1] = v[2];
  pc[2] = v[1];
  pc[3] = v[0];
  const unsigned long long key =
      static_cast<unsigned long long>(((b * g.shape[2] + v[2]) * g.shape[1] + v[1]) * g.shape[0] + v[0]);
  int64_t h = static_cast<int64_t>(fsdlite::voxelize::mix_key(key) & static_cast<unsigned long long>(mask));
  while (true) {
    const unsigned long long prev = atomicCAS(keys + h, kEmptyWord, key);
    if (prev == kEmptyWord || prev == key) break;
    h = (h + 1) & mask;
  }
  atomicMin(first + h, static_cast<int>(i));
  atomicAdd(count + h, 1);
  point_slot[i] = h;
}

__global__ void leader_kernel(const int64_t* point_slot, const int* first, int64_t n, int64_t* is_leader) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t h = point_slot[i];
  is_leader[i] = (h >= 0 && first[h] == static_cast<int>(i)) ? 1 : 0;
}

// Leaders write their voxel row; count[h] is then replaced by the voxel id (only the leader touches it).
__global__ void voxel_kernel(const int64_t* point_slot, const int64_t* rank_incl, const int64_t* is_leader,
                             const int64_t* point_coors, int64_t n, int* count, int64_t* voxel_coors,
                             int64_t* voxel_counts) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || !is_leader[i]) return;
  const int64_t v = rank_incl[i] - 1, h = point_slot[i];
  for (int k = 0; k < 4; ++k) voxel_coors[v * 4 + k] = point_coors[i * 4 + k];
  voxel_counts[v] = count[h];
  count[h] = static_cast<int>(v);
}

__global__ void point2voxel_kernel(int64_t* point_slot, const int* voxel_id, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t h = point_slot[i];
  point_slot[i] = h >= 0 ? voxel_id[h] : -1;
}

Outputs voxelize_cuda(const at::Tensor& points_, c10::ArrayRef<double> voxel_size, c10::ArrayRef<double> point_range,
                      const std::optional<at::Tensor>& batch_) {
  const Grid g = fsdlite::voxelize::check_args(points_, voxel_size, point_range, batch_);
  const int64_t n = points_.size(0);
  TORCH_CHECK(n < INT_MAX, "voxelize: at most 2^31 - 2 points per call on CUDA, got ", n);
  if (n == 0) return fsdlite::voxelize::empty_outputs(points_, 0, 0);
  c10::cuda::CUDAGuard guard(points_.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor points = points_.contiguous();
  const at::Tensor batch = batch_.has_value() ? batch_->contiguous() : at::Tensor();
  const auto long_opts = points.options().dtype(at::kLong);
  const auto int_opts = points.options().dtype(at::kInt);
  const int64_t capacity = fsdlite::voxelize::table_capacity(n);
  at::Tensor keys = at::full({capacity}, fsdlite::hash_table::kEmpty, long_opts);  // all bits set == kEmptyWord
  at::Tensor first = at::full({capacity}, INT_MAX, int_opts);
  at::Tensor count = at::zeros({capacity}, int_opts);
  at::Tensor excluded = at::zeros({2}, long_opts);
  at::Tensor point_coors = at::empty({n, 4}, long_opts);
  at::Tensor point2voxel = at::empty({n}, long_opts);  // holds slots until the voxel ids replace them
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kThreads)));
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "voxelize_cuda", [&] {
    insert_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
        points.data_ptr<scalar_t>(), points.size(1), batch.defined() ? batch.data_ptr<int64_t>() : nullptr, n, g,
        reinterpret_cast<unsigned long long*>(keys.data_ptr<int64_t>()), first.data_ptr<int>(),
        count.data_ptr<int>(), capacity - 1, point_coors.data_ptr<int64_t>(), point2voxel.data_ptr<int64_t>(),
        reinterpret_cast<unsigned long long*>(excluded.data_ptr<int64_t>()));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor is_leader = at::empty({n}, long_opts);
  leader_kernel<<<grid, kThreads, 0, stream>>>(point2voxel.data_ptr<int64_t>(), first.data_ptr<int>(), n,
                                               is_leader.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor rank = at::cumsum(is_leader, 0);
  const int64_t num_voxels = rank[n - 1].item<int64_t>();
  at::Tensor voxel_coors = at::empty({num_voxels, 4}, long_opts);
  at::Tensor voxel_counts = at::empty({num_voxels}, long_opts);
  voxel_kernel<<<grid, kThreads, 0, stream>>>(point2voxel.data_ptr<int64_t>(), rank.data_ptr<int64_t>(),
                                              is_leader.data_ptr<int64_t>(), point_coors.data_ptr<int64_t>(), n,
                                              count.data_ptr<int>(), voxel_coors.data_ptr<int64_t>(),
                                              voxel_counts.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  point2voxel_kernel<<<grid, kThreads, 0, stream>>>(point2voxel.data_ptr<int64_t>(), count.data_ptr<int>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {voxel_coors, point2voxel, voxel_counts, point_coors, excluded[0].clone(), excluded[1].clone()};
}

}  // namespace fsdlite::voxelize_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) { m.impl("voxelize", &fsdlite::voxelize_cuda::voxelize_cuda); }
