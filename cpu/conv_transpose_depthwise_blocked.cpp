// Depthwise ConvTranspose on the CPU (one input and one output channel per group) on blocks of
// channels laid channels-last: a vector holds one position of L channels (L = the level's lanes),
// so every lane does useful work whatever the planes' width. conv_transpose_depthwise.cpp runs
// along a plane's rows instead, a vector of L columns; on small planes (14 x 14, 8 x 8) most of
// its lanes are past the row's end and its loops over tap rows cost more than the arithmetic
// (a 512-channel 3 x 3 wgrad on 14 x 14 took 13x PyTorch's time, the dgrad of 128 channels at
// 8 x 8 3.7x). Here each task copies its block's planes into channels-last buffers (L x L
// register transposes), zero-padded so that every tap reads inside them, works there, and copies
// the result back:
//   forward: y[oh, ow] = b + sum over the taps that reach (oh, ow) of w[kh, kw] x[ih, iw]
//   dgrad:   dx[ih, iw] = sum over (kh, kw) of w[kh, kw] dy[ih*sh - ph + kh*dh, iw*sw - pw + kw*dw]
//   wgrad:   dw[kh, kw] = sum over n, ih, iw of x[ih, iw] dy[oh, ow]
// Each output element is one chain in a fixed order: the forward's bias, then its taps in (kh, kw)
// order; dgrad's taps in (kh, kw) order; wgrad's positions in (n, ih, iw) order within a slice of
// x's rows over the batch, the slices (cut by the shape only) then added in order. Tasks are
// (item, block, band of rows) or (block, slice): the results do not depend on the thread count
// (docs/design.md, "Determinism").
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/conv_transpose_cols.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

template <class T>
constexpr int kL = gemm::kLanes<T>;

// Positions a register tile of the forward and dgrad holds: P accumulators, the tap's weight
// vector and the loads beside them within the level's registers.
constexpr int kTilePositions = gemm::kVecRegisters >= 32 ? 12 : 6;
// wgrad's taps a sweep over the positions holds, one accumulator each.
constexpr int kWgradTaps = gemm::kVecRegisters >= 32 ? 24 : 12;
// A task's channels-last buffers (an item's block of planes, flat and padded) at most this large,
// each thread holding one set: larger planes keep the row kernels, whose vectors are full there.
constexpr int64_t kMaxBufferBytes = int64_t{4} << 20;

// cl[p * L + c] = src[c * plane + p] for p < hw and the block's nc channels; lanes past nc zero.
template <class T>
void planes_to_cl(const T* src, int64_t plane, int nc, int64_t hw, T* cl) {
  constexpr int L = kL<T>;
  int64_t p0 = 0;
  for (; p0 + L <= hw; p0 += L)
    gemm::transpose_tile<T, L>(src + p0, plane, nc, cl + p0 * L, L, L);
  for (; p0 < hw; ++p0)
    for (int c = 0; c < L; ++c)
      cl[p0 * L + c] = c < nc ? src[c * plane + p0] : T(0);
}

// dst[c * plane + p] = cl[p * L + c] for p < hw and c < nc: planes_to_cl's inverse.
template <class T>
void cl_to_planes(const T* cl, int64_t hw, int nc, T* dst, int64_t plane) {
  constexpr int L = kL<T>;
  int64_t p0 = 0;
  if (nc == L)
    for (; p0 + L <= hw; p0 += L)
      gemm::transpose_tile<T, L>(cl + p0 * L, L, L, dst + p0, plane, L);
  for (; p0 < hw; ++p0)
    for (int c = 0; c < nc; ++c)
      dst[c * plane + p0] = cl[p0 * L + c];
}

// The flat channels-last rows of `flat` (h rows of w positions) into a padded buffer whose row r
// starts at (r + top) * row_len + left positions; the padding is left as it is (zero).
template <class T>
void pad_rows(const T* flat, int64_t h, int64_t w, T* padded, int64_t row_len, int64_t top,
              int64_t left) {
  constexpr int L = kL<T>;
  for (int64_t r = 0; r < h; ++r)
    std::memcpy(padded + ((r + top) * row_len + left) * L, flat + r * w * L, sizeof(T) * w * L);
}

