// The column machinery of the CPU ConvTranspose kernels (conv_transpose.cpp: forward and dgrad;
// conv_transpose_wgrad.cpp; conv_transpose_depthwise.cpp: direct loops for depthwise layers;
// conv_transpose_direct.cpp: dgrad and wgrad without columns, for the shapes they suit): the
// per-shape plan, the tap ranges, how the GEMMs' columns are cut into blocks and the output
// channels into tasks, and the im2col / col2im moves between images and column buffers.
//
// Per group g, the GEMMs' columns are the (n, p) pairs, p = ih*W + iw an input position. A column
// buffer's row r = (co, kh, kw) pairs input (ih, iw) with output
// (oh, ow) = (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw), skipped when outside y.
//
// Included by each per-level copy of the kernels inside its namespace TGRAD_CPU_ISA_NS; the
// functions are inline so that every copy gets its own, renamed by isa_objects.cmake.
#pragma once

#include <Eigen/Core>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/conv_geometry.h"
#include "core/error.h"
#include "core/tensor.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

#ifndef TGRAD_CPU_ISA_NS
#error "compiled once per level with TGRAD_CPU_ISA_NS set (cpu/CMakeLists.txt)"
#endif

namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {

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
inline constexpr int64_t kColsBudgetBytes = int64_t{1} << 19;
inline constexpr int64_t kMinChunk = 64;  // columns per GEMM, at least
// Every kernel cuts its work, by the shape only, into at least this many tasks where the sizes
// below allow it, so that a 16-core host has work for every core.
inline constexpr int64_t kMinTasks = 16;
// Forward and wgrad cut the (co, kh, kw) rows of a group into blocks of whole channels of at most
// kMaxBlockRows rows, and of no fewer than kMinBlockRows when cutting further for kMinTasks (each
// block's GEMM packs the other operand again: that costs ~32/rows of the block's time). Dgrad
// cuts its reduction over the rows into parts of no fewer than kMinBlockRows.
inline constexpr int64_t kMaxBlockRows = 512;
inline constexpr int64_t kMinBlockRows = 256;
// forward_by_positions holds the column buffer of every position of an image at once, up to
// this size, and a round of images' buffers up to this size too.
inline constexpr int64_t kMaxWholeColsBytes = int64_t{64} << 20;

__extension__ typedef __int128 int128;  // GCC and Clang; only for overflow-free index bounds

// Ceiling of a / b for b > 0, exact for every int64 a and b (no a + b - 1 that could overflow:
// the fuzzer found strides near INT64_MAX that the geometry accepts).
inline int64_t ceil_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}

// Floor of a / b for b > 0, exact for every int64 a and b, as ceil_div.
inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

// a * b <= c for a, b >= 0, without forming the product: the geometry accepts strides near
// INT64_MAX (an input of one position), whose products with a third factor pass 128 bits (the
// fuzzer found one in a planner rule).
inline bool mul_le(int128 a, int128 b, int128 c) {
  if (c < 0) return false;
  return b == 0 || a <= c / b;
}

// Whether count elements of `elem_bytes` bytes times `per` fit in `cap` bytes, without overflow.
inline bool fits(int64_t count, int64_t per, int64_t elem_bytes, int64_t cap) {
  return int128{count} * per * elem_bytes <= cap;
}

// Per axis and kernel tap k: the input indices i in [lo, hi) whose output
// i*stride - padding + k*dilation lands inside [0, out).
struct TapRanges {
  std::vector<int64_t> lo, hi;
};

inline TapRanges tap_ranges(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                            int64_t padding, int64_t dilation) {
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

  // Columns per GEMM for a column buffer of `buffer_rows` rows of `elem_bytes` each: what fits the
  // budget, a multiple of 16, at least kMinChunk.
  int64_t target_cols(int64_t buffer_rows, int64_t elem_bytes) const {
    const int64_t p = kColsBudgetBytes / std::max<int64_t>(1, buffer_rows * elem_bytes);
    return std::max(kMinChunk, p / 16 * 16);
  }
};

// conv_transpose.cpp: the plan of a geometry, its sizes checked; a tensor's size checked.
Plan make_plan(const ConvGeometry& g, const char* fn);
void check_numel(const Tensor& t, int64_t expected, const char* fn, const char* arg,
                 const ConvGeometry& g);

// Whether a channel's im2col rows are its plane of dy as it lies: one tap at stride 1 with no
// padding and dy the size of x (a 1x1 layer at stride 1). A block of one item then reads its
// columns in place, out_hw apart, where im2col would copy them (a third of such a dgrad's or
// wgrad's time at 12 -> 128 channels); the products read the same values either way.
inline bool cols_are_dy(const Plan& pl) {
  return pl.taps == 1 && pl.stride_h == 1 && pl.stride_w == 1 && pl.pad_h == 0 && pl.pad_w == 0 &&
         pl.out_h == pl.in_h && pl.out_w == pl.in_w;
}

// Whether the passes take conv_transpose_depthwise.cpp's direct loops: one input and one output
// channel per group, and a W stride its phase layout can afford (one row per phase).
inline constexpr int64_t kMaxPhases = 16;
inline bool depthwise(const Plan& pl) {
  return pl.cig == 1 && pl.cog == 1 && pl.stride_w <= kMaxPhases;
}

// The work threads_for weighs a pass by: its multiply-adds, or at least kMovedElementWork per
// element of x and y where the pass is on the depthwise blocks (`blocked`), whose few
// multiply-adds an element leave its time to the elements it moves. On flops alone a 96-channel
// 12 x 12 k3 s2 dgrad (2 MFLOP, 0.55 M elements, 0.2 ms) stayed on one thread at 16 threads,
// where PyTorch took 0.12 ms. The row kernels keep the flops: a 1-D dgrad of 256 planes of 64
// went from 0.11 ms on one thread to 0.25 ms on 16.
inline constexpr double kMovedElementWork = 16;
inline double pass_work(const ConvGeometry& g, bool blocked) {
  if (!blocked) return g.flops();
  return std::max(g.flops(), kMovedElementWork * (static_cast<double>(g.x_numel()) +
                                                  static_cast<double>(g.y_numel())));
}

// conv_transpose_depthwise.cpp: the passes when depthwise(pl).
// Plain overloads, not templates: isa_objects.cmake renames every weak symbol per object, so a
// template instantiated in one file cannot be called from another.
void depthwise_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                       int threads);
void depthwise_forward(const Plan& pl, const double* x, const double* w, const double* b, double* y,
                       int threads);
void depthwise_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads);
void depthwise_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads);
void depthwise_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads);
void depthwise_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads);
// conv_transpose_depthwise_blocked.cpp: the same passes on blocks of channels laid
// channels-last, for the depthwise shapes its *_suits take (depthwise_* call them there).
bool depthwise_blocked_forward_suits(const Plan& pl, int64_t elem_bytes);
bool depthwise_blocked_dgrad_suits(const Plan& pl, int64_t elem_bytes);
bool depthwise_blocked_wgrad_suits(const Plan& pl, int64_t elem_bytes);
void depthwise_blocked_forward(const Plan& pl, const float* x, const float* w, const float* b,
                               float* y, int threads);
void depthwise_blocked_forward(const Plan& pl, const double* x, const double* w, const double* b,
                               double* y, int threads);
void depthwise_blocked_dgrad(const Plan& pl, const float* dy, const float* w, float* dx,
                             int threads);
void depthwise_blocked_dgrad(const Plan& pl, const double* dy, const double* w, double* dx,
                             int threads);
void depthwise_blocked_wgrad(const Plan& pl, const float* x, const float* dy, float* dw,
                             int threads);
void depthwise_blocked_wgrad(const Plan& pl, const double* x, const double* dy, double* dw,
                             int threads);
// The same file's forward loops for few input channels per group (any output channels), for the
// shapes few_input_forward_suits: each (n, co) plane of y gathers its group's input channels.
inline constexpr int kFewInputForwardChannels = 4;
bool few_input_forward_suits(const Plan& pl);
void few_input_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                       int threads);
void few_input_forward(const Plan& pl, const double* x, const double* w, const double* b, double* y,
                       int threads);

// conv_transpose_direct.cpp: dgrad with no column buffer, for the shapes direct_dgrad_suits
// (enough input channels to fill its vector tile, rows of at least a few positions, enough
// positions to pay for packing the weight once per call). Depends on the shape only.
bool direct_dgrad_suits(const Plan& pl, int64_t elem_bytes);
void direct_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads);
void direct_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads);
// The same file's forward, for stride 1 and the shapes direct_forward_suits (as dgrad's, with
// the output channels in the lanes, and a few taps at least).
bool direct_forward_suits(const Plan& pl, int64_t elem_bytes);
void direct_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                    int threads);
void direct_forward(const Plan& pl, const double* x, const double* w, const double* b, double* y,
                    int threads);
