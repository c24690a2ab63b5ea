// CPU kernel of sparse_conv_weight_grad: grad_weight[k] = sum over the pairs (i, o) of offset k of
// outer(features[i], grad_out[o]). Each offset is one task (it owns its Cin x Cout slice, so threads never share
// an output and the sums run in pair order whatever the thread count). float32 with Cout a multiple of 8 keeps a
// block of rows x 8-channel vectors of the slice in AVX2 registers while it walks the offset's pairs (one walk
// per block); everything else a portable loop.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

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
// Rows [ci0, ci0 + RB) x columns [c0, c0 + 8 NV) of gw, summed over all n pairs in registers, then stored.
template <int NV, int RB>
__attribute__((target("avx2,fma"), always_inline)) inline void block_grad_avx2(
    const float* __restrict x, const float* __restrict g, const int64_t* in, const int64_t* orow, int64_t n,
    float* __restrict gw, int64_t ci0, int64_t c0, int64_t cin, int64_t cout) {
  __m256 acc[RB][NV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
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

// Column chunks of NV vectors: rows in blocks of RB (RB * NV + NV + 1 <= 16 registers), the last rows one by one.
template <int NV, int RB>
__attribute__((target("avx2,fma"))) void columns_grad_avx2(const float* x, const float* g, const int64_t* in,
                                                           const int64_t* orow, int64_t n, float* gw, int64_t c0,
                                                           int64_t cin, int64_t cout) {
  int64_t ci = 0;
  for (; ci + RB <= cin; ci += RB) block_grad_avx2<NV, RB>(x, g, in, orow, n, gw, ci, c0, cin, cout);
  for (; ci < cin; ++ci) block_grad_avx2<NV, 1>(x, g, in, orow, n, gw, ci, c0, cin, cout);
}

__attribute__((target("avx2,fma"))) void offset_grad_avx2(const float* x, const float* g, const int64_t* in,
                                                          const int64_t* orow, int64_t n, float* gw, int64_t cin,
                                                          int64_t cout) {
  int64_t c = 0;
  for (; c + 32 <= cout; c += 32) columns_grad_avx2<4, 2>(x, g, in, orow, n, gw, c, cin, cout);
  if (c + 16 <= cout) { columns_grad_avx2<2, 6>(x, g, in, orow, n, gw, c, cin, cout); c += 16; }
  if (c + 8 <= cout) columns_grad_avx2<1, 12>(x, g, in, orow, n, gw, c, cin, cout);
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
