// Schemas, argument checks and the chunked forward/backward drivers of kpconv.
#include "kpconv.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"

namespace fsdlite::kpconv {
namespace {

struct Args {
  kp::GeometryTensors g;
  at::Tensor x;    // (N, C1) contiguous
  at::Tensor w2d;  // (K * C1, C2) contiguous
  at::Tensor mod;  // (M, K) contiguous, or undefined
  int64_t c1, c2;
};

Args check_args(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
                const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
                c10::string_view aggregation) {
  constexpr const char* op = "kpconv";
  Args a;
  a.g = kp::check_geometry(q_pts, s_pts, neighbors, kernel_points, features, sigma, influence, aggregation, op);
  kp::check_companion(weights, 3, features, a.g.k, "the number of kernel points K", features.size(1),
                      "features.size(1)", op, "weights");
  a.c1 = features.size(1);
  a.c2 = weights.size(2);
  a.x = features.contiguous();
  a.w2d = weights.contiguous().view({a.g.k * a.c1, a.c2});
  if (modulations.has_value()) {
    kp::check_companion(*modulations, 2, features, a.g.m, "q_pts.size(0)", a.g.k, "the number of kernel points K",
                        op, "modulations");
    a.mod = modulations->contiguous();
  }
  return a;
}

at::Tensor forward(const Args& a, const kp::Primitives& p) {
  const auto& g = a.g;
  at::Tensor out = at::zeros({g.m, a.c2}, a.x.options());
  if (g.m == 0 || a.c2 == 0 || a.c1 == 0) return out;
  const int64_t rows = kp::chunk_rows(g, a.c1, p.chunk_elements);
  at::Tensor acc_buf = at::empty({rows, g.k, a.c1}, a.x.options());
  at::Tensor no_infl;  // influences are computed inside the gather and not kept
  for (int64_t start = 0; start < g.m; start += rows) {
    const int64_t b = std::min(rows, g.m - start);
    at::Tensor acc = acc_buf.narrow(0, 0, b);
    p.gather(g, a.x, start, acc, no_infl, true);
    if (a.mod.defined()) acc.mul_(a.mod.narrow(0, start, b).unsqueeze(-1));
    at::Tensor o = out.narrow(0, start, b);
    at::mm_out(o, acc.view({b, g.k * a.c1}), a.w2d);
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& grad_out, const Args& a,
                                                                    std::array<bool, 4> mask,
                                                                    const kp::Primitives& p) {
  const auto& g = a.g;
  const auto opts = a.x.options();
  const bool has_mod = a.mod.defined();
  const bool need_x = mask[0], need_kp = mask[1], need_w = mask[2], need_m = mask[3] && has_mod;
  at::Tensor gx = need_x ? at::zeros({g.n, a.c1}, opts) : at::empty({0}, opts);
  at::Tensor gkp = need_kp ? at::zeros_like(g.kernel_points) : at::empty({0}, opts);
  at::Tensor gw = need_w ? at::zeros({g.k * a.c1, a.c2}, opts) : at::empty({0}, opts);
  at::Tensor gm = need_m ? at::zeros({g.m, g.k}, opts) : at::empty({0}, opts);
  const bool need_acc = need_w || need_m;
  const bool need_t = need_x || need_kp || need_m;
  if (g.m > 0 && a.c1 > 0 && a.c2 > 0 && (need_acc || need_t)) {
    const at::Tensor go = grad_out.contiguous();
    const int64_t rows = kp::chunk_rows(g, a.c1, p.chunk_elements);
    at::Tensor infl_buf = at::empty({rows, g.h, g.k}, opts);
    at::Tensor acc_buf = need_acc ? at::empty({rows, g.k, a.c1}, opts) : at::Tensor();
    at::Tensor t_buf = need_t ? at::empty({rows, g.k, a.c1}, opts) : at::Tensor();
    at::Tensor kp_buf = (need_kp && !g.kp_per_query) ? at::empty({rows, g.k, 3}, opts) : at::Tensor();
    for (int64_t start = 0; start < g.m; start += rows) {
      const int64_t b = std::min(rows, g.m - start);
      const at::Tensor gq = go.narrow(0, start, b);
      at::Tensor infl = infl_buf.narrow(0, 0, b);
      at::Tensor acc, t;
      if (need_acc) {
        acc = acc_buf.narrow(0, 0, b);
        p.gather(g, a.x, start, acc, infl, true);  // also stores the influences for the scatter
      } else {
        p.influences(g, start, infl);
      }
      if (need_t) {
        t = t_buf.narrow(0, 0, b);
        at::Tensor t2d = t.view({b, g.k * a.c1});
        at::mm_out(t2d, gq, a.w2d.t());
      }
      if (has_mod) {
        const at::Tensor mq = a.mod.narrow(0, start, b).unsqueeze(-1);
        if (need_m) gm.narrow(0, start, b).copy_(t.mul(acc).sum(-1));
        if (need_acc) acc.mul_(mq);
        if (need_t) t.mul_(mq);  // now d loss / d (unmodulated correlation)
      }
      if (need_w) gw.addmm_(acc.view({b, g.k * a.c1}).t(), gq);
      if (need_x) p.scatter(g, infl, t, start, gx);
      if (need_kp) {
        if (g.kp_per_query) {
          at::Tensor o = gkp.narrow(0, start, b);
          p.kernel_grad(g, a.x, t, start, o);
        } else {
          at::Tensor o = kp_buf.narrow(0, 0, b);
          o.zero_();
          p.kernel_grad(g, a.x, t, start, o);
          gkp.add_(o.sum(0));
        }
      }
    }
  }
  if (need_w) gw = gw.view({g.k, a.c1, a.c2});
  return {gx, gkp, gw, gm};
}

}  // namespace

at::Tensor kpconv_op(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                     const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
                     const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
                     c10::string_view aggregation, const kp::Primitives& p) {
  const Args a = check_args(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma, influence,
                            aggregation);
  kp::check_positions_finite(q_pts, s_pts, kernel_points, "kpconv");
  return forward(a, p);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> kpconv_backward_op(
    const at::Tensor& grad_out, const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
    const at::Tensor& features, const at::Tensor& kernel_points, const at::Tensor& weights,
    const c10::optional<at::Tensor>& modulations, double sigma, c10::string_view influence,
    c10::string_view aggregation, std::array<bool, 4> output_mask, const kp::Primitives& p) {
  constexpr const char* op = "kpconv_backward";
  const Args a = check_args(q_pts, s_pts, neighbors, features, kernel_points, weights, modulations, sigma,
                            influence, aggregation);
  kp::check_companion(grad_out, 2, features, a.g.m, "q_pts.size(0)", a.c2, "weights.size(2)", op, "grad_out");
  return backward(grad_out, a, output_mask, p);
}

}  // namespace fsdlite::kpconv

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def(
      "kpconv(Tensor q_pts, Tensor s_pts, Tensor neighbors, Tensor features, Tensor kernel_points, "
      "Tensor weights, Tensor? modulations, float sigma, str influence, str aggregation) -> Tensor");
  m.def(
      "kpconv_backward(Tensor grad_out, Tensor q_pts, Tensor s_pts, Tensor neighbors, Tensor features, "
      "Tensor kernel_points, Tensor weights, Tensor? modulations, float sigma, str influence, str aggregation, "
      "bool[4] output_mask) -> (Tensor, Tensor, Tensor, Tensor)");
}
