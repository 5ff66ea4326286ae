// ConvTranspose on the CPU as GEMMs over blocks of columns (the (n, p) pairs of a group,
// conv_transpose_cols.h), forward and dgrad (the backend's GEMM, cpu/gemm.h, or Eigen's on thin
// blocks), where neither conv_transpose_direct.cpp's dgrad and stride-1 forward nor the
// few-columns or few-rows products below nor the dgrad by stride phases (few input channels,
// conv_transpose_wgrad.cpp) suit the shape; wgrad is in conv_transpose_wgrad.cpp.
//   forward: cols = W_g^T x_g, then col2im: y[co, oh, ow] += cols[r, p] (y starts as bias or 0)
//   dgrad:   cols = im2col(dy) (0 where (oh, ow) is outside y), dx_g = W_g cols
// Every decomposition into tasks depends on the shape only, never on the thread count, except
// forward_by_positions' cut of its GEMMs, forward's further cut of the output channels
// (forward_channel_blocks), dgrad's and wgrad's cut of the input channels (channel_cut) and
// dgrad_few_columns' row blocks a task, which cannot change a bit; so the results are
// bit-identical for any thread count (docs/design.md, "Determinism").
#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "cpu/conv_transpose_cols.h"
#include "cpu/eigen_product.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS {
namespace conv {

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

}  // namespace conv

