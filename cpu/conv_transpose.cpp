// ConvTranspose on the CPU as GEMMs (Eigen, row-major maps), per batch item n and group g, over
// chunks of input positions p = ih*W + iw. Column-buffer row r = (co, kh, kw) pairs input (ih, iw)
// with output (oh, ow) = (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw), skipped when outside y.
//   forward: cols = W_g^T x_g, then col2im: y[co, oh, ow] += cols[r, p] (y starts as bias or 0)
//   dgrad:   cols = im2col(dy) (0 where (oh, ow) is outside y), dx_g = W_g cols
//   wgrad:   dw_g = sum over (n, chunk), in one fixed order, of x_g cols^T;  db = sum of dy
#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/parallel.h"

#ifndef TGRAD_CPU_ISA_NS
#error "compiled once per level with TGRAD_CPU_ISA_NS set (cpu/CMakeLists.txt)"
#endif

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS {
namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMajor<T>>;
template <class T>
using MutMap = Eigen::Map<RowMajor<T>>;
// A block of columns of a row-major matrix whose rows are `stride` elements apart.
template <class T>
using ConstStridedMap = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using StridedMap = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// Bytes of column buffer each thread works in: small enough to stay in L2 between the GEMM that
// writes it and the col2im that reads it (or the im2col that writes it and the GEMM that reads).
constexpr int64_t kColsBudgetBytes = int64_t{1} << 19;
constexpr int64_t kMinChunk = 64;         // input positions per GEMM, at least
constexpr int64_t kMaxForwardRows = 512;  // forward splits (co, kh, kw) rows into blocks this big
constexpr int64_t kMaxWgradSlices = 32;   // wgrad's reduction is cut into at most this many parts
// Forward with fewer (n, g, channel block) tasks than this (batch 1, say) splits over positions
// instead, through one column buffer per (n, g) of at most kMaxWholeColsBytes.
constexpr int64_t kMinForwardTasks = 16;
constexpr int64_t kMaxWholeColsBytes = int64_t{64} << 20;
constexpr int64_t kMaxWgradPartialBytes = int64_t{64} << 20;

__extension__ typedef __int128 int128;  // GCC and Clang; only for overflow-free index bounds

// Ceiling of a / b for b > 0, exact for every int64 a and b (no a + b - 1 that could overflow:
// the fuzzer found strides near INT64_MAX that the geometry accepts).
int64_t ceil_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}

// Per axis and kernel tap k: the input indices i in [lo, hi) whose output
// i*stride - padding + k*dilation lands inside [0, out).
struct TapRanges {
  std::vector<int64_t> lo, hi;
};
TapRanges tap_ranges(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                     int64_t dilation) {
  TapRanges r;
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t shift = padding - k * dilation;  // o = i*stride - shift
    const int64_t lo = std::max<int64_t>(0, ceil_div(shift, stride));
    // out - 1 + shift can pass INT64_MAX (empty tensors accept huge sizes): 128-bit sum.
    const int128 last = int128{out} - 1 + shift;
    int128 q = last / stride;
    if (last % stride != 0 && last < 0) --q;
    const int64_t hi = q + 1 >= in ? in : static_cast<int64_t>(q + 1);
    r.lo.push_back(lo);
    r.hi.push_back(std::max(lo, hi));
  }
  return r;
}

// Every size a kernel needs, checked against the tensors once.
struct Plan {
  int64_t batch, groups, in_channels, out_channels, cig, cog;
  int64_t in_h, in_w, out_h, out_w, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t in_hw, out_hw, taps, rows;  // rows = cog * taps: the (co, kh, kw) of one group
  TapRanges h, w;

  // Input positions per chunk for a column buffer of `buffer_rows` rows of T.
  int64_t chunk(int64_t buffer_rows, int64_t elem_bytes) const {
    int64_t p = kColsBudgetBytes / std::max<int64_t>(1, buffer_rows * elem_bytes);
    p = std::max(kMinChunk, p / 16 * 16);
    return std::max<int64_t>(1, std::min(p, in_hw));
  }
};

