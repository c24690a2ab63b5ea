// Host-side pieces shared by the kpconv and kp_aggregate families: the geometry argument bundle,
// its validation (raising before any kernel runs), and the table of device primitives the
// chunked drivers call.  Each family compiles this header into its own library.
//
// The drivers never hold a (M, H, C) gather or an (M, K, C) correlation for the whole problem:
// queries are processed in chunks of `rows` queries, and the four primitives below work on one
// chunk (influences (rows, H, K); correlation acc (rows, K, C); its transpose-scatter into the
// feature gradient; kernel-point gradients).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <algorithm>
#include <string>

#include "fsdlite_ops/common.h"
#include "kp_geometry.h"

namespace fsdlite::kp {

inline Influence parse_influence(c10::string_view name, const char* op) {
  if (name == "constant") return Influence::Constant;
  if (name == "linear") return Influence::Linear;
  if (name == "gaussian") return Influence::Gaussian;
  TORCH_CHECK(false, op, ": influence must be one of 'constant', 'linear', 'gaussian', got '", std::string(name),
              "'");
}

inline bool parse_aggregation(c10::string_view name, const char* op) {
  if (name == "sum") return false;
  if (name == "nearest") return true;
  TORCH_CHECK(false, op, ": aggregation must be 'sum' or 'nearest', got '", std::string(name), "'");
}

// Validated, contiguous geometry of one call.
struct GeometryTensors {
  at::Tensor q_pts, s_pts, neighbors, kernel_points;
  Influence mode;
  double sigma;
  bool nearest;
  int64_t m, n, h, k;
  bool kp_per_query;

