// CPU neighbour search shared by knn and radius_neighbors: one KD-tree per sample (segment of the
// sorted support batch ids), searched with exact lower bounds so results equal brute force,
// including ties (ascending squared distance, then ascending support index).
//
// Exactness: a subtree is skipped only when the squared distance from the query to its cell,
// accumulated over the dimensions in the same order (0..D-1) and with the same float operations as
// a point distance, already exceeds the current bound. IEEE rounding is monotone, so that cell
// bound never exceeds the computed distance of any point inside the cell.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace fsdlite::neighbors {

// Squared Euclidean distance accumulated over d = 0..D-1 (the reference uses the same order).
// Dim > 0 fixes the dimension at compile time (unrolled); Dim == 0 uses the runtime `dim`.
template <int Dim, typename T>
inline T squared_distance(const T* a, const T* b, int64_t dim) {
  const int64_t n = Dim > 0 ? Dim : dim;
  T acc = T(0);
  for (int64_t d = 0; d < n; ++d) {
    const T diff = a[d] - b[d];
    acc += diff * diff;
  }
  return acc;
}

// Calls fn(std::integral_constant<int, Dim>) with Dim = dim for small dims, else Dim = 0 (runtime).
template <typename Fn>
inline void dispatch_dim(int64_t dim, Fn&& fn) {
  switch (dim) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    default: fn(std::integral_constant<int, 0>{}); break;
  }
}

// The k smallest (distance, index) pairs seen so far, kept sorted ascending (lexicographic order).
template <typename T>
class KnnResults {
 public:
  explicit KnnResults(int64_t k) : k_(k), dist_(static_cast<size_t>(k)), index_(static_cast<size_t>(k)) {}
  void reset() { size_ = 0; }
  bool visit(T lower_bound) const { return lower_bound <= limit(); }
  // Largest distance that can still enter the results.
  T limit() const { return size_ < k_ ? std::numeric_limits<T>::infinity() : dist_[k_ - 1]; }
  void offer(T dist, int64_t index) {
    int64_t pos = size_;
    if (size_ == k_) {
      const T worst = dist_[k_ - 1];
      if (dist > worst || (dist == worst && index > index_[k_ - 1])) return;
      pos = k_ - 1;
    } else {
      ++size_;
    }
    while (pos > 0 && (dist_[pos - 1] > dist || (dist_[pos - 1] == dist && index_[pos - 1] > index))) {
      dist_[pos] = dist_[pos - 1];
      index_[pos] = index_[pos - 1];
      --pos;
    }
    dist_[pos] = dist;
    index_[pos] = index;
  }
  // Writes the row (ascending), padded with (pad_index, inf).
  void write(int64_t* index, T* dist, int64_t pad_index) const {
    for (int64_t j = 0; j < k_; ++j) {
      index[j] = j < size_ ? index_[j] : pad_index;
      dist[j] = j < size_ ? dist_[j] : std::numeric_limits<T>::infinity();
    }
  }

 private:
  int64_t k_, size_ = 0;
  std::vector<T> dist_;
  std::vector<int64_t> index_;
};

// Every (distance, index) pair with distance < radius^2 (strict), in no particular order.
template <typename T>
class RadiusResults {
 public:
  explicit RadiusResults(T radius_sq) : radius_sq_(radius_sq) {}
  void reset() { found_.clear(); }
  bool visit(T lower_bound) const { return lower_bound < radius_sq_; }
  T limit() const { return radius_sq_; }
  void offer(T dist, int64_t index) {
    if (dist < radius_sq_) found_.emplace_back(dist, index);
  }
  int64_t count() const { return static_cast<int64_t>(found_.size()); }
  // Writes the `limit` nearest sorted ascending (ties -> lower index), padded with pad_index.
  void write(int64_t* index, int64_t limit, int64_t pad_index) {
    const int64_t keep = std::min<int64_t>(limit, count());
    std::partial_sort(found_.begin(), found_.begin() + keep, found_.end());
    for (int64_t j = 0; j < limit; ++j) index[j] = j < keep ? found_[j].second : pad_index;
  }

 private:
  T radius_sq_;
  std::vector<std::pair<T, int64_t>> found_;
};

// KD-tree over rows [begin, end) of a (N, D) point array; leaves hold up to `leaf_size` points.
template <typename T>
class KdTree {
 public:
  KdTree(const T* points, int64_t dim, int64_t begin, int64_t end, int64_t leaf_size)
      : dim_(dim), leaf_size_(std::max<int64_t>(1, leaf_size)) {
    const int64_t n = end - begin;
    order_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order_[i] = begin + i;
    std::vector<T> lo(dim), hi(dim);
    if (n > 0) build(points, 0, n, lo, hi);
    coords_.resize(static_cast<size_t>(n * dim));  // points copied in tree order (contiguous leaves)
    for (int64_t i = 0; i < n; ++i) std::copy_n(points + order_[i] * dim, dim, coords_.data() + i * dim);
  }

