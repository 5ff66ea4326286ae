// ConvTranspose weight and bias gradients on the CPU (conv_transpose.cpp has the other passes;
// conv_transpose_direct.cpp the direct wgrad that the shapes it suits take instead of this;
// few columns and few rows take the products below, wgrad_few_columns and wgrad_few_rows, and
// few output or input channels at AVX-512 the one by stride phases, phase_wgrad; the dgrad of
// few input channels, phase_dgrad, is here too, on the same phase planes of dy):
//   wgrad: dw_g[ci, r] = sum over the (n, p) columns of x_g[ci, (n, p)] cols[r, (n, p)], with
//          cols = im2col(dy) as in dgrad;  db = sum of dy.
// Tasks own blocks of dw (a group, a block of output channels, a block of input channels) and run
// their reduction in one fixed order; only when that gives too few tasks is the reduction also
// cut into slices, summed in slice order. The output-channel and slice cuts depend on the shape
// only and the input-channel cut, for the threads, cannot change a bit (channel_cut), so results
// are bit-identical for any thread count.
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "cpu/conv_transpose_cols.h"
#include "cpu/eigen_product.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS {
namespace {

using namespace conv;  // NOLINT(google-build-using-namespace): the column machinery

constexpr int64_t kMaxWgradSlices = 32;  // the reduction is cut into at most this many parts
constexpr int64_t kMaxWgradPartialBytes = int64_t{64} << 20;

// Calls f.template operator()<CC, JJ>() with CC = channels (1 to C) and JJ = cols (1 to J): the
// products' register tiles, each size its own instance (a register array).
template <int C, int J, class F>
void with_tile(int channels, int cols, F&& f) {
  [&]<int... CI, int... JI>(std::integer_sequence<int, CI...>, std::integer_sequence<int, JI...>) {
    const auto with_channels = [&]<int CC>() {
      ((cols == JI + 1 ? f.template operator()<CC, JI + 1>() : void()), ...);
    };
    ((channels == CI + 1 ? with_channels.template operator()<CI + 1>() : void()), ...);
  }
  (std::make_integer_sequence<int, C>{}, std::make_integer_sequence<int, J>{});
}

// The L lanes of a vector of sums, added in lane order.
template <int L, class T>
T lane_sum(const T* lanes) {
  T sum = lanes[0];
  for (int l = 1; l < L; ++l)
    sum += lanes[l];
  return sum;
}

// wgrad for few columns (conv_transpose_cols.h, kFewColumns): dw_g (cig x rows) = x_g (cig x C)
// cols^T (C x rows), C = batch x in_hw. dw is the large operand here (a vocoder's first
// upsampler: 2M elements from 32 columns) and the product is bound by writing it: the GEMM path
// below sums each block in a buffer and copies it out, and reads every line of dw before writing
// it. Here each register tile is written once, in place, by streaming stores where dw's rows are
// whole vectors (no read of the line first; dw is far larger than the caches). Register tile:
// kRows input channels by two vectors of a panel of cols^T, over the C columns in order: each
// element of dw is one chain, whatever the task.

template <class T>
void wgrad_few_columns(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int R = gemm::kRows, NR = gemm::kCols<T>;
  const int64_t columns = pl.batch * pl.in_hw;
  const int64_t panels = ceil_div(pl.rows, int64_t{NR});
  // x as (in_channels x C), the items side by side: x itself for one item.
  const Workspace<T> xs_copy(pl.batch > 1 ? pl.in_channels * columns : 0);
  const T* xs = x;
  if (pl.batch > 1) {
    parallel_for(threads, pl.in_channels, [&](int64_t c) {
      for (int64_t n = 0; n < pl.batch; ++n)
        std::copy_n(x + (n * pl.in_channels + c) * pl.in_hw, pl.in_hw,
                    xs_copy.data() + c * columns + n * pl.in_hw);
    });
    xs = xs_copy.data();
  }
  // Streaming stores need every vector of a tile aligned: dw's start and its rows.
  const bool stream = kStreamingStores && reinterpret_cast<uintptr_t>(dw) % gemm::kVecBytes == 0 &&
                      pl.rows * static_cast<int64_t>(sizeof(T)) % gemm::kVecBytes == 0;
  // Tasks: runs of panels of a group, kMinTasks of them where the panels allow; each runs every
  // block of input channels over a panel while the panel is in L1. A task builds the rows of
  // cols = im2col(dy) that its panels take (its output channels'; a channel whose taps two runs
  // share is copied by both) in a buffer of its own, and packs each panel of cols^T (C x NR, a
  // tile's loads contiguous) from there just before its products: no pass over the whole of cols
  // between the tasks, and the panel is written and read while in L1.
  const int64_t runs = std::clamp<int64_t>(ceil_div(kMinTasks, pl.groups), 1, panels);
  const int64_t run_rows = ceil_div(panels, runs) * NR + 2 * pl.taps;  // a run's channels' rows
  const int64_t panel_at = gemm::round_up(run_rows * columns, NR);  // the panel's vectors aligned
  parallel_for(
      threads, pl.groups * runs, [&] { return Workspace<T>(panel_at + NR * columns); },
      [&](Workspace<T>& scratch, int64_t t) {
        const int64_t g = t / runs, run = t % runs;
        const int64_t j0 = panels * run / runs, j1 = panels * (run + 1) / runs;
        if (j0 == j1) return;
        const int64_t co0 = j0 * NR / pl.taps;
        const int64_t co1 = std::min(pl.cog, ceil_div(j1 * NR, pl.taps));
        T* const cols = scratch.data();  // rows of channels [co0, co1), columns apart
        T* const panel = cols + panel_at;
        im2col_block(pl, dy, g, ColBlock{0, pl.batch, 0, pl.in_hw}, co0, co1, cols, columns);
        T edge[R * NR];  // a panel past the end of dw's rows: its tiles go through here
        for (int64_t j = j0; j < j1; ++j) {
          const int64_t r0 = j * NR, width = std::min<int64_t>(NR, pl.rows - r0);
          gemm::pack_panel<T, NR>(cols + (r0 - co0 * pl.taps) * columns, columns, 1,
                                  static_cast<int>(width), columns, panel);
          for (int64_t c0 = 0; c0 < pl.cig; c0 += R) {
            const int rows = static_cast<int>(std::min<int64_t>(R, pl.cig - c0));
            const T* x_rows[R];
            for (int r = 0; r < R; ++r)  // rows past cig repeat the last: computed, not stored
              x_rows[r] = xs + (g * pl.cig + c0 + std::min(r, rows - 1)) * columns;
            T* out = dw + (g * pl.cig + c0) * pl.rows + r0;
            if (width == NR) {
              few_columns_tile<T, R, 2>(x_rows, panel, NR, columns, out, pl.rows, rows, stream);
              continue;
            }
            few_columns_tile<T, R, 2>(x_rows, panel, NR, columns, edge, NR, rows, false);
            for (int r = 0; r < rows; ++r)
              std::copy_n(edge + r * NR, width, out + r * pl.rows);
          }
        }
        if (stream) fence_streams();  // the streamed stores are seen before the task is done
      });
}

// wgrad for few rows (conv_transpose_cols.h, few_rows_fit): dw_g (cig x rows) = x_g (cig x P)
// cols^T (P x rows) with rows = cog x taps small and P = batch x in_hw long. x, the large
// operand, is read once, as it lies; cols (rows x P), built once, stays in L2. The GEMM path cut P
// into slices of partial dw, each packing its block of x again. Register tile: kFewRowsChannels
// input channels by kFewRowsRows rows, each sum a vector over positions (lanes), reduced across
// lanes at the end in lane order: each element of dw is one chain over (n, p) whatever the task. A
// task runs all its rows over a chunk of positions before the next chunk, so that reading x from
// memory overlaps the arithmetic of every row block.
// AVX-512: 24 accumulators of 32 registers. Below it 8 of 16: 4 x 6 spilled there, and 2 x 4
// measured fastest of the tiles that fit (docs/performance.md).
constexpr int kFewRowsChannels = gemm::kVecRegisters >= 32 ? 4 : 2;
constexpr int kFewRowsRows = gemm::kVecRegisters >= 32 ? 6 : 4;
constexpr int64_t kFewRowsChunk = 512;  // positions, a multiple of every level's lanes

// acc[c][j] (vectors over positions, at acc_mem, zero when `first`) += x_c[p] cols_j[p] for p in
// [0, len), x_c = x + c * x_ld and cols_j = cols + j * ld; the last partial vector zero-padded.
template <class T, int C, int J>
void few_rows_wgrad_run(const T* x, int64_t x_ld, const T* cols, int64_t ld, int64_t len,
                        bool first, T* acc_mem) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  Vec acc[C][J];
  load_sums(acc, acc_mem, first);
  const auto step = [&](const T* xp, int64_t xs, const T* cp, int64_t cs) {
    Vec xv[C];
    for (int c = 0; c < C; ++c)
      std::memcpy(&xv[c], xp + c * xs, sizeof(Vec));
    for (int j = 0; j < J; ++j) {
      Vec cv;
      std::memcpy(&cv, cp + j * cs, sizeof(Vec));
      for (int c = 0; c < C; ++c)
        acc[c][j] += xv[c] * cv;
    }
  };
  const int64_t whole = len / L * L;
  for (int64_t p = 0; p < whole; p += L)
    step(x + p, x_ld, cols + p, ld);
  if (whole < len) {
    Vec xv[C];
    for (int c = 0; c < C; ++c)
      xv[c] = load_first<Vec>(x + c * x_ld + whole, len - whole);
    for (int j = 0; j < J; ++j) {
      const Vec cv = load_first<Vec>(cols + j * ld + whole, len - whole);
      for (int c = 0; c < C; ++c)
        acc[c][j] += xv[c] * cv;
    }
  }
  store_sums(acc, acc_mem);
}

