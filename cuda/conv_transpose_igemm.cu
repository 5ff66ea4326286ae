// Kernels of the forward/dgrad implicit GEMM declared in conv_transpose_igemm.cuh (index formula
// there): weight packing, the tensor-core kernel for three tile shapes and two precisions, and
// the planner that picks a shape or declines. A CTA owns kBM rows m x kBN positions q of one
// (n, oh, phase) output row and walks the channels kChunk at a time.
#include "cuda/conv_transpose_igemm.cuh"

#include <cuda_runtime.h>

#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

namespace {

// A CTA computes kBM rows m x kBN positions q of one (n, oh, phase r) output row; kChunk
// channels of the K loop sit in shared memory at a time: W[m0.., chunk, every valid tap] and the
// src window (every plane kh, chunk, kBN*s_in + halo columns) that all taps read shifted.
template <int kWarpsM_, int kWarpsN_, int kTilesM_, int kTilesN_, int kChunk_, int kMinBlocks_ = 2>
struct IgemmConfig {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kTilesM = kTilesM_, kTilesN = kTilesN_;  // m16 / n8 tiles per warp
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kBM = kWarpsM * kTilesM * 16;
  static constexpr int kBN = kWarpsN * kTilesN * 8;
  static constexpr int kChunk = kChunk_;
  static constexpr int kMinBlocks = kMinBlocks_;  // CTAs per SM the register budget must allow
  static constexpr int kAPitch = kBM + 8;         // == 8 mod 32: the fragment loads hit 32 banks
};

inline constexpr int kIgemmMaxTaps = 32;
inline constexpr int kIgemmMaxKh = 8;

// wp[(tap*c_pad + c)*m_pad + m] = W[m, c, tap] (forward: w[c, m, tap]; dgrad: w[m, c, tap]).
__global__ void igemm_pack_weights_kernel(const float* __restrict__ w, float* __restrict__ wp,
                                          IgemmProblem p) {
  const int64_t taps = p.kH * p.kW, total = taps * p.c_pad * p.m_pad;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = e % p.m_pad, c = (e / p.m_pad) % p.c_pad, tap = e / (p.m_pad * p.c_pad);
    float v = 0.0f;
    if (m < p.M && c < p.C)
      v = p.gather ? w[(c * p.M + m) * taps + tap] : w[(m * p.C + c) * taps + tap];
    wp[e] = v;
  }
}