// Rows [r0, r1) of a block's planes (rows of w positions; channel 0's plane at src, `plane`
// elements apart) into a padded buffer as pad_rows lays them out, row r at (r + top) * row_len +
// left positions, through the flat buffer cl.
template <class T>
void rows_to_padded(const T* src, int64_t plane, int nc, int64_t r0, int64_t r1, int64_t w, T* cl,
                    T* padded, int64_t row_len, int64_t top, int64_t left) {
  if (r0 >= r1) return;
  planes_to_cl(src + r0 * w, plane, nc, (r1 - r0) * w, cl);
  pad_rows(cl, r1 - r0, w, padded, row_len, top + r0, left);
}

// The taps' weights of a block of channels, wl[t * L + c] = w[(c0 + c) * taps + t], lanes past
// nc zero.
template <class T>
void block_weights(const T* w, int64_t taps, int64_t c0, int nc, T* wl) {
  constexpr int L = kL<T>;
  for (int64_t t = 0; t < taps; ++t)
    for (int c = 0; c < L; ++c)
      wl[t * L + c] = c < nc ? w[(c0 + c) * taps + t] : T(0);
}

// out[p] (P positions, `out_step` elements apart) = init + sum over the steps s of wl_s * src_s[p *
// src_step], one chain per position, steps in order: a step is a weight vector and where its
// positions' inputs start.
template <class T>
struct Step {
  const T* w;
  const T* src;
};
template <class T, int P>
void tile(const Step<T>* steps, int64_t count, int64_t src_step, const T* init, T* out,
          int64_t out_step) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  Vec acc[P];
  for (int p = 0; p < P; ++p) {
    if (init != nullptr) {
      std::memcpy(&acc[p], init, sizeof(Vec));
    } else {
      acc[p] = Vec{};
    }
  }
  for (int64_t s = 0; s < count; ++s) {
    Vec wv;
    std::memcpy(&wv, steps[s].w, sizeof(Vec));
    const T* src = steps[s].src;
    for (int p = 0; p < P; ++p) {
      Vec v;
      std::memcpy(&v, src + p * src_step, sizeof(Vec));
      acc[p] += wv * v;
    }
  }
  for (int p = 0; p < P; ++p)
    std::memcpy(out + p * out_step, &acc[p], sizeof(Vec));
}

// tile over n positions, kTilePositions at a time, the steps' sources advanced by `src_step`
// elements a position.
template <class T>
void run_tiles(std::vector<Step<T>>& steps, int64_t count, int64_t n, int64_t src_step,
               const T* init, T* out, int64_t out_step) {
  for (int64_t p0 = 0; p0 < n; p0 += kTilePositions) {
    const int np = static_cast<int>(std::min<int64_t>(kTilePositions, n - p0));
    gemm::with_count<kTilePositions>(np, [&]<int P>() {
      tile<T, P>(steps.data(), count, src_step, init, out + p0 * out_step, out_step);
    });
    if (p0 + kTilePositions >= n) break;  // no pointer past the buffers is formed
    for (int64_t s = 0; s < count; ++s)
      steps[static_cast<size_t>(s)].src += kTilePositions * src_step;
  }
}

// A padded axis of a buffer: `before` positions of padding, then the rest to `len` in all.
// Computed in I: int128 where the rules bound the buffers (the geometry accepts paddings and
// dilations near 2^62 that cancel in the output's size), int64 in the kernels the rules admit.
template <class I>
struct PaddedAxis {
  I before, len;
};

