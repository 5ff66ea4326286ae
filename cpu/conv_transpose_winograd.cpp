// Winograd's F(2x2, 3x3) for the forward and dgrad of stride-1 undilated layers in float32, and
// its dual F(3x3, 2x2) for their wgrad (its section below): 3x3 kernels (DeconvNet's and many
// decoders' refinement layers) and larger ones cut into 3 x 3 blocks (S5's 3 x 7), the shapes
// winograd_suits takes. The forward and dgrad are then the same correlation:
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

// B^T d B of a 4 x 4 window d (d[r][c]: row r, column c, a vector of windows or of channels),
// point (i, j) stored at out + (i * 4 + j) * point; B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
inline void store_window_transform(const Vec (&d)[4][4], float* out, int64_t point) {
  Vec t[4][4];
  for (int r = 0; r < 4; ++r) {  // d B
    t[r][0] = d[r][0] - d[r][2];
    t[r][1] = d[r][1] + d[r][2];
    t[r][2] = d[r][2] - d[r][1];
    t[r][3] = d[r][1] - d[r][3];
  }
  for (int b = 0; b < 4; ++b) {  // B^T (d B)
    store(out + (0 * 4 + b) * point, t[0][b] - t[2][b]);
    store(out + (1 * 4 + b) * point, t[1][b] + t[2][b]);
    store(out + (2 * 4 + b) * point, t[2][b] - t[1][b]);
    store(out + (3 * 4 + b) * point, t[1][b] - t[3][b]);
  }
}

