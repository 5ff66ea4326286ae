// The three conv passes by output stride phases with the products on the input channels' side,
// for layers with few input channels per group against many output channels x taps (the shapes
// phase_gemm_forward_suits, phase_gemm_dgrad_suits and phase_gemm_wgrad_suits take). The GEMM
// paths of conv_transpose.cpp and conv_transpose_wgrad.cpp move a column buffer of (co, kh, kw)
// rows, rows = cog x taps, per input position: forward's product writes it (a reduction over cig
// only) and col2im reads it; dgrad's and wgrad's im2col copies dy taps times into it and a product
// cig rows thin reads it. With 8 input channels against 64 output channels x 64 taps that buffer
// is 16 products deep per element, and moving it bound the passes. Here the buffer holds (ci,
// tap) rows instead, cig x taps, cog / cig times fewer.
//
// Along one axis, output o = i*s + k*d - p. Writing k*d - p = q*s + r (0 <= r < s), o = (i + q)*s
// + r: tap k adds input i into phase r of the output (o = r, r + s, ...) at plane position m = i +
// q. Each phase pair (rh, rw) is a stride-1 problem between x and the phase's plane of y (or dy),
// over the taps of that phase T_r, with one shift per tap:
//   forward: Y_r[co, (n, m)] = sum over (ci, j in T_r) of w[ci, co, j] X_r[(ci, j), (n, m)],
//            X_r[(ci, j), (n, m)] = x[n, ci, m - q_j] (0 outside x), then y = bias + Y_r there;
//   dgrad:   Z_r[(ci, j), (n, m)] = sum over co of w[ci, co, j] dy_r[co, (n, m)], then
//            dx[n, ci, i] = sum over r, then j in T_r, of Z_r[(ci, j), (n, i + q_j)];
//   wgrad:   dw[ci, co, j] = sum over (n, m) of X_r[(ci, j), (n, m)] dy_r[co, (n, m)].
// X_r and Z_r have cig x |T_r| rows; the products (cpu/gemm.h) are cog, cig x |T_r| and the
// columns of a piece of planes: shapes its register tile fills, where the GEMM paths' were cig
// rows thin or cig deep. A plane position past every tap's reach costs a few columns (the planes'
// edges); phases no tap reaches hold the bias.
//
// Determinism (docs/design.md): each element of Y_r, Z_r sums its reduction in the GEMM's order,
// which depends on the sizes only, so the cut of the columns into tasks changes no bit; dx adds
// the phases and taps in a fixed order; wgrad's reduction over the columns is cut by the shape
// only, into slices added in order.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "cpu/conv_transpose_cols.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

// Strides up to this (one list of taps per phase); the layers past it keep the other paths.
constexpr int64_t kMaxPhaseStride = 16;
// A task's operands (the phase piece of X or dy, and the product's output) stay within about this
// many bytes: in L2 between the copy and the product.
constexpr int64_t kPieceBytes = int64_t{1} << 20;
// Pieces of a plane row: at least this many columns (the products' N, the copies' runs).
constexpr int64_t kMinPieceColumns = 64;
constexpr int64_t kMinPositions = 64;                  // batch x input positions
constexpr int64_t kForwardPartRows = 4 * gemm::kRows;  // forward's parts of the output channels
// wgrad's reduction is cut into at most this many slices, of at least kMinSliceColumns columns.
// With 2048, 12 -> 64 channels over 3480 columns made one slice, 2 tasks for 16 threads (0.42x
// PyTorch on the 16-core host); from 512 the thread model (cpu_conv_bench --model-threads 16)
// gave it and a 5400-column layer 4.3x-5.3x, the one-thread times unchanged (docs/performance.md,
// thirty-seventh session).
constexpr int64_t kMaxSlices = 16;
constexpr int64_t kMinSliceColumns = 512;
constexpr int64_t kMaxPartialBytes = int64_t{64} << 20;
// For the threads, dgrad's parts of the input channels hold at least 2 x kMinPartRows rows of
// Z_r, and wgrad's parts of its products at least kMinWgradPart rows or columns.
constexpr int64_t kMinPartRows = 16;
constexpr int64_t kMinWgradPart = 48;

// A flat task index as coordinates over `extents`, the last varying fastest (the tasks' order
// in every parallel loop here).
template <std::size_t N>
std::array<int64_t, N> grid_index(int64_t t, const std::array<int64_t, N>& extents) {
  std::array<int64_t, N> at{};
  for (std::size_t i = N; i-- > 0;) {
    at[i] = t % extents[i];
    t /= extents[i];
  }
  return at;
}

// A tap of one axis: its index and its plane shift q.
struct AxisTap {
  int64_t k, q;
};

// One axis: per phase r in [0, s), its taps (k ascending) and its plane length (the outputs r, r
// + s, ... below out).
struct Axis {
  std::vector<std::vector<AxisTap>> taps;
  std::vector<int64_t> len;
};

Axis axis_of(int64_t out, int64_t kernel, int64_t stride, int64_t dil, int64_t pad) {
  Axis a;
  a.taps.resize(stride);
  a.len.resize(stride);
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t off = k * dil - pad;
    const int64_t q = floor_div(off, stride);
    a.taps[off - q * stride].push_back({k, q});
  }
  for (int64_t r = 0; r < stride; ++r)
    a.len[r] = r < out ? ceil_div(out - r, stride) : 0;
  return a;
}

// A 2-D tap of a phase pair: its index kh * kernel_w + kw and its shifts.
struct Tap {
  int64_t tap, qh, qw;
};

