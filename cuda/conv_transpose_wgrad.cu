// Transposed-convolution weight and bias gradients.
//   dw[ci, co, kh, kw] = sum_{n, ih, iw} x[n, ci, ih, iw] * dy[n, g*Cog+co, ih*sH - pH + kh*dH,
//                                                          iw*sW - pW + kw*dW],  g = ci / Cig
// The planner (cuda/conv_plan.cpp) chooses between the two kernels below, batch-wgmma
// (conv_transpose_wgrad_wgmma.cu, whose split partials are summed here) and the operand paths.
// float32, groups == 1: a split-K GEMM on TF32 tensor cores (3xTF32 for "highest"), M = C_in,
// N = C_out, K = positions; one CTA covers every kw tap of one kh from one staged dy window,
// converted to TF32 once per segment into fragment-ordered buffers, and each split's partial
// tile is summed in order by sum_splits_kernel (deterministic).
// Every other case runs the general kernel below: each (weight tile, chunk of positions) block
// strides over its chunk and meets in a fixed shared-memory tree (float64), then stage 2 sums
// each element's chunks in order. The bias gradient is reduction.cu's deterministic sum of dy.
#include <cuda_runtime.h>

#include "cuda/conv_caps.h"
#include "cuda/conv_params.h"
#include "cuda/conv_plan.h"
#include "cuda/conv_transpose_batch_igemm.cuh"
#include "cuda/conv_transpose_gemm.h"
#include "cuda/cuda_util.h"
#include "cuda/kernels.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

namespace {

constexpr int kTileCo = 4;  // the planner's wgrad fma chunking assumes this tile (conv_plan.cpp)

// Writes out[e * chunks + c] for the tile's weight elements e (out = dw when chunks == 1).
template <class T, class Out>
__global__ void conv_transpose_wgrad_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                            Out* __restrict__ out, ConvParams p, int64_t chunks,
                                            int64_t chunk_len) {
  __shared__ double partial[kTileCo][kThreads];
  const int64_t co_tiles = ceil_div(p.Cog, kTileCo);
  const int64_t tiles = p.Ci * co_tiles * p.kH * p.kW;
  const int64_t r_total = p.N * p.Hi * p.Wi;
  const int64_t y_channel = p.Ho * p.Wo;
  for (int64_t blk = blockIdx.x; blk < tiles * chunks; blk += gridDim.x) {
    // Neighbouring blocks: neighbouring tiles of one chunk, so x's chunk is shared through L2.
    const int64_t c = blk / tiles;
    int64_t t = blk % tiles;
    const int64_t kw = t % p.kW;
    t /= p.kW;
    const int64_t kh = t % p.kH;
    t /= p.kH;
    const int64_t co0 = (t % co_tiles) * kTileCo;
    const int64_t ci = t / co_tiles;
    const int64_t g = ci / p.Cig;
    const int64_t n_co = min_i64(kTileCo, p.Cog - co0);

    double acc[kTileCo] = {};
    const int64_t r_end = min_i64(r_total, (c + 1) * chunk_len);
    int64_t r = c * chunk_len + threadIdx.x;
    // (n, ih, iw) of r, advanced incrementally: divisions only when a row wraps.
    int64_t iw = r % p.Wi, ih = (r / p.Wi) % p.Hi, n = r / (p.Wi * p.Hi);
    for (; r < r_end; r += blockDim.x) {
      const int64_t oh = ih * p.sH - p.pH + kh * p.dH;
      const int64_t ow = iw * p.sW - p.pW + kw * p.dW;
      if (oh >= 0 && oh < p.Ho && ow >= 0 && ow < p.Wo) {
        const double xv = static_cast<double>(x[(n * p.Ci + ci) * (p.Hi * p.Wi) + ih * p.Wi + iw]);
        const T* dyp = dy + ((n * p.Co + g * p.Cog + co0) * p.Ho + oh) * p.Wo + ow;
#pragma unroll
        for (int u = 0; u < kTileCo; ++u) {
          if (u < n_co) acc[u] += xv * static_cast<double>(dyp[u * y_channel]);
        }
      }
      iw += blockDim.x;
      if (iw >= p.Wi) {
        ih += iw / p.Wi;
        iw %= p.Wi;
        if (ih >= p.Hi) {
          n += ih / p.Hi;
          ih %= p.Hi;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kTileCo; ++u)
      partial[u][threadIdx.x] = acc[u];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) {
#pragma unroll
        for (int u = 0; u < kTileCo; ++u)
          partial[u][threadIdx.x] += partial[u][threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x < n_co) {
      const int64_t e = (((ci * p.Cog + co0 + threadIdx.x) * p.kH + kh) * p.kW + kw);
      out[e * chunks + c] = static_cast<Out>(partial[threadIdx.x][0]);
    }
    __syncthreads();  // partial is rewritten by this block's next tile
  }
}

// dw[e] = sum_{c < chunks} partials[e * chunks + c], in order of c.
template <class T>
__global__ void sum_chunks_kernel(const double* __restrict__ partials, T* __restrict__ dw,
                                  int64_t elements, int64_t chunks) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    double acc = 0.0;
    for (int64_t c = 0; c < chunks; ++c)
      acc += partials[e * chunks + c];
    dw[e] = static_cast<T>(acc);
  }
}

