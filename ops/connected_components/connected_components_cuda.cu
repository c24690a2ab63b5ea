// CUDA kernel of connected_components (same algorithm as the CPU kernel, one thread per point):
//   1. insert every point into an open-addressing table whose slot owner is the first point that
//      claimed it (atomicCAS); the slot index is the cell id,
//   2. link each point to its slot owner (same cell => linked),
//   3. CSR of cell members (atomic counts, cumsum, atomic cursors),
//   4. each point scans the members of its half-stencil cells until one is closer than the
//      threshold (skipping cells already in its component) and links to it,
//   5. roots (= smallest index of each component) -> labels by first point (ATen cumsum).
// The union-find is lock-free: parent pointers only decrease, larger roots link under smaller ones.
#include <ATen/ops/arange.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "connected_components.h"
#include "fsdlite_ops/common.h"

namespace fsdlite::connected_components_cuda {
using fsdlite::connected_components::CellKey;

constexpr int kThreads = 256;

struct Inputs {
  const double* xyz;
  const int64_t* batch;    // may be null
  const int64_t* classes;  // may be null
  const double* thresholds;
  int64_t n;
  int ndim;
  bool per_class;
};

__device__ inline double threshold_of(const Inputs& in, int64_t i) {
  return in.thresholds[in.per_class ? in.classes[i] : 0];
}

__device__ inline CellKey key_of(const Inputs& in, int64_t i) {
  const double t = threshold_of(in, i);
  return fsdlite::connected_components::point_key(in.xyz, i, in.ndim,
                                                  fsdlite::connected_components::inverse_side(t, in.ndim),
                                                  in.batch ? in.batch[i] : 0, in.classes ? in.classes[i] : 0);
}

__device__ inline int64_t load(const int64_t* p) { return *reinterpret_cast<const volatile long long*>(p); }

__device__ inline int64_t cas(int64_t* p, int64_t expected, int64_t desired) {
  return static_cast<int64_t>(atomicCAS(reinterpret_cast<unsigned long long*>(p),
                                        static_cast<unsigned long long>(expected),
                                        static_cast<unsigned long long>(desired)));
}

__device__ int64_t find_root(int64_t* parent, int64_t x) {
  while (true) {
    const int64_t p = load(parent + x);
    if (p == x) return x;
    const int64_t gp = load(parent + p);
    if (gp != p) cas(parent + x, p, gp);
    x = gp;
  }
}

__device__ void unite(int64_t* parent, int64_t a, int64_t b) {
  while (true) {
    a = find_root(parent, a);
    b = find_root(parent, b);
    if (a == b) return;
    if (a < b) {
      const int64_t t = a;
      a = b;
      b = t;
    }
    if (cas(parent + a, a, b) == a) return;
  }
}

// Slot of `key` in the table (owners are point indices, -1 = empty), or -1 when absent.
__device__ int64_t lookup(const Inputs& in, const int64_t* table, uint64_t mask, const CellKey& key) {
  for (uint64_t s = fsdlite::connected_components::hash_key(key) & mask;; s = (s + 1) & mask) {
    const int64_t owner = table[s];
    if (owner < 0) return -1;
    if (fsdlite::connected_components::same_key(key_of(in, owner), key)) return static_cast<int64_t>(s);
  }
}

__global__ void insert_kernel(Inputs in, int64_t* table, uint64_t mask, int64_t* slot_of, int64_t* parent) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= in.n) return;
  parent[i] = i;
  slot_of[i] = -1;
  if (threshold_of(in, i) <= 0.0) return;  // singleton
  const CellKey key = key_of(in, i);
  for (uint64_t s = fsdlite::connected_components::hash_key(key) & mask;; s = (s + 1) & mask) {
    const int64_t prev = cas(table + s, -1, i);
    if (prev < 0 || fsdlite::connected_components::same_key(key_of(in, prev), key)) {
      slot_of[i] = static_cast<int64_t>(s);
      return;
    }
  }
}

__global__ void same_cell_kernel(Inputs in, const int64_t* table, const int64_t* slot_of, int64_t* parent,
                                 int64_t* counts) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= in.n || slot_of[i] < 0) return;
  unite(parent, i, table[slot_of[i]]);
  atomicAdd(reinterpret_cast<unsigned long long*>(counts + slot_of[i]), 1ULL);
}

__global__ void fill_kernel(int64_t n, const int64_t* slot_of, const int64_t* ends, const int64_t* counts,
                            int64_t* cursor, int64_t* members) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n || slot_of[i] < 0) return;
  const int64_t s = slot_of[i];
  const int64_t at = atomicAdd(reinterpret_cast<unsigned long long*>(cursor + s), 1ULL);
  members[ends[s] - counts[s] + at] = i;
}

