// rulebook: neighbour maps ("rulebooks") of sparse 3D convolutions over padded voxel coordinates.
//
// Coordinates are (Vmax, 4) int64 rows [b, z, y, x]; only rows < num_valid are voxels, the rest is padding.
// Kernel offsets are enumerated in itertools.product order over (z, y, x) -- the order of spconv's weight
// (Cout, kz, ky, kx, Cin) -- so offset k = (kz * KY + ky) * KX + kx. Every neighbour map holds row indices of
// the convolution's input, with the dump index (= number of input rows) where there is no neighbour.
//
//   submanifold: output = input set; nbr[i, k] = row of c_i + (k - K/2) * dilation.
//   strided:     output o exists iff some input i and offset k satisfy o * stride = i + padding - k * dilation
//                (0 <= o < out_shape); outputs are sorted by key ((b * OZ + z) * OY + y) * OX + x, truncated
//                to max_out; nbr[o, k] = row of o * stride - padding + k * dilation.
//   inverse:     inv[i, k] = o where nbr[o, k] = i (the transposed pairs of a strided map).
//   pairs:       the real pairs of a map as a list grouped by offset (offset-major, then output row), each
//                offset's pairs starting a new tile of `tile` rows; rows [0] input, [1] output, [2] offset of
//                the tile (0 in unused tiles); pairs whose position reaches `capacity` are dropped (counted).
//   offset pairs: rulebook_subm_pairs / rulebook_conv_pairs take unpadded voxels (every row valid) and return
//                the pairs grouped by offset as sparse_conv uses them: (2, P) [input row; output row] and (K + 1,)
//                offset starts, output rows strictly increasing within an offset (a strided conv also returns its
//                exact output voxels, sorted by key).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <tuple>

#include "fsdlite_ops/hash_table.h"

#if defined(__CUDACC__)
#define FSDLITE_RB_HD __host__ __device__
#else
#define FSDLITE_RB_HD
#endif

namespace fsdlite::rulebook {

// Validated geometry of one call (axes in z, y, x order).
struct Geometry {
  int64_t in_shape[3];
  int64_t out_shape[3];
  int64_t kernel[3];
  int64_t stride[3];
  int64_t padding[3];
  int64_t dilation[3];
  int64_t kernel_volume;
  int64_t num_valid;    // rows [0, num_valid) of coors are voxels
  int64_t num_batches;  // max batch id + 1 over the valid rows (1 when there are none)
};

using ConvOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Argument checks (TORCH_CHECK naming the argument, its value and what was expected); all run before any
// kernel. `subm` requires odd kernel sizes; strided maps require a non-empty output grid.
Geometry check_geometry(const at::Tensor& coors, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                        c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                        c10::IntArrayRef dilation, bool subm, const char* op);
void check_max_out(int64_t max_out);
// rulebook_*_pairs: coors (V, 4) int64, every row a voxel.
void check_unpadded_coors(const at::Tensor& coors, const char* op);
void check_inverse_args(const at::Tensor& nbr, int64_t num_rows);
// rulebook_pairs: nbr (Vout, K) int64 in [0, num_in]; tile >= 1; 0 <= capacity, a multiple of tile.
void check_pairs_args(const at::Tensor& nbr, int64_t num_in, int64_t capacity, int64_t tile);

using PairOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;  // pairs (3, capacity), num_pairs, num_placed

// Raises the duplicate-voxel error for rows a < b sharing coordinates.
[[noreturn]] void raise_duplicate(const at::Tensor& coors, int64_t a, int64_t b, const char* op);
// Raises the error of a neighbour map that maps (row, offset) to two outputs.
[[noreturn]] void raise_inverse_conflict(int64_t row, int64_t k, int64_t o1, int64_t o2);

// Key tables: the shared open-addressing pieces of fsdlite_ops/hash_table.h (splitmix64 mixing, load
// factor <= 0.5, kEmpty = -1 marks a free slot since keys are >= 0).
using hash_table::kEmpty;
using hash_table::kEmptyWord;
using hash_table::mix_key;
using hash_table::table_capacity;

// One slot of a key -> value open-addressing table (key and value share a cache line).
struct Slot {
  int64_t key;
  int64_t value;
};

// Home slot of a key: runs of 16 consecutive keys share a home region of 16 slots (4 cache lines). With
// table_key() a run is a 4 x 4 (y, x) block, so the lookups of a voxel's 3 x 3 x 3 neighbours touch few
// cache lines, and consecutive voxels of a scan reuse them.
FSDLITE_RB_HD inline int64_t home_slot(int64_t key, int64_t mask) {
  const uint64_t h = (mix_key(static_cast<uint64_t>(key) >> 4) << 4) | (static_cast<uint64_t>(key) & 15u);
  return static_cast<int64_t>(h & static_cast<uint64_t>(mask));
}

// Read-only view of a key -> value table with linear probing (capacity mask + 1, a power of two).
struct TableView {
  const Slot* slots;
  int64_t mask;

