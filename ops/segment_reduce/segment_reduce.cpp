// Schema and shared argument checks of segment_reduce.
#include "segment_reduce.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"

namespace fsdlite::segment_reduce {

Reduce check_args(const at::Tensor& src, const at::Tensor& index, int64_t num_segments, c10::string_view reduce) {
  constexpr const char* op = "segment_reduce";
  TORCH_CHECK(src.dim() >= 1, op, ": src must have at least 1 dimension, got shape ", src.sizes());
  const auto dtype = src.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16 ||
                  dtype == at::kInt || dtype == at::kLong || dtype == at::kShort || dtype == at::kChar ||
                  dtype == at::kByte || dtype == at::kBool,
              op, ": src must have dtype float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8 or bool, "
              "got ", dtype);
  check_dtype(index, at::kLong, op, "index");
  check_dim(index, 1, op, "index");
  check_size(index, 0, src.size(0), op, "index", "src.size(0)");
  check_same_device(src, index, op, "src", "index");
  TORCH_CHECK(num_segments >= 0, op, ": num_segments must be >= 0, got ", num_segments);
  const int64_t row_numel = c10::multiply_integers(src.sizes().slice(1));
  check_output_rows(num_segments, row_numel, op, "num_segments", "elements per row of src");
  check_index_range(index, 0, num_segments, op, "index");
  TORCH_CHECK(!(dtype == at::kBool && reduce == "mean"), op, ": reduce='mean' needs a numeric src, got dtype bool");
  if (reduce == "sum") return Reduce::Sum;
  if (reduce == "mean") return Reduce::Mean;
  if (reduce == "max") return Reduce::Max;
  if (reduce == "min") return Reduce::Min;
  if (reduce == "mul") return Reduce::Mul;
  TORCH_CHECK(false, op, ": reduce must be one of 'sum', 'mean', 'max', 'min', 'mul', got '", std::string(reduce), "'");
}

std::tuple<at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& src, int64_t num_segments, Reduce reduce) {
  auto shape = src.sizes().vec();
  shape[0] = num_segments;
  at::Tensor out = reduce == Reduce::Mul ? at::ones(shape, src.options()) : at::zeros(shape, src.options());
  at::Tensor arg = (reduce == Reduce::Max || reduce == Reduce::Min)
                       ? at::full(shape, src.size(0), src.options().dtype(at::kLong))
                       : at::empty({0}, src.options().dtype(at::kLong));
  return {out, arg};
}

}  // namespace fsdlite::segment_reduce

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def("segment_reduce(Tensor src, Tensor index, int num_segments, str reduce) -> (Tensor, Tensor)");
}