// The phase pairs (rh, rw), r = rh * sw + rw: their taps in (kh, kw) order and plane sizes, and
// where each one's packed weight starts.
struct Phases {
  int64_t count = 0;
  std::vector<int64_t> rh, rw, mh, mw;  // per phase: residues, plane height and width
  std::vector<std::vector<Tap>> taps;
  std::vector<int64_t> w_at;  // per phase: offset of its (cig x |T_r|) x cog block in a group's
  int64_t max_taps = 0;       // the most taps of one phase
  int64_t rows(int64_t r, int64_t cig) const { return cig * static_cast<int64_t>(taps[r].size()); }
};

Phases phases_of(const Plan& pl) {
  const Axis ah = axis_of(pl.out_h, pl.kernel_h, pl.stride_h, pl.dil_h, pl.pad_h);
  const Axis aw = axis_of(pl.out_w, pl.kernel_w, pl.stride_w, pl.dil_w, pl.pad_w);
  Phases f;
  f.count = pl.stride_h * pl.stride_w;
  int64_t at = 0;
  for (int64_t rh = 0; rh < pl.stride_h; ++rh) {
    for (int64_t rw = 0; rw < pl.stride_w; ++rw) {
      std::vector<Tap> t;
      for (const AxisTap& th : ah.taps[rh])
        for (const AxisTap& tw : aw.taps[rw])
          t.push_back({th.k * pl.kernel_w + tw.k, th.q, tw.q});
      f.rh.push_back(rh);
      f.rw.push_back(rw);
      f.mh.push_back(ah.len[rh]);
      f.mw.push_back(aw.len[rw]);
      f.max_taps = std::max<int64_t>(f.max_taps, static_cast<int64_t>(t.size()));
      f.w_at.push_back(at);
      at += pl.cig * static_cast<int64_t>(t.size()) * pl.cog;
      f.taps.push_back(std::move(t));
    }
  }
  return f;
}

// The weight of group g for phase r, input channel ci's rows (ci, j), j its taps in order, columns
// co: out[(ci * |T_r| + j) * cog + co] = w[g*cig + ci, co, tap_j].
template <class T>
void phase_weight(const Plan& pl, const Phases& f, const T* w, int64_t g, int64_t r, int64_t ci,
                  T* out) {
  const int64_t nt = static_cast<int64_t>(f.taps[r].size());
  const T* w_ci = w + (g * pl.cig + ci) * pl.rows;
  for (int64_t j = 0; j < nt; ++j) {
    T* row = out + (ci * nt + j) * pl.cog;
    const int64_t tap = f.taps[r][j].tap;
    for (int64_t co = 0; co < pl.cog; ++co)
      row[co] = w_ci[co * pl.taps + tap];
  }
}

// A block of the packed weight: A (m x k, as `a` reads the rearranged weight) packed whole
// (gemm::pack_whole_a's layout) at `dst`.
template <class T>
struct PackedBlock {
  gemm::View<T> a;
  int64_t m, k;
  T* dst;
};

// The weight of every group and phase rearranged per phase (phase_weight, into `rearranged`: the
// group's phases one after another at f.w_at) and then packed as `blocks(rearranged)` says, both
// on the threads: by input channels, then by runs of the reduction and kMc rows (a serial copy of
// the weight was a third of a 16-thread forward of 32 -> 384 k8 on 8 x 105).
template <class T, class Blocks>
void pack_phase_weights(const Plan& pl, const Phases& f, const T* w, T* rearranged, Blocks&& blocks,
                        int threads) {
  const int64_t group_elems = pl.cig * pl.taps * pl.cog;
  parallel_for(threads, pl.groups * f.count * pl.cig, [&](int64_t t) {
    const auto [g, r, ci] = grid_index<3>(t, {pl.groups, f.count, pl.cig});
    phase_weight(pl, f, w, g, r, ci, rearranged + g * group_elems + f.w_at[r]);
  });
  const std::vector<PackedBlock<T>> bs = blocks(rearranged);
  struct Step {
    int64_t block, pc, i0;
  };
  std::vector<Step> steps;
  for (int64_t b = 0; b < static_cast<int64_t>(bs.size()); ++b)
    for (int64_t pc = 0; pc < bs[b].k; pc += gemm::kKc)
      for (int64_t i0 = 0; i0 < bs[b].m; i0 += gemm::kMc)
        steps.push_back({b, pc, i0});
  parallel_for(threads, static_cast<int64_t>(steps.size()), [&](int64_t t) {
    const Step& st = steps[t];
    const PackedBlock<T>& b = bs[st.block];
    const int64_t kc = std::min(gemm::kKc, b.k - st.pc), m_pad = gemm::round_up(b.m, gemm::kRows);
    gemm::pack_a_block(b.a, st.i0, std::min(gemm::kMc, b.m - st.i0), st.pc, kc,
                       b.dst + st.pc * m_pad + st.i0 * kc);
  });
}

// X_r's rows [i0, i1) for group g over the plane rows u in [u0, u1) (u = n * mh + m_h) and plane
// columns [c0, c1): out[(i - i0) * cols + (u - u0) * (c1 - c0) + m_w - c0] = x[n, g*cig + ci,
// m_h - qh_j, m_w - qw_j], row i = ci * |T_r| + j.
template <class T>
void phase_x(const Plan& pl, const Phases& f, int64_t r, const T* x, int64_t g, int64_t i0,
             int64_t i1, int64_t u0, int64_t u1, int64_t c0, int64_t c1, T* out) {
  const int64_t mh = f.mh[r], width = c1 - c0, cols = (u1 - u0) * width;
  const int64_t nt = static_cast<int64_t>(f.taps[r].size());
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t ci = i / nt;
    const Tap& t = f.taps[r][i % nt];
    T* row = out + (i - i0) * cols;
    // Columns m_w whose input column m_w - qw is inside x.
    const int64_t v0 = std::clamp<int64_t>(t.qw, c0, c1);
    const int64_t v1 = std::clamp<int64_t>(t.qw + pl.in_w, v0, c1);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t n = u / mh, ih = u % mh - t.qh;
      T* dst = row + (u - u0) * width;  // column m_w at dst[m_w - c0]
      if (ih < 0 || ih >= pl.in_h || v0 == v1) {
        std::fill_n(dst, width, T(0));
        continue;
      }
      const T* src = x + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih) * pl.in_w;
      std::fill_n(dst, v0 - c0, T(0));
      std::memcpy(dst + (v0 - c0), src + (v0 - t.qw), (v1 - v0) * sizeof(T));
      std::fill_n(dst + (v1 - c0), c1 - v1, T(0));
    }
  }
}