  // Value of `key`, or `missing`.
  FSDLITE_RB_HD int64_t find(int64_t key, int64_t missing) const {
    int64_t h = home_slot(key, mask);
    while (true) {
      const int64_t k = slots[h].key;
      if (k == key) return slots[h].value;
      if (k == kEmpty) return missing;
      h = (h + 1) & mask;
    }
  }
};

// Key of grid cell (b, z, y, x) in a (nz, ny, nx) grid.
FSDLITE_RB_HD inline int64_t encode(int64_t b, int64_t z, int64_t y, int64_t x, const int64_t* shape) {
  return ((b * shape[0] + z) * shape[1] + y) * shape[2] + x;
}

// Table key of cell (b, z, y, x): 4 x 4 (y, x) blocks are runs of 16 consecutive keys (see home_slot).
FSDLITE_RB_HD inline int64_t table_key(int64_t b, int64_t z, int64_t y, int64_t x, const int64_t* shape) {
  const int64_t by = (shape[1] + 3) >> 2, bx = (shape[2] + 3) >> 2;
  return (((((b * shape[0] + z) * by + (y >> 2)) * bx + (x >> 2)) << 4) | ((y & 3) << 2) | (x & 3));
}

FSDLITE_RB_HD inline void decode(int64_t key, const int64_t* shape, int64_t* out) {
  out[3] = key % shape[2];
  key /= shape[2];
  out[2] = key % shape[1];
  key /= shape[1];
  out[1] = key % shape[0];
  out[0] = key / shape[0];
}

// Offset index k -> per-axis kernel index (z, y, x).
FSDLITE_RB_HD inline void kernel_index(int64_t k, const int64_t* kernel, int64_t* kzyx) {
  kzyx[2] = k % kernel[2];
  k /= kernel[2];
  kzyx[1] = k % kernel[1];
  kzyx[0] = k / kernel[1];
}

// Table key of the input cell read by output cell `o` (b, z, y, x) at offset k of a strided conv (or kEmpty
// when it lies outside the input grid). With subm=true: cell o + (k - K/2) * dilation.
FSDLITE_RB_HD inline int64_t input_key(const int64_t* o, int64_t k, const Geometry& g, bool subm) {
  int64_t kzyx[3], c[3];
  kernel_index(k, g.kernel, kzyx);
  for (int a = 0; a < 3; ++a) {
    c[a] = subm ? o[a + 1] + (kzyx[a] - g.kernel[a] / 2) * g.dilation[a]
                : o[a + 1] * g.stride[a] - g.padding[a] + kzyx[a] * g.dilation[a];
    if (c[a] < 0 || c[a] >= g.in_shape[a]) return kEmpty;
  }
  return table_key(o[0], c[0], c[1], c[2], g.in_shape);
}

// Per-axis output coordinate written by input coordinate `c` at kernel index `kk` on axis `a`, or -1.
FSDLITE_RB_HD inline int64_t output_coordinate(int64_t c, int64_t kk, int a, const Geometry& g) {
  const int64_t t = c + g.padding[a] - kk * g.dilation[a];
  if (t < 0 || t % g.stride[a] != 0) return -1;
  const int64_t o = t / g.stride[a];
  return o < g.out_shape[a] ? o : -1;
}

// Upper bound of the outputs one input voxel reaches. Per axis, the kernel indices k with
// k * dilation == r (mod stride) repeat with period stride / gcd(stride, dilation).
inline int64_t outputs_per_input(const Geometry& g) {
  int64_t n = 1;
  for (int a = 0; a < 3; ++a) {
    int64_t x = g.stride[a], y = g.dilation[a];
    while (y != 0) {
      const int64_t t = x % y;
      x = y;
      y = t;
    }
    const int64_t period = g.stride[a] / x;
    n *= (g.kernel[a] + period - 1) / period;
  }
  return n;
}

}  // namespace fsdlite::rulebook