// floor(a / b) for b > 0, in I.
template <class I>
I floor_div_in(I a, I b) {
  const I q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// Forward. Along W, output ow = j*sw + r (phase r) gets tap kw from input iw = j - q, where
// kw*dw - pw = q*sw + r; x's channels-last rows are padded before by the largest q (at least 0)
// and after so that every j of every phase reads inside them (zeros past the row): j - q ranges
// over [-q_hi, ceil(out_w / sw) - 1 - q_lo], q ascending with kw.
template <class I>
PaddedAxis<I> forward_row(const Plan& pl) {
  const I q_lo = std::min<I>(0, floor_div_in<I>(-I{pl.pad_w}, pl.stride_w));
  const I q_hi =
      std::max<I>(0, floor_div_in<I>(I{pl.kernel_w - 1} * pl.dil_w - pl.pad_w, pl.stride_w));
  return {q_hi, q_hi + std::max<I>(pl.in_w, ceil_div(pl.out_w, pl.stride_w) - q_lo)};
}

struct ForwardLayout {
  int64_t left, row_len;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> phase_taps;  // per r: (kw, q)
};

ForwardLayout forward_layout(const Plan& pl) {
  const PaddedAxis<int64_t> row = forward_row<int64_t>(pl);
  ForwardLayout f{row.before, row.len, {}};
  f.phase_taps.resize(static_cast<size_t>(pl.stride_w));
  for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
    const int64_t off = kw * pl.dil_w - pl.pad_w, q = floor_div(off, pl.stride_w);
    f.phase_taps[static_cast<size_t>(off - q * pl.stride_w)].push_back({kw, q});
  }
  return f;
}

// dgrad and wgrad read dy along an axis at i*s - p + k*d for input i and tap k, in [-p, (in -
// 1)*s - p + (kernel - 1)*d]: padded by p before and to cover that reach and dy after.
template <class I>
PaddedAxis<I> backward_axis(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
                            int64_t dil) {
  const I hi = I{in - 1} * stride - pad + I{kernel - 1} * dil;
  return {I{pad}, I{pad} + std::max<I>(out, hi + 1)};
}

// dgrad pads dy along W only (it visits only the rows some tap reaches); wgrad along H too, its
// sweep reading every tap's row for every row of x.
struct DgradLayout {
  int64_t left, row_len;
};

DgradLayout dgrad_layout(const Plan& pl) {
  const PaddedAxis<int64_t> w =
      backward_axis<int64_t>(pl.in_w, pl.out_w, pl.kernel_w, pl.stride_w, pl.pad_w, pl.dil_w);
  return {w.before, w.len};
}

struct WgradLayout {
  int64_t top, rows, left, row_len;
};

WgradLayout wgrad_layout(const Plan& pl) {
  const DgradLayout d = dgrad_layout(pl);
  const PaddedAxis<int64_t> h =
      backward_axis<int64_t>(pl.in_h, pl.out_h, pl.kernel_h, pl.stride_h, pl.pad_h, pl.dil_h);
  return {h.before, h.len, d.left, d.row_len};
}

// Bands of rows a pass's (item, block) tasks are cut into: enough for kMinTasks tasks where the
// rows allow (one item of 64 channels is 4 blocks), and on planes of kBandedMinPositions
// positions or more up to kBandedTasks, in bands of kMinBandRows rows or more. There, with about
// one task a thread, the 16-core host waited on the slowest, and smaller bands kept the buffers
// in cache on one thread too (docs/performance.md, thirty-seventh session: 1.2x-2.2x at 16 threads
// on 64 x 64 planes, 1.4x at 1 thread on one item of 256 channels); on 12 x 12 planes the extra
// tasks cost more than they gave (0.72x-0.86x at 4 and 16 threads). A band copies only the rows its
// taps read and computes whole output elements, so the cut changes no bit.
constexpr int64_t kBandedTasks = 4 * kMinTasks;
constexpr int64_t kBandedMinPositions = 1024;
constexpr int64_t kMinBandRows = 8;
int64_t bands_for(int64_t tasks, int64_t rows, int64_t plane_positions) {
  tasks = std::max<int64_t>(1, tasks);
  rows = std::max<int64_t>(1, rows);
  int64_t bands = ceil_div(kMinTasks, tasks);
  if (plane_positions >= kBandedMinPositions)
    bands = std::max(bands, std::min(ceil_div(kBandedTasks, tasks), rows / kMinBandRows));
  return std::clamp<int64_t>(bands, 1, rows);
}

