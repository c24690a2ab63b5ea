// CPU kernel of sparse_conv_weight_grad: grad_weight[k] = sum over the pairs (i, o) of offset k of
// outer(features[i], grad_out[o]). Each offset is one task (it owns its Cin x Cout slice, so threads never share
// an output and the sums run in pair order whatever the thread count). float32 with Cout a multiple of 8 takes the
// offset's pairs in chunks of 64 (their rows stay in L1) and adds each chunk's products to the slice block by block
// (rows x 8-channel vectors held in AVX2 registers, 8 accumulators); everything else a portable loop.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "fsdlite_ops/common.h"
#include "sparse_conv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FSDLITE_WEIGHT_GRAD_AVX2 1
#endif

namespace fsdlite::sparse_conv {
namespace {

// Pairs [0, n) of one offset: gw[ci][c] += x[in[p]][ci] * g[orow[p]][c]   (gw: Cin x Cout, zeroed).
template <typename T>
void offset_grad_portable(const T* x, const T* g, const int64_t* in, const int64_t* orow, int64_t n, T* gw,
                          int64_t cin, int64_t cout) {
  for (int64_t p = 0; p < n; ++p) {
    const T* xi = x + in[p] * cin;
    const T* go = g + orow[p] * cout;
    for (int64_t ci = 0; ci < cin; ++ci) {
      const T xv = xi[ci];
      T* row = gw + ci * cout;
      for (int64_t c = 0; c < cout; ++c) row[c] += xv * go[c];
    }
  }
}

#ifdef FSDLITE_WEIGHT_GRAD_AVX2
constexpr int64_t kChunk = 64;  // pairs whose rows stay in L1 while every block of the slice takes them in

// Rows [ci0, ci0 + RB) x columns [c0, c0 + 8 NV) of gw += the n pairs' products (n <= kChunk), in registers.
template <int NV, int RB>
__attribute__((target("avx2,fma"), always_inline)) inline void block_grad_avx2(
    const float* __restrict x, const float* __restrict g, const int64_t* in, const int64_t* orow, int64_t n,
    float* __restrict gw, int64_t ci0, int64_t c0, int64_t cin, int64_t cout) {
  __m256 acc[RB][NV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_loadu_ps(gw + (ci0 + r) * cout + c0 + 8 * v);
  for (int64_t p = 0; p < n; ++p) {
    const float* go = g + orow[p] * cout + c0;
    const float* xi = x + in[p] * cin + ci0;
    __m256 gv[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) gv[v] = _mm256_loadu_ps(go + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const __m256 xv = _mm256_broadcast_ss(xi + r);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(xv, gv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(gw + (ci0 + r) * cout + c0 + 8 * v, acc[r][v]);
}

// Rows from ci on in blocks of RB, then of RB / 2, ... 1 (RB * NV accumulators: 8 FMA chains in flight).
template <int NV, int RB>
__attribute__((target("avx2,fma"), always_inline)) inline void rows_grad_avx2(
    const float* x, const float* g, const int64_t* in, const int64_t* orow, int64_t n, float* gw, int64_t ci,
    int64_t c0, int64_t cin, int64_t cout) {
  for (; ci + RB <= cin; ci += RB) block_grad_avx2<NV, RB>(x, g, in, orow, n, gw, ci, c0, cin, cout);
  if constexpr (RB > 1) rows_grad_avx2<NV, RB / 2>(x, g, in, orow, n, gw, ci, c0, cin, cout);
}

// The offset's pairs in chunks of kChunk; per chunk, Cout (a multiple of 8) in column blocks of 64, 32, 16, 8.
__attribute__((target("avx2,fma"))) void offset_grad_avx2(const float* x, const float* g, const int64_t* in,
                                                          const int64_t* orow, int64_t n, float* gw, int64_t cin,
                                                          int64_t cout) {
  for (int64_t p = 0; p < n; p += kChunk) {
    const int64_t m = std::min(kChunk, n - p);
    int64_t c = 0;
    for (; c + 64 <= cout; c += 64) rows_grad_avx2<8, 1>(x, g, in + p, orow + p, m, gw, 0, c, cin, cout);
    if (c + 32 <= cout) { rows_grad_avx2<4, 2>(x, g, in + p, orow + p, m, gw, 0, c, cin, cout); c += 32; }
    if (c + 16 <= cout) { rows_grad_avx2<2, 4>(x, g, in + p, orow + p, m, gw, 0, c, cin, cout); c += 16; }
    if (c + 8 <= cout) rows_grad_avx2<1, 8>(x, g, in + p, orow + p, m, gw, 0, c, cin, cout);
  }
}
#endif

template <typename T>
void run_offset_grad(const T* x, const T* g, const int64_t* in, const int64_t* orow, int64_t n, T* gw, int64_t cin,
                     int64_t cout) {
#ifdef FSDLITE_WEIGHT_GRAD_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (cout % 8 == 0 && cpu_has_avx2_fma()) return offset_grad_avx2(x, g, in, orow, n, gw, cin, cout);
  }
#endif
  offset_grad_portable(x, g, in, orow, n, gw, cin, cout);
}

at::Tensor sparse_conv_weight_grad_cpu(const at::Tensor& features_, const at::Tensor& grad_out_,
                                       const at::Tensor& pairs_, const at::Tensor& offset_starts) {
  const int64_t k = check_weight_grad_args(features_, grad_out_, pairs_, offset_starts);
  const at::Tensor features = features_.contiguous(), grad_out = grad_out_.contiguous(), pairs = pairs_.contiguous();
  const int64_t cin = features.size(1), cout = grad_out.size(1), p = pairs.size(1);
  at::Tensor grad_weight = at::zeros({k, cin, cout}, features.options());
  if (p == 0 || cin == 0 || cout == 0) return grad_weight;
  const at::Tensor starts = offset_starts.contiguous();
  const int64_t* s = starts.data_ptr<int64_t>();
  const int64_t* in = pairs.data_ptr<int64_t>();
  const int64_t* orow = in + p;
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "sparse_conv_weight_grad_cpu", [&] {
    const scalar_t* x = features.data_ptr<scalar_t>();
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    scalar_t* gw = grad_weight.data_ptr<scalar_t>();
    at::parallel_for(0, k, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t kk = lo; kk < hi; ++kk) {
        const int64_t n = s[kk + 1] - s[kk];
        if (n > 0) run_offset_grad<scalar_t>(x, g, in + s[kk], orow + s[kk], n, gw + kk * cin * cout, cin, cout);
      }
    });
  });
  return grad_weight;
}

}  // namespace
}  // namespace fsdlite::sparse_conv

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("sparse_conv_weight_grad", &fsdlite::sparse_conv::sparse_conv_weight_grad_cpu);
}