// dy's phase r plane of group g for output channels [co0, co1), over the plane rows u in [u0, u1)
// of items and plane columns [c0, c1), as phase_x's columns: out[(co - co0) * cols + (u - u0) *
// (c1 - c0) + m_w - c0] = dy[n, g*cog + co, m_h*sh + rh, m_w*sw + rw], where `item_rows` plane
// rows make an item and u = n * item_rows + (m_h - row0). A plane row of every channel in turn:
// the reads then step by one dy plane, a stride the prefetchers follow, where channel by channel
// they jumped between rows and items every few elements (a 5 x 5 phase plane, k7 s4: the copy
// waited on memory for two thirds of dgrad's and wgrad's time), and the row's item and row are
// worked out once for every channel.
template <class T>
void phase_dy(const Plan& pl, const Phases& f, int64_t r, const T* dy, int64_t g, int64_t co0,
              int64_t co1, int64_t u0, int64_t u1, int64_t item_rows, int64_t row0, int64_t c0,
              int64_t c1, T* out) {
  const int64_t width = c1 - c0, cols = (u1 - u0) * width;
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t n = u / item_rows, oh = (u % item_rows + row0) * pl.stride_h + f.rh[r];
    const T* src = dy + ((n * pl.out_channels + g * pl.cog + co0) * pl.out_h + oh) * pl.out_w +
                   f.rw[r] + c0 * pl.stride_w;
    gather_strided_rows(out + (u - u0) * width, cols, src, pl.out_h * pl.out_w, co1 - co0, width,
                        pl.stride_w);
  }
}

// Plane rows per piece: about kPieceBytes of `per_column` bytes a column, whole rows of mw
// columns, at least one.
int64_t piece_rows(int64_t mw, int64_t per_column) {
  return std::max<int64_t>(1, kPieceBytes / std::max<int64_t>(1, per_column * mw));
}

