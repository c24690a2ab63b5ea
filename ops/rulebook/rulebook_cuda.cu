// CUDA kernels of the rulebook family: a global key -> row table (atomicCAS on the key, duplicates reported
// through a flag and raised on the host), then one thread per (output row, offset) for the neighbour maps.
// Strided outputs: candidate cells are inserted into a key set, the set is sorted (empty slots, -1, come
// first) and the first min(count, max_out) keys become the outputs -- sorted by key as on the CPU. The
// output count stays on the device (kernels read it), so the only host syncs are the argument checks.
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "rulebook.h"

namespace fsdlite::rulebook_cuda {
using fsdlite::rulebook::ConvOutputs;
using fsdlite::rulebook::Geometry;
using fsdlite::rulebook::kEmpty;
using fsdlite::rulebook::kEmptyWord;
using fsdlite::rulebook::Slot;
using fsdlite::rulebook::TableView;

constexpr int kThreads = 256;

inline dim3 blocks_for(int64_t n) { return dim3(static_cast<unsigned>(std::max<int64_t>(1, ceil_div(n, kThreads)))); }

__device__ inline unsigned long long* key_word(Slot* slots, int64_t h) {
  return reinterpret_cast<unsigned long long*>(&slots[h].key);
}

// Inserts the valid voxels; a duplicate records the larger of the two rows in dup[0] (atomicMin over all).
__global__ void insert_kernel(const int64_t* coors, const int64_t* num_valid, Geometry g, Slot* slots, int64_t mask,
                              int64_t* dup) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= *num_valid) return;
  const int64_t* r = coors + 4 * i;
  const int64_t key = fsdlite::rulebook::table_key(r[0], r[1], r[2], r[3], g.in_shape);
  int64_t h = fsdlite::rulebook::home_slot(key, mask);
  while (true) {
    const unsigned long long prev = atomicCAS(key_word(slots, h), kEmptyWord,
                                              static_cast<unsigned long long>(key));
    if (prev == kEmptyWord) {
      slots[h].value = i;
      return;
    }
    if (prev == static_cast<unsigned long long>(key)) {
      atomicMin(reinterpret_cast<unsigned long long*>(dup), static_cast<unsigned long long>(i));
      return;
    }
    h = (h + 1) & mask;
  }
}

// Row sharing the voxel of row `i` (called on the host path after a duplicate was flagged).
__global__ void partner_kernel(const int64_t* coors, int64_t i, const int64_t* num_valid, int64_t* partner) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= *num_valid || j == i) return;
  bool same = true;
  for (int c = 0; c < 4; ++c) same = same && coors[4 * j + c] == coors[4 * i + c];
  if (same) atomicMin(reinterpret_cast<unsigned long long*>(partner), static_cast<unsigned long long>(j));
}

// nbr[r, k] for r < rows (read from the device); cells come from coors (subm) or output keys (strided).
__global__ void neighbour_kernel(const int64_t* coors, const int64_t* out_keys, const int64_t* rows, Geometry g,
                                 bool subm, TableView table, int64_t dump, int64_t* nbr, int64_t* out_coors,
                                 int64_t total) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= total) return;
  const int64_t r = t / g.kernel_volume, k = t % g.kernel_volume;
  if (r >= *rows) return;
  int64_t o[4];
  if (subm) {
    for (int c = 0; c < 4; ++c) o[c] = coors[4 * r + c];
  } else {
    fsdlite::rulebook::decode(out_keys[r], g.out_shape, o);
    if (k == 0)
      for (int c = 0; c < 4; ++c) out_coors[4 * r + c] = o[c];
  }
  const int64_t key = fsdlite::rulebook::input_key(o, k, g, subm);
  nbr[t] = key == kEmpty ? dump : table.find(key, dump);
}

// Inserts every output cell reached by (valid voxel i, offset k) into the key set; counts new keys.
__global__ void candidate_kernel(const int64_t* coors, const int64_t* num_valid, Geometry g, int64_t* set,
                                 int64_t mask, int64_t* count, int64_t total) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= total) return;
  const int64_t i = t / g.kernel_volume, k = t % g.kernel_volume;
  if (i >= *num_valid) return;
  const int64_t* r = coors + 4 * i;
  int64_t kzyx[3], o[3];
  fsdlite::rulebook::kernel_index(k, g.kernel, kzyx);
  for (int a = 0; a < 3; ++a) {
    o[a] = fsdlite::rulebook::output_coordinate(r[a + 1], kzyx[a], a, g);
    if (o[a] < 0) return;
  }
  const int64_t key = fsdlite::rulebook::encode(r[0], o[0], o[1], o[2], g.out_shape);
  int64_t h = fsdlite::rulebook::home_slot(key, mask);
  while (true) {
    const unsigned long long prev =
        atomicCAS(reinterpret_cast<unsigned long long*>(set + h), kEmptyWord,
                  static_cast<unsigned long long>(key));
    if (prev == kEmptyWord) {
      atomicAdd(reinterpret_cast<unsigned long long*>(count), 1ULL);
      return;
    }
    if (prev == static_cast<unsigned long long>(key)) return;
    h = (h + 1) & mask;
  }
}

