// sparse_conv: sparse convolution as gather-GEMM-scatter over offset-grouped pairs, fused (no gathered buffer).
//
//   features (Vin, Cin), weight (K, Cin, Cout), pairs (2, P) int64 [input row; output row], offset_starts (K+1,)
//   int64: the pairs of kernel offset k are columns [offset_starts[k], offset_starts[k+1]);
//   out[o] = sum over pairs (i, o) of offset k of features[i] @ weight[k]      -> (num_out, Cout)
//
// Within one offset an output row appears at most once (true of every convolution rulebook: a kernel offset is a
// shift), so each offset's pairs can be split among threads without atomics; offsets are summed in order, so
// CPU results do not depend on the thread count.
//
// sparse_conv_pairs(nbr (Vout, K), num_in) -> (pairs (2, P), offset_starts (K + 1,)): the pairs of a padded
// neighbour map (entries < num_in), grouped by offset, output rows ascending within an offset.
//
// sparse_conv_weight_grad(features (Vin, Cin), grad_out (Vout, Cout), pairs, offset_starts) -> (K, Cin, Cout):
//   grad_weight[k] = sum over pairs (i, o) of offset k of outer(features[i], grad_out[o]), the gradient of
//   sparse_conv w.r.t. its weight (no order needed within an offset; each offset is one task, summed in pair order).
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdlite::sparse_conv {

// Validates the arguments of sparse_conv_pairs (nbr (Vout, K) int64 >= 0, num_in >= 0).
void check_pairs_args(const at::Tensor& nbr, int64_t num_in);

// Validates the arguments before any kernel runs (RuntimeError naming the bad argument); returns K.
int64_t check_args(const at::Tensor& features, const at::Tensor& weight, const at::Tensor& pairs,
                   const at::Tensor& offset_starts, int64_t num_out);

// Validates the arguments of sparse_conv_weight_grad; returns K.
int64_t check_weight_grad_args(const at::Tensor& features, const at::Tensor& grad_out, const at::Tensor& pairs,
                               const at::Tensor& offset_starts);

}  // namespace fsdlite::sparse_conv
