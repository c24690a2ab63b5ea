// Schema and CPU kernel of the error-propagation self-test (see selftest.h).
#include "selftest.h"

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <stdexcept>

namespace fsdlite::selftest {

at::Tensor raise_error(const at::Tensor& x, int64_t mode) {
  switch (mode) {
    case 0:
      TORCH_CHECK(false, "selftest: c10::Error thrown across the library boundary (mode 0)");
    case 1:
      throw std::runtime_error("selftest: std::runtime_error thrown across the library boundary (mode 1)");
    case 2:
      try {
        TORCH_CHECK(false, "selftest: caught inside");
      } catch (const c10::Error&) {
        return x.clone();
      }
    case 3:
      at::parallel_for(0, 64, 1, [&](int64_t, int64_t) {
        TORCH_CHECK(false, "selftest: c10::Error thrown inside at::parallel_for (mode 3)");
      });
      return x.clone();
    case 4:
      TORCH_CHECK_VALUE(false, "selftest: c10::ValueError thrown across the library boundary (mode 4)");
    case 5:
      try {
        throw std::runtime_error("selftest: caught inside");
      } catch (const std::exception&) {
        return x.clone();
      }
    default:
      TORCH_CHECK(false, "_raise_error: mode must be in [0, 5], got ", mode);
  }
  return x;  // unreachable
}

}  // namespace fsdlite::selftest

TORCH_LIBRARY_FRAGMENT(fsdlite, m) { m.def("_raise_error(Tensor x, int mode) -> Tensor"); }

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("_raise_error", &fsdlite::selftest::raise_error); }