// Runs fn(cl, padded, extra, n, c0, nc, r0, r1) for every task (item n, block of channels from c0,
// nc of them, band [r0, r1) of `rows` rows), each thread holding scratch of a flat channels-last
// buffer, `padded` elements of padded buffer (zero at first: every task writes the same columns
// of its rows, so the padding stays zero) and `extra` elements.
template <class T, class Fn>
void for_each_band(const Plan& pl, int64_t rows, int64_t plane_positions, int64_t padded,
                   int64_t extra, int threads, Fn&& fn) {
  constexpr int L = kL<T>;
  const int64_t blocks = ceil_div(pl.groups, int64_t{L});
  const int64_t bands = bands_for(pl.batch * blocks, rows, plane_positions);
  const int64_t flat = std::max(pl.in_hw, pl.out_hw) * L;
  parallel_for(
      threads, pl.batch * blocks * bands,
      [&] {
        Workspace<T> ws(flat + padded + extra);
        std::fill_n(ws.data() + flat, padded, T(0));
        return ws;
      },
      [&](Workspace<T>& ws, int64_t task) {
        const int64_t n = task / (blocks * bands), c0 = task / bands % blocks * L;
        const int64_t band = task % bands;
        const int64_t r0 = rows * band / bands, r1 = rows * (band + 1) / bands;
        if (r0 == r1) return;
        const int nc = static_cast<int>(std::min<int64_t>(L, pl.groups - c0));
        fn(ws.data(), ws.data() + flat, ws.data() + flat + padded, n, c0, nc, r0, r1);
      });
}

template <class T>
void forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  constexpr int L = kL<T>;
  const ForwardLayout f = forward_layout(pl);
  for_each_band<T>(
      pl, pl.out_h, pl.out_hw, pl.in_h * f.row_len * L, (pl.taps + 1) * L, threads,
      [&](T* cl, T* xp, T* wl, int64_t n, int64_t c0, int nc, int64_t oh0, int64_t oh1) {
        T* bias = wl + pl.taps * L;
        block_weights(w, pl.taps, c0, nc, wl);
        for (int c = 0; c < L; ++c)
          bias[c] = b != nullptr && c < nc ? b[c0 + c] : T(0);
        // The input rows the band's outputs read: ih = (oh + ph - kh*dh) / sh.
        const int64_t ih0 = std::max<int64_t>(
            0, ceil_div(oh0 + pl.pad_h - (pl.kernel_h - 1) * pl.dil_h, pl.stride_h));
        const int64_t ih1 = std::min(pl.in_h, floor_div(oh1 - 1 + pl.pad_h, pl.stride_h) + 1);
        rows_to_padded(x + (n * pl.groups + c0) * pl.in_hw, pl.in_hw, nc, ih0, ih1, pl.in_w, cl, xp,
                       f.row_len, 0, f.left);
        std::vector<Step<T>> steps(static_cast<size_t>(pl.taps));
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          for (int64_t r = 0; r < std::min(pl.stride_w, pl.out_w); ++r) {
            int64_t count = 0;
            for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
              const int64_t num = oh + pl.pad_h - kh * pl.dil_h;
              if (num < 0 || num % pl.stride_h != 0 || num / pl.stride_h >= pl.in_h) continue;
              const int64_t ih = num / pl.stride_h;
              for (const auto& [kw, q] : f.phase_taps[static_cast<size_t>(r)])
                steps[static_cast<size_t>(count++)] = {wl + (kh * pl.kernel_w + kw) * L,
                                                       xp + (ih * f.row_len + f.left - q) * L};
            }
            const int64_t outputs = ceil_div(pl.out_w - r, pl.stride_w);
            run_tiles(steps, count, outputs, int64_t{L}, bias, cl + ((oh - oh0) * pl.out_w + r) * L,
                      pl.stride_w * L);
          }
        }
        cl_to_planes(cl, (oh1 - oh0) * pl.out_w, nc,
                     y + (n * pl.groups + c0) * pl.out_hw + oh0 * pl.out_w, pl.out_hw);
      });
}

