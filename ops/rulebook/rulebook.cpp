// Schemas and shared argument checks of the rulebook family.
#include "rulebook.h"

#include <ATen/ops/aminmax.h>
#include <torch/library.h>

#include <limits>
#include <sstream>

#include "fsdlite_ops/common.h"

namespace fsdlite::rulebook {
namespace {

void check_triple(c10::IntArrayRef v, const char* name, int64_t minimum, const char* op) {
  TORCH_CHECK(v.size() == 3, op, ": ", name, " must have 3 values (z, y, x), got ", v);
  for (int64_t x : v) TORCH_CHECK(x >= minimum, op, ": ", name, " must be >= ", minimum, " on every axis, got ", v);
}

}  // namespace

Geometry check_geometry(const at::Tensor& coors, const at::Tensor& num_valid, c10::IntArrayRef spatial_shape,
                        c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                        c10::IntArrayRef dilation, bool subm, const char* op) {
  check_dtype(coors, at::kLong, op, "coors");
  TORCH_CHECK(coors.dim() == 2 && coors.size(1) == 4, op, ": coors must have shape (Vmax, 4) [b, z, y, x], got ",
              coors.sizes());
  check_dtype(num_valid, at::kLong, op, "num_valid");
  TORCH_CHECK(num_valid.dim() == 0, op, ": num_valid must be a 0-d tensor, got shape ", num_valid.sizes());
  check_same_device(coors, num_valid, op, "coors", "num_valid");
  check_triple(spatial_shape, "spatial_shape", 1, op);
  check_triple(kernel_size, "kernel_size", 1, op);
  check_triple(stride, "stride", 1, op);
  check_triple(padding, "padding", 0, op);
  check_triple(dilation, "dilation", 1, op);
  Geometry g{};
  g.kernel_volume = 1;
  for (int a = 0; a < 3; ++a) {
    g.in_shape[a] = spatial_shape[a];
    g.kernel[a] = kernel_size[a];
    g.stride[a] = stride[a];
    g.padding[a] = padding[a];
    g.dilation[a] = dilation[a];
    TORCH_CHECK(g.kernel[a] <= 1024 && g.dilation[a] <= (int64_t{1} << 20) && g.stride[a] <= (int64_t{1} << 20) &&
                    g.padding[a] <= (int64_t{1} << 20) && g.in_shape[a] <= (int64_t{1} << 40),
                op, ": kernel_size ", kernel_size, ", stride ", stride, ", padding ", padding, ", dilation ",
                dilation, " or spatial_shape ", spatial_shape, " is unreasonably large");
    g.kernel_volume *= g.kernel[a];
    if (subm) {
      TORCH_CHECK(g.kernel[a] % 2 == 1, op, ": submanifold kernel_size must be odd on every axis (as spconv), got ",
                  kernel_size);
      g.out_shape[a] = g.in_shape[a];
    } else {
      g.out_shape[a] = (g.in_shape[a] + 2 * g.padding[a] - g.dilation[a] * (g.kernel[a] - 1) - 1) / g.stride[a] + 1;
      TORCH_CHECK(g.in_shape[a] + 2 * g.padding[a] - g.dilation[a] * (g.kernel[a] - 1) - 1 >= 0, op,
                  ": spatial_shape ", spatial_shape, " with kernel_size ", kernel_size, ", padding ", padding,
                  ", dilation ", dilation, " gives an empty output grid on axis ", "zyx"[a],
                  "; expected spatial_shape + 2 * padding >= dilation * (kernel_size - 1) + 1");
    }
  }
  TORCH_CHECK(g.kernel_volume <= 4096, op, ": kernel volume ", g.kernel_volume, " (kernel_size ", kernel_size,
              ") exceeds 4096");
  const int64_t vmax = coors.size(0);
  g.num_valid = num_valid.item<int64_t>();
  TORCH_CHECK(g.num_valid >= 0 && g.num_valid <= vmax, op, ": num_valid must lie in [0, coors.size(0)] = [0, ",
              vmax, "], got ", g.num_valid);
  g.num_batches = 1;
  if (g.num_valid > 0) {
    const at::Tensor valid = coors.narrow(0, 0, g.num_valid);
    auto [lo, hi] = at::aminmax(valid, 0);
    const at::Tensor lo_cpu = lo.cpu(), hi_cpu = hi.cpu();
    const int64_t* mn = lo_cpu.data_ptr<int64_t>();
    const int64_t* mx = hi_cpu.data_ptr<int64_t>();
    TORCH_CHECK(mn[0] >= 0, op, ": batch ids (coors[:num_valid, 0]) must be >= 0, got ", mn[0]);
    for (int a = 0; a < 3; ++a) {
      TORCH_CHECK(mn[a + 1] >= 0 && mx[a + 1] < g.in_shape[a], op, ": coors[:num_valid, ", a + 1, "] (",
                  "zyx"[a], ") must lie in [0, ", g.in_shape[a], ") (spatial_shape ", spatial_shape, "), got min ",
                  mn[a + 1], " and max ", mx[a + 1]);
    }
    g.num_batches = mx[0] + 1;
  }
  // Keys ((b * nz + z) * ny + y) * nx + x of the input and output grids (y and x rounded up to 4 for the
  // block-major table keys) must fit in int64.
  for (const int64_t* grid : {g.in_shape, g.out_shape}) {
    const int64_t shape[3] = {grid[0], (grid[1] + 3) / 4 * 4, (grid[2] + 3) / 4 * 4};
    int64_t cells = g.num_batches;
    for (int a = 0; a < 3; ++a) {
      TORCH_CHECK(cells <= std::numeric_limits<int64_t>::max() / 2 / shape[a], op, ": ", g.num_batches,
                  " batches x grid ", spatial_shape,
                  " has more than 2^62 cells; use fewer batch ids or a smaller grid");
      cells *= shape[a];
    }
  }
  TORCH_CHECK(vmax < (int64_t{1} << 40) / g.kernel_volume, op, ": coors.size(0) ", vmax, " x kernel volume ",
              g.kernel_volume, " is too large");
  return g;
}

void check_max_out(int64_t max_out) {
  TORCH_CHECK(max_out >= 0 && max_out < (int64_t{1} << 40), "rulebook_conv: max_out must lie in [0, 2^40), got ",
              max_out);
}

void check_unpadded_coors(const at::Tensor& coors, const char* op) {
  check_dtype(coors, at::kLong, op, "coors");
  TORCH_CHECK(coors.dim() == 2 && coors.size(1) == 4, op, ": coors must have shape (V, 4) [b, z, y, x], got ",
              coors.sizes());
}

void check_inverse_args(const at::Tensor& nbr, int64_t num_rows) {
  constexpr const char* op = "rulebook_inverse";
  check_dtype(nbr, at::kLong, op, "nbr");
  check_dim(nbr, 2, op, "nbr");
  TORCH_CHECK(num_rows >= 0 && num_rows < (int64_t{1} << 40), op, ": num_rows must lie in [0, 2^40), got ",
              num_rows);
  check_index_range(nbr, 0, num_rows + 1, op, "nbr (rows of the strided conv's input; num_rows is the dump)");
}

void check_pairs_args(const at::Tensor& nbr, int64_t num_in, int64_t capacity, int64_t tile) {
  constexpr const char* op = "rulebook_pairs";
  check_dtype(nbr, at::kLong, op, "nbr");
  check_dim(nbr, 2, op, "nbr");
  TORCH_CHECK(nbr.size(1) >= 1 && nbr.size(1) <= 4096, op, ": nbr must have 1 to 4096 kernel offsets (columns), got ",
              nbr.size(1));
  TORCH_CHECK(num_in >= 0 && num_in < (int64_t{1} << 40), op, ": num_in must lie in [0, 2^40), got ", num_in);
  TORCH_CHECK(tile >= 1 && tile <= (int64_t{1} << 20), op, ": tile must lie in [1, 2^20], got ", tile);
  TORCH_CHECK(capacity >= 0 && capacity < (int64_t{1} << 40) && capacity % tile == 0, op,
              ": capacity must be a multiple of tile (", tile, ") in [0, 2^40), got ", capacity);
  check_index_range(nbr, 0, num_in + 1, op, "nbr (input rows; num_in is the dump)");
}

void raise_duplicate(const at::Tensor& coors, int64_t a, int64_t b, const char* op) {
  const at::Tensor row = coors.select(0, a).cpu();
  const int64_t* r = row.data_ptr<int64_t>();
  std::ostringstream msg;
  msg << op << ": coors rows " << std::min(a, b) << " and " << std::max(a, b) << " are the same voxel [" << r[0]
      << ", " << r[1] << ", " << r[2] << ", " << r[3] << "]; expected unique rows among the first num_valid";
  TORCH_CHECK(false, msg.str());
}

void raise_inverse_conflict(int64_t row, int64_t k, int64_t o1, int64_t o2) {
  TORCH_CHECK(false, "rulebook_inverse: nbr maps input row ", row, " at offset ", k, " to two outputs (",
              std::min(o1, o2),
              " and ", std::max(o1, o2), "); expected the neighbour map of one strided convolution");
}

}  // namespace fsdlite::rulebook

