// CPU kernel of voxelize: a cache-friendly partitioned hash unique.
//   1. per point (parallel chunks): voxel coordinates and key, excluded points counted; histogram of the
//      hash partition of each key;
//   2. stable scatter of (key, point) into partitions (each partition keeps point order);
//   3. per partition (parallel): a small cache-resident hash table gives local voxel ids, first points
//      (the first insert, since points are in order) and counts -- no atomics anywhere;
//   4. leaders (first points) are numbered in point order with a chunked prefix sum, which yields voxels in
//      first-occurrence order independent of the thread count;
//   5. per partition: voxel rows and the point -> voxel index are written.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <vector>

#include "voxelize.h"

namespace fsdlite::voxelize {
namespace {

constexpr int64_t kGrain = 16384;        // points per chunk at least
constexpr int64_t kPartitionSize = 8192;  // target points per hash partition (its table fits in L2)
constexpr int kPartitionBit = 40;        // partitions use hash bits from 40 up, local tables the low bits

// Contiguous point chunks processed by parallel passes; the same split is used by every pass.
struct Chunks {
  int64_t n, count, size;
  Chunks(int64_t n_) : n(n_) {
    count = std::max<int64_t>(1, std::min<int64_t>((n + kGrain - 1) / kGrain, 4 * at::get_num_threads()));
    size = (n + count - 1) / count;
  }
  int64_t begin(int64_t c) const { return std::min(n, c * size); }
  int64_t end(int64_t c) const { return std::min(n, (c + 1) * size); }
};

template <typename F>
void parallel_over(int64_t count, const F& fn) {
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) fn(k);
  });
}

inline int64_t partition_of(int64_t key, int64_t num_parts) {
  return static_cast<int64_t>((mix_key(static_cast<uint64_t>(key)) >> kPartitionBit) &
                              static_cast<uint64_t>(num_parts - 1));
}

// Pass 1: coordinates (point_coors, -1 rows when excluded), keys (-1 when excluded), partition histogram
// hist[c * P + p], excluded counts per chunk.
template <typename scalar_t>
void compute_keys(const scalar_t* points, int64_t dims, const int64_t* batch, const Grid& g, const Chunks& chunks,
                  int64_t num_parts, int64_t* point_coors, int64_t* keys, std::vector<int64_t>& hist,
                  std::vector<int64_t>& out_of_range, std::vector<int64_t>& non_finite) {
  scalar_t lower[3], size[3];
  for (int a = 0; a < 3; ++a) {
    lower[a] = static_cast<scalar_t>(g.lower[a]);
    size[a] = static_cast<scalar_t>(g.size[a]);
  }
  parallel_over(chunks.count, [&](int64_t c) {
    int64_t* h = hist.data() + c * num_parts;
    for (int64_t i = chunks.begin(c); i < chunks.end(c); ++i) {
      const scalar_t* p = points + i * dims;
      int64_t* pc = point_coors + i * 4;
      int64_t v[3];
      bool finite = true, inside = true;
      for (int a = 0; a < 3; ++a) {
        finite = finite && std::isfinite(p[a]);
        const scalar_t q = std::floor((p[a] - lower[a]) / size[a]);
        inside = inside && q >= 0 && q < static_cast<scalar_t>(g.shape[a]);
        v[a] = inside ? static_cast<int64_t>(q) : 0;
        inside = inside && v[a] < g.shape[a];
      }
      if (!finite || !inside) {
        ++(finite ? out_of_range : non_finite)[c];
        pc[0] = pc[1] = pc[2] = pc[3] = -1;
        keys[i] = -1;
        continue;
      }
      const int64_t b = batch ? batch[i] : 0;
      pc[0] = b;
      pc[1] = v[2];
      pc[2] = v[1];
      pc[3] = v[0];
      keys[i] = ((b * g.shape[2] + v[2]) * g.shape[1] + v[1]) * g.shape[0] + v[0];
      ++h[partition_of(keys[i], num_parts)];
    }
  });
}