// Each task (a block of kFewRowsChannels input channels) reads all of cols: it must stay in a
// core's L2. With 4 MiB of it (16 items of 64 x 64, one output channel) the product ran 0.6x the
// GEMM path, with 2 MiB (Conv-TasNet at batch 8) 0.9x; with 256 KiB (one item) 1.5x.
constexpr int64_t kFewRowsWgradColsBytes = int64_t{1} << 20;

bool wgrad_few_rows_suits(const Plan& pl, int64_t elem_bytes) {
  return few_rows_fit(pl, elem_bytes) &&
         fits(pl.groups * pl.rows, pl.batch * pl.in_hw, elem_bytes, kFewRowsWgradColsBytes);
}

template <class T>
void wgrad_few_rows(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int64_t C = kFewRowsChannels, J = kFewRowsRows;
  constexpr int L = gemm::kLanes<T>;
  const int64_t item_ld = few_rows_item_ld<T>(pl);
  const int64_t ld = few_rows_ld<T>(pl);
  const Workspace<T> cols(pl.groups * pl.rows * ld);
  few_rows_cols(pl, dy, cols.data(), threads);
  const int64_t row_blocks = ceil_div(pl.rows, J);
  const int64_t channel_blocks = ceil_div(pl.cig, C);
  parallel_for(
      threads, pl.groups * channel_blocks, [&] { return Workspace<T>(row_blocks * C * J * L); },
      [&](Workspace<T>& sums, int64_t t) {
        const int64_t g = t / channel_blocks, c0 = t % channel_blocks * C;
        const int channels = static_cast<int>(std::min(C, pl.cig - c0));
        for (int64_t n = 0; n < pl.batch; ++n) {
          const T* x_n = x + (n * pl.in_channels + g * pl.cig + c0) * pl.in_hw;
          const T* cols_n = cols.data() + g * pl.rows * ld + n * item_ld;
          for (int64_t p0 = 0; p0 < pl.in_hw; p0 += kFewRowsChunk) {
            const int64_t len = std::min(kFewRowsChunk, pl.in_hw - p0);
            const bool first = n == 0 && p0 == 0;
            for (int64_t rb = 0; rb < row_blocks; ++rb) {
              const int rows = static_cast<int>(std::min(J, pl.rows - rb * J));
              const T* xp = x_n + p0;
              const T* cp = cols_n + rb * J * ld + p0;
              T* acc = sums.data() + rb * C * J * L;
              with_tile<C, J>(channels, rows, [&]<int CC, int RR>() {
                few_rows_wgrad_run<T, CC, RR>(xp, pl.in_hw, cp, ld, len, first, acc);
              });
            }
          }
        }
        // dw[c0 + c, rb * J + j] = the lanes of tile rb's sum (c, j) added in lane order; the
        // tile of `rows` rows keeps them (c * rows + j) vectors from its start.
        for (int64_t rb = 0; rb < row_blocks; ++rb) {
          const int64_t rows = std::min(J, pl.rows - rb * J);
          const T* acc = sums.data() + rb * C * J * L;
          for (int c = 0; c < channels; ++c) {
            for (int64_t j = 0; j < rows; ++j) {
              dw[(g * pl.cig + c0 + c) * pl.rows + rb * J + j] =
                  lane_sum<L>(acc + (c * rows + j) * L);
            }
          }
        }
      });
}

// dw from the few-rows tiles' sums of `slices` slices, tile (g, cb, jb) of slice s at
// sums + (((s * groups + g) * channel_blocks + cb) * column_blocks + jb) * C * J * L:
// dw[g * cig + cb * C + c, jb * J + j] = the tile's sum (c, j) added over the slices in order, then
// its lanes in lane order. A tile of `cols` columns keeps sum (c, j) (c * cols + j) vectors from
// its start.
template <class T>
void tile_sums_to_dw(const Plan& pl, const T* sums, int64_t slices, int64_t channel_blocks,
                     int64_t column_blocks, T* dw, int threads) {
  constexpr int64_t C = kFewRowsChannels, J = kFewRowsRows;
  constexpr int L = gemm::kLanes<T>;
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  const int64_t tile_elems = C * J * L, tiles = pl.groups * channel_blocks * column_blocks;
  parallel_for(threads, tiles, [&](int64_t tile) {
    const int64_t g = tile / (channel_blocks * column_blocks);
    const int64_t cb = tile / column_blocks % channel_blocks, jb = tile % column_blocks;
    const int64_t channels = std::min(C, pl.cig - cb * C), cols = std::min(J, pl.rows - jb * J);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = (c * cols + j) * L;
        Vec v, part;
        std::memcpy(&v, sums + tile * tile_elems + at, sizeof(Vec));
        for (int64_t s = 1; s < slices; ++s) {
          std::memcpy(&part, sums + (s * tiles + tile) * tile_elems + at, sizeof(Vec));
          v += part;
        }
        T lanes[L];
        std::memcpy(lanes, &v, sizeof(Vec));
        dw[(g * pl.cig + cb * C + c) * pl.rows + jb * J + j] = lane_sum<L>(lanes);
      }
    }
  });
}

// wgrad of a one-tap layer (1x1, any stride and padding) with few input channels
// (kPointwiseMaxInputs) or few output channels (kFewRowsMax): dw_g (cig x cog) = the sum over
// items and x's positions of x_ng[p] dy_ng[p's output position]. x lies along the reduction;
// so does dy at stride 1 without padding (cols_are_dy), else a task gathers its rows of dy for a
// run of positions into a buffer (zeros where the position falls in the padding). The
// few-rows tiles (sums in lanes over positions) then read both: dy once from memory, each run
// of its rows from L1 for every block of input channels in turn. The phase and column paths
// copied dy's planes whole first, and a GEMM would transpose dy to pack it (8 -> 96 on 37 x 40,
// 16 items: copies were half the pass; 4 groups of 32 -> 6 at stride 2: Eigen's packing).
// The reduction over (item, position) is cut into `slices` ranges by the shape alone, each
// summed in lanes into its own vectors; the slices' vectors are added in slice order, then
// across lanes in lane order. Tasks (slice, group, block of output rows): a cut changes no bit.
constexpr int64_t kPointwiseMaxInputs = 16;
bool pointwise_wgrad_suits(const Plan& pl) {
  return pl.taps == 1 && (pl.cig <= kPointwiseMaxInputs || pl.cog <= kFewRowsMax);
}