  // Offers every point that may pass `results` (see KnnResults / RadiusResults); `offsets` is
  // scratch of D values.
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }

  // Id of the leaf a query descends to (ids follow depth-first order, so nearby leaves have close ids).
  int64_t locate(const T* query) const {
    int64_t id = 0;
    while (nodes_[id].left >= 0) id = query[nodes_[id].split_dim] <= nodes_[id].split ? nodes_[id].left : nodes_[id].right;
    return id;
  }

  template <int Dim, class Results>
  void search(const T* query, Results& results, T* offsets) const {
    if (nodes_.empty()) return;
    std::fill_n(offsets, dim_, T(0));
    search_node<Dim>(0, query, results, offsets, T(0));
  }

 private:
  struct Node {
    int64_t begin, end;   // positions in order_
    int64_t left, right;  // child node ids; -1 for a leaf
    int64_t split_dim;
    T split;
  };

  int64_t build(const T* points, int64_t b, int64_t e, std::vector<T>& lo, std::vector<T>& hi) {
    const int64_t id = static_cast<int64_t>(nodes_.size());
    nodes_.push_back(Node{b, e, -1, -1, 0, T(0)});
    if (e - b <= leaf_size_) return id;
    for (int64_t d = 0; d < dim_; ++d) lo[d] = hi[d] = points[order_[b] * dim_ + d];
    for (int64_t i = b + 1; i < e; ++i) {
      const T* p = points + order_[i] * dim_;
      for (int64_t d = 0; d < dim_; ++d) {
        lo[d] = std::min(lo[d], p[d]);
        hi[d] = std::max(hi[d], p[d]);
      }
    }
    int64_t axis = 0;
    for (int64_t d = 1; d < dim_; ++d)
      if (hi[d] - lo[d] > hi[axis] - lo[axis]) axis = d;
    if (!(hi[axis] > lo[axis])) return id;  // all points identical: one leaf
    const int64_t mid = b + (e - b) / 2;
    std::nth_element(order_.begin() + b, order_.begin() + mid, order_.begin() + e, [&](int64_t x, int64_t y) {
      return points[x * dim_ + axis] < points[y * dim_ + axis];
    });
    // left rows have coordinate <= split, right rows >= split
    const T split = points[order_[mid] * dim_ + axis];
    const int64_t left = build(points, b, mid, lo, hi);
    const int64_t right = build(points, mid, e, lo, hi);
    Node& node = nodes_[id];
    node.left = left;
    node.right = right;
    node.split_dim = axis;
    node.split = split;
    return id;
  }

  template <int Dim>
  T cell_bound(const T* offsets) const {
    const int64_t n = Dim > 0 ? Dim : dim_;
    T acc = T(0);
    for (int64_t d = 0; d < n; ++d) acc += offsets[d] * offsets[d];
    return acc;
  }

  template <int Dim, class Results>
  void search_node(int64_t id, const T* query, Results& results, T* offsets, T bound) const {
    if (!results.visit(bound)) return;
    const Node& node = nodes_[id];
    if (node.left < 0) {
      constexpr int64_t kChunk = 16;  // distances of a chunk first (a tight loop), then the offers
      T dist[kChunk];
      for (int64_t c = node.begin; c < node.end; c += kChunk) {
        const int64_t m = std::min(kChunk, node.end - c);
        const T* points = coords_.data() + c * dim_;
        for (int64_t j = 0; j < m; ++j) dist[j] = squared_distance<Dim>(query, points + j * dim_, dim_);
        for (int64_t j = 0; j < m; ++j)
          if (dist[j] <= results.limit()) results.offer(dist[j], order_[c + j]);
      }
      return;
    }
    const T diff = query[node.split_dim] - node.split;
    const int64_t near = diff <= T(0) ? node.left : node.right;
    const int64_t far = diff <= T(0) ? node.right : node.left;
    search_node<Dim>(near, query, results, offsets, bound);
    const T saved = offsets[node.split_dim];
    offsets[node.split_dim] = diff;
    search_node<Dim>(far, query, results, offsets, cell_bound<Dim>(offsets));
    offsets[node.split_dim] = saved;
  }

  int64_t dim_, leaf_size_;
  std::vector<int64_t> order_;  // tree position -> support row
  std::vector<T> coords_;
  std::vector<Node> nodes_;
};

