// Schema and shared argument checks of sparse_conv (see sparse_conv.h for the semantics).
#include "sparse_conv.h"

#include <ATen/ops/min.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>

#include "fsdlite_ops/common.h"

namespace fsdlite::sparse_conv {

void check_pairs_args(const at::Tensor& nbr, int64_t num_in) {
  constexpr const char* op = "sparse_conv_pairs";
  check_dtype(nbr, at::kLong, op, "nbr");
  check_dim(nbr, 2, op, "nbr");
  TORCH_CHECK(num_in >= 0, op, ": num_in must be >= 0, got ", num_in);
  if (nbr.numel() == 0) return;
  const int64_t lo = nbr.min().item<int64_t>();
  TORCH_CHECK(lo >= 0, op, ": nbr contains ", lo, ", expected input rows >= 0 (values >= num_in = ", num_in,
              " mean no neighbour)");
}

// offset_starts: 0 = s[0] <= s[1] <= ... <= s[k] = p (p pairs). Returns them on the host (for further checks).
at::Tensor check_offset_starts(const at::Tensor& offset_starts, int64_t k, int64_t p, const char* op) {
  at::Tensor starts = offset_starts.cpu().contiguous();
  const int64_t* s = starts.data_ptr<int64_t>();
  TORCH_CHECK(s[0] == 0 && s[k] == p, op, ": offset_starts must start at 0 and end at pairs.size(1) (", p,
              "), got ", s[0], " and ", s[k]);
  for (int64_t i = 0; i < k; ++i)
    TORCH_CHECK(s[i] <= s[i + 1], op, ": offset_starts must be non-decreasing, got ", s[i], " then ", s[i + 1],
                " at offset ", i);
  return starts;
}

// features (Vin, Cin) float32/float64, pairs (2, P) int64, offset_starts 1-D int64.
void check_tensors(const at::Tensor& features, const at::Tensor& pairs, const at::Tensor& offset_starts,
                   const char* op) {
  TORCH_CHECK(features.scalar_type() == at::kFloat || features.scalar_type() == at::kDouble, op,
              ": features must be float32 or float64, got ", features.scalar_type());
  check_dim(features, 2, op, "features");
  check_dtype(pairs, at::kLong, op, "pairs");
  check_dim(pairs, 2, op, "pairs");
  TORCH_CHECK(pairs.size(0) == 2, op, ": pairs must have shape (2, P) [input row; output row], got ", pairs.sizes());
  check_dtype(offset_starts, at::kLong, op, "offset_starts");
  check_dim(offset_starts, 1, op, "offset_starts");
}

int64_t check_args(const at::Tensor& features, const at::Tensor& weight, const at::Tensor& pairs,
                   const at::Tensor& offset_starts, int64_t num_out) {
  constexpr const char* op = "sparse_conv";
  check_tensors(features, pairs, offset_starts, op);
  check_dtype(weight, features.scalar_type(), op, "weight");
  check_dim(weight, 3, op, "weight");
  check_size(weight, 1, features.size(1), op, "weight", "features.size(1) (Cin)");
  const int64_t k = weight.size(0);
  check_size(offset_starts, 0, k + 1, op, "offset_starts", "weight.size(0) + 1 (K + 1)");
  for (const auto* t : {&weight, &pairs, &offset_starts})
    check_same_device(features, *t, op, "features",
                      t == &weight ? "weight" : (t == &pairs ? "pairs" : "offset_starts"));
  TORCH_CHECK(num_out >= 0, op, ": num_out must be >= 0, got ", num_out);
  check_output_rows(num_out, weight.size(2), op, "num_out", "Cout");
  const at::Tensor starts = check_offset_starts(offset_starts, k, pairs.size(1), op);
  check_index_range(pairs.select(0, 0), 0, features.size(0), op, "pairs[0] (input rows)");
  check_index_range(pairs.select(0, 1), 0, num_out, op, "pairs[1] (output rows)");
  // Output rows strictly increasing within each offset (so no output row twice: the kernels split an offset's
  // pairs among threads without atomics). pairs_by_offset produces this order.
  const int64_t* s = starts.data_ptr<int64_t>();
  const int64_t p = pairs.size(1);
  int64_t bad = -1;  // the first j with o[j] <= o[j - 1] inside one offset
  if (pairs.device().is_cpu()) {
    const at::Tensor outs = pairs.select(0, 1).contiguous();
    const int64_t* o = outs.data_ptr<int64_t>();
    for (int64_t i = 0; i < k && bad < 0; ++i)
      for (int64_t j = s[i] + 1; j < s[i + 1]; ++j)
        if (o[j] <= o[j - 1]) {
          bad = j;
          break;
        }
  } else if (p > 1) {  // on the device: one pass and one read of the answer (no copy of the pairs to the host)
    const at::Tensor outs = pairs.select(0, 1);
    at::Tensor first = at::zeros({p}, pairs.options().dtype(at::kBool));  // first pair of an offset
    first.index_fill_(0, offset_starts.narrow(0, 0, k).clamp_max(p - 1), true);
    const at::Tensor wrong = outs.narrow(0, 1, p - 1).le(outs.narrow(0, 0, p - 1)).logical_and_(
        first.narrow(0, 1, p - 1).logical_not());
    if (wrong.any().item<bool>()) bad = wrong.nonzero().min().item<int64_t>() + 1;
  }
  if (bad >= 0) {
    const int64_t i = std::upper_bound(s, s + k + 1, bad) - s - 1;  // its offset
    const int64_t before = pairs.select(0, 1)[bad - 1].item<int64_t>(), at = pairs.select(0, 1)[bad].item<int64_t>();
    TORCH_CHECK(false, op, ": the output rows of offset ", i, " must be strictly increasing (each output row at "
                "most once per offset, as pairs_by_offset gives them), got ", before, " then ", at, " at pairs[1, ",
                bad - 1, ":", bad + 1, "]");
  }
  return k;
}

int64_t check_weight_grad_args(const at::Tensor& features, const at::Tensor& grad_out, const at::Tensor& pairs,
                               const at::Tensor& offset_starts) {
  constexpr const char* op = "sparse_conv_weight_grad";
  check_tensors(features, pairs, offset_starts, op);
  check_dtype(grad_out, features.scalar_type(), op, "grad_out");
  check_dim(grad_out, 2, op, "grad_out");
  TORCH_CHECK(offset_starts.numel() >= 1, op, ": offset_starts must have K + 1 >= 1 entries, got shape ",
              offset_starts.sizes());
  for (const auto* t : {&grad_out, &pairs, &offset_starts})
    check_same_device(features, *t, op, "features",
                      t == &grad_out ? "grad_out" : (t == &pairs ? "pairs" : "offset_starts"));
  const int64_t k = offset_starts.size(0) - 1;
  check_output_rows(k * features.size(1), grad_out.size(1), op, "K * Cin", "Cout");
  check_offset_starts(offset_starts, k, pairs.size(1), op);
  check_index_range(pairs.select(0, 0), 0, features.size(0), op, "pairs[0] (input rows)");
  check_index_range(pairs.select(0, 1), 0, grad_out.size(0), op, "pairs[1] (output rows)");
  return k;
}

}  // namespace fsdlite::sparse_conv

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("sparse_conv_pairs(Tensor nbr, int num_in) -> (Tensor, Tensor)");
  m.def("sparse_conv(Tensor features, Tensor weight, Tensor pairs, Tensor offset_starts, int num_out) -> Tensor");
  m.def("sparse_conv_weight_grad(Tensor features, Tensor grad_out, Tensor pairs, Tensor offset_starts) -> Tensor");
}