namespace {

using namespace conv;  // NOLINT(google-build-using-namespace): this file's own helpers

// Forward for few tasks on large images (batch 1, or a few items): tasks over (image, chunk of
// positions, block of rows) fill the column buffers of a round of (n, g) images (the GEMMs, W_g^T
// packed once per call), then tasks over (n, g, output channel) scatter them into y (col2im), in
// two parallel regions per round. A column's value does not depend on how the GEMMs are cut
// (gemm::gemm sums each element's reduction in the same runs whatever the block), so the cut may
// follow the thread count: rounds of about 2 MiB of buffer per thread, at most
// kMaxWholeColsBytes (one thread keeps its round in L2 between the GEMMs and col2im; more
// threads share fewer, larger rounds), and chunks and row blocks enough for every thread.
inline constexpr int64_t kCol2imPiecePositions = 4096;

template <class T>
void forward_by_positions(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  // Fewer columns would leave the GEMM's register tile half empty.
  constexpr int64_t kMinChunkCols = 64;
  constexpr int64_t kRoundBytesPerThread = int64_t{2} << 20;
  const int64_t image_cols = pl.rows * pl.in_hw;
  const int64_t images = pl.batch * pl.groups;  // image i = (n, g) = (i / groups, i % groups)
  const int64_t round_bytes = std::min(kRoundBytesPerThread * threads, kMaxWholeColsBytes);
  const int64_t per_round = std::clamp<int64_t>(
      round_bytes / std::max<int64_t>(1, image_cols * static_cast<int64_t>(sizeof(T))), 1,
      std::max<int64_t>(1, images));
  // Chunks: at most what keeps a task's buffer in L2, and at least `threads` tasks per round
  // where kMinChunkCols allows.
  const int64_t budget = pl.target_cols(pl.rows, sizeof(T));
  const int64_t per_thread = ceil_div(per_round * pl.in_hw, threads);
  const int64_t min_chunk = std::min(kMinChunkCols, pl.in_hw);
  int64_t chunk =
      std::clamp<int64_t>(std::min(budget, gemm::round_up(per_thread, 16)), min_chunk, pl.in_hw);
  int64_t chunks = ceil_div(pl.in_hw, chunk);
  // A round of few tasks that the threads do not divide leaves some threads a task more than
  // others (U-Net 256 -> 128's 100 x 100 image made 3 chunks for 2 threads). Up to kBalanceTasks
  // tasks a thread, the chunks are cut finer until the round's tasks are a multiple of the
  // threads (a column's value does not depend on the cut).
  constexpr int64_t kBalanceTasks = 4;
  if (threads > 1 && per_round * chunks < kBalanceTasks * threads) {
    for (int64_t want = chunks; want <= chunks + threads; ++want) {
      if (per_round * want % threads != 0) continue;
      const int64_t finer =
          std::clamp<int64_t>(gemm::round_up(ceil_div(pl.in_hw, want), 16), min_chunk, pl.in_hw);
      if (per_round * ceil_div(pl.in_hw, finer) % threads != 0) continue;
      chunk = finer;
      chunks = ceil_div(pl.in_hw, chunk);
      break;
    }
  }
  // Row blocks, whole register tiles, when the chunks of a round are still fewer than threads.
  const int64_t row_blocks = std::clamp<int64_t>(ceil_div(threads, per_round * chunks), 1,
                                                 std::max<int64_t>(1, pl.rows / kMinBlockRows));
  const int64_t block_rows = gemm::round_up(ceil_div(pl.rows, row_blocks), gemm::kRows);
  const Workspace<T> cols(image_cols * per_round);
  // col2im in pieces of each channel's positions where an image holds several, cut by the shape
  // alone (so the bits do not follow the threads): a batch-1 layer to one channel (a 1-D
  // decoder's last layer over 200000 steps) had one col2im task, most of the pass at 16 threads.
  // Whole rows of the image, and more of them than one position's taps reach across, so that
  // pieces two apart reach no output in common.
  // (In 128 bits, at most the image: the geometry accepts dilations whose reach overflows.)
  const auto reach = [](int64_t kernel, int64_t dil, int64_t stride, int64_t extent) {
    return static_cast<int64_t>(
        std::min<int128>(int128{kernel - 1} * dil / stride + 1, int128{extent}));
  };
  const int64_t piece = pl.in_h > 1 ? std::max(reach(pl.kernel_h, pl.dil_h, pl.stride_h, pl.in_h),
                                               ceil_div(kCol2imPiecePositions, pl.in_w)) *
                                          pl.in_w
                                    : std::max(reach(pl.kernel_w, pl.dil_w, pl.stride_w, pl.in_w),
                                               kCol2imPiecePositions);
  const int64_t pieces = pl.in_hw >= 2 * piece ? ceil_div(pl.in_hw, piece) : 1;
  // W_g^T (rows x cig) of every group, operand g.
  const PackedWeights<T> w_packed(
      pl.groups, pl.rows, pl.cig,
      [&](int64_t g) {
        return gemm::View<T>{w + g * pl.cig * pl.rows, 1, pl.rows};
      },
      threads);
  for (int64_t first = 0; first < images; first += per_round) {
    const int64_t count = std::min(per_round, images - first);
    parallel_for(
        threads, count * chunks * row_blocks,
        [&] { return Workspace<T>(gemm::scratch_elems<T>(block_rows, chunk, pl.cig)); },
        [&](Workspace<T>& ws, int64_t t) {
          const int64_t i = first + t / (chunks * row_blocks), g = i % pl.groups;
          const int64_t p0 = t / row_blocks % chunks * chunk;
          const int64_t len = std::min(chunk, pl.in_hw - p0);
          const int64_t r0 = t % row_blocks * block_rows;
          const int64_t rows = std::min(block_rows, pl.rows - r0);
          if (rows <= 0) return;
          // cols (rows r0.. x len) = W_g^T x_chunk
          const gemm::View<T> x_chunk{x + (i * pl.cig) * pl.in_hw + p0, pl.in_hw, 1};
          gemm::gemm_packed_a(rows, len, pl.cig, w_packed.get(g), pl.rows, r0, x_chunk,
                              cols.data() + (i - first) * image_cols + r0 * pl.in_hw + p0, pl.in_hw,
                              false, ws.data());
        });
    const T* cols_first = cols.data();
    if (pieces == 1) {
      parallel_for(threads, count * pl.cog, [&](int64_t t) {
        const int64_t i = first + t / pl.cog, g = i % pl.groups, co = t % pl.cog;
        T* y_ng = y + i * pl.cog * pl.out_hw;
        const T init = b != nullptr ? b[g * pl.cog + co] : T(0);
        std::fill_n(y_ng + co * pl.out_hw, pl.out_hw, init);
        col2im_add(pl, cols_first + (i - first) * image_cols + co * pl.taps * pl.in_hw, pl.in_hw,
                   co, co + 1, 0, pl.in_hw, y_ng);
      });
      continue;
    }
    // Pieces of each channel's positions: y's bias first, then the even pieces, then the odd
    // ones, no two pieces of a pass reaching one output.
    const int64_t fill_parts = ceil_div(pl.out_hw, piece);
    parallel_for(threads, count * pl.cog * fill_parts, [&](int64_t t) {
      const int64_t i = first + t / (pl.cog * fill_parts), co = t / fill_parts % pl.cog;
      const int64_t o0 = t % fill_parts * piece, o1 = std::min(pl.out_hw, o0 + piece);
      const T init = b != nullptr ? b[i % pl.groups * pl.cog + co] : T(0);
      std::fill(y + (i * pl.cog + co) * pl.out_hw + o0, y + (i * pl.cog + co) * pl.out_hw + o1,
                init);
    });
    for (int64_t parity = 0; parity < 2; ++parity) {
      const int64_t half = (pieces - parity + 1) / 2;  // pieces parity, parity + 2, ...
      parallel_for(threads, count * pl.cog * half, [&](int64_t t) {
        const int64_t i = first + t / (pl.cog * half), co = t / half % pl.cog;
        const int64_t p0 = (t % half * 2 + parity) * piece;
        const int64_t len = std::min(piece, pl.in_hw - p0);
        col2im_add(pl, cols_first + (i - first) * image_cols + co * pl.taps * pl.in_hw + p0,
                   pl.in_hw, co, co + 1, p0, len, y + i * pl.cog * pl.out_hw);
      });
    }
  }
}

// forward_typed's blocks of output channels: the shape's (channel_blocks), cut further for the
// threads where they leave fewer tasks than threads (batch-1 calls on small images: U-Net's
// 512 -> 256 at 13 x 13 had 4 tasks). Each block's GEMM packs x's columns again, about
// kRepackRows / rows of its time, so the count is the one with the least estimated time: rounds
// of tasks over the threads, each a share of the work. Only where no product can take the thin
// path below (every block at least 2 register tiles of rows and of columns), so that every
// product is the backend GEMM, whose sums do not depend on the block: the cut changes no bit.
ChannelBlocks forward_channel_blocks(const Plan& pl, const ColBlocks& cb, int64_t outer,
                                     int threads) {
  constexpr double kRepackRows = 32;
  constexpr int64_t kMinRows = 2 * gemm::kRows;
  const ChannelBlocks shape = channel_blocks(pl, outer);
  const int64_t last_items = pl.batch - (cb.item_blocks - 1) * cb.items_per_block;
  const int64_t last_len = pl.in_hw - (cb.chunks_per_item - 1) * cb.chunk;
  if (outer * shape.count >= threads || last_items * last_len < kMinRows) return shape;
  const auto rows_of = [&](int64_t per) {  // the fewest rows of a block of `per` channels
    const int64_t last = pl.cog - (ceil_div(pl.cog, per) - 1) * per;
    return std::min(per, last) * pl.taps;
  };
  if (rows_of(shape.per_block) < kMinRows) return shape;
  // The shape's blocks, then each larger count cut as evenly as it goes: the largest block of a
  // count would leave a short last one (64 channels in 2: 63 + 1, under kMinRows, so a batch-1
  // 256 -> 64 k5 s3 ran as one task at any thread count).
  ChannelBlocks best = shape;
  double best_time = 0;
  for (int64_t count = shape.count; count <= pl.cog; ++count) {
    const int64_t per = count == shape.count ? shape.per_block : ceil_div(pl.cog, count);
    if (per * pl.taps < kMinRows) break;
    if (ceil_div(pl.cog, per) != count) continue;  // that cut is another count's
    if (rows_of(per) < kMinRows) continue;  // a short last block; a larger count may not have one
    const int64_t tasks = outer * count;
    const double time = static_cast<double>(ceil_div(tasks, int64_t{threads})) /
                        static_cast<double>(tasks) *
                        (1.0 + kRepackRows / static_cast<double>(per * pl.taps));
    if (count == shape.count || time < best_time) best = {per, count}, best_time = time;
    if (tasks >= 2 * int64_t{threads}) break;
  }
  return best;
}

// Forward of short rows at a W stride above 1, or at stride 1 under a vector, where several taps
// land on each output (DCGAN's k4 s2 layers on 4 x 4 to 8 x 8 images): col2im_add would add each
// tap's row into y a scalar at a time, every s-th element, 4 adds an output (a fifth of DCGAN 128
// -> 64's forward). Here a task's outputs gather channels-last: the GEMM's buffer holds each
// column's rows in (tap, channel) order (see forward_typed for how), and each position adds every
// tap's run of channels into ycl[item][oh][ow][channel] as vectors; the block is transposed into y
// at the end. The sums of an output go in (column block, position, tap) order, whatever the block
// of channels. Measured against col2im_add at 1 / 2 threads: DCGAN 128 -> 64 1.18x / 1.23x, the
// grouped x2 layer 1.24x / 1.16x, DCGAN 256 -> 128 at 4 x 4 (128 columns a task) 1.19x / 1.26x;
// with fewer taps an output (CycleGAN's k3 s2: 0.91x / 0.83x, U-Net's k2 s2: 0.93x / 1.03x) it
// lost, and below kChannelsLastMinColumns columns a task (9 columns of 16 channels: 0.8x) the
// block's transposes cost more than the scalar adds. The task's block of y is held whole, so it is
// bounded (a tall image of short rows would need one as large as its output): `per_block` is the
// shape's channels per block, at least any the threads' cut gives.
bool forward_channels_last(const Plan& pl, const ColBlocks& cb, int64_t per_block,
                           int64_t elem_bytes) {
  constexpr int64_t kMaxRowLanes = 2;  // col2im_add's vector loops take rows past 2 vectors
  constexpr int64_t kChannelsLastMinColumns = 16;
  constexpr int64_t kMinTapsPerOutput = 3;
  constexpr int64_t kMaxBlockBytes = int64_t{4} << 20;
  const int64_t lanes = gemm::kVecBytes / elem_bytes;
  const int64_t items = std::min(pl.batch, cb.items_per_block);
  // At stride 1 col2im_add adds each tap's row of x's width: under a vector it does so a scalar
  // at a time, and the block's runs of channels won (64 -> 256 k4 on 11 x 11 1.32x, 48 -> 192 on
  // 10 x 10 1.29x, 128 -> 64 on 4 x 4 1.15x, k3x2 on 7 x 7 1.28x); from a vector on (16 x 16:
  // 0.82x-0.93x) col2im_add's own vector loop won (docs/performance.md, thirty-eighth session).
  const bool row_runs = pl.stride_w > 1 || pl.in_w < lanes;
  return row_runs && pl.in_w <= kMaxRowLanes * lanes && pl.cog >= lanes &&
         mul_le(int128{kMinTapsPerOutput} * pl.stride_h, pl.stride_w, pl.taps) &&
         items * pl.in_hw >= kChannelsLastMinColumns &&
         fits(items * per_block, pl.out_hw, elem_bytes, kMaxBlockBytes);
}

// out (a x b) = in (b x a) transposed, ld's given: whole L x L blocks in registers, the edges a
// scalar at a time.
template <class T>
void transpose_matrix(const T* in, int64_t in_ld, int64_t a, int64_t b, T* out, int64_t out_ld) {
  constexpr int L = gemm::kLanes<T>;
  const int64_t a_whole = a / L * L, b_whole = b / L * L;
  for (int64_t i0 = 0; i0 < b_whole; i0 += L)
    for (int64_t t0 = 0; t0 < a_whole; t0 += L)
      gemm::transpose_tile<T, L>(in + i0 * in_ld + t0, in_ld, L, out + t0 * out_ld + i0, out_ld, L);
  for (int64_t t = 0; t < a; ++t)
    for (int64_t i = t < a_whole ? b_whole : 0; i < b; ++i)
      out[t * out_ld + i] = in[i * in_ld + t];
}

// ycl (items x out_hw x nco) += the transposed buffer cols_t (a block's columns x rows): each
// column's rows in (tap, channel) order, or with `tap_major` false in the weight's (channel, tap)
// order, then transposed a column at a time through `tmp` (taps x nco).
template <class T>
void col2im_channels_last(const Plan& pl, const ColBlock& blk, const T* cols_t, int64_t nco,
                          bool tap_major, T* tmp, T* ycl) {
  const int64_t rows = pl.taps * nco;
  for (int64_t j = 0; j < blk.items; ++j) {
    T* ycl_j = ycl + j * pl.out_hw * nco;
    for (int64_t p = blk.p0; p < blk.p0 + blk.len; ++p) {
      const int64_t ih = p / pl.in_w, iw = p % pl.in_w;
      const T* src = cols_t + (j * blk.len + p - blk.p0) * rows;
      if (!tap_major) {
        transpose_matrix(src, pl.taps, pl.taps, nco, tmp, nco);
        src = tmp;
      }
      const auto [first_ow, kw0, kw1] = taps_in_row(pl, iw);
      for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
        const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
        if (oh < 0 || oh >= pl.out_h || kw0 == kw1) continue;
        T* dst = ycl_j + (oh * pl.out_w + first_ow + kw0 * pl.dil_w) * nco;
        const T* tap = src + (kh * pl.kernel_w + kw0) * nco;
        if (pl.dil_w == 1) {
          // Undilated, a row's taps land on consecutive positions: their (tap, channel) rows and
          // y's (position, channel) run are one contiguous run each. With a few channels a block
          // (6 of 48 -> 48 k7 s2's 8 blocks) a tap's run is shorter than a vector, and the
          // compiler's loop added it a scalar at a time: a third of that forward's time.
          add_run(dst, tap, (kw1 - kw0) * nco);
        } else {
          for (int64_t kw = kw0; kw < kw1; ++kw)
            add_run(dst + (kw - kw0) * pl.dil_w * nco, tap + (kw - kw0) * nco, nco);
        }
      }
    }
  }
}

