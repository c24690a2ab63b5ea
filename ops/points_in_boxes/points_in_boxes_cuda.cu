// CUDA kernels of points_in_boxes: one thread per point; the thread binary-searches the run of boxes of
// its sample and tests them in index order with the same (FMA-free, double) geometry as the CPU kernel.
#include <ATen/Dispatch.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "fsdlite_ops/common.h"
#include "points_in_boxes.h"

namespace fsdlite::points_in_boxes_cuda {
namespace pib = fsdlite::points_in_boxes;

constexpr int kThreads = 256;

struct Views {
  const int64_t* point_batch;
  const double* params;
  const int64_t* order;
  const int64_t* sorted_batch;
  int64_t n, stride, m;
};

template <typename scalar_t, bool All>
__global__ void points_in_boxes_kernel(const scalar_t* points, Views v, int64_t* first_box, bool* all_boxes) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= v.n) return;
  const int64_t b = v.point_batch[i];
  const int64_t first = pib::bound(v.sorted_batch, v.m, b, false), last = pib::bound(v.sorted_batch, v.m, b, true);
  const scalar_t* p = points + i * v.stride;
  const double px = static_cast<double>(p[0]), py = static_cast<double>(p[1]), pz = static_cast<double>(p[2]);
  for (int64_t k = first; k < last; ++k) {
    const int64_t box = v.order[k];
    if (!pib::contains(v.params + box * pib::kNumParams, px, py, pz)) continue;
    if constexpr (All) {
      all_boxes[i * v.m + box] = true;
    } else {
      first_box[i] = box;
      return;
    }
  }
}

template <bool All>
at::Tensor run(const at::Tensor& points, const at::Tensor& boxes, const c10::optional<at::Tensor>& point_batch,
               const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin, const char* op) {
  c10::cuda::CUDAGuard guard(points.device());
  const pib::Prepared prep = pib::prepare(points, boxes, point_batch, box_batch, box_origin, op);
  const int64_t n = points.size(0), m = boxes.size(0);
  at::Tensor out = All ? at::zeros({n, m}, points.options().dtype(at::kBool))
                       : at::full({n}, -1, points.options().dtype(at::kLong));
  if (n == 0 || m == 0) return out;
  const Views v{prep.point_batch.data_ptr<int64_t>(), prep.boxes.params.data_ptr<double>(),
                prep.boxes.order.data_ptr<int64_t>(), prep.boxes.sorted_batch.data_ptr<int64_t>(),
                n, prep.points.size(1), m};
  const dim3 grid(static_cast<unsigned>(fsdlite::ceil_div(n, kThreads)));
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, points.scalar_type(), "points_in_boxes_cuda", [&] {
    points_in_boxes_kernel<scalar_t, All><<<grid, kThreads, 0, stream>>>(
        prep.points.data_ptr<scalar_t>(), v, All ? nullptr : out.data_ptr<int64_t>(),
        All ? out.data_ptr<bool>() : nullptr);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor points_in_boxes_cuda(const at::Tensor& points, const at::Tensor& boxes,
                                const c10::optional<at::Tensor>& point_batch,
                                const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin) {
  return run<false>(points, boxes, point_batch, box_batch, box_origin, "points_in_boxes");
}

at::Tensor points_in_boxes_all_cuda(const at::Tensor& points, const at::Tensor& boxes,
                                    const c10::optional<at::Tensor>& point_batch,
                                    const c10::optional<at::Tensor>& box_batch, c10::string_view box_origin) {
  return run<true>(points, boxes, point_batch, box_batch, box_origin, "points_in_boxes_all");
}

}  // namespace fsdlite::points_in_boxes_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("points_in_boxes", &fsdlite::points_in_boxes_cuda::points_in_boxes_cuda);
  m.impl("points_in_boxes_all", &fsdlite::points_in_boxes_cuda::points_in_boxes_all_cuda);
}
