// Winograd's F(2x2, 3x3) for the forward and dgrad of stride-1 undilated layers in float32: 3x3
// kernels (DeconvNet's and many decoders' refinement layers) and larger ones cut into 3 x 3
// blocks (S5's 3 x 7), the shapes winograd_suits takes. Both passes are then the same
// correlation:
//   out[o, h, w] = bias[o] + sum over i, a, b of f(o, i, a, b) in[i, h - ph + a, w - pw + b]
// (a < kh, b < kw) with reads outside `in` zero: dgrad reads dy through w as it lies (o an input
// channel, i an output channel), the forward reads x through w flipped in both taps, with the
// padding kernel - 1 - p. Each 2 x 2 block of outputs (a tile) comes from the 4 x 4 window of
// `in` above it:
//   out tile = A^T [ sum over i of (G f G^T) (.) (B^T d_i B) ] A
// (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks"), so the 36 multiplies of
// a tile per (o, i) become the 16 of the elementwise product. Those are 16 GEMMs, one per point
// of the 4 x 4 transform: M_xi (o x tiles) = U_xi (o x i) V_xi (i x tiles), with the filters'
// transforms U packed once per call and the windows' transforms V computed by each task for its
// run of tiles, vectors over tiles (stride-2 columns of the window: even and odd lanes of two
// loads). A larger kernel's 3 x 3 blocks each read the window at their own offset, and their
// products share the GEMMs' reduction. A task owns a run of tiles of one (item, group), every
// channel of both sides. Float64 keeps the other paths: it is the reference they are checked
// against.
//
// Each output is one fixed sequence of operations: its tile's window transforms, the reduction
// over (block, i) in order for each point, then the output transform and the bias; how the tiles
// are cut into tasks cannot change a bit, so the results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <utility>

#include "cpu/conv_transpose_cols.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

constexpr int kPoints = 16;  // the 4 x 4 points of the transform
constexpr int L = gemm::kLanes<float>;
constexpr int MR = gemm::kRows;         // output channels per register tile
constexpr int NR = gemm::kCols<float>;  // tiles per register tile
typedef float Vec __attribute__((vector_size(gemm::kVecBytes)));

// The correlation above, per (item, group): ic input and oc output channels of the group, the
// tensors' channel counts, and the planes' sizes.
// The filter, kh x kw, is cut into blocks of 3 x 3 taps (zero past its edges), each a correlation
// of its own over `in` shifted by the block's offset; their products share the GEMMs' reduction,
// which runs over (block, input channel): k = block * ic + i.
struct Corr {
  int64_t batch, groups, ic, oc, in_channels, out_channels;
  int64_t in_h, in_w, out_h, out_w, ph, pw, kh, kw;
  int64_t tiles_w() const { return ceil_div(out_w, 2); }
  int64_t tiles() const { return ceil_div(out_h, 2) * tiles_w(); }
  int64_t blocks_h() const { return ceil_div(kh, 3); }
  int64_t blocks_w() const { return ceil_div(kw, 3); }
  int64_t reduce() const { return blocks_h() * blocks_w() * ic; }
};

Corr dgrad_corr(const Plan& pl) {
  return {pl.batch, pl.groups, pl.cog,  pl.cig,   pl.out_channels, pl.in_channels, pl.out_h,
          pl.out_w, pl.in_h,   pl.in_w, pl.pad_h, pl.pad_w,        pl.kernel_h,    pl.kernel_w};
}

// y[co, oh] takes x[ci, ih] at oh = ih - p + k: ih = oh - (K - 1 - p) + (K - 1 - k).
Corr forward_corr(const Plan& pl) {
  return {pl.batch,
          pl.groups,
          pl.cig,
          pl.cog,
          pl.in_channels,
          pl.out_channels,
          pl.in_h,
          pl.in_w,
          pl.out_h,
          pl.out_w,
          pl.kernel_h - 1 - pl.pad_h,
          pl.kernel_w - 1 - pl.pad_w,
          pl.kernel_h,
          pl.kernel_w};
}

