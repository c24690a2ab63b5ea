// CPU implementation of the kernel-point chunk primitives (see kp_primitives.h), multithreaded with
// at::parallel_for.  Gathers are parallel over queries; the transpose scatter into the feature
// gradient is parallel over channel slices (each thread owns columns [c0, c1) of every row, so
// there are no races and the summation order is fixed).
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <vector>

#include "kp_primitives.h"

namespace fsdlite::kp::cpu {

constexpr int64_t kGrain = 16;

inline void influences(const GeometryTensors& g, int64_t start, at::Tensor& infl) {
  const int64_t rows = infl.size(0);
  AT_DISPATCH_FLOATING_TYPES(g.q_pts.scalar_type(), "kp_influences_cpu", [&] {
    const Geometry<scalar_t> geo = g.view<scalar_t>();
    scalar_t* out = infl.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t s = 0; s < geo.h; ++s) geo.influences(start + r, s, out + (r * geo.h + s) * geo.k);
    });
  });
}

inline void gather(const GeometryTensors& g, const at::Tensor& x, int64_t start, at::Tensor& acc, at::Tensor& infl,
                   bool compute) {
  const int64_t rows = acc.size(0), c = x.size(1), h = g.h, k = g.k, n = g.n;
  const bool store = infl.defined();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "kp_gather_cpu", [&] {
    const Geometry<scalar_t> geo = g.view<scalar_t>();
    const scalar_t* xs = x.data_ptr<scalar_t>();
    scalar_t* buffer = store ? infl.data_ptr<scalar_t>() : nullptr;
    scalar_t* a = acc.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kGrain, [&](int64_t begin, int64_t end) {
      std::vector<scalar_t> local(store ? 0 : k);
      for (int64_t r = begin; r < end; ++r) {
        scalar_t* arow = a + r * k * c;
        std::fill(arow, arow + k * c, scalar_t(0));
        for (int64_t s = 0; s < h; ++s) {
          const int64_t j = geo.neighbor(start + r, s);
          scalar_t* wr = store ? buffer + (r * h + s) * k : local.data();
          if (compute) geo.influences(start + r, s, wr);
          if (j >= n) continue;
          const scalar_t* xr = xs + j * c;
          for (int64_t kk = 0; kk < k; ++kk) {
            const scalar_t wk = wr[kk];
            if (wk == scalar_t(0)) continue;
            scalar_t* ak = arow + kk * c;
            for (int64_t ch = 0; ch < c; ++ch) ak[ch] += wk * xr[ch];
          }
        }
      }
    });
  });
}

inline void scatter(const GeometryTensors& g, const at::Tensor& infl, const at::Tensor& t, int64_t start,
                    at::Tensor& gx) {
  const int64_t rows = t.size(0), c = gx.size(1), h = g.h, k = g.k, n = g.n;
  const int64_t* nb = g.neighbors.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(gx.scalar_type(), "kp_scatter_cpu", [&] {
    const scalar_t* w = infl.data_ptr<scalar_t>();
    const scalar_t* ts = t.data_ptr<scalar_t>();
    scalar_t* out = gx.data_ptr<scalar_t>();
    at::parallel_for(0, c, kGrain, [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t s = 0; s < h; ++s) {
          const int64_t j = nb[(start + r) * h + s];
          if (j >= n) continue;
          const scalar_t* wr = w + (r * h + s) * k;
          scalar_t* orow = out + j * c;
          for (int64_t kk = 0; kk < k; ++kk) {
            const scalar_t wk = wr[kk];
            if (wk == scalar_t(0)) continue;
            const scalar_t* tk = ts + (r * k + kk) * c;
            for (int64_t ch = c0; ch < c1; ++ch) orow[ch] += wk * tk[ch];
          }
        }
      }
    });
  });
}

inline void kernel_grad(const GeometryTensors& g, const at::Tensor& x, const at::Tensor& t, int64_t start,
                        at::Tensor& out) {
  const int64_t rows = t.size(0), c = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "kp_kernel_grad_cpu", [&] {
    const Geometry<scalar_t> geo = g.view<scalar_t>();
    const scalar_t* xs = x.data_ptr<scalar_t>();
    const scalar_t* ts = t.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t q = start + r;
        for (int64_t s = 0; s < geo.h; ++s) {
          const int64_t j = geo.neighbor(q, s);
          if (j >= geo.n) continue;
          const int64_t k0 = geo.nearest ? geo.nearest_kernel(q, j) : 0;
          const int64_t k1 = geo.nearest ? k0 + 1 : geo.k;
          for (int64_t kk = k0; kk < k1; ++kk) {
            scalar_t dh[3];
            if (!geo.influence_grad(q, j, kk, dh)) continue;
            const scalar_t* tk = ts + (r * geo.k + kk) * c;
            const scalar_t* xr = xs + j * c;
            scalar_t dot = 0;
            for (int64_t ch = 0; ch < c; ++ch) dot += tk[ch] * xr[ch];
            scalar_t* ok = o + (r * geo.k + kk) * 3;
            for (int a = 0; a < 3; ++a) ok[a] += dot * dh[a];
          }
        }
      }
    });
  });
}

inline Primitives primitives() { return Primitives{&influences, &gather, &scatter, &kernel_grad, int64_t(1) << 21}; }

}  // namespace fsdlite::kp::cpu
