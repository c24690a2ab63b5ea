// connected_components: shared host/device pieces of the CPU and CUDA kernels.
//
// Algorithm: points are binned into grid cells keyed by (sample, class, cell x, y[, z]).  The cell
// side is threshold / sqrt(D) (shrunk by 1e-7), so any two points of one cell are closer than the
// threshold and a cell is linked wholesale; linked pairs can only lie in cells at most 2 apart per
// axis, so each cell is compared with the lexicographically-positive half of its 5^D stencil until
// one pair of points is closer than the threshold.  Components live in a lock-free union-find whose
// parent pointers only decrease (larger roots link under smaller ones).  The CPU kernel sorts the
// cells (stencil columns become contiguous runs); the CUDA kernel uses a hash table.
// Distances are compared squared, in double precision: linked iff |p - q|^2 < t^2.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "fsdlite_ops/hash_table.h"

#ifdef __CUDACC__
#define FSDLITE_CC_HD __host__ __device__ inline
#else
#define FSDLITE_CC_HD inline
#endif

namespace fsdlite::connected_components {

constexpr int kStencilRadius = 2;         // cells per axis that may hold a linked point
constexpr double kSideShrink = 1.0 - 1e-7;  // keeps cell diagonals strictly below the threshold
constexpr double kMaxCell = 4503599627370496.0;  // 2^52: cell indices stay exact integers

struct CellKey {
  int64_t b, c, x, y, z;  // sample, class, cell coordinates (z = 0 for the 'xy' metric)
};

FSDLITE_CC_HD bool same_key(const CellKey& u, const CellKey& v) {
  return u.x == v.x && u.y == v.y && u.z == v.z && u.b == v.b && u.c == v.c;
}

FSDLITE_CC_HD uint64_t hash_key(const CellKey& k) {
  uint64_t h = hash_table::fmix64(static_cast<uint64_t>(k.x) + 0x9e3779b97f4a7c15ULL);
  h = hash_table::fmix64(h ^ static_cast<uint64_t>(k.y));
  h = hash_table::fmix64(h ^ static_cast<uint64_t>(k.z));
  h = hash_table::fmix64(h ^ static_cast<uint64_t>(k.b));
  return hash_table::fmix64(h ^ static_cast<uint64_t>(k.c));
}

// Inverse cell side for a threshold t > 0 in D dimensions.
FSDLITE_CC_HD double inverse_side(double t, int ndim) { return sqrt(static_cast<double>(ndim)) / (t * kSideShrink); }

// Key of point i (coordinates xyz, D per row) for inverse cell side `inv`.
FSDLITE_CC_HD CellKey point_key(const double* xyz, int64_t i, int ndim, double inv, int64_t b, int64_t c) {
  const double* p = xyz + i * ndim;
  CellKey k;
  k.b = b;
  k.c = c;
  k.x = static_cast<int64_t>(floor(p[0] * inv));
  k.y = static_cast<int64_t>(floor(p[1] * inv));
  k.z = ndim == 3 ? static_cast<int64_t>(floor(p[2] * inv)) : 0;
  return k;
}

FSDLITE_CC_HD double squared_distance(const double* xyz, int64_t i, int64_t j, int ndim) {
  double d2 = 0.0;
  for (int k = 0; k < ndim; ++k) {
    const double d = xyz[i * ndim + k] - xyz[j * ndim + k];
#ifdef __CUDA_ARCH__
    d2 = __dadd_rn(d2, __dmul_rn(d, d));  // no FMA contraction: same rounding as the CPU
#else
    d2 += d * d;
#endif
  }
  return d2;
}

// Number of half-stencil offsets and the k-th one (lexicographically positive offsets in [-2, 2]^D).
FSDLITE_CC_HD int half_stencil_size(int ndim) { return ndim == 3 ? 62 : 12; }

FSDLITE_CC_HD void half_stencil_offset(int k, int ndim, int64_t* o) {
  // Offsets in lexicographic order are symmetric around the centre; the positive half follows it.
  const int width = 2 * kStencilRadius + 1;
  int code = k + half_stencil_size(ndim) + 1;  // skip the negative half and the centre
  o[2] = 0;
  for (int a = ndim - 1; a >= 0; --a) {
    o[a] = code % width - kStencilRadius;
    code /= width;
  }
}

FSDLITE_CC_HD CellKey shifted(const CellKey& k, const int64_t* o) {
  CellKey s = k;
  s.x += o[0];
  s.y += o[1];
  s.z += o[2];
  return s;
}

// Validated arguments: thresholds as host doubles (one entry, or one per class).
struct Args {
  int64_t n;
  int ndim;
  bool per_class;
  std::vector<double> thresholds;
};

// Raises a RuntimeError naming the bad argument before any kernel runs.
Args check_args(const at::Tensor& points, const at::Tensor& threshold, const c10::optional<at::Tensor>& batch,
                const c10::optional<at::Tensor>& class_ids, int64_t ndim, bool per_class);

// Labels by first point from the root (smallest member index) of every point's component:
// returns (labels (N,) int64, num () int64) on the device of `roots`.
std::tuple<at::Tensor, at::Tensor> labels_from_roots(const at::Tensor& roots);

}  // namespace fsdlite::connected_components
