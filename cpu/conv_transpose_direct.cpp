// Direct ConvTranspose dgrad, wgrad and stride-1 forward on the CPU, with no column buffer, for
// the shapes direct_dgrad_suits, direct_wgrad_suits and direct_forward_suits take (the rest go
// to the column buffer and GEMMs of conv_transpose.cpp and conv_transpose_wgrad.cpp).
//
// dgrad: dx[ci, ih, iw] = sum over co, kh, kw of w[ci, co, kh, kw] dy[co, oh, ow],
//   (oh, ow) = (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw)
// The register tile is a block of kBlock input channels (kVecs vectors, one channel a lane) by up
// to kMaxPositions consecutive positions of one row of dx. Each step of its loop over (co, kh,
// kw) loads kVecs vectors of the weight (packed so that a block's channels are contiguous) and
// broadcasts one element of dy per position: kVecs x positions FMAs for kVecs + positions loads,
// where im2col + GEMM first writes and then reads kh x kw copies of dy. Each task copies the
// window of dy its tiles read, a few output channels at a time, into a zero-padded buffer of its
// own that stays in cache, so that no tap needs a bounds check. The kernel and its driver take
// the problem as a struct Gather: dgrad's sizes under neutral names.
//
// forward at stride 1: the same kernel with the taps counted backwards (its section below).
// wgrad: see its section below.
//
// Every output element is one chain of FMAs in a fixed order (dx: over (co, kh, kw); y: over
// (ci, kh, kw), then its bias; dw: over the positions, then slices in order), whatever the tile or
// task it falls in, so the results do not depend on the thread count (docs/design.md,
// "Determinism").
#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "cpu/conv_transpose_cols.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

constexpr int kVecs = 2;
// Positions per tile: kVecs x kMaxPositions accumulators. At AVX-512 14: 28 of its 32
// registers, with the two weight vectors and a broadcast beside them (no spill); against 12, a
// row of 13 or 14 positions is one tile, not two of 7, and rows of 25-28 two, not three
// (1.1x-1.25x on 13 x 13 and 25 x 25 dgrads, 1.04x-1.11x on 14 to 40 positions a row:
// docs/performance.md, twenty-fifth session). Below it 6, 12 of 16 (the GEMM's budget, gemm.h).
constexpr int kMaxPositions = gemm::kVecRegisters >= 32 ? 14 : gemm::kRows;
template <class T>
constexpr int64_t kBlock = kVecs* gemm::kLanes<T>;  // input channels per tile

// f.template operator()<V>() with V the vectors a tile of a block holding `channels` channels
// computes: one where they fit in one vector (16 input channels at AVX-512 in float32, or a last
// block's few), whose second vector's FMAs would all add zeros, half of the tile's arithmetic;
// else kVecs.
template <class T, class F>
void with_block_vectors(int64_t channels, F&& f) {
  static_assert(kVecs == 2, "one vector or both");
  if (channels <= gemm::kLanes<T>) {
    f.template operator()<1>();
  } else {
    f.template operator()<kVecs>();
  }
}

// Steps of (co, kh, kw) per sweep over a task's tiles (below), in whole output channels, at
// least kMinSweepChannels and at most kMaxSweepChannels of them.
constexpr int64_t kSweepSteps = 256;
constexpr int64_t kMinSweepChannels = 16;
constexpr int64_t kMaxSweepChannels = 128;
// A task's run of tiles: a few, so that tasks are many but not tiny.
constexpr int64_t kTaskTiles = 16;
// Scratch bounds: a dgrad task's window of padded dy; wgrad's channels-last x and dy of a round
// of items.
constexpr int64_t kMaxPaddedBytes = int64_t{32} << 20;
// The weight is packed once per call: that pays when every packed element serves at least this
// many positions (batch x input positions).
constexpr int64_t kDirectMinPositions = 256;
// dgrad's kernel from this many positions where the few-columns product does not take the shape
// (a weight past L2 on up to 256 columns, or up to 64 columns: it reads the weight once, in
// place, where the kernel's tiles stream all of it once per row of positions). On 64 to 255
// positions with a weight of up to 1.2 MiB, the kernel ran 1.1x-3.2x faster than the GEMM path
// at 1, 4 and 16 threads on the 16-core host (docs/performance.md, thirty-seventh session); with
// the few-columns shapes (256 -> 128 on one 8 x 8 item, 2 MiB) it lost 0.68x-0.86x.
constexpr int64_t kDirectDgradMinPositions = 64;
constexpr int64_t kDirectMinSteps = 64;
// The forward's gather pays for itself from this many taps: with fewer, the column buffer is a
// few copies of y and the GEMM path measured as fast (S2-S4's k3 and k5 1-D layers).
constexpr int64_t kForwardMinTaps = 9;
// With at most a vector of channels on each side (16 in float32 at AVX-512), from this many:
// the GEMM path's product is then at most 16 x taps rows by cig steps, too small for its register
// tiles, and the kernel measured 1.2x-2.4x on the 16-core host at 1 to 16 threads (16 -> 16 k3x2
// on one 209 x 212 image, and on 8 items of 20 x 20; docs/performance.md, thirty-sixth session).
// With more output channels it won and lost (16 -> 32 k2: 1.3x-1.7x; 16 -> 64 k2x3: 0.73x-0.94x;
// 8 -> 32 k2: 0.75x at 1 thread).
constexpr int64_t kForwardMinTapsFewChannels = 4;
constexpr int64_t kSparseForwardMaxChannels = 32;     // direct_forward_suits
constexpr int64_t kOneVectorForwardMaxChannels = 64;  // direct_forward_suits
constexpr int64_t kDeepForwardChannels = 64;          // direct_forward_suits
// Below AVX-512 (16 vector registers) the tile holds 6 positions, and the gather measured
// slower than im2col + the backend GEMM, on an Intel and an AMD machine, wherever im2col copies
// with a constant stride (stride_is_constant: W strides 1, 2 and 4; docs/performance.md, "CPU
// backend against PyTorch"). The other strides (the x5 and x8 vocoder layers) keep the gather
// there: im2col's copy at a stride read at run time cost more than the gather lost.
constexpr bool kShortTile = gemm::kVecRegisters < 32;
constexpr int64_t kWgradMinOutChannels = 4;
// Taps per reached stride phase (phases_reached) from which the direct wgrad beats im2col + GEMM.
// At AVX-512 from 2: the k3 layers at strides 1 and 2 and the vocoders' k4 s2 measured faster
// on the kernel, on an Intel and an AMD machine, at one thread and at all cores; with one tap per
// phase (U-Net's k2 s2) the GEMM path kept up or won. Below it, with 6 positions to a tile, from
// 4 (docs/performance.md, "CPU backend against PyTorch").
constexpr int64_t kWgradMinPhaseTaps = kShortTile ? 4 : 2;
constexpr int64_t kWgradMinPositions = 512;
constexpr int64_t kWgradGemmPositions = 1024;  // direct_wgrad_suits below AVX-512
constexpr int64_t kWgradGemmChannels = 256;    // the same

// dy of one (n, co) plane with every tap's reach zero-padded: element (r, c) is
// dy[r - ph, c - pw], 0 outside dy. Row ih*sh + kh*dh, column iw*sw + kw*dw is tap (kh, kw) of
// input position (ih, iw).
struct Padded {
  int64_t h, w;
  int64_t plane() const { return h * w; }
};

Padded padded_of(const Plan& pl) {
  return {(pl.in_h - 1) * pl.stride_h + (pl.kernel_h - 1) * pl.dil_h + 1,
          (pl.in_w - 1) * pl.stride_w + (pl.kernel_w - 1) * pl.dil_w + 1};
}

// The problem the gather kernel and its driver solve, dgrad's under neutral names:
//   dst[c, i, j] = sum over r, a, b of wp[r, a, b][c] src[r, i*sh + a*dh - ph, j*sw + b*dw - pw]
// per (item, group), c < lanes, r < reduce, a < kh, b < kw, on the rows x cols grid of the
// destination plane; src reads outside the source are 0.
struct Gather {
  int64_t batch, groups, lanes, reduce, kh, kw, rows, cols, dst_channels;
  int64_t src_channels, src_h, src_w, sh, sw, dh, dw, ph, pw;
  int64_t taps() const { return kh * kw; }
};

Gather dgrad_gather(const Plan& pl) {
  return {pl.batch,    pl.groups,   pl.cig,         pl.cog,          pl.kernel_h, pl.kernel_w,
          pl.in_h,     pl.in_w,     pl.in_channels, pl.out_channels, pl.out_h,    pl.out_w,
          pl.stride_h, pl.stride_w, pl.dil_h,       pl.dil_w,        pl.pad_h,    pl.pad_w};
}

// Reduce channels per sweep over a task's tiles, for `taps` steps per channel.
int64_t sweep_channels(int64_t taps) {
  return std::clamp<int64_t>(kSweepSteps / std::max<int64_t>(1, taps), kMinSweepChannels,
                             kMaxSweepChannels);
}

// Input channels per tile for an element size.
int64_t block_of(int64_t elem_bytes) {
  return elem_bytes == 4 ? kBlock<float> : kBlock<double>;
}

