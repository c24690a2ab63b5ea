// CPU kernels of the rulebook family. The valid voxels are put in key order (sorted_rows.h: a radix sort, which
// also detects duplicate voxels before anything is written); a submanifold map is then filled by walking the sorted
// keys (no hashing; every map entry has exactly one writer, no atomics), so results never depend on the thread
// count. Strided outputs are the sorted unique cells the inputs reach, truncated to max_out.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "fsdlite_ops/common.h"
#include "rulebook.h"
#include "sorted_rows.h"

namespace fsdlite::rulebook {
namespace {

at::Tensor rulebook_subm_cpu(const at::Tensor& coors_, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                             c10::IntArrayRef kernel_size, c10::IntArrayRef dilation) {
  const int64_t ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0};
  const Geometry g = check_geometry(coors_, num_valid, spatial_shape, kernel_size, ones, zeros, dilation, true,
                                    "rulebook_subm");
  const at::Tensor coors = coors_.contiguous();
  const int64_t vmax = coors.size(0), kv = g.kernel_volume, half = kv / 2;
  at::Tensor nbr = at::full({vmax, kv}, vmax, coors.options());
  if (g.num_valid == 0) return nbr;
  const SortedRows sorted = sort_rows(coors, g, "rulebook_subm");
  int64_t* m = nbr.data_ptr<int64_t>();
  for (int64_t r = 0; r < g.num_valid; ++r) m[r * kv + half] = r;
  // Offsets k and K-1-k are opposite: nbr[r, k] = j <=> nbr[j, K-1-k] = r, so the first half of the offsets is
  // looked up and both entries are written (each entry has exactly one writer).
  std::vector<int64_t> offsets(half);
  for (int64_t k = 0; k < half; ++k) offsets[k] = k;
  walk_subm_neighbours(coors.data_ptr<int64_t>(), sorted, g, offsets, [&](int64_t, int64_t r, int64_t j, int64_t k) {
    const int64_t row = sorted.rows[r], neighbour = sorted.rows[j];
    m[row * kv + k] = neighbour;
    m[neighbour * kv + (kv - 1 - k)] = row;
  });
  return nbr;
}

ConvOutputs rulebook_conv_cpu(const at::Tensor& coors_, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                              c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                              c10::IntArrayRef dilation, int64_t max_out) {
  const Geometry g = check_geometry(coors_, num_valid, spatial_shape, kernel_size, stride, padding, dilation, false,
                                    "rulebook_conv");
  check_max_out(max_out);
  const at::Tensor coors = coors_.contiguous();
  const int64_t vmax = coors.size(0), kv = g.kernel_volume;
  const auto opts = coors.options();
  at::Tensor out_coors = at::zeros({max_out, 4}, opts);
  at::Tensor nbr = at::full({max_out, kv}, vmax, opts);
  if (g.num_valid == 0) return {out_coors, at::zeros({}, opts), at::zeros({}, opts), nbr};
  const SortedRows sorted = sort_rows(coors, g, "rulebook_conv");
  const ConvReach reach = conv_reach(coors.data_ptr<int64_t>(), sorted, g);
  const int64_t total = static_cast<int64_t>(reach.out_keys.size());
  const int64_t kept = std::min(total, max_out);
  decode_sorted(reach.out_keys, kept, g.out_shape, out_coors.data_ptr<int64_t>());
  int64_t* m = nbr.data_ptr<int64_t>();
  for (int64_t i = 0; i < g.num_valid; ++i) {  // a slot's input cell is o * stride - padding + k * dilation: one writer
    for (int64_t e = reach.start[i]; e < reach.start[i + 1]; ++e) {
      if (reach.row[e] < kept) m[reach.row[e] * kv + reach.offset[e]] = sorted.rows[i];  // else beyond max_out
    }
  }
  return {out_coors, at::full({}, kept, opts), at::full({}, total - kept, opts), nbr};
}

at::Tensor rulebook_inverse_cpu(const at::Tensor& nbr_, int64_t num_rows) {
  check_inverse_args(nbr_, num_rows);
  const at::Tensor nbr = nbr_.contiguous();
  const int64_t num_out = nbr.size(0), kv = nbr.size(1);
  at::Tensor inv = at::full({num_rows, kv}, num_out, nbr.options());
  const int64_t* n = nbr.data_ptr<int64_t>();
  int64_t* out = inv.data_ptr<int64_t>();
  for (int64_t o = 0; o < num_out; ++o) {  // serial: conflicting pairs are detected, never raced
    for (int64_t k = 0; k < kv; ++k) {
      const int64_t i = n[o * kv + k];
      if (i == num_rows) continue;
      int64_t& slot = out[i * kv + k];
      if (slot != num_out) raise_inverse_conflict(i, k, slot, o);
      slot = o;
    }
  }
  return inv;
}

PairOutputs rulebook_pairs_cpu(const at::Tensor& nbr_, int64_t num_in, int64_t capacity, int64_t tile) {
  check_pairs_args(nbr_, num_in, capacity, tile);
  const at::Tensor nbr = nbr_.contiguous();
  const int64_t num_out = nbr.size(0), kv = nbr.size(1);
  const int64_t* n = nbr.data_ptr<int64_t>();
  std::vector<int64_t> count(kv, 0), cursor(kv), tile_end(kv);
  int64_t rows_used = 0;  // 1 + the last output row with a pair (padding rows at the end are skipped below)
  for (int64_t o = 0; o < num_out; ++o) {
    const int64_t* row = n + o * kv;
    int64_t real = 0;
    for (int64_t k = 0; k < kv; ++k) {
      const int64_t r = row[k] < num_in;
      count[k] += r;
      real += r;
    }
    if (real) rows_used = o + 1;
  }
  at::Tensor pairs = at::empty({3, capacity}, nbr.options());
  int64_t* ins = pairs.data_ptr<int64_t>();
  int64_t *outs = ins + capacity, *offsets = ins + 2 * capacity;
  int64_t first_tile = 0, num_pairs = 0, num_placed = 0;
  for (int64_t k = 0; k < kv; ++k) {
    const int64_t tiles = ceil_div(count[k], tile);
    cursor[k] = std::min(first_tile * tile, capacity);
    tile_end[k] = std::min((first_tile + tiles) * tile, capacity);
    std::fill(offsets + cursor[k], offsets + tile_end[k], k);
    num_pairs += count[k];
    num_placed += std::min(tile_end[k] - cursor[k], count[k]);
    first_tile += tiles;
  }
  const int64_t used_end = std::min(first_tile * tile, capacity);
  for (int64_t o = 0; o < rows_used; ++o) {  // serial: keeps the output-row order within every offset
    const int64_t* row = n + o * kv;
    for (int64_t k = 0; k < kv; ++k) {
      const int64_t i = row[k];
      if (i >= num_in || cursor[k] >= tile_end[k]) continue;
      const int64_t pos = cursor[k]++;
      ins[pos] = i;
      outs[pos] = o;
    }
  }
  for (int64_t k = 0; k < kv; ++k) {  // unused rows of each offset's last tile, then the tiles no offset uses
    std::fill(ins + cursor[k], ins + tile_end[k], num_in);
    std::fill(outs + cursor[k], outs + tile_end[k], num_out);
  }
  std::fill(ins + used_end, ins + capacity, num_in);
  std::fill(outs + used_end, outs + capacity, num_out);
  std::fill(offsets + used_end, offsets + capacity, 0);
  const auto opts = nbr.options();
  return {pairs, at::full({}, num_pairs, opts), at::full({}, num_placed, opts)};
}

}  // namespace
}  // namespace fsdlite::rulebook

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("rulebook_subm", &fsdlite::rulebook::rulebook_subm_cpu);
  m.impl("rulebook_conv", &fsdlite::rulebook::rulebook_conv_cpu);
  m.impl("rulebook_inverse", &fsdlite::rulebook::rulebook_inverse_cpu);
  m.impl("rulebook_pairs", &fsdlite::rulebook::rulebook_pairs_cpu);
}