template <class T>
void forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  const Phases f = phases_of(pl);
  const int64_t elem = sizeof(T);
  // The weight of every group and phase as the products' A (cog x cig|T_r|), packed once.
  std::vector<int64_t> a_at(pl.groups * f.count + 1, 0);
  for (int64_t i = 0; i < pl.groups * f.count; ++i)
    a_at[i + 1] = a_at[i] + gemm::packed_whole_a_elems<T>(pl.cog, f.rows(i % f.count, pl.cig));
  const Workspace<T> packed(a_at.back());
  {
    const Workspace<T> rearranged(pl.groups * pl.cig * pl.taps * pl.cog);
    pack_phase_weights(
        pl, f, w, rearranged.data(),
        [&](T* wr) {
          std::vector<PackedBlock<T>> bs;
          for (int64_t i = 0; i < pl.groups * f.count; ++i) {
            const int64_t g = i / f.count, r = i % f.count;
            const T* a = wr + g * pl.cig * pl.taps * pl.cog + f.w_at[r];
            bs.push_back({{a, 1, pl.cog}, pl.cog, f.rows(r, pl.cig), packed.data() + a_at[i]});
          }
          return bs;
        },
        threads);
  }
  // Tasks: (group, run of items, band of plane rows, part of the output channels, piece of plane
  // columns), every phase of them, so that a task writes whole runs of y's rows (phases of one row
  // in different tasks shared its cache lines: 0.7x at 16 threads). Whole items first, then halved
  // until there are two tasks a thread, then bands, then parts of the output channels of at least
  // kForwardPartRows (each builds X_r again, a part's rows-th of its product: 1-D layers have one
  // plane row an item), then pieces of a row (rows longer than kPieceBytes are cut in any case).
  // Each phase's part goes through X_r and Y_r in pieces of about kPieceBytes. No cut changes a
  // bit.
  const int64_t k_max = pl.cig * f.max_taps, per_col = (k_max + pl.cog) * elem;
  const int64_t m_max = *std::max_element(f.mh.begin(), f.mh.end());
  const int64_t w_max = *std::max_element(f.mw.begin(), f.mw.end());
  int64_t items = pl.batch, band = m_max, co_parts = 1;
  int64_t width = std::min(w_max, std::max(kMinPieceColumns, kPieceBytes / per_col));
  const auto count = [&] {
    return pl.groups * ceil_div(pl.batch, items) * ceil_div(m_max, band) * ceil_div(w_max, width) *
           co_parts;
  };
  while (count() < 2 * int64_t{threads}) {
    if (items > 1) {
      items = ceil_div(items, int64_t{2});
    } else if (band > 1) {
      band = ceil_div(band, int64_t{2});
    } else if (pl.cog >= 2 * co_parts * kForwardPartRows) {
      co_parts *= 2;
    } else if (width >= 2 * kMinPieceColumns) {
      width = ceil_div(width, int64_t{2});
    } else {
      break;
    }
  }
  const int64_t runs = ceil_div(pl.batch, items), bands = ceil_div(m_max, band);
  const int64_t pieces = ceil_div(w_max, width);
  // Parts of whole register tiles' rows: gemm_packed_a takes the packed weight's rows from a
  // multiple of them.
  const int64_t co_step = gemm::round_up(ceil_div(pl.cog, co_parts), gemm::kRows);
  std::vector<int64_t> rows_per(f.count);
  int64_t max_cols = 0;
  for (int64_t r = 0; r < f.count; ++r) {
    const int64_t cw = std::min(width, f.mw[r]);
    rows_per[r] =
        std::min(piece_rows(cw, per_col), std::max<int64_t>(1, items * std::min(band, f.mh[r])));
    max_cols = std::max(max_cols, rows_per[r] * cw);
  }
  const int64_t x_elems = k_max * max_cols, y_elems = pl.cog * max_cols;
  const int64_t scratch = gemm::scratch_elems<T>(pl.cog, max_cols, std::max<int64_t>(1, k_max));
  parallel_for(
      threads, pl.groups * runs * bands * co_parts * pieces,
      [&] { return Workspace<T>(x_elems + y_elems + scratch); },
      [&](Workspace<T>& ws, int64_t t) {
        const auto [g, run, bi, part, pc] =
            grid_index<5>(t, {pl.groups, runs, bands, co_parts, pieces});
        const int64_t co0 = std::min(pl.cog, part * co_step);
        const int64_t co1 = std::min(pl.cog, co0 + co_step);
        if (co0 == co1) return;
        const int64_t n0 = run * items, n1 = std::min(pl.batch, n0 + items);
        const int64_t m0 = bi * band, m1 = m0 + band;
        T* xs = ws.data();
        T* ys = xs + x_elems;
        for (int64_t r = 0; r < f.count; ++r) {
          const int64_t mh = f.mh[r], mw = f.mw[r], k = f.rows(r, pl.cig);
          const int64_t c0 = std::min(mw, pc * width), c1 = std::min(mw, c0 + width);
          if (c0 == c1 || m0 >= mh) continue;
          // The task's plane rows u = n * mh + m: whole items, or one item's band.
          const int64_t u_begin = bands == 1 ? n0 * mh : n0 * mh + m0;
          const int64_t u_end = bands == 1 ? n1 * mh : n0 * mh + std::min(m1, mh);
          const int64_t cw = c1 - c0;
          for (int64_t u0 = u_begin; u0 < u_end; u0 += rows_per[r]) {
            const int64_t u1 = std::min(u_end, u0 + rows_per[r]), cols = (u1 - u0) * cw;
            phase_x(pl, f, r, x, g, 0, k, u0, u1, c0, c1, xs);
            gemm::gemm_packed_a(co1 - co0, cols, k, packed.data() + a_at[g * f.count + r], pl.cog,
                                co0, gemm::View<T>{xs, cols, 1}, ys, cols, false, ys + y_elems);
            for (int64_t co = co0; co < co1; ++co) {
              const int64_t c = g * pl.cog + co;
              const T bias = b != nullptr ? b[c] : T(0);
              const T* src = ys + (co - co0) * cols;
              for (int64_t u = u0; u < u1; ++u) {
                const int64_t n = u / mh, oh = u % mh * pl.stride_h + f.rh[r];
                T* dst = y + ((n * pl.out_channels + c) * pl.out_h + oh) * pl.out_w + f.rw[r] +
                         c0 * pl.stride_w;
                scatter_strided(dst, src + (u - u0) * cw, cw, pl.stride_w, bias);
              }
            }
          }
        }
      });
}

