// CPU kernels of knn_aggregate. Forward: parallel over query rows. Backward: grad_weights parallel over
// query rows; grad_features = mean part through a stable CSR transpose of `index` (source row -> its
// (query, slot) pairs, parallel over source rows) + max part scattered per (query, column) to the winning
// row only (parallel over columns). Race-free, deterministic, no (Nq, k, F) buffer.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "knn_aggregate.h"

namespace fsdlite::knn_aggregate {
namespace {

// Number of non-padding slots of every query row.
std::vector<int64_t> valid_counts(const int64_t* index, int64_t nq, int64_t k, int64_t ns) {
  std::vector<int64_t> counts(nq, 0);
  at::parallel_for(0, nq, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t c = 0;
      for (int64_t s = 0; s < k; ++s) c += index[i * k + s] != ns;
      counts[i] = c;
    }
  });
  return counts;
}

// Rare path of the forward: every candidate of (i, f) is -inf or NaN; the first -inf slot wins (k if none).
template <typename scalar_t>
int64_t first_minus_inf_slot(const scalar_t* x, const int64_t* index, const scalar_t* w, int64_t i, int64_t k,
                             int64_t ns, int64_t width, int64_t f) {
  using acc_t = at::opmath_type<scalar_t>;
  for (int64_t s = 0; s < k; ++s) {
    const int64_t j = index[i * k + s];
    if (j != ns && static_cast<acc_t>(w[i * k + s]) * static_cast<acc_t>(x[j * width + f]) ==
                       -std::numeric_limits<acc_t>::infinity())
      return s;
  }
  return k;
}

template <typename scalar_t>
void forward_kernel(const scalar_t* x, const int64_t* index, const scalar_t* w, int64_t nq, int64_t k, int64_t ns,
                    int64_t width, scalar_t* mean, scalar_t* max, int64_t* arg) {
  using acc_t = at::opmath_type<scalar_t>;
  // integer of the accumulator's width: the slot update below is a bit-mask blend, which
  // vectorises (a second ternary on the same comparison would not)
  using mask_t = std::conditional_t<sizeof(acc_t) == 8, int64_t, int32_t>;
  constexpr acc_t lowest = -std::numeric_limits<acc_t>::infinity();
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, k * width));
  at::parallel_for(0, nq, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> sum_buf(width), best_buf(width);
    std::vector<mask_t> slot_buf(width);
    acc_t* __restrict sum = sum_buf.data();
    acc_t* __restrict best = best_buf.data();
    mask_t* __restrict slot = slot_buf.data();
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t f = 0; f < width; ++f) {
        sum[f] = acc_t(0);
        best[f] = lowest;
        slot[f] = static_cast<mask_t>(k);
      }
      int64_t count = 0;
      for (int64_t s = 0; s < k; ++s) {
        const int64_t j = index[i * k + s];
        if (j == ns) continue;
        ++count;
        const acc_t ws = static_cast<acc_t>(w[i * k + s]);
        const mask_t slot_s = static_cast<mask_t>(s);
        const scalar_t* __restrict row = x + j * width;
        for (int64_t f = 0; f < width; ++f) {  // NaN compares false and never wins;
          const acc_t v = ws * static_cast<acc_t>(row[f]);  // strict '>' keeps the first of ties
          sum[f] += v;
          const acc_t b = best[f];
          const mask_t better = -static_cast<mask_t>(v > b);
          slot[f] = (slot[f] & ~better) | (slot_s & better);
          best[f] = v > b ? v : b;
        }
      }
      if (count == 0) continue;  // no valid neighbour: outputs stay 0, argmax stays k
      int64_t* arg_row = arg + i * width;
      for (int64_t f = 0; f < width; ++f) {
        mean[i * width + f] = static_cast<scalar_t>(sum[f] / static_cast<acc_t>(count));
        int64_t won = static_cast<int64_t>(slot[f]);
        if (won == k) won = first_minus_inf_slot(x, index, w, i, k, ns, width, f);
        arg_row[f] = won;
        if (won != k) max[i * width + f] = static_cast<scalar_t>(best[f]);
      }
    }
  });
}

