// Kernels of the forward/dgrad implicit GEMM declared in conv_transpose_igemm.cuh (index formula
// there): weight packing, the tensor-core kernel for three tile shapes and two precisions, and
// the launcher of the shape the planner chose (cuda/conv_plan.cpp).
//
// A CTA owns kBM rows m x kBN positions q of one (n, oh, phase) output row. Its K loop runs over
// steps (kChunk channels of one src row kh); each step stages in shared memory one window of
// that src row, which every tap of the row reads at a shifted column offset. Both operands reach
// the tensor cores already converted to TF32 ("high") or split into a TF32 value and its TF32
// residual ("highest", 3xTF32), laid out in mma fragment order, so the inner loop is one or two
// 128-bit loads per A fragment, one 64/128-bit load per B fragment and the mmas: no conversion,
// no scalar loads.
//   - Weights (A): packed and converted once per call into fragment order (pack kernel below).
//     Warps read their fragments straight from global memory: every CTA of an M tile reads the
//     same few KB per step, which stay in L1, so they need no staging.
//   - src window (B): cp.async into a raw buffer (up to 4 in flight), then each thread converts
//     the values it copied itself into the fragment-ordered buffer (its own copies need only
//     cp.async.wait, no barrier). One __syncthreads per step publishes the converted window.
// What this bought, and what did not work, is in docs/performance.md.
#include "cuda/conv_transpose_igemm.cuh"

#include <cuda_runtime.h>

#include "cuda/cuda_util.h"
#include "cuda/igemm_device.cuh"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

namespace {

template <int kWarpsM_, int kWarpsN_, int kTilesM_, int kTilesN_, int kChunk_, int kMinBlocks_ = 2>
struct IgemmConfig {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kTilesM = kTilesM_, kTilesN = kTilesN_;  // m16 / n8 tiles per warp
  static constexpr int kThreads = kWarpsM * kWarpsN * 32;
  static constexpr int kBM = kWarpsM * kTilesM * 16;
  static constexpr int kBN = kWarpsN * kTilesN * 8;
  static constexpr int kChunk = kChunk_;          // channels per step, a multiple of 8
  static constexpr int kKb = kChunk / 8;          // k8 blocks per step
  static constexpr int kMinBlocks = kMinBlocks_;  // CTAs per SM the registers and smem must allow
};

// Floats per lane of one A fragment (4 values; "highest" also their 4 residuals), and per
// window column and t of the B fragment (rows t and t+4; "highest" each with its residual).
template <bool kSplit>
inline constexpr int kAWords = kSplit ? 8 : 4;
template <bool kSplit>
inline constexpr int kBWords = kSplit ? 4 : 2;

// Packs W into mma A-fragment order, converted:
//   wp[(((tap*kb_total + kb)*mt_total + mt)*32 + lane)*kAWords + i] (+4 for the residual)
//   = tf32(W[m, c, tap]) with m = mt*16 + g + 8*(i & 1), c = kb*8 + t + 4*(i >> 1),
// g = lane/4, t = lane%4, and W[m, c, tap] = w[c, m, tap] (forward) or w[m, c, tap] (dgrad);
// zero outside M x C.
template <bool kSplit>
__global__ void igemm_pack_weights_kernel(const float* __restrict__ w, float* __restrict__ wp,
                                          IgemmProblem p) {
  const int64_t taps = p.kH * p.kW, total = taps * p.c_pad * p.m_pad;
  const int64_t mt_total = p.m_pad / 16;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int i = static_cast<int>(e % 4);
    const int lane = static_cast<int>(e / 4 % 32);
    const int64_t frag = e / 128;  // (tap*kb_total + kb)*mt_total + mt
    const int64_t mt = frag % mt_total, kb = frag / mt_total % (p.c_pad / 8);
    const int64_t tap = frag / mt_total / (p.c_pad / 8);
    const int64_t m = mt * 16 + lane / 4 + 8 * (i & 1), c = kb * 8 + lane % 4 + 4 * (i >> 1);
    float v = 0.0f;
    // Row fold: row m of half h is true row m - h*fold_m, and folded tap kh' the true kh = kh' - 1
    // (forward, first half; dgrad, second half) or kh' (the others); zero past the true kH.
    int64_t m_w = m, tap_w = tap, m_count = p.M, taps_w = taps;
    bool ok = m < p.M && c < p.C;
    if (p.fold_m > 0) {
      const bool second = m >= p.fold_m;
      const int64_t kh = tap / p.kW - (second != p.gather ? 1 : 0);
      ok = ok && kh >= 0 && kh < p.kH - 1;
      m_w = second ? m - p.fold_m : m, m_count = p.fold_m;
      tap_w = kh * p.kW + tap % p.kW, taps_w = (p.kH - 1) * p.kW;
    }
    if (ok)
      v = p.gather ? w[(c * m_count + m_w) * taps_w + tap_w] : w[(m_w * p.C + c) * taps_w + tap_w];
    float* dst = wp + (frag * 32 + lane) * kAWords<kSplit> + i;
    if constexpr (kSplit) {
      uint32_t big, small;
      split_tf32(v, big, small);
      dst[0] = __uint_as_float(big);
      dst[4] = __uint_as_float(small);
    } else {
      dst[0] = __uint_as_float(to_tf32(v));
    }
  }
}

