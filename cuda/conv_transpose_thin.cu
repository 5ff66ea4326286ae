// The thin-output kernels (planner row "thin", plan in conv_thin.h): float32 forward, dgrad and
// wgrad of layers with at most four output channels per group, the RGB or mono layer that ends a
// decoder. Weight (Ci, Cog, kH, kW); group g owns input channels g*Cig.. and output channels
// g*Cog...
//
// Such a layer moves far more bytes on its wide side (x, dx) than it multiplies, so the kernels
// touch each wide element about once and keep everything narrow in registers:
//
//   forward: output oh satisfies oh + pH = ih*sH + t for tap offset t = kh*dH. Write
//            oh + pH = c*sH + r (cell c, slot r < sH): the outputs of cell c read inputs
//            ih = c - m (m < TH) at offsets t = r + m*sH. So a thread owning cell (c_h, c_w)
//            reads TH x TW inputs per input channel and adds each into all its sH*sW*Cog
//            outputs, with the weights rearranged per (m_h, m_w) as the slots' row (zero where
//            t is past the kernel or between dilated taps). A warp's 32 cells are consecutive
//            in w, so its loads of x are consecutive too.
//   dgrad:   dx[n, ci, ih, iw] = sum_{co, kh, kw} dy[n, co, ih*sH - pH + kh*dH,
//            iw*sW - pW + kw*dW] w[ci, co, kh, kw]. A thread holds the dy values of its position
//            (the window, Cog*kH*kW of them) in registers and walks the input channels: one
//            dot product with that channel's weights (a shared-memory broadcast) and one
//            coalesced store of dx per channel.
//   wgrad:   dw[ci, j] = sum over (n, ih, iw) of x[n, ci, ih, iw] times window slot j of that
//            position: a GEMM (C_in/groups x window) whose K is the positions, on 4 x 8 register
//            tiles, its operands staged in shared memory by cp.async.
//
// The input channels may be split across the grid's y (shape-only, conv_thin.h): dgrad's splits
// write disjoint channels; the forward's write partial outputs that a second kernel adds in split
// order, with the bias; wgrad's chunks of positions write partial weights added in chunk order
// (in float64). Every sum has a fixed order and every output is written once, so the bits
// do not depend on the run. Both float32 precisions compute in full float32.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "cuda/chunk_sum.cuh"
#include "cuda/conv_params.h"
#include "cuda/conv_thin.h"
#include "cuda/conv_transpose_gemm.cuh"
#include "cuda/conv_transpose_gemm.h"
#include "cuda/conv_transpose_thin.h"
#include "cuda/cuda_util.h"
#include "cuda/kernel_stats.h"
#include "cuda/kernels.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

// The sizes both kernels read, beside Plane32.
struct ThinDims {
  int64_t N, Ci, Co, Cig, Cog;
  int64_t items, split_len;
  int64_t split_stride;  // forward: elements between splits' partial outputs (0: one split)
  // forward: inputs per cell and axis, cells per axis, the first cell, the slots in use.
  int th, tw, cells_h, cells_w, cell0_h, cell0_w, used;
};

// out[0..K) = p[0..K) from shared memory, in 16-byte loads where K allows (the weights of a
// channel are a warp-wide broadcast).
template <int K>
__device__ inline void load_row(const float* p, float (&out)[K]) {
  if constexpr (K % 4 == 0) {
#pragma unroll
    for (int i = 0; i < K / 4; ++i) {
      const float4 v = reinterpret_cast<const float4*>(p)[i];
      out[4 * i] = v.x, out[4 * i + 1] = v.y, out[4 * i + 2] = v.z, out[4 * i + 3] = v.w;
    }
  } else if constexpr (K == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    out[0] = v.x, out[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < K; ++i)
      out[i] = p[i];
  }
}

// ---- forward ---------------------------------------------------------------------------------

