// CPU kernel of sparse_conv. Offsets run one after another; the pairs of one offset are split among threads
// (each output row appears once per offset, so no two threads write the same row). Each task gathers R input
// rows at a time, multiplies them by W_k with the R x Cout accumulators in registers and adds the results to
// their output rows. float32 with Cout a multiple of 8 uses an AVX2/FMA path when the CPU has it (checked at
// run time); everything else a portable loop.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>
#include <vector>

#include "fsdlite_ops/common.h"
#include "sparse_conv.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FSDLITE_SPARSE_CONV_AVX2 1
#endif

namespace fsdlite::sparse_conv {
namespace {

constexpr int64_t kGrain = 1024;  // pairs per parallel task at least

// Pairs [0, n) of one offset: out[orow[p]] += x[in[p]] @ w  (w: Cin x Cout, row stride ldw; out row stride ldo).
template <typename T>
void offset_portable(const T* x, const int64_t* in, const int64_t* orow, int64_t n, const T* w, T* out,
                     int64_t cin, int64_t cout) {
  for (int64_t p = 0; p < n; ++p) {
    const T* xi = x + in[p] * cin;
    T* po = out + orow[p] * cout;
    for (int64_t ci = 0; ci < cin; ++ci) {
      const T xv = xi[ci];
      const T* wr = w + ci * cout;
      for (int64_t c = 0; c < cout; ++c) po[c] += xv * wr[c];
    }
  }
}

#ifdef FSDLITE_SPARSE_CONV_AVX2
// NV vectors of 8 output channels per row (columns [0, 8 NV) of w and out), R pairs per register block.
template <int NV, int R>
__attribute__((target("avx2,fma"), always_inline)) inline void block_avx2(
    const float* __restrict x, const int64_t* in, const int64_t* orow, int64_t n, const float* __restrict w,
    int64_t ldw, float* __restrict out, int64_t ldo, int64_t cin) {
  int64_t p = 0;
  for (; p + R <= n; p += R) {
    __m256 acc[R][NV];
    const float* xr[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      xr[r] = x + in[p + r] * cin;
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
    }
    for (int64_t ci = 0; ci < cin; ++ci) {
      __m256 wv[NV];
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) wv[v] = _mm256_loadu_ps(w + ci * ldw + 8 * v);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(xr[r] + ci);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(xv, wv[v], acc[r][v]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* po = out + orow[p + r] * ldo;
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) _mm256_storeu_ps(po + 8 * v, _mm256_add_ps(_mm256_loadu_ps(po + 8 * v), acc[r][v]));
    }
  }
  for (; p < n; ++p) {  // the last n % R pairs
    __m256 acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
    const float* xi = x + in[p] * cin;
    for (int64_t ci = 0; ci < cin; ++ci) {
      const __m256 xv = _mm256_broadcast_ss(xi + ci);
      for (int v = 0; v < NV; ++v) acc[v] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + ci * ldw + 8 * v), acc[v]);
    }
    float* po = out + orow[p] * ldo;
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(po + 8 * v, _mm256_add_ps(_mm256_loadu_ps(po + 8 * v), acc[v]));
  }
}

// Cout (a multiple of 8) in column chunks of 64, 32, 16 and 8; R keeps R * NV accumulators <= 12 registers.
__attribute__((target("avx2,fma"))) void offset_avx2(const float* x, const int64_t* in, const int64_t* orow,
                                                     int64_t n, const float* w, float* out, int64_t cin,
                                                     int64_t cout) {
  int64_t c = 0;
  for (; c + 64 <= cout; c += 64) block_avx2<8, 1>(x, in, orow, n, w + c, cout, out + c, cout, cin);
  if (c + 32 <= cout) { block_avx2<4, 3>(x, in, orow, n, w + c, cout, out + c, cout, cin); c += 32; }
  if (c + 16 <= cout) { block_avx2<2, 6>(x, in, orow, n, w + c, cout, out + c, cout, cin); c += 16; }
  if (c + 8 <= cout) block_avx2<1, 8>(x, in, orow, n, w + c, cout, out + c, cout, cin);
}
#endif

template <typename T>
void run_offset(const T* x, const int64_t* in, const int64_t* orow, int64_t n, const T* w, T* out, int64_t cin,
                int64_t cout) {
#ifdef FSDLITE_SPARSE_CONV_AVX2
  if constexpr (std::is_same_v<T, float>) {
    if (cout % 8 == 0 && cpu_has_avx2_fma()) return offset_avx2(x, in, orow, n, w, out, cin, cout);
  }
#endif
  offset_portable(x, in, orow, n, w, out, cin, cout);
}

at::Tensor sparse_conv_cpu(const at::Tensor& features_, const at::Tensor& weight_, const at::Tensor& pairs_,
                           const at::Tensor& offset_starts, int64_t num_out) {
  const int64_t k = check_args(features_, weight_, pairs_, offset_starts, num_out);
  const at::Tensor features = features_.contiguous(), weight = weight_.contiguous(), pairs = pairs_.contiguous();
  const int64_t cin = weight.size(1), cout = weight.size(2), p = pairs.size(1);
  at::Tensor out = at::zeros({num_out, cout}, features.options());
  if (p == 0 || cin == 0 || cout == 0) return out;
  const at::Tensor starts = offset_starts.contiguous();
  const int64_t* s = starts.data_ptr<int64_t>();
  const int64_t* in = pairs.data_ptr<int64_t>();
  const int64_t* orow = in + p;
  AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "sparse_conv_cpu", [&] {
    const scalar_t* x = features.data_ptr<scalar_t>();
    const scalar_t* w = weight.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t begin = s[kk], n = s[kk + 1] - s[kk];
      if (n == 0) continue;
      const scalar_t* wk = w + kk * cin * cout;
      at::parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
        run_offset<scalar_t>(x, in + begin + lo, orow + begin + lo, hi - lo, wk, o, cin, cout);
      });
    }
  });
  return out;
}

// Two passes over the map: pairs per offset, then each offset's pairs in row order (serial: a pass is cheap next
// to the convolutions that use the pairs, and the order must not depend on threads).
std::tuple<at::Tensor, at::Tensor> sparse_conv_pairs_cpu(const at::Tensor& nbr_, int64_t num_in) {
  check_pairs_args(nbr_, num_in);
  const at::Tensor nbr = nbr_.contiguous();
  const int64_t vout = nbr.size(0), k = nbr.size(1);
  at::Tensor starts = at::zeros({k + 1}, nbr.options());
  int64_t* s = starts.data_ptr<int64_t>();
  const int64_t* m = nbr.data_ptr<int64_t>();
  for (int64_t o = 0; o < vout; ++o)
    for (int64_t kk = 0; kk < k; ++kk) s[kk + 1] += m[o * k + kk] < num_in;
  for (int64_t kk = 0; kk < k; ++kk) s[kk + 1] += s[kk];
  at::Tensor pairs = at::empty({2, s[k]}, nbr.options());
  int64_t* in = pairs.data_ptr<int64_t>();
  int64_t* orow = in + s[k];
  std::vector<int64_t> next(s, s + k);
  for (int64_t o = 0; o < vout; ++o)
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t i = m[o * k + kk];
      if (i < num_in) {
        in[next[kk]] = i;
        orow[next[kk]++] = o;
      }
    }
  return {pairs, starts};
}

}  // namespace
}  // namespace fsdlite::sparse_conv

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("sparse_conv", &fsdlite::sparse_conv::sparse_conv_cpu);
  m.impl("sparse_conv_pairs", &fsdlite::sparse_conv::sparse_conv_pairs_cpu);
}
