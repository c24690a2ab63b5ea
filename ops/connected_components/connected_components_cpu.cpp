// CPU kernel of connected_components.  Instead of the CUDA kernel's hash table, points are sorted by
// cell key, so the cells of a stencil column are contiguous and found by merge walks (sequential
// memory access); cell chunks are compared with their half stencil in parallel (at::parallel_for)
// through a lock-free union-find over cells.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "connected_components.h"

namespace fsdlite::connected_components {
namespace {

using Parent = std::vector<std::atomic<int64_t>>;

// Root of x; halves the path on the way (parent pointers only ever decrease).
int64_t find_root(Parent& parent, int64_t x) {
  while (true) {
    int64_t p = parent[x].load(std::memory_order_relaxed);
    if (p == x) return x;
    const int64_t gp = parent[p].load(std::memory_order_relaxed);
    if (gp != p) parent[x].compare_exchange_weak(p, gp, std::memory_order_relaxed);
    x = gp;
  }
}

// Links the components of a and b: the larger root points to the smaller one.
void unite(Parent& parent, int64_t a, int64_t b) {
  while (true) {
    a = find_root(parent, a);
    b = find_root(parent, b);
    if (a == b) return;
    if (a < b) std::swap(a, b);
    int64_t expected = a;
    if (parent[a].compare_exchange_strong(expected, b)) return;
  }
}

bool key_less(const CellKey& u, const CellKey& v) {
  if (u.b != v.b) return u.b < v.b;
  if (u.c != v.c) return u.c < v.c;
  if (u.x != v.x) return u.x < v.x;
  if (u.y != v.y) return u.y < v.y;
  return u.z < v.z;
}

// A neighbour column: cells at (x + dx, y + dy) (3-D) or x + dx (2-D) whose last coordinate lies in
// [last + lo, last + hi].  In (b, c, x, y, z) order such cells are contiguous, and the column start
// moves forward monotonically as the source cell advances, so it is found by a merge walk.
struct Column {
  int64_t dx, dy, lo, hi;
};

// The columns covering the lexicographically-positive half of the 5^D stencil.
std::vector<Column> half_stencil_columns(int ndim) {
  const int64_t r = kStencilRadius;
  std::vector<Column> cols;
  if (ndim == 2) {
    cols.push_back({0, 0, 1, r});
    for (int64_t dx = 1; dx <= r; ++dx) cols.push_back({dx, 0, -r, r});
  } else {
    cols.push_back({0, 0, 1, r});
    for (int64_t dy = 1; dy <= r; ++dy) cols.push_back({0, dy, -r, r});
    for (int64_t dx = 1; dx <= r; ++dx)
      for (int64_t dy = -r; dy <= r; ++dy) cols.push_back({dx, dy, -r, r});
  }
  return cols;
}

// Key of `k` shifted to column `col` with last-axis offset `last`.
CellKey column_key(const CellKey& k, const Column& col, int ndim, int64_t last) {
  CellKey s = k;
  s.x += col.dx;
  if (ndim == 2) {
    s.y += last;
  } else {
    s.y += col.dy;
    s.z += last;
  }
  return s;
}

struct Entry {
  CellKey key;
  int64_t index;
};

std::tuple<at::Tensor, at::Tensor> connected_components_cpu(const at::Tensor& points, const at::Tensor& threshold,
                                                            const c10::optional<at::Tensor>& batch_,
                                                            const c10::optional<at::Tensor>& class_ids_,
                                                            int64_t ndim_, bool per_class) {
  const Args args = check_args(points, threshold, batch_, class_ids_, ndim_, per_class);
  const int64_t n = args.n;
  const int ndim = args.ndim;
  at::Tensor roots = at::empty({n}, points.options().dtype(at::kLong));
  if (n == 0) return labels_from_roots(roots);
  const at::Tensor xyz_t = points.narrow(1, 0, ndim).to(at::kDouble).contiguous();
  const double* xyz = xyz_t.data_ptr<double>();
  const at::Tensor batch = batch_.has_value() ? batch_->contiguous() : at::Tensor();
  const at::Tensor classes = class_ids_.has_value() ? class_ids_->contiguous() : at::Tensor();
  const int64_t* b = batch.defined() ? batch.data_ptr<int64_t>() : nullptr;
  const int64_t* c = classes.defined() ? classes.data_ptr<int64_t>() : nullptr;
  int64_t* r = roots.data_ptr<int64_t>();

  // 1. Cell key of every point with a positive threshold (others are singletons); sort by
  //    (key, index) so every cell is a run whose first entry is its smallest point index.
  std::vector<Entry> entries;
  entries.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    r[i] = i;
    const double t = args.thresholds[per_class ? c[i] : 0];
    if (t > 0.0) entries.push_back({point_key(xyz, i, ndim, inverse_side(t, ndim), b ? b[i] : 0, c ? c[i] : 0), i});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& u, const Entry& v) {
    return key_less(u.key, v.key) || (!key_less(v.key, u.key) && u.index < v.index);
  });
  const int64_t m = static_cast<int64_t>(entries.size());
  std::vector<int64_t> start;  // cell k holds entries [start[k], start[k + 1])
  std::vector<CellKey> keys;
  std::vector<double> cell_t2;
  std::vector<double> sorted_xyz(m * ndim);  // coordinates in entry order: cell members are contiguous
  for (int64_t e = 0; e < m; ++e) {
    if (e == 0 || key_less(entries[e - 1].key, entries[e].key)) {
      start.push_back(e);
      keys.push_back(entries[e].key);
      const double t = args.thresholds[per_class ? c[entries[e].index] : 0];
      cell_t2.push_back(t * t);
    }
    for (int k = 0; k < ndim; ++k) sorted_xyz[e * ndim + k] = xyz[entries[e].index * ndim + k];
  }
  const int64_t num_cells = static_cast<int64_t>(keys.size());
  start.push_back(m);