template <class T>
void dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int L = kL<T>;
  const DgradLayout d = dgrad_layout(pl);
  for_each_band<T>(
      pl, pl.in_h, pl.in_hw, pl.out_h * d.row_len * L, pl.taps * L, threads,
      [&](T* cl, T* dyp, T* wl, int64_t n, int64_t c0, int nc, int64_t ih0, int64_t ih1) {
        block_weights(w, pl.taps, c0, nc, wl);
        // The rows of dy the band's taps read.
        const int64_t oh0 = std::max<int64_t>(0, ih0 * pl.stride_h - pl.pad_h);
        const int64_t oh1 = std::min(
            pl.out_h, (ih1 - 1) * pl.stride_h - pl.pad_h + (pl.kernel_h - 1) * pl.dil_h + 1);
        rows_to_padded(dy + (n * pl.groups + c0) * pl.out_hw, pl.out_hw, nc, oh0, oh1, pl.out_w, cl,
                       dyp, d.row_len, 0, d.left);
        std::vector<Step<T>> steps(static_cast<size_t>(pl.taps));
        for (int64_t ih = ih0; ih < ih1; ++ih) {
          int64_t count = 0;
          for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
            if (ih < pl.h.lo[kh] || ih >= pl.h.hi[kh]) continue;
            const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
            for (int64_t kw = 0; kw < pl.kernel_w; ++kw)
              steps[static_cast<size_t>(count++)] = {
                  wl + (kh * pl.kernel_w + kw) * L,
                  dyp + (oh * d.row_len + d.left - pl.pad_w + kw * pl.dil_w) * L};
          }
          // Rows no tap reaches are zero (the chain of no steps).
          run_tiles(steps, count, pl.in_w, pl.stride_w * L, static_cast<const T*>(nullptr),
                    cl + (ih - ih0) * pl.in_w * L, int64_t{L});
        }
        cl_to_planes(cl, (ih1 - ih0) * pl.in_w, nc,
                     dx + (n * pl.groups + c0) * pl.in_hw + ih0 * pl.in_w, pl.in_hw);
      });
}

// acc[t] += x * src[offsets[t]] for the TB taps of a sweep, over the positions (ih, iw) of x's
// rows in order.
template <class T, int TB>
void wgrad_sweep(const T* xcl, const T* dyp, const int64_t* offsets, int64_t in_h, int64_t in_w,
                 int64_t row_step, int64_t col_step, T* acc_mem) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = kL<T>;
  Vec acc[TB];
  for (int t = 0; t < TB; ++t)
    std::memcpy(&acc[t], acc_mem + t * L, sizeof(Vec));
  for (int64_t ih = 0; ih < in_h; ++ih) {
    const T* row = dyp + ih * row_step;
    for (int64_t iw = 0; iw < in_w; ++iw) {
      Vec xv;
      std::memcpy(&xv, xcl + (ih * in_w + iw) * L, sizeof(Vec));
      const T* at = row + iw * col_step;
      for (int t = 0; t < TB; ++t) {
        Vec v;
        std::memcpy(&v, at + offsets[t], sizeof(Vec));
        acc[t] += xv * v;
      }
    }
  }
  for (int t = 0; t < TB; ++t)
    std::memcpy(acc_mem + t * L, &acc[t], sizeof(Vec));
}