// Block (x: tiles of cells, looped; y: split * G + group). out is y (one split) or the split's
// slice of the partials, [split][N][Co][Ho][Wo]. One cell a thread: the kernel is bound by the
// latency of its x loads, so it keeps the registers few and the warps many (two cells a thread,
// at half the warps, measured 1.05x-1.25x slower on the suite's RGB and mono layers, GPU run 83).
// kTaps = 4 when TH * TW is (2-D, k = 2s): a channel's four inputs are loaded together, 1.02x-
// 1.06x faster on DCGAN's and pix2pix's RGB layers; the same for two inputs (1-D, k = 2s) was
// 0.96x on Conv-TasNet's (GPU run 85). 0: the inputs one at a time, each over all channels.
template <int kBlock, int kTaps>
__global__ void __launch_bounds__(kThinThreads)
    thin_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w,
                    const float* __restrict__ bias, float* __restrict__ out, Plane32 q,
                    ThinDims d) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* ws = reinterpret_cast<float*>(smem_raw);
  const int64_t G = d.Ci / d.Cig;
  const int64_t g = blockIdx.y % G, split = blockIdx.y / G;
  const int64_t ci0 = split * d.split_len;
  const int cn = static_cast<int>(min_i64(d.split_len, d.Cig - ci0));
  const int row = d.th * d.tw * kBlock;  // one channel's weights
  // ws[(ci * TH + mh) * TW + mw][slot], slot = (rh * sW + rw) * Cog + co: the weight of tap
  // offset (rh + mh*sH, rw + mw*sW), zero past the kernel, between dilated taps and past `used`.
  for (int e = static_cast<int>(threadIdx.x); e < cn * row; e += kThinThreads) {
    const int slot = e % kBlock, rest = e / kBlock;
    const int mw = rest % d.tw, mh = (rest / d.tw) % d.th, ci = rest / (d.tw * d.th);
    float v = 0.f;
    if (slot < d.used) {
      const int co = slot % static_cast<int>(d.Cog), phase = slot / static_cast<int>(d.Cog);
      const int th = phase / q.sW + mh * q.sH, tw = phase % q.sW + mw * q.sW;
      if (th % q.dH == 0 && tw % q.dW == 0 && th / q.dH < q.kH && tw / q.dW < q.kW) {
        v = w[((g * d.Cig + ci0 + ci) * d.Cog + co) * q.kH * q.kW + (th / q.dH) * q.kW + tw / q.dW];
      }
    }
    ws[e] = v;
  }
  __syncthreads();
  const int64_t in_plane = int64_t{q.Hi} * q.Wi, out_plane = int64_t{q.Ho} * q.Wo;
  const int64_t cells = int64_t{d.cells_h} * d.cells_w;
  for (int64_t item = blockIdx.x * int64_t{kThinThreads} + threadIdx.x; item < d.items;
       item += int64_t{gridDim.x} * kThinThreads) {
    const int64_t n = item / cells;
    const int rem = static_cast<int>(item - n * cells);
    const int ch = rem / d.cells_w + d.cell0_h, cw = rem % d.cells_w + d.cell0_w;
    float acc[kBlock];
#pragma unroll
    for (int j = 0; j < kBlock; ++j)
      acc[j] = 0.f;
    const float* xn = x + (n * d.Ci + g * d.Cig + ci0) * in_plane;
    if constexpr (kTaps > 0) {
      // The inputs' offsets in a channel's plane, -1 outside x (read as zero).
      int off[kTaps];
#pragma unroll
      for (int t = 0; t < kTaps; ++t) {
        const int ih = ch - t / d.tw, iw = cw - t % d.tw;
        off[t] = ih >= 0 && ih < q.Hi && iw >= 0 && iw < q.Wi ? ih * q.Wi + iw : -1;
      }
      const float* xp = xn;
      const float* wp = ws;
#pragma unroll 2
      for (int ci = 0; ci < cn; ++ci) {
        float xv[kTaps];
#pragma unroll
        for (int t = 0; t < kTaps; ++t)
          xv[t] = off[t] >= 0 ? __ldg(xp + off[t]) : 0.f;
        xp += in_plane;
#pragma unroll
        for (int t = 0; t < kTaps; ++t) {
          float wv[kBlock];
          load_row<kBlock>(wp + t * kBlock, wv);
#pragma unroll
          for (int j = 0; j < kBlock; ++j)
            acc[j] = fmaf(xv[t], wv[j], acc[j]);
        }
        wp += row;
      }
    }
    for (int mh = 0; kTaps == 0 && mh < d.th; ++mh) {
      const int ih = ch - mh;
      if (ih < 0 || ih >= q.Hi) continue;
      for (int mw = 0; mw < d.tw; ++mw) {
        const int iw = cw - mw;
        if (iw < 0 || iw >= q.Wi) continue;
        const float* xp = xn + int64_t{ih} * q.Wi + iw;
        const float* wp = ws + (mh * d.tw + mw) * kBlock;
#pragma unroll 4
        for (int ci = 0; ci < cn; ++ci) {
          const float xv = __ldg(xp);
          xp += in_plane;
          float wv[kBlock];
          load_row<kBlock>(wp, wv);
          wp += row;
#pragma unroll
          for (int j = 0; j < kBlock; ++j)
            acc[j] = fmaf(xv, wv[j], acc[j]);
        }
      }
    }
    float* on = out + split * d.split_stride + (n * d.Co + g * d.Cog) * out_plane;
#pragma unroll
    for (int j = 0; j < kBlock; ++j) {
      if (j >= d.used) break;
      const int co = j % static_cast<int>(d.Cog), phase = j / static_cast<int>(d.Cog);
      const int oh = ch * q.sH + phase / q.sW - q.pH, ow = cw * q.sW + phase % q.sW - q.pW;
      if (oh < 0 || oh >= q.Ho || ow < 0 || ow >= q.Wo) continue;
      const float b = bias != nullptr ? bias[g * d.Cog + co] : 0.f;
      on[co * out_plane + int64_t{oh} * q.Wo + ow] = acc[j] + b;
    }
  }
}