Plan make_plan(const ConvGeometry& g, const char* fn) {
  const auto positive = [&](int64_t v, const char* what) {
    TGRAD_CHECK(v >= 1, "cpu backend: ", fn, ": ", what, "=", v, " must be positive (", g.str(),
                ")");
  };
  const auto non_negative = [&](int64_t v, const char* what) {
    TGRAD_CHECK(v >= 0, "cpu backend: ", fn, ": ", what, "=", v, " must be non-negative (", g.str(),
                ")");
  };
  non_negative(g.batch, "batch");
  positive(g.groups, "groups");
  positive(g.in_channels, "in_channels");
  positive(g.out_channels, "out_channels");
  TGRAD_CHECK(g.in_channels % g.groups == 0 && g.out_channels % g.groups == 0, "cpu backend: ", fn,
              ": channels must divide by groups (", g.str(), ")");
  for (int a = 0; a < 2; ++a) {
    non_negative(g.in_size[a], "in_size");
    non_negative(g.out_size[a], "out_size");
    positive(g.kernel[a], "kernel");
    positive(g.stride[a], "stride");
    positive(g.dilation[a], "dilation");
    non_negative(g.padding[a], "padding");
  }
  Plan p{};
  p.batch = g.batch;
  p.groups = g.groups;
  p.in_channels = g.in_channels;
  p.out_channels = g.out_channels;
  p.cig = g.in_channels_per_group();
  p.cog = g.out_channels_per_group();
  p.in_h = g.in_size[0];
  p.in_w = g.in_size[1];
  p.out_h = g.out_size[0];
  p.out_w = g.out_size[1];
  p.kernel_h = g.kernel[0];
  p.kernel_w = g.kernel[1];
  p.stride_h = g.stride[0];
  p.stride_w = g.stride[1];
  p.pad_h = g.padding[0];
  p.pad_w = g.padding[1];
  p.dil_h = g.dilation[0];
  p.dil_w = g.dilation[1];
  p.in_hw = p.in_h * p.in_w;
  p.out_hw = p.out_h * p.out_w;
  p.taps = p.kernel_h * p.kernel_w;
  p.rows = p.cog * p.taps;
  p.h = tap_ranges(p.in_h, p.out_h, p.kernel_h, p.stride_h, p.pad_h, p.dil_h);
  p.w = tap_ranges(p.in_w, p.out_w, p.kernel_w, p.stride_w, p.pad_w, p.dil_w);
  return p;
}

void check_numel(const Tensor& t, int64_t expected, const char* fn, const char* arg,
                 const ConvGeometry& g) {
  TGRAD_CHECK(t.numel() == expected, "cpu backend: ", fn, ": ", arg, " has ", t.numel(),
              " elements (shape ", t.shape(), ") but the geometry needs ", expected, " (", g.str(),
              ")");
}

// y_c[oh, ow] += cols[r, p - p0] for the rows r of channels [co0, co1) (cols row 0 is co0's
// first tap) and positions p in [p0, p0 + len). y_ng points at channel 0 of the group.
template <class T>
void col2im_add(const Plan& pl, const T* cols, int64_t co0, int64_t co1, int64_t p0, int64_t len,
                T* y_ng) {
  const int64_t p1 = p0 + len;
  const int64_t ih_first = p0 / pl.in_w, ih_last = (p1 - 1) / pl.in_w;
  for (int64_t co = co0; co < co1; ++co) {
    T* y_c = y_ng + co * pl.out_hw;
    for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
      const int64_t ih_begin = std::max(pl.h.lo[kh], ih_first);
      const int64_t ih_end = std::min(pl.h.hi[kh], ih_last + 1);
      for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
        const T* c_row = cols + ((co - co0) * pl.taps + kh * pl.kernel_w + kw) * len;
        for (int64_t ih = ih_begin; ih < ih_end; ++ih) {
          const int64_t row_p = ih * pl.in_w;  // position of (ih, 0)
          const int64_t iw_begin = std::max(pl.w.lo[kw], p0 - row_p);
          const int64_t iw_end = std::min(pl.w.hi[kw], p1 - row_p);
          const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
          const int64_t y_base = oh * pl.out_w - pl.pad_w + kw * pl.dil_w;  // + iw*stride_w
          const int64_t c_base = row_p - p0;                                // + iw
          if (pl.stride_w == 1) {
            for (int64_t iw = iw_begin; iw < iw_end; ++iw)
              y_c[y_base + iw] += c_row[c_base + iw];
          } else {
            for (int64_t iw = iw_begin; iw < iw_end; ++iw) {
              y_c[y_base + iw * pl.stride_w] += c_row[c_base + iw];
            }
          }
        }
      }
    }
  }
}