// Valid points grouped by partition; partition p is [start[p], start[p + 1]) and keeps point order.
struct Partitions {
  int64_t count = 1;
  std::vector<int64_t> start, key;  // key: voxel key, later replaced by the local voxel id
  std::vector<int32_t> point;
};

Partitions partition_points(const int64_t* keys, const Chunks& chunks, int64_t num_parts, std::vector<int64_t>& hist) {
  Partitions parts;
  parts.count = num_parts;
  parts.start.assign(num_parts + 1, 0);
  int64_t total = 0;  // exclusive scan in (partition, chunk) order turns hist into write cursors
  for (int64_t p = 0; p < num_parts; ++p) {
    parts.start[p] = total;
    for (int64_t c = 0; c < chunks.count; ++c) {
      const int64_t m = hist[c * num_parts + p];
      hist[c * num_parts + p] = total;
      total += m;
    }
  }
  parts.start[num_parts] = total;
  parts.key.resize(total);
  parts.point.resize(total);
  parallel_over(chunks.count, [&](int64_t c) {
    int64_t* cursor = hist.data() + c * num_parts;
    for (int64_t i = chunks.begin(c); i < chunks.end(c); ++i) {
      if (keys[i] < 0) continue;
      const int64_t pos = cursor[partition_of(keys[i], num_parts)]++;
      parts.key[pos] = keys[i];
      parts.point[pos] = static_cast<int32_t>(i);
    }
  });
  return parts;
}

// Pass 3: per partition, unique keys in point order. Local voxel j of partition p lives at q = start[p] + j:
// first[q] its first point, count[q] its size; parts.key becomes the local id. Returns voxels per partition.
std::vector<int64_t> unique_per_partition(Partitions& parts, std::vector<int32_t>& first, std::vector<int32_t>& count) {
  struct Slot {
    int64_t key;
    int64_t id;
  };
  std::vector<int64_t> num_local(parts.count, 0);
  first.resize(parts.key.size());
  count.resize(parts.key.size());
  at::parallel_for(0, parts.count, 1, [&](int64_t begin, int64_t end) {
    std::vector<Slot> table;
    for (int64_t p = begin; p < end; ++p) {
      const int64_t s = parts.start[p], e = parts.start[p + 1];
      const int64_t cap = table_capacity(e - s), mask = cap - 1;
      table.assign(cap, Slot{-1, 0});
      int64_t nv = 0;
      for (int64_t pos = s; pos < e; ++pos) {
        const int64_t key = parts.key[pos];
        int64_t h = static_cast<int64_t>(mix_key(static_cast<uint64_t>(key)) & static_cast<uint64_t>(mask));
        while (table[h].key != -1 && table[h].key != key) h = (h + 1) & mask;
        if (table[h].key == -1) {
          table[h] = Slot{key, nv};
          first[s + nv] = parts.point[pos];
          count[s + nv] = 0;
          ++nv;
        }
        ++count[s + table[h].id];
        parts.key[pos] = table[h].id;
      }
      num_local[p] = nv;
    }
  });
  return num_local;
}

// Pass 4: global voxel ids in first-occurrence order: leader points (first points) are marked with their
// voxel q, then a chunked scan over the points numbers them; first[q] is replaced by the voxel id and the
// voxel coordinates are written in order. `mark` is an (n,) scratch array. Returns V.
int64_t number_voxels(const Partitions& parts, const std::vector<int64_t>& num_local, std::vector<int32_t>& first,
                      const Chunks& chunks, int64_t* mark,
                      std::vector<int64_t>& offsets) {
  parallel_over(chunks.count, [&](int64_t c) { std::fill(mark + chunks.begin(c), mark + chunks.end(c), -1); });
  parallel_over(parts.count, [&](int64_t p) {
    for (int64_t q = parts.start[p]; q < parts.start[p] + num_local[p]; ++q) mark[first[q]] = q;
  });
  offsets.assign(chunks.count + 1, 0);
  parallel_over(chunks.count, [&](int64_t c) {
    int64_t m = 0;
    for (int64_t i = chunks.begin(c); i < chunks.end(c); ++i) m += mark[i] >= 0;
    offsets[c + 1] = m;
  });
  for (int64_t c = 0; c < chunks.count; ++c) offsets[c + 1] += offsets[c];
  return offsets[chunks.count];
}