// conv_transpose_winograd.cpp: forward and dgrad of stride-1 undilated 2-D layers in float32 by
// Winograd's F(2x2, 3x3), the kernel in 3 x 3 blocks, for the shapes winograd_suits (kernels with
// enough taps per block, enough channels on both sides).
bool winograd_suits(const Plan& pl, int64_t elem_bytes);
void winograd_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                      int threads);
void winograd_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads);
// Its wgrad by the dual F(3x3, 2x2), for the shapes winograd_wgrad_suits.
bool winograd_wgrad_suits(const Plan& pl, int64_t elem_bytes);
void winograd_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads);
// The same file's wgrad, for the shapes direct_wgrad_suits.
bool direct_wgrad_suits(const Plan& pl, int64_t elem_bytes);
void direct_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads);
void direct_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads);
// conv_transpose_wgrad.cpp: dgrad by stride phases for few input channels, for the shapes
// phase_dgrad_suits, on the phase planes of dy that its wgrad by phases reads.
bool phase_dgrad_suits(const Plan& pl, int64_t elem_bytes);
void phase_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads);
void phase_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads);
// conv_transpose_phase_gemm.cpp: the three passes by output stride phases with the products on
// the input channels' side, for the shapes phase_gemm_*_suits take (few input channels per group
// against many output channels x taps). Depends on the shape only.
bool phase_gemm_forward_suits(const Plan& pl, int64_t elem_bytes);
bool phase_gemm_dgrad_suits(const Plan& pl, int64_t elem_bytes);
bool phase_gemm_wgrad_suits(const Plan& pl, int64_t elem_bytes);
// Whether phase_gemm_dgrad goes before the direct and phase dgrads: the input channels fill half
// a vector or more but not one (at AVX-512), where those run half-empty tiles.
bool phase_gemm_dgrad_first(const Plan& pl, int64_t elem_bytes);
// Whether phase_gemm_wgrad goes before the phase and direct wgrads: few input channels (at
// AVX-512).
bool phase_gemm_wgrad_first(const Plan& pl, int64_t elem_bytes);
void phase_gemm_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                        int threads);
void phase_gemm_forward(const Plan& pl, const double* x, const double* w, const double* b,
                        double* y, int threads);
void phase_gemm_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads);
void phase_gemm_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads);
void phase_gemm_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads);
void phase_gemm_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads);

// One block of GEMM columns: positions [p0, p0 + len) of each of the items n0 .. n0 + items - 1,
// side by side (item n0 + j at columns j*len ..).
struct ColBlock {
  int64_t n0, items, p0, len;
  int64_t cols() const { return items * len; }
};

// How the (n, p) columns of a group are cut into GEMM blocks, by the shape only. An image with at
// least the target number of positions is cut into chunks of its own positions (one item per
// block); smaller images are packed whole, several items to a block, so that the GEMM over a 4x4
// image still has enough columns to stream the weight once per block, not once per item.
struct ColBlocks {
  int64_t items_per_block, item_blocks, chunk, chunks_per_item;

  int64_t count() const { return item_blocks * chunks_per_item; }  // blocks, item block-major
  int64_t max_cols() const { return items_per_block * chunk; }
  ColBlock block(const Plan& pl, int64_t item_block, int64_t c) const {
    const int64_t n0 = item_block * items_per_block, p0 = c * chunk;
    return {n0, std::min(items_per_block, pl.batch - n0), p0, std::min(chunk, pl.in_hw - p0)};
  }
};

// `for_tasks`: also cut a long image or sequence into kMinTasks blocks where each keeps at least
// kMinParallelCols columns: with few rows the L2 budget alone lets one block take 8000 columns, and
// a batch-1 4000-long sequence would be one task. Forward gains nothing from it (a task of its
// blocked path owns output channels of whole items, whatever its blocks; forward_by_positions
// cuts its own chunks); dgrad and wgrad use it.
inline ColBlocks col_blocks(const Plan& pl, int64_t buffer_rows, int64_t elem_bytes,
                            bool for_tasks) {
  constexpr int64_t kMinParallelCols = 256;
  const int128 per_task = int128{pl.batch} * pl.in_hw / kMinTasks / 16 * 16;
  const int64_t budget = pl.target_cols(buffer_rows, elem_bytes);
  const int64_t target =
      for_tasks ? std::min<int128>(budget, std::max<int128>(kMinParallelCols, per_task)) : budget;
  ColBlocks cb{};
  if (pl.in_hw >= target) {
    // For tasks, as many chunks as the target asks for, of about equal length (a multiple of 16
    // positions, so that each chunk's rows of x start on a cache line where the image's do; at
    // most the target, itself a multiple of 16). A target-long cut would leave a short last
    // chunk: 625 positions as 256 + 256 + 113, its tasks a third of the others' work while their
    // threads wait (U-Net's 25 x 25 wgrad at 16 threads). The forward's tasks own whole items:
    // its chunks stay the budget's length.
    const int64_t pieces = ceil_div(pl.in_hw, target);
    cb.items_per_block = 1;
    cb.chunk = for_tasks ? std::min(target, gemm::round_up(ceil_div(pl.in_hw, pieces), int64_t{16}))
                         : target;
  } else {
    const int64_t most = std::max<int64_t>(1, pl.batch);
    cb.items_per_block = pl.in_hw == 0 ? most : std::clamp<int64_t>(target / pl.in_hw, 1, most);
    cb.chunk = pl.in_hw;  // 0 for an empty image: no blocks, no column buffer
  }
  cb.item_blocks = ceil_div(pl.batch, cb.items_per_block);
  cb.chunks_per_item = pl.in_hw == 0 ? 0 : ceil_div(pl.in_hw, cb.chunk);
  return cb;
}

// Output channels of a group cut into blocks of whole channels: at most kMaxBlockRows rows each,
// and more blocks (of at least kMinBlockRows rows) while other_tasks x blocks < kMinTasks.
struct ChannelBlocks {
  int64_t per_block, count;
};

inline ChannelBlocks channel_blocks(const Plan& pl, int64_t other_tasks) {
  int64_t blocks = std::max<int64_t>(1, ceil_div(pl.rows, kMaxBlockRows));
  const int64_t wanted = ceil_div(kMinTasks, std::max<int64_t>(1, other_tasks));
  const int64_t most = std::max<int64_t>(1, std::min(pl.cog, pl.rows / kMinBlockRows));
  blocks = std::max(blocks, std::min(wanted, most));
  const int64_t per = ceil_div(pl.cog, blocks);
  return {per, ceil_div(pl.cog, per)};
}

// How dgrad and wgrad cut a group's input channels (rows of dx, rows of dw) when the cuts of
// the shape leave `tasks` tasks, fewer than `threads` can keep busy (batch-1 calls on small
// images). Unlike those cuts, this one follows the thread count, so it must not change a bit:
// every block starts on a multiple of kChannelQuantum channels, a multiple of every register
// panel the products use (Eigen's rows and columns per panel at each level and type, the backend
// GEMM's kRows), so each channel lands in the same kind of panel, with the same order of sums,
// as in the uncut product; the reduction is never cut.
// The quanta (the last one holding the rest of the channels) are dealt out as evenly as the
// count allows, the larger blocks last, where the short quantum is: 128 channels in 2 blocks go
// as 48 + 80, where blocks of a common size left 96 + 32 (CycleGAN 128 -> 64's wgrad at 16
// threads: its tasks of 96 channels three times the others').
// The count is the one with the least estimated time: the tasks claimed in order, each by the
// first free thread (parallel_for's order: the blocks of a task of the shape one after another),
// every extra block adding kChannelBlockCost channels' work (its own column buffer and packing;
// measured on 256 channels, one thread: 1.2x-1.35x the work for 2 blocks, 1.5x for 4). Counts
// that would make more than kMaxCutRounds rounds of tasks for the threads are not tried: a
// round's worth of idle threads is then at most an eighth of the time, less than most extra
// blocks cost, and the estimate's cost stays small beside the pass.
inline constexpr int64_t kChannelQuantum = 48;
inline constexpr double kChannelBlockCost = 64.0;
inline constexpr int64_t kMaxCutRounds = 8;

struct ChannelCut {
  int64_t blocks = 1;
  int64_t channels = 0;  // the group's, cig
  // Block b is channels [begin(b), begin(b + 1)): the first `blocks - extra` blocks hold
  // `quanta` quanta each, the rest one more (one block: all the quanta, its end clipped to
  // channels).
  int64_t quanta = 0, extra = 0;
  int64_t begin(int64_t b) const {
    return std::min(channels,
                    kChannelQuantum * (b * quanta + std::max<int64_t>(0, b - (blocks - extra))));
  }
  int64_t size(int64_t b) const { return begin(b + 1) - begin(b); }
  int64_t largest() const {
    int64_t most = 0;
    for (int64_t b = 0; b < blocks; ++b)
      most = std::max(most, size(b));
    return most;
  }
};

inline ChannelCut channel_cut_of(int64_t cig, int64_t blocks) {
  const int64_t q = ceil_div(cig, kChannelQuantum);
  if (blocks <= 1 || q <= 1) return {1, cig, q, 0};
  blocks = std::min(blocks, q);
  return {blocks, cig, q / blocks, q % blocks};
}