// cols[r, p - p0] = dy_c[oh, ow] for every row r = (co, kh, kw) of the group and positions p in
// [p0, p0 + len), 0 where (oh, ow) falls outside dy. dy_ng points at channel 0 of the group.
template <class T>
void im2col(const Plan& pl, const T* dy_ng, int64_t p0, int64_t len, T* cols) {
  const int64_t p1 = p0 + len;
  const int64_t ih_first = p0 / pl.in_w, ih_last = (p1 - 1) / pl.in_w;
  for (int64_t co = 0; co < pl.cog; ++co) {
    const T* dy_c = dy_ng + co * pl.out_hw;
    for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
      for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
        T* c_row = cols + (co * pl.taps + kh * pl.kernel_w + kw) * len;
        for (int64_t ih = ih_first; ih <= ih_last; ++ih) {
          const int64_t row_p = ih * pl.in_w;
          const int64_t seg_begin = std::max<int64_t>(0, p0 - row_p);  // iw range in the chunk
          const int64_t seg_end = std::min(pl.in_w, p1 - row_p);
          const int64_t c_base = row_p - p0;
          int64_t iw_begin = seg_end, iw_end = seg_end;  // the valid part; empty if ih is out
          if (ih >= pl.h.lo[kh] && ih < pl.h.hi[kh]) {
            iw_begin = std::clamp(pl.w.lo[kw], seg_begin, seg_end);
            iw_end = std::clamp(pl.w.hi[kw], iw_begin, seg_end);
          }
          for (int64_t iw = seg_begin; iw < iw_begin; ++iw)
            c_row[c_base + iw] = T(0);
          if (iw_begin < iw_end) {
            const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
            const int64_t dy_base = oh * pl.out_w - pl.pad_w + kw * pl.dil_w;  // + iw*stride_w
            if (pl.stride_w == 1) {
              for (int64_t iw = iw_begin; iw < iw_end; ++iw) {
                c_row[c_base + iw] = dy_c[dy_base + iw];
              }
            } else {
              for (int64_t iw = iw_begin; iw < iw_end; ++iw) {
                c_row[c_base + iw] = dy_c[dy_base + iw * pl.stride_w];
              }
            }
          }
          for (int64_t iw = iw_end; iw < seg_end; ++iw)
            c_row[c_base + iw] = T(0);
        }
      }
    }
  }
}

// Forward for few (n, g): per (n, g), tasks over chunks of input positions fill one column buffer
// of all rows (the GEMMs), then tasks over output channels scatter it into y (col2im), so that
// every thread has work even at batch 1.
template <class T>
void forward_by_positions(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  const int64_t chunk = pl.chunk(pl.rows, sizeof(T));
  const int64_t n_chunks = ceil_div(pl.in_hw, chunk);
  const Workspace<T> cols(pl.rows * pl.in_hw);
  for (int64_t n = 0; n < pl.batch; ++n) {
    for (int64_t g = 0; g < pl.groups; ++g) {
      const ConstMap<T> w_g(w + g * pl.cig * pl.rows, pl.cig, pl.rows);
      const T* x_ng = x + (n * pl.in_channels + g * pl.cig) * pl.in_hw;
      parallel_for(threads, n_chunks, [&](int64_t t) {
        const int64_t p0 = t * chunk, len = std::min(chunk, pl.in_hw - p0);
        const ConstStridedMap<T> x_chunk(x_ng + p0, pl.cig, len, Eigen::OuterStride<>(pl.in_hw));
        StridedMap<T> c(cols.data() + p0, pl.rows, len, Eigen::OuterStride<>(pl.in_hw));
        c.noalias() = w_g.transpose() * x_chunk;
      });
      T* y_ng = y + (n * pl.out_channels + g * pl.cog) * pl.out_hw;
      parallel_for(threads, pl.cog, [&](int64_t co) {
        const T init = b != nullptr ? b[g * pl.cog + co] : T(0);
        std::fill_n(y_ng + co * pl.out_hw, pl.out_hw, init);
        col2im_add(pl, cols.data() + co * pl.taps * pl.in_hw, co, co + 1, 0, pl.in_hw, y_ng);
      });
    }
  }
}

