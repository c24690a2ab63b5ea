// Bird's-eye-view (BEV) box overlap shared by the CPU and CUDA kernels of the iou3d family.
//
// A lidar box [x, y, z, l, w, h, yaw] seen from above is the rectangle centred at (x, y) with
// extent l along the heading (cos yaw, sin yaw) and w across it.  Rotated overlap clips box A's
// polygon by the four half-planes of box B (Sutherland-Hodgman) and takes the shoelace area;
// axis-aligned overlap ignores yaw (mmdet3d's nms_normal_bev convention).  All geometry runs in
// double precision relative to A's centre (small, well-conditioned numbers), whatever the input dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define FSDLITE_IOU3D_HD __host__ __device__ inline
#else
#define FSDLITE_IOU3D_HD inline
#endif

namespace fsdlite::iou3d {

// Columns of a 7-dof lidar box used by BEV overlap.
constexpr int64_t kX = 0, kY = 1, kL = 3, kW = 4, kYaw = 6, kMinCols = 7;

struct BevBox {
  double x, y;    // centre
  double hl, hw;  // half length (along the heading) and half width
  double c, s;    // heading cosine and sine (1, 0 when axis-aligned)
  double r;       // circumradius, for quick rejection
};

FSDLITE_IOU3D_HD BevBox make_box(double x, double y, double l, double w, double yaw, bool axis_aligned) {
  BevBox b;
  b.x = x;
  b.y = y;
  b.hl = 0.5 * l;
  b.hw = 0.5 * w;
  b.c = axis_aligned ? 1.0 : cos(yaw);
  b.s = axis_aligned ? 0.0 : sin(yaw);
  b.r = sqrt(b.hl * b.hl + b.hw * b.hw);
  return b;
}

FSDLITE_IOU3D_HD double area(const BevBox& b) { return 4.0 * b.hl * b.hw; }

// Inline min/max (host fmin/fmax are library calls that block vectorisation; inputs are finite).
FSDLITE_IOU3D_HD double min2(double u, double v) { return u < v ? u : v; }
FSDLITE_IOU3D_HD double max2(double u, double v) { return u > v ? u : v; }

// True when the circumcircles are apart, so the boxes cannot overlap.
FSDLITE_IOU3D_HD bool far_apart(const BevBox& a, const BevBox& b) {
  const double ox = b.x - a.x, oy = b.y - a.y;
  return ox * ox + oy * oy >= (a.r + b.r) * (a.r + b.r) * (1.0 + 1e-9);
}

// Intersection area of two axis-aligned rectangles (yaw ignored).
FSDLITE_IOU3D_HD double axis_aligned_intersection(const BevBox& a, const BevBox& b) {
  const double dx = min2(a.x + a.hl, b.x + b.hl) - max2(a.x - a.hl, b.x - b.hl);
  const double dy = min2(a.y + a.hw, b.y + b.hw) - max2(a.y - a.hw, b.y - b.hw);
  return (dx > 0.0 && dy > 0.0) ? dx * dy : 0.0;
}

// Polygon capacity: a rectangle clipped by 4 half-planes has at most 8 vertices; rounding on nearly
// collinear vertices may add a few more, which the capacity absorbs (extra points lie on the edge).
constexpr int kMaxVertices = 16;

// Clips polygon (px, py, n) by the half-plane {p : dist(p) >= 0}, dist(p) = half - sign * <p - o, axis>.
// Vertices on the line are kept; an intersection point is added only on a strict sign change.
FSDLITE_IOU3D_HD int clip_half_plane(const double* px, const double* py, int n, double ox, double oy, double ax,
                                     double ay, double half, double* qx, double* qy) {
  double d[kMaxVertices];
  for (int i = 0; i < n; ++i) d[i] = half - ((px[i] - ox) * ax + (py[i] - oy) * ay);
  int m = 0;
  for (int i = 0; i < n; ++i) {
    const int j = (i + 1 == n) ? 0 : i + 1;
    if (d[i] >= 0.0 && m < kMaxVertices) {
      qx[m] = px[i];
      qy[m] = py[i];
      ++m;
    }
    if (((d[i] > 0.0 && d[j] < 0.0) || (d[i] < 0.0 && d[j] > 0.0)) && m < kMaxVertices) {
      const double t = d[i] / (d[i] - d[j]);  // denominator is nonzero on a strict sign change
      qx[m] = px[i] + t * (px[j] - px[i]);
      qy[m] = py[i] + t * (py[j] - py[i]);
      ++m;
    }
  }
  return m;
}

// Intersection area of two rotated rectangles (convex polygon clipping), in double precision.
FSDLITE_IOU3D_HD double rotated_intersection(const BevBox& a, const BevBox& b) {
  // Work relative to A's centre.
  const double ox = b.x - a.x, oy = b.y - a.y;
  double px[kMaxVertices], py[kMaxVertices], qx[kMaxVertices], qy[kMaxVertices];
  // A's corners, counter-clockwise: local (+l,+w), (-l,+w), (-l,-w), (+l,-w).
  const double sx[4] = {1.0, -1.0, -1.0, 1.0}, sy[4] = {1.0, 1.0, -1.0, -1.0};
  for (int k = 0; k < 4; ++k) {
    const double lx = sx[k] * a.hl, ly = sy[k] * a.hw;
    px[k] = a.c * lx - a.s * ly;
    py[k] = a.s * lx + a.c * ly;
  }
  int n = 4;
  // B's half-planes: |<p - o, u>| <= hl and |<p - o, v>| <= hw with u = (c, s), v = (-s, c).
  const double axes[4][3] = {{b.c, b.s, b.hl}, {-b.c, -b.s, b.hl}, {-b.s, b.c, b.hw}, {b.s, -b.c, b.hw}};
  for (int e = 0; e < 4 && n > 0; ++e) {
    if (e % 2 == 0) n = clip_half_plane(px, py, n, ox, oy, axes[e][0], axes[e][1], axes[e][2], qx, qy);
    else n = clip_half_plane(qx, qy, n, ox, oy, axes[e][0], axes[e][1], axes[e][2], px, py);
  }
  if (n < 3) return 0.0;
  double twice = 0.0;
  for (int i = 0; i < n; ++i) {
    const int j = (i + 1 == n) ? 0 : i + 1;
    twice += px[i] * py[j] - px[j] * py[i];
  }
  const double inter = 0.5 * twice;
  const double cap = min2(area(a), area(b));
  return inter <= 0.0 ? 0.0 : (inter > cap ? cap : inter);
}

// BEV intersection-over-union; 0 when the union is empty (degenerate boxes never give NaN).
FSDLITE_IOU3D_HD double bev_iou(const BevBox& a, const BevBox& b, bool axis_aligned) {
  if (far_apart(a, b)) return 0.0;
  const double inter = axis_aligned ? axis_aligned_intersection(a, b) : rotated_intersection(a, b);
  const double uni = area(a) + area(b) - inter;
  return uni > 0.0 ? inter / uni : 0.0;
}

// Reads row i of a (N, >=7) box tensor (row stride `stride`) into a BevBox.
template <typename scalar_t>
FSDLITE_IOU3D_HD BevBox load_box(const scalar_t* boxes, int64_t i, int64_t stride, bool axis_aligned) {
  const scalar_t* row = boxes + i * stride;
  return make_box(static_cast<double>(row[kX]), static_cast<double>(row[kY]), static_cast<double>(row[kL]),
                  static_cast<double>(row[kW]), static_cast<double>(row[kYaw]), axis_aligned);
}

// Shared argument checks (raise RuntimeError before any kernel runs).
void check_boxes(const at::Tensor& boxes, const char* op, const char* arg);
void check_iou_args(const at::Tensor& boxes_a, const at::Tensor& boxes_b);
void check_nms_args(const at::Tensor& boxes, const at::Tensor& groups, double iou_threshold);

}  // namespace fsdlite::iou3d