// The estimated time of `tasks` x cut.blocks tasks on `threads` threads, in channels' work: each
// task goes to the thread with the least work so far. `load`: scratch, reused across calls.
inline double channel_cut_time(const ChannelCut& cut, int64_t tasks, int threads,
                               std::vector<double>& load) {
  const int64_t n = std::max<int64_t>(1, tasks) * cut.blocks;
  load.assign(static_cast<size_t>(std::clamp<int64_t>(threads, 1, n)), 0.0);
  const double overhead =
      kChannelBlockCost * static_cast<double>(cut.blocks - 1) / static_cast<double>(cut.blocks);
  for (int64_t t = 0; t < n; ++t)
    *std::min_element(load.begin(), load.end()) +=
        static_cast<double>(cut.size(t % cut.blocks)) + overhead;
  return *std::max_element(load.begin(), load.end());
}

inline ChannelCut channel_cut(const Plan& pl, int64_t tasks, int threads) {
  const int64_t task_count = std::max<int64_t>(1, tasks);
  const int64_t most = std::min(ceil_div(pl.cig, kChannelQuantum),
                                kMaxCutRounds * std::max(1, threads) / task_count);
  ChannelCut best = channel_cut_of(pl.cig, 1);
  if (threads <= 1 || most <= 1) return best;
  std::vector<double> load;
  double best_time = channel_cut_time(best, tasks, threads, load);
  for (int64_t c = 2; c <= most; ++c) {
    const ChannelCut cut = channel_cut_of(pl.cig, c);
    const double time = channel_cut_time(cut, tasks, threads, load);
    if (time < best_time) best = cut, best_time = time;
  }
  return best;
}

// The estimated time of `tasks` tasks, each cut into `parts` parts, on `threads` threads, in uncut
// tasks: the rounds of parts times a part's share, each part beyond the first charged
// `part_cost` of a part's work for what it does again. The cuts for the threads that choose a
// count of parts this way (few_columns_parts, wgrad's output_channel_parts) take the lowest.
inline double parts_time(int64_t tasks, int64_t parts, int threads, double part_cost) {
  const double rounds = static_cast<double>(ceil_div(tasks * parts, int64_t{std::max(1, threads)}));
  return rounds / static_cast<double>(parts) * (1.0 + part_cost * static_cast<double>(parts - 1));
}

// The W strides with_stride below passes as constants: its cases (keep the two lists alike).
inline bool stride_is_constant(int64_t stride) {
  return stride == 1 || stride == 2 || stride == 4;
}

// Calls f.template operator()<S>() with S the W stride as a constant for the common strides (the
// inner loops then vectorise and carry no stride arithmetic), else with S = 0: read it at run time.
template <class F>
void with_stride(int64_t stride, F&& f) {
  switch (stride) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 4:
      return f.template operator()<4>();
    default:
      return f.template operator()<0>();
  }
}

// out[i * width + c] = src[c * ld + i] for i < len and c < channels: `channels` rows of src as
// the lanes of out's rows, `width` (a whole number of vectors, at least channels) lanes a row,
// zero past the channels. L x L register transposes: a strided scalar copy of a large operand
// costs as much as a pass's arithmetic on a few hundred positions. The direct kernels' blocks
// of channels and the Winograd wgrad's channels-last rows are copied so.
template <class T>
inline void rows_to_lanes(const T* src, int64_t ld, int64_t channels, int64_t len, T* out,
                          int64_t width) {
  constexpr int L = gemm::kLanes<T>;
  for (int64_t c0 = 0; c0 < width; c0 += L) {
    const int count = static_cast<int>(std::clamp<int64_t>(channels - c0, 0, L));
    int64_t i = 0;
    for (; i + L <= len; i += L)
      gemm::transpose_tile<T, L>(src + c0 * ld + i, ld, count, out + i * width + c0, width, L);
    for (; i < len; ++i)
      for (int l = 0; l < L; ++l)
        out[i * width + c0 + l] = l < count ? src[(c0 + l) * ld + i] : T(0);
  }
}

// A register tile's sums: zero (`first`) or from mem, and back to mem; element (m, n) at
// mem + (m*N + n)*lanes.
template <class Vec, class T, int M, int N>
inline void load_sums(Vec (&acc)[M][N], const T* mem, bool first) {
  constexpr int L = gemm::kLanes<T>;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      if (first) {
        acc[m][n] = Vec{};
      } else {
        std::memcpy(&acc[m][n], mem + (m * N + n) * L, sizeof(Vec));
      }
    }
  }
}
template <class Vec, class T, int M, int N>
inline void store_sums(const Vec (&acc)[M][N], T* mem) {
  constexpr int L = gemm::kLanes<T>;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      std::memcpy(mem + (m * N + n) * L, &acc[m][n], sizeof(Vec));
}

// The even and odd elements of the 2L elements of (a, b), as e and o; and back. Vec holds L
// elements.
template <int L, class Vec>
inline void deinterleave_vectors(const Vec& a, const Vec& b, Vec& e, Vec& o) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    e = __builtin_shufflevector(a, b, (2 * I)...);
    o = __builtin_shufflevector(a, b, (2 * I + 1)...);
  }
  (std::make_index_sequence<L>{});
}
template <int L, class Vec>
inline void interleave_vectors(const Vec& e, const Vec& o, Vec& a, Vec& b) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    a = __builtin_shufflevector(e, o, (I % 2 == 0 ? I / 2 : L + I / 2)...);
    b = __builtin_shufflevector(e, o, (I % 2 == 0 ? L / 2 + I / 2 : L + L / 2 + I / 2)...);
  }
  (std::make_index_sequence<L>{});
}

// The elements 0, S, 2S, ... of the S vectors at p (S a power of two): the even ones of each
// pair of vectors, then of those, log2(S) times.
template <int S, int L, class Vec, class T>
inline Vec every_sth(const T* p) {
  if constexpr (S == 1) {
    Vec v;
    std::memcpy(&v, p, sizeof(Vec));
    return v;
  } else {
    const Vec a = every_sth<S / 2, L, Vec>(p), b = every_sth<S / 2, L, Vec>(p + S / 2 * L);
    Vec e, o;
    deinterleave_vectors<L>(a, b, e, o);
    return e;
  }
}

// The elements 0, 3, 6, ... of the 3 vectors at p: those of the first two through one two-source
// shuffle, then the rest taken from the third.
template <int L, class Vec, class T>
inline Vec every_third(const T* p) {
  Vec a, b, c;
  std::memcpy(&a, p, sizeof(Vec));
  std::memcpy(&b, p + L, sizeof(Vec));
  std::memcpy(&c, p + 2 * L, sizeof(Vec));
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    const Vec ab = __builtin_shufflevector(a, b, (3 * I < 2 * L ? 3 * I : 0)...);
    return __builtin_shufflevector(ab, c, (3 * I < 2 * L ? I : L + 3 * I - 2 * L)...);
  }
  (std::make_index_sequence<L>{});
}

// dst[i] = src[i * stride] for i in [0, n), the stride S when it is not 0. At strides 2, 3 and 4
// a vector at a time through shuffles (the phase planes of dgrad and wgrad copy dy this way:
// element by element, the copy cost as much as the few input channels' products, and at stride 3
// four fifths of a 1 -> 12 k4 dgrad on 253 x 256); each vector's reads end before the last
// element's, so nothing past it is read.
template <class T, int64_t S>
inline void gather_row(T* dst, const T* src, int64_t n, int64_t stride) {
  const int64_t st = S != 0 ? S : stride;
  int64_t i = 0;
  if constexpr (S == 1) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  if constexpr (S == 2 || S == 3 || S == 4) {
    typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
    constexpr int L = gemm::kLanes<T>;
    for (; i + L < n; i += L) {
      Vec v;
      if constexpr (S == 3) {
        v = every_third<L, Vec>(src + i * S);
      } else {
        v = every_sth<S, L, Vec>(src + i * S);
      }
      std::memcpy(dst + i, &v, sizeof(Vec));
    }
  }
  for (; i < n; ++i)
    dst[i] = src[i * st];
}

// with_stride for the gathers, with 3 a constant too (its shuffles are gather_row's own; the
// other loops keep with_stride's list).
template <class F>
void with_gather_stride(int64_t stride, F&& f) {
  if (stride == 3) return f.template operator()<3>();
  with_stride(stride, std::forward<F>(f));
}

// dst[i] = src[i * stride] for i in [0, n).
template <class T>
void gather_strided(T* dst, const T* src, int64_t n, int64_t stride) {
  with_gather_stride(stride, [&]<int64_t S>() { gather_row<T, S>(dst, src, n, stride); });
}