// Tiles per task at most, and the bytes of a task's transforms (V and M) it aims for: about a
// core's L2 share, where the GEMMs read them back.
constexpr int64_t kMaxTaskTiles = 512;
constexpr int64_t kTaskBytes = int64_t{768} << 10;
// winograd_suits: channels on each side at least (16 -> 16 at 128 x 128 ran 1.7x the direct
// kernel at AVX-512; fewer were not tried), the bytes of one group's filter transforms at most,
// and the planes' width at most.
constexpr int64_t kWinogradMinChannels = 16;
constexpr int64_t kWinogradMaxFilterBytes = int64_t{4} << 20;
constexpr int64_t kWinogradMaxWidth = 16384;
constexpr int64_t kWinogradMinTapsPerBlock = 7;

// The filters' transforms of every group, G f G^T with G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2;
// 0 0 1], of each 3 x 3 block, as the GEMMs' A operand: for group g and point xi, the output
// channels in panels of MR (zero past oc), panel p's element (k, l) at
// u + ((g * kPoints + xi) * oc_pad + p * MR) * reduce + k * MR + l, k = block * ic + i.
// Computed in double, a panel's lanes side by side (they vectorise), and rounded once.
// `filter(g, o, i, a, b)` is tap (a, b) of the filter of (o, i).
template <class Filter>
void pack_filters(const Corr& c, const Filter& filter, float* u, int threads) {
  const int64_t panels = ceil_div(c.oc, MR), oc_pad = panels * MR;
  parallel_for(threads, c.groups * panels, [&](int64_t t) {
    const int64_t g = t / panels, p = t % panels;
    const int lanes = static_cast<int>(std::min<int64_t>(MR, c.oc - p * MR));
    const int64_t reduce = c.reduce();
    for (int64_t k = 0; k < reduce; ++k) {
      const int64_t block = k / c.ic, i = k % c.ic;
      const int64_t a0 = 3 * (block / c.blocks_w()), b0 = 3 * (block % c.blocks_w());
      double f[3][3][MR] = {}, s[4][3][MR], pt[4][4][MR];
      for (int l = 0; l < lanes; ++l)
        for (int a = 0; a < 3 && a0 + a < c.kh; ++a)
          for (int b = 0; b < 3 && b0 + b < c.kw; ++b)
            f[a][b][l] = filter(g, p * MR + l, i, a0 + a, b0 + b);
      for (int b = 0; b < 3; ++b) {
        for (int l = 0; l < MR; ++l) {
          s[0][b][l] = f[0][b][l];
          s[1][b][l] = 0.5 * (f[0][b][l] + f[1][b][l] + f[2][b][l]);
          s[2][b][l] = 0.5 * (f[0][b][l] - f[1][b][l] + f[2][b][l]);
          s[3][b][l] = f[2][b][l];
        }
      }
      for (int a = 0; a < 4; ++a) {
        for (int l = 0; l < MR; ++l) {
          pt[a][0][l] = s[a][0][l];
          pt[a][1][l] = 0.5 * (s[a][0][l] + s[a][1][l] + s[a][2][l]);
          pt[a][2][l] = 0.5 * (s[a][0][l] - s[a][1][l] + s[a][2][l]);
          pt[a][3][l] = s[a][2][l];
        }
      }
      for (int xi = 0; xi < kPoints; ++xi) {
        float* dst = u + ((g * kPoints + xi) * oc_pad + p * MR) * reduce + k * MR;
        for (int l = 0; l < MR; ++l)
          dst[l] = static_cast<float>(pt[xi / 4][xi % 4][l]);
      }
    }
  });
}

