// CUDA dispatch of the error-propagation self-test (see selftest.h): the same throws, from host code compiled by
// nvcc (the CUDA kernels' entry points are compiled so).
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <stdexcept>

#include "selftest.h"

namespace fsdlite::selftest_cuda {

at::Tensor raise_error_cuda(const at::Tensor& x, int64_t mode) {
  switch (mode) {
    case 0:
      TORCH_CHECK(false, "selftest: c10::Error thrown across the library boundary from nvcc-compiled code (mode 0)");
    case 1:
      throw std::runtime_error("selftest: std::runtime_error thrown from nvcc-compiled code (mode 1)");
    case 2:
      try {
        TORCH_CHECK(false, "selftest: caught inside");
      } catch (const c10::Error&) {
        return x.clone();
      }
    case 4:
      TORCH_CHECK_VALUE(false, "selftest: c10::ValueError thrown from nvcc-compiled code (mode 4)");
    case 5:
      try {
        throw std::runtime_error("selftest: caught inside");
      } catch (const std::exception&) {
        return x.clone();
      }
    default:  // mode 3 (a parallel region) is a CPU-only case: the C++-compiled kernel runs it
      return selftest::raise_error(x, mode);
  }
}

}  // namespace fsdlite::selftest_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) { m.impl("_raise_error", &fsdlite::selftest_cuda::raise_error_cuda); }
