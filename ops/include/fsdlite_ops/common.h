// Shared helpers for fsdlite op kernels: argument checks that raise a Python
// RuntimeError (TORCH_CHECK) naming the op, the argument, the value and what
// was expected -- always before any kernel is launched.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <string>

namespace fsdlite {

inline void check_dtype(const at::Tensor& t, at::ScalarType expected, const char* op, const char* arg) {
  TORCH_CHECK(t.scalar_type() == expected, op, ": ", arg, " must have dtype ", expected, ", got ",
              t.scalar_type());
}

inline void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", arg, " must be a floating-point tensor, got ",
              t.scalar_type());
}

inline void check_dim(const at::Tensor& t, int64_t dim, const char* op, const char* arg) {
  TORCH_CHECK(t.dim() == dim, op, ": ", arg, " must be ", dim, "-D, got shape ", t.sizes());
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op, const char* arg_a,
                              const char* arg_b) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", arg_a, " is on ", a.device(), " but ", arg_b, " is on ",
              b.device(), "; expected the same device");
}

inline void check_size(const at::Tensor& t, int64_t dim, int64_t expected, const char* op, const char* arg,
                       const char* expected_what) {
  TORCH_CHECK(t.size(dim) == expected, op, ": ", arg, ".size(", dim, ") must equal ", expected_what, " (",
              expected, "), got ", t.size(dim), " (shape ", t.sizes(), ")");
}

// True when the CPU runs the ops' AVX2 + FMA clones (functions with target("avx2,fma")): the build targets
// baseline x86-64, so vector kernels are compiled for AVX2 beside their baseline form and picked at run time.
inline bool cpu_has_avx2_fma() {
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

namespace detail {

// Minimum and maximum of p[0, n), n >= 1, in one vectorizable pass.
template <typename index_t>
__attribute__((always_inline)) inline void min_max_impl(const index_t* __restrict__ p, int64_t n, int64_t& lo,
                                                        int64_t& hi) {
  index_t mn = p[0], mx = p[0];
#pragma omp simd reduction(min : mn) reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) {
    mn = p[i] < mn ? p[i] : mn;
    mx = p[i] > mx ? p[i] : mx;
  }
  lo = mn;
  hi = mx;
}

#if defined(__GNUC__) && defined(__x86_64__)
template <typename index_t>
__attribute__((target("avx2,fma"))) inline void min_max_avx2(const index_t* p, int64_t n, int64_t& lo, int64_t& hi) {
  min_max_impl(p, n, lo, hi);
}
#endif

// min_max_impl, compiled for AVX2 when the CPU has it (the build targets baseline x86-64, where int64 min / max
// do not vectorize); faster than at::aminmax on the int64 indices of pair lists (docs/benchmarks.md, History).
template <typename index_t>
inline void min_max(const index_t* p, int64_t n, int64_t& lo, int64_t& hi) {
#if defined(__GNUC__) && defined(__x86_64__)
  if (cpu_has_avx2_fma()) return min_max_avx2(p, n, lo, hi);
#endif
  min_max_impl(p, n, lo, hi);
}

}  // namespace detail

// Checks every value of an integer index tensor lies in [low, high), in one pass: the only check of an index
// argument (the Python wrappers leave it to the library). On the CPU the pass reads the values in place; on CUDA
// the minimum and maximum come back to the host in one copy -- the one synchronisation a raised error needs.
// The message names the op, the argument, the first offending bound and the expected range.
inline void check_index_range(const at::Tensor& index, int64_t low, int64_t high, const char* op,
                              const char* arg) {
  if (index.numel() == 0) return;
  int64_t lo = 0, hi = 0;
  const bool host_loop = index.device().is_cpu() && index.is_contiguous() &&
                         (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt);
  if (host_loop && index.scalar_type() == at::kLong) {
    detail::min_max(index.const_data_ptr<int64_t>(), index.numel(), lo, hi);
  } else if (host_loop) {
    detail::min_max(index.const_data_ptr<int32_t>(), index.numel(), lo, hi);
  } else {
    auto minmax = at::aminmax(index);
    const at::Tensor both = at::stack({std::get<0>(minmax), std::get<1>(minmax)}).to(at::kLong).cpu();
    lo = both.const_data_ptr<int64_t>()[0];
    hi = both.const_data_ptr<int64_t>()[1];
  }
  TORCH_CHECK(lo >= low && hi < high, op, ": ", arg, " contains ", lo < low ? lo : hi, ", expected values in [",
              low, ", ", high, ") (got min ", lo, " and max ", hi, ")");
}

// Checks every value of a floating tensor is finite (no NaN or inf): one pass, and on CUDA one read-back of the
// result. The error names the first offending value and its position.
inline void check_finite(const at::Tensor& t, const char* op, const char* arg) {
  if (t.numel() == 0 || t.isfinite().all().item<bool>()) return;
  // the error path only (nonzero's rows are strided: copy the first one)
  const at::Tensor first = t.isfinite().logical_not().nonzero().select(0, 0).contiguous().cpu();
  std::string where;
  for (int64_t d = 0; d < first.numel(); ++d) {
    where += (d ? ", " : "") + std::to_string(first.const_data_ptr<int64_t>()[d]);
  }
  at::Tensor value = t;
  for (int64_t d = 0; d < first.numel(); ++d) value = value.select(0, first.const_data_ptr<int64_t>()[d]);
  TORCH_CHECK(false, op, ": ", arg, " must contain only finite values, got ", value.item<double>(), " at ", arg, "[",
              where, "]");
}

// Checks an output of `rows` rows (set by the int argument `arg`) of `row_numel` elements each can exist: its
// element count must fit in int64 (raised before allocating, instead of a storage-size overflow error).
inline void check_output_rows(int64_t rows, int64_t row_numel, const char* op, const char* arg,
                              const char* row_what) {
  const int64_t per_row = std::max<int64_t>(row_numel, 1);
  TORCH_CHECK(rows <= std::numeric_limits<int64_t>::max() / per_row, op, ": ", arg, "=", rows,
              " gives an output of ", rows, " x ", row_numel, " (", row_what,
              ") elements, more than int64 can count; expected ", arg, " * ", per_row, " < 2^63");
}

// Ceil division for launch configurations.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace fsdlite