// Rows [co0, co1) of dy_ng at x's positions [p, p + len) of one item, to out (rows ld apart):
// position (ih, iw) reads dy at (ih * sh - ph, iw * sw - pw), zero outside dy.
template <class T>
void gather_one_tap(const Plan& pl, const T* dy_ng, int64_t co0, int64_t co1, int64_t p,
                    int64_t len, T* out, int64_t ld) {
  for (int64_t done = 0; done < len;) {
    const int64_t ih = (p + done) / pl.in_w, iw0 = (p + done) % pl.in_w;
    const int64_t seg = std::min(len - done, pl.in_w - iw0);
    const int64_t oh = ih * pl.stride_h - pl.pad_h;
    // The segment's columns [lo, hi) land inside dy's row: iw * sw - pw in [0, out_w).
    int64_t lo = iw0, hi = iw0;
    if (oh >= 0 && oh < pl.out_h) {
      lo = std::clamp<int64_t>(ceil_div(pl.pad_w, pl.stride_w), iw0, iw0 + seg);
      hi = std::clamp<int64_t>(ceil_div(pl.out_w + pl.pad_w, pl.stride_w), lo, iw0 + seg);
    }
    for (int64_t co = co0; co < co1; ++co) {
      T* row = out + (co - co0) * ld + done;
      std::fill(row, row + (lo - iw0), T(0));
      std::fill(row + (hi - iw0), row + seg, T(0));
    }
    if (lo < hi) {
      gather_strided_rows(out + done + (lo - iw0), ld,
                          dy_ng + co0 * pl.out_hw + oh * pl.out_w + lo * pl.stride_w - pl.pad_w,
                          pl.out_hw, co1 - co0, hi - lo, pl.stride_w);
    }
    done += seg;
  }
}

template <class T>
void pointwise_wgrad(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int64_t C = kFewRowsChannels, J = kFewRowsRows, kMinSlicePositions = 4096;
  constexpr int L = gemm::kLanes<T>;
  const bool in_place = cols_are_dy(pl);
  const int64_t total = pl.batch * pl.in_hw;  // the reduction's length
  const int64_t channel_blocks = ceil_div(pl.cig, C), row_blocks = ceil_div(pl.cog, J);
  const int64_t tile = C * J * L;  // one tile's vectors of sums
  const int64_t group_tiles = channel_blocks * row_blocks;
  // Enough (slice, group, row block) tasks for 16 threads where the positions allow.
  constexpr int64_t kWantedTasks = 32;
  const int64_t slices = std::clamp<int64_t>(
      std::min(ceil_div(kWantedTasks, pl.groups * row_blocks), total / kMinSlicePositions), 1,
      kMaxWgradSlices);
  const Workspace<T> sums(slices * pl.groups * group_tiles * tile);
  const int64_t parts =
      std::clamp<int64_t>(ceil_div(2 * int64_t{threads}, slices * pl.groups), 1, row_blocks);
  const int64_t per_part = ceil_div(row_blocks, parts);
  const int64_t buffer = in_place ? 0 : per_part * J * kFewRowsChunk;
  parallel_for(
      threads, slices * pl.groups * parts, [&] { return Workspace<T>(buffer); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t part = t % parts, g = t / parts % pl.groups, s = t / (parts * pl.groups);
        const int64_t rb0 = std::min(row_blocks, part * per_part);
        const int64_t rb1 = std::min(row_blocks, rb0 + per_part);
        if (rb0 == rb1) return;
        const int64_t co0 = rb0 * J, co1 = std::min(pl.cog, rb1 * J);
        T* task_sums = sums.data() + (s * pl.groups + g) * group_tiles * tile;
        const int64_t q0 = total * s / slices, q1 = total * (s + 1) / slices;
        for (int64_t q = q0; q < q1;) {
          const int64_t n = q / pl.in_hw, p = q % pl.in_hw;
          const int64_t len = std::min({q1 - q, pl.in_hw - p, kFewRowsChunk});
          const T* x_n = x + (n * pl.in_channels + g * pl.cig) * pl.in_hw + p;
          const T* dy_ng = dy + (n * pl.out_channels + g * pl.cog) * pl.out_hw;
          // Row co0 of this run's dy, and the distance between rows.
          const T* d = dy_ng + co0 * pl.out_hw + p;
          int64_t d_ld = pl.out_hw;
          if (!in_place) {
            gather_one_tap(pl, dy_ng, co0, co1, p, len, ws.data(), kFewRowsChunk);
            d = ws.data();
            d_ld = kFewRowsChunk;
          }
          for (int64_t rb = rb0; rb < rb1; ++rb) {
            const int rows = static_cast<int>(std::min(J, pl.cog - rb * J));
            for (int64_t cb = 0; cb < channel_blocks; ++cb) {
              const int channels = static_cast<int>(std::min(C, pl.cig - cb * C));
              T* acc = task_sums + (cb * row_blocks + rb) * tile;
              with_tile<C, J>(channels, rows, [&]<int CC, int RR>() {
                few_rows_wgrad_run<T, CC, RR>(x_n + cb * C * pl.in_hw, pl.in_hw,
                                              d + (rb - rb0) * J * d_ld, d_ld, len, q == q0, acc);
              });
            }
          }
          q += len;
        }
      });
  tile_sums_to_dw(pl, sums.data(), slices, channel_blocks, row_blocks, dw, threads);
}

// wgrad by stride phases, for few output channels: layers the direct kernel declines (it needs 4
// output channels; RGB and mono outputs have 3 or 1) whose column buffer is too large for few rows
// to keep in cache (DCGAN's RGB layer: 48 rows of 8192 positions, 1.5 MiB); and for few input
// channels (phase_wgrad_suits).
//   dw_g[ci, (co, kh, kw)] = sum over n, ih, iw of x[n, ci, ih, iw] dy[n, co, ih*sh + a, iw*sw + b]
// with a = kh*dh - ph, b = kw*dw - pw. Writing a = qa*sh + ra (0 <= ra < sh), row ih*sh + a of dy
// is row ih + qa of its phase ra (the rows ra, ra + sh, ...): every tap reads one phase plane at a
// fixed shift, the same for every position. The planes of the phases the taps reach, zero-padded
// to the shifts' range, hold each element of dy once where im2col copies it once per tap that
// reaches it (4 times for k4 s2): they stay in L2 while the tiles read them. Register tile: as few
// rows' (kFewRowsChannels input channels by kFewRowsRows columns of dw, sums vectors over iw),
// over the positions of a slice in order, a piece at a time (phase_wgrad); the slices' vectors
// added in slice order, then reduced across lanes in lane order: each element of dw is one chain
// whatever the task.

// One axis of the phase planes: per tap, the plane (among the phases reached) and its shift, and
// the planes' extent.
struct PhaseAxis {
  std::vector<int64_t> plane, shift;  // per tap; shift - lo >= 0
  std::vector<int64_t> residue;       // per plane: the stride residue ra it holds
  int64_t lo = 0, extent = 0;         // extent: input positions plus the shifts' range
};

PhaseAxis phase_axis(int64_t in, int64_t kernel, int64_t stride, int64_t dil, int64_t pad) {
  PhaseAxis ax;
  int64_t hi = 0;
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t a = k * dil - pad;
    const int64_t q = floor_div(a, stride);
    const int64_t r = a - q * stride;
    const auto found = std::find(ax.residue.begin(), ax.residue.end(), r);
    ax.plane.push_back(found - ax.residue.begin());
    if (found == ax.residue.end()) ax.residue.push_back(r);
    ax.shift.push_back(q);
    ax.lo = k == 0 ? q : std::min(ax.lo, q);
    hi = k == 0 ? q : std::max(hi, q);
  }
  ax.extent = in + hi - ax.lo;
  return ax;
}

