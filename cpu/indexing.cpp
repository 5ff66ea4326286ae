// The CPU indexing kernels: strided gather/scatter (the shape ops' data movement), index gather
// and deterministic index_add along a dim, and max/min with positions along a dim. Work is split
// by the problem's shape only, so results do not depend on the thread count.
#include <cmath>
#include <cstring>

#include "cpu/kernels.h"
#include "cpu/parallel.h"

namespace tgrad::cpu {

namespace {

// Calls f.template operator()<U>() with U an unsigned integer of the dtype's size: the shape
// ops move elements bit for bit, whatever they hold.
template <class F>
void dispatch_bits(DType dtype, F&& f) {
  if (dtype_size(dtype) == 4) {
    f.template operator()<uint32_t>();
  } else {
    TGRAD_CHECK(dtype_size(dtype) == 8, "cpu backend: unsupported element size ",
                dtype_size(dtype));
    f.template operator()<uint64_t>();
  }
}

// Visits every element of the window row by row (the last dim contiguous in the visit order):
// fn(window_offset, linear_index, row_length, last_stride) once per row.
template <class Fn>
void for_each_row(const StridedWindow& w, int threads, Fn&& fn) {
  const int64_t rank = static_cast<int64_t>(w.shape.size());
  const int64_t numel = shape_numel(w.shape);
  if (numel == 0) return;
  const int64_t row = rank == 0 ? 1 : w.shape.back();
  const int64_t last_stride = rank == 0 ? 0 : w.strides.back();
  const int64_t rows = numel / row;
  parallel_for(threads_for(static_cast<double>(numel), threads), rows, [&](int64_t r) {
    int64_t off = w.offset, rest = r;
    for (int64_t d = rank - 2; d >= 0; --d) {
      off += (rest % w.shape[d]) * w.strides[d];
      rest /= w.shape[d];
    }
    fn(off, r * row, row, last_stride);
  });
}

}  // namespace

void strided_gather(const Tensor& x, const StridedWindow& w, Tensor& y, int threads) {
  dispatch_bits(x.dtype(), [&]<class U>() {
    const U* xp = data<U>(x);
    U* yp = data<U>(y);
    for_each_row(w, threads, [&](int64_t off, int64_t lin, int64_t n, int64_t s) {
      for (int64_t i = 0; i < n; ++i)
        yp[lin + i] = xp[off + i * s];
    });
  });
}

void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& w, int threads) {
  dispatch_bits(x.dtype(), [&]<class U>() {
    const U* xp = data<U>(x);
    U* yp = data<U>(y);
    for_each_row(w, threads, [&](int64_t off, int64_t lin, int64_t n, int64_t s) {
      for (int64_t i = 0; i < n; ++i)
        yp[off + i * s] = xp[lin + i];
    });
  });
}

void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index, Tensor& y,
                  int threads) {
  const int64_t n_x = outer * inner == 0 ? 0 : x.numel() / (outer * inner);
  const int64_t n_y = index.numel();
  const int64_t* idx = data<int64_t>(index);
  dispatch_bits(x.dtype(), [&]<class U>() {
    const U* xp = data<U>(x);
    U* yp = data<U>(y);
    parallel_for(threads_for(static_cast<double>(y.numel()), threads), outer * n_y, [&](int64_t t) {
      const int64_t o = t / n_y, j = t % n_y;
      std::memcpy(yp + t * inner, xp + (o * n_x + idx[j]) * inner, sizeof(U) * inner);
    });
  });
}

void index_add(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index, Tensor& y,
               int threads) {
  const int64_t n_x = index.numel();
  const int64_t n_y = outer * inner == 0 ? 0 : y.numel() / (outer * inner);
  const int64_t* idx = data<int64_t>(index);
  dispatch_floating(x.dtype(), [&]<class T>() {
    const T* xp = data<T>(x);
    T* yp = data<T>(y);
    std::fill(yp, yp + y.numel(), T(0));
    // One task per outer slice: within it, j runs in increasing order, so each sum's order is
    // fixed whatever the thread count.
    parallel_for(threads_for(static_cast<double>(x.numel()), threads), outer, [&](int64_t o) {
      for (int64_t j = 0; j < n_x; ++j) {
        const T* src = xp + (o * n_x + j) * inner;
        T* dst = yp + (o * n_y + idx[j]) * inner;
        for (int64_t i = 0; i < inner; ++i)
          dst[i] += src[i];
      }
    });
  });
}

void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner, Tensor& values,
                Tensor& indices, int threads) {
  const int64_t n = x.numel() / (outer * inner);
  int64_t* ip = data<int64_t>(indices);
  dispatch_floating(x.dtype(), [&]<class T>() {
    const T* xp = data<T>(x);
    T* vp = data<T>(values);
    parallel_for(threads_for(static_cast<double>(x.numel()), threads), outer, [&](int64_t o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = xp + o * n * inner + i;
        T best = p[0];
        int64_t at = 0;
        for (int64_t k = 1; k < n && !std::isnan(best); ++k) {
          const T v = p[k * inner];
          if (std::isnan(v) || (op == ReduceOp::max ? v > best : v < best)) {
            best = v;
            at = k;
          }
        }
        vp[o * inner + i] = best;
        ip[o * inner + i] = at;
      }
    });
  });
}

}  // namespace tgrad::cpu