// A 1x1 layer at stride 1 without padding (cols_are_dy), on planes of at least
// kPointwiseMinPositions and at least kPointwiseMinInputs input channels a group: y_ng =
// W_g^T x_ng, each item's plane a product written where it lies, then the bias added. The column
// path writes the product to a buffer, fills y with the bias and adds the buffer into it: three
// passes over y's size where this makes one (8 -> 96 on 37 x 40, 16 items: 2.2x at 1 thread).
// Shorter planes make short products (the column path puts items side by side), and fewer
// inputs a reduction the register tile wastes (3 -> 64: 0.45x, where few_input_forward wins).
constexpr int64_t kPointwiseMinPositions = 64, kPointwiseMinInputs = 8;
bool pointwise_forward_suits(const Plan& pl) {
  return cols_are_dy(pl) && pl.in_hw >= kPointwiseMinPositions && pl.cig >= kPointwiseMinInputs;
}

// Tasks (n, g, run of positions); W_g^T is packed once for all of them.
template <class T>
void pointwise_forward(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  // Runs of positions of about kRunBytes of x and y columns, cut finer (down to kMinRun) until
  // every thread has kTasksPerThread tasks (a cut changes no bit).
  constexpr int64_t kRunBytes = int64_t{1} << 20, kMinRun = 64, kTasksPerThread = 4;
  const int64_t per_col = (pl.cig + pl.cog) * static_cast<int64_t>(sizeof(T));
  const int64_t images = pl.batch * pl.groups;
  const int64_t by_size = std::max<int64_t>(kMinRun, kRunBytes / per_col / 16 * 16);
  const int64_t by_tasks =
      gemm::round_up(ceil_div(images * pl.in_hw, kTasksPerThread * int64_t{threads}), 16);
  const int64_t run = std::clamp<int64_t>(std::min(by_size, by_tasks), kMinRun, pl.in_hw);
  const int64_t runs = ceil_div(pl.in_hw, run);
  // W_g^T (cog x cig): element (co, ci) of group g at w[(g * cig + ci) * cog + co].
  const PackedWeights<T> w_packed(
      pl.groups, pl.cog, pl.cig,
      [&](int64_t g) {
        return gemm::View<T>{w + g * pl.cig * pl.cog, 1, pl.cog};
      },
      threads);
  parallel_for(
      threads, images * runs,
      [&] { return Workspace<T>(gemm::scratch_elems<T>(pl.cog, run, pl.cig)); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t ng = t / runs, n = ng / pl.groups, g = ng % pl.groups;
        const int64_t p0 = t % runs * run, len = std::min(run, pl.in_hw - p0);
        const T* x_ng = x + (n * pl.in_channels + g * pl.cig) * pl.in_hw + p0;
        T* y_ng = y + (n * pl.out_channels + g * pl.cog) * pl.out_hw + p0;
        gemm::gemm_packed_a(pl.cog, len, pl.cig, w_packed.get(g), pl.cog, 0,
                            gemm::View<T>{x_ng, pl.in_hw, 1}, y_ng, pl.out_hw, false, ws.data());
        if (b == nullptr) return;
        for (int64_t co = 0; co < pl.cog; ++co) {
          const T bias = b[g * pl.cog + co];
          T* row = y_ng + co * pl.out_hw;
          for (int64_t i = 0; i < len; ++i)
            row[i] = bias + row[i];  // the column path's order: the bias, then the product
        }
      });
}

