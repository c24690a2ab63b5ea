// CPU kernels of rulebook_subm_pairs / rulebook_conv_pairs: the pairs of a sparse conv grouped by kernel offset
// (fsdlite.ops.sparse_conv's format) built straight from the voxel coordinates, without the (V, K) neighbour map
// the padded rulebook ops fill and a second pass that lists its entries.
//
// Rows are split into fixed chunks; each chunk collects its pairs per offset and the chunks are joined in order,
// so the result never depends on the thread count. Within an offset the output rows strictly increase. When the
// input voxels are sorted by (b, z, y, x) (the order of voxelize and of every strided conv's output) the input
// rows strictly increase too: a submanifold map then needs lookups for half of the offsets only (offset K-1-k
// holds offset k's pairs swapped), and the pairs of a strided conv, swapped, are already those of its inverse conv.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "cpu_common.h"
#include "fsdlite_ops/common.h"
#include "rulebook.h"

namespace fsdlite::rulebook {
namespace {

constexpr int64_t kChunk = 4096;  // rows per chunk (one parallel task)

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

// Keys (encode) of rows [0, n); `sorted` tells whether they strictly increase (rows sorted by (b, z, y, x), hence
// also unique).
std::vector<int64_t> row_keys(const int64_t* c, int64_t n, const int64_t* shape, bool* sorted) {
  std::vector<int64_t> keys(n);
  *sorted = true;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* r = c + 4 * i;
    keys[i] = encode(r[0], r[1], r[2], r[3], shape);
    if (i > 0 && keys[i] <= keys[i - 1]) *sorted = false;
  }
  return keys;
}

// Sorts non-negative keys < 2^62 (LSD radix sort, 11-bit digits up to the highest bit of max_key).
void radix_sort(std::vector<int64_t>& a, int64_t max_key) {
  constexpr int kBits = 11;
  constexpr int64_t kMask = (1 << kBits) - 1;
  std::vector<int64_t> tmp(a.size());
  for (int shift = 0; shift < 63 && (max_key >> shift) > 0; shift += kBits) {
    std::vector<int64_t> count(kMask + 2, 0);
    for (const int64_t v : a) ++count[((v >> shift) & kMask) + 1];
    for (int64_t d = 0; d <= kMask; ++d) count[d + 1] += count[d];
    for (const int64_t v : a) tmp[count[(v >> shift) & kMask]++] = v;
    a.swap(tmp);
  }
}

// Runs fn(chunk, begin, end) over the row chunks of [0, n) in parallel.
template <typename Fn>
void for_each_chunk(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t ch = lo; ch < hi; ++ch) fn(ch, ch * kChunk, std::min(n, (ch + 1) * kChunk));
  });
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

// Sorts the pairs [lo, hi) by output row (unsorted inputs).
void sort_by_output(int64_t* in, int64_t* out, int64_t lo, int64_t hi) {
  std::vector<std::pair<int64_t, int64_t>> tmp(hi - lo);
  for (int64_t q = lo; q < hi; ++q) tmp[q - lo] = {out[q], in[q]};
  std::sort(tmp.begin(), tmp.end());
  for (int64_t q = lo; q < hi; ++q) std::tie(out[q], in[q]) = tmp[q - lo];
}

// Per-axis shift of offset k of a submanifold kernel.
void subm_shift(int64_t k, const Geometry& g, int64_t* shift) {
  int64_t kzyx[3];
  kernel_index(k, g.kernel, kzyx);
  for (int a = 0; a < 3; ++a) shift[a] = (kzyx[a] - g.kernel[a] / 2) * g.dilation[a];
}