// V for one input channel over a segment, L tiles at a time: point xi of local tile t at
// v[xi * v_point + t]. Lanes past the segment's end are written too (the next segment's first
// vector overwrites them, and past the task's last tile they are never read into an output).
void transform_windows(const float* window, int64_t width, int64_t count, float* v,
                       int64_t v_point) {
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t k = 0; k < count; k += L) {
    Vec d[4][4];
    for (int r = 0; r < 4; ++r) {
      const float* row = window + r * width + 2 * k;
      const Vec a0 = load(row), a1 = load(row + L), b0 = load(row + 2), b1 = load(row + 2 + L);
      d[r][0] = even_lanes(a0, a1, lanes);
      d[r][1] = odd_lanes(a0, a1, lanes);
      d[r][2] = even_lanes(b0, b1, lanes);
      d[r][3] = odd_lanes(b0, b1, lanes);
    }
    store_window_transform(d, v + k, v_point);
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

// ---- wgrad ----
//   dw[i, o, a, b] = sum over n, h, w of x[i, h, w] dy[o, h - ph + a, w - pw + b]
// The same correlation with the roles turned: per 2 x 2 tile of x, the 3 x 3 taps of a block are
// Winograd's F(3x3, 2x2), the dual of the forward's F(2x2, 3x3) on the same points:
//   dw block += G'^T [ (A' X A'^T) (.) (B^T D B) ] G'
// with X the tile of x, D the 4 x 4 window of dy above it (shifted 3 rows or columns per block),
// B^T the forward's, A'^T = [1 1 1 0; 0 1 -1 1] and G'^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2
// -1] (the forward's A and G, point 3's sign moved from the tile's transform to the output's). The
// output transform is linear, so the products are summed over every tile first, per point a
// product over the tiles M_xi (i x (block, o)) = X_xi D_xi^T, and G'^T M G' is taken once at the
// end: per tile, 16 multiplies per pair of channels and block where the direct kernel does 36 (4
// positions x 9 taps).
//
// The transforms run on channels-last copies of a chunk's rows of x and dy, vectors over
// channels, and write each point's values channels-last, tile after tile: the register tile (2
// vectors of x channels by kRows columns of M) then reads both as the direct wgrad's does (2
// loads and kRows broadcasts a tile), with no packing. (Transforms vectorised over tiles, as the
// forward's, need M's operands transposed: the GEMM's packing took two thirds of its products'
// time there.)
//
// The tiles of the batch are cut by the shape into chunks and slices of chunks (sums of their
// own, added in slice order); a task takes a (slice, group, part of the points), its chunks in
// order, each register tile summing a chunk's tiles in order onto its sums: every element of M,
// and so of dw, is the same sequence of operations for any thread count. Float64 keeps the direct
// kernel, the reference this is checked against.

constexpr int kWgradVecs = 2;            // vectors of x channels per register tile
constexpr int kWgradCols = gemm::kRows;  // columns of M per register tile
// A chunk's transforms (16 points of every channel on both sides) about kWgradChunkBytes, whole
// rows of tiles where one fits: written, then read back by the products, from L2 (S5's wgrad at
// 768 KiB ran 1.05x slower, at 3 MiB 1.4x; 96-384 KiB alike).
constexpr int64_t kWgradChunkBytes = int64_t{256} << 10;
// Every chunk's products load and store all of M (16 points of every pair of channels and block),
// so a chunk has kWgradMinChunk tiles at least, and M at most kWgradMaxSumsBytes per group:
// 256 -> 256 channels on 14 x 14 (4 MiB of M, chunks of 8 tiles, then 32) ran 0.75x, then 0.88x,
// the direct kernel; 128 -> 128 on 28 x 28 (1 MiB) 1.2x-1.4x faster.
constexpr int64_t kWgradMinChunk = 32;
constexpr int64_t kWgradMaxSumsBytes = int64_t{1} << 20;
// Slices: about kWgradSliceTiles tiles each, at most kWgradMaxSlices, their sums within
// kWgradMaxSlicesBytes (threads add them up after the chains, one thread as it goes). The pass
// needs kWgradMinSlices: with fewer, the threads past them share a slice's points, each copying
// and transforming its chunks again, and at 16 threads small layers (400-1100 tiles, one slice of
// 512) ran 0.4x-0.8x the direct kernel. Sharing one buffer of a slice's transforms instead was no
// faster: 4-12 times x's and dy's size, it went to memory and back.
constexpr int64_t kWgradSliceTiles = 256;
constexpr int64_t kWgradMaxSlices = 16;
constexpr int64_t kWgradMaxSlicesBytes = int64_t{4} << 20;
constexpr int64_t kWgradMinSlices = 8;

// Corr with dy as the plane read through windows (ic: its channels) and x's plane as the grid of
// tiles (oc: x's channels).
Corr wgrad_corr(const Plan& pl) {
  return {pl.batch, pl.groups, pl.cog,  pl.cig,   pl.out_channels, pl.in_channels, pl.out_h,
          pl.out_w, pl.in_h,   pl.in_w, pl.pad_h, pl.pad_w,        pl.kernel_h,    pl.kernel_w};
}

// The sizes of the pass: channels padded to whole vectors (zeros past them), M's columns
// (block, dy channel), its register tiles, and a chunk's tiles.
struct WgradShape {
  int64_t cx, cd, cols, x_blocks, col_tiles, tile_elems, point_elems, chunk, chunks, slices;
};

WgradShape wgrad_shape(const Corr& c) {
  WgradShape w{};
  w.cx = gemm::round_up(c.oc, L);
  w.cd = gemm::round_up(c.ic, L);
  w.cols = c.blocks_h() * c.blocks_w() * w.cd;
  w.x_blocks = ceil_div(w.cx, kWgradVecs * L);
  w.col_tiles = ceil_div(w.cols, kWgradCols);
  w.tile_elems = kWgradVecs * kWgradCols * L;
  w.point_elems = w.x_blocks * w.col_tiles * w.tile_elems;
  const int64_t per_tile = kPoints * (w.cx + w.cols) * int64_t{sizeof(float)};
  const int64_t target = std::max<int64_t>(kWgradMinChunk, kWgradChunkBytes / per_tile);
  w.chunk = c.tiles_w() <= target ? target / c.tiles_w() * c.tiles_w() : target;
  const int64_t all_tiles = c.batch * c.tiles();
  w.chunks = ceil_div(all_tiles, w.chunk);
  const int64_t sums_bytes = c.groups * kPoints * w.point_elems * int64_t{sizeof(float)};
  w.slices =
      std::clamp<int64_t>(std::min({all_tiles / kWgradSliceTiles, w.chunks, kWgradMaxSlices}), 1,
                          std::max<int64_t>(1, kWgradMaxSlicesBytes / sums_bytes));
  return w;
}

// A chunk's rows of one item, channels-last and zero-padded: x rows [2 ty0, 2 ty1 + 2) and the dy
// rows their windows read, [2 ty0 - ph, 2 ty1 - ph + 4 + 3 (blocks_h - 1)); column 0 of x's copy
// is plane column 2 tx0, of dy's plane column 2 tx0 - pw. Tiles of the rows between are whole,
// so columns [tx0, tx1) of the tile grid are copied only where the chunk holds part of one row.
struct ChunkRows {
  int64_t ty0, ty1, tx0, tx1;
  int64_t x_rows() const { return 2 * (ty1 - ty0 + 1); }
  int64_t x_cols() const { return 2 * (tx1 - tx0); }
  int64_t d_rows(const Corr& c) const { return x_rows() + 2 + 3 * (c.blocks_h() - 1); }
  int64_t d_cols(const Corr& c) const { return x_cols() + 2 + 3 * (c.blocks_w() - 1); }
};

void copy_chunk_rows(const Corr& c, const WgradShape& w, const ChunkRows& r, const float* x_plane,
                     const float* dy_plane, float* xcl, float* dcl) {
  const int64_t x_rows = r.x_rows(), x_cols = r.x_cols();
  std::fill_n(xcl, x_rows * x_cols * w.cx, 0.0f);
  const int64_t x_col0 = 2 * r.tx0, x_n = std::clamp<int64_t>(c.out_w - x_col0, 0, x_cols);
  for (int64_t k = 0; k < x_rows && 2 * r.ty0 + k < c.out_h; ++k) {
    rows_to_lanes(x_plane + (2 * r.ty0 + k) * c.out_w + x_col0, c.out_h * c.out_w, c.oc, x_n,
                  xcl + k * x_cols * w.cx, w.cx);
  }
  const int64_t d_rows = r.d_rows(c), d_cols = r.d_cols(c);
  std::fill_n(dcl, d_rows * d_cols * w.cd, 0.0f);
  const int64_t d_row0 = 2 * r.ty0 - c.ph, d_col0 = 2 * r.tx0 - c.pw;
  const int64_t j0 = std::clamp<int64_t>(-d_col0, 0, d_cols);
  const int64_t j1 = std::clamp<int64_t>(c.in_w - d_col0, j0, d_cols);
  for (int64_t k = std::max<int64_t>(0, -d_row0); k < d_rows && d_row0 + k < c.in_h; ++k) {
    rows_to_lanes(dy_plane + (d_row0 + k) * c.in_w + d_col0 + j0, c.in_h * c.in_w, c.ic, j1 - j0,
                  dcl + (k * d_cols + j0) * w.cd, w.cd);
  }
}

// The transforms of the chunk's tiles [t0, t1) of one item (their rows copied as `r`), into
// x_hat (point xi of local tile t at x_hat + (t * kPoints + xi) * cx) and d_hat (+ (t * kPoints +
// xi) * cols + block * cd), local tiles from `local`: a tile's values together, as they are
// written (point by point, 16 arrays a chunk apart, S5's wgrad ran 1.03x-1.1x slower).
void transform_chunk_tiles(const Corr& c, const WgradShape& w, const ChunkRows& r, int64_t t0,
                           int64_t t1, const float* xcl, const float* dcl, int64_t local,
                           float* x_hat, float* d_hat) {
  // Sizes in locals: the stores (through memcpy) could alias the structs' fields, which would
  // then be read again after each one.
  const int64_t tiles_w = c.tiles_w(), x_cols = r.x_cols(), d_cols = r.d_cols(c);
  const int64_t bw = c.blocks_w(), blocks = c.blocks_h() * bw;
  const int64_t cx = w.cx, cd = w.cd, cols = w.cols;
  const int64_t x_point = cx, d_point = cols, d_row = d_cols * cd;
  for (int64_t t = t0; t < t1; ++t, ++local) {
    const int64_t ty = t / tiles_w - r.ty0, tx = t % tiles_w - r.tx0;
    const float* x0 = xcl + (2 * ty * x_cols + 2 * tx) * cx;
    float* xh = x_hat + local * kPoints * cx;
    for (int64_t v = 0; v < cx; v += L) {
      const Vec x00 = load(x0 + v), x01 = load(x0 + cx + v);
      const Vec x10 = load(x0 + x_cols * cx + v), x11 = load(x0 + (x_cols + 1) * cx + v);
      const Vec s0[4] = {x00, x00 + x01, x00 - x01, x01};
      const Vec s1[4] = {x10, x10 + x11, x10 - x11, x11};
      for (int q = 0; q < 4; ++q) {
        store(xh + (0 * 4 + q) * x_point + v, s0[q]);
        store(xh + (1 * 4 + q) * x_point + v, s0[q] + s1[q]);
        store(xh + (2 * 4 + q) * x_point + v, s0[q] - s1[q]);
        store(xh + (3 * 4 + q) * x_point + v, s1[q]);
      }
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const float* d0 = dcl + (2 * ty + 3 * (b / bw)) * d_row + (2 * tx + 3 * (b % bw)) * cd;
      float* dh = d_hat + local * kPoints * cols + b * cd;
      for (int64_t v = 0; v < cd; v += L) {
        Vec d[4][4];
        for (int k = 0; k < 4; ++k)
          for (int j = 0; j < 4; ++j)
            d[k][j] = load(d0 + k * d_row + j * cd + v);
        store_window_transform(d, dh + v, d_point);
      }
    }
  }
}

// acc[v][j] (at acc_in, from zero when `first`) += sum over t < count, in order, of
// x[t * ldx + v * L ..] d[t * ldd + j]; stored at acc_out, or added to what is there (`add`).
template <int V, int J>
void wgrad_point_tile(const float* __restrict x, int64_t ldx, const float* __restrict d,
                      int64_t ldd, int64_t count, bool first, const float* acc_in, float* acc_out,
                      bool add) {
  Vec acc[V][J];
  load_sums(acc, acc_in, first);
  for (int64_t t = 0; t < count; ++t) {
    Vec xv[V];
    for (int v = 0; v < V; ++v)
      xv[v] = load(x + t * ldx + v * L);
    for (int j = 0; j < J; ++j) {
      const float s = d[t * ldd + j];
      for (int v = 0; v < V; ++v)
        acc[v][j] += s * xv[v];
    }
  }
  if (add) {
    Vec before[V][J];
    load_sums(before, acc_out, false);
    for (int v = 0; v < V; ++v)
      for (int j = 0; j < J; ++j)
        acc[v][j] = before[v][j] + acc[v][j];
  }
  store_sums(acc, acc_out);
}

// z = G'^T m for one line of 4 points: G'^T = [1 1/2 1/2 0; 0 1/2 -1/2 0; 0 1/2 1/2 -1].
inline void untransform(double m0, double m1, double m2, double m3, double (&z)[3]) {
  z[0] = m0 + 0.5 * (m1 + m2);
  z[1] = 0.5 * (m1 - m2);
  z[2] = 0.5 * (m1 + m2) - m3;
}

// dw from the summed M of every group (G'^T M G' per pair of channels and block, in double), the
// taps inside the kernel written. M's element (i, col) of point xi lies in register tile
// (i / 2L, col / kWgradCols), as load_sums keeps it.
void wgrad_outputs(const Corr& c, const WgradShape& w, const float* m, float* dw, int threads) {
  const int64_t taps = c.kh * c.kw;
  parallel_for(threads, c.groups * c.oc, [&](int64_t t) {
    const int64_t g = t / c.oc, i = t % c.oc;
    const int64_t xb = i / (kWgradVecs * L), v = i % (kWgradVecs * L) / L, lane = i % L;
    const float* mg = m + g * kPoints * w.point_elems;
    for (int64_t block = 0; block < c.blocks_h() * c.blocks_w(); ++block) {
      const int64_t a0 = 3 * (block / c.blocks_w()), b0 = 3 * (block % c.blocks_w());
      for (int64_t o = 0; o < c.ic; ++o) {
        const int64_t col = block * w.cd + o, ct = col / kWgradCols;
        const int64_t cols = std::min<int64_t>(kWgradCols, w.cols - ct * kWgradCols);
        const int64_t at =
            (xb * w.col_tiles + ct) * w.tile_elems + (v * cols + col % kWgradCols) * L + lane;
        // G'^T on the columns of the 4 x 4 points, then on the rows of the result.
        double p[4][4], s[4][3];
        for (int xi = 0; xi < kPoints; ++xi)
          p[xi / 4][xi % 4] = mg[xi * w.point_elems + at];
        for (int q = 0; q < 4; ++q)
          untransform(p[0][q], p[1][q], p[2][q], p[3][q], s[q]);
        // dw is (in channels, out channels of the group, kh, kw): c.oc is x's side, c.ic dy's.
        float* out = dw + ((g * c.oc + i) * c.ic + o) * taps;
        for (int a = 0; a < 3 && a0 + a < c.kh; ++a) {
          double z[3];
          untransform(s[0][a], s[1][a], s[2][a], s[3][a], z);
          for (int b = 0; b < 3 && b0 + b < c.kw; ++b)
            out[(a0 + a) * c.kw + b0 + b] = static_cast<float>(z[b]);
        }
      }
    }
  });
}

// x and dy are not empty (conv_transpose_wgrad answers an empty call with zeros).
void winograd_wgrad_corr(const Corr& c, const float* x, const float* dy, float* dw, int threads) {
  const WgradShape w = wgrad_shape(c);
  const int64_t tiles = c.tiles(), tiles_w = c.tiles_w(), all_tiles = c.batch * tiles;
  const int64_t chunks = w.chunks, slices = w.slices;
  const int64_t group_elems = kPoints * w.point_elems;
  const int64_t sums_elems = c.groups * group_elems;
  // Parts of the 16 points where slices and groups leave threads idle (kWgradMinSlices above):
  // each part copies and transforms its chunks again for the chains of its points.
  const int64_t parts =
      std::clamp<int64_t>(ceil_div(int64_t{threads}, slices * c.groups), 1, kPoints / 2);
  // One thread runs the slices in order and adds each into the total as it ends (below).
  const bool stream = threads == 1 && slices > 1;
  const Workspace<float> sums((stream ? 2 : slices) * sums_elems);
  // A piece's rows of one item: whole rows of tiles (at most ceil(chunk / tiles_w) + 1), or part of
  // one row where a row is wider than a chunk.
  const int64_t tile_rows = ceil_div(w.chunk, tiles_w) + 1;
  const int64_t grid_cols = std::min(tiles_w, w.chunk);
  const int64_t x_elems = 2 * tile_rows * 2 * grid_cols * w.cx;
  const int64_t d_elems = (2 * tile_rows + 2 + 3 * (c.blocks_h() - 1)) *
                          (2 * grid_cols + 2 + 3 * (c.blocks_w() - 1)) * w.cd;
  const int64_t hat_elems = kPoints * w.chunk * (w.cx + w.cols);
  parallel_for(
      threads, slices * c.groups * parts,
      [&] { return Workspace<float>(x_elems + d_elems + hat_elems); },
      [&](Workspace<float>& ws, int64_t t) {
        const int64_t s = t / (c.groups * parts), g = t / parts % c.groups, part = t % parts;
        const int xi0 = static_cast<int>(kPoints * part / parts);
        const int xi1 = static_cast<int>(kPoints * (part + 1) / parts);
        float* xcl = ws.data();
        float* dcl = xcl + x_elems;
        float* x_hat = dcl + d_elems;
        float* d_hat = x_hat + kPoints * w.chunk * w.cx;
        float* m = sums.data() + (stream ? 1 : s) * sums_elems + g * group_elems;
        float* total = sums.data() + g * group_elems;
        const int64_t k0 = chunks * s / slices, k1 = chunks * (s + 1) / slices;
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t first = k * w.chunk, count = std::min(w.chunk, all_tiles - first);
          for (int64_t done = 0; done < count;) {  // an item's tiles at a time
            const int64_t n = (first + done) / tiles, t0 = (first + done) % tiles;
            int64_t t1 = std::min(tiles, t0 + count - done);
            // Rows wider than a chunk go a row at a time: a piece is whole rows or part of one.
            if (tiles_w > w.chunk) t1 = std::min(t1, (t0 / tiles_w + 1) * tiles_w);
            ChunkRows r{t0 / tiles_w, (t1 - 1) / tiles_w, 0, tiles_w};
            if (r.ty0 == r.ty1) r.tx0 = t0 % tiles_w, r.tx1 = (t1 - 1) % tiles_w + 1;
            copy_chunk_rows(c, w, r, x + (n * c.out_channels + g * c.oc) * c.out_h * c.out_w,
                            dy + (n * c.in_channels + g * c.ic) * c.in_h * c.in_w, xcl, dcl);
            transform_chunk_tiles(c, w, r, t0, t1, xcl, dcl, done, x_hat, d_hat);
            done += t1 - t0;
          }
          const int64_t x_step = kPoints * w.cx, d_step = kPoints * w.cols;  // a tile's
          // One thread's last chunk of a slice ends its sums in the total (slot 0), added to the
          // slices before it: sum_parts_in_order's arithmetic, with no pass over partial sums.
          const bool to_total = stream && k == k1 - 1;
          for (int xi = xi0; xi < xi1; ++xi) {
            for (int64_t xb = 0; xb < w.x_blocks; ++xb) {
              const int vecs =
                  static_cast<int>(std::min<int64_t>(kWgradVecs, (w.cx - xb * kWgradVecs * L) / L));
              const float* xp = x_hat + xi * w.cx + xb * kWgradVecs * L;
              for (int64_t ct = 0; ct < w.col_tiles; ++ct) {
                const int cols =
                    static_cast<int>(std::min<int64_t>(kWgradCols, w.cols - ct * kWgradCols));
                const float* dp = d_hat + xi * w.cols + ct * kWgradCols;
                const int64_t at = xi * w.point_elems + (xb * w.col_tiles + ct) * w.tile_elems;
                float* out = (to_total ? total : m) + at;
                gemm::with_count<kWgradCols>(cols, [&]<int J>() {
                  if (vecs == kWgradVecs) {
                    wgrad_point_tile<kWgradVecs, J>(xp, x_step, dp, d_step, count, k == k0, m + at,
                                                    out, to_total && s > 0);
                  } else {
                    wgrad_point_tile<1, J>(xp, x_step, dp, d_step, count, k == k0, m + at, out,
                                           to_total && s > 0);
                  }
                });
              }
            }
          }
        }
      });
  const Workspace<float> total(slices > 1 && !stream ? sums_elems : 0);
  if (slices > 1 && !stream)
    sum_parts_in_order(sums.data(), slices, sums_elems, total.data(), threads);
  wgrad_outputs(c, w, slices > 1 && !stream ? total.data() : sums.data(), dw, threads);
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

// The forward's shapes (the same transforms, points and bounds), with a group's M, channels
// padded to whole vectors, within kWgradMaxSumsBytes, and kWgradMinSlices slices.
bool winograd_wgrad_suits(const Plan& pl, int64_t elem_bytes) {
  if (!winograd_suits(pl, elem_bytes)) return false;
  const int64_t blocks = ceil_div(pl.kernel_h, 3) * ceil_div(pl.kernel_w, 3);
  if (!fits(gemm::round_up(pl.cig, L) * gemm::round_up(pl.cog, L), kPoints * blocks, 4,
            kWgradMaxSumsBytes))
    return false;
  return wgrad_shape(wgrad_corr(pl)).slices >= kWgradMinSlices;
}

void winograd_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  const Corr c = dgrad_corr(pl);
  // dx[ci] reads dy[co] through w[ci, co, a, b] as it lies.
  const auto filter = [&](int64_t g, int64_t o, int64_t i, int64_t a, int64_t b) -> double {
    return w[((g * pl.cig + o) * pl.cog + i) * pl.taps + a * pl.kernel_w + b];
  };
  winograd(c, dy, filter, nullptr, dx, threads);
}

void winograd_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads) {
  winograd_wgrad_corr(wgrad_corr(pl), x, dy, dw, threads);
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