// ---- Fast path: split-K tensor-core GEMM, all kW taps of a row per CTA ------------------------
//
// GEMM view: A = x (M = C_in, K = positions), B = dy (N = C_out, K = positions), where tap kw
// reads dy at column i*sW - pW + kw*dW: every tap of a CTA reads the same x and one dy window at
// a shifted offset. Per 64-position segment a CTA
//   1. copies x[ci tile][segment] and the dy window dy[co tile][win_cols] into a raw stage with
//      cp.async (zero fill outside the tensors);
//   2. converts the raw stage to TF32 once (3xTF32: big and small words) into the conv buffers,
//      laid out in mma-fragment order so that the inner loop only loads: A as one 128-bit LDS per
//      fragment, B as one 32-bit (64-bit for 3xTF32) LDS per register. Converting per warp
//      instead would redo each dy value once per tap and each x value once per warp column;
//   3. runs the mma loop of each warp's tap from the conv buffers.
// Layouts (W = kWords per value: 1, or 2 for 3xTF32 {big, small}):
//   conv x: per (m16 tile mt, k8 block kb), 32 lanes x 4 words, the lane's A fragment
//     {A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]} (3xTF32: 128 big words, then 128 small).
//   conv dy: value (u, co) at (u * dy_pitch + co) * W for window column r0 + u * col_step: when
//     every tap reads columns of one residue r0 mod sW (dW a multiple of sW, as in S1) only those
//     are kept (col_step = sW), else all (col_step = 1). A tap is then a base column u_tap, and
//     lane (g, t) reads b = {B[t][g], B[t+4][g]} at u = u_tap + (8*kb + t [+4]) * u_step.
// Pipeline, step i (two raw stages): issue the copies of segment i+1 into raw[(i+1)&1]; wait for
// this thread's copies of segment i; barrier (1); convert raw[i&1]; barrier (2); compute.
// Barrier (1) publishes every thread's copies and ensures every warp finished compute(i-1)
// before the single conv buffer is rewritten; barrier (2) publishes conv and ensures convert(i)
// is done with raw[i&1] before step i+1 copies into it. One raw stage (when two would cost a
// second CTA per SM): the copies of segment i+1 go out after barrier (2).

// The tile constants the planner computes with (cuda/conv_tiles.h), under the kernel's names.
// kSegment: K per step (consecutive iw of one (n, ih)); kXPitch == 4 mod 32 (the conversion's
// reads hit 32 banks); warp tile kWarpM ci x kWarpN co of one tap; up to kMaxWarps warps.
constexpr int kSegment = kWgradSegment;
constexpr int kFlushEvery = 32;  // "highest": positions per tensor-core chain (see tf32_mma)
constexpr int kXPitch = kWgradXPitch;
constexpr int kWarpM = kWgradWarpM, kWarpN = kWgradWarpN;
constexpr int kMaxWarps = kWgradMaxWarps;

