// CPU kernel of grid_subsample: cell keys in parallel, one hash-table pass in point order (cells
// numbered by first point), a stable counting sort into per-cell point lists, then the per-cell
// reductions in parallel (double accumulators; majority label with ties -> smallest label).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "grid_subsample.h"

namespace fsdlite::grid_subsample {
namespace {

using Key = std::array<int64_t, 4>;  // sample id, cell x, y, z

inline uint64_t hash_key(const Key& key) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t v : key) {
    h ^= static_cast<uint64_t>(v) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h ^ (h >> 31);
}

template <typename T>
std::vector<Key> cell_keys(const T* points, const int64_t* batch, int64_t n, c10::ArrayRef<double> voxel_size) {
  std::vector<Key> keys(static_cast<size_t>(n));
  at::parallel_for(0, n, 4096, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      keys[i][0] = batch != nullptr ? batch[i] : 0;
      for (int64_t d = 0; d < 3; ++d)
        keys[i][d + 1] = static_cast<int64_t>(std::floor(static_cast<double>(points[i * 3 + d]) / voxel_size[d]));
    }
  });
  return keys;
}

// Cell id of every point (ids in order of first occurrence); returns the number of cells.
int64_t assign_cells(const std::vector<Key>& keys, int64_t* cell, std::vector<int64_t>& first_point) {
  const int64_t n = static_cast<int64_t>(keys.size());
  uint64_t capacity = 16;
  while (capacity < static_cast<uint64_t>(2 * n)) capacity <<= 1;
  std::vector<int64_t> table(capacity, -1);  // cell id or -1
  first_point.clear();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t slot = hash_key(keys[i]) & (capacity - 1);
    while (true) {
      const int64_t c = table[slot];
      if (c < 0) {
        table[slot] = static_cast<int64_t>(first_point.size());
        cell[i] = table[slot];
        first_point.push_back(i);
        break;
      }
      if (keys[first_point[c]] == keys[i]) {
        cell[i] = c;
        break;
      }
      slot = (slot + 1) & (capacity - 1);
    }
  }
  return static_cast<int64_t>(first_point.size());
}

// Points of cell c are members[offsets[c] .. offsets[c+1]), in ascending point order.
void group_by_cell(const int64_t* cell, int64_t n, int64_t m, std::vector<int64_t>& offsets,
                   std::vector<int64_t>& members) {
  offsets.assign(static_cast<size_t>(m + 1), 0);
  for (int64_t i = 0; i < n; ++i) ++offsets[cell[i] + 1];
  for (int64_t c = 0; c < m; ++c) offsets[c + 1] += offsets[c];
  std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
  members.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) members[cursor[cell[i]]++] = i;
}

// Row means of `src` (N, C) over each cell's members into `out` (M, C).
template <typename T>
void cell_means(const T* src, int64_t width, const std::vector<int64_t>& offsets, const std::vector<int64_t>& members,
                T* out) {
  const int64_t m = static_cast<int64_t>(offsets.size()) - 1;
  at::parallel_for(0, m, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, width)), [&](int64_t first, int64_t last) {
    std::vector<double> acc(static_cast<size_t>(width));
    for (int64_t c = first; c < last; ++c) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = offsets[c]; p < offsets[c + 1]; ++p) {
        const T* row = src + members[p] * width;
        for (int64_t f = 0; f < width; ++f) acc[f] += static_cast<double>(row[f]);
      }
      const double count = static_cast<double>(offsets[c + 1] - offsets[c]);
      for (int64_t f = 0; f < width; ++f) out[c * width + f] = static_cast<T>(acc[f] / count);
    }
  });
}

// Most frequent label of each cell (ties -> smallest label).
void cell_majority(const int64_t* labels, const std::vector<int64_t>& offsets, const std::vector<int64_t>& members,
                   int64_t* out) {
  const int64_t m = static_cast<int64_t>(offsets.size()) - 1;
  at::parallel_for(0, m, 256, [&](int64_t first, int64_t last) {
    std::vector<int64_t> values;
    for (int64_t c = first; c < last; ++c) {
      values.clear();
      for (int64_t p = offsets[c]; p < offsets[c + 1]; ++p) values.push_back(labels[members[p]]);
      std::sort(values.begin(), values.end());
      int64_t best = values[0], best_count = 0;
      for (size_t run = 0; run < values.size();) {
        size_t end = run;
        while (end < values.size() && values[end] == values[run]) ++end;
        if (static_cast<int64_t>(end - run) > best_count) {  // strict: an equal count keeps the smaller label
          best = values[run];
          best_count = static_cast<int64_t>(end - run);
        }
        run = end;
      }
      out[c] = best;
    }
  });
}

Outputs grid_subsample_cpu(const at::Tensor& points_, c10::ArrayRef<double> voxel_size,
                           const c10::optional<at::Tensor>& batch_, const c10::optional<at::Tensor>& features_,
                           const c10::optional<at::Tensor>& labels_) {
  check_args(points_, voxel_size, batch_, features_, labels_);
  const at::Tensor points = points_.contiguous();
  const at::Tensor batch = batch_.has_value() ? batch_->contiguous() : at::Tensor();
  const at::Tensor features = features_.has_value() ? features_->contiguous() : at::Tensor();
  const at::Tensor labels = labels_.has_value() ? labels_->contiguous() : at::Tensor();
  const int64_t n = points.size(0);
  const auto long_options = points.options().dtype(at::kLong);
  at::Tensor cell = at::empty({n}, long_options);
  std::vector<int64_t> first_point;
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "grid_subsample_keys", [&] {
    const std::vector<Key> keys = cell_keys(points.data_ptr<scalar_t>(),
                                            batch.defined() ? batch.data_ptr<int64_t>() : nullptr, n, voxel_size);
    assign_cells(keys, cell.data_ptr<int64_t>(), first_point);
  });
  const int64_t m = static_cast<int64_t>(first_point.size());
  std::vector<int64_t> offsets, members;
  group_by_cell(cell.data_ptr<int64_t>(), n, m, offsets, members);

  at::Tensor out_points = at::empty({m, 3}, points.options());
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "grid_subsample_points", [&] {
    cell_means(points.data_ptr<scalar_t>(), 3, offsets, members, out_points.data_ptr<scalar_t>());
  });
  at::Tensor out_batch = at::zeros({m}, long_options);
  if (batch.defined()) {
    const int64_t* b = batch.data_ptr<int64_t>();
    int64_t* ob = out_batch.data_ptr<int64_t>();
    for (int64_t c = 0; c < m; ++c) ob[c] = b[first_point[c]];
  }
  at::Tensor out_features = at::empty({0}, points.options());
  if (features.defined()) {
    out_features = at::empty({m, features.size(1)}, features.options());
    AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "grid_subsample_features", [&] {
      cell_means(features.data_ptr<scalar_t>(), features.size(1), offsets, members,
                 out_features.data_ptr<scalar_t>());
    });
  }
  at::Tensor out_labels = at::empty({0}, long_options);
  if (labels.defined()) {
    out_labels = at::empty({m}, long_options);
    cell_majority(labels.data_ptr<int64_t>(), offsets, members, out_labels.data_ptr<int64_t>());
  }
  return {out_points, out_batch, out_features, out_labels, cell};
}

}  // namespace
}  // namespace fsdlite::grid_subsample

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("grid_subsample", &fsdlite::grid_subsample::grid_subsample_cpu); }
