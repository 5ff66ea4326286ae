// Deterministic sums: y[j] = sum_r x[kept_offset(j) + reduced_offset(r)], where j runs over the
// axes x keeps and r over the axes it sums (adjacent axes of one kind merged, size-1 axes
// dropped). Fixed summation order, float64 accumulation, no atomics: the reduced range is split
// into C fixed chunks; stage 1 sums each (j, chunk) in a fixed order into a float64 partials
// buffer, stage 2 (the same code on the partials) sums the chunks of each j in a fixed order.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

// Kept and reduced axes of x, outer to inner, with x's element strides.
struct ReduceLayout {
  int kept_rank = 0;
  int red_rank = 0;
  int64_t kept_size[kMaxRank] = {};
  int64_t kept_stride[kMaxRank] = {};
  int64_t red_size[kMaxRank] = {};
  int64_t red_stride[kMaxRank] = {};
  int64_t kept_numel = 1;      // Y: outputs
  int64_t red_numel = 1;       // R: terms of each sum
  bool inner_reduced = false;  // x's innermost axis is summed (stage 1 uses a block per sum)
};

__device__ inline int64_t mixed_radix_offset(int64_t idx, int rank, const int64_t* size,
                                             const int64_t* stride) {
  int64_t offset = 0;
  for (int k = rank - 1; k >= 0; --k) {
    offset += (idx % size[k]) * stride[k];
    idx /= size[k];
  }
  return offset;
}

// A block per (j, chunk c): its threads stride over the chunk, then a fixed tree in shared memory.
// Writes out[j*C + c]. Used when x's innermost axis is summed, so a block's reads are coalesced.
template <class In, class Out>
__global__ void reduce_block_kernel(const In* x, Out* out, ReduceLayout lay, int64_t chunks,
                                    int64_t chunk_len) {
  __shared__ double partial[kThreads];
  const int64_t total = lay.kept_numel * chunks;
  for (int64_t blk = blockIdx.x; blk < total; blk += gridDim.x) {
    const int64_t j = blk / chunks, c = blk % chunks;
    const int64_t base = mixed_radix_offset(j, lay.kept_rank, lay.kept_size, lay.kept_stride);
    const int64_t r_end = min_i64(lay.red_numel, (c + 1) * chunk_len);
    double acc = 0.0;
    for (int64_t r = c * chunk_len + threadIdx.x; r < r_end; r += blockDim.x) {
      acc += static_cast<double>(
          x[base + mixed_radix_offset(r, lay.red_rank, lay.red_size, lay.red_stride)]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[blk] = static_cast<Out>(partial[0]);
    __syncthreads();  // partial[0] is read before the next block-iteration overwrites it
  }
}

// A thread per (chunk c, j), summing its chunk sequentially. Writes out[c*Y + j]. Used when x's
// innermost axis is kept, so neighbouring threads (neighbouring j) read neighbouring elements.
template <class In, class Out>
__global__ void reduce_thread_kernel(const In* x, Out* out, ReduceLayout lay, int64_t chunks,
                                     int64_t chunk_len) {
  const int64_t total = lay.kept_numel * chunks;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = idx / lay.kept_numel, j = idx % lay.kept_numel;
    const int64_t base = mixed_radix_offset(j, lay.kept_rank, lay.kept_size, lay.kept_stride);
    const int64_t r_end = min_i64(lay.red_numel, (c + 1) * chunk_len);
    double acc = 0.0;
    for (int64_t r = c * chunk_len; r < r_end; ++r) {
      acc += static_cast<double>(
          x[base + mixed_radix_offset(r, lay.red_rank, lay.red_size, lay.red_stride)]);
    }
    out[idx] = static_cast<Out>(acc);
  }
}

// Merges x's axes into alternating kept / reduced runs (y_shape has 1 where x is summed).
ReduceLayout make_layout(const Shape& x_shape, const Shape& y_shape) {
  std::vector<std::pair<bool, int64_t>> runs;  // (reduced, size), outer to inner
  for (size_t k = 0; k < x_shape.size(); ++k) {
    if (x_shape[k] == 1) continue;
    const bool reduced = y_shape[k] == 1;
    if (!runs.empty() && runs.back().first == reduced) {
      runs.back().second *= x_shape[k];
    } else {
      runs.emplace_back(reduced, x_shape[k]);
    }
  }
  ReduceLayout lay;
  int64_t stride = 1;
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    if (it->first) {
      lay.red_size[lay.red_rank] = it->second;
      lay.red_stride[lay.red_rank++] = stride;
      lay.red_numel *= it->second;
    } else {
      lay.kept_size[lay.kept_rank] = it->second;
      lay.kept_stride[lay.kept_rank++] = stride;
      lay.kept_numel *= it->second;
    }
    stride *= it->second;
  }
  // The runs were collected inner to outer; mixed_radix_offset wants outer to inner.
  std::reverse(lay.red_size, lay.red_size + lay.red_rank);
  std::reverse(lay.red_stride, lay.red_stride + lay.red_rank);
  std::reverse(lay.kept_size, lay.kept_size + lay.kept_rank);
  std::reverse(lay.kept_stride, lay.kept_stride + lay.kept_rank);
  lay.inner_reduced = !runs.empty() && runs.back().first;
  return lay;
}