// out[(z*Ci + ci)*Co*taps + co*taps + tap] = sum over split z's segments of x * dy at this tap.
// kMinBlocks 2 (1xTF32) caps registers at 80 so two CTAs share an SM: measured 1.15-1.3x faster
// on S2-S4 than one CTA at 106 registers; 3xTF32 takes 168 (two sums and split fragments per
// warp tile), so two of its CTAs share an SM only up to 6 warps each; a 7-warp instance
// (S5: one warp per tap of 7) capped at 128 registers keeps two.
template <bool kSplit, int kMinBlocks, int kMaxThreads = kMaxWarps * 32>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocks > 1 ? kMinBlocks : 0)
    wgrad_tc_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                    float* __restrict__ out, ConvParams p, WgradPlan s) {
  constexpr int kWords = kSplit ? 2 : 1;  // words per converted value
  extern __shared__ __align__(16) float smem[];
  const int bm = s.warps_m * kWarpM, bn = s.warps_n * kWarpN;
  const int x_floats = bm * kXPitch, raw_floats = x_floats + bn * s.win_pitch;
  uint32_t* const conv_x = reinterpret_cast<uint32_t*>(smem + s.raw_stages * raw_floats);
  uint32_t* const conv_dy = conv_x + bm * kSegment * kWords;
  int64_t b = blockIdx.x;  // kh and tap groups fastest: neighbouring CTAs read the same x
  const int64_t kh = b % p.kH;
  b /= p.kH;
  const int64_t kw0 = (b % s.kw_groups) * s.taps_per_cta;
  b /= s.kw_groups;
  const int64_t m0 = (b % s.m_tiles) * bm;
  b /= s.m_tiles;
  const int64_t n0 = (b % s.n_tiles) * bn;
  const int64_t z = b / s.n_tiles;
  const int64_t seg_begin = z * s.segs_per_split;
  const int64_t seg_end = min_i64(s.segments, seg_begin + s.segs_per_split);
  // The window starts at the first tap's first column rounded down to a multiple of 4 (so rows
  // load as aligned 16-byte copies); i0*sW is a multiple of 4, so the shift is per CTA.
  const int64_t first0 = kw0 * p.dW - p.pW;
  const int shift = static_cast<int>(((first0 % 4) + 4) % 4);
  const int r0 = shift % s.col_step;  // the residue every tap's columns share (0 if col_step 1)

  // The copies of one segment. Everything that does not change from segment to segment is set
  // up here, and the segment's (n, ih, w tile) advances without divisions: the address work of
  // a step must stay small next to its mma work.
  const int64_t x_plane = p.Hi * p.Wi, y_plane = p.Ho * p.Wo;
  const float* const x_cta = x + m0 * x_plane;  // channel m0, (n, ih) = (0, 0)
  const float* const dy_cta = dy + n0 * y_plane;
  const int x_rows = static_cast<int>(min_i64(bm, p.Ci - m0));  // rows past these are zero
  const int dy_rows = static_cast<int>(min_i64(bn, p.Co - n0));
  // Thread i copies x column vec i % 16 of rows i / 16 + k * (threads / 16), and the dy vecs
  // i + k * threads of the window in row-major order (row and vec stepped without divisions).
  const int tid = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const int x_k = tid % (kSegment / 4) * 4, x_r0 = tid / (kSegment / 4);
  const int x_dr = threads / (kSegment / 4);
  const int win_vecs = s.win_cols / 4, dy_vecs = bn * win_vecs;
  const int dy_r0 = tid / win_vecs, dy_k0 = tid % win_vecs;
  const int dy_dr = threads / win_vecs, dy_dk = threads % win_vecs;
  int64_t load_wt = seg_begin % s.w_tiles, load_row = seg_begin / s.w_tiles;
  int64_t load_n = load_row / p.Hi, load_ih = load_row % p.Hi;

  // Copies the next segment (n, ih, wt) into raw stage `stage` and advances to the one after.
  auto load_next = [&](int stage) {
    const int64_t i0 = load_wt * kSegment;
    const int64_t oh = load_ih * p.sH - p.pH + kh * p.dH;
    const bool oh_ok = oh >= 0 && oh < p.Ho;
    const int64_t start = i0 * p.sW + first0 - shift;
    float* const xs = smem + stage * raw_floats;
    const float* x_row = x_cta + (load_n * p.Ci * p.Hi + load_ih) * p.Wi + x_r0 * x_plane;
    float* x_dst = xs + x_r0 * kXPitch + x_k;
#pragma unroll 1
    for (int r = x_r0; r < bm; r += x_dr) {
      const bool ok = r < x_rows;
      load_vec4(x_dst, ok ? x_row : x, i0 + x_k, p.Wi, ok, x);
      x_row += x_dr * x_plane;
      x_dst += x_dr * kXPitch;
    }
    const float* dy_row =
        dy_cta + (load_n * p.Co * p.Ho + (oh_ok ? oh : 0)) * p.Wo + dy_r0 * y_plane;
    float* dy_dst = xs + x_floats + dy_r0 * s.win_pitch;
    int r = dy_r0, k = dy_k0;
#pragma unroll 1
    for (int v = tid; v < dy_vecs; v += threads) {
      const bool ok = oh_ok && r < dy_rows;
      load_vec4(dy_dst + 4 * k, ok ? dy_row : dy, start + 4 * k, p.Wo, ok, dy);
      r += dy_dr;
      k += dy_dk;
      dy_row += dy_dr * y_plane;
      dy_dst += dy_dr * s.win_pitch;
      if (k >= win_vecs) {
        k -= win_vecs;
        ++r;
        dy_row += y_plane;
        dy_dst += s.win_pitch;
      }
    }
    if (++load_wt == s.w_tiles) {
      load_wt = 0;
      if (++load_ih == p.Hi) {
        load_ih = 0;
        ++load_n;
      }
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n_warps = static_cast<int>(blockDim.x / 32);

  // raw stage -> conv buffers. x: one warp per (mt, kb) block, each lane converts the fragment
  // it then stores with one 128-bit STS (reads at kXPitch == 4 mod 32: no bank conflicts). dy:
  // one instruction covers kCols columns u x kRows co, so the stores of a (half) warp's phase hit
  // distinct banks for the dy_pitch the planner picks when u_step == 1.
  auto convert = [&](int stage) {
    const float* xs = smem + stage * raw_floats;
    const float* ds = xs + x_floats;
    for (int blk = warp; blk < bm / 16 * 8; blk += n_warps) {
      const float* src = xs + (blk / 8 * 16 + g) * kXPitch + blk % 8 * 8 + t;
      // 3xTF32: a block's values, then its residuals 128 floats further.
      float* const dst = reinterpret_cast<float*>(conv_x) + blk * (kSplit ? 256 : 128) + lane * 4;
      store_tf32x4<kSplit>(dst, dst + 128, src[0], src[8 * kXPitch], src[4], src[8 * kXPitch + 4]);
    }
    constexpr int kRows = kSplit ? 16 : 8, kCols = 32 / kRows;
    for (int u0 = warp * kCols; u0 < s.conv_cols; u0 += n_warps * kCols) {
      const int u = u0 + lane / kRows, c = r0 + u * s.col_step;
      if (u >= s.conv_cols || c >= s.win_cols) continue;  // never read by any tap
      const float* src = ds + lane % kRows * s.win_pitch + c;
      uint32_t* dst = conv_dy + (u * s.dy_pitch + lane % kRows) * kWords;
      for (int co = 0; co < bn; co += kRows) {
        const float v = src[co * s.win_pitch];
        if constexpr (kSplit) {
          uint2 bs;
          split_tf32(v, bs.x, bs.y);
          *reinterpret_cast<uint2*>(dst + co * kWords) = bs;
        } else {
          dst[co] = to_tf32(v);
        }
      }
    }
  };

  const int per_tap = s.warps_m * s.warps_n;
  const int j = warp / per_tap;  // this warp's tap: kw = kw0 + j
  const int wm = (warp % per_tap) / s.warps_n * kWarpM, wn = warp % s.warps_n * kWarpN;
  const bool active = kw0 + j < p.kW;
  const int u_tap = (shift + j * static_cast<int>(p.dW) - r0) / s.col_step;  // K index 0
  const uint32_t* const a_frags = conv_x + wm / 16 * 8 * 128 * kWords + lane * 4;
  const uint32_t* const b_frags = conv_dy + ((u_tap + t * s.u_step) * s.dy_pitch + wn + g) * kWords;
  const int b_k8 = 8 * s.u_step * s.dy_pitch * kWords;  // words from one k8 block to the next
  const int b_k4 = 4 * s.u_step * s.dy_pitch * kWords;  // from B[t] to B[t+4]
  constexpr int kTilesM = kWarpM / 16, kTilesN = kWarpN / 8;
  float acc[kTilesM][kTilesN][4] = {};  // the tensor cores' running chain
  // "highest": acc is flushed into sum after each short chain (see flush_into).
  float sum[kSplit ? kTilesM : 1][kSplit ? kTilesN : 1][4] = {};

  auto compute = [&] {
#pragma unroll
    for (int kb = 0; kb < kSegment / 8; ++kb) {
      Frag<4, kSplit> a[kTilesM];
      Frag<2, kSplit> bf[kTilesN];
#pragma unroll
      for (int mt = 0; mt < kTilesM; ++mt) {
        const uint32_t* ap = a_frags + (mt * 8 + kb) * 128 * kWords;
        set_words(a[mt].big, *reinterpret_cast<const uint4*>(ap));
        if constexpr (kSplit) set_words(a[mt].small, *reinterpret_cast<const uint4*>(ap + 128));
      }
#pragma unroll
      for (int nt = 0; nt < kTilesN; ++nt) {
        const uint32_t* bp = b_frags + kb * b_k8 + nt * 8 * kWords;
        if constexpr (kSplit) {
          const uint2 v0 = *reinterpret_cast<const uint2*>(bp);
          const uint2 v1 = *reinterpret_cast<const uint2*>(bp + b_k4);
          bf[nt].big[0] = v0.x, bf[nt].small[0] = v0.y;
          bf[nt].big[1] = v1.x, bf[nt].small[1] = v1.y;
        } else {
          bf[nt].big[0] = bp[0];
          bf[nt].big[1] = bp[b_k4];
        }
      }
      mma_tile<kSplit>(acc, a, bf);
      if constexpr (kSplit) {
        if ((kb + 1) * 8 % kFlushEvery == 0) flush_into(sum, acc);
      }
    }
  };

  if (seg_begin < seg_end) {
    load_next(0);
    cp_async_commit();
  }
  for (int64_t seg = seg_begin; seg < seg_end; ++seg) {
    const bool more = seg + 1 < seg_end;
    int stage = 0;
    if (s.raw_stages == 2) {
      stage = static_cast<int>((seg - seg_begin) & 1);
      if (more) load_next(stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // (1)
    convert(stage);
    __syncthreads();  // (2)
    if (s.raw_stages == 1 && more) {
      load_next(0);
      cp_async_commit();
    }
    if (active) compute();
  }

  if (!active) return;
  const int64_t taps = p.kH * p.kW, tap = kh * p.kW + kw0 + j;
  float* out_z = out + z * p.Ci * p.Co * taps;
#pragma unroll
  for (int mt = 0; mt < kTilesM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t ci = m0 + wm + mt * 16 + g + half * 8;
      if (ci >= p.Ci) continue;
#pragma unroll
      for (int nt = 0; nt < kTilesN; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t co = n0 + wn + nt * 8 + 2 * t + e;
          float v;
          if constexpr (kSplit) {
            v = sum[mt][nt][half * 2 + e];
          } else {
            v = acc[mt][nt][half * 2 + e];
          }
          if (co < p.Co) out_z[(ci * p.Co + co) * taps + tap] = v;
        }
      }
    }
  }
}

// dw[e] = sum_{z < splits} partials[z * elements + e], in order of z, in float64.
__global__ void sum_splits_kernel(const float* __restrict__ partials, float* __restrict__ dw,
                                  int64_t elements, int64_t splits) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    double acc = 0.0;
    // Unrolled so that several loads are in flight; the adds stay in order of z.
#pragma unroll 8
    for (int64_t z = 0; z < splits; ++z)
      acc += static_cast<double>(partials[z * elements + e]);
    dw[e] = static_cast<float>(acc);
  }
}

