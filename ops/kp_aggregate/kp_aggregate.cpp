// Schemas, argument checks and chunked drivers of kp_aggregate and neighbor_aggregate.
#include "kp_aggregate.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"

namespace fsdlite::kp_aggregate {
namespace {

// Checks generated weights (M, slots, W) with W dividing C.
at::Tensor check_gen(const at::Tensor& gen, const at::Tensor& features, int64_t m, int64_t slots,
                     const char* slots_what, const char* op, const char* arg) {
  kp::check_companion(gen, 3, features, m, "the number of queries M", slots, slots_what, op, arg);
  const int64_t w = gen.size(2), c = features.size(1);
  TORCH_CHECK(w >= 1 && c % w == 0, op, ": ", arg, ".size(2) (", w, " weight groups) must divide the ", c,
              " feature channels");
  return gen.contiguous();
}

}  // namespace

Args check_args(const at::Tensor& q_pts, const at::Tensor& s_pts, const at::Tensor& neighbors,
                const at::Tensor& features, const at::Tensor& kernel_points, const c10::optional<at::Tensor>& depthwise,
                const c10::optional<at::Tensor>& gen_weights, double sigma, c10::string_view influence,
                c10::string_view aggregation) {
  constexpr const char* op = "kp_aggregate";
  Args a;
  a.g = kp::check_geometry(q_pts, s_pts, neighbors, kernel_points, features, sigma, influence, aggregation, op);
  a.x = features.contiguous();
  a.c = features.size(1);
  a.w = 1;
  if (depthwise.has_value()) {
    kp::check_companion(*depthwise, 2, features, a.g.k, "the number of kernel points K", a.c, "features.size(1)",
                        op, "depthwise");
    a.dw = depthwise->contiguous();
  }
  if (gen_weights.has_value()) {
    a.gen = check_gen(*gen_weights, features, a.g.m, a.g.k, "the number of kernel points K", op, "gen_weights");
    a.w = a.gen.size(2);
  }
  return a;
}

void check_grad_out(const at::Tensor& grad_out, const Args& a) {
  constexpr const char* op = "kp_aggregate_backward";
  kp::check_companion(grad_out, 2, a.x, a.g.m, "q_pts.size(0)", a.c, "features.size(1)", op, "grad_out");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> allocate_grads(const Args& a, std::array<bool, 3> mask) {
  const auto opts = a.x.options();
  const bool need_d = mask[1] && a.dw.defined(), need_a = mask[2] && a.gen.defined();
  return {mask[0] ? at::zeros({a.g.n, a.c}, opts) : at::empty({0}, opts),
          need_d ? at::zeros({a.g.k, a.c}, opts) : at::empty({0}, opts),
          need_a ? at::zeros({a.g.m, a.g.k, a.w}, opts) : at::empty({0}, opts)};
}

namespace {

// t (b, K, C) *= D[k, c] * A[q, k, c / G] for the defined factors.
void apply_weights(at::Tensor& t, const Args& a, int64_t start) {
  const int64_t b = t.size(0);
  if (a.dw.defined()) t.mul_(a.dw.unsqueeze(0));
  if (a.gen.defined())
    t.view({b, a.g.k, a.w, a.c / a.w}).mul_(a.gen.narrow(0, start, b).unsqueeze(-1));
}

}  // namespace

at::Tensor forward_chunked(const Args& a, const kp::Primitives& p) {
  const auto& g = a.g;
  at::Tensor out = at::zeros({g.m, a.c}, a.x.options());
  if (g.m == 0 || a.c == 0) return out;
  const int64_t rows = kp::chunk_rows(g, a.c, p.chunk_elements);
  at::Tensor acc_buf = at::empty({rows, g.k, a.c}, a.x.options());
  at::Tensor no_infl;
  for (int64_t start = 0; start < g.m; start += rows) {
    const int64_t b = std::min(rows, g.m - start);
    at::Tensor acc = acc_buf.narrow(0, 0, b);
    p.gather(g, a.x, start, acc, no_infl, true);
    apply_weights(acc, a, start);
    at::Tensor o = out.narrow(0, start, b);
    at::sum_out(o, acc, {1});
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_chunked(const at::Tensor& grad_out, const Args& a,
                                                                std::array<bool, 3> mask, const kp::Primitives& p) {
  const auto& g = a.g;
  const auto opts = a.x.options();
  const bool need_x = mask[0], need_d = mask[1] && a.dw.defined(), need_a = mask[2] && a.gen.defined();
  auto [gx, gd, ga] = allocate_grads(a, mask);
  if (g.m == 0 || a.c == 0 || !(need_x || need_d || need_a)) return {gx, gd, ga};
  const at::Tensor go = grad_out.contiguous();
  const int64_t rows = kp::chunk_rows(g, a.c, p.chunk_elements);
  at::Tensor infl_buf = at::empty({rows, g.h, g.k}, opts);
  at::Tensor acc_buf = (need_d || need_a) ? at::empty({rows, g.k, a.c}, opts) : at::Tensor();
  for (int64_t start = 0; start < g.m; start += rows) {
    const int64_t b = std::min(rows, g.m - start);
    at::Tensor infl = infl_buf.narrow(0, 0, b);
    const at::Tensor gq = go.narrow(0, start, b).unsqueeze(1);  // (b, 1, C)
    if (need_d || need_a) {
      at::Tensor acc = acc_buf.narrow(0, 0, b);
      p.gather(g, a.x, start, acc, infl, true);
    } else {
      p.influences(g, start, infl);
    }
    if (need_d || need_a) {
      at::Tensor acc = acc_buf.narrow(0, 0, b);
      acc.mul_(gq);  // acc * g
      if (need_a) {
        at::Tensor t = a.dw.defined() ? acc.mul(a.dw.unsqueeze(0)) : acc;
        ga.narrow(0, start, b).copy_(t.view({b, g.k, a.w, a.c / a.w}).sum(-1));
      }
      if (need_d) {
        if (a.gen.defined()) acc.view({b, g.k, a.w, a.c / a.w}).mul_(a.gen.narrow(0, start, b).unsqueeze(-1));
        gd.add_(acc.sum(0));
      }
    }
    if (need_x) {
      at::Tensor t = gq.expand({b, g.k, a.c}).contiguous();
      apply_weights(t, a, start);
      p.scatter(g, infl, t, start, gx);
    }
  }
  return {gx, gd, ga};
}

namespace {

struct NeighborArgs {
  at::Tensor nb, x, gen;
  int64_t m, n, h, c, w;
};

NeighborArgs check_neighbor_args(const at::Tensor& neighbors, const at::Tensor& features, const at::Tensor& weights) {
  constexpr const char* op = "neighbor_aggregate";
  NeighborArgs a;
  TORCH_CHECK(features.scalar_type() == at::kFloat || features.scalar_type() == at::kDouble, op,
              ": features must be float32 or float64, got ", features.scalar_type());
  check_dim(features, 2, op, "features");
  check_dim(neighbors, 2, op, "neighbors");
  check_dtype(neighbors, at::kLong, op, "neighbors");
  check_same_device(features, neighbors, op, "features", "neighbors");
  a.m = neighbors.size(0);
  a.h = neighbors.size(1);
  a.n = features.size(0);
  a.c = features.size(1);
  a.gen = check_gen(weights, features, a.m, a.h, "neighbors.size(1)", op, "weights");
  a.w = a.gen.size(2);
  check_index_range(neighbors, 0, a.n + 1, op, "neighbors (N = features.size(0) is the shadow neighbour)");
  a.nb = neighbors.contiguous();
  a.x = features.contiguous();
  return a;
}

// Gathered (b, H, C) neighbour features of one chunk, zero rows for shadow neighbours.
at::Tensor gather_chunk(const NeighborArgs& a, const at::Tensor& nbq, const at::Tensor& valid) {
  const int64_t b = nbq.size(0);
  at::Tensor rows = at::index_select(a.x, 0, nbq.clamp_max(a.n - 1).reshape({-1})).view({b, a.h, a.c});
  return rows.mul_(valid);
}

}  // namespace

at::Tensor neighbor_aggregate_op(const at::Tensor& neighbors, const at::Tensor& features, const at::Tensor& weights,
                                 int64_t chunk_elements) {
  const NeighborArgs a = check_neighbor_args(neighbors, features, weights);
  at::Tensor out = at::zeros({a.m, a.c}, a.x.options());
  if (a.m == 0 || a.n == 0 || a.h == 0 || a.c == 0) return out;
  const int64_t rows = std::max<int64_t>(1, chunk_elements / (a.h * a.c));
  for (int64_t start = 0; start < a.m; start += rows) {
    const int64_t b = std::min(rows, a.m - start);
    const at::Tensor nbq = a.nb.narrow(0, start, b);
    at::Tensor g = gather_chunk(a, nbq, nbq.lt(a.n).unsqueeze(-1).to(a.x.scalar_type()));
    g.view({b, a.h, a.w, a.c / a.w}).mul_(a.gen.narrow(0, start, b).unsqueeze(-1));
    at::Tensor o = out.narrow(0, start, b);
    at::sum_out(o, g, {1});
  }
  return out;
}

std::tuple<at::Tensor, at::Tensor> neighbor_aggregate_backward_op(const at::Tensor& grad_out,
                                                                  const at::Tensor& neighbors,
                                                                  const at::Tensor& features,
                                                                  const at::Tensor& weights,
                                                                  std::array<bool, 2> output_mask,
                                                                  int64_t chunk_elements) {
  constexpr const char* op = "neighbor_aggregate_backward";
  const NeighborArgs a = check_neighbor_args(neighbors, features, weights);
  kp::check_companion(grad_out, 2, features, a.m, "neighbors.size(0)", a.c, "features.size(1)", op, "grad_out");
  const auto opts = a.x.options();
  at::Tensor gx = output_mask[0] ? at::zeros({a.n, a.c}, opts) : at::empty({0}, opts);
  at::Tensor gw = output_mask[1] ? at::zeros({a.m, a.h, a.w}, opts) : at::empty({0}, opts);
  if (a.m == 0 || a.n == 0 || a.h == 0 || a.c == 0) return {gx, gw};
  const at::Tensor go = grad_out.contiguous();
  const int64_t rows = std::max<int64_t>(1, chunk_elements / (a.h * a.c));
  for (int64_t start = 0; start < a.m; start += rows) {
    const int64_t b = std::min(rows, a.m - start);
    const at::Tensor nbq = a.nb.narrow(0, start, b);
    const at::Tensor valid = nbq.lt(a.n).unsqueeze(-1).to(a.x.scalar_type());
    const at::Tensor gq = go.narrow(0, start, b).unsqueeze(1);  // (b, 1, C)
    if (output_mask[1]) {
      at::Tensor g = gather_chunk(a, nbq, valid).mul_(gq);
      gw.narrow(0, start, b).copy_(g.view({b, a.h, a.w, a.c / a.w}).sum(-1));
    }
    if (output_mask[0]) {
      at::Tensor t = gq.expand({b, a.h, a.c}).contiguous();
      t.view({b, a.h, a.w, a.c / a.w}).mul_(a.gen.narrow(0, start, b).unsqueeze(-1));
      t.mul_(valid);
      gx.index_add_(0, nbq.clamp_max(a.n - 1).reshape({-1}), t.view({b * a.h, a.c}));
    }
  }
  return {gx, gw};
}

}  // namespace fsdlite::kp_aggregate

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def(
      "kp_aggregate(Tensor q_pts, Tensor s_pts, Tensor neighbors, Tensor features, Tensor kernel_points, "
      "Tensor? depthwise, Tensor? gen_weights, float sigma, str influence, str aggregation) -> Tensor");
  m.def(
      "kp_aggregate_backward(Tensor grad_out, Tensor q_pts, Tensor s_pts, Tensor neighbors, Tensor features, "
      "Tensor kernel_points, Tensor? depthwise, Tensor? gen_weights, float sigma, str influence, str aggregation, "
      "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  // The device-generic chunked drivers (what the CUDA build runs), bound to the CPU primitives so
  // the CPU test-suite checks them against the direct CPU kernels; not part of the public API.
  m.def(
      "_kp_aggregate_chunked(Tensor q_pts, Tensor s_pts, Tensor neighbors, Tensor features, Tensor kernel_points, "
      "Tensor? depthwise, Tensor? gen_weights, float sigma, str influence, str aggregation) -> Tensor");
  m.def(
      "_kp_aggregate_chunked_backward(Tensor grad_out, Tensor q_pts, Tensor s_pts, Tensor neighbors, "
      "Tensor features, Tensor kernel_points, Tensor? depthwise, Tensor? gen_weights, float sigma, str influence, "
      "str aggregation, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("neighbor_aggregate(Tensor neighbors, Tensor features, Tensor weights) -> Tensor");
  m.def(
      "neighbor_aggregate_backward(Tensor grad_out, Tensor neighbors, Tensor features, Tensor weights, "
      "bool[2] output_mask) -> (Tensor, Tensor)");
}