template <std::size_t... I>
Vec even_lanes(Vec lo, Vec hi, std::index_sequence<I...>) {
  return __builtin_shufflevector(lo, hi, (2 * I)...);
}
template <std::size_t... I>
Vec odd_lanes(Vec lo, Vec hi, std::index_sequence<I...>) {
  return __builtin_shufflevector(lo, hi, (2 * I + 1)...);
}
// Lanes 0 .. L/2 - 1 (`high`: L/2 .. L - 1) of a and b, interleaved: a0 b0 a1 b1 ...
template <bool high, std::size_t... I>
Vec zip(Vec a, Vec b, std::index_sequence<I...>) {
  constexpr int h = high ? L / 2 : 0;
  return __builtin_shufflevector(a, b, ((I % 2 != 0 ? L : 0) + h + static_cast<int>(I / 2))...);
}

Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof(Vec));
  return v;
}
void store(float* p, Vec v) {
  std::memcpy(p, &v, sizeof(Vec));
}
// n elements from src to dst, a vector at a time: the window's rows are short, and a library
// copy's call cost as much as the copy.
void copy_floats(const float* src, int64_t n, float* dst) {
  int64_t j = 0;
  for (; j + L <= n; j += L)
    store(dst + j, load(src + j));
  for (; j < n; ++j)
    dst[j] = src[j];
}

// A run of tiles of one tile row: tiles [tx0, tx1) of row ty, the run's first at `local` in the
// task's tiles.
struct Segment {
  int64_t ty, tx0, tx1, local;
};

// The segments of tiles [t0, t1) of an item's grid (tiles_w a row), in order.
template <class F>
void for_segments(int64_t t0, int64_t t1, int64_t tiles_w, F&& f) {
  for (int64_t t = t0; t < t1;) {
    const int64_t ty = t / tiles_w, tx0 = t % tiles_w;
    const int64_t tx1 = std::min(tiles_w, tx0 + (t1 - t));
    f(Segment{ty, tx0, tx1, t - t0});
    t += tx1 - tx0;
  }
}

// A task's window of `in`: rows [2 ty0 - ph, 2 ty1 - ph + 4), and 3 more per further row of
// blocks, of every column; element (r, j) at win[r * width + j] is in[2 ty0 - ph + r, j - pw],
// zero outside the plane. The zeros do not depend on the channel: a task sets the window to zero
// once, then copies each channel's rows in (fill_window).
struct Window {
  int64_t y0, rows, width, j0, j1;  // plane row of window row 0; the columns inside the plane
};

Window window_of(const Corr& c, int64_t ty0, int64_t ty1, int64_t width) {
  const int64_t j0 = std::clamp<int64_t>(c.pw, 0, width);
  return {2 * ty0 - c.ph, 2 * (ty1 - ty0) + 4 + 3 * (c.blocks_h() - 1), width, j0,
          std::clamp<int64_t>(c.in_w + c.pw, j0, width)};
}

void fill_window(const Corr& c, const Window& wd, const float* plane, float* win) {
  const int64_t r0 = std::clamp<int64_t>(-wd.y0, 0, wd.rows);
  const int64_t r1 = std::clamp<int64_t>(c.in_h - wd.y0, r0, wd.rows);
  for (int64_t r = r0; r < r1; ++r)
    copy_floats(plane + (wd.y0 + r) * c.in_w + (wd.j0 - c.pw), wd.j1 - wd.j0,
                win + r * wd.width + wd.j0);
}

