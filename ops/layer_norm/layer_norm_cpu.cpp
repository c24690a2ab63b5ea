// CPU kernel of layer_norm_rows: rows in parallel chunks; per row a two-pass mean / variance in the accumulate
// type (float for float32, as torch's LayerNorm; double for float64) over the row while it sits in L1, then one
// fused normalize-scale-shift pass. float32 rows of 8-128 channels (multiples of 8) take a kernel that holds the
// row in AVX2 registers; other rows a generic loop the compiler vectorizes (AVX2 clone when the CPU has it).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "fsdlite_ops/common.h"
#include "layer_norm.h"

namespace fsdlite::layer_norm {
namespace {

constexpr int64_t kSerialWork = 1 << 15;  // below this many elements one thread does everything

constexpr int64_t kRowBlock = 64;  // rows whose statistics are computed before any of them is normalized

// Rows [begin, end) of a (n, c) row-major x, kRowBlock at a time: the mean and variance of every row of the block,
// then their 1 / sqrt(var + eps) together (a vector sqrt and division over rows instead of one long-latency
// chain per row), then the normalize-scale-shift pass. The `omp simd` reductions let the compiler vectorize the
// sums without -ffast-math (it may reorder the additions); the caller picks an AVX2/FMA clone when the CPU has one.
template <typename scalar_t>
__attribute__((always_inline)) inline void normalize_rows_impl(const scalar_t* __restrict__ x,
                                                               const scalar_t* __restrict__ weight,
                                                               const scalar_t* __restrict__ bias, int64_t begin,
                                                               int64_t end, int64_t c, double eps,
                                                               scalar_t* __restrict__ out) {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t inv_c = acc_t(1) / static_cast<acc_t>(c);
  acc_t mean[kRowBlock], rstd[kRowBlock];
  for (int64_t r0 = begin; r0 < end; r0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, end - r0);
    for (int64_t j = 0; j < rows; ++j) {
      const scalar_t* row = x + (r0 + j) * c;
      acc_t sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t f = 0; f < c; ++f) sum += static_cast<acc_t>(row[f]);
      const acc_t m = sum * inv_c;
      acc_t sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t f = 0; f < c; ++f) {
        const acc_t d = static_cast<acc_t>(row[f]) - m;
        sq += d * d;
      }
      mean[j] = m;
      rstd[j] = sq * inv_c + static_cast<acc_t>(eps);
    }
#pragma omp simd
    for (int64_t j = 0; j < rows; ++j) rstd[j] = acc_t(1) / std::sqrt(rstd[j]);
    for (int64_t j = 0; j < rows; ++j) {
      const scalar_t* row = x + (r0 + j) * c;
      scalar_t* o = out + (r0 + j) * c;
      const acc_t m = mean[j], s = rstd[j];
#pragma omp simd
      for (int64_t f = 0; f < c; ++f)
        o[f] = static_cast<scalar_t>((static_cast<acc_t>(row[f]) - m) * s * static_cast<acc_t>(weight[f]) +
                                     static_cast<acc_t>(bias[f]));
    }
  }
}

#if defined(__GNUC__) && defined(__x86_64__)
#define FSDLITE_LN_X86 1
template <typename scalar_t>
__attribute__((target("avx2,fma"))) void normalize_rows_avx2(const scalar_t* x, const scalar_t* weight,
                                                             const scalar_t* bias, int64_t begin, int64_t end,
                                                             int64_t c, double eps, scalar_t* out) {
  normalize_rows_impl(x, weight, bias, begin, end, c, eps, out);
}
#endif

#ifdef FSDLITE_LN_X86
__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// float32 rows of kVectors * 8 channels: each row is held in kVectors registers from its load to its store (one
// read of x), and the rows' dependency chains (two horizontal sums and a square root each) overlap.
template <int kVectors>
__attribute__((target("avx2,fma"))) void normalize_rows_f32_registers(const float* x, const float* weight,
                                                                      const float* bias, int64_t begin, int64_t end,
                                                                      double eps, float* out) {
  constexpr int64_t c = 8 * kVectors;
  const float inv_c = 1.0f / static_cast<float>(c), eps_f = static_cast<float>(eps);
  for (int64_t r = begin; r < end; ++r) {
    const float* row = x + r * c;
    __m256 v[kVectors];
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < kVectors; ++i) {
      v[i] = _mm256_loadu_ps(row + 8 * i);
      sum = _mm256_add_ps(sum, v[i]);
    }
    const __m256 mean = _mm256_set1_ps(horizontal_sum(sum) * inv_c);
    __m256 sq = _mm256_setzero_ps();
    for (int i = 0; i < kVectors; ++i) {
      v[i] = _mm256_sub_ps(v[i], mean);
      sq = _mm256_fmadd_ps(v[i], v[i], sq);
    }
    const __m256 rstd = _mm256_set1_ps(1.0f / std::sqrt(horizontal_sum(sq) * inv_c + eps_f));
    float* o = out + r * c;
    for (int i = 0; i < kVectors; ++i) {
      const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(v[i], rstd), _mm256_loadu_ps(weight + 8 * i));
      _mm256_storeu_ps(o + 8 * i, _mm256_add_ps(scaled, _mm256_loadu_ps(bias + 8 * i)));
    }
  }
}

// The register kernel for c = 8 * k channels, k <= 16; nullptr for other widths.
using RowKernel = void (*)(const float*, const float*, const float*, int64_t, int64_t, double, float*);
template <int... kVectors>
RowKernel pick_register_kernel(int64_t c, std::integer_sequence<int, kVectors...>) {
  RowKernel kernel = nullptr;
  ((c == 8 * (kVectors + 1) ? (kernel = &normalize_rows_f32_registers<kVectors + 1>, 0) : 0), ...);
  return kernel;
}
#endif

// normalize_rows_impl compiled for AVX2 + FMA when the CPU has them (the build targets baseline x86-64); float32
// rows of up to 128 channels in multiples of 8 take the register kernel.
template <typename scalar_t>
void normalize_rows(const scalar_t* x, const scalar_t* weight, const scalar_t* bias, int64_t begin, int64_t end,
                    int64_t c, double eps, scalar_t* out) {
#ifdef FSDLITE_LN_X86
  if (cpu_has_avx2_fma()) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (c % 8 == 0 && c <= 128) {
        const RowKernel kernel = pick_register_kernel(c, std::make_integer_sequence<int, 16>{});
        return kernel(x, weight, bias, begin, end, eps, out);
      }
    }
    return normalize_rows_avx2(x, weight, bias, begin, end, c, eps, out);
  }
#endif
  normalize_rows_impl(x, weight, bias, begin, end, c, eps, out);
}

at::Tensor layer_norm_rows_cpu(const at::Tensor& x_, const at::Tensor& weight_, const at::Tensor& bias_,
                               double eps) {
  check_args(x_, weight_, bias_, eps);
  const at::Tensor x = x_.contiguous(), weight = weight_.contiguous(), bias = bias_.contiguous();
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return out;
  const int64_t grain = std::max<int64_t>(1, kSerialWork / c);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "layer_norm_rows_cpu", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = weight.data_ptr<scalar_t>();
    const scalar_t* bp = bias.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      normalize_rows(xp, wp, bp, begin, end, c, eps, op);
    });
  });
  return out;
}

}  // namespace
}  // namespace fsdlite::layer_norm

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) { m.impl("layer_norm_rows", &fsdlite::layer_norm::layer_norm_rows_cpu); }
