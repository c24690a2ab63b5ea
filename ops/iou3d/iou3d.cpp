// Schemas and shared argument checks of the iou3d family (BEV IoU and NMS of 7-dof lidar boxes).
#include <ATen/ops/all.h>
#include <ATen/ops/any.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/logical_not.h>
#include <torch/library.h>

#include <cmath>

#include "fsdlite_ops/common.h"
#include "iou3d.h"

namespace fsdlite::iou3d {

void check_boxes(const at::Tensor& boxes, const char* op, const char* arg) {
  check_floating(boxes, op, arg);
  check_dim(boxes, 2, op, arg);
  TORCH_CHECK(boxes.size(1) >= kMinCols, op, ": ", arg, " must have >= 7 columns [x, y, z, l, w, h, yaw], got shape ",
              boxes.sizes());
  if (boxes.numel() == 0) return;
  check_finite(boxes, op, arg);
  const at::Tensor negative = at::lt(boxes.narrow(1, kL, 2), 0);
  if (negative.any().item<bool>()) {  // the error path: name the first offending value and where it is
    const at::Tensor first = negative.nonzero().select(0, 0).contiguous().cpu();  // (nonzero's rows are strided)
    const int64_t row = first.const_data_ptr<int64_t>()[0], col = first.const_data_ptr<int64_t>()[1] + kL;
    TORCH_CHECK(false, op, ": ", arg, " must have sizes l, w >= 0, got ", arg, "[", row, ", ", col, "]=",
                boxes.select(0, row).select(0, col).item<double>());
  }
}

void check_iou_args(const at::Tensor& boxes_a, const at::Tensor& boxes_b) {
  constexpr const char* op = "boxes_iou_bev";
  check_boxes(boxes_a, op, "boxes_a");
  check_boxes(boxes_b, op, "boxes_b");
  check_same_device(boxes_a, boxes_b, op, "boxes_a", "boxes_b");
  TORCH_CHECK(boxes_a.scalar_type() == boxes_b.scalar_type(), op, ": boxes_b must have the dtype of boxes_a (",
              boxes_a.scalar_type(), "), got ", boxes_b.scalar_type());
}

void check_nms_args(const at::Tensor& boxes, const at::Tensor& groups, double iou_threshold) {
  constexpr const char* op = "nms_bev";
  check_boxes(boxes, op, "boxes");
  check_dtype(groups, at::kLong, op, "groups");
  check_dim(groups, 1, op, "groups");
  check_size(groups, 0, boxes.size(0), op, "groups", "boxes.size(0)");
  check_same_device(boxes, groups, op, "boxes", "groups");
  TORCH_CHECK(std::isfinite(iou_threshold) && iou_threshold >= 0.0 && iou_threshold <= 1.0, op,
              ": iou_threshold must lie in [0, 1], got ", iou_threshold);
}

}  // namespace fsdlite::iou3d

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  // (N, >=7), (M, >=7) -> (N, M) BEV IoU (rotated, or axis-aligned ignoring yaw).
  m.def("boxes_iou_bev(Tensor boxes_a, Tensor boxes_b, bool axis_aligned) -> Tensor");
  // Greedy NMS over boxes given in priority order: keep[j] is false iff an earlier kept box of the same
  // group overlaps box j with IoU > iou_threshold.  (K, >=7), (K,) int64 -> (K,) bool.
  m.def("nms_bev_mask(Tensor boxes, Tensor groups, float iou_threshold, bool axis_aligned) -> Tensor");
}
