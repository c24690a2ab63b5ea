// segment_reduce: reduce rows of src into segments given by index (torch_scatter semantics).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <tuple>

namespace fsdlite::segment_reduce {

enum class Reduce { Sum, Mean, Max, Min, Mul };

// Validates the arguments (raising a RuntimeError naming the bad one) and parses `reduce`.
Reduce check_args(const at::Tensor& src, const at::Tensor& index, int64_t num_segments, c10::string_view reduce);

// Allocates (out, arg): out (S, *src.shape[1:]) filled with the identity of the reduction (1 for mul, else 0),
// arg the same shape filled with N for max/min and an empty tensor otherwise.
std::tuple<at::Tensor, at::Tensor> allocate_outputs(const at::Tensor& src, int64_t num_segments, Reduce reduce);

}  // namespace fsdlite::segment_reduce