// A window of the zero-padded source planes of `channels` reduce channels of one item's group:
// rows [y0, y0 + h) and columns [x0, x0 + w) of the padding's coordinates (source row = y - ph),
// element (r, y, x) at out[(r * h + y) * w + x]. Its padding (rows outside the source, columns
// left and right of it) is the same for every sweep of a task's channels: pad_window_zeros
// writes it once, and each sweep's pad_window_copy writes the source's part only. Written per
// sweep, the zeros and the per-row calls that split a row into three runs were a third of the
// window's time on small images (a row of 16 or 32 elements between two zeros).
struct WindowSpan {
  int64_t x_begin, x_end;  // columns x with x0 + x - pw inside [0, src_w)
  int64_t y_begin, y_end;  // rows y with y0 + y - ph inside [0, src_h)
};

WindowSpan window_span(const Gather& q, int64_t y0, int64_t h, int64_t x0, int64_t w) {
  const int64_t x_begin = std::clamp<int64_t>(q.pw - x0, 0, w);
  const int64_t y_begin = std::clamp<int64_t>(q.ph - y0, 0, h);
  return {x_begin, std::clamp<int64_t>(q.pw + q.src_w - x0, x_begin, w), y_begin,
          std::clamp<int64_t>(q.ph + q.src_h - y0, y_begin, h)};
}

template <class T>
void pad_window_zeros(const WindowSpan& sp, int64_t channels, int64_t h, int64_t w, T* out) {
  for (int64_t r = 0; r < channels; ++r) {
    T* plane = out + r * h * w;
    gemm::zero_run(plane, sp.y_begin * w);
    for (int64_t y = sp.y_begin; y < sp.y_end; ++y) {
      gemm::zero_run(plane + y * w, sp.x_begin);
      gemm::zero_run(plane + y * w + sp.x_end, w - sp.x_end);
    }
    gemm::zero_run(plane + sp.y_end * w, (h - sp.y_end) * w);
  }
}

// Reduce channels [r0, r1) (src_ng: the group's channel 0) into a window whose padding
// pad_window_zeros wrote.
template <class T>
void pad_window_copy(const Gather& q, const WindowSpan& sp, const T* src_ng, int64_t r0, int64_t r1,
                     int64_t y0, int64_t h, int64_t x0, int64_t w, T* out) {
  const int64_t n = sp.x_end - sp.x_begin;
  if (n == 0 || sp.y_begin == sp.y_end) return;  // all padding: no source row to address
  for (int64_t r = r0; r < r1; ++r) {
    const T* src = src_ng + r * q.src_h * q.src_w + (y0 + sp.y_begin - q.ph) * q.src_w +
                   (x0 + sp.x_begin - q.pw);
    T* dst = out + ((r - r0) * h + sp.y_begin) * w + sp.x_begin;
    for (int64_t y = sp.y_begin; y < sp.y_end; ++y, src += q.src_w, dst += w)
      gemm::copy_run(src, n, dst);
  }
}

// Elements of a piece of a copy (the packed weights, wgrad's channels-last x and dy), at least.
constexpr int64_t kMinCopyPiece = 4096;

// Pieces to cut each of `units` copies of `elems` elements into: some twice the threads' tasks
// in all, none under kMinCopyPiece elements. One task per weight block left most threads idle
// while a large weight was packed (HiFi-GAN V1's 256 -> 128 x8 dgrad at AVX-512: 8 blocks of a
// 2 MiB weight on 16 threads). A copy changes no bit however it is cut.
int64_t copy_pieces(int64_t units, int64_t elems, int threads) {
  const int64_t wanted = ceil_div(2 * int64_t{threads}, std::max<int64_t>(1, units));
  return std::clamp<int64_t>(elems / kMinCopyPiece, 1, wanted);
}

// Rows [r0, r1) of dgrad's weight for group g, channels [cb*kBlock, +kBlock) packed as
// [co][kh][kw][channel] (a row: one (co, kh, kw)), channels past cig zero; `out` is the block's.
template <class T>
void pack_weight(const Plan& pl, const T* w, int64_t g, int64_t cb, int64_t r0, int64_t r1,
                 T* out) {
  const int64_t c0 = cb * kBlock<T>;
  rows_to_lanes(w + (g * pl.cig + c0) * pl.rows + r0, pl.rows, std::min(kBlock<T>, pl.cig - c0),
                r1 - r0, out + r0 * kBlock<T>, kBlock<T>);
}

// acc[v][p][lane] += sum over steps s in order of wp[s][v*lanes + lane] d[offsets[s] + p*sw],
// acc starting from 0 when `first`, for the first V of the block's kVecs vectors (the rest, a
// block's channels past the last vector that holds any, are left alone: nothing reads them). The
// steps are a sweep's (r, a, b) in turn, each offset r*plane + a*row_step + b*dw precomputed
// (step_offsets): one loop of one step per iteration. Loops over r, a and b, the innermost only a
// kernel row's few taps long, spent about as many instructions on their own bookkeeping as on
// the FMAs (docs/performance.md, twenty-first session). SW: sw when it is a compile-time constant
// (the loads then have fixed offsets), else 0.
template <class T, int P, int SW, int V>
void gather_tile(const T* __restrict wp, const T* __restrict d, const int64_t* __restrict offsets,
                 int64_t steps, int64_t sw_any, bool first, T* __restrict acc_mem) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  static_assert(V >= 1 && V <= kVecs);
  const int64_t sw = SW != 0 ? SW : sw_any;
  Vec acc[V][P];
  load_sums(acc, acc_mem, first);
  for (int64_t s = 0; s < steps; ++s) {
    Vec wv[V];
    for (int v = 0; v < V; ++v)
      std::memcpy(&wv[v], wp + v * L, sizeof(Vec));
    wp += kVecs * L;
    const T* dk = d + offsets[s];
    for (int p = 0; p < P; ++p) {
      const T x = dk[p * sw];
      for (int v = 0; v < V; ++v)
        acc[v][p] += x * wv[v];
    }
  }
  store_sums(acc, acc_mem);
}

// The steps (r, a, b) of a sweep of `channels` reduce channels, as offsets into a source of
// `plane` elements per channel and `row` per row.
void step_offsets(const Gather& q, int64_t channels, int64_t plane, int64_t row, int64_t* out) {
  for (int64_t r = 0; r < channels; ++r)
    for (int64_t a = 0; a < q.kh; ++a)
      for (int64_t b = 0; b < q.kw; ++b)
        *out++ = r * plane + a * q.dh * row + b * q.dw;
}

// with_stride plus strides 3, 5 and 8 (the x3, x5 and x8 upsamplers of vocoders): the tile's
// loads then have fixed offsets. With the stride read at run time each of a tile's 12 loads
// needs an address of its own (EnCodec's x5 dgrad spent a fifth of its time there).
template <class F>
void with_tile_stride(int64_t stride, F&& f) {
  if (stride == 8) return f.template operator()<8>();
  if (stride == 5) return f.template operator()<5>();
  if (stride == 3) return f.template operator()<3>();
  with_stride(stride, f);
}

// `channels`: the block's lanes that hold channels (with_block_vectors).
template <class T, int SW>
void gather_tile_of(int positions, int64_t channels, const T* wp, const T* d,
                    const int64_t* offsets, int64_t steps, int64_t sw, bool first, T* acc_mem) {
  // Positions 1 .. kMaxPositions, each its own instance (the tile is a register array).
  gemm::with_count<kMaxPositions>(positions, [&]<int P>() {
    with_block_vectors<T>(channels, [&]<int V>() {
      gather_tile<T, P, SW, V>(wp, d, offsets, steps, sw, first, acc_mem);
    });
  });
}