  // 2. Union-find over cells (a cell is linked wholesale); link cells to their half-stencil columns
  //    as soon as one pair of points is closer than the threshold.
  Parent parent(num_cells);
  for (int64_t k = 0; k < num_cells; ++k) parent[k].store(k);
  const std::vector<Column> columns = half_stencil_columns(ndim);
  const int64_t num_cols = static_cast<int64_t>(columns.size());
  at::parallel_for(0, num_cells, 2048, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> ptr(num_cols);
    for (int64_t q = 0; q < num_cols; ++q) {
      const CellKey lo = column_key(keys[begin], columns[q], ndim, columns[q].lo);
      ptr[q] = std::lower_bound(keys.begin(), keys.end(), lo, key_less) - keys.begin();
    }
    for (int64_t a = begin; a < end; ++a) {
      const double t2 = cell_t2[a];
      for (int64_t q = 0; q < num_cols; ++q) {
        const CellKey lo = column_key(keys[a], columns[q], ndim, columns[q].lo);
        const CellKey hi = column_key(keys[a], columns[q], ndim, columns[q].hi);
        int64_t& p = ptr[q];
        while (p < num_cells && key_less(keys[p], lo)) ++p;
        for (int64_t nb = p; nb < num_cells && !key_less(hi, keys[nb]); ++nb) {
          if (find_root(parent, a) == find_root(parent, nb)) continue;
          bool linked = false;
          for (int64_t u = start[a]; u < start[a + 1] && !linked; ++u)
            for (int64_t v = start[nb]; v < start[nb + 1]; ++v) {
              if (squared_distance(sorted_xyz.data(), u, v, ndim) < t2) {
                linked = true;
                break;
              }
            }
          if (linked) unite(parent, a, nb);
        }
      }
    }
  });

  // 3. Root of every point = smallest point index of its component (cells are in key order, so take
  //    the minimum of the cells' first members over each component).
  std::vector<int64_t> first(num_cells, n);
  for (int64_t k = 0; k < num_cells; ++k) {
    const int64_t root = find_root(parent, k);
    first[root] = std::min(first[root], entries[start[k]].index);
  }
  for (int64_t k = 0; k < num_cells; ++k) {
    const int64_t f = first[find_root(parent, k)];
    for (int64_t e = start[k]; e < start[k + 1]; ++e) r[entries[e].index] = f;
  }
  return labels_from_roots(roots);
}

}  // namespace
}  // namespace fsdlite::connected_components

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("connected_components", &fsdlite::connected_components::connected_components_cpu);
}
