// Host-side pieces of the rulebook CPU kernels (rulebook_cpu.cpp, offset_pairs_cpu.cpp): key -> row tables and
// the output cells an input voxel feeds.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "rulebook.h"

namespace fsdlite::rulebook {

// key -> value open-addressing table for n keys (the host side of TableView).
struct KeyTable {
  std::vector<Slot> slots;
  int64_t mask;

  explicit KeyTable(int64_t n) : slots(table_capacity(n), Slot{kEmpty, 0}), mask(slots.size() - 1) {}

  // Stores key -> value and returns -1, or returns the value already stored for key (nothing written).
  int64_t insert(int64_t key, int64_t value) {
    int64_t h = home_slot(key, mask);
    while (slots[h].key != kEmpty && slots[h].key != key) h = (h + 1) & mask;
    if (slots[h].key == key) return slots[h].value;
    slots[h] = Slot{key, value};
    return -1;
  }

  TableView view() const { return TableView{slots.data(), mask}; }
};

// key (table_key) -> row table of the valid input voxels; raises on a duplicate voxel.
inline KeyTable input_table(const at::Tensor& coors, const Geometry& g, const char* op) {
  KeyTable table(g.num_valid);
  const int64_t* c = coors.data_ptr<int64_t>();
  for (int64_t i = 0; i < g.num_valid; ++i) {
    const int64_t* r = c + 4 * i;
    const int64_t previous = table.insert(table_key(r[0], r[1], r[2], r[3], g.in_shape), i);
    if (previous >= 0) raise_duplicate(coors, previous, i, op);
  }
  return table;
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

}  // namespace fsdlite::rulebook