// kFill: p.fill's epilogue (and phase0), in an instantiation of its own so that the other
// problems run the code they ran before fill mode, register allocation included.
template <class Cfg, bool kSplit, bool kFill>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    conv_igemm_kernel(IgemmProblem p) {
  constexpr int kAW = kAWords<kSplit>, kBW = kBWords<kSplit>;
  extern __shared__ __align__(16) float smem[];
  __shared__ IgemmTaps taps;

  const IgemmBlock blk = igemm_block(p, kFill ? p.phase0 : 0, Cfg::kBM, Cfg::kBN);
  const int r = blk.r, oh = blk.oh;
  const int64_t m0 = blk.m0, q0 = blk.q0, n = blk.n;

  if (threadIdx.x == 0) igemm_list_taps(p, oh, r, q0, taps);
  __syncthreads();
  const int planes = taps.planes;

  // Shared memory: the converted window [2 stages], then the raw window [raw_stages].
  float* const raw_base = smem + 2 * p.conv_floats;
  const int raw_floats = Cfg::kChunk * p.raw_pitch;
  auto load_window = [&](int step) {
    igemm_load_window<Cfg::kChunk, Cfg::kThreads>(
        p, taps, raw_base + (step % p.raw_stages) * raw_floats, step, n);
  };

  // raw -> converted window in B-fragment order: conv[((kb*win_cols + j)*4 + t)*kBW + ...] =
  // {rows t, t+4} of column j ("highest": {big t, small t, big t+4, small t+4}).
  auto convert_window = [&](int step) {
    const float* raw = raw_base + (step % p.raw_stages) * raw_floats;
    float* conv = smem + (step & 1) * p.conv_floats;
    const int my_t = threadIdx.x % 4;
    igemm_for_each_item<Cfg::kKb, Cfg::kThreads>(p.win_cols, [&](int kb, int j) {
      const float x0 = raw[(kb * 8 + my_t) * p.raw_pitch + j];
      const float x1 = raw[(kb * 8 + my_t + 4) * p.raw_pitch + j];
      float* dst = conv + ((kb * p.win_cols + j) * 4 + my_t) * kBW;
      if constexpr (kSplit) {
        uint32_t b0, s0, b1, s1;
        split_tf32(x0, b0, s0);
        split_tf32(x1, b1, s1);
        *reinterpret_cast<float4*>(dst) = make_float4(__uint_as_float(b0), __uint_as_float(s0),
                                                      __uint_as_float(b1), __uint_as_float(s1));
      } else {
        *reinterpret_cast<float2*>(dst) =
            make_float2(__uint_as_float(to_tf32(x0)), __uint_as_float(to_tf32(x1)));
      }
    });
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wmt = (warp / Cfg::kWarpsN) * Cfg::kTilesM;  // first m16 tile of this warp
  const int wn = (warp % Cfg::kWarpsN) * Cfg::kTilesN * 8;
  const int b_step = p.b_step;
  const int64_t kb_total = p.c_pad / 8, mt_total = p.m_pad / 16;
  // This lane's A fragments in the packed weights: + (tap*kb_total + kb)*mt_total*32*kAW.
  const float* const a_lane = p.wp + ((m0 / 16 + wmt) * 32 + lane) * kAW;
  float acc[Cfg::kTilesM][Cfg::kTilesN][4] = {};  // the tensor cores' running chain
  // "highest": acc is flushed into sum after each short chain (see flush_into).
  float sum[kSplit ? Cfg::kTilesM : 1][kSplit ? Cfg::kTilesN : 1][4] = {};

  // A fragments come straight from the packed weights in global memory: every CTA of an M
  // tile reads the same few KB per step, so they stay in L1 and need no staging.
  auto compute_step = [&](int step) {
    const int64_t chunk = step / planes;
    const int kh = taps.active[step % planes];
    const int first = taps.plane_first[kh], count = taps.plane_count[kh];
    const float* conv = smem + (step & 1) * p.conv_floats + t * kBW;
    for (int jj = 0; jj < count; ++jj) {
      const float* aj =
          a_lane + (taps.tap_w[first + jj] * kb_total + chunk * Cfg::kKb) * mt_total * 32 * kAW;
      const float* bj = conv + (taps.tap_col[first + jj] + (wn + g) * b_step) * 4 * kBW;
#pragma unroll
      for (int kb = 0; kb < Cfg::kKb; ++kb) {
        Frag<4, kSplit> a[Cfg::kTilesM];
        Frag<2, kSplit> bf[Cfg::kTilesN];
#pragma unroll
        for (int mt = 0; mt < Cfg::kTilesM; ++mt) {
          const float* ap = aj + (kb * mt_total + mt) * 32 * kAW;
          set_words(a[mt].big, __ldg(reinterpret_cast<const uint4*>(ap)));
          if constexpr (kSplit)
            set_words(a[mt].small, __ldg(reinterpret_cast<const uint4*>(ap + 4)));
        }
#pragma unroll
        for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
          const float* bp = bj + (kb * p.win_cols + nt * 8 * b_step) * 4 * kBW;
          if constexpr (kSplit) {
            const uint4 v = *reinterpret_cast<const uint4*>(bp);
            bf[nt].big[0] = v.x, bf[nt].small[0] = v.y, bf[nt].big[1] = v.z, bf[nt].small[1] = v.w;
          } else {
            const uint2 v = *reinterpret_cast<const uint2*>(bp);
            bf[nt].big[0] = v.x, bf[nt].big[1] = v.y;
          }
        }
        mma_tile<kSplit>(acc, a, bf);
        // "highest": chains of 16 channels (two k8 blocks) of one tap.
        if constexpr (kSplit) {
          if (kb % 2 == 1 || kb + 1 == Cfg::kKb) flush_into(sum, acc);
        }
      }
    }
  };

  // Pipeline, one barrier per step; the raw windows of the next raw_stages - 1 steps are in
  // flight while step s multiplies (one commit group per step, empty ones included):
  //   wait (own copies of s landed) -> convert own values of s into conv[s & 1] -> barrier
  //   (publishes conv[s & 1]; everyone is past step s-1, so conv[(s+1) & 1] is free next
  //   step) -> issue the copies of s + raw_stages - 1 into the raw buffer that s - 1 used
  //   (converted by this same thread before the barrier) -> multiply s.
  const int steps = planes * static_cast<int>(p.c_pad / Cfg::kChunk);  // the planner bounds it
  const int ahead = p.raw_stages - 1;
  for (int step = 0; step < ahead; ++step) {
    if (step < steps) load_window(step);
    cp_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    igemm_wait_oldest(ahead);
    convert_window(step);
    __syncthreads();
    if (step + ahead < steps) load_window(step + ahead);
    cp_async_commit();
    compute_step(step);
  }

  const int64_t q_count = r < p.Wo ? (p.Wo - r + p.s_out - 1) / p.s_out : 0;
  // Two neighbouring positions per store where they are adjacent and 8-byte aligned in out.
  const bool pairs = p.s_out == 1 && p.Wo % 2 == 0 && (reinterpret_cast<uintptr_t>(p.out) & 7) == 0;
#pragma unroll
  for (int mt = 0; mt < Cfg::kTilesM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + (wmt + mt) * 16 + g + half * 8;
      if (m >= p.M) continue;
      const float bias = p.bias ? p.bias[m] : 0.0f;
      float* out_row = p.out + ((n * p.M + m) * p.Ho + oh) * p.Wo;
#pragma unroll
      for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
        float v[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if constexpr (kSplit) {
            v[e] = sum[mt][nt][half * 2 + e] + bias;
          } else {
            v[e] = acc[mt][nt][half * 2 + e] + bias;
          }
        }
        const int64_t q = q0 + wn + nt * 8 + 2 * t;  // even
        if constexpr (kFill) {
          igemm_store_filled(p, out_row, r, q, v[0], v[1], bias);
        } else if (pairs && q + 1 < q_count) {
          *reinterpret_cast<float2*>(out_row + q) = make_float2(v[0], v[1]);
        } else {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (q + e < q_count) out_row[(q + e) * p.s_out + r] = v[e];
          }
        }
      }
    }
  }
}

