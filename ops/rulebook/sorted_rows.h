// Rulebooks over voxels in key order, shared by the CPU kernels (rulebook_cpu.cpp, offset_pairs_cpu.cpp).
//
// The valid rows are put in (b, z, y, x) key order once (a radix sort; a no-op for rows already sorted, which also
// rules out duplicates). In that order the cell at a fixed offset from row r has a key that ascends with r, so a
// submanifold map walks the sorted keys with one pointer per offset instead of hashing, and the outputs a strided
// conv's inputs reach at one offset ascend too. Rows are split into fixed chunks (one parallel task each), so
// results never depend on the thread count.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "rulebook.h"

namespace fsdlite::rulebook {

constexpr int64_t kChunk = 4096;  // sorted rows per parallel task

// Runs fn(chunk, begin, end) over the row chunks of [0, n) in parallel.
template <typename Fn>
void for_each_chunk(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch) fn(ch, ch * kChunk, std::min(n, (ch + 1) * kChunk));
  });
}

// Sorts non-negative keys below max_key (LSD radix sort, 11-bit digits), carrying `values` along when given.
inline void radix_sort(std::vector<int64_t>& keys, int64_t max_key, std::vector<int64_t>* values = nullptr) {
  constexpr int kBits = 11;
  constexpr int64_t kMask = (1 << kBits) - 1;
  const size_t n = keys.size();
  std::vector<int64_t> tmp(n), tmp_values(values ? n : 0);
  for (int shift = 0; shift < 63 && (max_key >> shift) > 0; shift += kBits) {
    std::vector<int64_t> count(kMask + 2, 0);
    for (const int64_t v : keys) ++count[((v >> shift) & kMask) + 1];
    for (int64_t d = 0; d <= kMask; ++d) count[d + 1] += count[d];
    for (size_t i = 0; i < n; ++i) {
      const int64_t at = count[(keys[i] >> shift) & kMask]++;
      tmp[at] = keys[i];
      if (values) tmp_values[at] = (*values)[i];
    }
    keys.swap(tmp);
    if (values) values->swap(tmp_values);
  }
}

// The valid rows in key (encode) order.
struct SortedRows {
  std::vector<int64_t> keys;  // ascending, unique
  std::vector<int64_t> rows;  // coors row of each key
  bool identity;              // the rows were already in key order (rows[i] == i)
};

// Sorts the first g.num_valid rows of coors (int64, contiguous) by key; raises on a duplicate voxel.
inline SortedRows sort_rows(const at::Tensor& coors, const Geometry& g, const char* op) {
  const int64_t n = g.num_valid;
  const int64_t* c = coors.data_ptr<int64_t>();
  SortedRows s{std::vector<int64_t>(n), std::vector<int64_t>(n), true};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* r = c + 4 * i;
    s.keys[i] = encode(r[0], r[1], r[2], r[3], g.in_shape);
    s.rows[i] = i;
    if (i > 0 && s.keys[i] <= s.keys[i - 1]) s.identity = false;
  }
  if (s.identity) return s;
  radix_sort(s.keys, g.num_batches * g.in_shape[0] * g.in_shape[1] * g.in_shape[2], &s.rows);
  for (int64_t i = 1; i < n; ++i) {
    if (s.keys[i] == s.keys[i - 1]) raise_duplicate(coors, std::min(s.rows[i - 1], s.rows[i]),
                                                    std::max(s.rows[i - 1], s.rows[i]), op);
  }
  return s;
}

// Per-axis shift of offset k of a submanifold kernel.
inline void subm_shift(int64_t k, const Geometry& g, int64_t* shift) {
  int64_t kzyx[3];
  kernel_index(k, g.kernel, kzyx);
  for (int a = 0; a < 3; ++a) shift[a] = (kzyx[a] - g.kernel[a] / 2) * g.dilation[a];
}

// fn(chunk, r, j, l) for every sorted row r and offsets[l] whose cell holds sorted row j (submanifold kernel);
// within a chunk and offset, r ascends.
template <typename Fn>
void walk_subm_neighbours(const int64_t* c, const SortedRows& s, const Geometry& g,
                          const std::vector<int64_t>& offsets, const Fn& fn) {
  const int64_t n = static_cast<int64_t>(s.keys.size()), num = static_cast<int64_t>(offsets.size());
  const std::vector<int64_t>& keys = s.keys;
  std::vector<int64_t> shifts(3 * num), delta(num);
  for (int64_t l = 0; l < num; ++l) {
    int64_t* sh = shifts.data() + 3 * l;
    subm_shift(offsets[l], g, sh);
    delta[l] = (sh[0] * g.in_shape[1] + sh[1]) * g.in_shape[2] + sh[2];
  }
  for_each_chunk(n, [&](int64_t ch, int64_t begin, int64_t end) {
    std::vector<int64_t> pos(num);  // per offset, the first key >= its target for row r
    for (int64_t l = 0; l < num; ++l)
      pos[l] = std::lower_bound(keys.begin(), keys.end(), keys[begin] + delta[l]) - keys.begin();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t* o = c + 4 * s.rows[r];
      for (int64_t l = 0; l < num; ++l) {
        const int64_t target = keys[r] + delta[l];
        int64_t& p = pos[l];
        while (p < n && keys[p] < target) ++p;
        if (p == n || keys[p] != target) continue;
        const int64_t* sh = shifts.data() + 3 * l;
        if (static_cast<uint64_t>(o[1] + sh[0]) >= static_cast<uint64_t>(g.in_shape[0]) ||
            static_cast<uint64_t>(o[2] + sh[1]) >= static_cast<uint64_t>(g.in_shape[1]) ||
            static_cast<uint64_t>(o[3] + sh[2]) >= static_cast<uint64_t>(g.in_shape[2]))
          continue;  // the key of a cell outside the grid aliases another cell
        fn(ch, r, p, l);
      }
    }
  });
}