// Two axes (outer, inner) with one of them summed: the partials of stage 1.
ReduceLayout partials_layout(int64_t outputs, int64_t chunks, bool chunks_inner) {
  return chunks_inner ? make_layout({outputs, chunks}, {outputs, 1})
                      : make_layout({chunks, outputs}, {1, outputs});
}

// Chunk counts depend on the shape only (never on the GPU), so results are the same bits on any
// device. Block form: ~2048 blocks in all, >= 2048 terms each; thread form: ~64K threads in
// all, >= 16 terms each.
template <class In, class Out>
void reduce(CachingAllocator& alloc, int device, const In* x, Out* y, const ReduceLayout& lay) {
  const int64_t Y = lay.kept_numel, R = lay.red_numel;
  const bool block_form = lay.inner_reduced;
  const int64_t per_chunk_min = block_form ? 2048 : 16;
  const int64_t target_work = block_form ? 2048 : 65536;
  int64_t chunks =
      std::max<int64_t>(1, std::min(ceil_div(R, per_chunk_min), ceil_div(target_work, Y)));
  const int64_t chunk_len = ceil_div(R, chunks);
  chunks = ceil_div(R, chunk_len);

  std::shared_ptr<void> partials_storage;
  if (chunks > 1) partials_storage = alloc.allocate(Y * chunks * int64_t{sizeof(double)}, device);
  double* partials = static_cast<double*>(partials_storage.get());

  const int64_t total = Y * chunks;
  auto launch = [&](auto* out) {
    if (block_form) {
      const unsigned blocks = static_cast<unsigned>(std::min(total, kMaxBlocks));
      reduce_block_kernel<<<blocks, kThreads>>>(x, out, lay, chunks, chunk_len);
      TGRAD_CUDA_CHECK_LAUNCH("reduce_block_kernel");
    } else {
      reduce_thread_kernel<<<grid_for(total), kThreads>>>(x, out, lay, chunks, chunk_len);
      TGRAD_CUDA_CHECK_LAUNCH("reduce_thread_kernel");
    }
  };
  if (chunks == 1) {
    launch(y);
    return;
  }
  launch(partials);
  // Block form wrote (Y, chunks); thread form wrote (chunks, Y).
  reduce<double, Out>(alloc, device, partials, y, partials_layout(Y, chunks, block_form));
}

}  // namespace

void sum_to_shape(CachingAllocator& alloc, const Tensor& x, const Shape& x_shape, Tensor& y,
                  const Shape& y_shape) {
  TGRAD_CHECK(x_shape.size() == y_shape.size(), "CUDA sum_to: y shape ", y_shape,
              " must have the rank of x shape ", x_shape);
  for (size_t k = 0; k < x_shape.size(); ++k) {
    TGRAD_CHECK(y_shape[k] == x_shape[k] || y_shape[k] == 1, "CUDA sum_to: cannot sum ", x_shape,
                " to ", y_shape);
  }
  if (y.numel() == 0) return;
  DeviceGuard guard(y.device());
  if (x.numel() == 0) {
    fill(y, 0.0);
    return;
  }
  const ReduceLayout lay = make_layout(x_shape, y_shape);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    reduce<T, T>(alloc, y.device().index(), x.data_ptr<T>(), y.data_ptr<T>(), lay);
  });
}

void sum_to(CachingAllocator& alloc, const Tensor& x, Tensor& y) {
  sum_to_shape(alloc, x, x.shape(), y, y.shape());
}

}  // namespace tgrad::cuda
