// CPU kernels of the iou3d family.
//   boxes_iou_bev: rows of the (N, M) matrix in parallel (circumcircle test skips far pairs).
//   nms_bev_mask:  boxes are partitioned by group (order preserved) and each group runs the greedy
//                  scan independently, groups in parallel.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <torch/library.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "iou3d.h"

namespace fsdlite::iou3d {
namespace {

std::vector<BevBox> load_boxes(const at::Tensor& boxes, bool axis_aligned) {
  const at::Tensor b = boxes.contiguous();
  std::vector<BevBox> out(b.size(0));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, b.scalar_type(), "iou3d_load_boxes", [&] {
    const scalar_t* data = b.data_ptr<scalar_t>();
    const int64_t stride = b.size(1);
    for (int64_t i = 0; i < b.size(0); ++i) out[i] = load_box(data, i, stride, axis_aligned);
  });
  return out;
}

at::Tensor boxes_iou_bev_cpu(const at::Tensor& boxes_a, const at::Tensor& boxes_b, bool axis_aligned) {
  check_iou_args(boxes_a, boxes_b);
  const int64_t n = boxes_a.size(0), m = boxes_b.size(0);
  at::Tensor out = at::empty({n, m}, boxes_a.options());
  if (n == 0 || m == 0) return out;
  const std::vector<BevBox> a = load_boxes(boxes_a, axis_aligned);
  const std::vector<BevBox> b = load_boxes(boxes_b, axis_aligned);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(), "boxes_iou_bev_cpu", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, 16384 / m);
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < m; ++j) o[i * m + j] = static_cast<scalar_t>(bev_iou(a[i], b[j], axis_aligned));
    });
  });
  return out;
}

// Greedy scan of one group whose members (in priority order) are rows[0..count).
void greedy_group(const std::vector<BevBox>& boxes, const int64_t* rows, int64_t count, double threshold,
                  bool axis_aligned, bool* keep) {
  std::vector<char> removed(count, 0);
  for (int64_t p = 0; p < count; ++p) {
    if (removed[p]) {
      keep[rows[p]] = false;
      continue;
    }
    const BevBox& kept = boxes[rows[p]];
    for (int64_t q = p + 1; q < count; ++q) {
      if (!removed[q] && bev_iou(kept, boxes[rows[q]], axis_aligned) > threshold) removed[q] = 1;
    }
  }
}

at::Tensor nms_bev_mask_cpu(const at::Tensor& boxes, const at::Tensor& groups_, double iou_threshold,
                            bool axis_aligned) {
  check_nms_args(boxes, groups_, iou_threshold);
  const int64_t k = boxes.size(0);
  at::Tensor keep = at::ones({k}, boxes.options().dtype(at::kBool));
  if (k == 0) return keep;
  const std::vector<BevBox> b = load_boxes(boxes, axis_aligned);
  const at::Tensor groups = groups_.contiguous();
  const int64_t* g = groups.data_ptr<int64_t>();
  // Members of each group in priority order: a stable sort by group id.
  std::vector<int64_t> rows(k);
  std::iota(rows.begin(), rows.end(), 0);
  const bool single = std::all_of(g, g + k, [&](int64_t v) { return v == g[0]; });
  if (!single) std::stable_sort(rows.begin(), rows.end(), [&](int64_t x, int64_t y) { return g[x] < g[y]; });
  std::vector<int64_t> starts{0};
  for (int64_t p = 1; p < k; ++p)
    if (g[rows[p]] != g[rows[p - 1]]) starts.push_back(p);
  starts.push_back(k);
  bool* kp = keep.data_ptr<bool>();
  const int64_t num_groups = static_cast<int64_t>(starts.size()) - 1;
  at::parallel_for(0, num_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s)
      greedy_group(b, rows.data() + starts[s], starts[s + 1] - starts[s], iou_threshold, axis_aligned, kp);
  });
  return keep;
}

}  // namespace
}  // namespace fsdlite::iou3d

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("boxes_iou_bev", &fsdlite::iou3d::boxes_iou_bev_cpu);
  m.impl("nms_bev_mask", &fsdlite::iou3d::nms_bev_mask_cpu);
}