// V for one input channel over a segment, L tiles at a time: point xi of local tile t at
// v[xi * v_point + t]. Lanes past the segment's end are written too (the next segment's first
// vector overwrites them, and past the task's last tile they are never read into an output).
void transform_windows(const float* window, int64_t width, int64_t count, float* v,
                       int64_t v_point) {
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t k = 0; k < count; k += L) {
    Vec t[4][4];
    for (int r = 0; r < 4; ++r) {
      const float* row = window + r * width + 2 * k;
      const Vec a0 = load(row), a1 = load(row + L), b0 = load(row + 2), b1 = load(row + 2 + L);
      const Vec d0 = even_lanes(a0, a1, lanes), d1 = odd_lanes(a0, a1, lanes);
      const Vec d2 = even_lanes(b0, b1, lanes), d3 = odd_lanes(b0, b1, lanes);
      // d B, B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
      t[r][0] = d0 - d2;
      t[r][1] = d1 + d2;
      t[r][2] = d2 - d1;
      t[r][3] = d1 - d3;
    }
    for (int b = 0; b < 4; ++b) {  // B^T (d B)
      store(v + (0 * 4 + b) * v_point + k, t[0][b] - t[2][b]);
      store(v + (1 * 4 + b) * v_point + k, t[1][b] + t[2][b]);
      store(v + (2 * 4 + b) * v_point + k, t[2][b] - t[1][b]);
      store(v + (3 * 4 + b) * v_point + k, t[1][b] - t[3][b]);
    }
  }
}

// One output channel's tiles of a segment from M (point xi of local tile t at
// m[xi * m_point + t]): A^T M A, A^T = [1 1 1 0; 0 1 -1 -1], plus the bias, into the plane.
void transform_outputs(const Corr& c, const float* m, int64_t m_point, const Segment& s, float bias,
                       float* plane) {
  constexpr auto lanes = std::make_index_sequence<L>{};
  const bool second_row = 2 * s.ty + 1 < c.out_h;
  for (int64_t tx = s.tx0; tx < s.tx1; tx += L) {
    const float* mt = m + s.local + (tx - s.tx0);
    Vec z[2][4];
    for (int b = 0; b < 4; ++b) {
      const Vec m0 = load(mt + (0 * 4 + b) * m_point), m1 = load(mt + (1 * 4 + b) * m_point);
      const Vec m2 = load(mt + (2 * 4 + b) * m_point), m3 = load(mt + (3 * 4 + b) * m_point);
      z[0][b] = m0 + m1 + m2;
      z[1][b] = m1 - m2 - m3;
    }
    // The segment's tiles only: the lanes past its end belong to the next run's task.
    const int64_t w0 = 2 * tx, cols = std::min({int64_t{2 * L}, 2 * (s.tx1 - tx), c.out_w - w0});
    for (int r = 0; r < (second_row ? 2 : 1); ++r) {
      const Vec y0 = z[r][0] + z[r][1] + z[r][2] + bias;
      const Vec y1 = z[r][1] - z[r][2] - z[r][3] + bias;
      float* out = plane + (2 * s.ty + r) * c.out_w + w0;
      const Vec lo = zip<false>(y0, y1, lanes), hi = zip<true>(y0, y1, lanes);
      // A row ending mid-vector: its last lanes by a masked store (store_first in
      // conv_transpose_cols.h; a run of scalar stores cost as much as the rest of the output
      // transform on such rows).
      if (cols < L) {
        store_first(out, lo, cols);
        continue;
      }
      store(out, lo);
      if (cols == 2 * L) {
        store(out + L, hi);
      } else if (cols > L) {
        store_first(out + L, hi, cols - L);
      }
    }
  }
}