// Runs a Gather on weights packed per (group, block of kBlock lanes) at packed +
// (g * blocks + cb) * packed_stride, each [r][a][b][lane]; bias (per destination channel, or
// null) is added to each element after its chain.
template <class T>
void run_gather(const Gather& q, const T* src, const T* packed, int64_t packed_stride,
                const T* bias, T* dst, int threads) {
  constexpr int64_t B = kBlock<T>;
  constexpr int L = gemm::kLanes<T>;
  const int64_t blocks = ceil_div(q.lanes, B);
  // An item's tiles, row-major: each row in tiles of near-equal length (a row two positions
  // longer than a tile is two near-halves, not a whole tile and 2). A task takes a run of up to
  // kTaskTiles consecutive tiles, across rows on small images; runs are shortened while the tasks
  // are fewer than twice the threads. The cut cannot change a bit: every element is one chain
  // whatever run its tile is in.
  const int64_t row_tiles = ceil_div(q.cols, kMaxPositions);
  const int64_t item_tiles = q.rows * row_tiles;
  const auto tile_span = [&](int64_t k, int64_t& i, int64_t& p0, int64_t& p1) {
    i = k / row_tiles;
    const int64_t j = k % row_tiles;
    p0 = q.cols * j / row_tiles;
    p1 = q.cols * (j + 1) / row_tiles;
  };
  // A task: a run of tiles of one (item, group) and a range of channel blocks, so that the
  // blocks share the run's window of the source (copied once per sweep, not once per block).
  // Which cut comes first: a shorter run streams the blocks' weights once more per extra run, a
  // range of blocks copies the run's window once more per extra range. When a group's weight
  // outweighs an item's source (HiFi-GAN's x8 upsamplers: 0.58x the GEMM path at 16 threads
  // with runs of one tile), the blocks are split first.
  const int64_t tasks_wanted = 2 * int64_t{threads};
  const int64_t windows = q.groups * q.batch * item_tiles;
  const bool weight_heavy =
      int128{q.lanes} * q.taps() > int128{q.src_h} * q.src_w;  // per reduce channel
  int64_t run = 0, block_parts = 1;
  if (weight_heavy) {
    const int64_t full_runs = q.groups * q.batch * ceil_div(item_tiles, kTaskTiles);
    block_parts = std::clamp<int64_t>(ceil_div(tasks_wanted, full_runs), 1, blocks);
    run = std::clamp<int64_t>(ceil_div(windows * block_parts, tasks_wanted), 1,
                              std::min(kTaskTiles, item_tiles));
  } else {
    run = std::clamp<int64_t>(ceil_div(windows, tasks_wanted), 1, std::min(kTaskTiles, item_tiles));
    block_parts = std::clamp<int64_t>(
        ceil_div(tasks_wanted, q.groups * q.batch * ceil_div(item_tiles, run)), 1, blocks);
  }
  const int64_t runs = ceil_div(item_tiles, run);
  const int64_t part_blocks = ceil_div(blocks, block_parts);
  // The window of the padded source that run j reads: rows [y0, y0 + h), columns [x0, x0 + w).
  struct Window {
    int64_t y0, h, x0, w;
  };
  const auto window_of = [&](int64_t j) {
    const int64_t k0 = j * run, k1 = std::min(item_tiles, k0 + run);
    int64_t i_a, i_b, pa, pb, unused;
    tile_span(k0, i_a, pa, unused);
    tile_span(k1 - 1, i_b, unused, pb);
    if (i_a != i_b) pa = 0, pb = q.cols;  // whole rows
    return Window{i_a * q.sh, (i_b - i_a) * q.sh + (q.kh - 1) * q.dh + 1, pa * q.sw,
                  (pb - 1 - pa) * q.sw + (q.kw - 1) * q.dw + 1};
  };
  int64_t window_elems = 0;
  for (int64_t j = 0; j < runs; ++j) {
    const Window win = window_of(j);
    window_elems = std::max(window_elems, win.h * win.w);
  }
  // Reduce channels per sweep (below): about kSweepSteps steps of (r, a, b), so that a
  // sweep's fixed costs (its window's copy, its tiles' sums through memory) stay small.
  const int64_t sweep = sweep_channels(q.taps());
  const int64_t tile_elems = B * kMaxPositions;
  const int64_t acc_elems = part_blocks * run * tile_elems;
  const int64_t dst_plane = q.rows * q.cols;
  // A thread's scratch, and the run whose window padding its buffer holds: a task of the same run
  // (another item or group, so the same window) finds its zeros there and writes only the
  // source's rows (on 11 x 11 images of 8 reduce channels, one sweep a task, the zeros were 6%
  // of the pass).
  struct State {
    Workspace<T> ws;
    std::vector<int64_t> offsets;
    int64_t zeroed_run = -1;
  };
  parallel_for(
      threads, q.groups * q.batch * runs * block_parts,
      [&] {
        return State{Workspace<T>(acc_elems + sweep * window_elems),
                     std::vector<int64_t>(static_cast<size_t>(sweep * q.taps()))};
      },
      [&](State& state, int64_t t) {
        const Workspace<T>& ws = state.ws;
        int64_t* offsets = state.offsets.data();
        const int64_t part = t % block_parts, j = t / block_parts % runs;
        const int64_t ng = t / (block_parts * runs), n = ng / q.groups, g = ng % q.groups;
        const int64_t b0 = part * part_blocks, b1 = std::min(blocks, b0 + part_blocks);
        const int64_t k0 = j * run, k1 = std::min(item_tiles, k0 + run);
        const Window win = window_of(j);
        T* accs = ws.data();
        T* window = ws.data() + acc_elems;
        const T* src_ng = src + (n * q.src_channels + g * q.reduce) * q.src_h * q.src_w;
        const auto acc_of = [&](int64_t cb, int64_t k) {
          return accs + ((cb - b0) * run + (k - k0)) * tile_elems;
        };
        // Reduce channels in blocks, each swept over every tile of the run: a block's window
        // of the source, zero-padded, and its weight stay in cache while the tiles read them.
        // The tiles' sums wait in `accs` between blocks, so that each element is still one
        // chain over (r, a, b) in order.
        // A window that lies inside the source needs no padding: the tiles then read the source
        // in place, with no copy.
        const WindowSpan span = window_span(q, win.y0, win.h, win.x0, win.w);
        const bool inside = win.y0 >= q.ph && win.y0 + win.h <= q.ph + q.src_h && win.x0 >= q.pw &&
                            win.x0 + win.w <= q.pw + q.src_w;
        const int64_t plane = inside ? q.src_h * q.src_w : win.h * win.w;
        const int64_t row = inside ? q.src_w : win.w;
        step_offsets(q, sweep, plane, row, offsets);  // every sweep's: its window is alike
        for (int64_t r0 = 0; r0 < q.reduce; r0 += sweep) {
          const int64_t r1 = std::min(q.reduce, r0 + sweep);
          // Element (y, x) of the window, padded coordinates, for channel r0.
          const T* base =
              inside ? src_ng + r0 * plane + (win.y0 - q.ph) * row + (win.x0 - q.pw) : window;
          if (!inside) {
            // The window (its rows, columns and shape) is a function of the run alone.
            if (r0 == 0 && state.zeroed_run != j) {
              pad_window_zeros(span, std::min(sweep, q.reduce), win.h, win.w, window);
              state.zeroed_run = j;
            }
            pad_window_copy(q, span, src_ng, r0, r1, win.y0, win.h, win.x0, win.w, window);
          }
          for (int64_t cb = b0; cb < b1; ++cb) {
            const T* wp = packed + (g * blocks + cb) * packed_stride + r0 * q.taps() * B;
            const int64_t channels = std::min(B, q.lanes - cb * B);
            for (int64_t k = k0; k < k1; ++k) {
              int64_t i, p0, p1;
              tile_span(k, i, p0, p1);
              const T* d = base + (i * q.sh - win.y0) * row + p0 * q.sw - win.x0;
              with_tile_stride(q.sw, [&]<int64_t S>() {
                gather_tile_of<T, static_cast<int>(S)>(static_cast<int>(p1 - p0), channels, wp, d,
                                                       offsets, (r1 - r0) * q.taps(), q.sw, r0 == 0,
                                                       acc_of(cb, k));
              });
            }
          }
        }
        // A tile's sums [v][p][lane] are channel c0 + v*L + lane at position p0 + p: whole
        // vectors of channels go to a contiguous destination row through register transposes.
        for (int64_t cb = b0; cb < b1; ++cb) {
          const int64_t c0 = cb * B, channels = std::min(B, q.lanes - c0);
          T* dst_block = dst + (n * q.dst_channels + g * q.lanes + c0) * dst_plane;
          for (int64_t k = k0; k < k1; ++k) {
            int64_t i, p0, p1;
            tile_span(k, i, p0, p1);
            const int positions = static_cast<int>(p1 - p0);
            T* sums = acc_of(cb, k);
            if (bias != nullptr) {
              const T* bias_block = bias + g * q.lanes + c0;
              for (int64_t c = 0; c < channels; ++c)
                for (int p = 0; p < positions; ++p)
                  sums[(c / L * positions + p) * L + c % L] += bias_block[c];
            }
            for (int64_t v = 0; v < kVecs; ++v) {
              const T* vsrc = sums + v * positions * L;
              T* vdst = dst_block + v * L * dst_plane + i * q.cols + p0;
              if ((v + 1) * L <= channels) {
                for (int qq = 0; qq < positions; qq += L) {  // transpose_tile takes L positions
                  const int width = std::min(L, positions - qq);
                  gemm::transpose_tile(vsrc + qq * L, L, width, vdst + qq, dst_plane, width);
                }
                continue;
              }
              for (int64_t c = v * L; c < std::min(channels, (v + 1) * L); ++c)
                for (int p = 0; p < positions; ++p)
                  vdst[(c - v * L) * dst_plane + p] = vsrc[p * L + c - v * L];
            }
          }
        }
      });
}

template <class T>
void direct_dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int64_t B = kBlock<T>;
  const int64_t blocks = ceil_div(pl.cig, B);
  const int64_t packed_elems = pl.rows * B;
  Workspace<T> packed(pl.groups * blocks * packed_elems);
  // Pieces of whole vectors of rows, so that each piece's transposes start where the block's do.
  const int64_t pieces = copy_pieces(pl.groups * blocks, packed_elems, threads);
  const int64_t piece_rows = gemm::round_up(ceil_div(pl.rows, pieces), int64_t{gemm::kLanes<T>});
  const int64_t per_block = ceil_div(pl.rows, piece_rows);
  parallel_for(threads, pl.groups * blocks * per_block, [&](int64_t t) {
    const int64_t gb = t / per_block, r0 = t % per_block * piece_rows;
    pack_weight(pl, w, gb / blocks, gb % blocks, r0, std::min(pl.rows, r0 + piece_rows),
                packed.data() + gb * packed_elems);
  });
  run_gather(dgrad_gather(pl), dy, packed.data(), packed_elems, static_cast<const T*>(nullptr), dx,
             threads);
}

