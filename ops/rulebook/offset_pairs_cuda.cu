// CUDA rulebook_subm_pairs / rulebook_conv_pairs: the padded rulebook kernels (rulebook_cuda.cu) build the
// neighbour map with every voxel valid, and sparse_conv_pairs lists its entries grouped by offset. The result
// equals the CPU kernels' (same offsets, output rows ascending within an offset, same input rows); a strided
// conv first gets as many output rows as input voxels and is rebuilt with its exact count when it needs more.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "rulebook.h"

namespace fsdlite::offset_pairs_cuda {

using Pairs = std::tuple<at::Tensor, at::Tensor>;

Pairs list_pairs(const at::Tensor& nbr, int64_t num_in) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("fsdlite::sparse_conv_pairs", "")
                       .typed<Pairs(const at::Tensor&, int64_t)>();
  return op.call(nbr, num_in);
}

Pairs rulebook_subm_pairs_cuda(const at::Tensor& coors, c10::IntArrayRef spatial_shape, c10::IntArrayRef kernel_size,
                               c10::IntArrayRef dilation) {
  fsdlite::rulebook::check_unpadded_coors(coors, "rulebook_subm_pairs");
  const c10::cuda::CUDAGuard guard(coors.device());
  static auto subm = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("fsdlite::rulebook_subm", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef,
                                           c10::IntArrayRef)>();
  const int64_t n = coors.size(0);
  const at::Tensor nbr = subm.call(coors, at::scalar_tensor(n, coors.options()), spatial_shape, kernel_size, dilation);
  return list_pairs(nbr, n);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rulebook_conv_pairs_cuda(
    const at::Tensor& coors, c10::IntArrayRef spatial_shape, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation) {
  fsdlite::rulebook::check_unpadded_coors(coors, "rulebook_conv_pairs");
  const c10::cuda::CUDAGuard guard(coors.device());
  using ConvOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
  static auto conv = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("fsdlite::rulebook_conv", "")
                         .typed<ConvOutputs(const at::Tensor&, const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef,
                                            c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, int64_t)>();
  const int64_t n = coors.size(0);
  const at::Tensor count = at::scalar_tensor(n, coors.options());
  auto [out_coors, num_out, dropped, nbr] =
      conv.call(coors, count, spatial_shape, kernel_size, stride, padding, dilation, n);
  const int64_t missing = dropped.item<int64_t>();
  if (missing > 0) {
    std::tie(out_coors, num_out, dropped, nbr) =
        conv.call(coors, count, spatial_shape, kernel_size, stride, padding, dilation, n + missing);
  }
  const int64_t rows = num_out.item<int64_t>();
  auto [pairs, starts] = list_pairs(nbr.narrow(0, 0, rows), n);
  return {out_coors.narrow(0, 0, rows).contiguous(), pairs, starts};
}

}  // namespace fsdlite::offset_pairs_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("rulebook_subm_pairs", &fsdlite::offset_pairs_cuda::rulebook_subm_pairs_cuda);
  m.impl("rulebook_conv_pairs", &fsdlite::offset_pairs_cuda::rulebook_conv_pairs_cuda);
}
