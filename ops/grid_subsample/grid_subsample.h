// grid_subsample: pool 3-D points into grid cells (per sample): barycentre, mean features,
// majority label, and the point -> cell index. Cells are numbered by their first point.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Optional.h>

#include <tuple>

namespace fsdlite::grid_subsample {

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Validates the arguments (raising a RuntimeError naming the bad one).
void check_args(const at::Tensor& points, c10::ArrayRef<double> voxel_size, const c10::optional<at::Tensor>& batch,
                const c10::optional<at::Tensor>& features, const c10::optional<at::Tensor>& labels);

// Largest |coordinate / voxel_size| accepted: cell keys stay exact integers far from int64 overflow.
constexpr double kMaxCellKey = 4.0e15;

}  // namespace fsdlite::grid_subsample