// ---- forward at stride 1 ----
// With both strides 1 the forward is a gather too: y[co, oh, ow] = sum over ci, kh, kw of
// w[ci, co, kh, kw] x[ci, oh + ph - kh*dh, ow + pw - kw*dw]. Counting the taps backwards
// (a = kernel_h - 1 - kh) turns the reads into forward_gather's: source rows oh + a*dh - ph'
// with ph' = (kernel_h - 1)*dh - ph, the weight packed with its taps reversed. Against the column
// buffer (taps copies of y written and read again by col2im), measured on S5 (k3x7): see
// docs/performance.md.
Gather forward_gather(const Plan& pl) {
  return {pl.batch,
          pl.groups,
          pl.cog,
          pl.cig,
          pl.kernel_h,
          pl.kernel_w,
          pl.out_h,
          pl.out_w,
          pl.out_channels,
          pl.in_channels,
          pl.in_h,
          pl.in_w,
          1,
          1,
          pl.dil_h,
          pl.dil_w,
          (pl.kernel_h - 1) * pl.dil_h - pl.pad_h,
          (pl.kernel_w - 1) * pl.dil_w - pl.pad_w};
}

// Input channels [ci0, ci1) of the forward's weight for group g, output channels
// [cb*kBlock, +kBlock) packed as [ci][a][b][channel] with a, b the taps counted backwards,
// channels past cog zero; `out` is the block's.
template <class T>
void pack_forward_weight(const Plan& pl, const T* w, int64_t g, int64_t cb, int64_t ci0,
                         int64_t ci1, T* out) {
  constexpr int64_t B = kBlock<T>;
  const int64_t c0 = cb * B, channels = std::min(B, pl.cog - c0);
  for (int64_t ci = ci0; ci < ci1; ++ci) {
    T* block = out + ci * pl.taps * B;
    rows_to_lanes(w + (g * pl.cig + ci) * pl.rows + c0 * pl.taps, pl.taps, channels, pl.taps, block,
                  kBlock<T>);
    for (int64_t t = 0; t < pl.taps / 2; ++t)  // taps backwards
      std::swap_ranges(block + t * B, block + (t + 1) * B, block + (pl.taps - 1 - t) * B);
  }
}

template <class T>
void direct_forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  constexpr int64_t B = kBlock<T>;
  const int64_t blocks = ceil_div(pl.cog, B);
  const int64_t packed_elems = pl.cig * pl.taps * B;
  Workspace<T> packed(pl.groups * blocks * packed_elems);
  const int64_t pieces = copy_pieces(pl.groups * blocks, packed_elems, threads);
  const int64_t piece_channels = ceil_div(pl.cig, pieces);
  const int64_t per_block = ceil_div(pl.cig, piece_channels);
  parallel_for(threads, pl.groups * blocks * per_block, [&](int64_t t) {
    const int64_t gb = t / per_block, ci0 = t % per_block * piece_channels;
    pack_forward_weight(pl, w, gb / blocks, gb % blocks, ci0,
                        std::min(pl.cig, ci0 + piece_channels), packed.data() + gb * packed_elems);
  });
  run_gather(forward_gather(pl), x, packed.data(), packed_elems, b, y, threads);
}

// ---- wgrad ----
//   dw[ci, co, kh, kw] = sum over n, ih, iw of x[ci, ih, iw] dy[co, oh, ow], (oh, ow) as above.
// Per tap this is a product over positions. The register tile is a block of kBlock input
// channels (lanes) by up to kTileChannels output channels; each step over a position loads
// kVecs vectors of x and broadcasts kTileChannels elements of dy. For those loads to be
// contiguous, x goes channels-last in blocks of kBlock channels ([position][channel]) and dy
// channels-last, zero-padded as for dgrad ([row][column][co]), once per call. Each element of
// dw is one chain over (n, ih, iw) in that order, whatever the task: no dependence on the thread
// count.

constexpr int kTileChannels = gemm::kRows;  // output channels per tile: 24 accumulators
// Positions a task's tiles sweep in turn (the 1-D kernel's segments, segment_positions, at most).
constexpr int64_t kChunkPositions = 256;
// Positions of the sweeps that every task runs between two synchronisations.
constexpr int64_t kRoundPositions = 4096;
// Slices of the positions (below): about this many positions each, at most kMaxSlices of them
// and kMaxSliceBytes of sums.
constexpr int64_t kSlicePositions = 8192;
constexpr int64_t kMaxSlices = 16;
constexpr int64_t kMaxSliceBytes = int64_t{64} << 20;

// Rows [h0, h1) of x of item n, group g, channels [c0, c0 + kBlock) as [position][channel],
// zero past cig; `out` is the whole image's buffer.
template <class T>
void x_channels_last(const Plan& pl, const T* x, int64_t n, int64_t g, int64_t cb, int64_t h0,
                     int64_t h1, T* out) {
  const int64_t c0 = cb * kBlock<T>, p0 = h0 * pl.in_w;
  rows_to_lanes(x + (n * pl.in_channels + g * pl.cig + c0) * pl.in_hw + p0, pl.in_hw,
                std::min(kBlock<T>, pl.cig - c0), (h1 - h0) * pl.in_w, out + p0 * kBlock<T>,
                kBlock<T>);
}

// out[i * channels + c] = src[c * ld + i] for i < count and c < channels: a run of `count`
// elements of each of `channels` rows of src, channels-last.
template <class T>
void run_channels_last(const T* src, int64_t ld, int64_t channels, int64_t count, T* out) {
  constexpr int L = gemm::kLanes<T>;
  int64_t c0 = 0;
  for (; c0 + L <= channels; c0 += L) {
    int64_t i = 0;
    for (; i + L <= count; i += L)
      gemm::transpose_tile<T, L>(src + c0 * ld + i, ld, L, out + i * channels + c0, channels, L);
    for (; i < count; ++i)
      for (int l = 0; l < L; ++l)
        out[i * channels + c0 + l] = src[(c0 + l) * ld + i];
  }
  for (; c0 < channels; ++c0)
    for (int64_t i = 0; i < count; ++i)
      out[i * channels + c0] = src[c0 * ld + i];
}

// Rows [r0, r1) of dy of item n, group g as [row][column][co] over the padded extent: element
// (r, c, co) is dy[co, r - ph, c - pw], 0 outside dy; `out` is the whole plane's buffer.
template <class T>
void dy_channels_last(const Plan& pl, const Padded& pd, const T* dy, int64_t n, int64_t g,
                      int64_t r0, int64_t r1, T* out) {
  std::fill(out + r0 * pd.w * pl.cog, out + r1 * pd.w * pl.cog, T(0));
  const T* src = dy + (n * pl.out_channels + g * pl.cog) * pl.out_hw;
  // Rows and columns of dy past the padded extent (an output padding) are read by no tap: the
  // columns end at ow_end, the rows at r1, which is at most pd.h.
  const int64_t oh_end = std::min(pl.out_h, r1 - pl.pad_h);
  const int64_t ow_end = std::min(pl.out_w, pd.w - pl.pad_w);
  for (int64_t oh = std::max<int64_t>(0, r0 - pl.pad_h); oh < oh_end; ++oh) {
    run_channels_last(src + oh * pl.out_w, pl.out_hw, pl.cog, ow_end,
                      out + (oh + pl.pad_h) * pd.w * pl.cog + pl.pad_w * pl.cog);
  }
}

// The positions a tile sweeps in one call: `items` items of `rows` rows of `len` positions,
// with the steps between them in the two channels-last buffers.
struct Sweep {
  int64_t i0, ih0, iw0;  // the first position: item of the round, row, column
  int64_t items, rows, len;
  int64_t x_item, x_row, d_item, d_row, d_pos;
};

// acc[v][j][lane] += sum over the sweep's positions, in order, of x[position][v*lanes + lane]
// d[position][j], acc starting from 0 when `first`, for the first V of the block's kVecs vectors;
// the others, lanes past the block's channels, are kept at zero (the slices' sums add them).
template <class T, int J, int V>
void wgrad_tile(const T* __restrict x, const T* __restrict d, const Sweep& sw, bool first,
                T* __restrict acc_mem) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  constexpr int64_t B = kBlock<T>;
  static_assert(V >= 1 && V <= kVecs);
  Vec acc[V][J];
  load_sums(acc, acc_mem, first);
  for (int64_t it = 0; it < sw.items; ++it) {
    for (int64_t r = 0; r < sw.rows; ++r) {
      const T* xp = x + it * sw.x_item + r * sw.x_row;
      const T* dp = d + it * sw.d_item + r * sw.d_row;
      for (int64_t p = 0; p < sw.len; ++p) {
        Vec xv[V];
        for (int v = 0; v < V; ++v)
          std::memcpy(&xv[v], xp + v * L, sizeof(Vec));
        for (int j = 0; j < J; ++j) {
          const T s = dp[j];
          for (int v = 0; v < V; ++v)
            acc[v][j] += s * xv[v];
        }
        xp += B;
        dp += sw.d_pos;
      }
    }
  }
  store_sums(acc, acc_mem);
  if constexpr (V < kVecs) {
    if (first) std::fill(acc_mem + V * J * L, acc_mem + kVecs * J * L, T(0));
  }
}

// `channels`: the tile's output channels; `lanes`: the block's input channels
// (with_block_vectors).
template <class T>
void wgrad_tile_of(int channels, int64_t lanes, const T* x, const T* d, const Sweep& sw, bool first,
                   T* acc_mem) {
  gemm::with_count<kTileChannels>(channels, [&]<int J>() {
    with_block_vectors<T>(lanes, [&]<int V>() { wgrad_tile<T, J, V>(x, d, sw, first, acc_mem); });
  });
}