// grad_weights[i, s] = features[j] . grad_mean[i] / n_i  +  sum over the columns f won by slot s of
// features[j, f] * grad_max[i, f]   (j = index[i, s]; padded slots keep 0).
template <typename scalar_t>
void grad_weights_kernel(const scalar_t* gmean, const scalar_t* gmax, const scalar_t* x, const int64_t* index,
                         const int64_t* arg, const int64_t* counts, int64_t nq, int64_t k, int64_t ns,
                         int64_t width, scalar_t* gw) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, k * width));
  at::parallel_for(0, nq, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> g(k);
    for (int64_t i = begin; i < end; ++i) {
      if (counts[i] == 0) continue;
      const acc_t inv = acc_t(1) / static_cast<acc_t>(counts[i]);
      const scalar_t* gm = gmean + i * width;
      for (int64_t s = 0; s < k; ++s) {
        const int64_t j = index[i * k + s];
        acc_t dot = 0;
        if (j != ns) {
          const scalar_t* row = x + j * width;
          for (int64_t f = 0; f < width; ++f) dot += static_cast<acc_t>(gm[f]) * static_cast<acc_t>(row[f]);
        }
        g[s] = dot * inv;
      }
      for (int64_t f = 0; f < width; ++f) {
        const int64_t s = arg[i * width + f];
        if (s == k) continue;
        g[s] += static_cast<acc_t>(gmax[i * width + f]) * static_cast<acc_t>(x[index[i * k + s] * width + f]);
      }
      for (int64_t s = 0; s < k; ++s)
        if (index[i * k + s] != ns) gw[i * k + s] = static_cast<scalar_t>(g[s]);
    }
  });
}

// CSR of the (query, slot) pairs per source row, ascending pair order.
void transpose_index(const int64_t* index, int64_t pairs, int64_t ns, std::vector<int64_t>& offsets,
                     std::vector<int64_t>& order) {
  offsets.assign(ns + 1, 0);
  for (int64_t p = 0; p < pairs; ++p)
    if (index[p] != ns) ++offsets[index[p] + 1];
  for (int64_t j = 0; j < ns; ++j) offsets[j + 1] += offsets[j];
  std::vector<int64_t> cursor(offsets.begin(), offsets.end() - 1);
  order.resize(offsets[ns]);
  for (int64_t p = 0; p < pairs; ++p)
    if (index[p] != ns) order[cursor[index[p]]++] = p;
}

// grad_features, mean part: gx[j] = sum over the pairs (i, s) pointing at j of weights[i, s] / n_i * grad_mean[i]
// (parallel over source rows through the CSR transpose: race-free and deterministic).
template <typename scalar_t>
void grad_features_mean_kernel(const scalar_t* gmean, const scalar_t* w, const int64_t* counts,
                               const int64_t* offsets, const int64_t* order, int64_t k, int64_t ns, int64_t width,
                               scalar_t* gx) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, width * 8));
  at::parallel_for(0, ns, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc_buf(width);
    acc_t* __restrict acc = acc_buf.data();
    for (int64_t j = begin; j < end; ++j) {
      for (int64_t f = 0; f < width; ++f) acc[f] = acc_t(0);
      for (int64_t p = offsets[j]; p < offsets[j + 1]; ++p) {
        const int64_t pair = order[p], i = pair / k;
        const acc_t c = static_cast<acc_t>(w[pair]) / static_cast<acc_t>(counts[i]);  // n_i >= 1 here
        const scalar_t* __restrict gm = gmean + i * width;
        for (int64_t f = 0; f < width; ++f) acc[f] += c * static_cast<acc_t>(gm[f]);
      }
      for (int64_t f = 0; f < width; ++f) gx[j * width + f] = static_cast<scalar_t>(acc[f]);
    }
  });
}