TORCH_LIBRARY_FRAGMENT(fsdlite, m) {
  m.def(
      "rulebook_subm(Tensor coors, Tensor num_valid, int[] spatial_shape, int[] kernel_size, int[] dilation) -> "
      "Tensor");
  m.def(
      "rulebook_conv(Tensor coors, Tensor num_valid, int[] spatial_shape, int[] kernel_size, int[] stride, "
      "int[] padding, int[] dilation, int max_out) -> "
      "(Tensor out_coors, Tensor num_valid_out, Tensor num_dropped, Tensor nbr)");
  m.def("rulebook_inverse(Tensor nbr, int num_rows) -> Tensor");
  m.def(
      "rulebook_pairs(Tensor nbr, int num_in, int capacity, int tile) -> "
      "(Tensor pairs, Tensor num_pairs, Tensor num_placed)");
  m.def(
      "rulebook_subm_pairs(Tensor coors, int[] spatial_shape, int[] kernel_size, int[] dilation) -> "
      "(Tensor pairs, Tensor offset_starts)");
  m.def(
      "rulebook_conv_pairs(Tensor coors, int[] spatial_shape, int[] kernel_size, int[] stride, int[] padding, "
      "int[] dilation) -> (Tensor out_coors, Tensor pairs, Tensor offset_starts)");
}