// y[e] = bias + sum_{s < splits} partials[s * elements + e], in split order.
__global__ void thin_sum_splits_kernel(const float* __restrict__ partials,
                                       const float* __restrict__ bias, float* __restrict__ y,
                                       int64_t elements, int64_t splits, int64_t plane,
                                       int64_t channels) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    float s = partials[e];
    for (int64_t k = 1; k < splits; ++k)
      s += partials[k * elements + e];
    if (bias != nullptr) s += bias[(e / plane) % channels];
    y[e] = s;
  }
}

// ---- dgrad -----------------------------------------------------------------------------------

// Where window slot j reads dy, from a position's corner (ih*sH - pH, iw*sW - pW): row and column
// offsets and the offset of its channel's plane plus both. A slot past `used` never lands.
struct ThinTap {
  int dh, dw;
  long long off;
};

// Window slot j = (co, kh, kw) of a call whose windows hold `used` slots.
__device__ inline ThinTap thin_tap(int j, int used, const Plane32& q, int64_t out_plane) {
  ThinTap t{-(1 << 29), -(1 << 29), 0};
  if (j < used) {
    const int taps_n = q.kH * q.kW, co = j / taps_n, tap = j % taps_n;
    t.dh = (tap / q.kW) * q.dH;
    t.dw = (tap % q.kW) * q.dW;
    t.off = co * out_plane + int64_t{t.dh} * q.Wo + t.dw;
  }
  return t;
}

