// Kernel-point geometry shared by the kpconv and kp_aggregate op families (host and device).
//
// A query q has H neighbour slots nb[q, h] in [0, N]; index N is the shadow neighbour (zero
// feature, infinitely far: it never influences anything).  The influence of neighbour j on kernel
// point k of query q is h(d2) with d2 = |s_j - q_q - kp_k|^2 and
//   constant: 1,   linear: max(0, 1 - d / sigma),   gaussian: exp(-d2 / (2 (0.3 sigma)^2)).
// In nearest mode only the closest kernel point (first one on ties) receives the influence.
// Kernel points are shared (K, 3) or per query (M, K, 3) (deformable convolutions).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FSDLITE_KP_HD __host__ __device__ __forceinline__
#else
#define FSDLITE_KP_HD inline
#endif

namespace fsdlite::kp {

enum class Influence : int { Constant = 0, Linear = 1, Gaussian = 2 };

template <typename T>
FSDLITE_KP_HD T kp_sqrt(T v) {
#if defined(__CUDA_ARCH__)
  return sqrt(v);
#else
  return std::sqrt(v);
#endif
}

template <typename T>
FSDLITE_KP_HD T kp_exp(T v) {
#if defined(__CUDA_ARCH__)
  return exp(v);
#else
  return std::exp(v);
#endif
}

// Influence h(d2) and its slope dh/d(d2) (0 where h is flat or not differentiable, e.g. d = 0).
template <typename T>
FSDLITE_KP_HD T influence_of(Influence mode, T d2, T sigma, T* slope) {
  if (mode == Influence::Linear) {
    if (d2 >= sigma * sigma) {  // outside the extent: no sqrt needed
      *slope = T(0);
      return T(0);
    }
    const T d = kp_sqrt(d2);
    *slope = d > T(0) ? T(-0.5) / (sigma * d) : T(0);
    return T(1) - d / sigma;
  }
  if (mode == Influence::Gaussian) {
    const T two_s2 = T(2) * T(0.09) * sigma * sigma;  // 2 (0.3 sigma)^2
    const T h = kp_exp(-d2 / two_s2);
    *slope = -h / two_s2;
    return h;
  }
  *slope = T(0);
  return T(1);
}

// Raw pointers (contiguous) describing one kernel-point neighbourhood problem.
template <typename T>
struct Geometry {
  const T* q_pts;      // (M, 3)
  const T* s_pts;      // (N, 3)
  const int64_t* nb;   // (M, H), values in [0, N]
  const T* kp;         // (K, 3) or (M, K, 3)
  int64_t n, h, k;     // supports, neighbour slots, kernel points
  bool kp_per_query;
  Influence mode;
  T sigma;
  bool nearest;

  FSDLITE_KP_HD const T* kernel(int64_t q) const { return kp_per_query ? kp + q * k * 3 : kp; }

  // Neighbour index of slot (q, s); n for the shadow neighbour.
  FSDLITE_KP_HD int64_t neighbor(int64_t q, int64_t s) const { return nb[q * h + s]; }

  // Offset r = s_j - q_q - kp_k and its squared norm.
  FSDLITE_KP_HD T offset(int64_t q, int64_t j, int64_t kk, T* r) const {
    const T* kpk = kernel(q) + kk * 3;
    T d2 = T(0);
    for (int a = 0; a < 3; ++a) {
      r[a] = s_pts[j * 3 + a] - q_pts[q * 3 + a] - kpk[a];
      d2 += r[a] * r[a];
    }
    return d2;
  }

  // Index of the kernel point closest to neighbour j of query q (first one on ties).
  FSDLITE_KP_HD int64_t nearest_kernel(int64_t q, int64_t j) const {
    T r[3];
    int64_t best = 0;
    T best_d2 = offset(q, j, 0, r);
    for (int64_t kk = 1; kk < k; ++kk) {
      const T d2 = offset(q, j, kk, r);
      if (d2 < best_d2) {
        best_d2 = d2;
        best = kk;
      }
    }
    return best;
  }

  // Writes the K influences of slot (q, s) into w (zeros for the shadow neighbour).  The squared
  // distances are computed first in a branch-free loop (w doubles as their storage).
  FSDLITE_KP_HD void influences(int64_t q, int64_t s, T* w) const {
    const int64_t j = neighbor(q, s);
    if (j >= n) {
      for (int64_t kk = 0; kk < k; ++kk) w[kk] = T(0);
      return;
    }
    const T* kpq = kernel(q);
    const T dx = s_pts[j * 3] - q_pts[q * 3], dy = s_pts[j * 3 + 1] - q_pts[q * 3 + 1],
            dz = s_pts[j * 3 + 2] - q_pts[q * 3 + 2];
    for (int64_t kk = 0; kk < k; ++kk) {
      const T ex = dx - kpq[kk * 3], ey = dy - kpq[kk * 3 + 1], ez = dz - kpq[kk * 3 + 2];
      w[kk] = ex * ex + ey * ey + ez * ez;
    }
    T slope;
    if (nearest) {
      int64_t best = 0;
      for (int64_t kk = 1; kk < k; ++kk)
        if (w[kk] < w[best]) best = kk;
      const T value = influence_of(mode, w[best], sigma, &slope);
      for (int64_t kk = 0; kk < k; ++kk) w[kk] = T(0);
      w[best] = value;
      return;
    }
    for (int64_t kk = 0; kk < k; ++kk) w[kk] = influence_of(mode, w[kk], sigma, &slope);
  }

  // Derivative of the influence of (q, j, kernel point kk) with respect to that kernel point's
  // position: d h / d kp = slope * (-2 r).  Returns false when it is zero.
  FSDLITE_KP_HD bool influence_grad(int64_t q, int64_t j, int64_t kk, T* dh_dkp) const {
    T r[3], slope;
    influence_of(mode, offset(q, j, kk, r), sigma, &slope);
    if (slope == T(0)) return false;
    for (int a = 0; a < 3; ++a) dh_dkp[a] = T(-2) * slope * r[a];
    return true;
  }
};

}  // namespace fsdlite::kp
