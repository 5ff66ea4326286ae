// The CUDA indexing kernels: strided gather/scatter (the shape ops' data movement), index gather,
// deterministic index_add (a host-built CSR of the index: each output row sums its sources in
// increasing order, no float atomics) and max/min with positions along a dim. int64 indices.
#include <cuda_runtime.h>

#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

constexpr int kRank = 8;

// A window passed to kernels by value.
struct Window {
  int rank = 0;
  int64_t shape[kRank] = {};
  int64_t strides[kRank] = {};
  int64_t offset = 0;
};

Window to_window(const StridedWindow& w) {
  TGRAD_CHECK(w.shape.size() <= kRank, "cuda backend: window rank ", w.shape.size(), " exceeds ",
              kRank);
  Window k;
  k.rank = static_cast<int>(w.shape.size());
  for (int d = 0; d < k.rank; ++d) {
    k.shape[d] = w.shape[d];
    k.strides[d] = w.strides[d];
  }
  k.offset = w.offset;
  return k;
}

__device__ inline int64_t window_offset(const Window& w, int64_t i) {
  int64_t off = w.offset;
  for (int d = w.rank - 1; d >= 0; --d) {
    off += (i % w.shape[d]) * w.strides[d];
    i /= w.shape[d];
  }
  return off;
}

template <class U>
__global__ void gather_kernel(const U* x, Window w, U* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = x[window_offset(w, i)];
  }
}

template <class U>
__global__ void scatter_kernel(const U* x, Window w, U* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[window_offset(w, i)] = x[i];
  }
}

template <class U>
__global__ void index_gather_kernel(const U* x, const int64_t* index, U* y, int64_t n_x,
                                    int64_t n_y, int64_t inner, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = t % inner, j = (t / inner) % n_y, o = t / (inner * n_y);
    y[t] = x[(o * n_x + index[j]) * inner + i];
  }
}

// y[o, k, i] = sum over sources j of k (rows[k] .. rows[k+1] of `order`, increasing j).
template <class T>
__global__ void index_add_kernel(const T* x, const int64_t* rows, const int64_t* order, T* y,
                                 int64_t n_x, int64_t n_y, int64_t inner, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = t % inner, k = (t / inner) % n_y, o = t / (inner * n_y);
    T acc = 0;
    for (int64_t r = rows[k]; r < rows[k + 1]; ++r)
      acc += x[(o * n_x + order[r]) * inner + i];
    y[t] = acc;
  }
}

template <class T>
__global__ void reduce_dim_kernel(bool is_max, const T* x, T* values, int64_t* indices, int64_t n,
                                  int64_t inner, int64_t count) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < count;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = t / inner, i = t % inner;
    const T* p = x + o * n * inner + i;
    T best = p[0];
    int64_t at = 0;
    for (int64_t k = 1; k < n && !isnan(best); ++k) {
      const T v = p[k * inner];
      if (isnan(v) || (is_max ? v > best : v < best)) {
        best = v;
        at = k;
      }
    }
    values[t] = best;
    indices[t] = at;
  }
}

// Calls f(U{}) with U an unsigned integer of the dtype's size (shape ops move bits).
template <class F>
void dispatch_bits(DType dtype, F&& f) {
  if (dtype_size(dtype) == 4) {
    f(uint32_t{});
  } else {
    TGRAD_CHECK(dtype_size(dtype) == 8, "cuda backend: unsupported element size ",
                dtype_size(dtype));
    f(uint64_t{});
  }
}

}  // namespace

void strided_gather(const Tensor& x, const StridedWindow& window, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  const Window w = to_window(window);
  dispatch_bits(x.dtype(), [&](auto tag) {
    using U = decltype(tag);
    gather_kernel<U><<<grid_for(n), kThreads>>>(static_cast<const U*>(x.raw_data()), w,
                                                static_cast<U*>(y.raw_data()), n);
    TGRAD_CUDA_CHECK_LAUNCH("gather_kernel");
  });
}

void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& window) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  const Window w = to_window(window);
  dispatch_bits(x.dtype(), [&](auto tag) {
    using U = decltype(tag);
    scatter_kernel<U><<<grid_for(n), kThreads>>>(static_cast<const U*>(x.raw_data()), w,
                                                 static_cast<U*>(y.raw_data()), n);
    TGRAD_CUDA_CHECK_LAUNCH("scatter_kernel");
  });
}

void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  const int64_t n_x = x.numel() / (outer * inner), n_y = index.numel();
  dispatch_bits(x.dtype(), [&](auto tag) {
    using U = decltype(tag);
    index_gather_kernel<U><<<grid_for(n), kThreads>>>(
        static_cast<const U*>(x.raw_data()), static_cast<const int64_t*>(index.raw_data()),
        static_cast<U*>(y.raw_data()), n_x, n_y, inner, n);
    TGRAD_CUDA_CHECK_LAUNCH("index_gather_kernel");
  });
}

void index_add(CachingAllocator& alloc, const Tensor& x, int64_t outer, int64_t inner,
               const Tensor& index, Tensor& y) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  const int64_t n_x = index.numel(), n_y = n / (outer * inner);
  // The CSR of the index on the host: rows[k]..rows[k+1] lists the sources j of target k, in
  // increasing j (a counting sort is stable), which fixes every sum's order.
  std::vector<int64_t> idx(n_x);
  TGRAD_CUDA_CHECK(
      cudaMemcpy(idx.data(), index.raw_data(), n_x * sizeof(int64_t), cudaMemcpyDeviceToHost));
  std::vector<int64_t> csr(n_y + 1 + n_x, 0);
  int64_t* rows = csr.data();
  int64_t* order = csr.data() + n_y + 1;
  for (int64_t j = 0; j < n_x; ++j)
    ++rows[idx[j] + 1];
  for (int64_t k = 0; k < n_y; ++k)
    rows[k + 1] += rows[k];
  std::vector<int64_t> next(rows, rows + n_y);
  for (int64_t j = 0; j < n_x; ++j)
    order[next[idx[j]]++] = j;
  const int64_t bytes = static_cast<int64_t>(csr.size() * sizeof(int64_t));
  std::shared_ptr<void> dev = alloc.allocate(bytes, y.device().index());
  TGRAD_CUDA_CHECK(cudaMemcpy(dev.get(), csr.data(), bytes, cudaMemcpyHostToDevice));
  const auto* d_rows = static_cast<const int64_t*>(dev.get());
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    index_add_kernel<T><<<grid_for(n), kThreads>>>(static_cast<const T*>(x.raw_data()), d_rows,
                                                   d_rows + n_y + 1, static_cast<T*>(y.raw_data()),
                                                   n_x, n_y, inner, n);
    TGRAD_CUDA_CHECK_LAUNCH("index_add_kernel");
  });
  // The CSR buffer goes back to the cache when `dev` dies; the kernel must have read it first.
  TGRAD_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner, Tensor& values,
                Tensor& indices) {
  const int64_t count = outer * inner;
  if (count == 0) return;
  DeviceGuard guard(x.device());
  const int64_t n = x.numel() / count;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    reduce_dim_kernel<T>
        <<<grid_for(count), kThreads>>>(op == ReduceOp::max, static_cast<const T*>(x.raw_data()),
                                        static_cast<T*>(values.raw_data()),
                                        static_cast<int64_t*>(indices.raw_data()), n, inner, count);
    TGRAD_CUDA_CHECK_LAUNCH("reduce_dim_kernel");
  });
}

}  // namespace tgrad::cuda