template <class T>
void dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  const Phases f = phases_of(pl);
  const int64_t elem = sizeof(T);
  // The plane rows and columns a band of input rows [ih0, ih1) and columns [iw0, iw1) reads in
  // phase r: [ih0 + min qh, ih1 + max qh) and [iw0 + min qw, iw1 + max qw) within the plane.
  std::vector<int64_t> qlo(f.count, 0), qhi(f.count, 0), wlo(f.count, 0), whi(f.count, 0);
  for (int64_t r = 0; r < f.count; ++r) {
    for (size_t j = 0; j < f.taps[r].size(); ++j) {
      const Tap& tp = f.taps[r][j];
      qlo[r] = j == 0 ? tp.qh : std::min(qlo[r], tp.qh);
      qhi[r] = j == 0 ? tp.qh : std::max(qhi[r], tp.qh);
      wlo[r] = j == 0 ? tp.qw : std::min(wlo[r], tp.qw);
      whi[r] = j == 0 ? tp.qw : std::max(whi[r], tp.qw);
    }
  }
  // Tasks: (group, run of items, band of input rows, part of the input channels, piece of the
  // input columns). Whole items while one item's largest phase (dy's plane and Z_r) fits
  // kPieceBytes, several a task; else one item in bands, and rows longer than that in pieces.
  const int64_t k_max = pl.cig * f.max_taps;
  int64_t item_cols = 0;
  for (int64_t r = 0; r < f.count; ++r)
    item_cols = std::max(item_cols, f.mh[r] * f.mw[r]);
  const int64_t per_col = (k_max + pl.cog) * elem;
  const int64_t reach_h = (pl.kernel_h - 1) * pl.dil_h / pl.stride_h;
  const int64_t reach_w = (pl.kernel_w - 1) * pl.dil_w / pl.stride_w;
  const int64_t w_max = *std::max_element(f.mw.begin(), f.mw.end());
  int64_t items = 1, band = pl.in_h, width = pl.in_w;
  if (item_cols * per_col <= kPieceBytes) {
    items =
        std::clamp<int64_t>(kPieceBytes / std::max<int64_t>(1, item_cols * per_col), 1, pl.batch);
  } else if ((1 + reach_h) * w_max * per_col <= kPieceBytes) {
    band = std::clamp<int64_t>(kPieceBytes / (per_col * w_max) - reach_h, 1, pl.in_h);
  } else {
    band = 1;
    width = std::min(pl.in_w,
                     std::max(kMinPieceColumns, kPieceBytes / ((1 + reach_h) * per_col) - reach_w));
  }
  // For the threads: fewer items a task; then bands while each band's reach of dy read again is
  // at most a quarter of it; then parts of the input channels of at least kMinPartRows x 2 rows
  // of Z_r (each part copies dy's planes again: parts of one channel, 16 rows, made the copies as
  // long as the products, 0.65x at 16 threads); then pieces of the rows, and bands of any height.
  const int64_t min_part = std::max<int64_t>(1, ceil_div(2 * kMinPartRows, f.max_taps));
  int64_t ci_parts = 1;
  const auto count = [&] {
    return pl.groups * ceil_div(pl.batch, items) * ceil_div(pl.in_h, band) *
           ceil_div(pl.in_w, width) * ci_parts;
  };
  while (count() < 2 * int64_t{threads}) {
    if (items > 1) {
      items = ceil_div(items, int64_t{2});
    } else if (band >= 8 * std::max<int64_t>(1, reach_h)) {
      band = ceil_div(band, int64_t{2});
    } else if (ceil_div(pl.cig, 2 * ci_parts) >= min_part) {
      ci_parts *= 2;
    } else if (width >= 2 * std::max(kMinPieceColumns, 4 * reach_w)) {
      width = ceil_div(width, int64_t{2});
    } else if (band > 1) {
      band = ceil_div(band, int64_t{2});
    } else {
      break;
    }
  }
  const int64_t ci_step = ceil_div(pl.cig, ci_parts);
  // The weight of every group, phase and part of the input channels as the products' A
  // (rows (ci, j) of the part x cog), packed once.
  const int64_t blocks = pl.groups * f.count * ci_parts;
  std::vector<int64_t> a_at(blocks + 1, 0);
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t r = i / ci_parts % f.count, ci0 = std::min(pl.cig, i % ci_parts * ci_step);
    const int64_t nci = std::min(pl.cig, ci0 + ci_step) - ci0;
    a_at[i + 1] = a_at[i] + gemm::packed_whole_a_elems<T>(nci * f.rows(r, 1), pl.cog);
  }
  const Workspace<T> packed(a_at.back());
  {
    const Workspace<T> rearranged(pl.groups * pl.cig * pl.taps * pl.cog);
    pack_phase_weights(
        pl, f, w, rearranged.data(),
        [&](T* wr) {
          std::vector<PackedBlock<T>> bs;
          for (int64_t i = 0; i < blocks; ++i) {
            const int64_t part = i % ci_parts, r = i / ci_parts % f.count;
            const int64_t g = i / (ci_parts * f.count), nt = f.rows(r, 1);
            const int64_t ci0 = std::min(pl.cig, part * ci_step);
            const int64_t nci = std::min(pl.cig, ci0 + ci_step) - ci0;
            const T* a = wr + g * pl.cig * pl.taps * pl.cog + f.w_at[r] + ci0 * nt * pl.cog;
            bs.push_back({{a, pl.cog, 1}, nci * nt, pl.cog, packed.data() + a_at[i]});
          }
          return bs;
        },
        threads);
  }

  const int64_t runs = ceil_div(pl.batch, items), bands = ceil_div(pl.in_h, band);
  const int64_t pieces = ceil_div(pl.in_w, width);
  // A phase's columns for a task: its items x the plane rows its band reads x the plane columns
  // its piece reads.
  int64_t max_cols = 0;
  for (int64_t r = 0; r < f.count; ++r) {
    const int64_t rows = std::min(f.mh[r], band + qhi[r] - qlo[r]);
    const int64_t cols = std::min(f.mw[r], width + whi[r] - wlo[r]);
    max_cols = std::max(max_cols, items * rows * cols);
  }
  const int64_t dy_elems = pl.cog * max_cols, z_elems = k_max * max_cols;
  const int64_t scratch = gemm::scratch_elems<T>(std::max<int64_t>(1, k_max), max_cols, pl.cog);
  parallel_for(
      threads, pl.groups * runs * bands * pieces * ci_parts,
      [&] { return Workspace<T>(dy_elems + z_elems + scratch); },
      [&](Workspace<T>& ws, int64_t t) {
        const auto [g, run, bi, pc, part] =
            grid_index<5>(t, {pl.groups, runs, bands, pieces, ci_parts});
        const int64_t ci0 = std::min(pl.cig, part * ci_step);
        const int64_t ci1 = std::min(pl.cig, ci0 + ci_step);
        if (ci0 == ci1) return;
        const int64_t n0 = run * items, n1 = std::min(pl.batch, n0 + items);
        const int64_t ih0 = bi * band, ih1 = std::min(pl.in_h, ih0 + band);
        const int64_t iw0 = pc * width, iw1 = std::min(pl.in_w, iw0 + width);
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t ci = ci0; ci < ci1; ++ci)
            for (int64_t ih = ih0; ih < ih1; ++ih)
              std::fill(
                  dx + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih) * pl.in_w + iw0,
                  dx + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih) * pl.in_w + iw1,
                  T(0));
        T* ds = ws.data();
        T* zs = ds + dy_elems;
        for (int64_t r = 0; r < f.count; ++r) {
          const int64_t nt = static_cast<int64_t>(f.taps[r].size()), mw = f.mw[r];
          if (nt == 0 || mw == 0) continue;
          const int64_t a0 = std::clamp<int64_t>(ih0 + qlo[r], 0, f.mh[r]);
          const int64_t a1 = std::clamp<int64_t>(ih1 + qhi[r], a0, f.mh[r]);
          const int64_t b0 = std::clamp<int64_t>(iw0 + wlo[r], 0, mw);
          const int64_t b1 = std::clamp<int64_t>(iw1 + whi[r], b0, mw);
          if (a0 == a1 || b0 == b1) continue;
          const int64_t rows = a1 - a0, bw = b1 - b0, cols = (n1 - n0) * rows * bw;
          phase_dy(pl, f, r, dy + n0 * pl.out_channels * pl.out_h * pl.out_w, g, 0, pl.cog, 0,
                   (n1 - n0) * rows, rows, a0, b0, b1, ds);
          const int64_t zm = (ci1 - ci0) * nt;
          gemm::gemm_packed_a(zm, cols, pl.cog,
                              packed.data() + a_at[(g * f.count + r) * ci_parts + part], zm, 0,
                              gemm::View<T>{ds, cols, 1}, zs, cols, false, zs + z_elems);
          for (int64_t ci = ci0; ci < ci1; ++ci) {
            for (int64_t j = 0; j < nt; ++j) {
              const Tap& tp = f.taps[r][j];
              // Columns iw of the piece whose plane column iw + qw is among the copied ones.
              const int64_t i0 = std::max(iw0, b0 - tp.qw);
              const int64_t i1 = std::min(iw1, b1 - tp.qw);
              if (i0 >= i1) continue;
              const T* zrow = zs + ((ci - ci0) * nt + j) * cols;
              for (int64_t n = n0; n < n1; ++n) {
                for (int64_t ih = ih0; ih < ih1; ++ih) {
                  const int64_t m = ih + tp.qh;
                  if (m < a0 || m >= a1) continue;
                  T* d =
                      dx + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih) * pl.in_w + i0;
                  const T* z = zrow + ((n - n0) * rows + m - a0) * bw + (i0 + tp.qw - b0);
                  for (int64_t c = 0; c < i1 - i0; ++c)
                    d[c] += z[c];
                }
              }
            }
          }
        }
      });
}