template <class Cfg, bool kSplit>
void igemm_launch(CachingAllocator& alloc, IgemmProblem p, const float* w, int device) {
  std::shared_ptr<void> packed = igemm_pack_weights(alloc, p, w, kSplit, device);
  p.wp = static_cast<const float*>(packed.get());
  const unsigned blocks = static_cast<unsigned>(igemm_ctas(p));
  auto kernel =
      p.fill ? conv_igemm_kernel<Cfg, kSplit, true> : conv_igemm_kernel<Cfg, kSplit, false>;
  TGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes));
  kernel<<<blocks, Cfg::kThreads, p.smem_bytes>>>(p);
  TGRAD_CUDA_CHECK_LAUNCH("conv_igemm_kernel");
}

// Launches the one of Cfgs whose tile is t; false (nothing launched) when none is.
template <bool kSplit, class... Cfgs>
bool igemm_launch_tile(CachingAllocator& alloc, const IgemmProblem& p, const IgemmTiling& t,
                       const float* w, int device) {
  auto try_one = [&](auto cfg) {
    using Cfg = decltype(cfg);
    if (Cfg::kBM != t.bm || Cfg::kBN != t.bn || Cfg::kChunk != t.chunk ||
        Cfg::kMinBlocks != t.min_blocks)
      return false;
    igemm_launch<Cfg, kSplit>(alloc, p, w, device);
    return true;
  };
  return (try_one(Cfgs{}) || ...);
}

}  // namespace

