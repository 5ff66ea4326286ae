// Direct ConvTranspose dgrad on the CPU, with no column buffer:
//   dx[ci, ih, iw] = sum over co, kh, kw of w[ci, co, kh, kw] dy[co, oh, ow],
//   (oh, ow) = (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw)
// The register tile is a block of kBlock input channels (kVecs vectors, one channel a lane) by up
// to kMaxPositions consecutive positions of one row of dx. Each step of its loop over (co, kh,
// kw) loads kVecs vectors of the weight (packed so that a block's channels are contiguous) and
// broadcasts one element of dy per position: kVecs x positions FMAs for kVecs + positions loads,
// where im2col + GEMM first writes and then reads kh x kw copies of dy. dy is first copied into
// zero-padded planes so that no tap needs a bounds check.
//
// Every element of dx is one chain of FMAs over (co, kh, kw) in that order, whatever the tile or
// task it falls in, so the results do not depend on the thread count (docs/design.md,
// "Determinism").
#include <algorithm>
#include <cstring>

#include "cpu/conv_transpose_cols.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

constexpr int kVecs = 2;
// Positions per tile: kVecs x kMaxPositions accumulators, 24 of AVX-512's 32 registers, 12 of
// the 16 below it (the GEMM's register tile has the same budget, gemm.h).
constexpr int kMaxPositions = gemm::kRows;
template <class T>
constexpr int64_t kBlock = kVecs* gemm::kLanes<T>;  // input channels per tile
// Output channels per sweep over a task's tiles (below).
constexpr int64_t kChannelsPerSweep = 16;
// A task's run of tiles: a few, so that tasks are many but not tiny.
constexpr int64_t kTaskTiles = 16;
// Padded dy of a round of items is held at once up to this size.
constexpr int64_t kMaxPaddedBytes = int64_t{32} << 20;
// The weight is packed once per call: that pays when every packed element serves at least this
// many positions (batch x input positions).
constexpr int64_t kDirectMinPositions = 256;
constexpr int64_t kDirectMinSteps = 64;

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

template <class T>
void pad_plane(const Plan& pl, const Padded& pd, const T* src, T* dst) {
  const int64_t c_begin = std::min(pd.w, pl.pad_w);  // first column inside
  const int64_t c_end = std::clamp<int64_t>(pl.pad_w + pl.out_w, c_begin, pd.w);  // past the last
  for (int64_t r = 0; r < pd.h; ++r) {
    T* row = dst + r * pd.w;
    const int64_t oh = r - pl.pad_h;
    if (oh < 0 || oh >= pl.out_h) {
      std::fill_n(row, pd.w, T(0));
      continue;
    }
    std::fill_n(row, c_begin, T(0));
    std::copy_n(src + oh * pl.out_w + (c_begin - pl.pad_w), c_end - c_begin, row + c_begin);
    std::fill(row + c_end, row + pd.w, T(0));
  }
}

// The weight of group g, channels [cb*kBlock, +kBlock) packed as [co][kh][kw][channel], channels
// past cig zero.
template <class T>
void pack_weight(const Plan& pl, const T* w, int64_t g, int64_t cb, T* out) {
  constexpr int64_t B = kBlock<T>;
  constexpr int L = gemm::kLanes<T>;
  const int64_t c0 = cb * B, channels = std::min(B, pl.cig - c0);
  const T* src = w + (g * pl.cig + c0) * pl.rows;  // channel c0's rows = (co, kh, kw)
  // L x L register transposes: a strided scalar copy of a large weight costs as much as the
  // pass's arithmetic on a few hundred positions.
  for (int64_t v = 0; v < kVecs; ++v) {
    const int count = static_cast<int>(std::clamp<int64_t>(channels - v * L, 0, L));
    int64_t r = 0;
    for (; r + L <= pl.rows; r += L)
      gemm::transpose_tile(src + v * L * pl.rows + r, pl.rows, count, out + r * B + v * L, B, L);
    for (; r < pl.rows; ++r)
      for (int l = 0; l < L; ++l)
        out[r * B + v * L + l] = l < count ? src[(v * L + l) * pl.rows + r] : T(0);
  }
}

