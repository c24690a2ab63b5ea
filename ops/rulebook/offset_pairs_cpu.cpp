// CPU kernels of rulebook_subm_pairs / rulebook_conv_pairs: the pairs of a sparse conv grouped by kernel offset
// (fsdlite.ops.sparse_conv's format) built straight from the voxel coordinates, without the (V, K) neighbour map
// the padded rulebook ops fill and a second pass that lists its entries.
//
// Rows are split into fixed chunks; each chunk collects its pairs per offset and the chunks are joined in order,
// so the result never depends on the thread count. Within an offset the output rows strictly increase. When the
// input voxels are sorted by (b, z, y, x) (the order of every strided conv's output; SparseUNet sorts its input
// voxels) the input rows strictly increase too: a submanifold map then walks the sorted keys for half of the
// offsets only (offset K-1-k holds offset k's pairs swapped), and the pairs of a strided conv, swapped, are already
// those of its inverse conv. Unsorted voxels are handled in key order too, then mapped back to their rows.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "fsdlite_ops/common.h"
#include "rulebook.h"
#include "sorted_rows.h"

namespace fsdlite::rulebook {
namespace {

// (out row, in row) pairs of one chunk and offset.
using PairList = std::vector<int64_t>;

Geometry validated(const at::Tensor& coors, c10::IntArrayRef spatial_shape, c10::IntArrayRef kernel_size,
                   c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool subm,
                   const char* op) {
  check_dtype(coors, at::kLong, op, "coors");
  TORCH_CHECK(coors.dim() == 2 && coors.size(1) == 4, op, ": coors must have shape (V, 4) [b, z, y, x], got ",
              coors.sizes());
  const at::Tensor count = at::scalar_tensor(coors.size(0), coors.options());
  return check_geometry(coors, count, spatial_shape, kernel_size, stride, padding, dilation, subm, op);
}

// How offset k's pairs come out of the collected lists.
struct OffsetSource {
  enum Kind { kList, kSwapped, kIdentity } kind;
  int64_t list;  // list offset for kList / kSwapped
};

// (2, P) [input row; output row] and (K + 1,) starts from per-(chunk, list offset) lists of (out, in) pairs.
std::tuple<at::Tensor, at::Tensor> join(const std::vector<PairList>& lists, int64_t num_lists,
                                        const std::vector<OffsetSource>& sources, int64_t identity_rows,
                                        const at::TensorOptions& opts) {
  const int64_t kv = static_cast<int64_t>(sources.size());
  const int64_t chunks = num_lists ? static_cast<int64_t>(lists.size()) / num_lists : 0;
  at::Tensor starts = at::empty({kv + 1}, opts);
  int64_t* s = starts.data_ptr<int64_t>();
  s[0] = 0;
  for (int64_t k = 0; k < kv; ++k) {
    int64_t n = identity_rows;
    if (sources[k].kind != OffsetSource::kIdentity) {
      n = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) n += static_cast<int64_t>(lists[ch * num_lists + sources[k].list].size());
      n /= 2;
    }
    s[k + 1] = s[k] + n;
  }
  at::Tensor pairs = at::empty({2, s[kv]}, opts);
  int64_t* in = pairs.data_ptr<int64_t>();
  int64_t* out = in + s[kv];
  at::parallel_for(0, kv, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      int64_t p = s[k];
      const OffsetSource src = sources[k];
      if (src.kind == OffsetSource::kIdentity) {
        for (int64_t r = 0; r < identity_rows; ++r, ++p) in[p] = out[p] = r;
        continue;
      }
      const bool swapped = src.kind == OffsetSource::kSwapped;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const PairList& l = lists[ch * num_lists + src.list];
        for (size_t e = 0; e < l.size(); e += 2, ++p) {
          out[p] = swapped ? l[e + 1] : l[e];
          in[p] = swapped ? l[e] : l[e + 1];
        }
      }
    }
  });
  return {pairs, starts};
}

// Sorted rows: the pairs of offsets k < K/2 by walking the sorted keys (sorted_rows.h); rows are key positions.
void sorted_subm_lookups(const int64_t* c, const SortedRows& sorted, const Geometry& g, std::vector<PairList>& lists,
                         const std::vector<int64_t>& looked_up) {
  const int64_t num_lists = static_cast<int64_t>(looked_up.size());
  walk_subm_neighbours(c, sorted, g, looked_up, [&](int64_t ch, int64_t r, int64_t j, int64_t l) {
    PairList& list = lists[ch * num_lists + l];
    list.push_back(r);
    list.push_back(j);
  });
}