  template <typename T>
  Geometry<T> view() const {
    return Geometry<T>{q_pts.data_ptr<T>(), s_pts.data_ptr<T>(), neighbors.data_ptr<int64_t>(),
                       kernel_points.data_ptr<T>(), n, h, k, kp_per_query, mode, static_cast<T>(sigma), nearest};
  }
};

// Checks a dim-D tensor `arg` that accompanies the (N, C) features of a kernel-point op (weights,
// modulations, grad_out, ...): the features' dtype and device, size(0) == size0 and size(1) == size1
// (`what0` / `what1` say what those sizes are). Raises (TORCH_CHECK) naming the argument.
inline void check_companion(const at::Tensor& t, int64_t dim, const at::Tensor& features, int64_t size0,
                            const char* what0, int64_t size1, const char* what1, const char* op, const char* arg) {
  check_dim(t, dim, op, arg);
  check_dtype(t, features.scalar_type(), op, arg);
  check_same_device(features, t, op, "features", arg);
  check_size(t, 0, size0, op, arg, what0);
  check_size(t, 1, size1, op, arg, what1);
}

// Checks positions, neighbour indices and kernel points of a kernel-point op; `features` fixes the
// dtype and device.  Raises (TORCH_CHECK) naming the argument and the expected value.
inline GeometryTensors check_geometry(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                                      const at::Tensor& kernel_points, const at::Tensor& features, double sigma,
                                      c10::string_view influence, c10::string_view aggregation, const char* op) {
  GeometryTensors g;
  g.mode = parse_influence(influence, op);
  g.nearest = parse_aggregation(aggregation, op);
  TORCH_CHECK(features.scalar_type() == at::kFloat || features.scalar_type() == at::kDouble, op,
              ": features must be float32 or float64, got ", features.scalar_type());
  check_dim(features, 2, op, "features");
  check_dim(q_pts, 2, op, "q_pts");
  check_dim(s_pts, 2, op, "s_pts");
  check_dim(neighbors, 2, op, "neighbors");
  check_size(q_pts, 1, 3, op, "q_pts", "3 coordinates");
  check_size(s_pts, 1, 3, op, "s_pts", "3 coordinates");
  check_dtype(q_pts, features.scalar_type(), op, "q_pts");
  check_dtype(s_pts, features.scalar_type(), op, "s_pts");
  check_dtype(kernel_points, features.scalar_type(), op, "kernel_points");
  check_dtype(neighbors, at::kLong, op, "neighbors");
  g.m = q_pts.size(0);
  g.n = s_pts.size(0);
  g.h = neighbors.size(1);
  check_size(neighbors, 0, g.m, op, "neighbors", "q_pts.size(0)");
  check_size(features, 0, g.n, op, "features", "s_pts.size(0)");
  TORCH_CHECK(kernel_points.dim() == 2 || kernel_points.dim() == 3, op,
              ": kernel_points must be (K, 3) or (M, K, 3), got shape ", kernel_points.sizes());
  g.kp_per_query = kernel_points.dim() == 3;
  if (g.kp_per_query) check_size(kernel_points, 0, g.m, op, "kernel_points", "q_pts.size(0)");
  check_size(kernel_points, kernel_points.dim() - 1, 3, op, "kernel_points", "3 coordinates");
  g.k = kernel_points.size(kernel_points.dim() - 2);
  TORCH_CHECK(g.k >= 1, op, ": kernel_points must hold at least one kernel point, got shape ", kernel_points.sizes());
  check_same_device(features, q_pts, op, "features", "q_pts");
  check_same_device(features, s_pts, op, "features", "s_pts");
  check_same_device(features, neighbors, op, "features", "neighbors");
  check_same_device(features, kernel_points, op, "features", "kernel_points");
  TORCH_CHECK(std::isfinite(sigma) && (sigma > 0 || g.mode == Influence::Constant), op,
              ": sigma must be finite and > 0, got ", sigma);
  check_index_range(neighbors, 0, g.n + 1, op, "neighbors (N = s_pts.size(0) is the shadow neighbour)");
  g.sigma = sigma;
  g.q_pts = q_pts.contiguous();
  g.s_pts = s_pts.contiguous();
  g.neighbors = neighbors.contiguous();
  g.kernel_points = kernel_points.contiguous();
  return g;
}

// Checks the positions of a kernel-point op are finite (as every geometric op: a NaN position would give NaN
// rows). Run by the forward ops only, after check_geometry: a backward receives the positions its forward checked.
inline void check_positions_finite(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& kernel_points,
                                   const char* op) {
  check_finite(q_pts, op, "q_pts");
  check_finite(s_pts, op, "s_pts");
  check_finite(kernel_points, op, "kernel_points");
}

// Device primitives on one chunk of queries [start, start + rows).
struct Primitives {
  // infl (rows, H, K) <- influences of every neighbour slot.
  void (*influences)(const GeometryTensors& g, int64_t start, at::Tensor& infl);
  // acc (rows, K, C) <- sum_h infl[q, h, k] * x[nb[q, h]]  (shadow neighbours skipped).  With
  // `compute` the influences are computed here (and also stored into `infl` when it is defined);
  // otherwise they are read from `infl`.
  void (*gather)(const GeometryTensors& g, const at::Tensor& x, int64_t start, at::Tensor& acc, at::Tensor& infl,
                 bool compute);
  // gx[nb[q, h]] += sum_k infl[q, h, k] * t[q, k]   (the transpose of gather).
  void (*scatter)(const GeometryTensors& g, const at::Tensor& infl, const at::Tensor& t, int64_t start,
                  at::Tensor& gx);
  // out (rows, K, 3) += sum_h <t[q, k], x[nb[q, h]]> * d infl[q, h, k] / d kp[q, k].
  void (*kernel_grad)(const GeometryTensors& g, const at::Tensor& x, const at::Tensor& t, int64_t start,
                      at::Tensor& out);
  // Elements one chunk buffer may hold (bounds the transient memory of a call).
  int64_t chunk_elements;
};

// Queries per chunk so that the (rows, H, K) and (rows, K, C) buffers stay within the budget.
inline int64_t chunk_rows(const GeometryTensors& g, int64_t channels, int64_t budget) {
  const int64_t per_row = std::max<int64_t>({g.h * g.k, g.k * channels, int64_t(1)});
  return std::max<int64_t>(1, std::min<int64_t>(std::max<int64_t>(g.m, 1), budget / per_row));
}

}  // namespace fsdlite::kp