// Block (x: tiles of positions, looped; y: split * G + group). A warp's lanes own positions
// base + lane + 32 * p for p < kItems.
template <int kBlock, int kItems>
__global__ void __launch_bounds__(kThinThreads, 2)
    thin_dgrad_kernel(const float* __restrict__ dy, const float* __restrict__ w,
                      float* __restrict__ dx, Plane32 q, ThinDims d) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* ws = reinterpret_cast<float*>(smem_raw);
  __shared__ ThinTap taps[kBlock];
  const int64_t G = d.Ci / d.Cig;
  const int64_t g = blockIdx.y % G, split = blockIdx.y / G;
  const int64_t ci0 = split * d.split_len;
  const int cn = static_cast<int>(min_i64(d.split_len, d.Cig - ci0));
  const int64_t in_plane = int64_t{q.Hi} * q.Wi, out_plane = int64_t{q.Ho} * q.Wo;
  // ws[ci][j] = w[g*Cig + ci0 + ci][j]: a channel's weights are contiguous in (Cog, kH, kW).
  for (int e = static_cast<int>(threadIdx.x); e < cn * kBlock; e += kThinThreads) {
    const int j = e % kBlock, ci = e / kBlock;
    ws[e] = j < d.used ? w[(g * d.Cig + ci0 + ci) * d.used + j] : 0.f;
  }
  if (threadIdx.x < kBlock) {
    const int j = static_cast<int>(threadIdx.x);
    taps[j] = thin_tap(j, d.used, q, out_plane);
  }
  __syncthreads();
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  constexpr int64_t kTile = int64_t{kThinThreads} * kItems;
  // One position's sum is kBlock FMAs; a thread with a single position splits it in two chains
  // (added at the end, in a fixed order) so that the FMA latency overlaps.
  constexpr int kChains = kItems == 1 ? 2 : 1;
  for (int64_t tile = blockIdx.x * kTile; tile < d.items; tile += int64_t{gridDim.x} * kTile) {
    const int64_t base = tile + warp * 32 * kItems + lane;
    bool ok[kItems];
    float* dxp[kItems];
    float win[kItems][kBlock];
#pragma unroll
    for (int p = 0; p < kItems; ++p) {
      const int64_t item = base + 32 * p;
      ok[p] = item < d.items;
      const int64_t n = ok[p] ? item / in_plane : 0;
      const int pos = static_cast<int>(ok[p] ? item - n * in_plane : 0);
      const int ih = pos / q.Wi, iw = pos % q.Wi;
      const int bh = ih * q.sH - q.pH, bw = iw * q.sW - q.pW;
      const float* dyn = dy + (n * d.Co + g * d.Cog) * out_plane + int64_t{bh} * q.Wo + bw;
#pragma unroll
      for (int j = 0; j < kBlock; ++j) {
        const ThinTap t = taps[j];
        const int oh = bh + t.dh, ow = bw + t.dw;
        win[p][j] =
            ok[p] && oh >= 0 && oh < q.Ho && ow >= 0 && ow < q.Wo ? __ldg(dyn + t.off) : 0.f;
      }
      dxp[p] = dx + (n * d.Ci + g * d.Cig + ci0) * in_plane + pos;
    }
#pragma unroll 2
    for (int ci = 0; ci < cn; ++ci) {
      float a[kItems][kChains];
#pragma unroll
      for (int p = 0; p < kItems; ++p)
#pragma unroll
        for (int k = 0; k < kChains; ++k)
          a[p][k] = 0.f;
      const float* wr = ws + ci * kBlock;
#pragma unroll
      for (int j = 0; j < kBlock; j += 4) {
        const float4 w4 = *reinterpret_cast<const float4*>(wr + j);
        const int chain = kChains == 2 ? (j / 4) % 2 : 0;
#pragma unroll
        for (int p = 0; p < kItems; ++p) {
          a[p][chain] = fmaf(win[p][j], w4.x, a[p][chain]);
          a[p][chain] = fmaf(win[p][j + 1], w4.y, a[p][chain]);
          a[p][chain] = fmaf(win[p][j + 2], w4.z, a[p][chain]);
          a[p][chain] = fmaf(win[p][j + 3], w4.w, a[p][chain]);
        }
      }
#pragma unroll
      for (int p = 0; p < kItems; ++p) {
        float s = a[p][0];
#pragma unroll
        for (int k = 1; k < kChains; ++k)
          s += a[p][k];
        if (ok[p]) dxp[p][ci * in_plane] = s;
      }
    }
  }
}