// Pairs built on key positions (sorted rows) -> pairs of the caller's rows: each position becomes its row and every
// offset's pairs are put back in output-row order (two stable counting sorts: by output row, then by offset).
void to_caller_rows(at::Tensor& pairs, const at::Tensor& starts, const std::vector<int64_t>& rows) {
  const int64_t total = pairs.size(1), kv = starts.size(0) - 1, n = static_cast<int64_t>(rows.size());
  int64_t* in = pairs.data_ptr<int64_t>();
  int64_t* out = in + total;
  const int64_t* st = starts.data_ptr<int64_t>();
  std::vector<int64_t> by_out(total), count(n + 1, 0);
  for (int64_t q = 0; q < total; ++q) ++count[rows[out[q]] + 1];
  for (int64_t r = 0; r < n; ++r) count[r + 1] += count[r];
  std::vector<int64_t> offset(total);
  for (int64_t k = 0; k < kv; ++k)
    for (int64_t q = st[k]; q < st[k + 1]; ++q) offset[q] = k;
  for (int64_t q = 0; q < total; ++q) by_out[count[rows[out[q]]]++] = q;
  std::vector<int64_t> next(st, st + kv), new_in(total), new_out(total);
  for (const int64_t q : by_out) {
    const int64_t at = next[offset[q]]++;
    new_in[at] = rows[in[q]];
    new_out[at] = rows[out[q]];
  }
  std::copy(new_in.begin(), new_in.end(), in);
  std::copy(new_out.begin(), new_out.end(), out);
}

std::tuple<at::Tensor, at::Tensor> rulebook_subm_pairs_cpu(const at::Tensor& coors_, c10::IntArrayRef spatial_shape,
                                                           c10::IntArrayRef kernel_size, c10::IntArrayRef dilation) {
  const int64_t ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0};
  const Geometry g = validated(coors_, spatial_shape, kernel_size, ones, zeros, dilation, true, "rulebook_subm_pairs");
  const at::Tensor coors = coors_.contiguous();
  const int64_t n = g.num_valid, kv = g.kernel_volume, center = kv / 2;
  const int64_t* c = coors.data_ptr<int64_t>();
  const SortedRows rows = sort_rows(coors, g, "rulebook_subm_pairs");  // also rejects duplicate voxels
  // offsets k < K/2 are looked up and K-1-k is k swapped (on key positions)
  std::vector<int64_t> looked_up(center);
  std::vector<OffsetSource> sources(kv);
  for (int64_t k = 0; k < kv; ++k) {
    sources[k] = k == center  ? OffsetSource{OffsetSource::kIdentity, 0}
                 : k < center ? OffsetSource{OffsetSource::kList, k}
                              : OffsetSource{OffsetSource::kSwapped, kv - 1 - k};
    if (k < center) looked_up[k] = k;
  }
  std::vector<PairList> lists(((n + kChunk - 1) / kChunk) * center);
  sorted_subm_lookups(c, rows, g, lists, looked_up);
  auto [pairs, starts] = join(lists, center, sources, n, coors.options());
  if (!rows.identity) to_caller_rows(pairs, starts, rows.rows);
  return {pairs, starts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rulebook_conv_pairs_cpu(
    const at::Tensor& coors_, c10::IntArrayRef spatial_shape, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation) {
  constexpr const char* op = "rulebook_conv_pairs";
  const Geometry g = validated(coors_, spatial_shape, kernel_size, stride, padding, dilation, false, op);
  const at::Tensor coors = coors_.contiguous();
  const int64_t n = g.num_valid, kv = g.kernel_volume;
  const int64_t* c = coors.data_ptr<int64_t>();
  const SortedRows sorted = sort_rows(coors, g, op);  // also rejects duplicate voxels
  const ConvReach reach = conv_reach(c, sorted, g);
  const int64_t num_out = static_cast<int64_t>(reach.out_keys.size()), total = reach.start[n];
  at::Tensor out_coors = at::empty({num_out, 4}, coors.options());
  decode_sorted(reach.out_keys, num_out, g.out_shape, out_coors.data_ptr<int64_t>());
  // every reach is a pair: grouped by offset with a counting sort in sorted-input order, so the output rows ascend
  // within an offset (and the input rows too when the voxels were sorted)
  at::Tensor starts = at::zeros({kv + 1}, coors.options());
  int64_t* st = starts.data_ptr<int64_t>();
  for (int64_t e = 0; e < total; ++e) ++st[reach.offset[e] + 1];
  for (int64_t k = 0; k < kv; ++k) st[k + 1] += st[k];
  at::Tensor pairs = at::empty({2, total}, coors.options());
  int64_t* in = pairs.data_ptr<int64_t>();
  int64_t* out = in + total;
  std::vector<int64_t> next(st, st + kv);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = reach.start[i]; e < reach.start[i + 1]; ++e) {
      const int64_t q = next[reach.offset[e]]++;
      in[q] = sorted.rows[i];
      out[q] = reach.row[e];
    }
  }
  return {out_coors, pairs, starts};
}

}  // namespace
}  // namespace fsdlite::rulebook

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("rulebook_subm_pairs", &fsdlite::rulebook::rulebook_subm_pairs_cpu);
  m.impl("rulebook_conv_pairs", &fsdlite::rulebook::rulebook_conv_pairs_cpu);
}