struct PhasePlanes {
  PhaseAxis h, w;
  int64_t plane() const { return h.extent * w.extent; }
  int64_t per_channel() const {
    return static_cast<int64_t>(h.residue.size() * w.residue.size()) * plane();
  }
};

PhasePlanes phase_planes(const Plan& pl) {
  return {phase_axis(pl.in_h, pl.kernel_h, pl.stride_h, pl.dil_h, pl.pad_h),
          phase_axis(pl.in_w, pl.kernel_w, pl.stride_w, pl.dil_w, pl.pad_w)};
}

// The planes take at most this many bytes, and at most this many columns of dw (beyond them the
// GEMM path's packed operands are the better reuse).
constexpr int64_t kPhaseWgradBytes = int64_t{16} << 20;
constexpr int64_t kPhaseWgradMaxRows = 64;
constexpr int64_t kPhaseWgradMaxOutChannels = 3;
constexpr int64_t kPhaseFewInMinUses = 8;
constexpr int64_t kPhaseFewInMaxChannels = 8;  // two tiles' (6 -> 32 k3: 2x the GEMM path)
// A bound on the taps' reach and on the planes' elements, far past any layer whose planes fit.
constexpr int64_t kPhaseBound = int64_t{1} << 40;

// Few input channels (up to two tiles', kPhaseFewInMaxChannels) and any number of output
// channels: the GEMM path's product is as thin once im2col has written taps copies of dy (3 -> 32
// k8x3 s2: im2col a third of the pass), and the direct wgrad, which takes 8, was slower too.
// The planes are a copy of dy, so they pay where each element of dy serves enough
// multiply-adds (input channels x the taps that reach it, taps / strides): from
// kPhaseFewInMinUses 1.2x-2.6x at 1 thread; at 3 to 7 a large dy's copy (1 -> 64 k4x3 s2 on
// 113 x 113, 2 -> 256 k8 s4) cost more than im2col (0.8x-0.9x).
bool few_input_channels(const Plan& pl) {
  return pl.cig <= kPhaseFewInMaxChannels &&
         mul_le(int128{kPhaseFewInMinUses} * pl.stride_h, pl.stride_w, int128{pl.cig} * pl.taps);
}

// Whether the phase planes of the shape are in range and small enough: at most
// kPhaseWgradBytes, or with few input channels, where the alternative is an im2col of dy larger
// than the planes, twice dy (a bound against a dilation's padding) plus that.
bool phase_planes_fit(const Plan& pl, int64_t elem_bytes, bool few_in) {
  // The taps' reach and the planes' size bounded first, in 128 bits (the geometry accepts
  // dilations whose reach would overflow), so that phase_planes computes in range: a plane's
  // extent is at most the input's plus the reach over the stride, plus 2.
  const int128 reach_h = int128{pl.kernel_h - 1} * pl.dil_h;
  const int128 reach_w = int128{pl.kernel_w - 1} * pl.dil_w;
  if (reach_h > kPhaseBound || reach_w > kPhaseBound) return false;
  if (int128{pl.batch} * pl.out_channels * pl.taps * (pl.in_h + reach_h / pl.stride_h + 2) *
          (pl.in_w + reach_w / pl.stride_w + 2) >
      kPhaseBound)
    return false;
  const PhasePlanes pp = phase_planes(pl);
  const int128 plane_bytes = int128{pl.batch} * pl.out_channels * pp.per_channel() * elem_bytes;
  const int128 dy_bytes = int128{pl.batch} * pl.out_channels * pl.out_hw * elem_bytes;
  return plane_bytes <= (few_in ? 2 * dy_bytes : 0) + kPhaseWgradBytes;
}

bool phase_wgrad_suits(const Plan& pl, int64_t elem_bytes) {
  // Few output channels (above) or few input channels.
  const bool few_in = few_input_channels(pl);
  if (!few_in && (pl.cog > kPhaseWgradMaxOutChannels || pl.rows > kPhaseWgradMaxRows)) return false;
  // Below AVX-512 the tile (as few rows', 2 x 4 sums in 16 registers) measured slower than the
  // GEMM path (0.6x-0.8x on the RGB layers).
  if (gemm::kVecRegisters < 32) return false;
  // Rows of at least two vectors, so that the partial vector at a row's end (lanes wasted past
  // the row) is at most a third of the work; enough input channels for the tile's rows.
  if (pl.in_w < 2 * gemm::kLanes<float> || (!few_in && pl.cig < kFewRowsChannels)) return false;
  return phase_planes_fit(pl, elem_bytes, few_in);
}

// A piece of the positions: rows (n, ih) [u0, u1) (u = n * in_h + ih), columns [w0, w1) of each,
// w0 a multiple of the lanes.
struct PhasePiece {
  int64_t u0, u1, w0, w1;
};

// The phase planes and x as the tiles read them: row ih of item n of input channel c of the
// task's block at x + n * x_item + c * x_ld + ih * in_w; of column j of the task's group at e +
// n * e_item + off[j] + ih * pitch.
template <class T>
struct PhaseOperands {
  const T* x;
  int64_t x_ld, x_item;
  const T* e;
  int64_t e_item, pitch;
};

// acc[c][j] (vectors over iw, at acc_mem, zero when `first`) += x_c[ih, iw] plane_j[ih, iw] over
// the piece, for C input channels and J columns (off: theirs).
template <class T, int C, int J>
void phase_wgrad_tile(const Plan& pl, const PhaseOperands<T>& op, const int64_t* off,
                      const PhasePiece& pc, bool first, T* acc_mem) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  Vec acc[C][J];
  load_sums(acc, acc_mem, first);
  // Every row's whole vectors, then every row's partial vector at its end (masked loads,
  // load_first): one order, fixed by the shape. With both in one loop the compiler kept the sums in
  // memory between rows.
  const int64_t whole = (pc.w1 - pc.w0) / L * L, rest = pc.w1 - pc.w0 - whole;
  for (int64_t u = pc.u0; u < pc.u1;) {
    // The rows of one item: each row's pointers one row past the last's.
    const int64_t n = u / pl.in_h, ih0 = u % pl.in_h, rows = std::min(pc.u1 - u, pl.in_h - ih0);
    const T* xp[C];
    const T* ep[J];
    for (int c = 0; c < C; ++c)
      xp[c] = op.x + n * op.x_item + c * op.x_ld + ih0 * pl.in_w + pc.w0;
    for (int j = 0; j < J; ++j)
      ep[j] = op.e + n * op.e_item + off[j] + ih0 * op.pitch + pc.w0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t iw = 0; iw < whole; iw += L) {
        Vec xv[C];
        for (int c = 0; c < C; ++c)
          std::memcpy(&xv[c], xp[c] + iw, sizeof(Vec));
        for (int j = 0; j < J; ++j) {
          Vec ev;
          std::memcpy(&ev, ep[j] + iw, sizeof(Vec));
          for (int c = 0; c < C; ++c)
            acc[c][j] += xv[c] * ev;
        }
      }
      for (int c = 0; c < C; ++c)
        xp[c] += pl.in_w;
      for (int j = 0; j < J; ++j)
        ep[j] += op.pitch;
    }
    u += rows;
  }
  for (int64_t u = pc.u0; rest > 0 && u < pc.u1; ++u) {
    const int64_t n = u / pl.in_h, ih = u % pl.in_h, w = pc.w0 + whole;
    Vec xv[C];
    for (int c = 0; c < C; ++c)
      xv[c] = load_first<Vec>(op.x + n * op.x_item + c * op.x_ld + ih * pl.in_w + w, rest);
    for (int j = 0; j < J; ++j) {
      const Vec ev = load_first<Vec>(op.e + n * op.e_item + off[j] + ih * op.pitch + w, rest);
      for (int c = 0; c < C; ++c)
        acc[c][j] += xv[c] * ev;
    }
  }
  store_sums(acc, acc_mem);
}