template <class Cfg, bool kSplit>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    conv_igemm_kernel(IgemmProblem p) {
  extern __shared__ __align__(16) float smem[];
  __shared__ int tap_w[kIgemmMaxTaps];        // kh*kW + kw of each valid tap
  __shared__ int tap_plane[kIgemmMaxTaps];    // the window plane (kh) it reads
  __shared__ int tap_col[kIgemmMaxTaps];      // its first window column
  __shared__ int64_t plane_row[kIgemmMaxKh];  // src row of plane kh, -1 when unused
  __shared__ int s_taps;
  __shared__ int64_t s_col0;

  // Phases fastest: the CTAs that write interleaved columns of one output row run together,
  // so L2 sees whole sectors; then M tiles, which read the same src window.
  int64_t b = blockIdx.x;
  const int64_t r = b % p.phases;
  b /= p.phases;
  const int64_t m0 = (b % p.m_tiles) * Cfg::kBM;
  b /= p.m_tiles;
  const int64_t q0 = (b % p.q_tiles) * Cfg::kBN;
  b /= p.q_tiles;
  const int64_t oh = b % p.Ho;
  const int64_t n = b / p.Ho;

  // The taps that land on src for this (oh, phase): few, so one thread lists them.
  if (threadIdx.x == 0) {
    int count = 0;
    int64_t offs[kIgemmMaxTaps];
    int64_t min_off = INT64_MAX;
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      int64_t row;
      if (p.gather) {
        const int64_t t = oh + p.pH - kh * p.dH;
        row = (t >= 0 && t % p.sH == 0 && t / p.sH < p.Hs) ? t / p.sH : -1;
      } else {
        row = oh * p.sH - p.pH + kh * p.dH;
        if (row >= p.Hs) row = -1;
      }
      plane_row[kh] = row < 0 ? -1 : row;
      if (row < 0) continue;
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        int64_t off;
        if (p.gather) {
          const int64_t t = r + p.pW - kw * p.dW;
          if (((t % p.sW) + p.sW) % p.sW != 0) continue;
          off = t / p.sW;  // exact
        } else {
          off = kw * p.dW - p.pW;
        }
        tap_w[count] = static_cast<int>(kh * p.kW + kw);
        tap_plane[count] = static_cast<int>(kh);
        offs[count++] = off;
        min_off = off < min_off ? off : min_off;
      }
    }
    for (int j = 0; j < count; ++j)
      tap_col[j] = static_cast<int>(offs[j] - min_off);
    s_taps = count;
    s_col0 = q0 * p.s_in + (count > 0 ? min_off : 0);
  }
  __syncthreads();
  const int taps = s_taps;
  const int64_t col0 = s_col0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  auto load_chunk = [&](int64_t chunk, int stage) {
    float* as = smem + stage * p.stage_floats;
    float* ws = as + p.a_floats;
    constexpr int kVecPerRow = Cfg::kBM / 4;
    for (int v = threadIdx.x; v < taps * Cfg::kChunk * kVecPerRow; v += Cfg::kThreads) {
      const int row = v / kVecPerRow, col = (v % kVecPerRow) * 4;
      const int j = row / Cfg::kChunk, c = row % Cfg::kChunk;
      const float* src = p.wp + (tap_w[j] * p.c_pad + chunk * Cfg::kChunk + c) * p.m_pad + m0 + col;
      cp_async16(as + row * Cfg::kAPitch + col, src);
    }
    for (int rr = warp; rr < p.kH * Cfg::kChunk; rr += Cfg::kThreads / 32) {
      const int kh = rr / Cfg::kChunk;
      const int64_t row = plane_row[kh];
      if (row < 0) continue;
      const int64_t ch = chunk * Cfg::kChunk + rr % Cfg::kChunk;
      const bool ch_ok = ch < p.C;
      const float* base = p.src + ((n * p.C + (ch_ok ? ch : 0)) * p.Hs + row) * p.Ws;
      float* dst = ws + rr * p.win_pitch;
      for (int j = lane; j < p.win_cols; j += 32) {
        const int64_t col = col0 + j;
        const bool ok = ch_ok && col >= 0 && col < p.Ws;
        cp_async4(dst + j, ok ? base + col : p.src, ok);
      }
    }
  };

  const int g = lane / 4, t = lane % 4;
  const int wm = (warp / Cfg::kWarpsN) * Cfg::kTilesM * 16;
  const int wn = (warp % Cfg::kWarpsN) * Cfg::kTilesN * 8;
  const int s_in = static_cast<int>(p.s_in);
  float acc[Cfg::kTilesM][Cfg::kTilesN][4] = {};  // the tensor cores' running chain
  // "highest": acc is flushed into sum after each short chain (see flush_into).
  float sum[kSplit ? Cfg::kTilesM : 1][kSplit ? Cfg::kTilesN : 1][4] = {};

  auto compute_chunk = [&](int stage) {
    const float* as = smem + stage * p.stage_floats;
    const float* ws = as + p.a_floats;
    for (int j = 0; j < taps; ++j) {
      const float* aj = as + j * Cfg::kChunk * Cfg::kAPitch;
      const float* bj = ws + tap_plane[j] * Cfg::kChunk * p.win_pitch + tap_col[j];
#pragma unroll
      for (int k8 = 0; k8 < Cfg::kChunk; k8 += 8) {
        Frag<4, kSplit> a[Cfg::kTilesM];
        Frag<2, kSplit> bf[Cfg::kTilesN];
#pragma unroll
        for (int mt = 0; mt < Cfg::kTilesM; ++mt) {
          const float* ap = aj + (k8 + t) * Cfg::kAPitch + wm + mt * 16 + g;
          a[mt].set(0, ap[0]);
          a[mt].set(1, ap[8]);
          a[mt].set(2, ap[4 * Cfg::kAPitch]);
          a[mt].set(3, ap[4 * Cfg::kAPitch + 8]);
        }
#pragma unroll
        for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
          const float* bp = bj + (k8 + t) * p.win_pitch + (wn + nt * 8 + g) * s_in;
          bf[nt].set(0, bp[0]);
          bf[nt].set(1, bp[4 * p.win_pitch]);
        }
#pragma unroll
        for (int mt = 0; mt < Cfg::kTilesM; ++mt) {
#pragma unroll
          for (int nt = 0; nt < Cfg::kTilesN; ++nt)
            mma_frag<kSplit>(acc[mt][nt], a[mt], bf[nt]);
        }
      }
      if constexpr (kSplit) flush_into(sum, acc);
    }
  };

  // Two-stage cp.async pipeline over channel chunks: load chunk i+1 while chunk i multiplies.
  const int64_t chunks = taps > 0 ? p.c_pad / Cfg::kChunk : 0;
  if (chunks > 0) {
    load_chunk(0, 0);
    cp_async_commit();
  }
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    if (chunk + 1 < chunks) load_chunk(chunk + 1, static_cast<int>((chunk + 1) & 1));
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    compute_chunk(static_cast<int>(chunk & 1));
    __syncthreads();
  }

  const int64_t q_count = r < p.Wo ? (p.Wo - r + p.s_out - 1) / p.s_out : 0;
#pragma unroll
  for (int mt = 0; mt < Cfg::kTilesM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm + mt * 16 + g + half * 8;
      if (m >= p.M) continue;
      const float bias = p.bias ? p.bias[m] : 0.0f;
      float* out_row = p.out + ((n * p.M + m) * p.Ho + oh) * p.Wo;
#pragma unroll
      for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t q = q0 + wn + nt * 8 + 2 * t + e;
          float v;
          if constexpr (kSplit) {
            v = sum[mt][nt][half * 2 + e];
          } else {
            v = acc[mt][nt][half * 2 + e];
          }
          if (q < q_count) out_row[q * p.s_out + r] = v + bias;
        }
      }
    }
  }
}