// The pass: `filter(g, o, i, a, b)` gives tap (a, b) of the kh x kw filter of (o, i) in
// correlation order, `bias` is null or oc x groups values.
template <class Filter>
void winograd(const Corr& c, const float* in, const Filter& filter, const float* bias, float* out,
              int threads) {
  const int64_t panels = ceil_div(c.oc, MR), oc_pad = panels * MR;
  const int64_t reduce = c.reduce();
  const Workspace<float> u(c.groups * kPoints * oc_pad * reduce);
  pack_filters(c, filter, u.data(), threads);
  const int64_t tiles = c.tiles(), tiles_w = c.tiles_w();
  // Tiles per task: what keeps V and M near kTaskBytes, in whole register tiles, fewer while that
  // leaves threads idle (no bit depends on it).
  const int64_t per_tile_bytes = kPoints * (reduce + oc_pad) * int64_t{sizeof(float)};
  int64_t run = std::clamp<int64_t>(kTaskBytes / per_tile_bytes / NR * NR, NR, kMaxTaskTiles);
  run = std::min(run, gemm::round_up(tiles, NR));
  const int64_t outer = c.batch * c.groups;
  while (run > NR && outer * ceil_div(tiles, run) < threads)
    run -= NR;
  const int64_t runs = ceil_div(tiles, run);
  // Rows of V and M: a run's tiles, the last vector's overhang past them, and a vector more, so
  // that a row's length is never a large power of two (the rows would then share cache sets).
  const int64_t ld = gemm::round_up(run, L) + 2 * L;
  // The window's columns: every tile's 4, the further blocks' 3 each, and the overhang of the last
  // vectors' loads.
  const int64_t win_width = 2 * gemm::round_up(tiles_w, L) + 2 + 2 * L + 3 * (c.blocks_w() - 1);
  const int64_t win_elems = (2 * ceil_div(run, tiles_w) + 6 + 3 * (c.blocks_h() - 1)) * win_width;
  const int64_t v_elems = kPoints * reduce * ld, m_elems = kPoints * oc_pad * ld;
  parallel_for(
      threads, outer * runs, [&] { return Workspace<float>(v_elems + m_elems + win_elems); },
      [&](Workspace<float>& ws, int64_t t) {
        const int64_t n = t / (c.groups * runs), g = t / runs % c.groups, k = t % runs;
        const int64_t t0 = k * run, t1 = std::min(tiles, t0 + run), count = t1 - t0;
        float* v = ws.data();
        float* m = v + v_elems;
        float* win = m + m_elems;
        // V: point xi of block b's input channel i at v + (xi * reduce + b * ic + i) * ld, tiles
        // along the row; block (bh, bw) reads the window 3 bh rows and 3 bw columns further.
        const Window wd = window_of(c, t0 / tiles_w, (t1 - 1) / tiles_w, win_width);
        std::fill_n(win, wd.rows * wd.width, 0.0f);
        for (int64_t i = 0; i < c.ic; ++i) {
          fill_window(c, wd, in + (n * c.in_channels + g * c.ic + i) * c.in_h * c.in_w, win);
          for (int64_t b = 0; b < c.blocks_h() * c.blocks_w(); ++b) {
            const int64_t shift = 3 * (b / c.blocks_w()) * win_width + 3 * (b % c.blocks_w());
            for_segments(t0, t1, tiles_w, [&](const Segment& s) {
              transform_windows(win + 2 * (s.ty - t0 / tiles_w) * win_width + 2 * s.tx0 + shift,
                                win_width, s.tx1 - s.tx0, v + (b * c.ic + i) * ld + s.local,
                                reduce * ld);
            });
          }
        }
        // The last register tile's columns past the run: zeros, not a previous task's values
        // (which could be denormals, slow in the products, though no output reads them).
        const int64_t tail = gemm::round_up(count, NR);
        for (int64_t r = 0; r < kPoints * reduce; ++r)
          std::fill(v + r * ld + count, v + r * ld + tail, 0.0f);
        // M_xi = U_xi V_xi: point xi of output channel o at m + (xi * oc_pad + o) * ld, the run's
        // tiles only (the output transform's vectors read past them, into lanes it never stores).
        const float* ug = u.data() + g * kPoints * oc_pad * reduce;
        for (int xi = 0; xi < kPoints; ++xi) {
          const float* vx = v + xi * reduce * ld;
          for (int64_t j = 0; j < count; j += NR) {
            for (int64_t p = 0; p < panels; ++p) {
              // The backend GEMM's register tile, B's rows (V's) read in place, ld apart.
              gemm::run_tile(reduce, ug + (xi * oc_pad + p * MR) * reduce, vx + j,
                             m + (xi * oc_pad + p * MR) * ld + j, ld, false,
                             static_cast<int>(std::min<int64_t>(MR, c.oc - p * MR)),
                             static_cast<int>(std::min<int64_t>(NR, count - j)), ld);
            }
          }
        }
        for (int64_t o = 0; o < c.oc; ++o) {
          const int64_t co = g * c.oc + o;
          float* plane = out + (n * c.out_channels + co) * c.out_h * c.out_w;
          const float b = bias != nullptr ? bias[co] : 0.0f;
          for_segments(t0, t1, tiles_w, [&](const Segment& s) {
            transform_outputs(c, m + o * ld, oc_pad * ld, s, b, plane);
          });
        }
      });
}

}  // namespace