// Tasks (item block, g, block of output channels); each writes only its own channels of its
// items of y, looping over the column blocks of its items. The choice between this,
// forward_by_positions and the depthwise loops depends on the shape only.
template <class T>
void forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  if (depthwise(pl)) {
    depthwise_forward(pl, x, w, b, y, threads);
    return;
  }
  if (pointwise_forward_suits(pl)) {
    pointwise_forward(pl, x, w, b, y, threads);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_suits(pl, sizeof(T))) {
      winograd_forward(pl, x, w, b, y, threads);
      return;
    }
  }
  if (direct_forward_suits(pl, sizeof(T))) {
    direct_forward(pl, x, w, b, y, threads);
    return;
  }
  // By stride phases before the few-input loops at strides above 1 (3 -> 16 k3x8 s2 1.45x, 4 per
  // group -> 16 k7x8 s2 1.7x); at stride 1 those loops kept up or won (0.9x on 3 -> 256 k8).
  const bool phases = phase_gemm_forward_suits(pl, sizeof(T));
  if (few_input_forward_suits(pl) && !(phases && pl.stride_h * pl.stride_w > 1)) {
    few_input_forward(pl, x, w, b, y, threads);
    return;
  }
  if (phases) {
    phase_gemm_forward(pl, x, w, b, y, threads);
    return;
  }
  const ChannelBlocks by_size = channel_blocks(pl, kMinTasks);
  const ColBlocks cb = col_blocks(pl, by_size.per_block * pl.taps, sizeof(T), /*for_tasks=*/false);
  const int64_t outer = cb.item_blocks * pl.groups;
  // By positions: images longer than one column block, or a call that would be one task (a
  // batch-1 sequence whose one block holds every position: Conv-TasNet's 1-channel decoder over
  // 4000 frames ran on one thread at any thread count; by positions 0.83x at 1 thread, 2x at 2).
  constexpr int64_t kOneTaskMinPositions = 1024;  // 16 threads' chunks of 64 columns
  const bool one_task = outer * by_size.count == 1 && pl.in_hw >= kOneTaskMinPositions;
  // And few rows (an RGB or mono output's co x taps, up to two of the GEMM's register tiles)
  // on images of at least kThinMinPositions: there the blocked path's thin product (Eigen's, on
  // items side by side, often one task for the whole batch) measured 1.3x-2.5x slower at 1
  // thread (RGB, 2-channel and mono outputs, 1-D and 2-D; docs/performance.md). At exactly two
  // tiles the blocked path's product is the backend GEMM, but as one task for a small batch, and
  // by positions the GEMM reads x's rows in place (gemm.h): faster at 1 thread and using every
  // thread. On images of 36-49 positions a per-image GEMM is too short, and the blocked path won.
  constexpr int64_t kThinMinPositions = 64;
  const bool thin_rows = pl.rows <= 2 * gemm::kRows && pl.in_hw >= kThinMinPositions;
  if ((thin_rows || (outer * by_size.count < kMinTasks && (cb.chunks_per_item > 1 || one_task))) &&
      fits(pl.rows, pl.in_hw, sizeof(T), kMaxWholeColsBytes)) {
    forward_by_positions(pl, x, w, b, y, threads);
    return;
  }
  const ChannelBlocks chb = forward_channel_blocks(pl, cb, outer, threads);
  const int64_t max_rows = chb.per_block * pl.taps;
  const int64_t scratch = (max_rows + pl.cig) * cb.max_cols();
  const int64_t gemm_elems = std::max(gemm::scratch_elems<T>(max_rows, cb.max_cols(), pl.cig),
                                      gemm::scratch_elems<T>(cb.max_cols(), max_rows, pl.cig));
  // The channels-last outputs of a task's items and, when forward_channels_last, the rows of the
  // GEMM's output in (tap, channel) order: from a copy of the task's block of the weight in that
  // order, or where the task has fewer columns than the weight has rows (cig), from each column's
  // (channel, tap) rows transposed in turn, whichever moves fewer elements (DCGAN 512 -> 256 at
  // 2 x 2, 32 columns: the weight's copy took as long as the product).
  const bool cl = forward_channels_last(pl, cb, channel_blocks(pl, outer).per_block, sizeof(T));
  const int64_t ycl_elems = cb.items_per_block * pl.out_hw * chb.per_block;
  const int64_t cl_elems = cl ? ycl_elems + std::max(pl.cig, int64_t{1}) * max_rows : 0;
  parallel_for(
      threads, outer * chb.count, [&] { return Workspace<T>(scratch + gemm_elems + cl_elems); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t ib = t / (pl.groups * chb.count);
        const int64_t g = (t / chb.count) % pl.groups;
        const int64_t co0 = (t % chb.count) * chb.per_block;
        const int64_t co1 = std::min(pl.cog, co0 + chb.per_block);
        const int64_t nco = co1 - co0;
        const ColBlock items = cb.block(pl, ib, 0);
        const T* w_block = w + g * pl.cig * pl.rows + co0 * pl.taps;  // (cig x rows), ld rows
        const int64_t rows = nco * pl.taps;
        T* cols = ws.data();
        T* x_buf = ws.data() + max_rows * cb.max_cols();
        T* gemm_scratch = ws.data() + scratch;
        T* ycl = gemm_scratch + gemm_elems;  // items x out_hw x nco
        T* w_cl = ycl + ycl_elems;           // cig x (tap, channel), or a column's taps x nco
        const bool tap_major = cl && items.items * pl.in_hw >= pl.cig;
        if (cl) {
          for (int64_t j = 0; j < items.items; ++j)
            for (int64_t p = 0; p < pl.out_hw; ++p)
              for (int64_t c = 0; c < nco; ++c)
                ycl[(j * pl.out_hw + p) * nco + c] = b != nullptr ? b[g * pl.cog + co0 + c] : T(0);
          for (int64_t ci = 0; tap_major && ci < pl.cig; ++ci)  // (channel, tap) -> (tap, channel)
            transpose_matrix(w_block + ci * pl.rows, pl.taps, pl.taps, nco, w_cl + ci * rows, nco);
        } else {
          for (int64_t n = items.n0; n < items.n0 + items.items; ++n) {
            T* y_ng = y + (n * pl.out_channels + g * pl.cog) * pl.out_hw;
            for (int64_t co = co0; co < co1; ++co) {
              const T init = b != nullptr ? b[g * pl.cog + co] : T(0);
              std::fill_n(y_ng + co * pl.out_hw, pl.out_hw, init);
            }
          }
        }
        for (int64_t c = 0; c < cb.chunks_per_item; ++c) {
          const ColBlock blk = cb.block(pl, ib, c);
          const int64_t ld = blk.cols();
          const ConstStridedMap<T> x_blk = x_block(pl, x, g, blk, x_buf);
          const int64_t x_ld = x_blk.outerStride();
          // Few columns: the buffer transposed, (columns x rows), so that col2im reads each
          // position's rows together and the GEMM's long side is the weight's rows.
          const bool transposed = cl || ld <= kMaxTransposedCols;
          // Products thinner than two of the GEMM's register tiles (a batch of 1x1 latents, a
          // 1-channel output) leave its tiles mostly empty: Eigen's, 4 wide on that side, wastes
          // less there.
          const bool thin = (transposed ? ld : rows) < 2 * gemm::kRows;
          const T* b_op = tap_major ? w_cl : w_block;  // the weight block, (cig x rows)
          const int64_t b_ld = tap_major ? rows : pl.rows;
          const ConstStridedMap<T> w_map(b_op, pl.cig, rows, Eigen::OuterStride<>(b_ld));
          if (thin && transposed) {
            eigen_product(MutMap<T>(cols, ld, rows), x_blk.transpose(), w_map, false);
          } else if (thin) {
            eigen_product(MutMap<T>(cols, rows, ld), w_map.transpose(), x_blk, false);
          } else if (transposed) {
            gemm::gemm<T>(ld, rows, pl.cig, {x_blk.data(), 1, x_ld}, {b_op, b_ld, 1}, cols, rows,
                          false, gemm_scratch);
          } else {
            gemm::gemm<T>(rows, ld, pl.cig, {w_block, 1, pl.rows}, {x_blk.data(), x_ld, 1}, cols,
                          ld, false, gemm_scratch);
          }
          if (cl) {
            col2im_channels_last(pl, blk, cols, nco, tap_major, w_cl,
                                 ycl + (blk.n0 - items.n0) * pl.out_hw * nco);
            continue;
          }
          for (int64_t j = 0; j < blk.items; ++j) {
            T* y_ng = y + ((blk.n0 + j) * pl.out_channels + g * pl.cog) * pl.out_hw;
            if (transposed) {
              col2im_add_transposed(pl, cols + j * blk.len * rows, rows, co0, co1, blk.p0, blk.len,
                                    y_ng);
            } else {
              col2im_add(pl, cols + j * blk.len, ld, co0, co1, blk.p0, blk.len, y_ng);
            }
          }
        }
        if (cl) {  // ycl (out_hw x nco) of each item -> its planes of y
          for (int64_t j = 0; j < items.items; ++j) {
            transpose_matrix(ycl + j * pl.out_hw * nco, nco, nco, pl.out_hw,
                             y + ((items.n0 + j) * pl.out_channels + g * pl.cog + co0) * pl.out_hw,
                             pl.out_hw);
          }
        }
      });
}