// wgrad's register tiles of dw: per (g, block of kBlock input channels), kTileChannels output
// channels by one tap each, co block-major (neighbouring tiles read the same output channels of
// dy, whose cache lines then serve every tap); one slice's sums are part_elems elements.
struct WgradTiles {
  int64_t blocks, co_blocks, tiles, tile_elems, part_elems;
};

template <class T>
WgradTiles wgrad_tiles(const Plan& pl) {
  WgradTiles t{};
  t.blocks = ceil_div(pl.cig, kBlock<T>);
  t.co_blocks = ceil_div(pl.cog, int64_t{kTileChannels});
  t.tiles = t.co_blocks * pl.taps;
  t.tile_elems = kBlock<T> * kTileChannels;
  t.part_elems = pl.groups * t.blocks * t.tiles * t.tile_elems;
  return t;
}

// dw from the tiles' sums of `slices` slices (each [g, channel block][co block, tap][tile],
// added in slice order): dw[g*cig + c0 + v*L + lane, co0 + j, tap] = tile (co block, tap)'s
// sums[v][j][lane], written in dw's order (a channel's (co, tap) run is contiguous): written tap
// by tap, every store of a large dw would fall in a cache line of its own.
template <class T>
void store_tile_sums(const Plan& pl, const T* sums, int64_t slices, T* dw, int threads) {
  constexpr int64_t B = kBlock<T>;
  constexpr int L = gemm::kLanes<T>;
  const WgradTiles wt = wgrad_tiles<T>(pl);
  const Workspace<T> total(slices > 1 ? wt.part_elems : 0);
  if (slices > 1) sum_parts_in_order(sums, slices, wt.part_elems, total.data(), threads);
  const T* final_sums = slices > 1 ? total.data() : sums;
  parallel_for(threads, pl.groups * wt.blocks * wt.co_blocks, [&](int64_t t) {
    const int64_t gb = t / wt.co_blocks, g = gb / wt.blocks, c0 = gb % wt.blocks * B;
    const int64_t cob = t % wt.co_blocks, co0 = cob * kTileChannels;
    const int64_t channels = std::min(B, pl.cig - c0);
    const int64_t j_count = std::min<int64_t>(kTileChannels, pl.cog - co0);
    const T* cob_sums = final_sums + (gb * wt.tiles + cob * pl.taps) * wt.tile_elems;
    for (int64_t c = 0; c < channels; ++c) {
      const T* lane_sums = cob_sums + (c / L * j_count) * L + c % L;
      T* dst = dw + ((g * pl.cig + c0 + c) * pl.cog + co0) * pl.taps;
      for (int64_t j = 0; j < j_count; ++j)
        for (int64_t tap = 0; tap < pl.taps; ++tap)
          dst[j * pl.taps + tap] = lane_sums[tap * wt.tile_elems + j * L];
    }
  });
}

template <class T>
void direct_wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int64_t B = kBlock<T>;
  const Padded pd = padded_of(pl);
  // Every tile's sums (wt), kept across the rounds of items.
  const WgradTiles wt = wgrad_tiles<T>(pl);
  // Rounds of items whose channels-last x and dy are held at once.
  const int64_t x_item = pl.groups * wt.blocks * pl.in_hw * B;
  const int64_t d_item = pl.groups * pd.plane() * pl.cog;
  const int64_t per_round = std::clamp<int64_t>(
      kMaxPaddedBytes / std::max<int64_t>(1, (x_item + d_item) * static_cast<int64_t>(sizeof(T))),
      1, pl.batch);
  Workspace<T> xt(per_round * x_item);
  Workspace<T> dyt(per_round * d_item);
  // How a round's positions are cut into sweeps: segments of long rows, runs of rows, or runs
  // of small items, about kChunkPositions each.
  Sweep base{};
  base.x_item = x_item;
  base.x_row = pl.in_w * B;
  base.d_item = d_item;
  base.d_row = pl.stride_h * pd.w * pl.cog;
  base.d_pos = pl.stride_w * pl.cog;
  const int64_t seg = std::min(pl.in_w, kChunkPositions);
  const int64_t row_run =
      pl.in_w >= kChunkPositions ? 1 : std::clamp<int64_t>(kChunkPositions / pl.in_w, 1, pl.in_h);
  const int64_t item_run = row_run < pl.in_h ? 1 : std::max<int64_t>(1, kChunkPositions / pl.in_hw);
  // Tasks (g, channel block, group of tiles): at least twice the threads where the tiles allow.
  // Each task owns its tiles' elements of dw whole, so the cut cannot change a bit.
  const int64_t groups_of_tiles =
      std::clamp<int64_t>(ceil_div(int64_t{threads}, pl.groups * wt.blocks), 1, wt.tiles);
  // Where one round holds every item, the positions are also cut into slices, by the shape
  // only, each summed into sums of its own that are then added in slice order: every task reads
  // only its slice of x and dy, where without slices each of many threads would stream all of
  // them for a few tiles.
  const int64_t slices =
      per_round < pl.batch
          ? 1
          : std::clamp<int64_t>(
                pl.batch * pl.in_hw / kSlicePositions, 1,
                std::min<int64_t>(kMaxSlices,
                                  kMaxSliceBytes / (wt.part_elems * int64_t{sizeof(T)})));
  Workspace<T> sums(slices * wt.part_elems);
  for (int64_t first = 0; first < pl.batch; first += per_round) {
    const int64_t count = std::min(per_round, pl.batch - first);
    // The round's copies, in pieces of rows of about equal size, some twice the threads of
    // them: per (item, group) one piece of dy alone was most of the work of a batch-1 call
    // (every output channel's padded plane), its threads waiting. A copy changes no bit however
    // it is cut.
    const int64_t copy_elems = count * (x_item + d_item);
    const int64_t piece = std::max(kMinCopyPiece, copy_elems / (2 * int64_t{threads}));
    const int64_t x_rows = std::clamp<int64_t>(piece / (pl.in_w * B), 1, pl.in_h);
    const int64_t d_rows = std::clamp<int64_t>(piece / (pd.w * pl.cog), 1, pd.h);
    const int64_t x_pieces = ceil_div(pl.in_h, x_rows), d_pieces = ceil_div(pd.h, d_rows);
    const int64_t per_image = wt.blocks * x_pieces + d_pieces;  // pieces per (item, group)
    parallel_for(threads, count * pl.groups * per_image, [&](int64_t t) {
      const int64_t i = t / (pl.groups * per_image), g = t / per_image % pl.groups;
      const int64_t k = t % per_image;
      if (k < wt.blocks * x_pieces) {
        const int64_t cb = k / x_pieces, h0 = k % x_pieces * x_rows;
        x_channels_last(pl, x, first + i, g, cb, h0, std::min(pl.in_h, h0 + x_rows),
                        xt.data() + i * x_item + (g * wt.blocks + cb) * pl.in_hw * B);
      } else {
        const int64_t r0 = (k - wt.blocks * x_pieces) * d_rows;
        dy_channels_last(pl, pd, dy, first + i, g, r0, std::min(pd.h, r0 + d_rows),
                         dyt.data() + i * d_item + g * pd.plane() * pl.cog);
      }
    });
    // The round's sweeps, in order; they are run a group at a time, every task on the same
    // group, so that its stretch of x and dy is shared in cache rather than read once per task.
    std::vector<Sweep> sweeps;
    for (int64_t i0 = 0; i0 < count; i0 += item_run) {
      for (int64_t ih0 = 0; ih0 < pl.in_h; ih0 += row_run) {
        for (int64_t iw0 = 0; iw0 < pl.in_w; iw0 += seg) {
          Sweep sw = base;
          sw.i0 = i0;
          sw.ih0 = ih0;
          sw.iw0 = iw0;
          sw.items = std::min(item_run, count - i0);
          sw.rows = std::min(row_run, pl.in_h - ih0);
          sw.len = std::min(seg, pl.in_w - iw0);
          sweeps.push_back(sw);
        }
      }
    }
    const int64_t n_sweeps = static_cast<int64_t>(sweeps.size());
    const auto run_sweeps = [&](int64_t slice, int64_t gb, int64_t k0, int64_t k1, int64_t s0,
                                int64_t s1, int64_t slice_begin) {
      const int64_t g = gb / wt.blocks, cb = gb % wt.blocks;
      const int64_t lanes = std::min(B, pl.cig - cb * B);
      T* tile_sums = sums.data() + slice * wt.part_elems + gb * wt.tiles * wt.tile_elems;
      const T* x_gb = xt.data() + (g * wt.blocks + cb) * pl.in_hw * B;
      const T* d_g = dyt.data() + g * pd.plane() * pl.cog;
      for (int64_t si = s0; si < s1; ++si) {
        const Sweep& sw = sweeps[static_cast<size_t>(si)];
        const bool first_sweep = first == 0 && si == slice_begin;
        const T* x0 = x_gb + sw.i0 * x_item + (sw.ih0 * pl.in_w + sw.iw0) * B;
        for (int64_t k = k0; k < k1; ++k) {
          const int64_t tap = k % pl.taps, kh = tap / pl.kernel_w, kw = tap % pl.kernel_w;
          const int64_t co0 = k / pl.taps * kTileChannels;
          const int channels = static_cast<int>(std::min<int64_t>(kTileChannels, pl.cog - co0));
          const int64_t r = sw.ih0 * pl.stride_h + kh * pl.dil_h;
          const int64_t c = sw.iw0 * pl.stride_w + kw * pl.dil_w;
          const T* d0 = d_g + sw.i0 * d_item + (r * pd.w + c) * pl.cog + co0;
          wgrad_tile_of(channels, lanes, x0, d0, sw, first_sweep, tile_sums + k * wt.tile_elems);
        }
      }
    };
    if (slices > 1) {
      const int64_t parts = std::clamp<int64_t>(
          ceil_div(int64_t{threads}, slices * pl.groups * wt.blocks), 1, wt.tiles);
      parallel_for(threads, slices * pl.groups * wt.blocks * parts, [&](int64_t t) {
        const int64_t slice = t / (pl.groups * wt.blocks * parts);
        const int64_t gb = t / parts % (pl.groups * wt.blocks), part = t % parts;
        const int64_t s0 = n_sweeps * slice / slices, s1 = n_sweeps * (slice + 1) / slices;
        run_sweeps(slice, gb, wt.tiles * part / parts, wt.tiles * (part + 1) / parts, s0, s1, s0);
      });
      continue;
    }
    for (size_t s0 = 0; s0 < sweeps.size();) {
      size_t s1 = s0;
      for (int64_t positions = 0; s1 < sweeps.size() && positions < kRoundPositions; ++s1)
        positions += sweeps[s1].items * sweeps[s1].rows * sweeps[s1].len;
      parallel_for(threads, pl.groups * wt.blocks * groups_of_tiles, [&](int64_t t) {
        const int64_t gb = t / groups_of_tiles, part = t % groups_of_tiles;
        run_sweeps(0, gb, wt.tiles * part / groups_of_tiles,
                   wt.tiles * (part + 1) / groups_of_tiles, static_cast<int64_t>(s0),
                   static_cast<int64_t>(s1), 0);
      });
      s0 = s1;
    }
  }
  store_tile_sums(pl, sums.data(), slices, dw, threads);
}