// Sorted rows: offset k < K/2 pairs row r with the row whose key is keys[r] + delta_k (when that cell lies in the
// grid). Those targets ascend with r, so each offset walks the sorted keys with one pointer: no hashing.
void sorted_subm_lookups(const int64_t* c, const std::vector<int64_t>& keys, const Geometry& g,
                         std::vector<PairList>& lists, const std::vector<int64_t>& looked_up) {
  const int64_t n = static_cast<int64_t>(keys.size()), num_lists = static_cast<int64_t>(looked_up.size());
  std::vector<int64_t> shifts(3 * num_lists), delta(num_lists);
  for (int64_t l = 0; l < num_lists; ++l) {
    int64_t* sh = shifts.data() + 3 * l;
    subm_shift(looked_up[l], g, sh);
    delta[l] = (sh[0] * g.in_shape[1] + sh[1]) * g.in_shape[2] + sh[2];
  }
  for_each_chunk(n, [&](int64_t ch, int64_t begin, int64_t end) {
    std::vector<int64_t> pos(num_lists);
    for (int64_t l = 0; l < num_lists; ++l)
      pos[l] = std::lower_bound(keys.begin(), keys.end(), keys[begin] + delta[l]) - keys.begin();
    for (int64_t r = begin; r < end; ++r) {
      const int64_t* o = c + 4 * r;
      for (int64_t l = 0; l < num_lists; ++l) {
        const int64_t* sh = shifts.data() + 3 * l;
        const int64_t target = keys[r] + delta[l];
        int64_t& p = pos[l];
        while (p < n && keys[p] < target) ++p;
        if (p == n || keys[p] != target) continue;
        if (static_cast<uint64_t>(o[1] + sh[0]) >= static_cast<uint64_t>(g.in_shape[0]) ||
            static_cast<uint64_t>(o[2] + sh[1]) >= static_cast<uint64_t>(g.in_shape[1]) ||
            static_cast<uint64_t>(o[3] + sh[2]) >= static_cast<uint64_t>(g.in_shape[2]))
          continue;  // the key of a cell outside the grid aliases another cell
        PairList& list = lists[ch * num_lists + l];
        list.push_back(r);
        list.push_back(p);
      }
    }
  });
}