std::shared_ptr<void> igemm_pack_weights(CachingAllocator& alloc, const IgemmProblem& p,
                                         const float* w, bool split, int device) {
  const int64_t values = p.kH * p.kW * p.c_pad * p.m_pad;
  std::shared_ptr<void> packed =
      alloc.allocate(values * (split ? 2 : 1) * int64_t{sizeof(float)}, device);
  auto* dst = static_cast<float*>(packed.get());
  if (split) {
    igemm_pack_weights_kernel<true><<<grid_for(values), kThreads>>>(w, dst, p);
  } else {
    igemm_pack_weights_kernel<false><<<grid_for(values), kThreads>>>(w, dst, p);
  }
  TGRAD_CUDA_CHECK_LAUNCH("igemm_pack_weights_kernel");
  return packed;
}

void conv_igemm(CachingAllocator& alloc, const ConvPlan& plan, IgemmProblem p, const float* w,
                int device) {
  if (plan.kernel == kKernelWgmma) {
    conv_wgmma_launch(alloc, p, plan.tile, plan.wgmma_max_taps, w, device);
    return;
  }
  TGRAD_CHECK(plan.kernel == kKernelMmaSync, "conv_igemm: the plan's kernel '", plan.kernel,
              "' is not an implicit GEMM");
  // The instances the planner's mma.sync tiles name (rule_mma_sync in conv_plan.cpp): 128 x 128
  // (warp tile 64 x 32), 64 x 256 (32 x 64), 32 x 256 (32 x 32); 3xTF32 at one CTA per SM
  // except 32 x 256, 1xTF32 at two.
  const IgemmTiling& t = plan.tile;
  bool launched;
  if (t.split) {
    launched =
        igemm_launch_tile<true, IgemmConfig<2, 4, 4, 4, 32, 1>, IgemmConfig<2, 4, 4, 4, 16, 1>,
                          IgemmConfig<2, 4, 4, 4, 8, 1>, IgemmConfig<2, 4, 2, 8, 32, 1>,
                          IgemmConfig<2, 4, 2, 8, 16, 1>, IgemmConfig<2, 4, 2, 8, 8, 1>,
                          IgemmConfig<1, 8, 2, 4, 16, 2>, IgemmConfig<1, 8, 2, 4, 8, 2>>(
            alloc, p, t, w, device);
  } else {
    launched = igemm_launch_tile<false, IgemmConfig<2, 4, 4, 4, 32>, IgemmConfig<2, 4, 4, 4, 16>,
                                 IgemmConfig<2, 4, 4, 4, 8>, IgemmConfig<2, 4, 2, 8, 32>,
                                 IgemmConfig<2, 4, 2, 8, 16>, IgemmConfig<2, 4, 2, 8, 8>,
                                 IgemmConfig<1, 8, 2, 4, 16>, IgemmConfig<1, 8, 2, 4, 8>>(
        alloc, p, t, w, device);
  }
  TGRAD_CHECK(launched, "conv_igemm: no mma.sync instance has the planned tile ", t.bm, "x", t.bn,
              "/", t.chunk, " at ", t.min_blocks, " CTAs per SM");
}

}  // namespace tgrad::cuda