// grad_features, max part: each (i, f) sends weights[i, s*] * grad_max[i, f] to its winning row
// index[i, s*] only (Nq x F terms, not Nq x k x F); parallel over columns, so no two threads touch
// the same element, in ascending query order (deterministic).
template <typename scalar_t>
void grad_features_max_kernel(const scalar_t* gmax, const int64_t* arg, const scalar_t* w, const int64_t* index,
                              int64_t nq, int64_t k, int64_t width, scalar_t* gx) {
  using acc_t = at::opmath_type<scalar_t>;
  at::parallel_for(0, width, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t f = begin; f < end; ++f) {
        const int64_t s = arg[i * width + f];
        if (s == k) continue;
        scalar_t& out = gx[index[i * k + s] * width + f];
        out = static_cast<scalar_t>(static_cast<acc_t>(out) + static_cast<acc_t>(w[i * k + s]) *
                                                                  static_cast<acc_t>(gmax[i * width + f]));
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> knn_aggregate_cpu(const at::Tensor& features_,
                                                                 const at::Tensor& index_,
                                                                 const at::Tensor& weights_) {
  check_forward_args(features_, index_, weights_);
  const at::Tensor features = features_.contiguous(), index = index_.contiguous(), weights = weights_.contiguous();
  auto [mean, max, arg] = allocate_outputs(features, index);
  const int64_t nq = index.size(0), k = index.size(1), ns = features.size(0), width = features.size(1);
  if (nq == 0 || k == 0 || width == 0) return {mean, max, arg};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, features.scalar_type(), "knn_aggregate_cpu", [&] {
    forward_kernel<scalar_t>(features.data_ptr<scalar_t>(), index.data_ptr<int64_t>(), weights.data_ptr<scalar_t>(),
                             nq, k, ns, width, mean.data_ptr<scalar_t>(), max.data_ptr<scalar_t>(),
                             arg.data_ptr<int64_t>());
  });
  return {mean, max, arg};
}

std::tuple<at::Tensor, at::Tensor> knn_aggregate_backward_cpu(const at::Tensor& grad_mean_,
                                                              const at::Tensor& grad_max_,
                                                              const at::Tensor& features_, const at::Tensor& index_,
                                                              const at::Tensor& weights_, const at::Tensor& argmax_,
                                                              bool need_features, bool need_weights) {
  check_backward_args(grad_mean_, grad_max_, features_, index_, weights_, argmax_);
  const at::Tensor gmean = grad_mean_.contiguous(), gmax = grad_max_.contiguous();
  const at::Tensor features = features_.contiguous(), index = index_.contiguous();
  const at::Tensor weights = weights_.contiguous(), arg = argmax_.contiguous();
  const int64_t nq = index.size(0), k = index.size(1), ns = features.size(0), width = features.size(1);
  at::Tensor gx = need_features ? at::zeros(features.sizes(), features.options()) : at::empty({0}, features.options());
  at::Tensor gw = need_weights ? at::zeros(weights.sizes(), weights.options()) : at::empty({0}, weights.options());
  if (nq == 0 || k == 0 || width == 0 || ns == 0) return {gx, gw};
  const int64_t* idx = index.data_ptr<int64_t>();
  const std::vector<int64_t> counts = valid_counts(idx, nq, k, ns);
  std::vector<int64_t> offsets, order;
  if (need_features) transpose_index(idx, nq * k, ns, offsets, order);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, features.scalar_type(), "knn_aggregate_backward_cpu", [&] {
    if (need_weights)
      grad_weights_kernel<scalar_t>(gmean.data_ptr<scalar_t>(), gmax.data_ptr<scalar_t>(),
                                    features.data_ptr<scalar_t>(), idx, arg.data_ptr<int64_t>(), counts.data(), nq,
                                    k, ns, width, gw.data_ptr<scalar_t>());
    if (need_features) {
      grad_features_mean_kernel<scalar_t>(gmean.data_ptr<scalar_t>(), weights.data_ptr<scalar_t>(), counts.data(),
                                          offsets.data(), order.data(), k, ns, width, gx.data_ptr<scalar_t>());
      grad_features_max_kernel<scalar_t>(gmax.data_ptr<scalar_t>(), arg.data_ptr<int64_t>(),
                                         weights.data_ptr<scalar_t>(), idx, nq, k, width, gx.data_ptr<scalar_t>());
    }
  });
  return {gx, gw};
}

}  // namespace
}  // namespace fsdlite::knn_aggregate

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("knn_aggregate", &fsdlite::knn_aggregate::knn_aggregate_cpu);
  m.impl("knn_aggregate_backward", &fsdlite::knn_aggregate::knn_aggregate_backward_cpu);
}