// Unsorted rows: every offset but the centre is looked up in a key -> row table (which also rejects duplicates).
void hashed_subm_lookups(const at::Tensor& coors, const Geometry& g, std::vector<PairList>& lists,
                         const std::vector<int64_t>& looked_up) {
  const int64_t n = g.num_valid, num_lists = static_cast<int64_t>(looked_up.size());
  const int64_t* c = coors.data_ptr<int64_t>();
  const KeyTable table = input_table(coors, g, "rulebook_subm_pairs");
  const TableView view = table.view();
  std::vector<int64_t> shifts(3 * num_lists);
  for (int64_t l = 0; l < num_lists; ++l) subm_shift(looked_up[l], g, shifts.data() + 3 * l);
  for_each_chunk(n, [&](int64_t ch, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t* o = c + 4 * r;
      for (int64_t l = 0; l < num_lists; ++l) {
        const int64_t* sh = shifts.data() + 3 * l;
        const int64_t z = o[1] + sh[0], y = o[2] + sh[1], x = o[3] + sh[2];
        if (static_cast<uint64_t>(z) >= static_cast<uint64_t>(g.in_shape[0]) ||
            static_cast<uint64_t>(y) >= static_cast<uint64_t>(g.in_shape[1]) ||
            static_cast<uint64_t>(x) >= static_cast<uint64_t>(g.in_shape[2]))
          continue;
        const int64_t j = view.find(table_key(o[0], z, y, x, g.in_shape), -1);
        if (j < 0) continue;
        PairList& list = lists[ch * num_lists + l];
        list.push_back(r);
        list.push_back(j);
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> rulebook_subm_pairs_cpu(const at::Tensor& coors_, c10::IntArrayRef spatial_shape,
                                                           c10::IntArrayRef kernel_size, c10::IntArrayRef dilation) {
  const int64_t ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0};
  const Geometry g = validated(coors_, spatial_shape, kernel_size, ones, zeros, dilation, true, "rulebook_subm_pairs");
  const at::Tensor coors = coors_.contiguous();
  const int64_t n = g.num_valid, kv = g.kernel_volume, center = kv / 2;
  const int64_t* c = coors.data_ptr<int64_t>();
  bool sorted = false;
  const std::vector<int64_t> keys = row_keys(c, n, g.in_shape, &sorted);
  // sorted rows: offsets k < K/2 are looked up and K-1-k is k swapped; otherwise every offset is looked up
  std::vector<int64_t> looked_up;
  std::vector<OffsetSource> sources(kv);
  for (int64_t k = 0; k < kv; ++k) {
    if (k == center) {
      sources[k] = {OffsetSource::kIdentity, 0};
    } else if (sorted && k > center) {
      sources[k] = {OffsetSource::kSwapped, kv - 1 - k};  // offsets k < center are lists 0 .. center - 1
    } else {
      sources[k] = {OffsetSource::kList, static_cast<int64_t>(looked_up.size())};
      looked_up.push_back(k);
    }
  }
  const int64_t num_lists = static_cast<int64_t>(looked_up.size());
  std::vector<PairList> lists(((n + kChunk - 1) / kChunk) * num_lists);
  if (sorted) {
    sorted_subm_lookups(c, keys, g, lists, looked_up);
  } else {
    hashed_subm_lookups(coors, g, lists, looked_up);
  }
  return join(lists, num_lists, sources, n, coors.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rulebook_conv_pairs_cpu(
    const at::Tensor& coors_, c10::IntArrayRef spatial_shape, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation) {
  constexpr const char* op = "rulebook_conv_pairs";
  const Geometry g = validated(coors_, spatial_shape, kernel_size, stride, padding, dilation, false, op);
  const at::Tensor coors = coors_.contiguous();
  const int64_t n = g.num_valid, kv = g.kernel_volume;
  const int64_t* c = coors.data_ptr<int64_t>();
  bool sorted = false;
  row_keys(c, n, g.in_shape, &sorted);
  if (!sorted) input_table(coors, g, op);  // rejects duplicate voxels (sorted rows are unique)
  // the (output key, offset) pairs every input reaches (inputs' entries from reach_start[i]), and the sorted unique
  // output keys
  std::vector<int64_t> reach_key, reach_offset, reach_start(n + 1, 0);
  reach_key.reserve(n * 4);
  reach_offset.reserve(n * 4);
  const OutputReach reach(g);
  for (int64_t i = 0; i < n; ++i) {
    reach.for_each(c + 4 * i, [&](int64_t key, int64_t k) {
      reach_key.push_back(key);
      reach_offset.push_back(k);
    });
    reach_start[i + 1] = static_cast<int64_t>(reach_key.size());
  }
  std::vector<int64_t> keys(reach_key);
  radix_sort(keys, g.num_batches * g.out_shape[0] * g.out_shape[1] * g.out_shape[2]);
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const int64_t num_out = static_cast<int64_t>(keys.size());
  at::Tensor out_coors = at::empty({num_out, 4}, coors.options());
  int64_t* oc = out_coors.data_ptr<int64_t>();
  for (int64_t r = 0; r < num_out; ++r) {  // ascending keys: a step along x needs no division
    int64_t* o = oc + 4 * r;
    const int64_t step = r > 0 ? keys[r] - keys[r - 1] : -1;
    if (step > 0 && o[-1] + step < g.out_shape[2]) {
      o[0] = o[-4];
      o[1] = o[-3];
      o[2] = o[-2];
      o[3] = o[-1] + step;
    } else {
      decode(keys[r], g.out_shape, o);
    }
  }
  // The output row of each reach: with sorted inputs an offset's output keys ascend, so each offset searches forward
  // from its previous row (galloping: O(log gap)); otherwise a binary search over all outputs.
  const int64_t total = reach_start[n];
  std::vector<int64_t> reach_row(total);
  std::vector<int64_t> pos(kv, 0);
  for (int64_t e = 0; e < total; ++e) {
    const int64_t key = reach_key[e];
    int64_t& p = pos[reach_offset[e]];
    int64_t hi = num_out;
    if (sorted && keys[p] < key) {
      int64_t step = 1;
      while (p + step < num_out && keys[p + step] < key) {
        p += step;
        step *= 2;
      }
      hi = std::min(num_out, p + step + 1);
    } else if (!sorted) {
      p = 0;
    }
    p = std::lower_bound(keys.begin() + p, keys.begin() + hi, key) - keys.begin();
    reach_row[e] = p;
  }
  // every reach is a pair: grouped by offset with a counting sort (input order kept within an offset)
  at::Tensor starts = at::zeros({kv + 1}, coors.options());
  int64_t* st = starts.data_ptr<int64_t>();
  for (int64_t e = 0; e < total; ++e) ++st[reach_offset[e] + 1];
  for (int64_t k = 0; k < kv; ++k) st[k + 1] += st[k];
  at::Tensor pairs = at::empty({2, total}, coors.options());
  int64_t* in = pairs.data_ptr<int64_t>();
  int64_t* out = in + total;
  std::vector<int64_t> next(st, st + kv);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = reach_start[i]; e < reach_start[i + 1]; ++e) {
      const int64_t q = next[reach_offset[e]]++;
      in[q] = i;
      out[q] = reach_row[e];
    }
  }
  if (!sorted) {
    for (int64_t k = 0; k < kv; ++k) sort_by_output(in, out, st[k], st[k + 1]);
  }
  return {out_coors, pairs, starts};
}

}  // namespace
}  // namespace fsdlite::rulebook

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("rulebook_subm_pairs", &fsdlite::rulebook::rulebook_subm_pairs_cpu);
  m.impl("rulebook_conv_pairs", &fsdlite::rulebook::rulebook_conv_pairs_cpu);
}