// Tasks (n, g, block of output channels); each writes only its own channels of y. The choice
// between this and forward_by_positions depends on the shape only.
template <class T>
void forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  const int64_t blocks = std::max<int64_t>(1, ceil_div(pl.rows, kMaxForwardRows));
  const int64_t co_per_block = ceil_div(pl.cog, blocks);
  const int64_t n_blocks = ceil_div(pl.cog, co_per_block);
  const int64_t block_rows = co_per_block * pl.taps;
  const int64_t chunk = pl.chunk(block_rows, sizeof(T));
  const int64_t tasks = pl.batch * pl.groups * n_blocks;
  if (tasks < kMinForwardTasks && pl.in_hw > chunk &&
      pl.rows * pl.in_hw * static_cast<int64_t>(sizeof(T)) <= kMaxWholeColsBytes) {
    forward_by_positions(pl, x, w, b, y, threads);
    return;
  }
  parallel_for(
      threads, tasks, [&] { return Workspace<T>(block_rows * chunk); },
      [&](Workspace<T>& cols, int64_t t) {
        const int64_t n = t / (pl.groups * n_blocks);
        const int64_t g = (t / n_blocks) % pl.groups;
        const int64_t co0 = (t % n_blocks) * co_per_block;
        const int64_t co1 = std::min(pl.cog, co0 + co_per_block);
        T* y_ng = y + (n * pl.out_channels + g * pl.cog) * pl.out_hw;
        for (int64_t co = co0; co < co1; ++co) {
          const T init = b != nullptr ? b[g * pl.cog + co] : T(0);
          std::fill_n(y_ng + co * pl.out_hw, pl.out_hw, init);
        }
        const ConstMap<T> w_g(w + g * pl.cig * pl.rows, pl.cig, pl.rows);
        const auto w_block_t = w_g.middleCols(co0 * pl.taps, (co1 - co0) * pl.taps).transpose();
        const T* x_ng = x + (n * pl.in_channels + g * pl.cig) * pl.in_hw;
        for (int64_t p0 = 0; p0 < pl.in_hw; p0 += chunk) {
          const int64_t len = std::min(chunk, pl.in_hw - p0);
          const ConstStridedMap<T> x_chunk(x_ng + p0, pl.cig, len, Eigen::OuterStride<>(pl.in_hw));
          MutMap<T> c(cols.data(), (co1 - co0) * pl.taps, len);
          c.noalias() = w_block_t * x_chunk;
          col2im_add(pl, cols.data(), co0, co1, p0, len, y_ng);
        }
      });
}

// Tasks (n, g, chunk of input positions); each writes only its own block of dx.
template <class T>
void dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  const int64_t chunk = pl.chunk(pl.rows, sizeof(T));
  const int64_t n_chunks = ceil_div(pl.in_hw, chunk);
  const int64_t tasks = pl.batch * pl.groups * n_chunks;
  parallel_for(
      threads, tasks, [&] { return Workspace<T>(pl.rows * chunk); },
      [&](Workspace<T>& cols, int64_t t) {
        const int64_t n = t / (pl.groups * n_chunks);
        const int64_t g = (t / n_chunks) % pl.groups;
        const int64_t p0 = (t % n_chunks) * chunk;
        const int64_t len = std::min(chunk, pl.in_hw - p0);
        im2col(pl, dy + (n * pl.out_channels + g * pl.cog) * pl.out_hw, p0, len, cols.data());
        const ConstMap<T> w_g(w + g * pl.cig * pl.rows, pl.cig, pl.rows);
        const ConstMap<T> c(cols.data(), pl.rows, len);
        StridedMap<T> dx_chunk(dx + (n * pl.in_channels + g * pl.cig) * pl.in_hw + p0, pl.cig, len,
                               Eigen::OuterStride<>(pl.in_hw));
        dx_chunk.noalias() = w_g * c;
      });
}

