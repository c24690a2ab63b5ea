// Schema and shared argument checks of connected_components.
#include "connected_components.h"

#include <ATen/ops/abs.h>
#include <ATen/ops/all.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/max.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"

namespace fsdlite::connected_components {

namespace {
constexpr const char* kOp = "connected_components";

void check_ids(const c10::optional<at::Tensor>& ids, const at::Tensor& points, const char* arg) {
  if (!ids.has_value()) return;
  check_dtype(*ids, at::kLong, kOp, arg);
  check_dim(*ids, 1, kOp, arg);
  check_size(*ids, 0, points.size(0), kOp, arg, "points.size(0)");
  check_same_device(points, *ids, kOp, "points", arg);
}
}  // namespace

Args check_args(const at::Tensor& points, const at::Tensor& threshold, const c10::optional<at::Tensor>& batch,
                const c10::optional<at::Tensor>& class_ids, int64_t ndim, bool per_class) {
  TORCH_CHECK(ndim == 2 || ndim == 3, kOp, ": ndim must be 2 ('xy') or 3 ('xyz'), got ", ndim);
  check_floating(points, kOp, "points");
  check_dim(points, 2, kOp, "points");
  TORCH_CHECK(points.size(1) >= ndim, kOp, ": points must have >= ", ndim, " columns for this metric, got shape ",
              points.sizes());
  check_ids(batch, points, "batch");
  check_ids(class_ids, points, "class_ids");
  check_floating(threshold, kOp, "threshold");
  check_dim(threshold, 1, kOp, "threshold");
  TORCH_CHECK(threshold.size(0) >= 1 && (per_class || threshold.size(0) == 1), kOp,
              ": threshold must hold one value, or one per class, got shape ", threshold.sizes());
  Args args{points.size(0), static_cast<int>(ndim), per_class, {}};
  const at::Tensor host = threshold.to(at::kCPU, at::kDouble).contiguous();
  args.thresholds.assign(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
  double max_inv = 0.0, smallest = 0.0;
  for (const double t : args.thresholds) {
    TORCH_CHECK(std::isfinite(t) && t >= 0.0, kOp, ": threshold values must be finite and >= 0, got ", t);
    if (t > 0.0) max_inv = std::max(max_inv, inverse_side(t, args.ndim));
    if (t > 0.0 && (smallest == 0.0 || t < smallest)) smallest = t;
  }
  if (per_class) {
    TORCH_CHECK(class_ids.has_value(), kOp, ": a per-class threshold needs class_ids");
    check_index_range(*class_ids, 0, threshold.size(0), kOp, "class_ids");
  }
  if (args.n == 0) return args;
  const at::Tensor coords = points.narrow(1, 0, ndim);
  check_finite(coords, kOp, "points");  // its first ndim columns
  const double max_abs = at::abs(coords).max().item<double>();
  TORCH_CHECK(max_abs * max_inv < kMaxCell, kOp, ": threshold=", smallest, " is too small for coordinates of ",
              "magnitude ", max_abs, " (grid cell indices would overflow); expected threshold > ",
              max_abs * 2.0 / kMaxCell);
  return args;
}

std::tuple<at::Tensor, at::Tensor> labels_from_roots(const at::Tensor& roots) {
  const at::Tensor is_root = at::eq(roots, at::arange(roots.size(0), roots.options()));
  const at::Tensor rank = at::sub(at::cumsum(is_root, 0, at::kLong), 1);
  return {rank.index_select(0, roots), at::sum(is_root, at::kLong)};
}

}  // namespace fsdlite::connected_components

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  // points (N, >=ndim) float, threshold (1,) or (C,) float, batch/class_ids (N,) int64 ->
  // (labels (N,) int64 ordered by first point, num () int64).
  m.def(
      "connected_components(Tensor points, Tensor threshold, Tensor? batch, Tensor? class_ids, int ndim, "
      "bool per_class) -> (Tensor, Tensor)");
}
