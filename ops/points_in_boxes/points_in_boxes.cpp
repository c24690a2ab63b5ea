// Schemas of points_in_boxes / points_in_boxes_all and the device-agnostic argument checks and
// box preparation shared by the CPU and CUDA kernels.
#include "points_in_boxes.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/argsort.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <string>

#include "fsdlite_ops/common.h"

namespace fsdlite::points_in_boxes {
namespace {

at::Tensor checked_batch(const c10::optional<at::Tensor>& batch, int64_t n, const at::Tensor& like, const char* op,
                         const char* arg, const char* size_what) {
  if (!batch.has_value()) return at::zeros({n}, like.options().dtype(at::kLong));
  const at::Tensor& b = *batch;
  check_dtype(b, at::kLong, op, arg);
  check_dim(b, 1, op, arg);
  check_size(b, 0, n, op, arg, size_what);
  check_same_device(like, b, op, "points", arg);
  check_index_range(b, 0, INT64_MAX, op, arg);
  return b.contiguous();
}

}  // namespace

Prepared prepare(const at::Tensor& points, const at::Tensor& boxes, const c10::optional<at::Tensor>& point_batch,
                 const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin, const char* op) {
  check_floating(points, op, "points");
  check_dim(points, 2, op, "points");
  TORCH_CHECK(points.size(1) >= 3, op, ": points must have shape (N, >=3), got ", points.sizes());
  check_floating(boxes, op, "boxes");
  check_dim(boxes, 2, op, "boxes");
  check_size(boxes, 1, 7, op, "boxes", "7 (x, y, z, l, w, h, yaw)");
  check_same_device(points, boxes, op, "points", "boxes");
  TORCH_CHECK(point_batch.has_value() == box_batch.has_value(), op,
              ": point_batch and box_batch must be given together (or both omitted)");
  const bool bottom = box_origin == "bottom";
  TORCH_CHECK(bottom || box_origin == "center", op, ": box_origin must be 'bottom' or 'center', got '",
              std::string(box_origin), "'");

  Prepared out;
  out.points = points.contiguous();
  out.point_batch = checked_batch(point_batch, points.size(0), points, op, "point_batch", "points.size(0)");
  const at::Tensor bb = checked_batch(box_batch, boxes.size(0), points, op, "box_batch", "boxes.size(0)");

  const at::Tensor b = boxes.to(at::kDouble);
  const at::Tensor z = b.select(1, 2), half_h = b.select(1, 5) * 0.5;
  const at::Tensor z_low = bottom ? z : z - half_h;
  const at::Tensor z_high = bottom ? z + b.select(1, 5) : z + half_h;
  const at::Tensor yaw = b.select(1, 6);
  const at::Tensor half_l = b.select(1, 3) * 0.5, half_w = b.select(1, 4) * 0.5;
  const at::Tensor radius2 = (half_l * half_l + half_w * half_w) * (1.0 + 1e-9) + 1e-12;
  out.boxes.params = at::stack({b.select(1, 0), b.select(1, 1), z_low, z_high, half_l, half_w, at::cos(yaw),
                                at::sin(yaw), radius2},
                               1)
                         .contiguous();
  out.boxes.order = at::argsort(bb, /*stable=*/true);
  out.boxes.sorted_batch = bb.index_select(0, out.boxes.order).contiguous();
  return out;
}

}  // namespace fsdlite::points_in_boxes

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("points_in_boxes(Tensor points, Tensor boxes, Tensor? point_batch, Tensor? box_batch, str box_origin) "
        "-> Tensor");
  m.def("points_in_boxes_all(Tensor points, Tensor boxes, Tensor? point_batch, Tensor? box_batch, "
        "str box_origin) -> Tensor");
}