// Positions per piece: a task runs every column block of dw over a piece before the next, so
// that the piece's x stays in L1 while they read it (over all positions at once, a block of x
// was read from memory once per column block: 0.8x the GEMM path on 16 items of 64 x 64).
constexpr int64_t kPhasePiece = 1024;
// Bytes of planes a slice of the pieces reads, about (see phase_wgrad).
constexpr int64_t kPhaseSliceBytes = int64_t{256} << 10;
// Elements of the planes' copy per run of rows, at least.
constexpr int64_t kMinCopyElems = 4096;

// Where columns [jb, jb + count) of row i of plane (p, q) lie in each channel's plane of dy: dy
// row (i + lo_h) * sh + residue_h[p], columns (j + lo_w) * sw + residue_w[q]; the columns inside
// dy are [j0, j1), the first of them at `at` in the plane.
struct PlaneRowSpan {
  int64_t at, j0, j1;
};

PlaneRowSpan plane_row_span(const Plan& pl, const PhasePlanes& pp, int64_t p, int64_t q, int64_t i,
                            int64_t jb, int64_t count) {
  const int64_t oh = (i + pp.h.lo) * pl.stride_h + pp.h.residue[static_cast<size_t>(p)];
  const int64_t base = (pp.w.lo + jb) * pl.stride_w + pp.w.residue[static_cast<size_t>(q)];
  const int64_t j0 = std::clamp<int64_t>(base >= 0 ? 0 : ceil_div(-base, pl.stride_w), 0, count);
  const int64_t j1 = oh < 0 || oh >= pl.out_h || base >= pl.out_w
                         ? j0
                         : std::clamp<int64_t>(ceil_div(pl.out_w - base, pl.stride_w), j0, count);
  return {j1 > j0 ? oh * pl.out_w + base + j0 * pl.stride_w : 0, j0, j1};
}

// row[0, count) = the span's columns of one channel's plane of dy, zero outside dy.
template <class T>
void copy_plane_row(const Plan& pl, const PlaneRowSpan& sp, const T* plane, int64_t count, T* row) {
  std::fill_n(row, sp.j0, T(0));
  if (sp.j1 > sp.j0) gather_strided(row + sp.j0, plane + sp.at, sp.j1 - sp.j0, pl.stride_w);
  std::fill(row + sp.j1, row + count, T(0));
}

// Columns [jb, jb + count) of row i of plane (p, q) of output channel c of item n (nc = n *
// out_channels + c), at row[0 ..), zero outside dy.
template <class T>
void phase_plane_row(const Plan& pl, const PhasePlanes& pp, const T* dy, int64_t nc, int64_t p,
                     int64_t q, int64_t i, int64_t jb, int64_t count, T* row) {
  copy_plane_row(pl, plane_row_span(pl, pp, p, q, i, jb, count), dy + nc * pl.out_h * pl.out_w,
                 count, row);
}

// The planes of every (n, co), phase_plane_row's rows in (n, co, p, q, i) order. A copy, cut into
// runs of rows for the threads (it cannot change a bit): by (n, co) it ran on three threads for
// an RGB layer at batch 1 while the others waited.
template <class T>
Workspace<T> phase_planes_of(const Plan& pl, const PhasePlanes& pp, const T* dy, int threads) {
  const int64_t phases_h = static_cast<int64_t>(pp.h.residue.size());
  const int64_t phases_w = static_cast<int64_t>(pp.w.residue.size());
  const int64_t pitch = pp.w.extent;
  const int64_t plane_rows = pl.batch * pl.out_channels * phases_h * phases_w * pp.h.extent;
  const int64_t runs = std::clamp<int64_t>(plane_rows * pitch / kMinCopyElems, 1,
                                           std::min<int64_t>(plane_rows, 4 * int64_t{threads}));
  Workspace<T> planes(plane_rows * pitch);
  parallel_for(threads, runs, [&](int64_t run) {
    for (int64_t r = plane_rows * run / runs; r < plane_rows * (run + 1) / runs; ++r) {
      const int64_t plane = r / pp.h.extent;
      phase_plane_row(pl, pp, dy, plane / (phases_w * phases_h), plane / phases_w % phases_h,
                      plane % phases_w, r % pp.h.extent, 0, pitch, planes.data() + r * pitch);
    }
  });
  return planes;
}

// Per column j = (co, kh, kw) of dw (a row of w's group): the offset of the plane its tap reads,
// within an item's planes of plane_h rows of `pitch` each, at row ih = 0, column iw = 0.
std::vector<int64_t> phase_offsets(const Plan& pl, const PhasePlanes& pp, int64_t plane_h,
                                   int64_t pitch) {
  const int64_t phases_w = static_cast<int64_t>(pp.w.residue.size());
  const int64_t plane = plane_h * pitch;
  const int64_t per_channel = static_cast<int64_t>(pp.h.residue.size()) * phases_w * plane;
  std::vector<int64_t> off(static_cast<size_t>(pl.rows));
  for (int64_t j = 0; j < pl.rows; ++j) {
    const int64_t co = j / pl.taps, kh = j % pl.taps / pl.kernel_w, kw = j % pl.kernel_w;
    const int64_t k =
        pp.h.plane[static_cast<size_t>(kh)] * phases_w + pp.w.plane[static_cast<size_t>(kw)];
    off[static_cast<size_t>(j)] = co * per_channel + k * plane +
                                  (pp.h.shift[static_cast<size_t>(kh)] - pp.h.lo) * pitch +
                                  pp.w.shift[static_cast<size_t>(kw)] - pp.w.lo;
  }
  return off;
}