// The items of a block's columns, `channels` rows of tmp (b.cols() apart), copied out to their
// own planes of dx: item j's row ci to dx_first + (j * in_channels + ci) * in_hw.
template <class T>
void copy_out_items(const Plan& pl, const ColBlock& b, int64_t channels, const T* tmp,
                    T* dx_first) {
  for (int64_t ci = 0; ci < channels; ++ci)
    for (int64_t j = 0; j < b.items; ++j)
      gemm::copy_run(tmp + ci * b.cols() + j * b.len, b.len,
                     dx_first + (j * pl.in_channels + ci) * pl.in_hw);
}

// dx of input channels [ci0, ci1) of group g on a block's columns = lhs * rhs, a
// ((ci1 - ci0) x cols) product: written in place for a block of one item, else through tmp
// (that many elements) and copied out item by item.
template <class T, class Lhs, class Rhs>
void store_dx(const Plan& pl, int64_t g, const ColBlock& b, int64_t ci0, int64_t ci1,
              const Lhs& lhs, const Rhs& rhs, T* tmp, T* dx) {
  T* dx_first = dx + (b.n0 * pl.in_channels + g * pl.cig + ci0) * pl.in_hw + b.p0;
  if (b.items == 1) {
    eigen_product(StridedMap<T>(dx_first, ci1 - ci0, b.len, Eigen::OuterStride<>(pl.in_hw)), lhs,
                  rhs, false);
    return;
  }
  eigen_product(MutMap<T>(tmp, ci1 - ci0, b.cols()), lhs, rhs, false);
  copy_out_items(pl, b, ci1 - ci0, tmp, dx_first);
}

// dgrad for few columns (batch x input positions): dx_g = W_g cols with W_g (cig x rows) read in
// place, row by row, and never packed. With 32 columns (a vocoder's first upsampler on one
// item) and a 2M-element weight, packing W_g costs as much as the product: here each element of
// W_g is read once from memory, and the column buffer, K x at most kFewColumns, stays in L2.
// Register tile: kFewRows rows of W_g by one or two vectors of columns; each element of dx is one
// chain over the rows of cols in order, whatever the task.
constexpr int kFewRows = gemm::kRows;

// Few columns (up to 256 on a weight past 2 MiB, few_columns_wide_fit: DCGAN 256 -> 128 at 8x8,
// U-Net 512 -> 256 and EnCodec x8 on the scaled suite, 1.26x-1.37x at 1 thread, where the GEMM
// path packed the weight block by block), and row blocks enough for kMinTasks tasks: the cut does
// not split the reduction, so a weight of fewer rows (DCGAN's 100-channel latent: 9 blocks) would
// leave threads idle while each task streams its rows (0.69x the GEMM path at 16 threads).
bool few_columns(const Plan& pl, int64_t elem_bytes) {
  const int64_t w_bytes = pl.in_channels * pl.rows * elem_bytes;
  return few_columns_wide_fit(pl, w_bytes) &&
         pl.groups * ceil_div(pl.cig, int64_t{kFewRows}) >= kMinTasks;
}

// The columns of cols are few but its rows can be many (a 512-channel 3x3 weight: 4608), and
// past kColsInL2Bytes (half a thread's L2 budget: the weight rows stream through the rest) a row
// block alone would stream all of cols from L3 (and its weight rows, longer than L1, from L2 once
// per tile of columns). Then a task takes up to kMaxTaskRowBlocks row blocks and runs the
// reduction in runs of about kColsRunBytes of cols, every row block over a run before the next:
// the run is read from L3 once a task and from L2 by its other row blocks, each weight row's
// piece stays in L1 across the tiles of columns, and the sums are taken up again from the task's
// output rows (few_columns_tile's `resume`), so the chains do not change. More row blocks a task
// means fewer tasks, so the count follows the threads (the cut changes no bit): kTasksPerThread
// tasks a thread where the row blocks allow. A cols that fits runs whole, a row block a task.
constexpr int64_t kColsInL2Bytes = kColsBudgetBytes / 2;
constexpr int64_t kColsRunBytes = kColsBudgetBytes / 4;
constexpr int64_t kMaxTaskRowBlocks = 8;
constexpr int64_t kTasksPerThread = 4;

// Parts the columns of each task's row blocks are cut into, for the threads: whole pairs of
// vectors (the tiles' width, so every element keeps its one chain and the cut changes no bit),
// as many as give the fewest rounds of tasks per share of the work. Row blocks alone can leave a
// last round mostly idle: DCGAN 256 -> 128 at 4 x 4 has 22 blocks of 12 rows at AVX-512, two
// rounds on 16 threads for 1.4 rounds of work. Each extra part reads its row blocks' weight, the
// large operand, once more: kColumnPartCost of a part's work is charged for it, so that a tie
// keeps the fewer parts.
inline constexpr double kColumnPartCost = 0.05;

inline int64_t few_columns_parts(int64_t tasks, int64_t pairs, int threads) {
  int64_t best = 1;
  double best_time = parts_time(tasks, 1, threads, kColumnPartCost);
  for (int64_t c = 2; c <= pairs; ++c) {
    const double time = parts_time(tasks, c, threads, kColumnPartCost);
    if (time < best_time) best = c, best_time = time;
  }
  return best;
}