// wgrad's cut of each phase's reduction over the columns of the whole batch's plane rows: each
// row in `chunks` chunks of `width` columns (rows longer than a piece), the reduction's steps q
// = u * chunks + chunk; pieces of `steps` steps (one product each, added in order; whole rows
// when chunks is 1, else one chunk), and `slices` slices of the steps (partial sums added in
// slice order). All follow the shape only.
struct WgradCut {
  std::vector<int64_t> chunks, width, steps;  // per phase
  int64_t slices = 1;
};

WgradCut wgrad_cut(const Plan& pl, const Phases& f, int64_t elem) {
  WgradCut c;
  const int64_t per_col = (pl.cig * f.max_taps + pl.cog) * elem;
  const int64_t most = std::max(kMinPieceColumns, kPieceBytes / per_col);  // columns a piece
  int64_t columns = 0, reached = 0;
  for (int64_t r = 0; r < f.count; ++r) {
    const int64_t mw = std::max<int64_t>(1, f.mw[r]);
    c.chunks.push_back(ceil_div(mw, most));
    c.width.push_back(ceil_div(mw, c.chunks.back()));
    c.steps.push_back(c.chunks.back() > 1 ? 1 : std::max<int64_t>(1, most / mw));
    if (!f.taps[r].empty()) {
      columns = std::max(columns, pl.batch * f.mh[r] * f.mw[r]);
      ++reached;
    }
  }
  // Enough tasks for 16 threads where the columns allow, within the partials' budget.
  const int64_t wanted = ceil_div(32, std::max<int64_t>(1, pl.groups * reached));
  const int64_t w_bytes = pl.in_channels * pl.rows * elem;
  c.slices = std::clamp<int64_t>(std::min(wanted, columns / kMinSliceColumns), 1, kMaxSlices);
  c.slices =
      std::max<int64_t>(1, std::min(c.slices, kMaxPartialBytes / std::max<int64_t>(1, w_bytes)));
  // A piece needs no more steps than a slice has.
  for (int64_t r = 0; r < f.count; ++r)
    c.steps[r] = std::min(
        c.steps[r], std::max<int64_t>(1, ceil_div(pl.batch * f.mh[r] * c.chunks[r], c.slices)));
  return c;
}

