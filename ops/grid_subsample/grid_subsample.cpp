// Schema and shared argument checks of grid_subsample.
#include "grid_subsample.h"

#include <torch/library.h>

#include <cmath>

#include "../knn/neighbor_args.h"

namespace fsdlite::grid_subsample {

void check_args(const at::Tensor& points, c10::ArrayRef<double> voxel_size, const c10::optional<at::Tensor>& batch,
                const c10::optional<at::Tensor>& features, const c10::optional<at::Tensor>& labels) {
  constexpr const char* op = "grid_subsample";
  neighbors::check_coordinates(points, op, "points");
  check_size(points, 1, 3, op, "points", "3 (x, y, z)");
  TORCH_CHECK(voxel_size.size() == 3, op, ": voxel_size must have 3 values, got ", voxel_size.size());
  for (double v : voxel_size)
    TORCH_CHECK(std::isfinite(v) && v > 0, op, ": voxel_size values must be finite and > 0, got ", voxel_size);
  if (points.size(0) > 0) {
    const at::Tensor extent = points.abs().amax(0).to(at::kDouble).cpu();
    for (int64_t d = 0; d < 3; ++d) {
      const double key = extent[d].item<double>() / voxel_size[d];
      TORCH_CHECK(key < kMaxCellKey, op, ": points[:, ", d, "] reaches ", extent[d].item<double>(),
                  ", more than ", kMaxCellKey, " cells of size ", voxel_size[d], " from the origin");
    }
  }
  if (batch.has_value()) neighbors::check_batch(*batch, points, op, "batch", "points.size(0)");
  if (features.has_value()) {
    TORCH_CHECK(features->scalar_type() == at::kFloat || features->scalar_type() == at::kDouble, op,
                ": features must be float32 or float64, got ", features->scalar_type());
    check_dim(*features, 2, op, "features");
    check_size(*features, 0, points.size(0), op, "features", "points.size(0)");
    check_same_device(*features, points, op, "features", "points");
  }
  if (labels.has_value()) {
    check_dtype(*labels, at::kLong, op, "labels");
    check_dim(*labels, 1, op, "labels");
    check_size(*labels, 0, points.size(0), op, "labels", "points.size(0)");
    check_same_device(*labels, points, op, "labels", "points");
  }
}

}  // namespace fsdlite::grid_subsample

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("grid_subsample(Tensor points, float[] voxel_size, Tensor? batch=None, Tensor? features=None, "
        "Tensor? labels=None) -> (Tensor points, Tensor batch, Tensor features, Tensor labels, Tensor cell)");
}
