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
#include <numeric>
#include <vector>

#include "fsdlite_ops/common.h"
#include "rulebook.h"
#include "sorted_rows.h"

namespace fsdlite::rulebook {
namespace {

// Checks of an unpadded call (every row valid) before any kernel.
Geometry validated(const at::Tensor& coors, c10::IntArrayRef spatial_shape, c10::IntArrayRef kernel_size,
                   c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool subm,
                   const char* op) {
  check_unpadded_coors(coors, op);
  const at::Tensor count = at::scalar_tensor(coors.size(0), coors.options());
  return check_geometry(coors, count, spatial_shape, kernel_size, stride, padding, dilation, subm, op);
}

// (out row, in row) pairs of one chunk and looked-up offset k < K/2.
using PairList = std::vector<int64_t>;

// (2, P) [input row; output row] and (K + 1,) starts of a submanifold map from its lists of offsets k < K/2
// (lists[chunk * K/2 + k], chunks in order): the centre offset pairs every row with itself and offset K-1-k holds
// offset k's pairs swapped.
std::tuple<at::Tensor, at::Tensor> join_symmetric(const std::vector<PairList>& lists, int64_t kv, int64_t rows,
                                                  const at::TensorOptions& opts) {
  const int64_t half = kv / 2, chunks = half ? static_cast<int64_t>(lists.size()) / half : 0;
  auto list_of = [&](int64_t k) { return k < half ? k : kv - 1 - k; };
  at::Tensor starts = at::empty({kv + 1}, opts);
  int64_t* s = starts.data_ptr<int64_t>();
  s[0] = 0;
  for (int64_t k = 0; k < kv; ++k) {
    int64_t n = rows;
    if (k != half) {
      n = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) n += static_cast<int64_t>(lists[ch * half + list_of(k)].size()) / 2;
    }
    s[k + 1] = s[k] + n;
  }
  at::Tensor pairs = at::empty({2, s[kv]}, opts);
  int64_t* in = pairs.data_ptr<int64_t>();
  int64_t* out = in + s[kv];
  at::parallel_for(0, kv, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      int64_t p = s[k];
      if (k == half) {
        for (int64_t r = 0; r < rows; ++r, ++p) in[p] = out[p] = r;
        continue;
      }
      const bool swapped = k > half;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const PairList& l = lists[ch * half + list_of(k)];
        for (size_t e = 0; e < l.size(); e += 2, ++p) {
          out[p] = l[e + swapped];
          in[p] = l[e + !swapped];
        }
      }
    }
  });
  return {pairs, starts};
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
  // offsets k < K/2 are looked up (on key positions); join_symmetric derives the rest
  std::vector<int64_t> looked_up(center);
  std::iota(looked_up.begin(), looked_up.end(), 0);
  std::vector<PairList> lists(((n + kChunk - 1) / kChunk) * center);
  walk_subm_neighbours(c, rows, g, looked_up, [&](int64_t ch, int64_t r, int64_t j, int64_t k) {
    PairList& list = lists[ch * center + k];
    list.push_back(r);
    list.push_back(j);
  });
  auto [pairs, starts] = join_symmetric(lists, kv, n, coors.options());
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