Outputs voxelize_cpu(const at::Tensor& points_, c10::ArrayRef<double> voxel_size,
                     c10::ArrayRef<double> point_range, const std::optional<at::Tensor>& batch_) {
  const Grid g = check_args(points_, voxel_size, point_range, batch_);
  const int64_t n = points_.size(0);
  TORCH_CHECK(n < std::numeric_limits<int32_t>::max(), "voxelize: at most 2^31 - 2 points per call on CPU, got ",
              n);
  if (n == 0) return empty_outputs(points_, 0, 0);
  const at::Tensor points = points_.contiguous();
  const at::Tensor batch = batch_.has_value() ? batch_->contiguous() : at::Tensor();
  const auto opts = points.options().dtype(at::kLong);
  at::Tensor point_coors = at::empty({n, 4}, opts);
  at::Tensor point2voxel = at::full({n}, -1, opts);
  int64_t* pc = point_coors.data_ptr<int64_t>();

  const Chunks chunks(n);
  int64_t num_parts = 1;
  while (num_parts * kPartitionSize < n && num_parts < (int64_t(1) << 16)) num_parts <<= 1;
  std::vector<int64_t> keys(n), hist(chunks.count * num_parts, 0);
  std::vector<int64_t> out_of_range(chunks.count, 0), non_finite(chunks.count, 0);
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "voxelize_cpu", [&] {
    compute_keys<scalar_t>(points.data_ptr<scalar_t>(), points.size(1),
                           batch.defined() ? batch.data_ptr<int64_t>() : nullptr, g, chunks, num_parts, pc,
                           keys.data(), hist, out_of_range, non_finite);
  });
  Partitions parts = partition_points(keys.data(), chunks, num_parts, hist);
  std::vector<int32_t> first, count;
  const std::vector<int64_t> num_local = unique_per_partition(parts, first, count);
  int64_t* mark = keys.data();  // keys are no longer needed
  std::vector<int64_t> offsets;
  const int64_t num_voxels = number_voxels(parts, num_local, first, chunks, mark, offsets);

  at::Tensor voxel_coors = at::empty({num_voxels, 4}, opts);
  at::Tensor voxel_counts = at::empty({num_voxels}, opts);
  int64_t* vc = voxel_coors.data_ptr<int64_t>();
  int64_t* counts = voxel_counts.data_ptr<int64_t>();
  int64_t* p2v = point2voxel.data_ptr<int64_t>();
  parallel_over(chunks.count, [&](int64_t c) {
    int64_t v = offsets[c];
    for (int64_t i = chunks.begin(c); i < chunks.end(c); ++i) {
      if (mark[i] < 0) continue;
      first[mark[i]] = static_cast<int32_t>(v);  // first[q] now holds the voxel id
      for (int k = 0; k < 4; ++k) vc[v * 4 + k] = pc[i * 4 + k];
      ++v;
    }
  });
  parallel_over(parts.count, [&](int64_t p) {
    const int64_t s = parts.start[p];
    for (int64_t q = s; q < s + num_local[p]; ++q) counts[first[q]] = count[q];
    for (int64_t pos = s; pos < parts.start[p + 1]; ++pos) p2v[parts.point[pos]] = first[s + parts.key[pos]];
  });
  int64_t total_oor = 0, total_nf = 0;
  for (int64_t c = 0; c < chunks.count; ++c) {
    total_oor += out_of_range[c];
    total_nf += non_finite[c];
  }
  return {voxel_coors, point2voxel, voxel_counts, point_coors, at::full({}, total_oor, opts),
          at::full({}, total_nf, opts)};
}

}  // namespace
}  // namespace fsdlite::voxelize

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("voxelize", &fsdlite::voxelize::voxelize_cpu); }