// gather_strided over `rows` rows: dst[r * dst_ld + i] = src[r * src_ld + i * stride].
template <class T>
void gather_strided_rows(T* dst, int64_t dst_ld, const T* src, int64_t src_ld, int64_t rows,
                         int64_t n, int64_t stride) {
  with_gather_stride(stride, [&]<int64_t S>() {
    for (int64_t r = 0; r < rows; ++r)
      gather_row<T, S>(dst + r * dst_ld, src + r * src_ld, n, stride);
  });
}

// y[y0 + 2i] += c[c0 + i] for i in [begin, end), a vector of i at a time (the odd elements between
// go through unchanged); returns where it stopped, the rest left to a scalar loop. The offsets y0
// and c0 stay apart from the pointers: y + y0 alone may lie far outside y's buffer (a padding
// larger than the plane makes y0 hugely negative), and forming such a pointer is undefined even
// where no element of it is read. A vector of i reads and writes y[y0 + 2i, y0 + 2i + 2L): `room`
// bounds that, the elements from y0 on that the caller owns (past them another thread's plane may
// start). Where the room allows and at least half a
// vector is left, the last L i's before `end` go as one more vector whose lanes already added
// carry -0.0, which leaves every value's bits as they were (x + -0.0 == x, -0.0 included): rows
// of under two vectors (DCGAN's 32 x 32 RGB layer) would otherwise add half of each tap's row a
// scalar at a time. That vector may start before `begin`, down to `lowest` (c readable and y the
// caller's from there on; its lanes before `begin` carry -0.0 too): a row of one vector (the
// demo's 16 x 16 RGB layer at AVX-512) has each edge tap's 15 i's in one vector that way, not a
// scalar loop. A shorter tail stays scalar: as a vector, its loads overlap the previous vector's
// stores.
template <class T>
int64_t add_stride2(T* y, int64_t y0, const T* c, int64_t c0, int64_t begin, int64_t end,
                    int64_t lowest, int64_t room) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  const auto add = [&](int64_t i, const Vec& v) {
    Vec a, b, even, odd;
    T* at = y + (y0 + 2 * i);
    std::memcpy(&a, at, sizeof(Vec));
    std::memcpy(&b, at + L, sizeof(Vec));
    deinterleave_vectors<L>(a, b, even, odd);
    even += v;
    interleave_vectors<L>(even, odd, a, b);
    std::memcpy(at, &a, sizeof(Vec));
    std::memcpy(at + L, &b, sizeof(Vec));
  };
  const int64_t last = std::min(end, room / 2) - L;  // the last i whose vector fits
  int64_t i = begin;
  for (; i <= last; i += L) {
    Vec v;
    std::memcpy(&v, c + (c0 + i), sizeof(Vec));
    add(i, v);
  }
  if (end - i >= L / 2 && last >= lowest && last + L == end) {
    using Lane = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    typedef Lane LaneVec __attribute__((vector_size(gemm::kVecBytes)));
    const LaneVec lane = [&]<std::size_t... J>(std::index_sequence<J...>) {
      return LaneVec{static_cast<Lane>(J)...};
    }
    (std::make_index_sequence<L>{});
    Vec v;
    std::memcpy(&v, c + (c0 + last), sizeof(Vec));
    const Vec neg_zero = -Vec{};
    add(last, lane >= static_cast<Lane>(i - last) ? v : neg_zero);
    return end;
  }
  return i;
}

// The S-way interleave of S vectors of L elements: in[r] holds element r of groups 0..L-1, and
// out, read as S*L consecutive elements, holds group after group (out element j is in[j % S]
// at j / S). S a power of two; built from 2-way interleaves. deinterleave_n is its inverse.
template <int S, int L, class Vec>
inline void interleave_n(const Vec* in, Vec* out) {
  if constexpr (S == 1) {
    out[0] = in[0];
  } else {
    Vec even[S / 2], odd[S / 2], e[S / 2], o[S / 2];
    for (int i = 0; i < S / 2; ++i)
      even[i] = in[2 * i], odd[i] = in[2 * i + 1];
    interleave_n<S / 2, L>(even, e);
    interleave_n<S / 2, L>(odd, o);
    for (int i = 0; i < S / 2; ++i)
      interleave_vectors<L>(e[i], o[i], out[2 * i], out[2 * i + 1]);
  }
}
template <int S, int L, class Vec>
inline void deinterleave_n(const Vec* in, Vec* out) {
  if constexpr (S == 1) {
    out[0] = in[0];
  } else {
    Vec e[S / 2], o[S / 2], even[S / 2], odd[S / 2];
    for (int i = 0; i < S / 2; ++i)
      deinterleave_vectors<L>(in[2 * i], in[2 * i + 1], e[i], o[i]);
    deinterleave_n<S / 2, L>(e, even);
    deinterleave_n<S / 2, L>(o, odd);
    for (int i = 0; i < S / 2; ++i)
      out[2 * i] = even[i], out[2 * i + 1] = odd[i];
  }
}

// The same two for any S, from two-source shuffles with masks worked out at compile time: output
// vector m takes, phase after phase, the elements whose phase is r (S x S shuffles each way, so
// the power-of-two versions above, with S log S, are used where they apply).
template <int S, int L, int M, int R, class Vec>
inline Vec interleave_take(const Vec& acc, const Vec& src) {
  return [&]<std::size_t... E>(std::index_sequence<E...>) {
    return __builtin_shufflevector(
        acc, src,
        ((M * L + static_cast<int>(E)) % S == R ? L + (M * L + static_cast<int>(E)) / S
                                                : static_cast<int>(E))...);
  }
  (std::make_index_sequence<L>{});
}
template <int S, int L, int M, int R, class Vec>
inline Vec deinterleave_take(const Vec& acc, const Vec& src) {
  return [&]<std::size_t... Q>(std::index_sequence<Q...>) {
    return __builtin_shufflevector(
        acc, src,
        ((static_cast<int>(Q) * S + R) / L == M ? L + (static_cast<int>(Q) * S + R) % L
                                                : static_cast<int>(Q))...);
  }
  (std::make_index_sequence<L>{});
}
// Output vector M of interleave_any from phases R.. on (acc holds the phases before R), and
// phase R of deinterleave_any from vectors M.. on; then every vector / phase from M / R on.
template <int S, int L, int M, int R, class Vec>
inline Vec interleave_from(const Vec* in, const Vec& acc) {
  if constexpr (R == S) {
    return acc;
  } else {
    return interleave_from<S, L, M, R + 1>(in, interleave_take<S, L, M, R>(acc, in[R]));
  }
}
template <int S, int L, int M, int R, class Vec>
inline Vec deinterleave_from(const Vec* in, const Vec& acc) {
  if constexpr (M == S) {
    return acc;
  } else {
    return deinterleave_from<S, L, M + 1, R>(in, deinterleave_take<S, L, M, R>(acc, in[M]));
  }
}
template <int S, int L, int M = 0, class Vec>
inline void interleave_any(const Vec* in, Vec* out) {
  if constexpr (M < S) {
    out[M] = interleave_from<S, L, M, 0>(in, Vec{});
    interleave_any<S, L, M + 1>(in, out);
  }
}
template <int S, int L, int R = 0, class Vec>
inline void deinterleave_any(const Vec* in, Vec* out) {
  if constexpr (R < S) {
    out[R] = deinterleave_from<S, L, 0, R>(in, Vec{});
    deinterleave_any<S, L, R + 1>(in, out);
  }
}

// Taps of one row col2im_phases takes at most (its per-tap tables live on the stack).
inline constexpr int64_t kPhaseMaxTaps = 32;