// wgrad of 1-D calls. The 2-D kernel above makes channels-last copies of a round of items once,
// shared by every task; on a 1-D call of one or a few long sequences its tasks then read a copy
// another core had just written (HiFi-GAN V3's x4 upsampler: 0.63x the GEMM path at 2 threads).
// Here the positions, (item, position) in order, are cut into slices by the shape; a task (slice,
// group and channel block, run of tiles) walks its slice in segments (segment_positions) of one
// item, copies its channel block of x and the window of dy the segment's taps read into buffers
// of its own, and runs its tiles over the segment. Every tile of a slice is one chain over its
// positions in order (a segment's end stores its sums, the next reloads them, exactly); the
// slices' sums are added in slice order.
constexpr int64_t kSlicePositions1d = 1024;
constexpr int64_t kMaxSlices1d = 64;

// Positions per segment. A tile reads one row of the window a position (rows `stride` apart,
// each in a cache line of its own for a wide window), and the tiles of one output-channel block
// read, over their taps, every row of the window: segments short enough that those rows
// (kSegmentRows lines) stay in L1 from one tap to the next, and the whole window of `width`
// channels in a quarter of the L2 budget for the next block. Longer segments re-read each line
// from L2 or L3 once per tap; shorter ones would repeat the halo's copy and the tiles' loads and
// stores of their sums too often (kMinSegment).
constexpr int64_t kSegmentRows = 256;
constexpr int64_t kSegmentWindowBytes = kColsBudgetBytes / 4;
constexpr int64_t kMinSegment = 16;

int64_t segment_positions(int64_t stride, int64_t width, int64_t elem_bytes) {
  const int64_t in_l1 = kSegmentRows / stride;
  const int64_t in_l2 = kSegmentWindowBytes / std::max<int64_t>(1, stride * width * elem_bytes);
  return std::clamp<int64_t>(std::min(in_l1, in_l2), kMinSegment, kChunkPositions);
}

// A task of the 1-D direct wgrad: (slice, group, block group, part), where a block group is a
// run of input-channel blocks and a part a run of tiles. Each segment's dy window is copied
// channels-last once per task and read by every block of its group; each block's x, once per
// task and block. With a task per block, as before, dy's window was copied once per block:
// where the output channels times the stride outnumber the input channels it was most of the
// copying (EnCodec's x5: 640 elements of dy a position, copied 8 times, against 256 of x).
// The tasks the threads need beyond the shape's slices come from the two cuts in the proportion
// that copies least: a position's x is copied once per part (cig x parts in all), its dy window
// once per block group (block groups x cog x stride). Neither cut changes a bit: every tile's
// sums over a slice are one chain in position order, whatever task runs them.
struct Wgrad1dCut {
  int64_t block_groups, group_blocks, parts;
};

Wgrad1dCut wgrad_1d_cut(const Plan& pl, const WgradTiles& wt, int64_t slices, int threads) {
  const int64_t wanted = ceil_div(2 * int64_t{threads}, slices * pl.groups);
  Wgrad1dCut best{};
  int128 best_copies = 0;
  for (int64_t groups = 1; groups <= wt.blocks; ++groups) {
    const int64_t per_group = ceil_div(wt.blocks, groups);
    const int64_t count = ceil_div(wt.blocks, per_group);  // block groups that hold blocks
    const int64_t parts = std::clamp<int64_t>(ceil_div(wanted, count), 1, wt.tiles);
    const int128 copies = int128{pl.cig} * parts + int128{count} * pl.cog * pl.stride_w;
    if (best.parts == 0 || copies < best_copies)
      best = {count, per_group, parts}, best_copies = copies;
  }
  return best;
}

template <class T>
void direct_wgrad_1d_typed(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int64_t B = kBlock<T>;
  const WgradTiles wt = wgrad_tiles<T>(pl);
  const int64_t positions = pl.batch * pl.in_w;
  const int64_t slices = std::clamp<int64_t>(
      positions / kSlicePositions1d, 1,
      std::min<int64_t>(kMaxSlices1d, kMaxSliceBytes / (wt.part_elems * int64_t{sizeof(T)})));
  const Wgrad1dCut cut = wgrad_1d_cut(pl, wt, slices, threads);
  const int64_t owners = slices * pl.groups * cut.block_groups;
  const int64_t halo = (pl.kernel_w - 1) * pl.dil_w;  // a segment's window: len * sw + halo
  const int64_t window_elems = ((kChunkPositions - 1) * pl.stride_w + halo + 1) * pl.cog;
  Workspace<T> sums(slices * wt.part_elems);
  parallel_for(
      threads, owners * cut.parts, [&] { return Workspace<T>(kChunkPositions * B + window_elems); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t part = t % cut.parts, bg = t / cut.parts % cut.block_groups;
        const int64_t g = t / (cut.parts * cut.block_groups) % pl.groups;
        const int64_t slice = t / (cut.parts * cut.block_groups * pl.groups);
        const int64_t b0 = bg * cut.group_blocks, b1 = std::min(wt.blocks, b0 + cut.group_blocks);
        const int64_t k0 = wt.tiles * part / cut.parts, k1 = wt.tiles * (part + 1) / cut.parts;
        if (k0 == k1 || b0 >= b1) return;
        // The output channels the run's tiles read (tiles are co block-major): only those of dy
        // are copied.
        const int64_t co_lo = k0 / pl.taps * kTileChannels;
        const int64_t co_hi = std::min(pl.cog, ((k1 - 1) / pl.taps + 1) * kTileChannels);
        const int64_t width = co_hi - co_lo;
        const int64_t segment = segment_positions(pl.stride_w, width, sizeof(T));
        T* xs = ws.data();
        T* ds = ws.data() + kChunkPositions * B;
        Sweep sw{};
        sw.items = 1;
        sw.rows = 1;
        sw.d_pos = pl.stride_w * width;
        bool first = true;
        for (int64_t q = positions * slice / slices, q1 = positions * (slice + 1) / slices;
             q < q1;) {
          const int64_t n = q / pl.in_w, p0 = q % pl.in_w;
          sw.len = std::min({segment, pl.in_w - p0, q1 - q});
          for (int64_t cb = b0; cb < b1; ++cb) {
            const int64_t c0 = cb * B, lanes = std::min(B, pl.cig - c0);
            rows_to_lanes(x + (n * pl.in_channels + g * pl.cig + c0) * pl.in_w + p0, pl.in_w, lanes,
                          sw.len, xs, B);
            // dy's window [o0, o0 + count), zero outside dy, once per segment, after the first
            // block's x as it was when each block copied both: copied before x, one-block
            // wgrads whose code was otherwise the same (S1, S4) ran 0.73x-0.82x.
            if (cb == b0) {
              const int64_t o0 = p0 * pl.stride_w - pl.pad_w;
              const int64_t count = (sw.len - 1) * pl.stride_w + halo + 1;
              const int64_t v0 = std::clamp<int64_t>(-o0, 0, count);
              const int64_t v1 = std::clamp<int64_t>(pl.out_w - o0, v0, count);
              std::fill_n(ds, v0 * width, T(0));
              run_channels_last(
                  dy + (n * pl.out_channels + g * pl.cog + co_lo) * pl.out_w + o0 + v0, pl.out_w,
                  width, v1 - v0, ds + v0 * width);
              std::fill(ds + v1 * width, ds + count * width, T(0));
            }
            T* tile_sums = sums.data() + slice * wt.part_elems +
                           (g * wt.blocks + cb) * wt.tiles * wt.tile_elems;
            for (int64_t k = k0; k < k1; ++k) {
              const int64_t tap = k % pl.taps, co0 = k / pl.taps * kTileChannels;
              const int channels = static_cast<int>(std::min<int64_t>(kTileChannels, pl.cog - co0));
              wgrad_tile_of(channels, lanes, xs, ds + tap * pl.dil_w * width + (co0 - co_lo), sw,
                            first, tile_sums + k * wt.tile_elems);
            }
          }
          first = false;
          q += sw.len;
        }
      });
  store_tile_sums(pl, sums.data(), slices, dw, threads);
}