// The columns past the last whole vector (49 columns: 3 vectors and 1) as dot products along the
// reduction instead of one more vector of the register tile, which costs the same multiplies for
// 1 column as for L: 49 columns took the time of 64 (a 7 x 7 image, batch 1: a decoder's first
// layer at inference). Here a column costs 1/L of a vector's multiplies, the weight rows are
// read as vectors along the reduction, and `bt` holds the columns transposed (column j's rows at
// bt + j * bt_ld). out[r * out_ld + j] = (out's value if `resume`, else 0) + the sum over
// k < k_count of a_rows[r][k] bt[j * bt_ld + k], summed in L lanes by k mod L and the lanes then
// added in order: one chain per element for a given shape, whatever the task.
template <class T, int R, int J>
void few_columns_dot(const T* const* a_rows, const T* bt, int64_t bt_ld, int64_t k_count, T* out,
                     int64_t out_ld, int stored_rows, bool resume) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  Vec acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j)
      acc[r][j] = Vec{};
  const auto step = [&](int64_t k, auto load) {
    Vec b[J];
    for (int j = 0; j < J; ++j)
      b[j] = load(bt + j * bt_ld + k);
    for (int r = 0; r < R; ++r) {
      const Vec a = load(a_rows[r] + k);
      for (int j = 0; j < J; ++j)
        acc[r][j] += a * b[j];
    }
  };
  int64_t k = 0;
  for (; k + L <= k_count; k += L) {
    step(k, [](const T* p) {
      Vec v;
      std::memcpy(&v, p, sizeof(Vec));
      return v;
    });
  }
  if (k < k_count) step(k, [n = k_count - k](const T* p) { return load_first<Vec>(p, n); });
  for (int r = 0; r < stored_rows; ++r) {
    for (int j = 0; j < J; ++j) {
      T sum = acc[r][j][0];
      for (int l = 1; l < L; ++l)
        sum += acc[r][j][l];
      T& o = out[r * out_ld + j];
      o = resume ? o + sum : sum;
    }
  }
}

// few_columns_dot over a row block of kFewRows rows, J columns, in sub-blocks of rows that keep
// R x J accumulators within three quarters of the vector registers.
template <class T, int J>
void few_columns_dot_block(const T* const* a_rows, const T* bt, int64_t bt_ld, int64_t k_count,
                           T* out, int64_t out_ld, int rows, bool resume) {
  constexpr int kAccumulators = gemm::kVecRegisters * 3 / 4;
  constexpr int R = std::clamp(kAccumulators / J, 1, kFewRows);
  for (int r0 = 0; r0 < rows; r0 += R) {
    const T* sub[R];
    for (int r = 0; r < R; ++r)  // rows past the block's repeat its last: not stored
      sub[r] = a_rows[std::min(r0 + r, rows - 1)];
    few_columns_dot<T, R, J>(sub, bt, bt_ld, k_count, out + r0 * out_ld, out_ld,
                             std::min(R, rows - r0), resume);
  }
}

// dgrad_few_columns takes the columns past its whole vectors by dot products (few_columns_dot)
// when they are at most a quarter of a vector: each reads its weight rows as vectors and sums its
// lanes at the end, so a column costs about a sixth of a vector, not 1/L, and with half a vector
// left the padded vector was as fast or faster (docs/performance.md, twenty-seventh session).
template <class T>
inline constexpr int kMaxDotColumns = gemm::kLanes<T> / 4;

template <class T>
void dgrad_few_columns(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int L = gemm::kLanes<T>;
  const int64_t columns = pl.batch * pl.in_hw;
  const int64_t ld = gemm::round_up(columns, L);  // zero columns up to whole vectors
  // The tiles' vectors, then the columns left to dot products (none where too many are left:
  // they take a last, partial vector of the tiles).
  const int64_t rest = columns % L <= kMaxDotColumns<T> ? columns % L : 0;
  const int64_t vecs = ceil_div(columns - rest, int64_t{L});
  const int64_t row_blocks = ceil_div(pl.cig, int64_t{kFewRows});
  const int64_t row_bytes = ld * static_cast<int64_t>(sizeof(T));
  const bool in_runs = pl.rows * row_bytes > kColsInL2Bytes;
  const int64_t per_task =
      in_runs
          ? std::clamp<int64_t>(pl.groups * row_blocks / (kTasksPerThread * std::max(threads, 1)),
                                1, kMaxTaskRowBlocks)
          : 1;
  const int64_t tasks_per_group = ceil_div(row_blocks, per_task);
  const int64_t run = in_runs ? std::max<int64_t>(kColsRunBytes / row_bytes, L) : pl.rows;
  const int64_t pairs = ceil_div(vecs, int64_t{2});
  const int64_t parts = few_columns_parts(pl.groups * tasks_per_group, pairs, threads);
  const Workspace<T> cols(pl.groups * pl.rows * ld);
  const Workspace<T> tail(pl.groups * rest * pl.rows);
  few_columns_cols(pl, dy, ld, cols.data(), threads, rest > 0 ? tail.data() : nullptr,
                   columns - rest);
  parallel_for(
      threads, pl.groups * tasks_per_group * parts,
      [&] { return Workspace<T>(per_task * kFewRows * ld); },
      [&](Workspace<T>& out, int64_t task) {
        const int64_t t = task / parts, part = task % parts;
        const int64_t g = t / tasks_per_group, b0 = t % tasks_per_group * per_task;
        const int64_t b1 = std::min(row_blocks, b0 + per_task);
        // The part's vectors [v_begin, v_end) and columns [c_begin, c_end) of dx; the last part
        // also takes the columns left to dot products.
        const int64_t v_begin = pairs * part / parts * 2;
        const int64_t v_end = std::min(vecs, pairs * (part + 1) / parts * 2);
        const bool dots = rest > 0 && part == parts - 1;
        const int64_t c_begin = v_begin * L;
        const int64_t c_end = dots ? columns : std::min(columns, v_end * L);
        const T* c = cols.data() + g * pl.rows * ld;
        for (int64_t k0 = 0; k0 < pl.rows; k0 += run) {
          const int64_t kc = std::min(run, pl.rows - k0);
          for (int64_t blk = b0; blk < b1; ++blk) {
            const int64_t r0 = blk * kFewRows;
            const int rows = static_cast<int>(std::min<int64_t>(kFewRows, pl.cig - r0));
            const T* w_rows[kFewRows];
            for (int r = 0; r < kFewRows; ++r)  // rows past cig repeat the last: not stored
              w_rows[r] = w + (g * pl.cig + r0 + std::min(r, rows - 1)) * pl.rows + k0;
            T* o = out.data() + (blk - b0) * kFewRows * ld;
            for (int64_t v0 = v_begin; v0 < v_end; v0 += 2) {
              if (v_end - v0 >= 2) {
                few_columns_tile<T, kFewRows, 2>(w_rows, c + k0 * ld + v0 * L, ld, kc, o + v0 * L,
                                                 ld, kFewRows, false, k0 > 0);
              } else {
                few_columns_tile<T, kFewRows, 1>(w_rows, c + k0 * ld + v0 * L, ld, kc, o + v0 * L,
                                                 ld, kFewRows, false, k0 > 0);
              }
            }
            if (dots) {
              gemm::with_count<kMaxDotColumns<T>>(static_cast<int>(rest), [&]<int J>() {
                few_columns_dot_block<T, J>(w_rows, tail.data() + g * rest * pl.rows + k0, pl.rows,
                                            kc, o + columns - rest, ld, rows, k0 > 0);
              });
            }
            if (k0 + kc < pl.rows) continue;  // the block's sums are taken up by the next run
            for (int r = 0; r < rows; ++r) {
              for (int64_t n = c_begin / pl.in_hw; n < pl.batch && n * pl.in_hw < c_end; ++n) {
                const int64_t lo = std::max(c_begin, n * pl.in_hw);
                const int64_t hi = std::min(c_end, (n + 1) * pl.in_hw);
                std::copy(o + r * ld + lo, o + r * ld + hi,
                          dx + (n * pl.in_channels + g * pl.cig + r0 + r) * pl.in_hw +
                              (lo - n * pl.in_hw));
              }
            }
          }
        }
      });
}