template <class T>
void phase_wgrad(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int64_t C = kFewRowsChannels, J = kFewRowsRows;
  constexpr int L = gemm::kLanes<T>;
  const PhasePlanes pp = phase_planes(pl);
  const int64_t per_channel = pp.per_channel(), pitch = pp.w.extent;
  const int64_t plane_elems = pl.batch * pl.out_channels * per_channel;
  const Workspace<T> planes = phase_planes_of(pl, pp, dy, threads);
  const std::vector<int64_t> off = phase_offsets(pl, pp, pp.h.extent, pitch);
  // The pieces, in order: whole rows, as many as make up kPhasePiece positions; or a long row in
  // parts of kPhasePiece columns.
  const int64_t units = pl.batch * pl.in_h;
  const int64_t row_parts = ceil_div(pl.in_w, kPhasePiece);
  const int64_t piece_rows = row_parts > 1 ? 1 : std::max<int64_t>(1, kPhasePiece / pl.in_w);
  const int64_t pieces = ceil_div(units, piece_rows) * row_parts;
  const auto piece = [&](int64_t k) {
    const int64_t u0 = k / row_parts * piece_rows, part = k % row_parts;
    return PhasePiece{u0, std::min(units, u0 + piece_rows), part * kPhasePiece,
                      std::min(pl.in_w, (part + 1) * kPhasePiece)};
  };
  static_assert(kPhasePiece % 16 == 0, "a piece's columns start on a vector");
  // The pieces are cut into slices, each summing its own tiles' vectors, added in slice order
  // before the lanes are: about kPhaseSliceBytes of planes a slice, and enough slices for
  // kMinTasks tasks; a cut that follows the shape only. A task runs a range of the input-channel
  // blocks of a group over one slice, a piece at a time, so that the piece's planes stay in L2
  // while the blocks read them, and each task reads only its slice's planes (over all positions,
  // 32 tasks each read 2 MiB of planes on 16 threads: 0.6x the GEMM path). The ranges follow the
  // threads; they cannot change a bit, every element being one chain over its slice's pieces.
  const int64_t channel_blocks = ceil_div(pl.cig, C), column_blocks = ceil_div(pl.rows, J);
  const int64_t tile_elems = C * J * L, tiles = pl.groups * channel_blocks * column_blocks;
  const int64_t slices = std::clamp<int64_t>(
      std::max(ceil_div(plane_elems * static_cast<int64_t>(sizeof(T)), kPhaseSliceBytes),
               ceil_div(kMinTasks, pl.groups * channel_blocks)),
      1,
      std::min({pieces, kMaxWgradSlices,
                std::max<int64_t>(1, kMaxWgradPartialBytes /
                                         (tiles * tile_elems * static_cast<int64_t>(sizeof(T))))}));
  const int64_t ranges =
      std::clamp<int64_t>(ceil_div(2 * int64_t{threads}, pl.groups * slices), 1, channel_blocks);
  // The sums of tile (g, cb, jb) of slice s.
  const Workspace<T> sums(slices * tiles * tile_elems);
  const auto acc_of = [&](int64_t s, int64_t g, int64_t cb, int64_t jb) {
    return sums.data() +
           (((s * pl.groups + g) * channel_blocks + cb) * column_blocks + jb) * tile_elems;
  };
  parallel_for(threads, slices * pl.groups * ranges, [&](int64_t t) {
    const int64_t s = t / (pl.groups * ranges), g = t / ranges % pl.groups, r = t % ranges;
    const int64_t b0 = channel_blocks * r / ranges, b1 = channel_blocks * (r + 1) / ranges;
    const int64_t k0 = pieces * s / slices, k1 = pieces * (s + 1) / slices;
    for (int64_t k = k0; k < k1; ++k) {
      const PhasePiece pc = piece(k);
      for (int64_t cb = b0; cb < b1; ++cb) {
        const int channels = static_cast<int>(std::min(C, pl.cig - cb * C));
        const PhaseOperands<T> op{x + (g * pl.cig + cb * C) * pl.in_hw,
                                  pl.in_hw,
                                  pl.in_channels * pl.in_hw,
                                  planes.data() + g * pl.cog * per_channel,
                                  pl.out_channels * per_channel,
                                  pitch};
        for (int64_t jb = 0; jb < column_blocks; ++jb) {
          const int cols = static_cast<int>(std::min(J, pl.rows - jb * J));
          with_tile<C, J>(channels, cols, [&]<int CC, int JJ>() {
            phase_wgrad_tile<T, CC, JJ>(pl, op, off.data() + jb * J, pc, k == k0,
                                        acc_of(s, g, cb, jb));
          });
        }
      }
    }
  });
  tile_sums_to_dw(pl, sums.data(), slices, channel_blocks, column_blocks, dw, threads);
}

// dgrad by stride phases, for few input channels (phase_dgrad_suits), on the same planes:
//   dx[n, g*cig + c, ih, iw] = sum over j = (co, kh, kw) of w[g*cig + c, j] plane_j[n][ih, iw]
// with plane_j the plane that tap (kh, kw) of output channel co reads, at its shift
// (phase_offsets). The GEMM path wrote the column buffer (rows x positions, taps copies of dy)
// for a product only cig rows thin. Register tile: up to kFewRowsChannels of the group's input
// channels by up to kPhaseDgradVecs vectors of a row's positions; each step over j broadcasts an
// element of w per channel and loads the vectors of plane_j. Each element of dx is one chain over j
// in order, whatever the task. A row's last vector reads past the row (the next plane row, or the
// planes' slack), lanes that are never stored.
constexpr int kPhaseDgradVecs = 6;

// The row's positions [p0, p0 + V*L) (the last vector `last` lanes) of C channels: out[c] + p0
// = sum over j < rows of wc[c][j] e[off[j] + p0 ...].
template <class T, int C, int V>
void phase_dgrad_tile(const T* e, const int64_t* off, int64_t rows, const T* const* wc,
                      T* const* out, int64_t p0, int64_t last) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  Vec acc[C][V] = {};
  e += p0;
  for (int64_t j = 0; j < rows; ++j) {
    const T* ej = e + off[j];
    Vec ev[V];
    for (int v = 0; v < V; ++v)
      std::memcpy(&ev[v], ej + v * L, sizeof(Vec));
    for (int c = 0; c < C; ++c) {
      const T wv = wc[c][j];
      for (int v = 0; v < V; ++v)
        acc[c][v] += wv * ev[v];
    }
  }
  for (int c = 0; c < C; ++c) {
    T* o = out[c] + p0;
    for (int v = 0; v < V - 1; ++v)
      std::memcpy(o + v * L, &acc[c][v], sizeof(Vec));
    if (last == L) {
      std::memcpy(o + (V - 1) * L, &acc[c][V - 1], sizeof(Vec));
    } else {
      store_first(o + (V - 1) * L, acc[c][V - 1], last);
    }
  }
}

// A task's planes: those of its group's output channels for a band of its item's rows (and a
// piece of their columns, where one row's are more), at most about this many bytes: they stay in
// L2 between the copy and the tiles. Copied once for the whole call, the planes of 8 items of
// 64 x 128 x 128 went to memory and back (0.9x the GEMM path); at 512 KiB a band of 256 channels
// was 2 rows, and copying the taps' reach again for each cost 1.6x.
constexpr int64_t kPhaseBandBytes = int64_t{1} << 20;

template <class T>
void phase_dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int L = gemm::kLanes<T>;
  constexpr int C = kFewRowsChannels, V = kPhaseDgradVecs;
  const PhasePlanes pp = phase_planes(pl);
  const int64_t phases_w = static_cast<int64_t>(pp.w.residue.size());
  const int64_t phases = static_cast<int64_t>(pp.h.residue.size()) * phases_w;
  const int64_t reach_h = pp.h.extent - pl.in_h, reach_w = pp.w.extent - pl.in_w;
  // Tasks over (n, g, band of band_h rows, piece of piece_w columns): bands of whole rows while a
  // row's planes fit kPhaseBandBytes, else single rows in pieces of whole tiles; then cut
  // smaller, bands first, until there are two tasks a thread (a batch-1 sequence is one row).
  // The cut cannot change a bit.
  const int64_t elem = static_cast<int64_t>(sizeof(T)), tile_w = int64_t{V} * L;
  const int64_t col_bytes = pl.cog * phases * elem;  // a plane column of every channel, per row
  int64_t band_h = 1, piece_w = pl.in_w;
  if ((1 + reach_h) * pp.w.extent * col_bytes <= kPhaseBandBytes) {
    band_h = std::clamp<int64_t>(kPhaseBandBytes / (pp.w.extent * col_bytes) - reach_h, 1, pl.in_h);
  } else {
    const int64_t fit = kPhaseBandBytes / ((1 + reach_h) * col_bytes) - reach_w;
    piece_w = std::clamp<int64_t>(fit / tile_w * tile_w, tile_w, pl.in_w);
  }
  const auto count = [&] {
    return pl.batch * pl.groups * ceil_div(pl.in_h, band_h) * ceil_div(pl.in_w, piece_w);
  };
  while (count() < 2 * int64_t{threads} && (band_h > 1 || piece_w > tile_w)) {
    if (band_h > 1) {
      band_h = ceil_div(band_h, int64_t{2});
    } else {
      piece_w = std::max(tile_w, ceil_div(ceil_div(piece_w, int64_t{2}), tile_w) * tile_w);
    }
  }
  const int64_t bands = ceil_div(pl.in_h, band_h), pieces = ceil_div(pl.in_w, piece_w);
  const int64_t plane_h = band_h + reach_h, pitch = piece_w + reach_w;
  const std::vector<int64_t> off = phase_offsets(pl, pp, plane_h, pitch);
  // L elements past the last plane: a row's last vector reads up to L - 1 past the row.
  const int64_t buf_elems = pl.cog * phases * plane_h * pitch + L;
  parallel_for(
      threads, pl.batch * pl.groups * bands * pieces,
      [&] {
        Workspace<T> ws(buf_elems);
        std::fill_n(ws.data(), buf_elems, T(0));
        return ws;
      },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t piece = t % pieces, band = t / pieces % bands;
        const int64_t g = t / (pieces * bands) % pl.groups, n = t / (pieces * bands * pl.groups);
        const int64_t ih0 = band * band_h, ih1 = std::min(pl.in_h, ih0 + band_h);
        const int64_t w0 = piece * piece_w, w1 = std::min(pl.in_w, w0 + piece_w);
        // Each plane row's place in dy, the same for every channel, worked out once: a
        // channel's rows are short (a 21 x 24 k2x4 s2 dgrad's 25 columns), and working it out
        // per row took a quarter of that pass.
        const int64_t rows = ih1 - ih0 + reach_h, row_len = w1 - w0 + reach_w;
        std::vector<PlaneRowSpan> spans(phases * rows);
        for (int64_t k = 0; k < phases; ++k)
          for (int64_t i = 0; i < rows; ++i)
            spans[k * rows + i] =
                plane_row_span(pl, pp, k / phases_w, k % phases_w, ih0 + i, w0, row_len);
        for (int64_t co = 0; co < pl.cog; ++co) {
          const T* plane = dy + (n * pl.out_channels + g * pl.cog + co) * pl.out_h * pl.out_w;
          for (int64_t k = 0; k < phases; ++k) {
            for (int64_t i = 0; i < rows; ++i) {
              copy_plane_row(pl, spans[k * rows + i], plane, row_len,
                             ws.data() + ((co * phases + k) * plane_h + i) * pitch);
            }
          }
        }
        const int64_t vecs = ceil_div(w1 - w0, int64_t{L}), blocks = ceil_div(vecs, int64_t{V});
        const T* wc[C];
        T* out[C];
        for (int64_t ih = ih0; ih < ih1; ++ih) {
          const T* e = ws.data() + (ih - ih0) * pitch;
          for (int64_t c0 = 0; c0 < pl.cig; c0 += C) {  // blocks of C channels
            const int64_t cc = std::min<int64_t>(C, pl.cig - c0);
            for (int64_t c = 0; c < cc; ++c) {
              const int64_t ci = g * pl.cig + c0 + c;
              wc[c] = w + ci * pl.rows;
              out[c] = dx + ((n * pl.in_channels + ci) * pl.in_h + ih) * pl.in_w + w0;
            }
            for (int64_t b = 0; b < blocks; ++b) {
              const int64_t v0 = b * V, nv = std::min<int64_t>(V, vecs - v0);
              const int64_t last = std::min<int64_t>(L, w1 - w0 - (v0 + nv - 1) * L);
              with_tile<C, V>(static_cast<int>(cc), static_cast<int>(nv), [&]<int CC, int VV>() {
                phase_dgrad_tile<T, CC, VV>(e, off.data(), pl.rows, wc, out, v0 * L, last);
              });
            }
          }
        }
      });
}