// The kernel instance of the planner's WgradInstance.
using WgradKernel = void (*)(const float*, const float*, float*, ConvParams, WgradPlan);
WgradKernel wgrad_tc_instance(WgradInstance instance) {
  switch (instance) {
    case WgradInstance::tf32:
      return wgrad_tc_kernel<false, 2>;
    case WgradInstance::x3tf32:
      return wgrad_tc_kernel<true, 1>;
    case WgradInstance::x3tf32_7warps:
      return wgrad_tc_kernel<true, 2, 7 * 32>;
  }
  TGRAD_FAIL("wgrad_tc_instance: unknown instance ", static_cast<int>(instance));
}

// Where a split-K kernel writes: dw itself for one split, else a workspace of splits x dw's
// elements (held by storage until the caller's scope ends; the stream orders its reuse).
float* split_output(CachingAllocator& alloc, int64_t splits, Tensor& dw,
                    std::shared_ptr<void>& storage) {
  if (splits == 1) return dw.data_ptr<float>();
  storage = alloc.allocate(splits * dw.numel() * int64_t{sizeof(float)}, dw.device().index());
  return static_cast<float*>(storage.get());
}

// dw = the splits' partials summed in order (nothing to do for one split).
void sum_split_partials(const float* partials, int64_t splits, Tensor& dw) {
  if (splits == 1) return;
  const int64_t elements = dw.numel();
  sum_splits_kernel<<<grid_for(elements), kThreads>>>(partials, dw.data_ptr<float>(), elements,
                                                      splits);
  TGRAD_CUDA_CHECK_LAUNCH("sum_splits_kernel");
}