// counts = [total, kept, dropped] from the number of unique keys.
__global__ void count_kernel(int64_t* counts, int64_t max_out) {
  const int64_t total = counts[0];
  counts[1] = total < max_out ? total : max_out;
  counts[2] = total - counts[1];
}

// out_keys[r] = r-th smallest key: the sorted set holds (cap - total) empty slots first.
__global__ void shift_kernel(const int64_t* sorted, int64_t cap, const int64_t* counts, int64_t* out_keys) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= counts[1]) return;
  out_keys[r] = sorted[cap - counts[0] + r];
}

__global__ void inverse_kernel(const int64_t* nbr, int64_t num_out, int64_t kv, int64_t num_rows, int64_t* inv,
                               int* flag, int64_t* conflict) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= num_out * kv) return;
  const int64_t o = t / kv, k = t % kv, i = nbr[t];
  if (i == num_rows) return;
  const unsigned long long prev =
      atomicCAS(reinterpret_cast<unsigned long long*>(inv + i * kv + k), static_cast<unsigned long long>(num_out),
                static_cast<unsigned long long>(o));
  if (prev != static_cast<unsigned long long>(num_out) && atomicCAS(flag, 0, 1) == 0) {
    conflict[0] = i;  // the first conflict to take the flag is reported
    conflict[1] = k;
    conflict[2] = static_cast<int64_t>(prev);
    conflict[3] = o;
  }
}

struct DeviceTable {
  at::Tensor slots;  // (capacity, 2) int64 = Slot[capacity]
  int64_t mask;
  TableView view() const { return TableView{reinterpret_cast<const Slot*>(slots.data_ptr<int64_t>()), mask}; }
};