__global__ void link_kernel(Inputs in, const int64_t* table, uint64_t mask, const int64_t* slot_of,
                            const int64_t* ends, const int64_t* counts, const int64_t* members, int64_t* parent) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= in.n || slot_of[i] < 0) return;
  const double t = threshold_of(in, i);
  const double t2 = t * t;
  const CellKey key = key_of(in, i);
  const int stencil = fsdlite::connected_components::half_stencil_size(in.ndim);
  int64_t o[3];
  for (int k = 0; k < stencil; ++k) {
    fsdlite::connected_components::half_stencil_offset(k, in.ndim, o);
    const int64_t s = lookup(in, table, mask, fsdlite::connected_components::shifted(key, o));
    if (s < 0 || find_root(parent, i) == find_root(parent, table[s])) continue;
    for (int64_t m = ends[s] - counts[s]; m < ends[s]; ++m) {
      if (fsdlite::connected_components::squared_distance(in.xyz, i, members[m], in.ndim) < t2) {
        unite(parent, i, members[m]);
        break;
      }
    }
  }
}

__global__ void root_kernel(int64_t n, int64_t* parent, int64_t* roots) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) roots[i] = find_root(parent, i);
}

std::tuple<at::Tensor, at::Tensor> connected_components_cuda(const at::Tensor& points, const at::Tensor& threshold,
                                                             const c10::optional<at::Tensor>& batch_,
                                                             const c10::optional<at::Tensor>& class_ids_,
                                                             int64_t ndim, bool per_class) {
  const auto args =
      fsdlite::connected_components::check_args(points, threshold, batch_, class_ids_, ndim, per_class);
  c10::cuda::CUDAGuard guard(points.device());
  const int64_t n = args.n;
  const auto long_opts = points.options().dtype(at::kLong);
  at::Tensor roots = at::empty({n}, long_opts);
  if (n == 0) return fsdlite::connected_components::labels_from_roots(roots);
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor xyz = points.narrow(1, 0, ndim).to(at::kDouble).contiguous();
  const at::Tensor thresholds = threshold.to(points.device(), at::kDouble).contiguous();
  const at::Tensor batch = batch_.has_value() ? batch_->contiguous() : at::Tensor();
  const at::Tensor classes = class_ids_.has_value() ? class_ids_->contiguous() : at::Tensor();
  Inputs in{xyz.data_ptr<double>(),
            batch.defined() ? batch.data_ptr<int64_t>() : nullptr,
            classes.defined() ? classes.data_ptr<int64_t>() : nullptr,
            thresholds.data_ptr<double>(),
            n,
            args.ndim,
            per_class};
  const int64_t cap = fsdlite::hash_table::table_capacity(n);
  const uint64_t mask = static_cast<uint64_t>(cap - 1);
  at::Tensor table = at::full({cap}, fsdlite::hash_table::kEmpty, long_opts);
  at::Tensor slot_of = at::empty({n}, long_opts);
  at::Tensor parent = at::empty({n}, long_opts);
  at::Tensor counts = at::zeros({cap}, long_opts);
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kThreads)));
  int64_t* tab = table.data_ptr<int64_t>();
  int64_t* slots = slot_of.data_ptr<int64_t>();
  int64_t* par = parent.data_ptr<int64_t>();
  insert_kernel<<<grid, kThreads, 0, stream>>>(in, tab, mask, slots, par);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  same_cell_kernel<<<grid, kThreads, 0, stream>>>(in, tab, slots, par, counts.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor ends = at::cumsum(counts, 0);
  at::Tensor cursor = at::zeros({cap}, long_opts);
  at::Tensor members = at::empty({n}, long_opts);
  fill_kernel<<<grid, kThreads, 0, stream>>>(n, slots, ends.data_ptr<int64_t>(), counts.data_ptr<int64_t>(),
                                             cursor.data_ptr<int64_t>(), members.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  link_kernel<<<grid, kThreads, 0, stream>>>(in, tab, mask, slots, ends.data_ptr<int64_t>(),
                                             counts.data_ptr<int64_t>(), members.data_ptr<int64_t>(), par);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  root_kernel<<<grid, kThreads, 0, stream>>>(n, par, roots.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return fsdlite::connected_components::labels_from_roots(roots);
}

}  // namespace fsdlite::connected_components_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("connected_components", &fsdlite::connected_components_cuda::connected_components_cuda);
}