// wgrad: tasks (block, slice), a slice a run of the rows of x over the batch, (n, ih) in order,
// cut by the shape only; each sums its rows' products in order into its partial sums, and the
// slices' partials are added in slice order.
template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int L = kL<T>;
  const WgradLayout d = wgrad_layout(pl);
  const int64_t blocks = ceil_div(pl.groups, int64_t{L});
  const int64_t units = pl.batch * pl.in_h;
  const int64_t slices = bands_for(blocks, units, pl.in_hw);
  const int64_t flat = std::max(pl.in_hw, pl.out_hw) * L;
  const int64_t padded = d.rows * d.row_len * L;
  // Tap t = (kh, kw) reads dy's padded buffer at (ih*sh + kh*dh - ph + top, iw*sw + kw*dw - pw +
  // left): offsets from (ih*sh, iw*sw).
  std::vector<int64_t> offsets(static_cast<size_t>(pl.taps));
  for (int64_t kh = 0; kh < pl.kernel_h; ++kh)
    for (int64_t kw = 0; kw < pl.kernel_w; ++kw)
      offsets[static_cast<size_t>(kh * pl.kernel_w + kw)] =
          ((kh * pl.dil_h - pl.pad_h + d.top) * d.row_len + kw * pl.dil_w - pl.pad_w + d.left) * L;
  // Partial sums per slice, [slice][block][tap][lane].
  std::vector<T> partial(static_cast<size_t>(slices * blocks * pl.taps * L), T(0));
  parallel_for(
      threads, blocks * slices,
      [&] {
        Workspace<T> ws(2 * flat + padded);
        std::fill_n(ws.data() + 2 * flat, padded, T(0));
        return ws;
      },
      [&](Workspace<T>& ws, int64_t task) {
        const int64_t blk = task / slices, s = task % slices, c0 = blk * L;
        const int nc = static_cast<int>(std::min<int64_t>(L, pl.groups - c0));
        const int64_t u0 = units * s / slices, u1 = units * (s + 1) / slices;
        T* xcl = ws.data();
        T* cl = xcl + flat;
        T* dyp = cl + flat;
        T* acc = partial.data() + (s * blocks + blk) * pl.taps * L;
        for (int64_t u = u0; u < u1;) {
          // The slice's rows [r0, r1) of item n.
          const int64_t n = u / pl.in_h, r0 = u % pl.in_h;
          const int64_t r1 = std::min(pl.in_h, r0 + (u1 - u));
          u += r1 - r0;
          const int64_t oh0 = std::max<int64_t>(0, r0 * pl.stride_h - pl.pad_h);
          const int64_t oh1 = std::min(
              pl.out_h, (r1 - 1) * pl.stride_h - pl.pad_h + (pl.kernel_h - 1) * pl.dil_h + 1);
          if (oh0 >= oh1) continue;  // no tap of these rows lands inside y
          planes_to_cl(x + (n * pl.groups + c0) * pl.in_hw + r0 * pl.in_w, pl.in_hw, nc,
                       (r1 - r0) * pl.in_w, xcl);
          rows_to_padded(dy + (n * pl.groups + c0) * pl.out_hw, pl.out_hw, nc, oh0, oh1, pl.out_w,
                         cl, dyp, d.row_len, d.top, d.left);
          for (int64_t t0 = 0; t0 < pl.taps; t0 += kWgradTaps) {
            const int tb = static_cast<int>(std::min<int64_t>(kWgradTaps, pl.taps - t0));
            gemm::with_count<kWgradTaps>(tb, [&]<int TB>() {
              wgrad_sweep<T, TB>(xcl, dyp + r0 * pl.stride_h * d.row_len * L, offsets.data() + t0,
                                 r1 - r0, pl.in_w, pl.stride_h * d.row_len * L, pl.stride_w * L,
                                 acc + t0 * L);
            });
          }
        }
      });
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * L, nc = std::min<int64_t>(L, pl.groups - c0);
    for (int64_t t = 0; t < pl.taps; ++t) {
      for (int64_t c = 0; c < nc; ++c) {
        T sum = T(0);
        for (int64_t s = 0; s < slices; ++s)
          sum += partial[static_cast<size_t>(((s * blocks + blk) * pl.taps + t) * L + c)];
        dw[(c0 + c) * pl.taps + t] = sum;
      }
    }
  }
}

