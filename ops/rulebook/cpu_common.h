// Host-side pieces of the rulebook CPU kernels (rulebook_cpu.cpp, offset_pairs_cpu.cpp): key -> row tables and
// the output cells an input voxel feeds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
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

// fn(output key (encode), offset k) for every output cell of a strided conv that input voxel r feeds.
template <typename Fn>
void for_each_output(const int64_t* r, const Geometry& g, const Fn& fn) {
  int64_t out[3][1024], kidx[3][1024];  // per axis: reachable output coordinates and their kernel indices
  int64_t count[3] = {0, 0, 0};
  for (int a = 0; a < 3; ++a) {
    for (int64_t kk = 0; kk < g.kernel[a]; ++kk) {
      const int64_t o = output_coordinate(r[a + 1], kk, a, g);
      if (o >= 0) {
        out[a][count[a]] = o;
        kidx[a][count[a]++] = kk;
      }
    }
  }
  for (int64_t z = 0; z < count[0]; ++z)
    for (int64_t y = 0; y < count[1]; ++y)
      for (int64_t x = 0; x < count[2]; ++x)
        fn(encode(r[0], out[0][z], out[1][y], out[2][x], g.out_shape),
           (kidx[0][z] * g.kernel[1] + kidx[1][y]) * g.kernel[2] + kidx[2][x]);
}

}  // namespace fsdlite::rulebook