// dgrad for few rows (conv_transpose_cols.h, few_rows_fit): dx_g (cig x P) = W_g (cig x rows)
// cols (rows x P), the reduction only rows long. dx, the large operand, is written once, in
// place, tile by tile (the GEMM path's Eigen product zeroes its destination before adding into
// it: two passes over dx). Register tile: kFewRows input channels by two vectors of positions,
// each element one chain over the rows in order, whatever the task. With so short a reduction
// the tile's setup counts: its weights come packed ([row][channel]), from one pointer.
template <class T>
void few_rows_dgrad_tile(const T* __restrict wp, const T* __restrict cols, int64_t ld,
                         int64_t k_count, T* __restrict out, int64_t out_ld) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>, R = kFewRows;
  Vec acc[R][2] = {};
  for (int64_t k = 0; k < k_count; ++k) {
    Vec b0, b1;
    std::memcpy(&b0, cols + k * ld, sizeof(Vec));
    std::memcpy(&b1, cols + k * ld + L, sizeof(Vec));
    for (int r = 0; r < R; ++r) {
      const T a = wp[k * R + r];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < R; ++r) {
    std::memcpy(out + r * out_ld, &acc[r][0], sizeof(Vec));
    std::memcpy(out + r * out_ld + L, &acc[r][1], sizeof(Vec));
  }
}

template <class T>
void dgrad_few_rows(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int NR = gemm::kCols<T>;
  constexpr int64_t kMinRunTiles = 4;  // a task's positions: at least this many tiles
  const int64_t item_ld = few_rows_item_ld<T>(pl);
  const int64_t ld = few_rows_ld<T>(pl);
  const Workspace<T> cols(pl.groups * pl.rows * ld);
  few_rows_cols(pl, dy, cols.data(), threads);
  // W_g in blocks of kFewRows input channels, each [row][channel], channels past cig zero.
  const int64_t blocks = ceil_div(pl.cig, int64_t{kFewRows});
  const Workspace<T> wp(pl.groups * blocks * pl.rows * kFewRows);
  for (int64_t g = 0; g < pl.groups; ++g) {
    for (int64_t c = 0; c < blocks * kFewRows; ++c) {
      T* dst = wp.data() + ((g * blocks + c / kFewRows) * pl.rows) * kFewRows + c % kFewRows;
      const T* src = w + (g * pl.cig + c) * pl.rows;
      for (int64_t k = 0; k < pl.rows; ++k)
        dst[k * kFewRows] = c < pl.cig ? src[k] : T(0);
    }
  }
  // Tasks (group, item, run of tiles of positions), the runs cut for kMinTasks tasks where runs
  // of kMinRunTiles allow. No task splits a reduction: the cut cannot change a bit.
  const int64_t tiles = ceil_div(pl.in_hw, int64_t{NR});
  const int64_t runs = std::clamp(ceil_div(kMinTasks, pl.groups * pl.batch), int64_t{1},
                                  std::max<int64_t>(1, tiles / kMinRunTiles));
  parallel_for(threads, pl.groups * pl.batch * runs, [&](int64_t t) {
    const int64_t g = t / (pl.batch * runs), n = t / runs % pl.batch, run = t % runs;
    const T* cols_n = cols.data() + g * pl.rows * ld + n * item_ld;
    T* dx_n = dx + (n * pl.in_channels + g * pl.cig) * pl.in_hw;
    T edge[kFewRows * NR];  // a partial tile: computed here, its valid part copied out
    for (int64_t j = tiles * run / runs; j < tiles * (run + 1) / runs; ++j) {
      const int64_t p0 = j * NR, width = std::min<int64_t>(NR, pl.in_hw - p0);
      for (int64_t cb = 0; cb < blocks; ++cb) {
        const int64_t c0 = cb * kFewRows;
        const int rows = static_cast<int>(std::min<int64_t>(kFewRows, pl.cig - c0));
        const T* w_block = wp.data() + (g * blocks + cb) * pl.rows * kFewRows;
        T* out = dx_n + c0 * pl.in_hw + p0;
        if (rows == kFewRows && width == NR) {
          if (p0 + 2 * NR <= pl.in_hw) {  // the next tile's lines of dx, for writing
            for (int r = 0; r < kFewRows; ++r) {
              __builtin_prefetch(out + r * pl.in_hw + NR, 1);
              __builtin_prefetch(out + r * pl.in_hw + NR + NR / 2, 1);
            }
          }
          few_rows_dgrad_tile(w_block, cols_n + p0, ld, pl.rows, out, pl.in_hw);
          continue;
        }
        few_rows_dgrad_tile(w_block, cols_n + p0, ld, pl.rows, edge, int64_t{NR});
        for (int r = 0; r < rows; ++r)
          std::copy_n(edge + r * NR, width, out + r * pl.in_hw);
      }
    }
  });
}

// dgrad's GEMM path takes Eigen's product for a block of n columns that would leave the backend
// GEMM's tiles mostly empty (below).
template <class T>
bool dgrad_on_eigen(int64_t n) {
  return n < 2 * gemm::kCols<T> || 4 * gemm::round_up(n, gemm::kCols<T>) > 5 * n;
}

// Parts the columns of each one-item block are cut into for the threads, of whole register tiles
// and at least kMinPartColumns columns (two tiles at AVX-512): on the backend's GEMM an element's
// sums do not depend on the cut, and a part builds only its own columns, so it costs little more
// than packing its weight block again. With about as many tasks as threads (DCGAN's RGB dgrad: 16
// column blocks on 16 threads) the pass waits for its slowest thread, and on the 16-core host
// threads joined a call up to 35 us apart, as long as such a task; with kPartsPerThread tasks a
// thread the early ones take the late ones' share (1.06x-1.75x at 16 threads there on 5 of the
// suite's layers).
template <class T>
int64_t dgrad_column_parts(const ColBlocks& cb, int64_t tasks, int threads) {
  constexpr int64_t kPartsPerThread = 2;
  constexpr int64_t kMinPartColumns = 64;
  if (cb.items_per_block != 1 || threads <= 1) return 1;
  const int64_t most = cb.chunk / std::max<int64_t>(kMinPartColumns, 2 * gemm::kCols<T>);
  const int64_t wanted = ceil_div(kPartsPerThread * threads, std::max<int64_t>(1, tasks));
  return std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, most));
}