// ---- wgrad -----------------------------------------------------------------------------------

// Where position p of a wgrad tile lives: x at channel g*Cig of its sample (-1: past the chunk),
// dy at its window's corner, and the corner.
struct ThinPosition {
  long long x_off, dy_off;
  int bh, bw;
};

// Block (x: chunk of positions, y: channel block * G + group), 32 x kBlock / 8 threads: warp c
// owns window slots 8c.., lane r the channels r, r + 32, ... of the block's 32 x kRows, so a
// thread sums a kRows x 8 tile of dw over the chunk. Tiles of kThinWgradTile positions are copied
// into shared memory by cp.async (zero where a tap or a position falls outside) while the block
// multiplies the previous tile: x as [channel][position] (rows padded to an odd length, so the
// lanes' four rows hit distinct banks), the windows as [position][slot] (a warp's reads are one
// broadcast). out is dw (one chunk) or the chunk's partials, [chunk][Ci][used].
template <int kBlock, int kRows>
__global__ void __launch_bounds__(32 * kBlock / 8, 4)
    thin_wgrad_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                      float* __restrict__ out, Plane32 q, ThinDims d, int64_t chunk_len) {
  constexpr int kThreads = 32 * kBlock / 8, kP = kThinWgradTile, kC = 32 * kRows;
  __shared__ float xs[2][kC][kP + 1];
  __shared__ __align__(16) float ws[2][kP][kBlock];
  __shared__ ThinTap taps[kBlock];
  __shared__ ThinPosition where[2][kP];
  const int64_t G = d.Ci / d.Cig;
  const int64_t g = blockIdx.y % G, ci0 = (blockIdx.y / G) * kC;
  const int cn = static_cast<int>(min_i64(kC, d.Cig - ci0));
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, col = tid / 32;
  const int64_t in_plane = int64_t{q.Hi} * q.Wi, out_plane = int64_t{q.Ho} * q.Wo;
  for (int j = tid; j < kBlock; j += kThreads)
    taps[j] = thin_tap(j, d.used, q, out_plane);
  const int64_t begin = blockIdx.x * chunk_len, end = min_i64(d.items, begin + chunk_len);
  const float* xg = x + (g * d.Cig + ci0) * in_plane;
  // where[buf] for the tile at p0 (threads under kP).
  const auto locate = [&](int64_t p0, int buf) {
    for (int p = tid; p < kP; p += kThreads) {
      ThinPosition w{-1, 0, 0, 0};
      const int64_t item = p0 + p;
      if (item < end) {
        const int64_t n = item / in_plane;
        const int pos = static_cast<int>(item - n * in_plane);
        const int ih = pos / q.Wi, iw = pos % q.Wi;
        w.bh = ih * q.sH - q.pH;
        w.bw = iw * q.sW - q.pW;
        w.x_off = n * d.Ci * in_plane + pos;
        w.dy_off = (n * d.Co + g * d.Cog) * out_plane + int64_t{w.bh} * q.Wo + w.bw;
      }
      where[buf][p] = w;
    }
  };
  // The copies of tile `buf` (where[buf] is visible): x of the block's channels, then windows.
  const auto copy = [&](int buf) {
    for (int e = tid; e < kC * kP; e += kThreads) {
      const int p = e % kP, c = e / kP;
      const long long off = where[buf][p].x_off;
      const bool ok = off >= 0 && c < cn;
      cp_async4(&xs[buf][c][p], ok ? xg + c * in_plane + off : x, ok);
    }
    for (int e = tid; e < kP * kBlock; e += kThreads) {
      const int j = e % kBlock, p = e / kBlock;
      const ThinPosition w = where[buf][p];
      const ThinTap t = taps[j];
      const int oh = w.bh + t.dh, ow = w.bw + t.dw;
      const bool ok = w.x_off >= 0 && oh >= 0 && oh < q.Ho && ow >= 0 && ow < q.Wo;
      cp_async4(&ws[buf][p][j], ok ? dy + w.dy_off + t.off : dy, ok);
    }
    cp_async_commit();
  };
  float acc[kRows][8];
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int k = 0; k < 8; ++k)
      acc[i][k] = 0.f;
  const int64_t tiles = (end - begin + kP - 1) / kP;
  locate(begin, 0);
  __syncthreads();  // taps and where[0]
  copy(0);
  for (int64_t t = 0; t < tiles; ++t) {
    const int buf = static_cast<int>(t & 1);
    if (t + 1 < tiles) locate(begin + (t + 1) * kP, buf ^ 1);
    __syncthreads();  // where[buf ^ 1] ready; every thread done with tile t - 1's buffers
    if (t + 1 < tiles) {
      copy(buf ^ 1);
      cp_async_wait<1>();  // this thread's copies of tile t
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of tile t
#pragma unroll 2
    for (int p = 0; p < kP; ++p) {
      float xv[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i)
        xv[i] = xs[buf][lane + 32 * i][p];
      const float4 w0 = *reinterpret_cast<const float4*>(&ws[buf][p][8 * col]);
      const float4 w1 = *reinterpret_cast<const float4*>(&ws[buf][p][8 * col + 4]);
      const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int k = 0; k < 8; ++k)
          acc[i][k] = fmaf(xv[i], wv[k], acc[i][k]);
    }
  }
  float* o = out + blockIdx.x * (d.Ci * int64_t{d.used});
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int c = lane + 32 * i;
    if (c >= cn) continue;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = 8 * col + k;
      if (j < d.used) o[(g * d.Cig + ci0 + c) * d.used + j] = acc[i][k];
    }
  }
}