// The stride phases of one dimension that its taps reach: a dilation sharing a factor with the
// stride puts the taps on fewer of them (k3 s2 d2: all three on one), each then read by more
// taps.
int64_t phases_reached(int64_t kernel, int64_t stride, int64_t dil) {
  return std::min(kernel, stride / std::gcd(stride, dil));
}

// Whether `channels` fill the tiles' lanes: lanes past them compute zeros, and at most a quarter
// of the tile may.
bool fills_lanes(int64_t channels, int64_t elem_bytes) {
  return 4 * channels >= 3 * gemm::round_up(channels, block_of(elem_bytes));
}

// dgrad's and wgrad's lanes are the input channels: they fill the tiles, or, at AVX-512, they
// are one block filled to a quarter or more (8 to 23 channels in float32) and the rows (co x
// taps) are at least `sparse_min_rows`. With few input channels the GEMM path does little work per
// element of its column buffer, and with many rows its column blocks are narrow (the buffer's
// budget over rows), each one packing the weight again: there the kernel's idle lanes cost less.
// Measured at AVX-512 on 8-16 input channels against 24-384 output channels (docs/performance.md):
// dgrad 1.0x-3.3x from 240 rows, 0.8x at 144; wgrad 1.2x-2.2x from 768 rows, 0.8x-1.4x at 512-576.
bool channels_fill(const Plan& pl, int64_t elem_bytes, int64_t sparse_min_rows) {
  if (pl.in_h < 1 || pl.in_w < 1) return false;
  if (fills_lanes(pl.cig, elem_bytes)) return true;
  const int64_t block = block_of(elem_bytes);
  return !kShortTile && pl.cig < block && 4 * pl.cig >= block && pl.rows >= sparse_min_rows;
}
constexpr int64_t kDgradSparseMinRows = 192;
// A 1-D layer with at most two taps per stride phase (k <= 2s): the GEMM path's column buffer
// is then one or two copies of dy, cheap beside the kernel's windows.
bool cols_few_copies_of_dy(const Plan& pl) {
  return pl.in_h == 1 && int128{pl.taps} <= int128{2} * pl.stride_w;
}
// With more than half a vector of input channels (9 to 23 in float32 at AVX-512: one vector
// filled past half, with_block_vectors, or two past one and a half), dgrad takes the kernel from
// kDirectMinSteps rows: against the GEMM path, whose column buffer then holds co x taps copies of
// dy for only 2 x cig FLOPs an element, 1.14x-2.8x on 64 to 144 rows, 1-D and 2-D, strides 1 and
// 2, dilated too, on this machine and the 16-core host at 1 to 16 threads (docs/performance.md,
// thirty-sixth session). At 8 channels the GEMM has a tile of its own (8 rows) and won on 64 and
// 96 rows (0.81x-0.83x): half a vector and below keep 192, as do 1-D layers with at most two taps
// per stride phase, whose column buffer is a copy or two of dy (8 groups of 16 -> 8 k8 s4 over
// 3000 steps: 0.74x-0.83x on the host; 20 -> 8 k8 s4: 0.8x here).
int64_t dgrad_sparse_min_rows(const Plan& pl, int64_t elem_bytes) {
  return 2 * pl.cig * elem_bytes > gemm::kVecBytes && !cols_few_copies_of_dy(pl)
             ? kDirectMinSteps
             : kDgradSparseMinRows;
}
constexpr int64_t kStreamedDyBytes = int64_t{1} << 20;  // direct_dgrad_suits
constexpr int64_t kWgradSparseMinRows = 768;
// A whole vector of input channels or more (16 to 23 in float32 at AVX-512) takes the direct wgrad
// from kDirectMinSteps rows where its tasks, a tile of kTileChannels output channels and one tap
// each, are at least kWgradRelaxedMinTiles: 1.4x-3.6x the GEMM path at 1 thread and 1.0x-1.7x at
// 16 on the 16-core host (16 -> 16 k3, 16 -> 24 k4 s2, 20 -> 32 k3, 16 -> 48 k7 1-D, 16 -> 64 k3;
// docs/performance.md, thirty-sixth session). With fewer tiles the GEMM path spread over 16
// threads better (16 -> 12 k3, 9 tiles: 2.7x at 1 thread, 0.65x at 16), and with 12 channels too
// (12 -> 24 k4 s2, 32 tiles: 0.73x at 16). Not 1-D layers with at most two taps per stride
// phase, whose column buffer is one or two copies of dy (12 -> 16 k4 s2 on 800 positions: 0.7x),
// nor layers whose taps leave stride phases unread, whose elements the kernel's channels-last
// copy of dy still moves (12 -> 8 k2x8 s4 d1x2, 4 of 16 phases: 0.8x).
constexpr int64_t kWgradRelaxedMinTiles = 16;
int64_t wgrad_sparse_min_rows(const Plan& pl, int64_t elem_bytes) {
  const bool every_phase = phases_reached(pl.kernel_h, pl.stride_h, pl.dil_h) == pl.stride_h &&
                           phases_reached(pl.kernel_w, pl.stride_w, pl.dil_w) == pl.stride_w;
  const bool tiles =
      int128{ceil_div(pl.cog, int64_t{kTileChannels})} * pl.taps >= kWgradRelaxedMinTiles;
  const bool relaxed =
      pl.cig * elem_bytes >= gemm::kVecBytes && tiles && every_phase && !cols_few_copies_of_dy(pl);
  return relaxed ? kDirectMinSteps : kWgradSparseMinRows;
}

// The padded extent of one item's dy, in elements per channel, computed in 128 bits: the
// geometry accepts strides and dilations whose padded extent would overflow.
int128 padded_elems(const Plan& pl) {
  const int128 h = int128{pl.in_h - 1} * pl.stride_h + int128{pl.kernel_h - 1} * pl.dil_h + 1;
  const int128 w = int128{pl.in_w - 1} * pl.stride_w + int128{pl.kernel_w - 1} * pl.dil_w + 1;
  return h * w;
}

}  // namespace

bool direct_dgrad_suits(const Plan& pl, int64_t elem_bytes) {
  // Fewer positions per tile than this leave too few accumulators to hide the FMAs' latency.
  const bool row = pl.in_w >= 4;
  const int128 positions = int128{pl.batch} * pl.in_hw;
  const bool reuse = positions >= kDirectMinPositions ||
                     (positions >= kDirectDgradMinPositions &&
                      !few_columns_wide_fit(pl, pl.in_channels * pl.rows * elem_bytes));
  // A tile's sums go through memory once (the transposed store into dx): the tile needs enough
  // steps of (co, kh, kw) to amortize that.
  const bool steps = pl.rows >= kDirectMinSteps;
  // Where im2col + GEMM measured as fast or faster: 1-D calls with W stride 2, undilated, with
  // at most 2 taps per stride phase (k = 2s and below: the vocoders' k4 s2). There the column
  // buffer is at most two copies of dy, and im2col has a loop of its own for that stride. 2-D
  // layers of that kind (U-Net's k2 s2) take the kernel: about as fast on one core, and on many
  // its runs of tiles cut a small image into more tasks than the GEMM path's column blocks.
  // (In 128 bits: the geometry accepts strides whose product overflows.)
  const bool im2col_cheap = pl.in_h == 1 && pl.stride_w == 2 && pl.dil_w == 1 &&
                            !mul_le(int128{2} * pl.stride_h, pl.stride_w, int128{pl.taps} - 1);
  if (!(channels_fill(pl, elem_bytes, dgrad_sparse_min_rows(pl, elem_bytes)) && row && reuse &&
        steps && !im2col_cheap))
    return false;
  if (kShortTile && stride_is_constant(pl.stride_w)) return false;
  // A 1x1 layer at stride 1 whose column blocks are single items, on planes of dy past
  // kStreamedDyBytes an item and group: the GEMM path reads dy in place and packs a panel of it
  // once per block, where every step of the kernel's tiles reads a row of another plane of dy,
  // out_hw apart: as many streams as output channels, which the prefetchers do not follow once
  // they leave L2 (with more taps a plane's window serves each of them from L1). Measured at
  // AVX-512 (docs/performance.md): 1.0x-2.9x at 1 thread, 0.97x-1.8x at 2 to 16, on 12 to 512
  // input channels over 1 to 12 MiB of dy; on 512 KiB (256 -> 512 at 16 x 16) the kernel won at
  // 1 thread, 1.37x. Blocks of several items (small images) go through im2col and keep the
  // kernel, 0.8x-0.95x on the GEMM path.
  if (cols_are_dy(pl) && int128{pl.cog} * pl.out_hw * elem_bytes >= kStreamedDyBytes &&
      col_blocks(pl, pl.rows, elem_bytes, /*for_tasks=*/true).items_per_block == 1)
    return false;
  // A task's window of padded dy (at most a sweep's channels of whole padded planes), and the
  // packed weight, within bounds.
  return int128{sweep_channels(pl.taps)} * padded_elems(pl) * elem_bytes <= kMaxPaddedBytes &&
         fits(pl.rows * pl.groups, gemm::round_up(pl.cig, block_of(elem_bytes)), elem_bytes,
              kMaxWholeColsBytes);
}