template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  const Phases f = phases_of(pl);
  const int64_t elem = sizeof(T);
  const WgradCut cut = wgrad_cut(pl, f, elem);
  const int64_t slices = cut.slices;
  // Partial sums per slice, group and phase: (cig|T_r| x cog) at part + s * group_elems * groups +
  // g * group_elems + w_at[r]; one slice writes them as the final sums' source too.
  const int64_t group_elems = pl.cig * pl.taps * pl.cog;
  const Workspace<T> parts(slices * pl.groups * group_elems);
  const int64_t k_max = pl.cig * f.max_taps;
  int64_t max_cols = 0;
  for (int64_t r = 0; r < f.count; ++r)
    max_cols = std::max(max_cols, cut.steps[r] * cut.width[r]);
  const int64_t x_elems = k_max * max_cols, dy_elems = pl.cog * max_cols;
  const int64_t scratch =
      gemm::scratch_elems<T>(std::max<int64_t>(1, k_max), pl.cog, std::max<int64_t>(1, max_cols));
  // Each (slice, group, phase) in parts for the threads, of its rows (ci, j) where X_r has more
  // rows than dy's plane, else of its output channels: each task copies the other operand whole.
  // A product's rows or columns, cut, change no bit.
  int64_t reached = 0;
  for (int64_t r = 0; r < f.count; ++r)
    reached += f.taps[r].empty() ? 0 : 1;
  const bool by_rows = k_max > pl.cog;
  // Parts of at least kMinWgradPart rows or columns: with 16 the 16-thread wgrads of 8 -> 384 k3
  // and 96 -> 384 k5 copied the whole operand 24-30 times (0.7x).
  const int64_t parts_max = std::max<int64_t>(1, (by_rows ? k_max : pl.cog) / kMinWgradPart);
  const int64_t cuts = std::clamp<int64_t>(
      ceil_div(2 * int64_t{threads}, slices * pl.groups * std::max<int64_t>(1, reached)), 1,
      parts_max);
  parallel_for(
      threads, slices * pl.groups * f.count * cuts,
      [&] { return Workspace<T>(x_elems + dy_elems + scratch); },
      [&](Workspace<T>& ws, int64_t t) {
        const auto [s, g, r, part] = grid_index<4>(t, {slices, pl.groups, f.count, cuts});
        const int64_t nt = static_cast<int64_t>(f.taps[r].size()), mh = f.mh[r], mw = f.mw[r];
        const int64_t k = nt * pl.cig, total = pl.batch * mh;
        // This task's rows [i0, i1) and output channels [co0, co1).
        const int64_t extent = by_rows ? k : pl.cog, step = ceil_div(extent, cuts);
        const int64_t lo = std::min(extent, part * step), hi = std::min(extent, lo + step);
        const int64_t i0 = by_rows ? lo : 0, i1 = by_rows ? hi : k;
        const int64_t co0 = by_rows ? 0 : lo, co1 = by_rows ? pl.cog : hi;
        if (nt == 0 || i0 == i1 || co0 == co1) return;
        T* acc = parts.data() + (s * pl.groups + g) * group_elems + f.w_at[r] + i0 * pl.cog + co0;
        const int64_t chunks = cut.chunks[r], steps = total * chunks;
        const int64_t q_begin = steps * s / slices, q_end = steps * (s + 1) / slices;
        if (q_begin == q_end || mw == 0) {
          for (int64_t i = i0; i < i1; ++i)
            std::fill_n(acc + (i - i0) * pl.cog, co1 - co0, T(0));
          return;
        }
        T* xs = ws.data();
        T* ds = xs + x_elems;
        for (int64_t q0 = q_begin; q0 < q_end; q0 += cut.steps[r]) {
          // Whole rows [u0, u1), or one chunk [c0, c1) of row u0.
          const int64_t q1 = std::min(q_end, q0 + cut.steps[r]);
          const int64_t u0 = q0 / chunks, u1 = chunks > 1 ? u0 + 1 : q1;
          const int64_t c0 = chunks > 1 ? q0 % chunks * cut.width[r] : 0;
          const int64_t c1 = chunks > 1 ? std::min(mw, c0 + cut.width[r]) : mw;
          const int64_t cols = (u1 - u0) * (c1 - c0);
          phase_x(pl, f, r, x, g, i0, i1, u0, u1, c0, c1, xs);
          phase_dy(pl, f, r, dy, g, co0, co1, u0, u1, mh, 0, c0, c1, ds);
          gemm::gemm(i1 - i0, co1 - co0, cols, gemm::View<T>{xs, cols, 1},
                     gemm::View<T>{ds, 1, cols}, acc, pl.cog, q0 != q_begin, ds + dy_elems);
        }
      });
  // dw[g*cig + ci, co, tap_j] = the slices' partials in slice order.
  std::vector<int64_t> phase_of(pl.taps), index_of(pl.taps);
  for (int64_t r = 0; r < f.count; ++r) {
    for (size_t j = 0; j < f.taps[r].size(); ++j) {
      phase_of[f.taps[r][j].tap] = r;
      index_of[f.taps[r][j].tap] = static_cast<int64_t>(j);
    }
  }
  parallel_for(threads, pl.in_channels, [&](int64_t c) {
    const int64_t g = c / pl.cig, ci = c % pl.cig;
    T* out = dw + c * pl.rows;
    for (int64_t tap = 0; tap < pl.taps; ++tap) {
      const int64_t r = phase_of[tap], nt = static_cast<int64_t>(f.taps[r].size());
      const T* p = parts.data() + g * group_elems + f.w_at[r] + (ci * nt + index_of[tap]) * pl.cog;
      for (int64_t co = 0; co < pl.cog; ++co) {
        T v = p[co];
        for (int64_t s = 1; s < slices; ++s)
          v += p[s * pl.groups * group_elems + co];
        out[co * pl.taps + tap] = v;
      }
    }
  });
}

}  // namespace