// col2im_add for W stride S (2, 3, 4, 5 or 8), W dilation 1 and rows long enough: per output row,
// the taps of every kw at once, by output phase. Tap kw adds c_kw[iw] at
// ow = iw*S + kw - pW = (iw + off[kw])*S + r[kw]: on the q = ow / S where every tap lands inside
// this call's positions and inside y, a block of L q's is S whole vectors of y, split into its S
// phases, each phase given its taps' contiguous runs of c (one vector each) in kw order, and put
// back. Each element gets its taps in the order the scalar loops give them (kh, then kw), so the
// bits do not depend on where a block starts; the q's outside run the scalar loop, tap by tap.
template <class T, int S>
void col2im_phases(const Plan& pl, const T* cols, int64_t ld, int64_t co0, int64_t co1, int64_t p0,
                   int64_t len, T* y_ng) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  const int64_t p1 = p0 + len, kw_n = pl.kernel_w;
  const int64_t ih_first = p0 / pl.in_w, ih_last = (p1 - 1) / pl.in_w;
  // Per tap its q offset and this row's iw range; per phase its taps in kw order.
  int64_t off[kPhaseMaxTaps], lo[kPhaseMaxTaps], hi[kPhaseMaxTaps];
  int64_t phase_taps[S][kPhaseMaxTaps];
  int phase_n[S] = {};
  for (int64_t kw = 0; kw < kw_n; ++kw) {
    const int64_t v = kw - pl.pad_w;
    const int64_t r = ((v % S) + S) % S;
    off[kw] = (v - r) / S;
    phase_taps[r][phase_n[r]++] = kw;
  }
  const int64_t q_end_y = pl.out_w / S;  // q's whose S elements all lie in the row
  for (int64_t co = co0; co < co1; ++co) {
    T* y_c = y_ng + co * pl.out_hw;
    for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
      const int64_t ih_begin = std::max(pl.h.lo[kh], ih_first);
      const int64_t ih_end = std::min(pl.h.hi[kh], ih_last + 1);
      const T* c_kh = cols + ((co - co0) * pl.taps + kh * kw_n) * ld;
      for (int64_t ih = ih_begin; ih < ih_end; ++ih) {
        const int64_t row_p = ih * pl.in_w;
        const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
        T* const y_row = y_c + oh * pl.out_w;
        const T* const c_row = c_kh + row_p - p0;  // + kw*ld + iw
        int64_t qa = 0, qb = q_end_y;
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          lo[kw] = std::max(pl.w.lo[kw], p0 - row_p);
          hi[kw] = std::min(pl.w.hi[kw], p1 - row_p);
          qa = std::max(qa, lo[kw] + off[kw]);
          qb = std::min(qb, hi[kw] + off[kw]);
        }
        int64_t qv = qa + std::max<int64_t>(0, (qb - qa) / L) * L;  // vector q's: [qa, qv)
        if (qv == qa) qa = qv = std::numeric_limits<int64_t>::max() / 2;
        // The scalar q's below qa, tap by tap.
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          const T* c = c_row + kw * ld;
          const int64_t end = std::min(hi[kw], qa - off[kw]);
          for (int64_t iw = lo[kw]; iw < end; ++iw)
            y_row[iw * S + kw - pl.pad_w] += c[iw];
        }
        for (int64_t q = qa; q < qv; q += L) {
          Vec v[S], ph[S];
          std::memcpy(v, y_row + q * S, sizeof(v));
          if constexpr ((S & (S - 1)) == 0) {
            deinterleave_n<S, L>(v, ph);
          } else {
            deinterleave_any<S, L>(v, ph);
          }
#pragma GCC unroll 8
          for (int r = 0; r < S; ++r) {
            for (int j = 0; j < phase_n[r]; ++j) {
              const int64_t kw = phase_taps[r][j];
              Vec c;
              std::memcpy(&c, c_row + kw * ld + q - off[kw], sizeof(Vec));
              ph[r] += c;
            }
          }
          if constexpr ((S & (S - 1)) == 0) {
            interleave_n<S, L>(ph, v);
          } else {
            interleave_any<S, L>(ph, v);
          }
          std::memcpy(y_row + q * S, v, sizeof(v));
        }
        // The scalar q's from qv on.
        for (int64_t kw = 0; kw < kw_n; ++kw) {
          const T* c = c_row + kw * ld;
          for (int64_t iw = std::max(lo[kw], qv - off[kw]); iw < hi[kw]; ++iw)
            y_row[iw * S + kw - pl.pad_w] += c[iw];
        }
      }
    }
  }
}

// col2im_add's loops, for the W stride S (0: read at run time). With kStride2Vectors (S = 2, rows
// longer than one vector), each row segment's adds go a vector of taps at a time (add_stride2):
// the same adds in the same order. An instance of its own, since a branch between the two inner
// loops slowed short rows (2-D decoders' 8 x 8 images) by about 5%.
template <class T, int64_t S, bool kStride2Vectors>
void col2im_loops(const Plan& pl, const T* cols, int64_t ld, int64_t co0, int64_t co1, int64_t p0,
                  int64_t len, T* y_ng) {
  const int64_t sw = S != 0 ? S : pl.stride_w;
  const int64_t p1 = p0 + len;
  const int64_t ih_first = p0 / pl.in_w, ih_last = (p1 - 1) / pl.in_w;
  for (int64_t co = co0; co < co1; ++co) {
    T* y_c = y_ng + co * pl.out_hw;
    for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
      const int64_t ih_begin = std::max(pl.h.lo[kh], ih_first);
      const int64_t ih_end = std::min(pl.h.hi[kh], ih_last + 1);
      for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
        const T* c_row = cols + ((co - co0) * pl.taps + kh * pl.kernel_w + kw) * ld;
        for (int64_t ih = ih_begin; ih < ih_end; ++ih) {
          const int64_t row_p = ih * pl.in_w;  // position of (ih, 0)
          const int64_t iw_begin = std::max(pl.w.lo[kw], p0 - row_p);
          const int64_t iw_end = std::min(pl.w.hi[kw], p1 - row_p);
          const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
          const int64_t y_row = oh * pl.out_w - pl.pad_w + kw * pl.dil_w;  // + iw*sw, as above
          const int64_t c_row_p = row_p - p0;                              // + iw, into c_row
          if constexpr (kStride2Vectors) {
            const int64_t room = pl.out_hw - y_row;  // y_c's plane, from y_c[y_row] on
            // c from this tap row's first position on, y from the plane's first element on.
            const int64_t lowest = std::max(p0 - row_p, (1 - y_row) / 2);
            for (int64_t iw =
                     add_stride2(y_c, y_row, c_row, c_row_p, iw_begin, iw_end, lowest, room);
                 iw < iw_end; ++iw)
              y_c[y_row + iw * 2] += c_row[c_row_p + iw];
          } else {
            for (int64_t iw = iw_begin; iw < iw_end; ++iw)
              y_c[y_row + iw * sw] += c_row[c_row_p + iw];
          }
        }
      }
    }
  }
}

// y_c[oh, ow] += cols[r*ld + p - p0] for the rows r of channels [co0, co1) (row 0 is co0's first
// tap) and positions p in [p0, p0 + len). y_ng points at channel 0 of the group of one item.
template <class T>
void col2im_add(const Plan& pl, const T* cols, int64_t ld, int64_t co0, int64_t co1, int64_t p0,
                int64_t len, T* y_ng) {
  // Stride 2 on rows past two vectors by phases too: a block of y is split and put back once for
  // all of a row's taps, where add_stride2 does so once a tap (docs/performance.md, thirty-second
  // session); shorter rows keep add_stride2, whose masked last vector col2im_phases lacks.
  if (pl.stride_w == 2 && pl.dil_w == 1 && pl.kernel_w <= kPhaseMaxTaps &&
      pl.in_w > 2 * gemm::kLanes<T>) {
    return col2im_phases<T, 2>(pl, cols, ld, co0, co1, p0, len, y_ng);
  }
  if (pl.stride_w == 2 && pl.in_w >= gemm::kLanes<T>) {
    col2im_loops<T, 2, true>(pl, cols, ld, co0, co1, p0, len, y_ng);
    return;
  }
  if (pl.dil_w == 1 && pl.kernel_w <= kPhaseMaxTaps && pl.in_w > 2 * gemm::kLanes<T>) {
    switch (pl.stride_w) {
      case 3:
        return col2im_phases<T, 3>(pl, cols, ld, co0, co1, p0, len, y_ng);
      case 4:
        return col2im_phases<T, 4>(pl, cols, ld, co0, co1, p0, len, y_ng);
      case 5:
        return col2im_phases<T, 5>(pl, cols, ld, co0, co1, p0, len, y_ng);
      case 8:
        return col2im_phases<T, 8>(pl, cols, ld, co0, co1, p0, len, y_ng);
      default:
        break;
    }
  }
  with_stride(pl.stride_w, [&]<int64_t S>() {
    col2im_loops<T, S, false>(pl, cols, ld, co0, co1, p0, len, y_ng);
  });
}

// Forward's GEMM blocks of at most this many columns write their buffer transposed.
inline constexpr int64_t kMaxTransposedCols = 128;

// y[i] += c[i] for i < n, contiguous on both sides, whole vectors at a time and the rest a scalar
// at a time.
template <class T>
inline void add_run(T* y, const T* c, int64_t n) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int64_t L = gemm::kLanes<T>;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    Vec a, b;
    std::memcpy(&a, y + i, sizeof(Vec));
    std::memcpy(&b, c + i, sizeof(Vec));
    a += b;
    std::memcpy(y + i, &a, sizeof(Vec));
  }
  for (; i < n; ++i)
    y[i] += c[i];
}

// The taps kw that x's column iw puts inside y's row: [kw0, kw1), those with 0 <= ow = first_ow +
// kw * dil < out_w, from the geometry (no scan of the taps).
struct RowTaps {
  int64_t first_ow, kw0, kw1;
};
inline RowTaps taps_in_row(const Plan& pl, int64_t iw) {
  const int64_t first_ow = iw * pl.stride_w - pl.pad_w;
  const int64_t kw0 = std::clamp<int64_t>(-floor_div(first_ow, pl.dil_w), 0, pl.kernel_w);
  const int64_t kw1 =
      std::clamp<int64_t>(-floor_div(first_ow - pl.out_w, pl.dil_w), kw0, pl.kernel_w);
  return {first_ow, kw0, kw1};
}