// Runs the planner's tensor-core plan (split-K partials summed in order when it splits).
void wgrad_tc_launch(CachingAllocator& alloc, const WgradLaunch& launch, const ConvParams& p,
                     const Tensor& x, const Tensor& dy, Tensor& dw) {
  const WgradPlan& s = launch.plan;
  const WgradKernel kernel = wgrad_tc_instance(launch.instance);
  const int64_t tiles = p.kH * s.kw_groups * s.m_tiles * s.n_tiles;
  std::shared_ptr<void> storage;
  float* out = split_output(alloc, s.splits, dw, storage);
  const auto blocks = static_cast<unsigned>(tiles * s.splits);
  TGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, launch.smem_bytes));
  kernel<<<blocks, static_cast<unsigned>(launch.threads), launch.smem_bytes>>>(
      x.data_ptr<float>(), dy.data_ptr<float>(), out, p, s);
  TGRAD_CUDA_CHECK_LAUNCH("wgrad_tc_kernel");
  sum_split_partials(out, s.splits, dw);
}

// batch-wgmma's wgrad: one implicit GEMM over the whole batch per K slice, then the partials.
void wgrad_batch_wgmma_launch(CachingAllocator& alloc, const BatchWgradPlan& s,
                              const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                              Tensor& dw) {
  std::shared_ptr<void> storage;
  float* out = split_output(alloc, s.splits, dw, storage);
  conv_wgrad_wgmma(s, g, x.data_ptr<float>(), dy.data_ptr<float>(), out, dw.device().index());
  sum_split_partials(out, s.splits, dw);
}

}  // namespace