// The output cells of a strided conv an input voxel feeds, with one division per axis: with
// t = c + padding = q * stride + rho, the kernel indices k with rho - k * dilation = 0 (mod stride) are
// first[rho], first[rho] + period, ..., feeding output coordinates q + base[rho], then step lower each.
class OutputReach {
 public:
  explicit OutputReach(const Geometry& g) : g_(g) {
    for (int a = 0; a < 3; ++a) {
      Axis& ax = axis_[a];
      const int64_t s = g.stride[a], d = g.dilation[a];
      const int64_t gcd = std::gcd(s, d);
      ax.period = s / gcd;
      ax.step = d / gcd;
      ax.first.assign(s, g.kernel[a]);  // kernel size: no kernel index reaches an output
      ax.base.assign(s, 0);
      for (int64_t kk = 0; kk < std::min(g.kernel[a], ax.period); ++kk) {
        const int64_t rho = (kk * d) % s;
        ax.first[rho] = kk;
        ax.base[rho] = (rho - kk * d) / s;
      }
    }
  }

  // fn(output key (encode), offset k) for every output cell input voxel r (b, z, y, x) feeds.
  template <typename Fn>
  void for_each(const int64_t* r, const Fn& fn) const {
    int64_t out[3][1024], kidx[3][1024];  // per axis: reachable output coordinates and their kernel indices
    int64_t count[3] = {0, 0, 0};
    for (int a = 0; a < 3; ++a) {
      const Axis& ax = axis_[a];
      const int64_t t = r[a + 1] + g_.padding[a], q = t / g_.stride[a], rho = t - q * g_.stride[a];
      int64_t o = q + ax.base[rho];
      for (int64_t kk = ax.first[rho]; kk < g_.kernel[a]; kk += ax.period, o -= ax.step) {
        if (o >= 0 && o < g_.out_shape[a]) {
          out[a][count[a]] = o;
          kidx[a][count[a]++] = kk;
        }
      }
    }
    for (int64_t z = 0; z < count[0]; ++z)
      for (int64_t y = 0; y < count[1]; ++y)
        for (int64_t x = 0; x < count[2]; ++x)
          fn(encode(r[0], out[0][z], out[1][y], out[2][x], g_.out_shape),
             (kidx[0][z] * g_.kernel[1] + kidx[1][y]) * g_.kernel[2] + kidx[2][x]);
  }

 private:
  struct Axis {
    int64_t period, step;
    std::vector<int64_t> first, base;  // per residue rho in [0, stride)
  };
  const Geometry& g_;
  Axis axis_[3];
};

// What the inputs of a strided conv reach, in sorted-input order: the sorted unique output keys, and for input i
// (sorted position) the entries [start[i], start[i + 1]) of (output row, offset).
struct ConvReach {
  std::vector<int64_t> out_keys, start, row, offset;
};

inline ConvReach conv_reach(const int64_t* c, const SortedRows& s, const Geometry& g) {
  const int64_t n = static_cast<int64_t>(s.keys.size());
  ConvReach cr;
  std::vector<int64_t> key;
  cr.start.assign(n + 1, 0);
  key.reserve(n * 4);
  cr.offset.reserve(n * 4);
  const OutputReach reach(g);
  for (int64_t i = 0; i < n; ++i) {
    reach.for_each(c + 4 * s.rows[i], [&](int64_t k_out, int64_t k) {
      key.push_back(k_out);
      cr.offset.push_back(k);
    });
    cr.start[i + 1] = static_cast<int64_t>(key.size());
  }
  // The keys sorted with their entry numbers; one pass then gives each entry the rank of its key among the distinct
  // keys (its output row) and lists those keys (no search per entry).
  const int64_t total = cr.start[n];
  std::vector<int64_t> entry(total);
  std::iota(entry.begin(), entry.end(), int64_t{0});
  radix_sort(key, g.num_batches * g.out_shape[0] * g.out_shape[1] * g.out_shape[2], &entry);
  cr.row.resize(total);
  cr.out_keys.reserve(total);
  for (int64_t j = 0; j < total; ++j) {
    if (j == 0 || key[j] != key[j - 1]) cr.out_keys.push_back(key[j]);
    cr.row[entry[j]] = static_cast<int64_t>(cr.out_keys.size()) - 1;
  }
  return cr;
}

// Output coordinates (b, z, y, x) of sorted output keys; a step along x needs no division.
inline void decode_sorted(const std::vector<int64_t>& keys, int64_t count, const int64_t* shape, int64_t* out) {
  for (int64_t r = 0; r < count; ++r) {
    int64_t* o = out + 4 * r;
    const int64_t step = r > 0 ? keys[r] - keys[r - 1] : -1;
    if (step > 0 && o[-1] + step < shape[2]) {
      o[0] = o[-4];
      o[1] = o[-3];
      o[2] = o[-2];
      o[3] = o[-1] + step;
    } else {
      decode(keys[r], shape, o);
    }
  }
}

}  // namespace fsdlite::rulebook
