// points_in_boxes: which 7-dof lidar box (x, y, z, l, w, h, yaw) contains each point.
//
// Rule (mmcv): a point is inside when its offset, rotated by -yaw into the box frame, lies strictly
// inside the box footprint (|local_x| < l/2, |local_y| < w/2) and inclusively inside the vertical
// extent (z_low <= z <= z_high).  Points are only tested against boxes of their own sample (batch id);
// when boxes overlap, the box with the smallest index wins.
//
// All geometry is evaluated in double precision with explicitly rounded operations (no fused
// multiply-add), so the CPU kernel, the CUDA kernel and the pure-torch reference agree bit for bit.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <cstdint>

#if defined(__CUDACC__)
#define FSDLITE_PIB_HOST_DEVICE __host__ __device__
#else
#define FSDLITE_PIB_HOST_DEVICE
#endif

namespace fsdlite::points_in_boxes {

// Per-box parameters prepared once per call (double): centre x/y, vertical limits, half sizes, cos/sin(yaw),
// and the squared radius of a circle safely enclosing the footprint (a cheap early reject).
enum BoxParam : int64_t { kCx = 0, kCy, kZLow, kZHigh, kHalfL, kHalfW, kCos, kSin, kRadius2, kNumParams };

// The boxes of one call, grouped by sample: `order` lists box indices sorted by (batch, index) and
// `sorted_batch` the matching batch ids, so the boxes of sample b are a contiguous, index-ordered run.
struct PreparedBoxes {
  at::Tensor params;        // (M, kNumParams) double
  at::Tensor order;         // (M,) int64
  at::Tensor sorted_batch;  // (M,) int64
};

// Validates every argument (raising a RuntimeError naming the bad one) and returns (points as a
// contiguous (N, >=3) tensor, point batch ids (N,) int64, prepared boxes).  Works on any device.
struct Prepared {
  at::Tensor points;
  at::Tensor point_batch;
  PreparedBoxes boxes;
};
Prepared prepare(const at::Tensor& points, const at::Tensor& boxes, const c10::optional<at::Tensor>& point_batch,
                 const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin, const char* op);

namespace detail {

#if defined(__CUDACC__)
FSDLITE_PIB_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
FSDLITE_PIB_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
FSDLITE_PIB_HOST_DEVICE inline double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
#else
inline double mul(double a, double b) { return a * b; }
inline double add(double a, double b) { return a + b; }
inline double sub(double a, double b) { return a - b; }
#endif

}  // namespace detail

// True when point (px, py, pz) lies in the box whose parameters start at `p` (see BoxParam).
FSDLITE_PIB_HOST_DEVICE inline bool contains(const double* p, double px, double py, double pz) {
  using namespace detail;
  if (!(pz >= p[kZLow] && pz <= p[kZHigh])) return false;
  const double dx = sub(px, p[kCx]);
  const double dy = sub(py, p[kCy]);
  // Outside the padded circumscribed circle: certainly outside (the padding dwarfs rounding errors), so
  // skipping the exact test cannot change any answer.
  if (add(mul(dx, dx), mul(dy, dy)) > p[kRadius2]) return false;
  const double local_x = add(mul(dx, p[kCos]), mul(dy, p[kSin]));
  const double local_y = sub(mul(dy, p[kCos]), mul(dx, p[kSin]));
  return local_x > -p[kHalfL] && local_x < p[kHalfL] && local_y > -p[kHalfW] && local_y < p[kHalfW];
}

// First position in sorted[0, n) whose value is >= key (lower) or > key (upper).
FSDLITE_PIB_HOST_DEVICE inline int64_t bound(const int64_t* sorted, int64_t n, int64_t key, bool upper) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (upper ? sorted[mid] <= key : sorted[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace fsdlite::points_in_boxes
