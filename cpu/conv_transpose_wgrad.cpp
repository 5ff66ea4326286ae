// ConvTranspose weight and bias gradients on the CPU (conv_transpose.cpp has the other passes;
// conv_transpose_direct.cpp the direct wgrad that the shapes it suits take instead of this;
// few columns and few rows take the products below, wgrad_few_columns and wgrad_few_rows):
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
  // cols^T of every group in panels of NR rows of cols, each panel (C x NR): a tile's loads
  // are contiguous.
  const Workspace<T> packed(pl.groups * panels * columns * NR);
  {
    const Workspace<T> cols(pl.groups * pl.rows * columns);
    few_columns_cols(pl, dy, columns, cols.data(), threads);
    parallel_for(threads, pl.groups * panels, [&](int64_t t) {
      const int64_t g = t / panels, r0 = t % panels * NR;
      gemm::pack_panel<T, NR>(cols.data() + (g * pl.rows + r0) * columns, columns, 1,
                              static_cast<int>(std::min<int64_t>(NR, pl.rows - r0)), columns,
                              packed.data() + t * columns * NR);
    });
  }
  // x as (in_channels x C), the items side by side.
  const Workspace<T> xs(pl.in_channels * columns);
  parallel_for(threads, pl.in_channels, [&](int64_t c) {
    for (int64_t n = 0; n < pl.batch; ++n)
      std::copy_n(x + (n * pl.in_channels + c) * pl.in_hw, pl.in_hw,
                  xs.data() + c * columns + n * pl.in_hw);
  });
  // Streaming stores need every vector of a tile aligned: dw's start and its rows.
  const bool stream = kStreamingStores && reinterpret_cast<uintptr_t>(dw) % gemm::kVecBytes == 0 &&
                      pl.rows * static_cast<int64_t>(sizeof(T)) % gemm::kVecBytes == 0;
  // Tasks: runs of panels of a group, kMinTasks of them where the panels allow; each runs every
  // block of input channels over a panel while the panel is in L1.
  const int64_t runs = std::clamp<int64_t>(ceil_div(kMinTasks, pl.groups), 1, panels);
  parallel_for(threads, pl.groups * runs, [&](int64_t t) {
    const int64_t g = t / runs, run = t % runs;
    T edge[R * NR];  // a panel past the end of dw's rows: its tiles go through here
    for (int64_t j = panels * run / runs; j < panels * (run + 1) / runs; ++j) {
      const T* panel = packed.data() + (g * panels + j) * columns * NR;
      const int64_t r0 = j * NR, width = std::min<int64_t>(NR, pl.rows - r0);
      for (int64_t c0 = 0; c0 < pl.cig; c0 += R) {
        const int rows = static_cast<int>(std::min<int64_t>(R, pl.cig - c0));
        const T* x_rows[R];
        for (int r = 0; r < R; ++r)  // rows past cig repeat the last: computed, not stored
          x_rows[r] = xs.data() + (g * pl.cig + c0 + std::min(r, rows - 1)) * columns;
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
    T x_tail[C][L] = {}, c_tail[J][L] = {};
    for (int c = 0; c < C; ++c)
      std::copy_n(x + c * x_ld + whole, len - whole, x_tail[c]);
    for (int j = 0; j < J; ++j)
      std::copy_n(cols + j * ld + whole, len - whole, c_tail[j]);
    step(&x_tail[0][0], L, &c_tail[0][0], L);
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
              // The tile for (channels, rows), each its own instance (a register array).
              [&]<int... CI, int... RI>(std::integer_sequence<int, CI...>,
                                        std::integer_sequence<int, RI...>) {
                const auto with_channels = [&]<int CC>() {
                  ((rows == RI + 1
                        ? few_rows_wgrad_run<T, CC, RI + 1>(xp, pl.in_hw, cp, ld, len, first, acc)
                        : void()),
                   ...);
                };
                ((channels == CI + 1 ? with_channels.template operator()<CI + 1>() : void()), ...);
              }
              (std::make_integer_sequence<int, C>{}, std::make_integer_sequence<int, J>{});
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
              const T* lanes = acc + (c * rows + j) * L;
              T sum = lanes[0];
              for (int l = 1; l < L; ++l)
                sum += lanes[l];
              dw[(g * pl.cig + c0 + c) * pl.rows + rb * J + j] = sum;
            }
          }
        }
      });
}

// Tasks own blocks of dw: (g, block of output channels, block of input channels), each summing
// its reduction in one fixed order. When the output-channel blocks are too few for kMinTasks
// tasks, the reduction over column blocks r (item block-major, conv_transpose_cols.h) is cut
// into `slices` contiguous ranges, each summed into its block of its own partial dw, and the
// partials are added in slice order; with one slice the tasks write dw directly. Both cuts follow
// the shape; the input channels are cut last, for the threads (channel_cut: no bit changes).
template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int64_t w_numel, int threads) {
  if (depthwise(pl)) {
    depthwise_wgrad(pl, x, dy, dw, threads);
    return;
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
  if (few_columns_wide_fit(pl, w_numel * static_cast<int64_t>(sizeof(T)))) {
    wgrad_few_columns(pl, x, dy, dw, threads);
    return;
  }
  if (wgrad_few_rows_suits(pl, sizeof(T))) {
    wgrad_few_rows(pl, x, dy, dw, threads);
    return;
  }
  const ChannelBlocks chb = channel_blocks(pl, pl.groups);
  const int64_t max_rows = chb.per_block * pl.taps;
  const ColBlocks cb = col_blocks(pl, max_rows, sizeof(T), /*for_tasks=*/true);
  const int64_t reduce = cb.count();
  const int64_t max_slices_by_memory =
      kMaxWgradPartialBytes / std::max<int64_t>(1, w_numel * static_cast<int64_t>(sizeof(T)));
  const int64_t slices =
      std::max<int64_t>(1, std::min({reduce, kMaxWgradSlices, max_slices_by_memory,
                                     ceil_div(kMinTasks, pl.groups * chb.count)}));
  const ChannelCut cut = channel_cut(pl, slices * pl.groups * chb.count, threads);
  const int64_t ci_blocks = cut.blocks, ci_per = cut.largest();
  const int64_t owners = pl.groups * chb.count * ci_blocks;
  const Workspace<T> partial(slices > 1 ? slices * w_numel : 0);
  parallel_for(
      threads, slices * owners,
      [&] { return Workspace<T>(ci_per * max_rows + (max_rows + ci_per) * cb.max_cols()); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t s = t / owners, g = (t / (chb.count * ci_blocks)) % pl.groups;
        const int64_t co0 = (t / ci_blocks % chb.count) * chb.per_block;
        const int64_t co1 = std::min(pl.cog, co0 + chb.per_block);
        const int64_t ci0 = cut.begin(t % ci_blocks), ci1 = cut.begin(t % ci_blocks + 1);
        if (ci0 == ci1) return;
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
          im2col_block(pl, dy, g, blk, co0, co1, cols, blk.cols());
          const ConstMap<T> c(cols, rows, blk.cols());
          eigen_product(acc, x_block(pl, x, g, blk, x_buf, ci0, ci1), c.transpose(), true);
        }
        T* out = (slices > 1 ? partial.data() + s * w_numel : dw) + (g * pl.cig + ci0) * pl.rows;
        StridedMap<T>(out + co0 * pl.taps, ci1 - ci0, rows, Eigen::OuterStride<>(pl.rows)) = acc;
      });
  if (slices > 1) sum_parts_in_order(partial.data(), slices, w_numel, dw, threads);
}

}  // namespace

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