// col2im_add for a transposed buffer: y_c[oh, ow] += cols_t[(p - p0)*ld + r], position by position
// (each position's rows of channels [co0, co1) are contiguous). A position's taps that land in
// the row are one run of kw (ow grows with kw); undilated, their outputs are one run of the row
// too, added as a vector loop (HiFi-GAN's k16 s8: 16 taps, where the tap-by-tap checks cost a
// sixth of the forward). The run's ends come from the geometry, not from a scan of the taps:
// with one output channel (Conv-TasNet's decoder) a scan cost as much as the adds.
template <class T>
void col2im_add_transposed(const Plan& pl, const T* cols_t, int64_t ld, int64_t co0, int64_t co1,
                           int64_t p0, int64_t len, T* y_ng) {
  for (int64_t p = p0; p < p0 + len; ++p) {
    const int64_t ih = p / pl.in_w, iw = p % pl.in_w;
    const auto [first_ow, kw0, kw1] = taps_in_row(pl, iw);
    const T* c = cols_t + (p - p0) * ld;
    for (int64_t co = co0; co < co1; ++co) {
      T* y_c = y_ng + co * pl.out_hw;
      const T* c_co = c + (co - co0) * pl.taps;
      for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
        if (ih < pl.h.lo[kh] || ih >= pl.h.hi[kh]) continue;
        const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
        const int64_t y_base = oh * pl.out_w + first_ow;  // + kw*dw, at least 0 from kw0 on
        const T* c_row = c_co + kh * pl.kernel_w;
        if (pl.dil_w == 1) {
          for (int64_t kw = kw0; kw < kw1; ++kw)
            y_c[y_base + kw] += c_row[kw];
        } else {
          for (int64_t kw = kw0; kw < kw1; ++kw)
            y_c[y_base + kw * pl.dil_w] += c_row[kw];
        }
      }
    }
  }
}

// cols[r*ld + p - p0] = dy_c[oh, ow] for the rows r = (co, kh, kw) of channels [co0, co1) (row 0
// is co0's first tap) and positions p in [p0, p0 + len), 0 where (oh, ow) falls outside dy. dy_ng
// points at channel 0 of the group of one item.
template <class T>
void im2col(const Plan& pl, const T* dy_ng, int64_t co0, int64_t co1, int64_t p0, int64_t len,
            T* cols, int64_t ld) {
  const int64_t p1 = p0 + len;
  const int64_t ih_first = p0 / pl.in_w, ih_last = (p1 - 1) / pl.in_w;
  with_stride(pl.stride_w, [&]<int64_t S>() {
    const int64_t sw = S != 0 ? S : pl.stride_w;
    for (int64_t co = co0; co < co1; ++co) {
      const T* dy_c = dy_ng + co * pl.out_hw;
      for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
        for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
          T* c_row = cols + ((co - co0) * pl.taps + kh * pl.kernel_w + kw) * ld;
          for (int64_t ih = ih_first; ih <= ih_last; ++ih) {
            const int64_t row_p = ih * pl.in_w;
            const int64_t seg_begin = std::max<int64_t>(0, p0 - row_p);  // iw range in the chunk
            const int64_t seg_end = std::min(pl.in_w, p1 - row_p);
            T* c = c_row + row_p - p0;                     // + iw
            int64_t iw_begin = seg_end, iw_end = seg_end;  // the valid part; empty if ih is out
            if (ih >= pl.h.lo[kh] && ih < pl.h.hi[kh]) {
              iw_begin = std::clamp(pl.w.lo[kw], seg_begin, seg_end);
              iw_end = std::clamp(pl.w.hi[kw], iw_begin, seg_end);
            }
            for (int64_t iw = seg_begin; iw < iw_begin; ++iw)
              c[iw] = T(0);
            if (iw_begin < iw_end) {
              const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
              // The offset summed as an integer first: the row's start alone can lie outside
              // dy (a large padding), and forming that pointer is undefined.
              const int64_t row = oh * pl.out_w - pl.pad_w + kw * pl.dil_w;  // + iw*sw
              int64_t iw = iw_begin;
              if constexpr (S == 1) {
                // Whole vectors, the last one past the valid part where the block's row and
                // dy's plane have room: what it writes past iw_end is written again below (the
                // zeros) or by the next segment. Short rows (10 positions) otherwise went as a
                // half vector and scalars: a third of a 48 -> 192 k4 wgrad on 10 x 10.
                typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
                constexpr int64_t L = gemm::kLanes<T>;
                const int64_t room = std::min(p1 - row_p, pl.out_hw - row);  // from c, dy_c + row
                for (; iw < iw_end && iw + L <= room; iw += L) {
                  Vec v;
                  std::memcpy(&v, dy_c + (row + iw), sizeof(Vec));
                  std::memcpy(c + iw, &v, sizeof(Vec));
                }
                iw = std::min(iw, iw_end);
              }
              for (; iw < iw_end; ++iw)
                c[iw] = dy_c[row + iw * sw];
            }
            for (int64_t iw = iw_end; iw < seg_end; ++iw)
              c[iw] = T(0);
          }
        }
      }
    }
  });
}

// im2col on short rows. im2col above pays its bookkeeping (the tap's valid range, the zero runs
// on each side) once per row of the image, for a few copies each on a small image (DCGAN's 4 x 4:
// 4 per row, a fifth of dgrad's time on one thread). Up to kShortRow positions a row, the offset
// in a channel's plane of every (tap, position) of the block's chunk is tabulated once, -1 where
// the tap falls outside dy, and each channel's row of a tap is a gather through it: the same
// values. kMaxTapOffsets entries at most, on the stack.
inline constexpr int64_t kShortRow = 8;
inline constexpr int64_t kMaxTapOffsets = 4096;

inline bool im2col_short_rows(const Plan& pl, int64_t len) {
  return pl.in_w <= kShortRow && pl.taps * len <= kMaxTapOffsets &&
         pl.out_hw <= std::numeric_limits<int32_t>::max();
}

// offsets[tap*len + p - p0] for positions p in [p0, p0 + len): dy_c's element that tap (kh, kw)
// reads at p, or -1 where it falls outside dy.
inline void tap_offsets(const Plan& pl, int64_t p0, int64_t len, int32_t* offsets) {
  for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
    for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
      int32_t* o = offsets + (kh * pl.kernel_w + kw) * len;
      for (int64_t p = p0; p < p0 + len; ++p) {
        const int64_t ih = p / pl.in_w, iw = p % pl.in_w;
        const bool inside =
            ih >= pl.h.lo[kh] && ih < pl.h.hi[kh] && iw >= pl.w.lo[kw] && iw < pl.w.hi[kw];
        const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
        const int64_t ow = iw * pl.stride_w - pl.pad_w + kw * pl.dil_w;
        o[p - p0] = inside ? static_cast<int32_t>(oh * pl.out_w + ow) : -1;
      }
    }
  }
}

// im2col of channels [co0, co1) of group g over a block's columns: item n0 + j at column j*len
// of a buffer whose rows are ld apart.
template <class T>
void im2col_block(const Plan& pl, const T* dy, int64_t g, const ColBlock& b, int64_t co0,
                  int64_t co1, T* cols, int64_t ld) {
  if (im2col_short_rows(pl, b.len)) {
    int32_t offsets[kMaxTapOffsets];
    tap_offsets(pl, b.p0, b.len, offsets);
    for (int64_t j = 0; j < b.items; ++j) {
      const T* dy_ng = dy + ((b.n0 + j) * pl.out_channels + g * pl.cog) * pl.out_hw;
      for (int64_t co = co0; co < co1; ++co) {
        const T* dy_c = dy_ng + co * pl.out_hw;
        for (int64_t tap = 0; tap < pl.taps; ++tap) {
          const int32_t* o = offsets + tap * b.len;
          T* c = cols + ((co - co0) * pl.taps + tap) * ld + j * b.len;
          for (int64_t i = 0; i < b.len; ++i)
            c[i] = o[i] >= 0 ? dy_c[o[i]] : T(0);
        }
      }
    }
    return;
  }
  for (int64_t j = 0; j < b.items; ++j) {
    const T* dy_ng = dy + ((b.n0 + j) * pl.out_channels + g * pl.cog) * pl.out_hw;
    im2col(pl, dy_ng, co0, co1, b.p0, b.len, cols + j * b.len, ld);
  }
}

// The im2col rows of channels [co0, co1) over a block's columns: dy itself, rows out_hw apart,
// where cols_are_dy and the block holds one item; else im2col_block's copy into buf, rows
// b.cols() apart.
template <class T>
struct BlockCols {
  const T* data;
  int64_t ld;
};

template <class T>
BlockCols<T> block_cols(const Plan& pl, const T* dy, int64_t g, const ColBlock& b, int64_t co0,
                        int64_t co1, T* buf) {
  if (cols_are_dy(pl) && b.items == 1)
    return {dy + (b.n0 * pl.out_channels + g * pl.cog + co0) * pl.out_hw + b.p0, pl.out_hw};
  im2col_block(pl, dy, g, b, co0, co1, buf, b.cols());
  return {buf, b.cols()};
}

