// CUDA version of grid_subsample: a kernel computes the (sample, x, y, z) cell keys, unique_dim
// groups them, cells are renumbered by first point, and the per-cell means and majority labels
// are segment reductions over the cell index (double accumulation for the means).
#include <ATen/Dispatch.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/unique_dim.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <limits>

#include "fsdlite_ops/common.h"
#include "grid_subsample.h"

namespace fsdlite::grid_subsample_cuda {

constexpr int kThreads = 256;

template <typename T>
__global__ void cell_keys_kernel(const T* points, const int64_t* batch, int64_t n, double size_x, double size_y,
                                 double size_z, int64_t* keys) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double size[3] = {size_x, size_y, size_z};
  keys[i * 4] = batch != nullptr ? batch[i] : 0;
  for (int d = 0; d < 3; ++d)
    keys[i * 4 + 1 + d] = static_cast<int64_t>(floor(__ddiv_rn(static_cast<double>(points[i * 3 + d]), size[d])));
}

// Mean of src rows per cell, accumulated in double, cast back to src's dtype.
at::Tensor cell_means(const at::Tensor& src, const at::Tensor& cell, const at::Tensor& counts) {
  at::Tensor sums = at::zeros({counts.size(0), src.size(1)}, src.options().dtype(at::kDouble));
  sums.index_add_(0, cell, src.to(at::kDouble));
  return sums.div_(counts.unsqueeze(1).to(at::kDouble)).to(src.scalar_type());
}

// Majority label per cell, ties -> smallest label.
at::Tensor cell_majority(const at::Tensor& labels, const at::Tensor& cell, int64_t m) {
  const auto long_options = labels.options();
  auto [pairs, unused_inverse, pair_counts] = at::unique_dim(at::stack({cell, labels}, 1), 0, true, false, true);
  const at::Tensor pair_cell = pairs.select(1, 0).contiguous(), pair_label = pairs.select(1, 1).contiguous();
  const at::Tensor best = at::zeros({m}, long_options).scatter_reduce(0, pair_cell, pair_counts, "amax", false);
  const at::Tensor candidate =
      at::where(pair_counts.eq(best.index_select(0, pair_cell)), pair_label,
                at::full({1}, std::numeric_limits<int64_t>::max(), long_options));
  return at::full({m}, std::numeric_limits<int64_t>::max(), long_options)
      .scatter_reduce(0, pair_cell, candidate, "amin", true);
}

fsdlite::grid_subsample::Outputs grid_subsample_cuda(const at::Tensor& points_, c10::ArrayRef<double> voxel_size,
                                                     const c10::optional<at::Tensor>& batch_,
                                                     const c10::optional<at::Tensor>& features_,
                                                     const c10::optional<at::Tensor>& labels_) {
  fsdlite::grid_subsample::check_args(points_, voxel_size, batch_, features_, labels_);
  c10::cuda::CUDAGuard guard(points_.device());
  const at::Tensor points = points_.contiguous();
  const at::Tensor batch = batch_.has_value() ? batch_->contiguous() : at::Tensor();
  const int64_t n = points.size(0);
  const auto long_options = points.options().dtype(at::kLong);
  if (n == 0) {  // nothing to group: empty outputs of the documented shapes
    const int64_t width = features_.has_value() ? features_->size(1) : 0;
    return {at::empty({0, 3}, points.options()), at::empty({0}, long_options),
            features_.has_value() ? at::empty({0, width}, features_->options()) : at::empty({0}, points.options()),
            at::empty({0}, long_options), at::empty({0}, long_options)};
  }
  at::Tensor keys = at::empty({n, 4}, long_options);
  {
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    const dim3 grid(static_cast<unsigned>(ceil_div(n, kThreads)));
    AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "grid_subsample_keys_cuda", [&] {
      cell_keys_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
          points.data_ptr<scalar_t>(), batch.defined() ? batch.data_ptr<int64_t>() : nullptr, n, voxel_size[0],
          voxel_size[1], voxel_size[2], keys.data_ptr<int64_t>());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  auto [unique_keys, inverse, counts] = at::unique_dim(keys, 0, true, true, true);
  const int64_t m = unique_keys.size(0);
  // renumber cells by their first point
  const at::Tensor first = at::full({m}, n, long_options)
                               .scatter_reduce(0, inverse, at::arange(n, long_options), "amin", true);
  const at::Tensor order = first.argsort();
  const at::Tensor rank = at::empty({m}, long_options).scatter_(0, order, at::arange(m, long_options));
  const at::Tensor cell = rank.index_select(0, inverse);
  const at::Tensor cell_counts = counts.index_select(0, order);
  const at::Tensor first_point = first.index_select(0, order);

  at::Tensor out_points = cell_means(points, cell, cell_counts);
  at::Tensor out_batch = batch.defined() ? batch.index_select(0, first_point) : at::zeros({m}, long_options);
  at::Tensor out_features = features_.has_value() ? cell_means(features_->contiguous(), cell, cell_counts)
                                                  : at::empty({0}, points.options());
  at::Tensor out_labels = labels_.has_value() ? cell_majority(labels_->contiguous(), cell, m)
                                              : at::empty({0}, long_options);
  return {out_points, out_batch, out_features, out_labels, cell};
}

}  // namespace fsdlite::grid_subsample_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("grid_subsample", &fsdlite::grid_subsample_cuda::grid_subsample_cuda);
}
