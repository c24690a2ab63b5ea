// CPU kernels of points_in_boxes: parallel over points; each point binary-searches the run of boxes
// of its sample and tests them in index order (first hit wins / every hit marked).
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "points_in_boxes.h"

namespace fsdlite::points_in_boxes {
namespace {

constexpr int64_t kGrain = 2048;

// Calls visit(i, box) for every box (in index order) containing point i, stopping when visit returns false.
template <typename scalar_t, typename Visit>
void for_each_hit(const Prepared& prep, Visit visit) {
  const int64_t n = prep.points.size(0), stride = prep.points.size(1), m = prep.boxes.params.size(0);
  const scalar_t* pts = prep.points.data_ptr<scalar_t>();
  const int64_t* pbatch = prep.point_batch.data_ptr<int64_t>();
  const double* params = prep.boxes.params.data_ptr<double>();
  const int64_t* order = prep.boxes.order.data_ptr<int64_t>();
  const int64_t* sorted = prep.boxes.sorted_batch.data_ptr<int64_t>();
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t first = bound(sorted, m, pbatch[i], false), last = bound(sorted, m, pbatch[i], true);
      const scalar_t* p = pts + i * stride;
      const double px = static_cast<double>(p[0]), py = static_cast<double>(p[1]), pz = static_cast<double>(p[2]);
      for (int64_t k = first; k < last; ++k) {
        const int64_t box = order[k];
        if (contains(params + box * kNumParams, px, py, pz) && !visit(i, box)) break;
      }
    }
  });
}

at::Tensor points_in_boxes_cpu(const at::Tensor& points, const at::Tensor& boxes,
                               const c10::optional<at::Tensor>& point_batch,
                               const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin) {
  const Prepared prep = prepare(points, boxes, point_batch, box_batch, box_origin, "points_in_boxes");
  at::Tensor out = at::full({points.size(0)}, -1, points.options().dtype(at::kLong));
  int64_t* o = out.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, points.scalar_type(), "points_in_boxes_cpu", [&] {
    for_each_hit<scalar_t>(prep, [o](int64_t i, int64_t box) {
      o[i] = box;
      return false;  // first box wins
    });
  });
  return out;
}

at::Tensor points_in_boxes_all_cpu(const at::Tensor& points, const at::Tensor& boxes,
                                   const c10::optional<at::Tensor>& point_batch,
                                   const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin) {
  const Prepared prep = prepare(points, boxes, point_batch, box_batch, box_origin, "points_in_boxes_all");
  const int64_t m = boxes.size(0);
  at::Tensor out = at::zeros({points.size(0), m}, points.options().dtype(at::kBool));
  bool* o = out.data_ptr<bool>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, points.scalar_type(), "points_in_boxes_all_cpu", [&] {
    for_each_hit<scalar_t>(prep, [o, m](int64_t i, int64_t box) {
      o[i * m + box] = true;
      return true;  // keep going: every containing box
    });
  });
  return out;
}

}  // namespace
}  // namespace fsdlite::points_in_boxes

TORCH_LIBRARY_IMPL(fsdlite, CPU, m) {
  m.impl("points_in_boxes", &fsdlite::points_in_boxes::points_in_boxes_cpu);
  m.impl("points_in_boxes_all", &fsdlite::points_in_boxes::points_in_boxes_all_cpu);
}