// The output channels of each block cut for the threads into parts, each of whole channels
// whose rows of dw (channels x taps) are a multiple of kChannelQuantum. Eigen computes the
// row-major product as its transpose, so these rows are its product's rows, and every part then
// starts on a multiple of each level's row panel: each row keeps the kernel it has in the uncut
// product, and its order of sums (the input-channel cut, channel_cut, is the same rule on the
// other side). A part builds only its own columns and packs its x block again, where an
// input-channel block builds its columns again. At 16 threads HiFi-GAN V3's second x8 had 4
// tasks by the shape and 12 after the input-channel cut, U-Net 128 -> 64 had 10: 4 and 6 of the
// threads idle. As many parts as give the fewest rounds of tasks per share of the work, each
// part beyond the first charged kPartCost of a part's work (the repacked x), ties keeping fewer.
constexpr double kPartCost = 0.03;

// Channels per part and the number of parts for blocks of per_block channels.
struct ChannelParts {
  int64_t per_part, count;
};

// The output channels a part holds a multiple of: those whose rows of dw (channels x taps) are a
// multiple of kChannelQuantum.
inline int64_t part_quantum(const Plan& pl) {
  return kChannelQuantum / std::gcd(pl.taps, kChannelQuantum);
}

inline ChannelParts output_channel_parts(const Plan& pl, int64_t per_block, int64_t tasks,
                                         int threads) {
  const int64_t quantum = part_quantum(pl);
  const int64_t most = per_block / quantum;
  ChannelParts best{per_block, 1};
  double best_time = parts_time(tasks, 1, threads, kPartCost);
  for (int64_t c = 2; c <= most; ++c) {
    const int64_t per_part = gemm::round_up(ceil_div(per_block, c), quantum);
    const int64_t count = ceil_div(per_block, per_part);
    if (count <= best.count) continue;
    const double time = parts_time(tasks, count, threads, kPartCost);
    if (time < best_time) best = {per_part, count}, best_time = time;
  }
  return best;
}