DeviceTable build_table(const at::Tensor& coors, const at::Tensor& num_valid, const Geometry& g, cudaStream_t stream,
                        const char* op) {
  const int64_t cap = fsdlite::rulebook::table_capacity(g.num_valid);
  DeviceTable t{at::full({cap, 2}, kEmpty, coors.options()), cap - 1};
  at::Tensor dup = at::full({1}, coors.size(0), coors.options());
  insert_kernel<<<blocks_for(g.num_valid), kThreads, 0, stream>>>(
      coors.data_ptr<int64_t>(), num_valid.data_ptr<int64_t>(), g,
      reinterpret_cast<Slot*>(t.slots.data_ptr<int64_t>()), t.mask, dup.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t i = dup.item<int64_t>();
  if (i < coors.size(0)) {
    at::Tensor partner = at::full({1}, coors.size(0), coors.options());
    partner_kernel<<<blocks_for(g.num_valid), kThreads, 0, stream>>>(coors.data_ptr<int64_t>(), i,
                                                                    num_valid.data_ptr<int64_t>(),
                                                                    partner.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    fsdlite::rulebook::raise_duplicate(coors, partner.item<int64_t>(), i, op);
  }
  return t;
}

at::Tensor rulebook_subm_cuda(const at::Tensor& coors_, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                              c10::IntArrayRef kernel_size, c10::IntArrayRef dilation) {
  const int64_t ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0};
  const Geometry g = fsdlite::rulebook::check_geometry(coors_, num_valid, spatial_shape, kernel_size, ones, zeros,
                                                       dilation, true, "rulebook_subm");
  c10::cuda::CUDAGuard guard(coors_.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor coors = coors_.contiguous();
  const int64_t vmax = coors.size(0);
  at::Tensor nbr = at::full({vmax, g.kernel_volume}, vmax, coors.options());
  if (g.num_valid == 0) return nbr;
  const DeviceTable table = build_table(coors, num_valid, g, stream, "rulebook_subm");
  const int64_t total = g.num_valid * g.kernel_volume;
  neighbour_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      coors.data_ptr<int64_t>(), nullptr, num_valid.data_ptr<int64_t>(), g, true, table.view(), vmax,
      nbr.data_ptr<int64_t>(), nullptr, total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return nbr;
}

ConvOutputs rulebook_conv_cuda(const at::Tensor& coors_, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                               c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                               c10::IntArrayRef dilation, int64_t max_out) {
  const Geometry g = fsdlite::rulebook::check_geometry(coors_, num_valid, spatial_shape, kernel_size, stride, padding,
                                                       dilation, false, "rulebook_conv");
  fsdlite::rulebook::check_max_out(max_out);
  c10::cuda::CUDAGuard guard(coors_.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor coors = coors_.contiguous();
  const int64_t vmax = coors.size(0);
  const auto opts = coors.options();
  at::Tensor out_coors = at::zeros({max_out, 4}, opts);
  at::Tensor nbr = at::full({max_out, g.kernel_volume}, vmax, opts);
  at::Tensor counts = at::zeros({3}, opts);  // total, kept, dropped
  if (g.num_valid == 0) return {out_coors, counts[1].clone(), counts[2].clone(), nbr};
  const DeviceTable table = build_table(coors, num_valid, g, stream, "rulebook_conv");
  const int64_t cap = fsdlite::rulebook::table_capacity(g.num_valid * fsdlite::rulebook::outputs_per_input(g));
  at::Tensor set = at::full({cap}, kEmpty, opts);
  const int64_t pairs = g.num_valid * g.kernel_volume;
  candidate_kernel<<<blocks_for(pairs), kThreads, 0, stream>>>(coors.data_ptr<int64_t>(),
                                                              num_valid.data_ptr<int64_t>(), g,
                                                              set.data_ptr<int64_t>(), cap - 1,
                                                              counts.data_ptr<int64_t>(), pairs);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  count_kernel<<<1, 1, 0, stream>>>(counts.data_ptr<int64_t>(), max_out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // Sorted set: kEmpty (-1) slots first, then the unique keys ascending.
  const at::Tensor sorted = std::get<0>(at::sort(set));
  at::Tensor out_keys = at::empty({std::max<int64_t>(max_out, 1)}, opts);
  shift_kernel<<<blocks_for(max_out), kThreads, 0, stream>>>(sorted.data_ptr<int64_t>(), cap,
                                                            counts.data_ptr<int64_t>(), out_keys.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t total_rows = max_out * g.kernel_volume;
  neighbour_kernel<<<blocks_for(total_rows), kThreads, 0, stream>>>(
      nullptr, out_keys.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + 1, g, false, table.view(), vmax,
      nbr.data_ptr<int64_t>(), out_coors.data_ptr<int64_t>(), total_rows);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out_coors, counts[1].clone(), counts[2].clone(), nbr};
}

at::Tensor rulebook_inverse_cuda(const at::Tensor& nbr_, int64_t num_rows) {
  fsdlite::rulebook::check_inverse_args(nbr_, num_rows);
  c10::cuda::CUDAGuard guard(nbr_.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor nbr = nbr_.contiguous();
  const int64_t num_out = nbr.size(0), kv = nbr.size(1);
  at::Tensor inv = at::full({num_rows, kv}, num_out, nbr.options());
  if (num_out * kv == 0) return inv;
  at::Tensor conflict = at::full({4}, -1, nbr.options());
  at::Tensor flag = at::zeros({1}, nbr.options().dtype(at::kInt));
  inverse_kernel<<<blocks_for(num_out * kv), kThreads, 0, stream>>>(nbr.data_ptr<int64_t>(), num_out, kv, num_rows,
                                                                    inv.data_ptr<int64_t>(), flag.data_ptr<int>(),
                                                                    conflict.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor c = conflict.cpu();
  const int64_t* p = c.data_ptr<int64_t>();
  if (p[0] >= 0) fsdlite::rulebook::raise_inverse_conflict(p[0], p[1], p[2], p[3]);
  return inv;
}

// count[k] += real pairs of offset k (block-local histogram in shared memory, then one atomic per offset).
__global__ void pair_count_kernel(const int64_t* nbr, int64_t total, int64_t kv, int64_t num_in,
                                  unsigned long long* count) {
  extern __shared__ unsigned long long local[];
  for (int64_t k = threadIdx.x; k < kv; k += blockDim.x) local[k] = 0;
  __syncthreads();
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (nbr[t] < num_in) atomicAdd(&local[t % kv], 1ULL);
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < kv; k += blockDim.x) {
    if (local[k]) atomicAdd(&count[k], local[k]);
  }
}

// One thread: first row of every offset's tiles (start[k]), and [num_pairs, num_placed] in totals.
__global__ void pair_layout_kernel(const unsigned long long* count, int64_t kv, int64_t tile, int64_t capacity,
                                   int64_t* start, int64_t* totals) {
  int64_t first_tile = 0, pairs = 0, placed = 0;
  for (int64_t k = 0; k < kv; ++k) {
    const int64_t c = static_cast<int64_t>(count[k]);
    start[k] = first_tile * tile;
    const int64_t room = capacity - start[k];
    placed += room <= 0 ? 0 : (room < c ? room : c);
    pairs += c;
    first_tile += (c + tile - 1) / tile;
  }
  totals[0] = pairs;
  totals[1] = placed;
}

// offsets[p] = the offset whose tiles hold row p (0 in unused tiles).
__global__ void pair_offset_kernel(const int64_t* start, const unsigned long long* count, int64_t kv, int64_t tile,
                                   int64_t capacity, int64_t* offsets) {
  const int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (p >= capacity) return;
  int64_t value = 0;
  for (int64_t k = 0; k < kv; ++k) {
    const int64_t end = start[k] + (static_cast<int64_t>(count[k]) + tile - 1) / tile * tile;
    if (p >= start[k] && p < end) value = k;
  }
  offsets[p] = value;
}

// One block per offset k: a block-wide exclusive scan over the output rows (in chunks of blockDim.x) gives each
// real pair its rank within the offset, so the order is the CPU's (output rows ascending).
__global__ void pair_place_kernel(const int64_t* nbr, int64_t num_out, int64_t kv, int64_t num_in,
                                  const int64_t* start, int64_t capacity, int64_t* ins, int64_t* outs) {
  __shared__ int64_t scan[kThreads];
  const int64_t k = blockIdx.x;
  int64_t base = start[k];
  for (int64_t chunk = 0; chunk < num_out; chunk += blockDim.x) {
    const int64_t o = chunk + threadIdx.x;
    const int64_t i = o < num_out ? nbr[o * kv + k] : num_in;
    const int64_t flag = i < num_in ? 1 : 0;
    scan[threadIdx.x] = flag;
    __syncthreads();
    for (int stride = 1; stride < blockDim.x; stride <<= 1) {  // inclusive Hillis-Steele scan
      const int64_t add = threadIdx.x >= stride ? scan[threadIdx.x - stride] : 0;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    const int64_t pos = base + scan[threadIdx.x] - flag;
    if (flag && pos < capacity) {
      ins[pos] = i;
      outs[pos] = o;
    }
    const int64_t chunk_total = scan[blockDim.x - 1];
    __syncthreads();
    base += chunk_total;
  }
}

fsdlite::rulebook::PairOutputs rulebook_pairs_cuda(const at::Tensor& nbr_, int64_t num_in, int64_t capacity,
                                                   int64_t tile) {
  fsdlite::rulebook::check_pairs_args(nbr_, num_in, capacity, tile);
  c10::cuda::CUDAGuard guard(nbr_.device());
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor nbr = nbr_.contiguous();
  const int64_t num_out = nbr.size(0), kv = nbr.size(1);
  at::Tensor pairs = at::empty({3, capacity}, nbr.options());
  pairs.select(0, 0).fill_(num_in);
  pairs.select(0, 1).fill_(num_out);
  at::Tensor count = at::zeros({kv}, nbr.options());
  at::Tensor start = at::zeros({kv}, nbr.options());
  at::Tensor totals = at::zeros({2}, nbr.options());
  auto* count_ptr = reinterpret_cast<unsigned long long*>(count.data_ptr<int64_t>());
  const int64_t total = num_out * kv;
  if (total > 0) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(total, kThreads), 1024));
    pair_count_kernel<<<blocks, kThreads, kv * sizeof(unsigned long long), stream>>>(nbr.data_ptr<int64_t>(), total,
                                                                                     kv, num_in, count_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  pair_layout_kernel<<<1, 1, 0, stream>>>(count_ptr, kv, tile, capacity, start.data_ptr<int64_t>(),
                                         totals.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  int64_t* ins = pairs.data_ptr<int64_t>();
  if (capacity > 0) {
    pair_offset_kernel<<<blocks_for(capacity), kThreads, 0, stream>>>(start.data_ptr<int64_t>(), count_ptr, kv, tile,
                                                                     capacity, ins + 2 * capacity);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (num_out > 0) {
      pair_place_kernel<<<static_cast<unsigned>(kv), kThreads, 0, stream>>>(
          nbr.data_ptr<int64_t>(), num_out, kv, num_in, start.data_ptr<int64_t>(), capacity, ins, ins + capacity);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
  return {pairs, totals[0].clone(), totals[1].clone()};
}

}  // namespace fsdlite::rulebook_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("rulebook_subm", &fsdlite::rulebook_cuda::rulebook_subm_cuda);
  m.impl("rulebook_conv", &fsdlite::rulebook_cuda::rulebook_conv_cuda);
  m.impl("rulebook_inverse", &fsdlite::rulebook_cuda::rulebook_inverse_cuda);
  m.impl("rulebook_pairs", &fsdlite::rulebook_cuda::rulebook_pairs_cuda);
}