// The shape's buffers fit, and its channels fill at least fill_num / fill_den of the blocks'
// lanes.
bool blocked_common(const Plan& pl, int64_t lanes, int64_t fill_num, int64_t fill_den) {
  if (pl.cig != 1 || pl.cog != 1 || pl.batch < 1 || pl.in_hw < 1 || pl.out_hw < 1) return false;
  if (pl.groups * fill_den < ceil_div(pl.groups, lanes) * lanes * fill_num) return false;
  // Each pass's buffers for one item's block, the padded ones as the layouts above lay them out
  // (in 128 bits), within kMaxBufferBytes.
  const int128 vec = gemm::kVecBytes;
  const int128 flat = int128{std::max(pl.in_hw, pl.out_hw)} * vec;
  const int128 fwd_row = forward_row<int128>(pl).len;
  const int128 bwd_row =
      backward_axis<int128>(pl.in_w, pl.out_w, pl.kernel_w, pl.stride_w, pl.pad_w, pl.dil_w).len;
  const int128 bwd_rows =
      backward_axis<int128>(pl.in_h, pl.out_h, pl.kernel_h, pl.stride_h, pl.pad_h, pl.dil_h).len;
  const int128 most =
      std::max(flat + int128{pl.in_h} * fwd_row * vec, 2 * flat + bwd_rows * bwd_row * vec);
  // wgrad steps down dy's padded rows stride_h rows at a time. Past one row of x the buffer
  // holds the steps; on one row a stride near 2^63 (a valid geometry: it moves no output) would
  // overflow the step it never takes.
  const int128 row_step = int128{pl.stride_h} * bwd_row * vec;
  return most <= kMaxBufferBytes && row_step <= kMaxBufferBytes;
}

}  // namespace

// The row kernels' vectors run along W (y's rows in the forward, x's in dgrad and wgrad), the
// blocks' along the channels. Measured at 1 thread against the row kernels (docs/performance.md,
// thirty-seventh session), the blocks won the forward and wgrad on every 2-D plane from 7 x 7 to
// 112 x 112 (1.2x-26x) and on 1-D rows with 4 taps or more; they lost on long 1-D rows of 3 taps
// (1000 positions: 0.63x forward, 0.77x wgrad), where the transposes cost more than the taps, and
// the forward with half the lanes empty (8 channels in blocks of 16: 0.93x; wgrad won 4.2x
// there). dgrad's rows are the row kernels' best case: the blocks won on rows under 2 vectors
// (1.3x-6x) and lost or tied from 2 vectors on (32 x 32 at stride 2: 0.87x-1.1x, 112 x 112:
// 0.79x), and with a quarter of the lanes or more empty (8, 21 and 24 channels: 0.70x-0.96x).
bool depthwise_blocked_forward_suits(const Plan& pl, int64_t elem_bytes) {
  const int64_t lanes = gemm::kVecBytes / elem_bytes;
  return (pl.out_w <= 3 * lanes || pl.taps >= 4) && blocked_common(pl, lanes, 9, 16);
}
bool depthwise_blocked_dgrad_suits(const Plan& pl, int64_t elem_bytes) {
  const int64_t lanes = gemm::kVecBytes / elem_bytes;
  return pl.in_w < 2 * lanes && blocked_common(pl, lanes, 13, 16);
}
bool depthwise_blocked_wgrad_suits(const Plan& pl, int64_t elem_bytes) {
  const int64_t lanes = gemm::kVecBytes / elem_bytes;
  return (pl.in_w <= 3 * lanes || pl.taps >= 4) && blocked_common(pl, lanes, 8, 16);
}

void depthwise_blocked_forward(const Plan& pl, const float* x, const float* w, const float* b,
                               float* y, int threads) {
  forward_typed(pl, x, w, b, y, threads);
}
void depthwise_blocked_forward(const Plan& pl, const double* x, const double* w, const double* b,
                               double* y, int threads) {
  forward_typed(pl, x, w, b, y, threads);
}
void depthwise_blocked_dgrad(const Plan& pl, const float* dy, const float* w, float* dx,
                             int threads) {
  dgrad_typed(pl, dy, w, dx, threads);
}
void depthwise_blocked_dgrad(const Plan& pl, const double* dy, const double* w, double* dx,
                             int threads) {
  dgrad_typed(pl, dy, w, dx, threads);
}
void depthwise_blocked_wgrad(const Plan& pl, const float* x, const float* dy, float* dw,
                             int threads) {
  wgrad_typed(pl, x, dy, dw, threads);
}
void depthwise_blocked_wgrad(const Plan& pl, const double* x, const double* dy, double* dw,
                             int threads) {
  wgrad_typed(pl, x, dy, dw, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