void conv_transpose_wgrad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& x,
                          const Tensor& dy, Tensor& dw) {
  const ConvParams p = make_conv_params("CUDA conv_transpose_wgrad", g, x, dw, dy);
  const int64_t elements = dw.numel();
  if (elements == 0) return;
  DeviceGuard guard(dw.device());
  const int64_t r_total = p.N * p.Hi * p.Wi;
  if (r_total == 0) {
    fill(dw, 0.0);
    return;
  }
  const int device = dw.device().index();
  // One branch per kernel the planner may name for this pass (conv_candidates()).
  const auto run = [&](const ConvPlan& plan) {
    if (conv_operand_path_run(alloc, ConvPass::wgrad, plan, g, ConvOperands{x, dy, nullptr, dw}))
      return;
    if (plan.kernel == kKernelMmaSync) {
      wgrad_tc_launch(alloc, plan.wgrad, p, x, dy, dw);
      return;
    }
    if (plan.kernel == kKernelBatchWgmma) {
      wgrad_batch_wgmma_launch(alloc, plan.batch_wgrad, g, x, dy, dw);
      return;
    }
    TGRAD_CHECK(plan.kernel == kKernelFma, "CUDA conv_transpose_wgrad: no launcher for kernel '",
                plan.kernel, "'");
    const int64_t tiles = p.Ci * ceil_div(p.Cog, kTileCo) * p.kH * p.kW;
    const int64_t chunks = plan.fma_chunks, chunk_len = plan.fma_chunk_len;
    const unsigned blocks = static_cast<unsigned>(min_i64(tiles * chunks, kMaxBlocks));
    dispatch_float(dw.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (chunks == 1) {
        conv_transpose_wgrad_kernel<T, T><<<blocks, kThreads>>>(
            x.data_ptr<T>(), dy.data_ptr<T>(), dw.data_ptr<T>(), p, chunks, chunk_len);
        TGRAD_CUDA_CHECK_LAUNCH("conv_transpose_wgrad_kernel");
        return;
      }
      // The partials live until this scope ends; the stream orders their reuse after stage 2.
      std::shared_ptr<void> storage =
          alloc.allocate(elements * chunks * int64_t{sizeof(double)}, dw.device().index());
      double* partials = static_cast<double*>(storage.get());
      conv_transpose_wgrad_kernel<T, double>
          <<<blocks, kThreads>>>(x.data_ptr<T>(), dy.data_ptr<T>(), partials, p, chunks, chunk_len);
      TGRAD_CUDA_CHECK_LAUNCH("conv_transpose_wgrad_kernel");
      sum_chunks_kernel<T>
          <<<grid_for(elements), kThreads>>>(partials, dw.data_ptr<T>(), elements, chunks);
      TGRAD_CUDA_CHECK_LAUNCH("sum_chunks_kernel");
    });
  };
  run_conv_call(ConvPass::wgrad, g, dw.dtype(), conv_device_caps(device), run, time_conv_plan);
}