// Supports split into samples by their sorted batch ids, one KD-tree per sample.
template <typename T>
class SegmentedSupport {
 public:
  // Above this dimension a tree prunes little: each sample becomes one leaf (brute force).
  static constexpr int64_t kMaxTreeDim = 16;
  static constexpr int64_t kLeafSize = 16;

  SegmentedSupport(const T* support, int64_t num_support, int64_t dim, const int64_t* support_batch) {
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < num_support; ++i) {
      if (i == 0 || (support_batch != nullptr && support_batch[i] != support_batch[i - 1])) {
        starts.push_back(i);
        ids_.push_back(support_batch != nullptr ? support_batch[i] : 0);
      }
    }
    starts.push_back(num_support);
    const int64_t num_segments = static_cast<int64_t>(ids_.size());
    node_base_.assign(static_cast<size_t>(num_segments + 1), 0);
    trees_.resize(static_cast<size_t>(num_segments));
    at::parallel_for(0, num_segments, 1, [&](int64_t first, int64_t last) {
      for (int64_t s = first; s < last; ++s) {
        const int64_t n = starts[s + 1] - starts[s];
        const int64_t leaf = dim > kMaxTreeDim ? n : kLeafSize;
        trees_[s] = std::make_unique<KdTree<T>>(support, dim, starts[s], starts[s + 1], leaf);
      }
    });
    for (int64_t s = 0; s < num_segments; ++s) node_base_[s + 1] = node_base_[s] + trees_[s]->num_nodes();
  }

  // Tree of the sample with id `batch_id` (any id when unbatched); nullptr if it has no supports.
  const KdTree<T>* find(const int64_t* query_batch, int64_t query_row) const {
    const int64_t s = segment(query_batch, query_row);
    return s < 0 ? nullptr : trees_[s].get();
  }

  // Segment of a query row's sample, or -1 when that sample has no supports.
  int64_t segment(const int64_t* query_batch, int64_t query_row) const {
    if (ids_.empty()) return -1;
    if (query_batch == nullptr) return 0;
    const int64_t id = query_batch[query_row];
    const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
    return (it != ids_.end() && *it == id) ? static_cast<int64_t>(it - ids_.begin()) : -1;
  }

  // Order in which to search the queries: by sample, then by the leaf each query falls in, so
  // consecutive searches touch the same part of a tree (a stable counting sort, O(Nq + nodes)).
  std::vector<int64_t> locality_order(const T* query, const int64_t* query_batch, int64_t num_query,
                                      int64_t dim) const {
    const int64_t none = node_base_.back();  // queries whose sample has no supports go last
    std::vector<int64_t> key(static_cast<size_t>(num_query));
    at::parallel_for(0, num_query, 1024, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const int64_t s = segment(query_batch, i);
        key[i] = s < 0 ? none : node_base_[s] + trees_[s]->locate(query + i * dim);
      }
    });
    std::vector<int64_t> offsets(static_cast<size_t>(none + 2), 0);
    for (int64_t i = 0; i < num_query; ++i) ++offsets[key[i] + 1];
    for (int64_t b = 0; b <= none; ++b) offsets[b + 1] += offsets[b];
    std::vector<int64_t> order(static_cast<size_t>(num_query));
    for (int64_t i = 0; i < num_query; ++i) order[offsets[key[i]]++] = i;
    return order;
  }

 private:
  std::vector<int64_t> ids_;
  std::vector<int64_t> node_base_;  // first global node id of each segment's tree
  std::vector<std::unique_ptr<KdTree<T>>> trees_;
};

// Runs `results` (one per thread, from make_results()) for every query row in parallel (in
// locality order) and hands each filled result set to emit(row, results).
template <typename T, typename MakeResults, typename Emit>
void search_queries(const SegmentedSupport<T>& support, const T* query, const int64_t* query_batch,
                    int64_t num_query, int64_t dim, MakeResults make_results, Emit emit) {
  constexpr int64_t kGrain = 128;
  const std::vector<int64_t> order = support.locality_order(query, query_batch, num_query, dim);
  dispatch_dim(dim, [&](auto dim_constant) {
    constexpr int Dim = decltype(dim_constant)::value;
    at::parallel_for(0, num_query, kGrain, [&](int64_t first, int64_t last) {
      auto results = make_results();
      std::vector<T> offsets(static_cast<size_t>(dim));
      for (int64_t p = first; p < last; ++p) {
        const int64_t i = order[p];
        results.reset();
        if (const KdTree<T>* tree = support.find(query_batch, i))
          tree->template search<Dim>(query + i * dim, results, offsets.data());
        emit(i, results);
      }
    });
  });
}

}  // namespace fsdlite::neighbors
