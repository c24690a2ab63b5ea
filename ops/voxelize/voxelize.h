// voxelize (dynamic voxelization): per-point voxel coordinates, unique voxels in first-occurrence order,
// point -> voxel inverse index and per-voxel counts; out-of-range and non-finite points are excluded and
// counted. Shared between the CPU and CUDA implementations.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "fsdlite_ops/hash_table.h"

namespace fsdlite::voxelize {

// Validated geometry of one call. A point is inside iff 0 <= floor((p - lower) / size) < shape on all three
// axes (computed in the points' floating type); its key is ((batch * nz + z) * ny + y) * nx + x.
struct Grid {
  double lower[3];     // x, y, z minimum of the range
  double size[3];      // x, y, z voxel size
  int64_t shape[3];    // nx, ny, nz (note: x first here; outputs are ordered [batch, z, y, x])
  int64_t num_batches; // max batch id + 1 (1 without batch)
};

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Validates every argument (TORCH_CHECK naming the argument, its value and what was expected) and returns
// the grid. Also checks that keys cannot overflow int64.
Grid check_args(const at::Tensor& points, c10::ArrayRef<double> voxel_size, c10::ArrayRef<double> point_range,
                const std::optional<at::Tensor>& batch);

// Outputs of an empty (or fully excluded) cloud on the points' device.
Outputs empty_outputs(const at::Tensor& points, int64_t num_out_of_range, int64_t num_non_finite);

// The voxel-key hash table (splitmix64 keys, load factor <= 0.5) is the shared one of fsdlite_ops/hash_table.h.
using hash_table::mix_key;
using hash_table::table_capacity;

}  // namespace fsdlite::voxelize
