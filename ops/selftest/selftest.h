// selftest: diagnostics of error propagation from fsdlite's op libraries (fsdlite.ops.smoke). Not a user op.
//
//   _raise_error(Tensor x, int mode) -> Tensor
//     mode 0: TORCH_CHECK fails (c10::Error thrown across the library boundary)      -> RuntimeError
//     mode 1: throw std::runtime_error across the boundary                            -> RuntimeError
//     mode 2: a c10::Error thrown and caught inside the library                       -> returns x.clone()
//     mode 3: TORCH_CHECK fails inside at::parallel_for (rethrown after the region)   -> RuntimeError
//     mode 4: TORCH_CHECK_VALUE fails (c10::ValueError)                               -> ValueError
//     mode 5: a std::runtime_error thrown and caught inside the library               -> returns x.clone()
// The CPU kernel is compiled by the C++ compiler, the CUDA one's host code by nvcc: a crash in one mode and not in
// another tells which part of the toolchain breaks exception propagation.
#pragma once

#include <ATen/core/Tensor.h>

namespace fsdlite::selftest {

at::Tensor raise_error(const at::Tensor& x, int64_t mode);

}  // namespace fsdlite::selftest