bool direct_forward_suits(const Plan& pl, int64_t elem_bytes) {
  if (pl.stride_h != 1 || pl.stride_w != 1) return false;
  if (kShortTile) return false;  // stride 1: im2col's constant-stride copy (kShortTile above)
  // A padding past the kernel's reach (a cropped output) would start the gather's windows at a
  // negative padding; those rare shapes keep the column buffer.
  // (In 128 bits, as below: the geometry accepts dilations whose reach would overflow.)
  const int128 reach_h = int128{pl.kernel_h - 1} * pl.dil_h;
  const int128 reach_w = int128{pl.kernel_w - 1} * pl.dil_w;
  if (pl.pad_h > reach_h || pl.pad_w > reach_w) return false;
  // The forward's lanes are its output channels: they fill the tiles, or one vector of them
  // three quarters or more (12 to 16 in float32 at AVX-512, a tile of one vector:
  // with_block_vectors) over at most kOneVectorForwardMaxChannels input channels. There the
  // kernel measured 1.1x-2.6x the GEMM path on 1-D and 2-D layers (8 to 64 input channels, k3 to
  // k9, dilated too; docs/performance.md, thirty-sixth session); with 96 input channels and more
  // the GEMM's deeper products won on the 16-core host (0.66x-0.92x), and at 9 and 20 output
  // channels (one vector 9/16 full, two 20/32) the kernel lost (0.67x, 0.81x).
  const bool one_vector = pl.cog * elem_bytes <= gemm::kVecBytes &&
                          4 * pl.cog * elem_bytes >= 3 * gemm::kVecBytes &&
                          pl.cig <= kOneVectorForwardMaxChannels;
  // From kDeepForwardChannels input channels on, the GEMM's deep products keep pace with the
  // kernel's full tiles, and a tile's idle lanes decide: with 24 output channels (32 lanes, a
  // quarter idle) the GEMM path measured 1.06x-1.4x faster at 64 to 192 input channels (k4 and
  // k5 on 12 x 12 to 20 x 20), 1.7x in the 16-thread model; with 40 of 48 lanes the two tied, and
  // with 56 of 64 or 88 of 96 the kernel won at 64 (1.07x-1.16x) and lost at 128 (56 of 64:
  // 0.91x). So there it needs seven eighths of the lanes (docs/performance.md, thirty-eighth
  // session).
  const int64_t block = block_of(elem_bytes);
  const bool idle_lanes =
      pl.cig >= kDeepForwardChannels && 8 * pl.cog < 7 * gemm::round_up(pl.cog, block);
  const bool lanes = (fills_lanes(pl.cog, elem_bytes) && !idle_lanes) || one_vector;
  const bool row = pl.out_w >= 4;
  const bool reuse = int128{pl.batch} * pl.out_hw >= kDirectMinPositions;
  // Rows and columns of y past x's reach (the kernel's overhang where the padding is less than
  // its reach) are sums over zero padding: at most a quarter of the work may be, or two thirds
  // with at most kSparseForwardMaxChannels input channels. There the GEMM path does 2 x cig
  // multiply-adds per element of its column buffer and is bound by moving the buffer: on small
  // images without padding (k3-k7) 8-32 input channels measured 1.1x-3.2x faster on the kernel
  // at up to 3x the work, 64 0.9x, 256 0.6x (docs/performance.md).
  const int64_t overhang = pl.cig <= kSparseForwardMaxChannels ? 12 : 5;  // quarters of x's size
  const bool dense = 4 * int128{pl.out_hw} <= overhang * int128{pl.in_hw};
  const bool steps = int128{pl.cig} * pl.taps >= kDirectMinSteps;
  const bool few_channels =
      pl.cig * elem_bytes <= gemm::kVecBytes && pl.cog * elem_bytes <= gemm::kVecBytes;
  const bool taps = pl.taps >= (few_channels ? kForwardMinTapsFewChannels : kForwardMinTaps);
  if (!(lanes && row && reuse && dense && steps && taps)) return false;
  const int128 window = (pl.out_h + reach_h) * (pl.out_w + reach_w);  // x's padded extent
  return int128{sweep_channels(pl.taps)} * window * elem_bytes <= kMaxPaddedBytes &&
         fits(pl.cig * pl.taps * pl.groups, gemm::round_up(pl.cog, block_of(elem_bytes)),
              elem_bytes, kMaxWholeColsBytes);
}

void direct_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                    int threads) {
  direct_forward_typed(pl, x, w, b, y, threads);
}
void direct_forward(const Plan& pl, const double* x, const double* w, const double* b, double* y,
                    int threads) {
  direct_forward_typed(pl, x, w, b, y, threads);
}

void direct_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  direct_dgrad_typed(pl, dy, w, dx, threads);
}
void direct_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads) {
  direct_dgrad_typed(pl, dy, w, dx, threads);
}

bool direct_wgrad_suits(const Plan& pl, int64_t elem_bytes) {
  // Fewer output channels than this leave too few accumulators to hide the FMAs' latency.
  const bool out_channels = pl.cog >= kWgradMinOutChannels;
  // Every element of dw goes through memory a few times (its tile's sums between sweeps, the
  // final store): it needs enough positions to amortize that.
  const bool reuse = int128{pl.batch} * pl.in_hw >= kWgradMinPositions;
  // With few taps per stride phase the column buffer is a copy or two of dy, cheap, and im2col
  // has loops of its own for W strides 1 and 2. The kernel measured faster from
  // kWgradMinPhaseTaps taps per phase the taps reach, or with a W stride above 2, except on 2-D
  // layers with fewer taps per phase and phases the taps never reach (k3 s4, k2 s3): the
  // kernel's channels-last copy of dy, zeroed and written whole, then holds elements no tap
  // reads and bound its time, while im2col copies only the taps' elements (docs/performance.md:
  // 1.06x-2.2x at 1 thread, 1.4x-2.5x at 2 to 16). Where the taps reach every phase (k3 s3,
  // k4 s4, k5 s5) the kernel kept up at 1 thread or won (up to 3x at k5 s5 on the 16-core host).
  const int128 phases = int128{phases_reached(pl.kernel_h, pl.stride_h, pl.dil_h)} *
                        phases_reached(pl.kernel_w, pl.stride_w, pl.dil_w);
  const bool unreached_phases =
      pl.in_h > 1 && phases < int128{pl.stride_h} * pl.stride_w && pl.taps < 2 * phases;
  const bool gain =
      pl.taps >= kWgradMinPhaseTaps * phases || (pl.stride_w > 2 && !unreached_phases);
  if (!(channels_fill(pl, elem_bytes, wgrad_sparse_min_rows(pl, elem_bytes)) && gain &&
        out_channels && reuse))
    return false;
  // Below AVX-512 a 1-D layer with at most 2 taps per stride phase (k <= 2s: the vocoders' and
  // EnCodec's upsamplers) over a long reduction measured faster on im2col + the GEMM, on an
  // Intel and an AMD machine (docs/performance.md, "CPU backend against PyTorch"). Over fewer
  // positions the GEMM path still wins with 256 or more input channels, each element of the column
  // buffer then serving that many multiply-adds: the kernel's window of dy is wide there (many
  // output channels at a large stride), its segments short, and it reloads its sums often. With
  // fewer channels at a stride im2col copies with a run-time step (3, 6), the copy cost more than
  // the kernel did. Grouped layers keep the kernel: with 8 groups of 16 channels it measured
  // faster, each group's product being too small to pay for the GEMM's packing.
  if (kShortTile && cols_few_copies_of_dy(pl) && pl.groups == 1 &&
      (int128{pl.batch} * pl.in_w >= kWgradGemmPositions || pl.cig >= kWgradGemmChannels))
    return false;
  if (pl.in_h == 1) {
    // The 1-D kernel's buffer of dy: the window a segment's taps read (in 128 bits: the geometry
    // accepts strides and dilations whose window would overflow).
    const int128 window =
        (int128{kChunkPositions - 1} * pl.stride_w + int128{pl.kernel_w - 1} * pl.dil_w + 1) *
        pl.cog;
    return window * elem_bytes <= kMaxPaddedBytes;
  }
  // One item's channels-last x and dy within bounds.
  const int128 item =
      int128{pl.groups} *
      (padded_elems(pl) * pl.cog + int128{pl.in_hw} * gemm::round_up(pl.cig, block_of(elem_bytes)));
  return item * elem_bytes <= kMaxPaddedBytes;
}

void direct_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads) {
  if (pl.in_h == 1) return direct_wgrad_1d_typed(pl, x, dy, dw, threads);
  direct_wgrad_typed(pl, x, dy, dw, threads);
}
void direct_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads) {
  if (pl.in_h == 1) return direct_wgrad_1d_typed(pl, x, dy, dw, threads);
  direct_wgrad_typed(pl, x, dy, dw, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
