// CPU kernels of the rulebook family. The input voxels go into an open-addressing key -> row table (one
// serial pass, which also detects duplicate voxels before anything is written); neighbour maps are then
// filled in parallel with lookups only (no atomics; every map entry has exactly one writer), so results never
// depend on the thread count. Strided outputs are collected in a hash set, sorted by key and truncated to max_out.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "fsdlite_ops/common.h"
#include "cpu_common.h"
#include "rulebook.h"

namespace fsdlite::rulebook {
namespace {

constexpr int64_t kGrain = 2048;  // output rows per parallel task at least

// Submanifold maps are symmetric: offsets k and K-1-k are opposite, so nbr[r, k] = j <=> nbr[j, K-1-k] = r, and
// nbr[r, K/2] = r. Each row looks up the first half of the offsets only and writes both entries (every entry has
// exactly one writer, so rows may be split among threads): half the lookups of a K-offset scan per row.
void fill_subm_symmetric(const int64_t* c, const Geometry& g, const TableView& table, int64_t dump, int64_t* nbr) {
  const int64_t kv = g.kernel_volume, half = kv / 2;
  std::vector<int64_t> shift(3 * half);
  for (int64_t k = 0; k < half; ++k) {
    int64_t kzyx[3];
    kernel_index(k, g.kernel, kzyx);
    for (int a = 0; a < 3; ++a) shift[3 * k + a] = (kzyx[a] - g.kernel[a] / 2) * g.dilation[a];
  }
  at::parallel_for(0, g.num_valid, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> keys(half);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t* o = c + 4 * r;
      for (int64_t k = 0; k < half; ++k) {
        const int64_t* s = shift.data() + 3 * k;
        const int64_t z = o[1] + s[0], y = o[2] + s[1], x = o[3] + s[2];
        const bool inside = static_cast<uint64_t>(z) < static_cast<uint64_t>(g.in_shape[0]) &&
                            static_cast<uint64_t>(y) < static_cast<uint64_t>(g.in_shape[1]) &&
                            static_cast<uint64_t>(x) < static_cast<uint64_t>(g.in_shape[2]);
        keys[k] = inside ? table_key(o[0], z, y, x, g.in_shape) : kEmpty;
        if (inside) __builtin_prefetch(table.slots + home_slot(keys[k], table.mask));
      }
      nbr[r * kv + half] = r;
      for (int64_t k = 0; k < half; ++k) {
        if (keys[k] == kEmpty) continue;
        const int64_t j = table.find(keys[k], dump);
        if (j == dump) continue;
        nbr[r * kv + k] = j;
        nbr[j * kv + (kv - 1 - k)] = r;
      }
    }
  });
}

at::Tensor rulebook_subm_cpu(const at::Tensor& coors_, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                             c10::IntArrayRef kernel_size, c10::IntArrayRef dilation) {
  const int64_t ones[3] = {1, 1, 1}, zeros[3] = {0, 0, 0};
  const Geometry g = check_geometry(coors_, num_valid, spatial_shape, kernel_size, ones, zeros, dilation, true,
                                    "rulebook_subm");
  const at::Tensor coors = coors_.contiguous();
  const int64_t vmax = coors.size(0);
  at::Tensor nbr = at::full({vmax, g.kernel_volume}, vmax, coors.options());
  if (g.num_valid == 0) return nbr;
  const KeyTable table = input_table(coors, g, "rulebook_subm");
  fill_subm_symmetric(coors.data_ptr<int64_t>(), g, table.view(), vmax, nbr.data_ptr<int64_t>());
  return nbr;
}

// Sorted keys of every output cell reached by a valid input voxel.
std::vector<int64_t> output_keys(const int64_t* c, const Geometry& g) {
  KeyTable seen(g.num_valid * outputs_per_input(g));
  std::vector<int64_t> unique;
  const OutputReach reach(g);
  for (int64_t i = 0; i < g.num_valid; ++i) {
    reach.for_each(c + 4 * i, [&](int64_t key, int64_t) {
      if (seen.insert(key, 0) < 0) unique.push_back(key);
    });
  }
  std::sort(unique.begin(), unique.end());
  return unique;
}

// Neighbour map of a strided conv filled from the input side: every valid input voxel writes its row into the
// (output row, offset) slots it feeds -- at most outputs_per_input(g) of them, against K lookups per output row
// from the output side. A slot's input cell is o * stride - padding + k * dilation, so each slot has one writer
// and input rows may be split among threads. `rows` maps output keys (encode) to rows < kept.
void fill_from_inputs(const int64_t* c, const Geometry& g, const TableView& rows, int64_t kept, int64_t* nbr) {
  const int64_t kv = g.kernel_volume;
  const OutputReach reach(g);
  at::parallel_for(0, g.num_valid, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      reach.for_each(c + 4 * i, [&](int64_t key, int64_t k) {
        const int64_t row = rows.find(key, kept);
        if (row < kept) nbr[row * kv + k] = i;  // else an output beyond max_out
      });
    }
  });
}

ConvOutputs rulebook_conv_cpu(const at::Tensor& coors_, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                              c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                              c10::IntArrayRef dilation, int64_t max_out) {
  const Geometry g = check_geometry(coors_, num_valid, spatial_shape, kernel_size, stride, padding, dilation, false,
                                    "rulebook_conv");
  check_max_out(max_out);
  const at::Tensor coors = coors_.contiguous();
  const int64_t vmax = coors.size(0);
  const auto opts = coors.options();
  at::Tensor out_coors = at::zeros({max_out, 4}, opts);
  at::Tensor nbr = at::full({max_out, g.kernel_volume}, vmax, opts);
  if (g.num_valid == 0) return {out_coors, at::zeros({}, opts), at::zeros({}, opts), nbr};
  input_table(coors, g, "rulebook_conv");  // rejects duplicate voxels (the map is filled from the inputs)
  const std::vector<int64_t> keys = output_keys(coors.data_ptr<int64_t>(), g);
  const int64_t total = static_cast<int64_t>(keys.size());
  const int64_t kept = std::min(total, max_out);
  int64_t* oc = out_coors.data_ptr<int64_t>();
  KeyTable rows(kept);  // output key (encode) -> row, for the kept outputs
  for (int64_t r = 0; r < kept; ++r) {
    decode(keys[r], g.out_shape, oc + 4 * r);
    rows.insert(keys[r], r);  // keys are unique
  }
  fill_from_inputs(coors.data_ptr<int64_t>(), g, rows.view(), kept, nbr.data_ptr<int64_t>());
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