bool winograd_suits(const Plan& pl, int64_t elem_bytes) {
  if (elem_bytes != 4) return false;
  if (pl.stride_h != 1 || pl.stride_w != 1 || pl.dil_h != 1 || pl.dil_w != 1) return false;
  // Each 3 x 3 block of the filter costs 4 multiplies an output, where the direct kernel spends one
  // per tap: from 7 taps a block (3 x 3, 3 x 5: 1.1x-1.2x the direct kernel, 3 x 7) the transforms
  // paid for themselves; with fewer (5 x 5: 0.87x, 7 x 7, 4 x 4, 2 x 2: 0.55x-0.7x) they did not.
  // Past 9 taps a side the window's rows grow and no layer was measured.
  const int64_t blocks = ceil_div(pl.kernel_h, 3) * ceil_div(pl.kernel_w, 3);
  if (pl.taps < kWinogradMinTapsPerBlock * blocks || pl.kernel_h > 9 || pl.kernel_w > 9)
    return false;
  // The transforms cost per channel and tile what the products cost per pair of channels: with
  // few channels on either side they are most of the time.
  if (pl.cig < kWinogradMinChannels || pl.cog < kWinogradMinChannels) return false;
  // The transforms run a vector per row of tiles: with fewer than 3/8 of its lanes used (7 x 7
  // planes, 4 tiles a row) they measured slower than the direct kernel; 14 x 14 (7 a row) faster.
  // A task's window holds whole rows: their width is bounded.
  const int64_t narrow = std::min(pl.in_w, pl.out_w), wide = std::max(pl.in_w, pl.out_w);
  if (8 * ceil_div(narrow, 2) < 3 * L || wide > kWinogradMaxWidth) return false;
  // Every task reads all of its group's filter transforms (16 values per pair of channels and
  // block): past kWinogradMaxFilterBytes (3 x 3, 512 x 256 channels and up) they came from memory
  // and the products ran no faster than the direct kernel.
  return fits(pl.cig * pl.cog, kPoints * blocks, 4, kWinogradMaxFilterBytes);
}

void winograd_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  const Corr c = dgrad_corr(pl);
  // dx[ci] reads dy[co] through w[ci, co, a, b] as it lies.
  const auto filter = [&](int64_t g, int64_t o, int64_t i, int64_t a, int64_t b) -> double {
    return w[((g * pl.cig + o) * pl.cog + i) * pl.taps + a * pl.kernel_w + b];
  };
  winograd(c, dy, filter, nullptr, dx, threads);
}

void winograd_forward(const Plan& pl, const float* x, const float* w, const float* bias, float* y,
                      int threads) {
  const Corr c = forward_corr(pl);
  // y[co] reads x[ci] through w[ci, co] flipped in both taps.
  const auto filter = [&](int64_t g, int64_t o, int64_t i, int64_t a, int64_t b) -> double {
    return w[((g * pl.cig + i) * pl.cog + o) * pl.taps + (pl.kernel_h - 1 - a) * pl.kernel_w +
             (pl.kernel_w - 1 - b)];
  };
  winograd(c, x, filter, bias, y, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