// Tasks own blocks of dw: (g, block of output channels, part of it, block of input channels),
// each summing its reduction in one fixed order. When the output-channel blocks are too few for
// kMinTasks tasks, the reduction over column blocks r (item block-major, conv_transpose_cols.h) is
// cut into `slices` contiguous ranges, each summed into its block of its own partial dw, and the
// partials are added in slice order; with one slice the tasks write dw directly. Both cuts follow
// the shape; the parts and the input channels are cut last, for the threads
// (output_channel_parts and channel_cut: no bit changes).
template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int64_t w_numel, int threads) {
  if (depthwise(pl)) {
    depthwise_wgrad(pl, x, dy, dw, threads);
    return;
  }
  if (pointwise_wgrad_suits(pl)) {
    pointwise_wgrad(pl, x, dy, dw, threads);
    return;
  }
  // By stride phases on the input channels' side first for up to 8 input channels (at AVX-512):
  // against the phase tiles and the direct kernel's sparse lanes 1.3x-6x
  // (3 -> 256 k8, 8 -> 384 k3, 8 -> 96 k8 s2, grouped 8 -> 64 k8 s2 on 3 x 3); with more, after
  // the direct kernel, which won with 12-24 (0.7x there).
  const bool phases = phase_gemm_wgrad_suits(pl, sizeof(T));
  if (phases && phase_gemm_wgrad_first(pl, sizeof(T))) {
    phase_gemm_wgrad(pl, x, dy, dw, threads);
    return;
  }
  // Few input channels by phases before the direct wgrad (which takes 8 at AVX-512): 8 -> 96
  // k8 s2 and 8 -> 64 k4 s2 1.3x-1.4x faster; but not on few columns (0.8x).
  const bool few_columns_fit = few_columns_wide_fit(pl, w_numel * static_cast<int64_t>(sizeof(T)));
  if (few_input_channels(pl) && !few_columns_fit && phase_wgrad_suits(pl, sizeof(T))) {
    phase_wgrad(pl, x, dy, dw, threads);
    return;
  }
  // Stride-1 3x3-block kernels with enough tiles by Winograd's F(3x3, 2x2) before the direct
  // kernel, which does 2.25x the multiplies: S5's 3 x 7 1.2x-1.3x, 3 x 3 at 64 channels 1.5x.
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_wgrad_suits(pl, sizeof(T))) {
      winograd_wgrad(pl, x, dy, dw, threads);
      return;
    }
  }
  if (direct_wgrad_suits(pl, sizeof(T))) {
    direct_wgrad(pl, x, dy, dw, threads);
    return;
  }
  // wgrad_few_columns takes the shapes few_columns_wide_fit names: up to kFewColumns columns
  // always; up to kWideFewColumns where dw is larger than a core's L2 (the GEMM path's copy of
  // it out of its buffer then goes to memory and back). With more columns, or a dw that stays
  // in cache, the GEMM path measured as fast or faster: packing every row of cols costs what
  // streaming saves (144 columns on a 1 MiB dw: 0.88x).
  if (few_columns_fit) {
    wgrad_few_columns(pl, x, dy, dw, threads);
    return;
  }
  if (wgrad_few_rows_suits(pl, sizeof(T))) {
    wgrad_few_rows(pl, x, dy, dw, threads);
    return;
  }
  if (phases) {
    phase_gemm_wgrad(pl, x, dy, dw, threads);
    return;
  }
  if (phase_wgrad_suits(pl, sizeof(T))) {
    phase_wgrad(pl, x, dy, dw, threads);
    return;
  }
  const ChannelBlocks chb = channel_blocks(pl, pl.groups);
  const int64_t max_rows = chb.per_block * pl.taps;
  const ColBlocks cb = col_blocks(pl, max_rows, sizeof(T), /*for_tasks=*/true);
  const int64_t reduce = cb.count();
  const int64_t max_slices_by_memory =
      kMaxWgradPartialBytes / std::max<int64_t>(1, w_numel * static_cast<int64_t>(sizeof(T)));
  // The reduction is cut only where the channels cannot be: the output-channel parts and the
  // input-channel cut (below, for the threads) give up to cut_tasks tasks without it. Cut into
  // slices, each product is as much shorter and the partial sums go to memory and back: U-Net
  // 256 -> 128's wgrad at 25 x 25 (3 slices of 208 positions) ran 1.08x faster at 1 thread
  // and 1.2x at 2 without them.
  const int64_t cut_tasks = pl.groups * chb.count *
                            std::max<int64_t>(1, chb.per_block / part_quantum(pl)) *
                            ceil_div(pl.cig, kChannelQuantum);
  const int64_t slices =
      cut_tasks >= kMinTasks
          ? 1
          : std::max<int64_t>(1, std::min({reduce, kMaxWgradSlices, max_slices_by_memory,
                                           ceil_div(kMinTasks, pl.groups * chb.count)}));
  const int64_t shape_tasks = slices * pl.groups * chb.count;
  const ChannelParts cp = output_channel_parts(pl, chb.per_block, shape_tasks, threads);
  const ChannelCut cut = channel_cut(pl, shape_tasks * cp.count, threads);
  const int64_t ci_blocks = cut.blocks, ci_per = cut.largest();
  const int64_t owners = pl.groups * chb.count * cp.count * ci_blocks;
  const Workspace<T> partial(slices > 1 ? slices * w_numel : 0);
  parallel_for(
      threads, slices * owners,
      [&] { return Workspace<T>(ci_per * max_rows + (max_rows + ci_per) * cb.max_cols()); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t s = t / owners, g = t / (chb.count * cp.count * ci_blocks) % pl.groups;
        const int64_t block = t / (cp.count * ci_blocks) % chb.count;
        const int64_t part = t / ci_blocks % cp.count;
        const int64_t block_end = std::min(pl.cog, (block + 1) * chb.per_block);
        const int64_t co0 = std::min(block_end, block * chb.per_block + part * cp.per_part);
        const int64_t co1 = std::min(block_end, co0 + cp.per_part);
        const int64_t ci0 = cut.begin(t % ci_blocks), ci1 = cut.begin(t % ci_blocks + 1);
        if (ci0 == ci1 || co0 == co1) return;
        const int64_t rows = (co1 - co0) * pl.taps;
        // The sum runs in a buffer of its own: dw's rows are pl.rows apart, often a multiple of
        // 4 KiB, and a block of them would all fall in the same few cache sets.
        MutMap<T> acc(ws.data(), ci1 - ci0, rows);
        acc.setZero();
        T* cols = ws.data() + ci_per * max_rows;
        T* x_buf = cols + max_rows * cb.max_cols();
        const int64_t r_begin = reduce * s / slices, r_end = reduce * (s + 1) / slices;
        for (int64_t r = r_begin; r < r_end; ++r) {
          const ColBlock blk = cb.block(pl, r / cb.chunks_per_item, r % cb.chunks_per_item);
          const BlockCols<T> bc = block_cols(pl, dy, g, blk, co0, co1, cols);
          const ConstStridedMap<T> c(bc.data, rows, blk.cols(), Eigen::OuterStride<>(bc.ld));
          const ConstStridedMap<T> xb = x_block(pl, x, g, blk, x_buf, ci0, ci1);
          // Two to four input channels leave a blocked product's register tiles mostly empty:
          // each output is then a dot product along the block's columns (gemm::dot_products).
          // One takes Eigen's matrix-vector product, as fast on the layers timed.
          if (ci1 - ci0 >= 2 && ci1 - ci0 <= gemm::kDotRows) {
            gemm::dot_products(ci1 - ci0, rows, blk.cols(), xb.data(), xb.outerStride(), c.data(),
                               c.outerStride(), acc.data(), rows);
          } else {
            eigen_product(acc, xb, c.transpose(), true);
          }
        }
        T* out = (slices > 1 ? partial.data() + s * w_numel : dw) + (g * pl.cig + ci0) * pl.rows;
        StridedMap<T>(out + co0 * pl.taps, ci1 - ci0, rows, Eigen::OuterStride<>(pl.rows)) = acc;
      });
  if (slices > 1) sum_parts_in_order(partial.data(), slices, w_numel, dw, threads);
}

}  // namespace

namespace conv {

bool phase_dgrad_suits(const Plan& pl, int64_t elem_bytes) {
  // The tile's sums take 24 of AVX-512's 32 registers. Unlike the wgrad, the dgrad's banded
  // planes never go to memory: it gained from 1 input channel and any taps per stride phase
  // (1 -> 12 k7 s2: 2.7x; 1 -> 64 k4x3 s2: 2.3x) and on rows of 8 (1.1x) to 20 (3.7x); on rows
  // of 4 the tasks' copies cost more than the GEMM path (0.5x). Up to 8 input channels (two
  // tiles over each band's planes) it beat the direct dgrad, few rows and few columns too
  // (1.2x-3.3x: 8 -> 96 k8 s2, grouped 8 -> 48 k4 d1x2, 8 -> 8 k3); with 12 or 16 it lost or
  // tied (0.7x-1.0x), except on rows of kPhaseDgradLongRow or more with up to 16 output
  // channels, where the few-rows and GEMM paths' column buffers of a long sequence go to memory:
  // 16 -> 3 k8 s3 over 68345 steps 2.9x, 16 -> 1 k16 s8 1.5x, 16 -> 16 k4 s2 over 4000 1.4x; with
  // 24 outputs they tied, on rows of 1000-1024 the gain was small or a loss (12 -> 2: 0.8x).
  constexpr int64_t kPhaseDgradMaxChannels = 8, kPhaseDgradMinRow = 8;
  constexpr int64_t kLongRowMaxChannels = 16, kPhaseDgradLongRow = 2048;
  const bool channels = pl.cig <= kPhaseDgradMaxChannels ||
                        (pl.cig <= kLongRowMaxChannels && pl.cog <= kLongRowMaxChannels &&
                         pl.in_w >= kPhaseDgradLongRow);
  return gemm::kVecRegisters >= 32 && channels && pl.in_w >= kPhaseDgradMinRow &&
         phase_planes_fit(pl, elem_bytes, true);
}

void phase_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  phase_dgrad_typed(pl, dy, w, dx, threads);
}
void phase_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads) {
  phase_dgrad_typed(pl, dy, w, dx, threads);
}

}  // namespace conv

void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                          int threads) {
  const char* fn = "conv_transpose_wgrad";
  const Plan pl = make_plan(g, fn);
  check_numel(x, g.x_numel(), fn, "x", g);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(dw, g.w_numel(), fn, "dw", g);
  dispatch_floating(dw.dtype(), [&]<class T>() {
    if (x.numel() == 0 || dy.numel() == 0) {  // an empty batch, image or output: dw is 0
      std::fill_n(data<T>(dw), g.w_numel(), T(0));
      return;
    }
    const bool blocked = depthwise(pl) && depthwise_blocked_wgrad_suits(pl, sizeof(T));
    wgrad_typed<T>(pl, data<T>(x), data<T>(dy), data<T>(dw), g.w_numel(),
                   threads_for(pass_work(g, blocked), threads));
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
