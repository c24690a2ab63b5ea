// Schema and shared argument checks of voxelize.
#include "voxelize.h"

#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "fsdlite_ops/common.h"

namespace fsdlite::voxelize {

Grid check_args(const at::Tensor& points, c10::ArrayRef<double> voxel_size, c10::ArrayRef<double> point_range,
                const std::optional<at::Tensor>& batch) {
  constexpr const char* op = "voxelize";
  TORCH_CHECK(points.scalar_type() == at::kFloat || points.scalar_type() == at::kDouble, op,
              ": points must have dtype float32 or float64, got ", points.scalar_type());
  TORCH_CHECK(points.dim() == 2 && points.size(1) >= 3, op, ": points must have shape (N, >=3), got shape ",
              points.sizes());
  TORCH_CHECK(voxel_size.size() == 3, op, ": voxel_size must have 3 values (x, y, z), got ", voxel_size);
  TORCH_CHECK(point_range.size() == 6, op,
              ": point_range must have 6 values [x_min, y_min, z_min, x_max, y_max, z_max], got ", point_range);
  Grid grid{};
  for (int a = 0; a < 3; ++a) {
    const double size = voxel_size[a], lo = point_range[a], hi = point_range[a + 3];
    TORCH_CHECK(std::isfinite(size) && size > 0, op, ": voxel_size must be finite and > 0, got ", voxel_size);
    TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi) && hi > lo, op,
                ": point_range must be finite with max > min on every axis, got ", point_range);
    const double cells = std::round((hi - lo) / size);
    TORCH_CHECK(cells >= 1 && cells < 1e15, op, ": point_range ", point_range, " with voxel_size ", voxel_size,
                " gives ", cells, " voxels on axis ", "xyz"[a], "; expected at least 1 (and < 1e15)");
    grid.lower[a] = lo;
    grid.size[a] = size;
    grid.shape[a] = static_cast<int64_t>(cells);
  }
  grid.num_batches = 1;
  if (batch.has_value()) {
    const at::Tensor& b = *batch;
    check_dtype(b, at::kLong, op, "batch");
    check_dim(b, 1, op, "batch");
    check_size(b, 0, points.size(0), op, "batch", "points.size(0)");
    check_same_device(points, b, op, "points", "batch");
    if (b.numel() > 0) {
      auto minmax = at::aminmax(b);
      const int64_t lo = std::get<0>(minmax).item<int64_t>(), hi = std::get<1>(minmax).item<int64_t>();
      TORCH_CHECK(lo >= 0, op, ": batch ids must be >= 0, got ", lo);
      TORCH_CHECK(hi < std::numeric_limits<int64_t>::max(), op, ": batch id ", hi, " is too large");
      grid.num_batches = hi + 1;
    }
  }
  // Keys ((b * nz + z) * ny + y) * nx + x must fit in int64.
  int64_t cells = grid.num_batches;
  for (int a = 2; a >= 0; --a) {
    TORCH_CHECK(cells <= std::numeric_limits<int64_t>::max() / grid.shape[a], op, ": ", grid.num_batches,
                " batches x grid (", grid.shape[2], ", ", grid.shape[1], ", ", grid.shape[0],
                ") has more than 2^63 voxels; use fewer batch ids or a coarser grid");
    cells *= grid.shape[a];
  }
  return grid;
}

Outputs empty_outputs(const at::Tensor& points, int64_t num_out_of_range, int64_t num_non_finite) {
  const int64_t n = points.size(0);
  const auto opts = points.options().dtype(at::kLong);
  return {at::empty({0, 4}, opts), at::full({n}, -1, opts), at::empty({0}, opts), at::full({n, 4}, -1, opts),
          at::full({}, num_out_of_range, opts), at::full({}, num_non_finite, opts)};
}

}  // namespace fsdlite::voxelize

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def(
      "voxelize(Tensor points, float[] voxel_size, float[] point_range, Tensor? batch) -> "
      "(Tensor voxel_coors, Tensor point2voxel, Tensor voxel_counts, Tensor point_coors, "
      "Tensor num_out_of_range, Tensor num_non_finite)");
}