// Tasks (column block, g, part of the reduction, block of input channels, part of the block's
// columns); each writes only its own block of dx, or of its part's partial dx. The reduction over
// the (co, kh, kw) rows is cut into parts of whole channels only when there are too few column
// blocks for kMinTasks tasks (small batches of small images, where dx is small and the weight
// large); the partials are then added in part order. Both cuts follow the shape; the input
// channels and the columns are cut last, for the threads (channel_cut and dgrad_column_parts: no
// bit changes).
template <class T>
void dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int64_t x_numel, int threads) {
  if (depthwise(pl)) {
    depthwise_dgrad(pl, dy, w, dx, threads);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (winograd_suits(pl, sizeof(T))) {
      winograd_dgrad(pl, dy, w, dx, threads);
      return;
    }
  }
  // By stride phases first where the input channels fill half a vector or more but not one: the
  // direct kernel then runs half-empty tiles and the phase loops two tiles (8 -> 384 k3 1.5x,
  // 8 -> 96 k8 s2 1.2x, grouped 8 -> 64 k4 1.3x); elsewhere after them.
  const bool phases = phase_gemm_dgrad_suits(pl, sizeof(T));
  if (phases && phase_gemm_dgrad_first(pl, sizeof(T))) {
    phase_gemm_dgrad(pl, dy, w, dx, threads);
    return;
  }
  if (phase_dgrad_suits(pl, sizeof(T))) {
    phase_dgrad(pl, dy, w, dx, threads);
    return;
  }
  if (direct_dgrad_suits(pl, sizeof(T))) {
    direct_dgrad(pl, dy, w, dx, threads);
    return;
  }
  if (phases) {
    phase_gemm_dgrad(pl, dy, w, dx, threads);
    return;
  }
  if (few_columns(pl, sizeof(T))) {
    dgrad_few_columns(pl, dy, w, dx, threads);
    return;
  }
  if (few_rows_fit(pl, sizeof(T))) {
    dgrad_few_rows(pl, dy, w, dx, threads);
    return;
  }
  constexpr int64_t kMaxPartialBytes = int64_t{64} << 20;
  const ColBlocks cb = col_blocks(pl, pl.rows, sizeof(T), /*for_tasks=*/true);
  const int64_t col_tasks = cb.count() * pl.groups;
  const int64_t parts_by_memory =
      kMaxPartialBytes / std::max<int64_t>(1, x_numel * static_cast<int64_t>(sizeof(T)));
  const int64_t parts_by_size = std::min(pl.cog, pl.rows / kMinBlockRows);
  const int64_t parts =
      std::max<int64_t>(1, std::min({ceil_div(kMinTasks, std::max<int64_t>(1, col_tasks)),
                                     parts_by_size, parts_by_memory}));
  const ChannelCut cut = channel_cut(pl, col_tasks * parts, threads);
  const int64_t ci_blocks = cut.blocks, ci_per = cut.largest();
  const int64_t col_parts = dgrad_column_parts<T>(cb, col_tasks * parts * ci_blocks, threads);
  const int64_t blocks = col_tasks * ci_blocks * col_parts;
  const int64_t co_per = ceil_div(pl.cog, parts);
  const Workspace<T> partial(parts > 1 ? parts * x_numel : 0);
  const int64_t col_elems = co_per * pl.taps * cb.max_cols();
  const int64_t tmp_elems = ci_per * cb.max_cols();
  const int64_t gemm_elems = gemm::scratch_elems<T>(ci_per, cb.max_cols(), co_per * pl.taps);
  parallel_for(
      threads, blocks * parts, [&] { return Workspace<T>(col_elems + tmp_elems + gemm_elems); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t k = t / blocks, i = t % blocks / (ci_blocks * col_parts);
        const int64_t cb_index = t / col_parts % ci_blocks, part = t % col_parts;
        const int64_t ci0 = cut.begin(cb_index), ci1 = cut.begin(cb_index + 1);
        const int64_t ib = i / (pl.groups * cb.chunks_per_item);
        const int64_t g = (i / cb.chunks_per_item) % pl.groups;
        ColBlock blk = cb.block(pl, ib, i % cb.chunks_per_item);
        const int64_t co0 = std::min(pl.cog, k * co_per), co1 = std::min(pl.cog, co0 + co_per);
        const int64_t rows = (co1 - co0) * pl.taps;
        if (ci0 == ci1) return;
        // dx_g block (channels x columns) = W_g's rows of channels [co0, co1) times cols. On few
        // columns, or a count that leaves the backend GEMM's last register tile mostly empty
        // (37 columns: 2 tiles of 32), Eigen's GEMM, 4 columns wide, wastes less. The choice
        // follows the whole block; a column part of it (dgrad_column_parts) takes whole tiles.
        // (Column parts come only with one-item blocks: dgrad_column_parts.)
        const bool eigen = dgrad_on_eigen<T>(blk.cols());
        if (col_parts > 1) {
          if (eigen) {
            if (part > 0) return;  // the block is its first part's
          } else {
            const int64_t tiles = ceil_div(blk.len, int64_t{gemm::kCols<T>});
            const int64_t p0 = tiles * part / col_parts * gemm::kCols<T>;
            const int64_t p1 = std::min(blk.len, tiles * (part + 1) / col_parts * gemm::kCols<T>);
            if (p0 >= p1) return;
            blk.p0 += p0;
            blk.len = p1 - p0;
          }
        }
        T* tmp = ws.data() + col_elems;
        const int64_t n = blk.cols();
        const BlockCols<T> cols = block_cols(pl, dy, g, blk, co0, co1, ws.data());
        T* out = parts > 1 ? partial.data() + k * x_numel : dx;
        if (eigen) {
          const ConstMap<T> w_g(w + g * pl.cig * pl.rows, pl.cig, pl.rows);
          store_dx(pl, g, blk, ci0, ci1, w_g.block(ci0, co0 * pl.taps, ci1 - ci0, rows),
                   ConstStridedMap<T>(cols.data, rows, n, Eigen::OuterStride<>(cols.ld)), tmp, out);
          return;
        }
        // Otherwise the backend's GEMM: in place for a block of one item, else through tmp,
        // item by item.
        T* dx_first = out + (blk.n0 * pl.in_channels + g * pl.cig + ci0) * pl.in_hw + blk.p0;
        const bool in_place = blk.items == 1;
        gemm::gemm<T>(ci1 - ci0, n, rows,
                      {w + (g * pl.cig + ci0) * pl.rows + co0 * pl.taps, pl.rows, 1},
                      {cols.data, cols.ld, 1}, in_place ? dx_first : tmp, in_place ? pl.in_hw : n,
                      false, tmp + tmp_elems);
        if (!in_place) copy_out_items(pl, blk, ci1 - ci0, tmp, dx_first);
      });
  if (parts > 1) sum_parts_in_order(partial.data(), parts, x_numel, dx, threads);
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
  if (y.numel() == 0) return;
  dispatch_floating(y.dtype(), [&]<class T>() {
    const bool blocked = depthwise(pl) && depthwise_blocked_forward_suits(pl, sizeof(T));
    forward_typed<T>(pl, data<T>(x), data<T>(w), b != nullptr ? data<T>(*b) : nullptr, data<T>(y),
                     threads_for(pass_work(g, blocked), threads));
  });
}

void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w, Tensor& dx,
                          int threads) {
  const char* fn = "conv_transpose_dgrad";
  const Plan pl = make_plan(g, fn);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(w, g.w_numel(), fn, "w", g);
  check_numel(dx, g.x_numel(), fn, "dx", g);
  if (dx.numel() == 0) return;
  dispatch_floating(dx.dtype(), [&]<class T>() {
    const bool blocked = depthwise(pl) && depthwise_blocked_dgrad_suits(pl, sizeof(T));
    dgrad_typed<T>(pl, data<T>(dy), data<T>(w), data<T>(dx), g.x_numel(),
                   threads_for(pass_work(g, blocked), threads));
  });
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS
