// CUDA kernels of the iou3d family.
//   boxes_iou_bev: one thread per (i, j) pair.
//   nms_bev_mask:  64x64 tiles compute a suppression bitmask (bit j of row i set when j > i, same
//                  group and IoU > threshold), then the greedy scan over the bitmask runs on the host
//                  (K x ceil(K/64) words; the torchvision/mmcv scheme).
// half/bfloat16 boxes are read as float; geometry is double precision as on the CPU.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "fsdlite_ops/common.h"
#include "iou3d.h"

namespace fsdlite::iou3d_cuda {
using fsdlite::iou3d::BevBox;

constexpr int kThreads = 256;
constexpr int kTile = 64;  // bits per mask word

template <typename scalar_t>
__global__ void load_kernel(const scalar_t* boxes, int64_t n, int64_t stride, bool axis_aligned, BevBox* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = fsdlite::iou3d::load_box(boxes, i, stride, axis_aligned);
}

template <typename scalar_t>
__global__ void iou_kernel(const BevBox* a, const BevBox* b, int64_t n, int64_t m, bool axis_aligned, scalar_t* out) {
  const int64_t total = n * m;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[t] = static_cast<scalar_t>(fsdlite::iou3d::bev_iou(a[t / m], b[t % m], axis_aligned));
  }
}

__global__ void nms_mask_kernel(const BevBox* boxes, const int64_t* groups, int64_t k, int64_t words,
                                double threshold, bool axis_aligned, unsigned long long* mask) {
  const int64_t row_tile = blockIdx.y, col_tile = blockIdx.x;
  if (row_tile > col_tile) return;  // only j > i matters
  const int64_t row_left = k - row_tile * kTile, col_left = k - col_tile * kTile;
  const int64_t row_size = row_left < kTile ? row_left : kTile;
  const int64_t col_size = col_left < kTile ? col_left : kTile;
  __shared__ BevBox tile[kTile];
  __shared__ int64_t tile_groups[kTile];
  if (threadIdx.x < col_size) {
    tile[threadIdx.x] = boxes[col_tile * kTile + threadIdx.x];
    tile_groups[threadIdx.x] = groups[col_tile * kTile + threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x >= row_size) return;
  const int64_t i = row_tile * kTile + threadIdx.x;
  const BevBox own = boxes[i];
  const int64_t own_group = groups[i];
  unsigned long long bits = 0;
  const int start = (row_tile == col_tile) ? threadIdx.x + 1 : 0;
  for (int c = start; c < col_size; ++c) {
    if (tile_groups[c] == own_group && fsdlite::iou3d::bev_iou(own, tile[c], axis_aligned) > threshold)
      bits |= 1ULL << c;
  }
  mask[i * words + col_tile] = bits;
}

// (n, >=7) boxes -> device array of n BevBox (stored in a byte tensor).
at::Tensor load_boxes(const at::Tensor& boxes, bool axis_aligned, cudaStream_t stream) {
  const int64_t n = boxes.size(0);
  at::Tensor out = at::empty({std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(BevBox))},
                             boxes.options().dtype(at::kByte));
  if (n == 0) return out;
  const at::Tensor b = boxes.contiguous();
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kThreads)));
  AT_DISPATCH_FLOATING_TYPES(b.scalar_type(), "iou3d_load_boxes_cuda", [&] {
    load_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(b.data_ptr<scalar_t>(), n, b.size(1), axis_aligned,
                                                         reinterpret_cast<BevBox*>(out.data_ptr<uint8_t>()));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

bool is_low_precision(const at::Tensor& t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }

at::Tensor boxes_iou_bev_cuda(const at::Tensor& boxes_a_, const at::Tensor& boxes_b_, bool axis_aligned) {
  fsdlite::iou3d::check_iou_args(boxes_a_, boxes_b_);
  c10::cuda::CUDAGuard guard(boxes_a_.device());
  const bool low = is_low_precision(boxes_a_);
  const at::Tensor boxes_a = low ? boxes_a_.to(at::kFloat) : boxes_a_;
  const at::Tensor boxes_b = low ? boxes_b_.to(at::kFloat) : boxes_b_;
  const int64_t n = boxes_a.size(0), m = boxes_b.size(0);
  at::Tensor out = at::empty({n, m}, boxes_a.options());
  if (n > 0 && m > 0) {
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    const at::Tensor a = load_boxes(boxes_a, axis_aligned, stream);
    const at::Tensor b = load_boxes(boxes_b, axis_aligned, stream);
    const int64_t blocks = std::min<int64_t>(ceil_div(n * m, kThreads), 65535);
    AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "boxes_iou_bev_cuda", [&] {
      iou_kernel<scalar_t><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          reinterpret_cast<const BevBox*>(a.data_ptr<uint8_t>()), reinterpret_cast<const BevBox*>(b.data_ptr<uint8_t>()),
          n, m, axis_aligned, out.data_ptr<scalar_t>());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return low ? out.to(boxes_a_.scalar_type()) : out;
}

at::Tensor nms_bev_mask_cuda(const at::Tensor& boxes_, const at::Tensor& groups_, double iou_threshold,
                             bool axis_aligned) {
  fsdlite::iou3d::check_nms_args(boxes_, groups_, iou_threshold);
  c10::cuda::CUDAGuard guard(boxes_.device());
  const int64_t k = boxes_.size(0);
  if (k == 0) return at::empty({0}, boxes_.options().dtype(at::kBool));
  const at::Tensor boxes = is_low_precision(boxes_) ? boxes_.to(at::kFloat) : boxes_;
  const at::Tensor groups = groups_.contiguous();
  auto stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor packed = load_boxes(boxes, axis_aligned, stream);
  const int64_t words = ceil_div(k, kTile);
  at::Tensor mask = at::zeros({k, words}, groups.options());
  const dim3 grid(static_cast<unsigned>(words), static_cast<unsigned>(words));
  nms_mask_kernel<<<grid, kTile, 0, stream>>>(reinterpret_cast<const BevBox*>(packed.data_ptr<uint8_t>()),
                                              groups.data_ptr<int64_t>(), k, words, iou_threshold, axis_aligned,
                                              reinterpret_cast<unsigned long long*>(mask.data_ptr<int64_t>()));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // Greedy scan on the host: row i is applied only while box i survives.
  const at::Tensor host_mask = mask.cpu();
  const auto* rows = reinterpret_cast<const unsigned long long*>(host_mask.data_ptr<int64_t>());
  at::Tensor keep = at::empty({k}, host_mask.options().dtype(at::kBool));
  bool* kp = keep.data_ptr<bool>();
  std::vector<unsigned long long> removed(words, 0ULL);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t w = i / kTile;
    kp[i] = !(removed[w] & (1ULL << (i % kTile)));
    if (!kp[i]) continue;
    const unsigned long long* row = rows + i * words;
    for (int64_t j = w; j < words; ++j) removed[j] |= row[j];
  }
  return keep.to(boxes_.device());
}

}  // namespace fsdlite::iou3d_cuda

TORCH_LIBRARY_IMPL(fsdlite, CUDA, m) {
  m.impl("boxes_iou_bev", &fsdlite::iou3d_cuda::boxes_iou_bev_cuda);
  m.impl("nms_bev_mask", &fsdlite::iou3d_cuda::nms_bev_mask_cuda);
}
