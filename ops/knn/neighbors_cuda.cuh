// Device helpers shared by the CUDA kernels of knn and radius_neighbors: one thread per query scans
// the supports of its own sample in ascending row order and keeps a sorted row of the nearest ones
// (strict comparisons, so equal distances keep the lower support index first).
#pragma once

#include <cstdint>

namespace fsdlite::neighbors_cuda {

// Round-to-nearest multiply/add that nvcc never contracts into an FMA, so distances equal the CPU ones.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <typename T>
__device__ inline T squared_distance(const T* a, const T* b, int64_t dim) {
  T acc = T(0);
  for (int64_t d = 0; d < dim; ++d) {
    const T diff = a[d] - b[d];
    acc = add_rn(acc, mul_rn(diff, diff));
  }
  return acc;
}

// Support rows [first, last) of the sample of query `row` (all rows when unbatched).
__device__ inline void support_range(const int64_t* query_batch, const int64_t* support_batch, int64_t num_support,
                                     int64_t row, int64_t& first, int64_t& last) {
  if (query_batch == nullptr) {
    first = 0;
    last = num_support;
    return;
  }
  const int64_t id = query_batch[row];
  int64_t lo = 0, hi = num_support;  // first row with batch >= id
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (support_batch[mid] < id) lo = mid + 1; else hi = mid;
  }
  first = lo;
  hi = num_support;  // first row with batch > id
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (support_batch[mid] <= id) lo = mid + 1; else hi = mid;
  }
  last = lo;
}

// Inserts (dist, index) into a row of length k sorted ascending; requires dist < row_dist[k - 1].
template <typename T>
__device__ inline void insert_sorted(T* row_dist, int64_t* row_index, int64_t k, T dist, int64_t index) {
  int64_t pos = k - 1;
  while (pos > 0 && row_dist[pos - 1] > dist) {
    row_dist[pos] = row_dist[pos - 1];
    row_index[pos] = row_index[pos - 1];
    --pos;
  }
  row_dist[pos] = dist;
  row_index[pos] = index;
}

}  // namespace fsdlite::neighbors_cuda