// acc[v][p][lane] += sum over co in [co0, co1), then kh, kw, of wp[co, kh, kw][v*lanes + lane]
// d[co, kh, kw, p], with d[co, kh, kw, p] = dy_pad[co*plane + kh*row_step + kw*dil_w + p*stride_w]
// and acc starting from 0 when `first`. SW: stride_w when it is a compile-time constant (the
// loads then have fixed offsets), else 0.
template <class T, int P, int SW>
void dgrad_tile(const T* __restrict wp, const T* __restrict d, const Plan& pl, int64_t co0,
                int64_t co1, int64_t plane, int64_t row_step, bool first, T* __restrict acc_mem) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  const int64_t sw = SW != 0 ? SW : pl.stride_w;
  Vec acc[kVecs][P];
  for (int v = 0; v < kVecs; ++v) {
    for (int p = 0; p < P; ++p) {
      if (first) {
        acc[v][p] = Vec{};
      } else {
        std::memcpy(&acc[v][p], acc_mem + (v * P + p) * L, sizeof(Vec));
      }
    }
  }
  wp += co0 * pl.taps * kVecs * L;
  for (int64_t co = co0; co < co1; ++co) {
    for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
      const T* d_row = d + co * plane + kh * row_step;
      for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
        Vec wv[kVecs];
        for (int v = 0; v < kVecs; ++v)
          std::memcpy(&wv[v], wp + v * L, sizeof(Vec));
        wp += kVecs * L;
        const T* dk = d_row + kw * pl.dil_w;
        for (int p = 0; p < P; ++p) {
          const T s = dk[p * sw];
          for (int v = 0; v < kVecs; ++v)
            acc[v][p] += s * wv[v];
        }
      }
    }
  }
  for (int v = 0; v < kVecs; ++v)
    for (int p = 0; p < P; ++p)
      std::memcpy(acc_mem + (v * P + p) * L, &acc[v][p], sizeof(Vec));
}

// with_stride plus stride 8 (the x8 upsamplers of vocoders): the tile's loads then have
// fixed offsets.
template <class F>
void with_tile_stride(int64_t stride, F&& f) {
  if (stride == 8) return f.template operator()<8>();
  with_stride(stride, f);
}

template <class T, int SW>
void dgrad_tile_of(int positions, const T* wp, const T* d, const Plan& pl, int64_t co0, int64_t co1,
                   int64_t plane, int64_t row_step, bool first, T* acc_mem) {
  // Positions 1 .. kMaxPositions, each its own instance (the tile is a register array).
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((positions == I + 1
          ? dgrad_tile<T, I + 1, SW>(wp, d, pl, co0, co1, plane, row_step, first, acc_mem)
          : void()),
     ...);
  }
  (std::make_integer_sequence<int, kMaxPositions>{});
}

template <class T>
void direct_dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int64_t B = kBlock<T>;
  constexpr int L = gemm::kLanes<T>;
  const Padded pd = padded_of(pl);
  const int64_t blocks = ceil_div(pl.cig, B);
  const int64_t packed_elems = pl.rows * B;
  Workspace<T> packed(pl.groups * blocks * packed_elems);
  parallel_for(threads, pl.groups * blocks, [&](int64_t t) {
    pack_weight(pl, w, t / blocks, t % blocks, packed.data() + t * packed_elems);
  });
  const int64_t item_elems = pl.out_channels * pd.plane();
  const int64_t per_round = std::clamp<int64_t>(
      kMaxPaddedBytes / std::max<int64_t>(1, item_elems * static_cast<int64_t>(sizeof(T))), 1,
      pl.batch);
  Workspace<T> padded(per_round * item_elems);
  // An item's tiles, row-major: each row in tiles of near-equal length (14 positions are 7 + 7,
  // not 12 + 2). A task takes a run of up to kTaskTiles consecutive tiles, across rows on small
  // images; runs are shortened while the tasks are fewer than twice the threads. The cut cannot
  // change a bit: every element is one chain whatever run its tile is in.
  const int64_t row_tiles = ceil_div(pl.in_w, kMaxPositions);
  const int64_t item_tiles = pl.in_h * row_tiles;
  const auto tile_span = [&](int64_t k, int64_t& ih, int64_t& p0, int64_t& p1) {
    ih = k / row_tiles;
    const int64_t j = k % row_tiles;
    p0 = pl.in_w * j / row_tiles;
    p1 = pl.in_w * (j + 1) / row_tiles;
  };
  const int64_t row_step = pl.dil_h * pd.w;
  for (int64_t first = 0; first < pl.batch; first += per_round) {
    const int64_t count = std::min(per_round, pl.batch - first);
    parallel_for(threads, count * pl.out_channels, [&](int64_t t) {
      pad_plane(pl, pd, dy + (first * pl.out_channels + t) * pl.out_hw,
                padded.data() + t * pd.plane());
    });
    const int64_t all_tiles = pl.groups * blocks * count * item_tiles;
    const int64_t run = std::clamp<int64_t>(ceil_div(all_tiles, 2 * int64_t{threads}), 1,
                                            std::min(kTaskTiles, item_tiles));
    const int64_t runs = ceil_div(item_tiles, run);
    // Tasks (g, channel block) outer, so that neighbouring tasks share a packed weight block.
    const int64_t per_block = count * runs;
    parallel_for(
        threads, pl.groups * blocks * per_block,
        [] { return Workspace<T>(kTaskTiles * B * kMaxPositions); },
        [&](Workspace<T>& accs, int64_t t) {
          const int64_t gb = t / per_block, g = gb / blocks, cb = gb % blocks;
          const int64_t i = t % per_block / runs, n = first + i;
          const int64_t k0 = t % runs * run, k1 = std::min(item_tiles, k0 + run);
          const T* wp = packed.data() + gb * packed_elems;
          const T* d_group = padded.data() + (i * pl.out_channels + g * pl.cog) * pd.plane();
          // Output channels in blocks, each swept over every tile of the run: the tiles then
          // read dy as kChannelsPerSweep sequential streams, and a block's weight stays in L1.
          // The tiles' sums wait in `accs` between blocks, so that each element is still one
          // chain over (co, kh, kw) in order.
          for (int64_t co0 = 0; co0 < pl.cog; co0 += kChannelsPerSweep) {
            const int64_t co1 = std::min(pl.cog, co0 + kChannelsPerSweep);
            for (int64_t k = k0; k < k1; ++k) {
              int64_t ih, p0, p1;
              tile_span(k, ih, p0, p1);
              const T* d = d_group + ih * pl.stride_h * pd.w + p0 * pl.stride_w;
              with_tile_stride(pl.stride_w, [&]<int64_t S>() {
                dgrad_tile_of<T, static_cast<int>(S)>(static_cast<int>(p1 - p0), wp, d, pl, co0,
                                                      co1, pd.plane(), row_step, co0 == 0,
                                                      accs.data() + (k - k0) * B * kMaxPositions);
              });
            }
          }
          // A tile's sums [v][p][lane] are channel c0 + v*L + lane at position p0 + p: whole
          // vectors of channels go to dx through register transposes.
          const int64_t c0 = cb * B, channels = std::min(B, pl.cig - c0);
          T* dx_block = dx + (n * pl.in_channels + g * pl.cig + c0) * pl.in_hw;
          for (int64_t k = k0; k < k1; ++k) {
            int64_t ih, p0, p1;
            tile_span(k, ih, p0, p1);
            const int positions = static_cast<int>(p1 - p0);
            const T* sums = accs.data() + (k - k0) * B * kMaxPositions;
            for (int64_t v = 0; v < kVecs; ++v) {
              const T* src = sums + v * positions * L;
              T* dst = dx_block + v * L * pl.in_hw + ih * pl.in_w + p0;
              if ((v + 1) * L <= channels) {
                for (int q = 0; q < positions; q += L) {  // transpose_tile takes L positions
                  const int width = std::min(L, positions - q);
                  gemm::transpose_tile(src + q * L, L, width, dst + q, pl.in_hw, width);
                }
                continue;
              }
              for (int64_t c = v * L; c < channels; ++c)
                for (int p = 0; p < positions; ++p)
                  dst[(c - v * L) * pl.in_hw + p] = src[p * L + c - v * L];
            }
          }
        });
  }
}

}  // namespace