// Fills p's tiling fields for Cfg; false when the geometry does not fit this kernel.
template <class Cfg>
bool igemm_plan(IgemmProblem& p) {
  const int64_t taps = p.kH * p.kW;
  if (taps > kIgemmMaxTaps || p.kH > kIgemmMaxKh) return false;
  const int64_t span = p.gather ? (p.kW - 1) * p.dW / p.sW : (p.kW - 1) * p.dW;
  const int64_t win_cols = (Cfg::kBN - 1) * p.s_in + span + 1;
  if (win_cols > 4096) return false;
  p.win_cols = static_cast<int>(win_cols);
  p.win_pitch = static_cast<int>(ceil_div(win_cols, 32) * 32 + 8);
  p.a_floats = static_cast<int>(taps * Cfg::kChunk * Cfg::kAPitch);
  p.stage_floats = p.a_floats + static_cast<int>(p.kH * Cfg::kChunk * p.win_pitch);
  if (2 * int64_t{p.stage_floats} * 4 > 200 * 1024) return false;
  p.c_pad = ceil_div(p.C, Cfg::kChunk) * Cfg::kChunk;
  p.m_tiles = ceil_div(p.M, Cfg::kBM);
  p.m_pad = p.m_tiles * Cfg::kBM;
  const int64_t q_max = ceil_div(p.Wo, p.s_out);
  p.q_tiles = ceil_div(q_max, Cfg::kBN);
  const int64_t blocks = p.m_tiles * p.q_tiles * p.phases * p.Ho * p.N;
  return blocks > 0 && blocks < (int64_t{1} << 31);
}

template <class Cfg, bool kSplit>
void igemm_launch(CachingAllocator& alloc, IgemmProblem p, const float* w, int device) {
  std::shared_ptr<void> packed =
      alloc.allocate(p.kH * p.kW * p.c_pad * p.m_pad * int64_t{sizeof(float)}, device);
  p.wp = static_cast<const float*>(packed.get());
  igemm_pack_weights_kernel<<<grid_for(p.kH * p.kW * p.c_pad * p.m_pad), kThreads>>>(
      w, static_cast<float*>(packed.get()), p);
  TGRAD_CUDA_CHECK_LAUNCH("igemm_pack_weights_kernel");
  const unsigned blocks = static_cast<unsigned>(p.m_tiles * p.q_tiles * p.phases * p.Ho * p.N);
  const int smem = 2 * p.stage_floats * static_cast<int>(sizeof(float));
  auto kernel = conv_igemm_kernel<Cfg, kSplit>;
  TGRAD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<blocks, Cfg::kThreads, smem>>>(p);
  TGRAD_CUDA_CHECK_LAUNCH("conv_igemm_kernel");
}

// Plans p for Cfg and launches it; false (nothing launched) when the geometry does not fit.
template <class Cfg, bool kSplit>
bool igemm_try(CachingAllocator& alloc, IgemmProblem& p, const float* w, int device) {
  if (!igemm_plan<Cfg>(p)) return false;
  igemm_launch<Cfg, kSplit>(alloc, p, w, device);
  return true;
}

}  // namespace

bool conv_igemm(CachingAllocator& alloc, IgemmProblem p, const float* w, Precision precision,
                int device) {
  using Big = IgemmConfig<2, 4, 4, 4, 16>;   // 128 x 128, warp tile 64 x 32
  using Mid = IgemmConfig<2, 4, 2, 8, 16>;   // 64 x 256, warp tile 32 x 64
  using Small = IgemmConfig<1, 8, 2, 4, 8>;  // 32 x 256, warp tile 32 x 32
  if (precision == Precision::highest) {
    // 3xTF32 keeps the tensor-core chain and the FADD sum: ~225 registers at 64x32 / 32x64 warp
    // tiles (one CTA per SM; smaller warp tiles at two CTAs measured 8-11% slower on S3), 124
    // at 32x32, where two CTAs per SM fit. The small tile takes 16 channels per chunk (half the
    // barriers) when two stages fit in shared memory, else 8 (S5's 21 taps).
    using BigSplit = IgemmConfig<2, 4, 4, 4, 16, 1>;
    using MidSplit = IgemmConfig<2, 4, 2, 8, 16, 1>;
    using SmallSplit16 = IgemmConfig<1, 8, 2, 4, 16, 2>;
    using SmallSplit8 = IgemmConfig<1, 8, 2, 4, 8, 2>;
    if (p.M > 64) return igemm_try<BigSplit, true>(alloc, p, w, device);
    if (p.M > 32) return igemm_try<MidSplit, true>(alloc, p, w, device);
    return igemm_try<SmallSplit16, true>(alloc, p, w, device) ||
           igemm_try<SmallSplit8, true>(alloc, p, w, device);
  }
  if (p.M > 64) return igemm_try<Big, false>(alloc, p, w, device);
  if (p.M > 32) return igemm_try<Mid, false>(alloc, p, w, device);
  return igemm_try<Small, false>(alloc, p, w, device);
}

}  // namespace tgrad::cuda