// x of group g's input channels [c0, c1) (all of them by default) on a block's columns as a
// ((c1 - c0) x cols) matrix: a view of x for a block of one item, else the items copied side by
// side into buf ((c1 - c0) x cols elements).
template <class T>
ConstStridedMap<T> x_block(const Plan& pl, const T* x, int64_t g, const ColBlock& b, T* buf,
                           int64_t c0 = 0, int64_t c1 = -1) {
  if (c1 < 0) c1 = pl.cig;
  const T* x_n0g = x + (b.n0 * pl.in_channels + g * pl.cig + c0) * pl.in_hw + b.p0;
  if (b.items == 1) {
    return ConstStridedMap<T>(x_n0g, c1 - c0, b.len, Eigen::OuterStride<>(pl.in_hw));
  }
  const int64_t ld = b.cols();
  for (int64_t ci = 0; ci < c1 - c0; ++ci) {
    for (int64_t j = 0; j < b.items; ++j) {
      gemm::copy_run(x_n0g + (j * pl.in_channels + ci) * pl.in_hw, b.len,
                     buf + ci * ld + j * b.len);
    }
  }
  return ConstStridedMap<T>(buf, c1 - c0, ld, Eigen::OuterStride<>(ld));
}

// Weight operands packed once per call for gemm::gemm_packed_a, shared by every task of a pass:
// operand i in [0, count) is view_of(i), an m x k view of the weight, packed at i * stride.
// Packed in parallel over (operand, run of the reduction); each operand is packed the same way
// whatever the thread count.
template <class T>
class PackedWeights {
 public:
  template <class ViewOf>
  PackedWeights(int64_t count, int64_t m, int64_t k, ViewOf view_of, int threads)
      : stride_(gemm::packed_whole_a_elems<T>(m, k)), packed_(count * stride_) {
    const int64_t runs = gemm::reduction_runs(k);
    parallel_for(threads, count * runs, [&](int64_t t) {
      gemm::pack_whole_a_run<T>(view_of(t / runs), m, k, t % runs, get(t / runs));
    });
  }
  T* get(int64_t i) const { return packed_.data() + i * stride_; }

 private:
  int64_t stride_;
  Workspace<T> packed_;
};

// Streaming stores (x86-64 only here): *p = v with no read of the line first; p aligned to the
// vector. fence_streams() orders them before the stores that follow (the end of a task).
#if defined(__SSE2__)
inline constexpr bool kStreamingStores = true;

template <class Vec>
inline void stream_store(void* p, Vec v) {
  if constexpr (sizeof(Vec) == 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(static_cast<__m512i*>(p), reinterpret_cast<__m512i>(v));
#endif
  } else if constexpr (sizeof(Vec) == 32) {
#if defined(__AVX__)
    _mm256_stream_si256(static_cast<__m256i*>(p), reinterpret_cast<__m256i>(v));
#endif
  } else {
    _mm_stream_si128(static_cast<__m128i*>(p), reinterpret_cast<__m128i>(v));
  }
}
inline void fence_streams() {
  _mm_sfence();
}
#else
inline constexpr bool kStreamingStores = false;

template <class Vec>
inline void stream_store(void* p, Vec v) {
  std::memcpy(p, &v, sizeof(Vec));
}
inline void fence_streams() {}
#endif

// The n (0 < n < lanes) elements at p as the first lanes of a vector, the others 0, reading no
// element past them: a masked load at AVX-512. Through a zeroed copy, a row's partial vector cost
// the register tiles that run over rows of positions as much as half the row's whole vectors on
// 173-wide rows (the copies and the zeroing are some 300 instructions a row).
template <class Vec, class T>
inline Vec load_first(const T* p, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (sizeof(Vec) == 64 && sizeof(T) == 4) {
    return reinterpret_cast<Vec>(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p));
  } else if constexpr (sizeof(Vec) == 64 && sizeof(T) == 8) {
    return reinterpret_cast<Vec>(_mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << n) - 1), p));
  }
#endif
  T lanes[sizeof(Vec) / sizeof(T)] = {};
  std::copy_n(p, n, lanes);
  Vec v;
  std::memcpy(&v, lanes, sizeof(Vec));
  return v;
}

// Stores the first n (0 < n < lanes) lanes of v at p, writing nothing past them: a masked store
// at AVX-512.
template <class Vec, class T>
inline void store_first(T* p, Vec v, int64_t n) {
#if defined(__AVX512F__)
  if constexpr (sizeof(Vec) == 64 && sizeof(T) == 4) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), reinterpret_cast<__m512>(v));
    return;
  } else if constexpr (sizeof(Vec) == 64 && sizeof(T) == 8) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << n) - 1), reinterpret_cast<__m512d>(v));
    return;
  }
#endif
  T lanes[sizeof(Vec) / sizeof(T)];
  std::memcpy(lanes, &v, sizeof(Vec));
  std::copy_n(lanes, n, p);
}

#if defined(__AVX512F__)
// Lanes J*L/S to (J+1)*L/S - 1 of v, each repeated S times: part J of v spread S apart.
template <int S, int J, class Vec, std::size_t... I>
inline Vec spread_part(Vec v, std::index_sequence<I...>) {
  return __builtin_shufflevector(v, v, static_cast<int>((J * sizeof...(I) + I) / S)...);
}

// v's lanes 0, S, 2S, ... below `lanes` stored at p, p + S, ...; no other element of p's is
// written.
template <int S, class T, class Vec>
inline void store_every(T* p, Vec v, int lanes) {
  constexpr int L = sizeof(Vec) / sizeof(T);
  constexpr unsigned every = [] {
    unsigned m = 0;
    for (int l = 0; l < L; l += S)
      m |= 1u << l;
    return m;
  }();
  const unsigned mask = lanes >= L ? every : every & ((1u << std::max(lanes, 0)) - 1);
  if constexpr (sizeof(T) == 4) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>(mask), reinterpret_cast<__m512>(v));
  } else {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>(mask), reinterpret_cast<__m512d>(v));
  }
}
#endif

// dst[i * stride] = src[i] + add for i in [0, n): the stores of a stride phase into y's rows. At
// AVX-512 and strides 2 and 4 a vector of src at a time, its lanes spread S apart by a shuffle
// per S vectors of the row and each of those stored under a mask of every S-th lane: no other
// element is read or written (the row's other phases, another task's too, stay as they are),
// and a masked-off lane past the row's end is not touched; a last vector of a quarter or more
// is read and stored under masks too. Element by element, such stores were a large share of a
// stride-2 phase forward of long rows. Each element is src[i] + add either way.
template <class T>
inline void scatter_strided(T* dst, const T* src, int64_t n, int64_t stride, T add) {
  if (4 * n < gemm::kLanes<T>) {  // the rows of tiny planes: no dispatch on the stride
    for (int64_t i = 0; i < n; ++i)
      dst[i * stride] = src[i] + add;
    return;
  }
  with_stride(stride, [&]<int64_t S>() {
    const int64_t st = S != 0 ? S : stride;
    int64_t i = 0;
#if defined(__AVX512F__)
    if constexpr (S == 2 || S == 4) {
      typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
      constexpr int L = gemm::kLanes<T>;
      for (; i < n; i += L) {
        const int64_t count = std::min<int64_t>(L, n - i);
        if (4 * count < L) break;  // a few elements: the loop below
        Vec v;
        if (count == L) {
          std::memcpy(&v, src + i, sizeof(Vec));
        } else {
          v = load_first<Vec>(src + i, count);
        }
        v += add;
        T* out = dst + i * S;
        const int lanes = static_cast<int>((count - 1) * S + 1);  // through the last element
        [&]<int... J>(std::integer_sequence<int, J...>) {
          (store_every<S>(out + J * L, spread_part<S, J>(v, std::make_index_sequence<L>{}),
                          lanes - J * L),
           ...);
        }
        (std::make_integer_sequence<int, S>{});
      }
    }
#endif
    for (; i < n; ++i)
      dst[i * st] = src[i] + add;
  });
}

// The few-columns register tile: out[r * out_ld + v * L + lane] = sum over k < k_count, in order,
// of a_rows[r][k] b[k * b_ld + v * L + lane], for R rows of A read in place (a row pointer each)
// by V vectors of B. The first `stored_rows` rows are stored, by streaming stores when `stream`
// (out and out_ld aligned to the vector). With `resume`, the sums start from out's R rows, so a
// reduction run in pieces, each tile stored and taken up again, is the same chain bit for bit.
template <class T, int R, int V>
void few_columns_tile(const T* const* a_rows, const T* b, int64_t b_ld, int64_t k_count, T* out,
                      int64_t out_ld, int stored_rows, bool stream, bool resume = false) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  Vec acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      if (resume) {
        Vec start;
        std::memcpy(&start, out + r * out_ld + v * L, sizeof(Vec));
        acc[r][v] = start;
      } else {
        acc[r][v] = Vec{};
      }
    }
  }
  for (int64_t k = 0; k < k_count; ++k) {
    Vec bv[V];
    for (int v = 0; v < V; ++v)
      std::memcpy(&bv[v], b + k * b_ld + v * L, sizeof(Vec));
    for (int r = 0; r < R; ++r) {
      const T a = a_rows[r][k];
      for (int v = 0; v < V; ++v)
        acc[r][v] += a * bv[v];
    }
  }
  for (int r = 0; r < stored_rows; ++r) {
    for (int v = 0; v < V; ++v) {
      if (stream) {
        stream_store(out + r * out_ld + v * L, acc[r][v]);
      } else {
        std::memcpy(out + r * out_ld + v * L, &acc[r][v], sizeof(Vec));
      }
    }
  }
}