void conv_transpose_bias_grad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& dy,
                              Tensor& db) {
  TGRAD_CHECK(dy.numel() == g.y_numel() && db.numel() == g.out_channels && dy.dtype() == db.dtype(),
              "CUDA conv_transpose_bias_grad: dy ", dy.shape(), " ", dy.dtype(), " and db ",
              db.shape(), " ", db.dtype(), " do not match the geometry ", g.str());
  sum_to_shape(alloc, dy, {g.batch, g.out_channels, g.out_size[0] * g.out_size[1]}, db,
               {1, g.out_channels, 1});
}

}  // namespace tgrad::cuda

namespace tgrad::cuda {

void wgrad_tc_registers(DeviceCaps& caps) {
  cudaFuncAttributes attr{};
  TGRAD_CUDA_CHECK(cudaFuncGetAttributes(&attr, wgrad_tc_instance(WgradInstance::tf32)));
  caps.wgrad_regs_tf32 = attr.numRegs;
  TGRAD_CUDA_CHECK(cudaFuncGetAttributes(&attr, wgrad_tc_instance(WgradInstance::x3tf32)));
  caps.wgrad_regs_x3tf32 = attr.numRegs;
  TGRAD_CUDA_CHECK(cudaFuncGetAttributes(&attr, wgrad_tc_instance(WgradInstance::x3tf32_7warps)));
  caps.wgrad_regs_x3tf32_7warps = attr.numRegs;
}

}  // namespace tgrad::cuda
