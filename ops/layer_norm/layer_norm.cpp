// Schema and shared argument checks of layer_norm_rows.
#include "layer_norm.h"

#include <torch/library.h>

#include <cmath>

#include "fsdlite_ops/common.h"

namespace fsdlite::layer_norm {

void check_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  constexpr const char* op = "layer_norm_rows";
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, op,
              ": x must be float32 or float64, got ", x.scalar_type());
  check_dim(x, 2, op, "x");
  TORCH_CHECK(x.size(1) >= 1, op, ": x must have at least one channel, got shape ", x.sizes());
  check_dtype(weight, x.scalar_type(), op, "weight");
  check_dtype(bias, x.scalar_type(), op, "bias");
  check_dim(weight, 1, op, "weight");
  check_dim(bias, 1, op, "bias");
  check_size(weight, 0, x.size(1), op, "weight", "x.size(1) (C)");
  check_size(bias, 0, x.size(1), op, "bias", "x.size(1) (C)");
  check_same_device(weight, x, op, "weight", "x");
  check_same_device(bias, x, op, "bias", "x");
  TORCH_CHECK(std::isfinite(eps) && eps > 0, op, ": eps must be finite and > 0, got ", eps);
}

}  // namespace fsdlite::layer_norm

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("layer_norm_rows(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor");
}