// The few-columns products (dgrad's in conv_transpose.cpp, wgrad's in conv_transpose_wgrad.cpp)
// take at most this many columns (batch x input positions): their column buffer, every row of a
// group by every column, stays in L2, and the weight-sized operand is read or written once, in
// place.
inline constexpr int64_t kFewColumns = 64;

inline bool few_columns_fit(const Plan& pl) {
  const int64_t columns = pl.batch * pl.in_hw;
  return columns >= 1 && columns <= kFewColumns;
}

// Up to kWideFewColumns columns where the weight is larger than a core's L2, 2 MiB: the GEMM
// path then packs (dgrad) or writes back (wgrad) a weight that no longer stays in cache, on a
// product too thin to earn it, while the few-columns products read or write each weight element
// once, in place. w_bytes: the whole weight's.
inline constexpr int64_t kWideFewColumns = 256;
inline constexpr int64_t kStreamedWeightBytes = int64_t{2} << 20;
inline bool few_columns_wide_fit(const Plan& pl, int64_t w_bytes) {
  const int64_t columns = pl.batch * pl.in_hw;
  return few_columns_fit(pl) ||
         (columns >= 1 && columns <= kWideFewColumns && w_bytes >= kStreamedWeightBytes);
}

// cols (rows x ld) of every group, the items side by side and columns past batch x in_hw zero,
// built in parallel over blocks of output channels: on small images im2col's cost is per row, not
// per element. Blocks of at most kChannelsPerTask channels, smaller where that gives fewer than
// twice the threads' tasks: 128 channels in 8 blocks were a third of DCGAN 256 -> 128's dgrad
// (4 x 4 images), run by 8 of 16 threads. A copy changes no bit however it is cut. With `tail`,
// each task also writes its rows' columns [tail_from, batch x in_hw) transposed: column
// tail_from + j of row k of group g at tail[(g * (columns - tail_from) + j) * rows + k].
template <class T>
void few_columns_cols(const Plan& pl, const T* dy, int64_t ld, T* cols, int threads,
                      T* tail = nullptr, int64_t tail_from = 0) {
  constexpr int64_t kChannelsPerTask = 16;
  const int64_t columns = pl.batch * pl.in_hw;
  const int64_t wanted = std::clamp<int64_t>(ceil_div(2 * int64_t{threads}, pl.groups),
                                             ceil_div(pl.cog, kChannelsPerTask), pl.cog);
  const int64_t per_task = ceil_div(pl.cog, std::max<int64_t>(1, wanted));
  const int64_t co_tasks = ceil_div(pl.cog, per_task);
  parallel_for(threads, pl.groups * co_tasks, [&](int64_t t) {
    const int64_t g = t / co_tasks, co0 = t % co_tasks * per_task;
    const int64_t co1 = std::min(pl.cog, co0 + per_task);
    T* c = cols + (g * pl.rows + co0 * pl.taps) * ld;
    for (int64_t r = 0; r < (co1 - co0) * pl.taps; ++r)
      std::fill(c + r * ld + columns, c + (r + 1) * ld, T(0));
    im2col_block(pl, dy, g, ColBlock{0, pl.batch, 0, pl.in_hw}, co0, co1, c, ld);
    if (tail == nullptr) return;
    const int64_t width = columns - tail_from;
    for (int64_t j = 0; j < width; ++j) {
      T* t_j = tail + (g * width + j) * pl.rows + co0 * pl.taps;
      for (int64_t r = 0; r < (co1 - co0) * pl.taps; ++r)
        t_j[r] = c[r * ld + tail_from + j];
    }
  });
}

// The few-rows products (dgrad's in conv_transpose.cpp, wgrad's in conv_transpose_wgrad.cpp):
// rows = cog x taps small (a decoder to one or a few channels: Conv-TasNet's 512 -> 1, k16), so
// that x and dx, the large operands, are read or written once, as they lie, against a column
// buffer of every position (rows x P) built once. With 48 rows (RGB outputs) wgrad's product
// measured 2x slower than the GEMM path.
inline constexpr int64_t kFewRowsMax = 24;
inline constexpr int64_t kFewRowsMinPositions = 256;

// Each item's columns start on a whole register tile (two vectors), padded with zeros, so that
// a tile's loads of cols are aligned and never cross into the next item.
template <class T>
int64_t few_rows_item_ld(const Plan& pl) {
  return gemm::round_up(pl.in_hw, gemm::kCols<T>);
}

// Items must be long: dgrad's tiles are two vectors of one item's positions and wgrad ends each
// item on a padded vector, so that on short items (a batch of 1 x 1 latents) most of the work
// would be padding. At most a quarter of an item's tiles may be.
inline bool few_rows_fit(const Plan& pl, int64_t elem_bytes) {
  const int64_t item_ld = gemm::round_up(pl.in_hw, gemm::kCols<float>);  // the widest
  return pl.rows <= kFewRowsMax && 4 * item_ld <= 5 * pl.in_hw &&
         int128{pl.batch} * pl.in_hw >= kFewRowsMinPositions &&
         fits(pl.groups * pl.rows, pl.batch * item_ld + gemm::kCols<float>, elem_bytes,
              kMaxWholeColsBytes);
}

// The distance between rows of the few-rows column buffer: every item's columns, plus a tile
// where that would be a multiple of 4 KiB. A tile reads 6 to 24 rows at once; at a power-of-two
// distance they all fall in the same L1 sets (16 items of 64 x 64: 256 KiB apart, 0.6x the GEMM
// path).
template <class T>
int64_t few_rows_ld(const Plan& pl) {
  const int64_t ld = pl.batch * few_rows_item_ld<T>(pl);
  return ld * static_cast<int64_t>(sizeof(T)) % 4096 == 0 ? ld + gemm::kCols<T> : ld;
}

// cols of every group (rows x few_rows_ld), the items side by side from item_ld apart and zero
// past in_hw, built in parallel over (group, item, chunk of positions). Chunks of at most 4096
// positions, shorter where (group, item) pairs are fewer than the threads: a batch-1 call of a
// 4000-step sequence (Conv-TasNet's decoder) was one task, its copy run on one core while the
// rest waited for the product. A copy: the cut follows the threads without changing a bit.
template <class T>
void few_rows_cols(const Plan& pl, const T* dy, T* cols, int threads) {
  constexpr int64_t kLongest = 4096, kShortest = 256;
  const int64_t item_ld = few_rows_item_ld<T>(pl), ld = few_rows_ld<T>(pl);
  const int64_t per_thread =
      ceil_div(pl.groups * pl.batch * pl.in_hw, std::max<int64_t>(1, threads));
  const int64_t chunk = std::clamp(gemm::round_up(per_thread, 16), kShortest, kLongest);
  const int64_t chunks = ceil_div(pl.in_hw, chunk);
  parallel_for(threads, pl.groups * pl.batch * chunks, [&](int64_t t) {
    const int64_t g = t / (pl.batch * chunks), n = t / chunks % pl.batch;
    const int64_t p0 = t % chunks * chunk, len = std::min(chunk, pl.in_hw - p0);
    T* c = cols + g * pl.rows * ld + n * item_ld;
    im2col_block(pl, dy, g, ColBlock{n, 1, p0, len}, 0, pl.cog, c + p0, ld);
    if (p0 + len == pl.in_hw)
      for (int64_t r = 0; r < pl.rows; ++r)
        std::fill(c + r * ld + pl.in_hw, c + r * ld + item_ld, T(0));
  });
}

// out = parts[0] + parts[1] + ... + parts[count - 1], each part `numel` elements of `partial`,
// summed in part order (the same for any thread count) over blocks of elements in parallel.
template <class T>
void sum_parts_in_order(const T* partial, int64_t count, int64_t numel, T* out, int threads) {
  constexpr int64_t kSumBlock = 1 << 14;
  parallel_for(threads_for(static_cast<double>(count * numel), threads), ceil_div(numel, kSumBlock),
               [&](int64_t t) {
                 const int64_t i0 = t * kSumBlock, i1 = std::min(numel, i0 + kSumBlock);
                 std::copy(partial + i0, partial + i1, out + i0);
                 for (int64_t k = 1; k < count; ++k) {
                   const T* part = partial + k * numel;
                   for (int64_t i = i0; i < i1; ++i)
                     out[i] += part[i];
                 }
               });
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