bool direct_dgrad_suits(const Plan& pl, int64_t elem_bytes) {
  const int64_t block = elem_bytes == 4 ? kBlock<float> : kBlock<double>;
  const int64_t cig_padded = gemm::round_up(pl.cig, block);
  // Lanes past cig compute zeros: at most a quarter of the tile wasted.
  const bool channels = 4 * pl.cig >= 3 * cig_padded;
  // Fewer positions per tile than this leave too few accumulators to hide the FMAs' latency.
  const bool row = pl.in_w >= 4;
  const bool reuse = int128{pl.batch} * pl.in_hw >= kDirectMinPositions;
  // A tile's sums go through memory once (the transposed store into dx): the tile needs enough
  // steps of (co, kh, kw) to amortize that.
  const bool steps = pl.rows >= kDirectMinSteps;
  // Where im2col + GEMM is the better path: the column buffer holds taps / (sh x sw) copies of
  // dy, cheap when that is small, and im2col has loops of its own for W strides 1 and 2. The
  // direct kernel measured faster with 4 or more taps per stride phase, or a W stride above 2.
  const bool gain = pl.taps >= 4 * pl.stride_h * pl.stride_w || pl.stride_w > 2;
  if (!(channels && row && reuse && steps && gain && pl.in_h >= 1)) return false;
  // The padded planes of one item, and the packed weight, within bounds (computed in 128 bits:
  // the geometry accepts strides and dilations whose padded extent would overflow).
  const int128 h = int128{pl.in_h - 1} * pl.stride_h + int128{pl.kernel_h - 1} * pl.dil_h + 1;
  const int128 w = int128{pl.in_w - 1} * pl.stride_w + int128{pl.kernel_w - 1} * pl.dil_w + 1;
  return int128{pl.out_channels} * h * w * elem_bytes <= kMaxPaddedBytes &&
         fits(pl.rows * pl.groups, cig_padded, elem_bytes, kMaxWholeColsBytes);
}

void direct_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  direct_dgrad_typed(pl, dy, w, dx, threads);
}
void direct_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads) {
  direct_dgrad_typed(pl, dy, w, dx, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
