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
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdlite::sparse_conv {

// Validates the arguments before any kernel runs (RuntimeError naming the bad argument); returns K.
// Validates the arguments of sparse_conv_pairs (nbr (Vout, K) int64 >= 0, num_in >= 0).
void check_pairs_args(const at::Tensor& nbr, int64_t num_in);

int64_t check_args(const at::Tensor& features, const at::Tensor& weight, const at::Tensor& pairs,
                   const at::Tensor& offset_starts, int64_t num_out);

}  // namespace fsdlite::sparse_conv