namespace {

// What every pass needs: strides within kMaxPhaseStride, sizes in bounds, and a column buffer of
// (ci, tap) rows thinner than the (co, tap) one by a factor (the gain) of at least 2. X_r and Z_r
// hold cig x taps rows over about x's positions, dy's phase planes cog x stride rows. The products
// also cover the planes' positions past x's reach (out_hw against stride x in_hw): a quarter more
// than x's, or up to half the gain. At 64 -> 192 k8x7 s2 on 2 x 5 (gain 2.5, the planes 1.95x x's
// positions) every pass lost (0.6x-0.8x); 48 -> 256 k8 on 4 x 7 (4.9, 3.25x) the forward (0.55x);
// 12 -> 32 k7 s2 on 19 x 19 (2.2, 1.1x) won 2.4x.
bool phase_gemm_common(const Plan& pl, int64_t elem_bytes) {
  if (pl.stride_h > kMaxPhaseStride || pl.stride_w > kMaxPhaseStride) return false;
  if (pl.batch < 1 || pl.in_h < 1 || pl.in_w < 1 || pl.out_h < 1 || pl.out_w < 1) return false;
  // Enough positions to pay for rearranging the weight per phase: one 6 x 6 image (24 -> 384 k8
  // s2) lost at 16 threads (0.45x), the weight's copies about the whole pass.
  if (int128{pl.batch} * pl.in_hw < kMinPositions) return false;
  // (In 128 bits: the geometry accepts sizes whose products overflow.)
  const int128 per_col = (int128{pl.cig} * pl.taps + pl.cog) * elem_bytes;
  if (per_col * pl.out_w > kPieceBytes * int128{16}) return false;
  if (int128{pl.in_channels} * pl.rows * elem_bytes * 2 > kMaxPartialBytes) return false;
  const int128 phases = int128{pl.stride_h} * pl.stride_w;
  const int128 phase_rows = int128{pl.cig} * pl.taps + int128{pl.cog} * phases;
  const int128 rows = int128{pl.cog} * pl.taps;
  // gain = rows / phase_rows >= 2; out_hw / (phases x in_hw) <= 5/4 or gain / 2 (cross-multiplied).
  const int128 in_hw = phases * pl.in_hw;
  return 2 * phase_rows <= rows &&
         (4 * int128{pl.out_hw} <= 5 * in_hw || 2 * int128{pl.out_hw} * phase_rows <= in_hw * rows);
}

// At stride 1 the forward's and wgrad's one phase sums over all of y's positions, the padding's
// zeros too, where the column path sums over x's. Past a quarter more positions (k4 on 9 x 9 to
// 14 x 14 images, 1.4x-1.5x x's) the column path measured faster at 1 thread here (forward
// 1.03x-1.3x, wgrad 1.04x-1.11x) and about 2x at 16 threads (the forward on the host, wgrad in
// the thread model), where the phase tasks' thin pieces of a small image lose
// (docs/performance.md, thirty-eighth session). At strides above 1 common's gain rule stands.
bool stride1_overhang(const Plan& pl) {
  return pl.stride_h == 1 && pl.stride_w == 1 && 4 * int128{pl.out_hw} > 5 * int128{pl.in_hw};
}

}  // namespace

// Each pass's product must be one the GEMM's tile fills, measured on random layers at AVX-512
// (docs/performance.md): forward's reduction cig x |T_r|, at least kMinDepth on average over the
// phases, and cog rows. dgrad's reduction is cog, and with fewer than 8 input channels the phase
// and few-rows loops won (0.1x-0.8x here). wgrad's rows are cig x |T_r| and its columns cog.
constexpr int64_t kMinDepth = 16;
bool phase_gemm_forward_suits(const Plan& pl, int64_t elem_bytes) {
  if (stride1_overhang(pl)) return false;
  // Rows of 4 or more: on 3 x 3 images the copies of runs of 3 cost more than the thinner buffer
  // saved (grouped 8 -> 64 k8 s2: 0.8x-0.9x).
  return phase_gemm_common(pl, elem_bytes) && pl.cog >= 16 && pl.in_w >= 4 &&
         mul_le(kMinDepth * int128{pl.stride_h}, pl.stride_w, int128{pl.cig} * pl.taps);
}
bool phase_gemm_dgrad_suits(const Plan& pl, int64_t elem_bytes) {
  return phase_gemm_common(pl, elem_bytes) && pl.cog >= 48 && pl.cig >= 8;
}
bool phase_gemm_wgrad_suits(const Plan& pl, int64_t elem_bytes) {
  if (stride1_overhang(pl)) return false;
  return phase_gemm_common(pl, elem_bytes) && pl.cog >= 32 &&
         mul_le(int128{12} * pl.stride_h, pl.stride_w, int128{pl.cig} * pl.taps);
}
bool phase_gemm_dgrad_first(const Plan& pl, int64_t elem_bytes) {
  // The planes' positions past x's reach at most a quarter more than x's: 8 -> 64 k8x7 on 26 x 26
  // at 1.37x lost to the phase loops (0.7x).
  return gemm::kVecRegisters >= 32 && 2 * pl.cig * elem_bytes >= gemm::kVecBytes &&
         pl.cig * elem_bytes < gemm::kVecBytes &&
         !mul_le(int128{pl.stride_h} * pl.stride_w, 5 * int128{pl.in_hw},
                 4 * int128{pl.out_hw} - 1);
}

bool phase_gemm_wgrad_first(const Plan& pl, int64_t elem_bytes) {
  // Up to kPhaseFewInMaxChannels input channels, the planes' positions at most 1.5x x's: grouped
  // 16 -> 192 k3x8 on 12 x 12 at 1.94x lost to the direct kernel (0.85x).
  return gemm::kVecRegisters >= 32 && pl.cig <= 8 &&
         !mul_le(int128{pl.stride_h} * pl.stride_w, 3 * int128{pl.in_hw},
                 2 * int128{pl.out_hw} - 1);
}

void phase_gemm_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                        int threads) {
  forward_typed(pl, x, w, b, y, threads);
}
void phase_gemm_forward(const Plan& pl, const double* x, const double* w, const double* b,
                        double* y, int threads) {
  forward_typed(pl, x, w, b, y, threads);
}
void phase_gemm_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  dgrad_typed(pl, dy, w, dx, threads);
}
void phase_gemm_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads) {
  dgrad_typed(pl, dy, w, dx, threads);
}
void phase_gemm_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads) {
  wgrad_typed(pl, x, dy, dw, threads);
}
void phase_gemm_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads) {
  wgrad_typed(pl, x, dy, dw, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