// Calls f(std::integral_constant<int, B>{}) for the plan's register block B, one of `Blocks`.
template <const auto& Blocks, int I = 0, class F>
void with_block(int block, F&& f) {
  constexpr int n = static_cast<int>(sizeof(Blocks) / sizeof(Blocks[0]));
  if constexpr (I < n) {
    if (block == Blocks[I]) {
      f(std::integral_constant<int, Blocks[I]>{});
      return;
    }
    with_block<Blocks, I + 1>(block, f);
  } else {
    TGRAD_FAIL("CUDA conv_transpose (thin): no kernel for a register block of ", block);
  }
}

}  // namespace

void conv_thin_run(CachingAllocator& alloc, ConvPass pass, const ThinPlan& plan,
                   const ConvGeometry& g, const ConvOperands& t) {
  const Tensor &a = t.a, &b = t.b;
  const Tensor* bias = t.bias;
  Tensor& out = t.out;
  static constexpr const char* kNames[3] = {"CUDA conv_transpose_forward (thin)",
                                            "CUDA conv_transpose_dgrad (thin)",
                                            "CUDA conv_transpose_wgrad (thin)"};
  const char* fn = kNames[static_cast<size_t>(pass)];
  const ConvParams p = pass == ConvPass::forward ? make_conv_params(fn, g, a, b, out)
                       : pass == ConvPass::dgrad ? make_conv_params(fn, g, out, b, a)
                                                 : make_conv_params(fn, g, a, out, b);
  TGRAD_CHECK(out.dtype() == kFloat32, fn, ": dtype ", out.dtype(), " is not float32");
  if (out.numel() == 0) return;
  DeviceGuard guard(out.device());
  const Plane32 q = plane32(p);
  ThinDims d{p.N,
             p.Ci,
             p.Co,
             p.Cig,
             p.Cog,
             plan.items,
             plan.split_len,
             plan.splits > 1 ? out.numel() : 0,
             static_cast<int>(plan.th),
             static_cast<int>(plan.tw),
             static_cast<int>(plan.cells_h),
             static_cast<int>(plan.cells_w),
             static_cast<int>(plan.cell0_h),
             static_cast<int>(plan.cell0_w),
             plan.used};
  const dim3 grid(static_cast<unsigned>(plan.grid_x), static_cast<unsigned>(plan.grid_y));
  const auto smem = static_cast<size_t>(plan.smem_bytes);
  // The forward's channel splits and wgrad's chunks write partials, added in order by a second
  // kernel; they live until this scope ends (the stream orders their reuse after the sum).
  const int64_t elements = out.numel();
  std::shared_ptr<void> storage;
  float* dst = out.data_ptr<float>();
  if (pass != ConvPass::dgrad && plan.splits > 1) {
    storage = alloc.allocate(plan.splits * elements * int64_t{sizeof(float)}, out.device().index());
    dst = static_cast<float*>(storage.get());
  }
  if (pass == ConvPass::forward) {
    const float* bias_p = bias != nullptr ? bias->data_ptr<float>() : nullptr;
    with_block<kThinFwdBlocks>(plan.block, [&](auto blk) {
      constexpr int kBlock = decltype(blk)::value;
      const auto launch = [&](auto taps) {
        thin_fwd_kernel<kBlock, decltype(taps)::value>
            <<<grid, kThinThreads, smem>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                           plan.splits > 1 ? nullptr : bias_p, dst, q, d);
      };
      if (plan.th * plan.tw == 4) {
        launch(std::integral_constant<int, 4>{});
      } else {
        launch(std::integral_constant<int, 0>{});
      }
      TGRAD_CUDA_CHECK_LAUNCH("thin_fwd_kernel");
    });
    if (plan.splits > 1) {
      thin_sum_splits_kernel<<<grid_for(elements), kThreads>>>(
          dst, bias_p, out.data_ptr<float>(), elements, plan.splits, p.Ho * p.Wo, p.Co);
      TGRAD_CUDA_CHECK_LAUNCH("thin_sum_splits_kernel");
    }
  } else if (pass == ConvPass::wgrad) {
    with_block<kThinWgradBlocks>(plan.block, [&](auto blk) {
      constexpr int kBlock = decltype(blk)::value;
      if (thin_wgrad_channels(p.Cig) == kThinWgradMinChannels) {
        thin_wgrad_kernel<kBlock, 2><<<grid, 32 * kBlock / 8>>>(
            a.data_ptr<float>(), b.data_ptr<float>(), dst, q, d, plan.split_len);
      } else {
        thin_wgrad_kernel<kBlock, 4><<<grid, 32 * kBlock / 8>>>(
            a.data_ptr<float>(), b.data_ptr<float>(), dst, q, d, plan.split_len);
      }
      TGRAD_CUDA_CHECK_LAUNCH("thin_wgrad_kernel");
    });
    if (plan.splits > 1) {
      sum_chunks_in_order<float>
          <<<grid_for(elements), kThreads>>>(dst, out.data_ptr<float>(), elements, plan.splits);
      TGRAD_CUDA_CHECK_LAUNCH("sum_chunks_in_order");
    }
  } else {
    with_block<kThinDgradBlocks>(plan.block, [&](auto blk) {
      constexpr int kBlock = decltype(blk)::value;
      thin_dgrad_kernel<kBlock, thin_dgrad_items(kBlock)><<<grid, kThinThreads, smem>>>(
          a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), q, d);
      TGRAD_CUDA_CHECK_LAUNCH("thin_dgrad_kernel");
    });
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t conv_thin_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tgrad::cuda