// The reduction over (n, chunk) pairs r = n*n_chunks + c is cut into `slices` contiguous ranges
// fixed by the shape; tasks (slice, g) sum their range in order into their own partial dw, and
// the partials are added in slice order. With one slice the task writes dw directly.
template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int64_t w_numel, int threads) {
  const int64_t chunk = pl.chunk(pl.rows, sizeof(T));
  const int64_t n_chunks = ceil_div(pl.in_hw, chunk);
  const int64_t reduce = pl.batch * n_chunks;
  const int64_t max_slices_by_memory =
      kMaxWgradPartialBytes / std::max<int64_t>(1, w_numel * static_cast<int64_t>(sizeof(T)));
  const int64_t slices =
      std::max<int64_t>(1, std::min({reduce, kMaxWgradSlices, max_slices_by_memory}));
  const Workspace<T> partial(slices > 1 ? slices * w_numel : 0);
  parallel_for(
      threads, slices * pl.groups, [&] { return Workspace<T>(pl.rows * chunk); },
      [&](Workspace<T>& cols, int64_t t) {
        const int64_t s = t / pl.groups, g = t % pl.groups;
        T* acc_base = slices > 1 ? partial.data() + s * w_numel : dw;
        MutMap<T> acc(acc_base + g * pl.cig * pl.rows, pl.cig, pl.rows);
        acc.setZero();
        const int64_t r_begin = reduce * s / slices, r_end = reduce * (s + 1) / slices;
        for (int64_t r = r_begin; r < r_end; ++r) {
          const int64_t n = r / n_chunks;
          const int64_t p0 = (r % n_chunks) * chunk;
          const int64_t len = std::min(chunk, pl.in_hw - p0);
          im2col(pl, dy + (n * pl.out_channels + g * pl.cog) * pl.out_hw, p0, len, cols.data());
          const ConstStridedMap<T> x_chunk(x + (n * pl.in_channels + g * pl.cig) * pl.in_hw + p0,
                                           pl.cig, len, Eigen::OuterStride<>(pl.in_hw));
          const ConstMap<T> c(cols.data(), pl.rows, len);
          acc.noalias() += x_chunk * c.transpose();
        }
      });
  if (slices == 1) return;
  constexpr int64_t kSumBlock = 1 << 14;
  parallel_for(threads_for(static_cast<double>(slices * w_numel), threads),
               ceil_div(w_numel, kSumBlock), [&](int64_t t) {
                 const int64_t i0 = t * kSumBlock, i1 = std::min(w_numel, i0 + kSumBlock);
                 std::copy(partial.data() + i0, partial.data() + i1, dw + i0);
                 for (int64_t s = 1; s < slices; ++s) {
                   const T* part = partial.data() + s * w_numel;
                   for (int64_t i = i0; i < i1; ++i)
                     dw[i] += part[i];
                 }
               });
}

}  // namespace

void conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                            const Tensor* b, Tensor& y, int threads) {
  const char* fn = "conv_transpose_forward";
  const Plan pl = make_plan(g, fn);
  check_numel(x, g.x_numel(), fn, "x", g);
  check_numel(w, g.w_numel(), fn, "w", g);
  check_numel(y, g.y_numel(), fn, "y", g);
  if (b != nullptr) check_numel(*b, g.out_channels, fn, "b", g);
  dispatch_floating(y.dtype(), [&]<class T>() {
    forward_typed<T>(pl, data<T>(x), data<T>(w), b != nullptr ? data<T>(*b) : nullptr, data<T>(y),
                     threads_for(g.flops(), threads));
  });
}

void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w, Tensor& dx,
                          int threads) {
  const char* fn = "conv_transpose_dgrad";
  const Plan pl = make_plan(g, fn);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(w, g.w_numel(), fn, "w", g);
  check_numel(dx, g.x_numel(), fn, "dx", g);
  dispatch_floating(dx.dtype(), [&]<class T>() {
    dgrad_typed<T>(pl, data<T>(dy), data<T>(w), data<T>(dx), threads_for(g.flops(), threads));
  });
}

void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                          int threads) {
  const char* fn = "conv_transpose_wgrad";
  const Plan pl = make_plan(g, fn);
  check_numel(x, g.x_numel(), fn, "x", g);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(dw, g.w_numel(), fn, "dw", g);
  dispatch_floating(dw.dtype(), [&]<class T>() {
    wgrad_typed<T>(pl, data<T>(x), data<T>(dy), data<T>(dw), g.w_numel(),
                   threads_for(g.flops(), threads));
  });
}

// db[co] = sum over n, then oh and ow, of dy[n, co, oh, ow], accumulated in double.
void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db, int threads) {
  const char* fn = "conv_transpose_bias_grad";
  const Plan pl = make_plan(g, fn);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(db, g.out_channels, fn, "db", g);
  dispatch_floating(db.dtype(), [&]<class T>() {
    const T* dyp = data<T>(dy);
    T* dbp = data<T>(db);
    parallel_for(threads_for(static_cast<double>(g.y_numel()), threads), pl.out_channels,
                 [&](int64_t co) {
                   double sum = 0.0;
                   for (int64_t n = 0; n < pl.batch; ++n) {
                     const T* dy_c = dyp + (n * pl.out_channels + co) * pl.out_hw;
                     for (int64_t i = 0; i < pl.out_hw; ++i)
                       sum += static_cast<double>(dy_c[i]);
                   }
                   dbp[co] = static_cast<T>(sum);
                 });
  });
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS
