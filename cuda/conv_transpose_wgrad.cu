// Transposed-convolution weight and bias gradients.
//   dw[ci, co, kh, kw] = sum_{n, ih, iw} x[n, ci, ih, iw] * dy[n, g*Cog+co, ih*sH - pH + kh*dH,
//                                                          iw*sW - pW + kw*dW],  g = ci / Cig
// float32, groups == 1: a split-K GEMM on TF32 tensor cores (3xTF32 for "highest"), M = C_in,
// N = C_out, K = positions; one CTA covers every kw tap of one kh from one staged dy window, and
// each split's partial tile is summed in order by sum_splits_kernel (deterministic).
// Every other case runs the general kernel below: each (weight tile, chunk of positions) block
// strides over its chunk and meets in a fixed shared-memory tree (float64), then stage 2 sums
// each element's chunks in order. The bias gradient is reduction.cu's deterministic sum of dy.
#include <cuda_runtime.h>

#include "cuda/conv_params.h"
#include "cuda/cuda_util.h"
#include "cuda/kernels.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

namespace {

constexpr int kTileCo = 4;
// Chunking depends on the shape only, so the bits do not depend on the GPU model.
constexpr int64_t kMinChunk = 4096;  // r terms per block at least
constexpr int64_t kTargetBlocks = 8192;

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

constexpr int kSegment = 64;           // K per step: kSegment consecutive iw of one (n, ih)
constexpr int kFlushEvery = 32;        // "highest": positions per tensor-core chain (see tf32_mma)
constexpr int kXPitch = kSegment + 4;  // == 4 mod 8: the fragment loads hit 32 banks
constexpr int kWarpM = 32, kWarpN = 32;  // warp tile: 32 ci x 32 co of one tap
constexpr int kMaxWarps = 12;          // 384 threads: up to 168 registers each (3xTF32 needs ~130)
constexpr int64_t kTargetCtas = 1024;  // per launch, from the shape only (bits are GPU-free)
constexpr int64_t kMaxPartialBytes = int64_t{256} << 20;

// A CTA owns warps_m*32 ci x warps_n*32 co x taps_per_cta consecutive taps kw of one kh, and one
// split of the K segments. Per segment it stages x[ci tile][kSegment] once and one dy window
// dy[co tile][win_cols columns] that covers every tap's shifted read, so each staged value
// feeds taps_per_cta times more products than a one-tap tile. Warp w computes tap w / per_tap.
struct WgradPlan {
  int warps_m, warps_n, taps_per_cta;
  int win_cols, win_pitch;  // dy window columns (a multiple of 4) / floats per window row
  int64_t m_tiles, n_tiles, kw_groups, w_tiles, segments, segs_per_split, splits;
};

// out[(z*Ci + ci)*Co*taps + co*taps + tap] = sum over split z's segments of x * dy at this tap.
// kMinBlocks 2 (1xTF32) caps registers at 80 so two CTAs share an SM: measured 1.15-1.3x faster
// on S2-S4 than one CTA at 106 registers; 3xTF32 keeps its 140 (two sums per warp tile).
template <bool kSplit, int kMinBlocks>
__global__ void __launch_bounds__(kMaxWarps * 32, kMinBlocks > 1 ? kMinBlocks : 0)
    wgrad_tc_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                    float* __restrict__ out, ConvParams p, WgradPlan s) {
  extern __shared__ __align__(16) float smem[];
  const int bm = s.warps_m * kWarpM, bn = s.warps_n * kWarpN;
  const int x_floats = bm * kXPitch, stage_floats = x_floats + bn * s.win_pitch;
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

  auto load_segment = [&](int64_t seg, int stage) {
    const int64_t row = seg / s.w_tiles, i0 = (seg % s.w_tiles) * kSegment;
    const int64_t n = row / p.Hi, ih = row % p.Hi;
    const int64_t oh = ih * p.sH - p.pH + kh * p.dH;
    const bool oh_ok = oh >= 0 && oh < p.Ho;
    const int64_t start = i0 * p.sW + first0 - shift;
    float* xs = smem + stage * stage_floats;
    float* ds = xs + x_floats;
    constexpr int kXVecs = kSegment / 4;
    const int win_vecs = s.win_cols / 4, x_vecs = bm * kXVecs;
    for (int v = threadIdx.x; v < x_vecs + bn * win_vecs; v += blockDim.x) {
      if (v < x_vecs) {
        const int r = v / kXVecs, k = (v % kXVecs) * 4;
        const int64_t ci = m0 + r;
        const float* base = x + ((n * p.Ci + (ci < p.Ci ? ci : 0)) * p.Hi + ih) * p.Wi;
        load_vec4(xs + r * kXPitch + k, base, i0 + k, p.Wi, ci < p.Ci, x);
      } else {
        const int r = (v - x_vecs) / win_vecs, k = ((v - x_vecs) % win_vecs) * 4;
        const int64_t co = n0 + r;
        const bool ok = oh_ok && co < p.Co;
        const float* base = dy + ((n * p.Co + (ok ? co : 0)) * p.Ho + (ok ? oh : 0)) * p.Wo;
        load_vec4(ds + r * s.win_pitch + k, base, start + k, p.Wo, ok, dy);
      }
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int per_tap = s.warps_m * s.warps_n;
  const int j = warp / per_tap;  // this warp's tap: kw = kw0 + j
  const int wm = (warp % per_tap) / s.warps_n * kWarpM, wn = warp % s.warps_n * kWarpN;
  const bool active = kw0 + j < p.kW;
  const int s_w = static_cast<int>(p.sW);
  const int b_col = shift + j * static_cast<int>(p.dW);  // window column of this tap's k = 0
  constexpr int kTilesM = kWarpM / 16, kTilesN = kWarpN / 8;
  float acc[kTilesM][kTilesN][4] = {};  // the tensor cores' running chain
  // "highest": acc is flushed into sum after each short chain (see flush_into).
  float sum[kSplit ? kTilesM : 1][kSplit ? kTilesN : 1][4] = {};

  if (seg_begin < seg_end) {
    load_segment(seg_begin, 0);
    cp_async_commit();
  }
  for (int64_t seg = seg_begin; seg < seg_end; ++seg) {
    const int stage = static_cast<int>((seg - seg_begin) & 1);
    if (seg + 1 < seg_end) load_segment(seg + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const float* xs = smem + stage * stage_floats;
    const float* ds = xs + x_floats + b_col;
    if (active) {
#pragma unroll
      for (int k8 = 0; k8 < kSegment; k8 += 8) {
        Frag<4, kSplit> a[kTilesM];
        Frag<2, kSplit> bf[kTilesN];
#pragma unroll
        for (int mt = 0; mt < kTilesM; ++mt) {
          const float* ap = xs + (wm + mt * 16 + g) * kXPitch + k8 + t;
          a[mt].set(0, ap[0]);
          a[mt].set(1, ap[8 * kXPitch]);
          a[mt].set(2, ap[4]);
          a[mt].set(3, ap[8 * kXPitch + 4]);
        }
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt) {
          const float* bp = ds + (wn + nt * 8 + g) * s.win_pitch + (k8 + t) * s_w;
          bf[nt].set(0, bp[0]);
          bf[nt].set(1, bp[4 * s_w]);
        }
#pragma unroll
        for (int mt = 0; mt < kTilesM; ++mt) {
#pragma unroll
          for (int nt = 0; nt < kTilesN; ++nt)
            mma_frag<kSplit>(acc[mt][nt], a[mt], bf[nt]);
        }
        if constexpr (kSplit) {
          if ((k8 + 8) % kFlushEvery == 0) flush_into(sum, acc);
        }
      }
    }
    __syncthreads();
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
    for (int64_t z = 0; z < splits; ++z)
      acc += static_cast<double>(partials[z * elements + e]);
    dw[e] = static_cast<float>(acc);
  }
}

// The tensor-core path, or false (nothing launched) when the general kernel must run.
bool wgrad_fast(CachingAllocator& alloc, const ConvParams& p, Precision precision, const Tensor& x,
                const Tensor& dy, Tensor& dw) {
  if (dw.dtype() != DType::float32 || p.G != 1) return false;
  WgradPlan s{};
  s.warps_m = p.Ci > kWarpM ? 2 : 1;
  s.warps_n = p.Co > kWarpN ? 2 : 1;
  const int per_tap = s.warps_m * s.warps_n;
  s.kw_groups = ceil_div(p.kW, int64_t{kMaxWarps / per_tap});
  s.taps_per_cta = static_cast<int>(ceil_div(p.kW, s.kw_groups));
  const int64_t span = (kSegment - 1) * p.sW + (s.taps_per_cta - 1) * p.dW + 1 + 3;
  if (span > 4096) return false;
  s.win_cols = static_cast<int>(ceil_div(span, int64_t{4}) * 4);
  s.win_pitch = s.win_cols % 8 == 0 ? s.win_cols + 4 : s.win_cols;  // == 4 mod 8
  const int bm = s.warps_m * kWarpM, bn = s.warps_n * kWarpN;
  const int smem = 2 * (bm * kXPitch + bn * s.win_pitch) * static_cast<int>(sizeof(float));
  if (smem > 200 * 1024) return false;

  const int64_t elements = dw.numel();
  s.m_tiles = ceil_div(p.Ci, int64_t{bm});
  s.n_tiles = ceil_div(p.Co, int64_t{bn});
  s.w_tiles = ceil_div(p.Wi, int64_t{kSegment});
  s.segments = p.N * p.Hi * s.w_tiles;
  const int64_t tiles = p.kH * s.kw_groups * s.m_tiles * s.n_tiles;
  int64_t splits = std::clamp<int64_t>(ceil_div(kTargetCtas, tiles), 1, s.segments);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, kMaxPartialBytes / (elements * 4)));
  s.segs_per_split = ceil_div(s.segments, splits);
  s.splits = ceil_div(s.segments, s.segs_per_split);

  std::shared_ptr<void> storage;
  float* out = dw.data_ptr<float>();
  if (s.splits > 1) {
    storage = alloc.allocate(s.splits * elements * int64_t{sizeof(float)}, dw.device().index());
    out = static_cast<float*>(storage.get());
  }
  const unsigned blocks = static_cast<unsigned>(tiles * s.splits);
  const unsigned threads = static_cast<unsigned>(per_tap * s.taps_per_cta * 32);
  auto run = [&](auto kernel) {
    TGRAD_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<blocks, threads, smem>>>(x.data_ptr<float>(), dy.data_ptr<float>(), out, p, s);
    TGRAD_CUDA_CHECK_LAUNCH("wgrad_tc_kernel");
  };
  if (precision == Precision::highest) {
    run(wgrad_tc_kernel<true, 1>);
  } else {
    run(wgrad_tc_kernel<false, 2>);
  }
  if (s.splits > 1) {
    sum_splits_kernel<<<grid_for(elements), kThreads>>>(out, dw.data_ptr<float>(), elements,
                                                        s.splits);
    TGRAD_CUDA_CHECK_LAUNCH("sum_splits_kernel");
  }
  return true;
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
  if (wgrad_fast(alloc, p, g.precision, x, dy, dw)) return;
  const int64_t tiles = p.Ci * ceil_div(p.Cog, kTileCo) * p.kH * p.kW;
  int64_t chunks =
      std::max<int64_t>(1, min_i64(ceil_div(r_total, kMinChunk), ceil_div(kTargetBlocks, tiles)));
  const int64_t chunk_len = ceil_div(r_total, chunks);
  chunks = ceil_div(r_total, chunk_len);
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
