// CPU kernels of kp_aggregate (direct: no (rows, K, C) correlation, influences computed on the fly),
// the CPU binding of the device-generic chunked drivers (tested against the direct kernels), and the
// CPU registration of neighbor_aggregate (shared chunked ATen driver).
//
// forward, parallel over queries: E[k, c] = D[k, c] * A[q, k, c / G] (per query, K x C), then
//   y[q, c] += infl[q, h, k] * E[k, c] * x[j, c] for every non-zero influence.
// backward, per chunk of queries: (1) parallel over queries: influences (kept for this chunk),
//   dA[q, k, a] += sum_{c in a} v D[k, c] and thread-local dD[k, c] += v A[q, k, a] with
//   v = infl * g[q, c] * x[j, c]; (2) parallel over channel slices (race-free, fixed order):
//   dx[j, c] += infl * D[k, c] * A[q, k, c / G] * g[q, c].
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <vector>

#include "../kpconv/kp_primitives_cpu.h"
#include "kp_aggregate.h"

namespace fsdlite::kp_aggregate {
namespace {

template <typename T>
struct Weights {
  const T* dw;   // (K, C) or nullptr
  const T* gen;  // (M, K, W) or nullptr
  int64_t k, c, w, g;  // g = channels per generated weight
  // Row k of E for query q: D[k, c] * A[q, k, c / G].
  void effective(int64_t q, int64_t kk, T* out) const {
    for (int64_t a = 0; a < w; ++a) {
      const T av = gen ? gen[(q * k + kk) * w + a] : T(1);
      for (int64_t ch = a * g; ch < (a + 1) * g; ++ch) out[ch] = dw ? av * dw[kk * c + ch] : av;
    }
  }
};

template <typename T>
Weights<T> weights_of(const Args& a) {
  return Weights<T>{a.dw.defined() ? a.dw.data_ptr<T>() : nullptr, a.gen.defined() ? a.gen.data_ptr<T>() : nullptr,
                    a.g.k, a.c, a.w, a.c / a.w};
}

at::Tensor forward_cpu(const Args& a) {
  const auto& g = a.g;
  at::Tensor out = at::zeros({g.m, a.c}, a.x.options());
  if (g.m == 0 || a.c == 0 || g.h == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(a.x.scalar_type(), "kp_aggregate_cpu", [&] {
    const kp::Geometry<scalar_t> geo = g.view<scalar_t>();
    const Weights<scalar_t> wt = weights_of<scalar_t>(a);
    const scalar_t* xs = a.x.data_ptr<scalar_t>();
    scalar_t* ys = out.data_ptr<scalar_t>();
    const int64_t k = g.k, c = a.c;
    at::parallel_for(0, g.m, kp::cpu::kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> infl(k), eff(k * c);
      for (int64_t q = begin; q < end; ++q) {
        for (int64_t kk = 0; kk < k; ++kk) wt.effective(q, kk, eff.data() + kk * c);
        scalar_t* y = ys + q * c;
        for (int64_t s = 0; s < g.h; ++s) {
          const int64_t j = geo.neighbor(q, s);
          if (j >= g.n) continue;
          geo.influences(q, s, infl.data());
          const scalar_t* xr = xs + j * c;
          for (int64_t kk = 0; kk < k; ++kk) {
            const scalar_t w = infl[kk];
            if (w == scalar_t(0)) continue;
            const scalar_t* e = eff.data() + kk * c;
            for (int64_t ch = 0; ch < c; ++ch) y[ch] += w * e[ch] * xr[ch];
          }
        }
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const Args& a,
                                                            std::array<bool, 3> mask) {
  const auto& g = a.g;
  auto [gx, gd, ga] = allocate_grads(a, mask);
  const bool need_x = mask[0], need_d = gd.numel() > 0, need_a = ga.numel() > 0;
  if (g.m == 0 || a.c == 0 || g.h == 0 || !(need_x || need_d || need_a)) return {gx, gd, ga};
  const at::Tensor go = grad_out.contiguous();
  const int64_t rows = kp::chunk_rows(g, 0, kp::cpu::primitives().chunk_elements);
  const int64_t threads = at::get_num_threads();
  at::Tensor infl_buf = at::empty({rows, g.h, g.k}, a.x.options());
  at::Tensor gd_parts = need_d ? at::zeros({threads, g.k, a.c}, a.x.options()) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(a.x.scalar_type(), "kp_aggregate_backward_cpu", [&] {
    const kp::Geometry<scalar_t> geo = g.view<scalar_t>();
    const Weights<scalar_t> wt = weights_of<scalar_t>(a);
    const scalar_t* xs = a.x.data_ptr<scalar_t>();
    const scalar_t* gs = go.data_ptr<scalar_t>();
    scalar_t* infl = infl_buf.data_ptr<scalar_t>();
    scalar_t* gas = need_a ? ga.data_ptr<scalar_t>() : nullptr;
    const int64_t k = g.k, c = a.c, h = g.h, w = a.w, grp = wt.g;
    for (int64_t start = 0; start < g.m; start += rows) {
      const int64_t b = std::min(rows, g.m - start);
      at::parallel_for(0, b, kp::cpu::kGrain, [&](int64_t begin, int64_t end) {
        scalar_t* gdp = need_d ? gd_parts.data_ptr<scalar_t>() + at::get_thread_num() * k * c : nullptr;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t q = start + r;
          const scalar_t* gq = gs + q * c;
          for (int64_t s = 0; s < h; ++s) {
            scalar_t* wr = infl + (r * h + s) * k;
            geo.influences(q, s, wr);
            const int64_t j = geo.neighbor(q, s);
            if (j >= g.n || !(need_a || need_d)) continue;
            const scalar_t* xr = xs + j * c;
            for (int64_t kk = 0; kk < k; ++kk) {
              if (wr[kk] == scalar_t(0)) continue;
              for (int64_t at_ = 0; at_ < w; ++at_) {
                const scalar_t av = wt.gen ? wt.gen[(q * k + kk) * w + at_] : scalar_t(1);
                scalar_t sum = 0;
                for (int64_t ch = at_ * grp; ch < (at_ + 1) * grp; ++ch) {
                  const scalar_t v = wr[kk] * gq[ch] * xr[ch];
                  sum += wt.dw ? v * wt.dw[kk * c + ch] : v;
                  if (gdp) gdp[kk * c + ch] += v * av;
                }
                if (gas) gas[(q * k + kk) * w + at_] += sum;
              }
            }
          }
        }
      });
      if (!need_x) continue;
      scalar_t* gxs = gx.data_ptr<scalar_t>();
      at::parallel_for(0, c, kp::cpu::kGrain, [&](int64_t c0, int64_t c1) {
        for (int64_t r = 0; r < b; ++r) {
          const int64_t q = start + r;
          const scalar_t* gq = gs + q * c;
          for (int64_t s = 0; s < h; ++s) {
            const int64_t j = geo.neighbor(q, s);
            if (j >= g.n) continue;
            const scalar_t* wr = infl + (r * h + s) * k;
            scalar_t* out = gxs + j * c;
            for (int64_t kk = 0; kk < k; ++kk) {
              if (wr[kk] == scalar_t(0)) continue;
              for (int64_t at_ = c0 / grp; at_ * grp < c1; ++at_) {
                const scalar_t coef = wr[kk] * (wt.gen ? wt.gen[(q * k + kk) * w + at_] : scalar_t(1));
                const int64_t lo = std::max(c0, at_ * grp), hi = std::min(c1, (at_ + 1) * grp);
                for (int64_t ch = lo; ch < hi; ++ch) out[ch] += coef * (wt.dw ? wt.dw[kk * c + ch] : 1) * gq[ch];
              }
            }
          }
        }
      });
    }
  });
  if (need_d) gd.copy_(gd_parts.sum(0));
  return {gx, gd, ga};
}

// The device-generic chunked drivers on the CPU primitives (the private _kp_aggregate_chunked* ops).
at::Tensor forward_chunked_cpu(const Args& a) { return forward_chunked(a, kp::cpu::primitives()); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_chunked_cpu(const at::Tensor& grad_out, const Args& a,
                                                                    std::array<bool, 3> mask) {
  return backward_chunked(grad_out, a, mask, kp::cpu::primitives());
}

at::Tensor neighbor_aggregate_cpu(const at::Tensor& neighbors, const at::Tensor& features, const at::Tensor& weights) {
  return neighbor_aggregate_op(neighbors, features, weights, kp::cpu::primitives().chunk_elements);
}

std::tuple<at::Tensor, at::Tensor> neighbor_aggregate_backward_cpu(const at::Tensor& grad_out,
                                                                   const at::Tensor& neighbors,
                                                                   const at::Tensor& features,
                                                                   const at::Tensor& weights,
                                                                   std::array<bool, 2> output_mask) {
  return neighbor_aggregate_backward_op(grad_out, neighbors, features, weights, output_mask,
                                        kp::cpu::primitives().chunk_elements);
}

}  // namespace
}  // namespace fsdlite::kp_aggregate

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  namespace kpa = fsdlite::kp_aggregate;
  m.impl("kp_aggregate", &kpa::forward_op<kpa::forward_cpu>);
  m.impl("kp_aggregate_backward", &kpa::backward_op<kpa::backward_cpu>);
  m.impl("_kp_aggregate_chunked", &kpa::forward_op<kpa::forward_chunked_cpu>);
  m.impl("_kp_aggregate_chunked_backward", &kpa::backward_op<kpa::backward_chunked_cpu>);
  m.impl("neighbor_aggregate", &fsdlite::kp_aggregate::neighbor_aggregate_cpu);
  m.impl("neighbor_aggregate_backward", &fsdlite::kp_aggregate::neighbor_aggregate_backward_cpu);
}
