// layer_norm_rows: LayerNorm over the channels of (N, C) rows, y = (x - mean) / sqrt(var + eps) * weight + bias
// (biased variance, as torch.nn.LayerNorm). One row per task: the many-short-rows case of point and cluster
// features (C of 8 to 128), where a generic normalized-shape kernel spends most of its time per row.
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdlite::layer_norm {

// Validates the arguments (raising a RuntimeError naming the bad one).
void check_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

}  // namespace fsdlite::layer_norm
