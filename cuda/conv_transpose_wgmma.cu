// The wgmma (sm_90a) implicit GEMM of conv_transpose forward and dgrad, "high" (1xTF32) and
// "highest" (3xTF32); index formula and problem fields in conv_transpose_igemm.cuh.
//
// Same decomposition as the mma.sync kernel (conv_transpose_igemm.cu): a CTA owns kBM rows m x
// kBN positions q of one (n, oh, phase) output row; its K loop runs over steps (kChunk channels
// of one src row kh); each step stages one src window in shared memory that every tap of the row
// reads at a shifted column. What changes is who multiplies: a warpgroup (4 warps, 128 threads)
// issues one asynchronous wgmma per (tap, k8 block) for its whole 64 x kN tile, instead of each
// warp issuing kTilesM x kTilesN m16n8k8 mmas and loading every B fragment into registers.
//
//   - A (weights) from registers: the A fragment of wgmma m64nNk8 for one warp is the m16n8k8
//     fragment of its 16 rows, so the packed weights of the mma.sync kernel serve unchanged
//     (igemm_pack_weights), read from L1 with one 128-bit load per (tap, k8 block). Except in
//     the all-taps "high" instance (kSmemA), whose weights are staged in shared memory a step
//     ahead and read through descriptors like B: in registers they serialized its wgmmas.
//   - B (the window) from shared memory through a matrix descriptor. wgmma wants TF32 B K-major
//     in "core matrices" of 8 columns x 4 channels (16 bytes a column). The converted window is
//     stored as [channel group c/4][column j][c % 4], so one core matrix is 128 contiguous bytes,
//     core matrices along N are 128 bytes apart (SBO) and along K win_cols*16 bytes (LBO). A
//     tap's shift by one column is a 16-byte move of the descriptor's start address: the window
//     is staged once per step and never copied per tap.
//
//   - Copies: 16 bytes per cp.async where window columns are consecutive src columns (stride 1
//     dgrad, every forward), from the 4-aligned column at or before the window's first; the
//     conversion then reads four channels of one column (copied by other threads) and writes
//     them with one 16-byte store. Against one-float copies this was S2 dgrad 2.58 -> 2.20 ms.
//
//   - Taps: "high" with M <= 64 issues a row's taps (up to 3) at once, their weights staged in
//     shared memory; longer rows, and M > 64, keep two taps' fragments in flight (kMaxTaps 0).
//     "highest" runs each tap's 16-channel chain (small x big, big x small, big x big) from zero,
//     waits for it and adds it into a float32 sum, so any tap count fits.
//   - Modes (WgmmaMode, one instantiation each): plain; fill (forward where one output phase
//     has all the taps writes the other phases' bias too); fold (M <= 32 in 2-D: GEMM rows
//     M.. compute the next output row, so the 64-row tile is full; IgemmProblem::fold_m).
//
// Pipeline, two barriers per step, two converted windows and up to four raw ones:
//   issue the wgmmas of step s on conv[s & 1] -> (kSmemA: load step s + 1's weights) -> issue
//   the copies of step s + raw_stages - 1 -> wait for this thread's copies of step s + 1,
//   barrier (everyone's have landed) -> convert them into conv[(s + 1) & 1] (read by step
//   s - 1, which every warpgroup finished before the last barrier; kSmemA: store the weights
//   into A stage (s + 1) & 1 likewise) -> fence the generic writes for the async proxy -> wait
//   for this warpgroup's wgmmas -> barrier.
// The conversion and the copies of the next step run while the tensor cores multiply this one,
// and two CTAs per SM fill each other's gaps. Measured against the mma.sync kernel in
// docs/performance.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <type_traits>

#include "cuda/conv_transpose_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/igemm_device.cuh"
#include "cuda/kernel_stats.h"
#include "cuda/tf32_mma.cuh"
#include "cuda/wgmma.cuh"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

template <int kWgM_, int kWgN_, int kN_, int kChunk_, int kMaxTaps_, int kMinBlocks_, bool kSplit_>
struct WgmmaConfig {
  static constexpr bool kSplit = kSplit_;           // 3xTF32 ("highest") instead of 1xTF32 ("high")
  static constexpr int kMinBlocks = kMinBlocks_;    // CTAs per SM registers and smem must allow
  static constexpr int kWgM = kWgM_, kWgN = kWgN_;  // warpgroups along M and N
  static constexpr int kN = kN_;                    // wgmma N: positions of one warpgroup
  static constexpr int kThreads = kWgM * kWgN * 128;
  static constexpr int kBM = 64 * kWgM;
  static constexpr int kBN = kN * kWgN;
  static constexpr int kChunk = kChunk_;  // channels per step, a multiple of 8
  static constexpr int kKb = kChunk / 8;
  // 1xTF32: the most taps of one src row; the A fragments of all of them are loaded into
  // registers before the step's wgmmas. 0: any count, two taps' A fragments in flight (a tap's
  // registers are reloaded once the wgmmas of the tap two before it have completed). (3xTF32
  // waits after each tap, so any count runs.)
  static constexpr int kMaxTaps = kMaxTaps_;
  // 1xTF32 with all of a row's taps at once: A staged in shared memory (IgemmTiling::a_smem_taps,
  // below), since their fragments in registers beside the 64 accumulators left ptxas too few
  // registers at two CTAs per SM and it serialized the wgmmas (C7512).
  static constexpr bool kSmemA = !kSplit_ && kMaxTaps_ > 0;
};

// f(std::integral_constant<int, count>{}) for a runtime count in 1..kMax.
template <int kMax, class F>
__device__ inline void with_count(int count, F&& f) {
  if constexpr (kMax > 1) {
    if (count < kMax) {
      with_count<kMax - 1>(count, f);
      return;
    }
  }
  f(std::integral_constant<int, kMax>{});
}

// The epilogue and tap-table variants, each an instantiation of its own: the "high"
// configurations run at the register cap, and a runtime fill branch in the shared kernel cost
// the other problems up to 40% (S2 dgrad high 2.03 -> 2.89 ms).
enum WgmmaMode : int {
  kPlain = 0,
  kFill = 1,  // p.fill: one phase has taps, the CTA also writes the others' bias
  kFold = 2,  // p.fold_m > 0: GEMM rows fold_m.. compute the next output row
};

template <class Cfg, int kMode>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    conv_wgmma_kernel(IgemmProblem p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) float smem[];
  __shared__ IgemmTaps taps;

  const IgemmBlock blk = igemm_block(p, kMode == kFill ? p.phase0 : 0, Cfg::kBM, Cfg::kBN);
  const int r = blk.r, oh = blk.oh;
  const int64_t m0 = blk.m0, q0 = blk.q0, n = blk.n;

  // Fold: the folded kh' reads src row 2*oh + 1 + pH - kh' (forward) or 2*oh - pH + kh'
  // (dgrad), the rows the true kh of both output rows read (igemm_pack_weights_kernel).
  const int oh_taps = kMode == kFold ? 2 * oh + (p.gather ? 1 : 0) : oh;
  if (threadIdx.x == 0) igemm_list_taps(p, oh_taps, r, q0, taps);
  __syncthreads();
  const int planes = taps.planes;
  const int steps = planes * static_cast<int>(p.c_pad / Cfg::kChunk);

  // Shared memory: the converted window [2 stages], the weights [2 stages] (kSmemA), then the
  // raw window [raw_stages].
  float* const a_smem = smem + 2 * p.conv_floats;
  float* const raw_base = a_smem + 2 * p.a_floats;
  const int raw_floats = Cfg::kChunk * p.raw_pitch;
  // Copies: when window columns are consecutive src columns (win_step 1), 16 bytes a copy from
  // the 4-aligned column at or before col0 (raw column j + lead holds window column j), else
  // one float a copy (igemm_load_window). Either way the conversion reads values other threads
  // copied, so a barrier separates the two.
  const bool vec = p.win_step == 1;
  const int64_t col_al = taps.col0 - (((taps.col0 % 4) + 4) % 4);
  const int lead = vec ? static_cast<int>(taps.col0 - col_al) : 0;
  const int groups = (lead + p.win_cols + 3) / 4;  // 16-byte column groups per channel
  auto load_window = [&](int step) {
    float* raw = raw_base + (step % p.raw_stages) * raw_floats;
    if (!vec) {
      igemm_load_window<Cfg::kChunk, Cfg::kThreads>(p, taps, raw, step, n);
      return;
    }
    const int64_t chunk = step / planes;
    const int row = taps.plane_row[taps.active[step % planes]];
    const int c_left = static_cast<int>(min_i64(p.C - chunk * Cfg::kChunk, Cfg::kChunk));
    const float* base = p.src + ((n * p.C + chunk * Cfg::kChunk) * p.Hs + row) * p.Ws;
    const int64_t plane_stride = p.Hs * p.Ws;
    for (int i = threadIdx.x; i < Cfg::kChunk * groups; i += Cfg::kThreads) {
      const int c = i / groups, grp = i - c * groups;
      load_vec4(raw + c * p.raw_pitch + 4 * grp, base + c * plane_stride, col_al + 4 * grp, p.Ws,
                c < c_left, p.src);
    }
  };
  // raw -> conv[(c/4)*win_cols + j][c % 4], rounded to TF32: four channels of one column a
  // thread, one 16-byte store. 3xTF32: the residuals in a second plane kChunk*win_cols floats on.
  auto convert_window = [&](int step) {
    const float* raw = raw_base + (step % p.raw_stages) * raw_floats + lead;
    float* conv = smem + (step & 1) * p.conv_floats;
    int j = threadIdx.x, c4 = 0;
    while (j >= p.win_cols)
      j -= p.win_cols, ++c4;
    for (; c4 < Cfg::kChunk / 4;) {
      const float* r = raw + 4 * c4 * p.raw_pitch + j;
      float* dst = conv + (c4 * p.win_cols + j) * 4;
      if constexpr (Cfg::kSplit) {
        uint4 big, small;
        split_tf32(r[0], big.x, small.x);
        split_tf32(r[p.raw_pitch], big.y, small.y);
        split_tf32(r[2 * p.raw_pitch], big.z, small.z);
        split_tf32(r[3 * p.raw_pitch], big.w, small.w);
        *reinterpret_cast<uint4*>(dst) = big;
        *reinterpret_cast<uint4*>(dst + Cfg::kChunk * p.win_cols) = small;
      } else {
        *reinterpret_cast<uint4*>(dst) =
            make_uint4(to_tf32(r[0]), to_tf32(r[p.raw_pitch]), to_tf32(r[2 * p.raw_pitch]),
                       to_tf32(r[3 * p.raw_pitch]));
      }
      j += Cfg::kThreads;
      while (j >= p.win_cols)
        j -= p.win_cols, ++c4;
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4, wq = warp % 4;  // warpgroup, warp within it
  const int wgm = wg / Cfg::kWgN, wgn = wg % Cfg::kWgN;
  const int64_t kb_total = p.c_pad / 8, mt_total = p.m_pad / 16;
  // This warp's A fragments (its 16 rows): + (tap*kb_total + kb)*a_frag_stride. A fragment is
  // one uint4 per lane; 3xTF32 two (value, residual).
  constexpr int kAU = Cfg::kSplit ? 2 : 1;
  const int64_t a_frag_stride = mt_total * 32 * kAU;
  const uint4* const a_lane =
      reinterpret_cast<const uint4*>(p.wp) + ((m0 / 16 + wgm * 4 + wq) * 32 + lane) * kAU;

  // kSmemA: the weights of a step's taps, staged in shared memory as K-major core matrices
  // [tap][c/4][m][c % 4] (kBM*kChunk floats a tap), one stage a step ahead of the wgmmas that read
  // it. Thread tid carries one packed m16n8k8 fragment a tap (warp -> 16 rows x 8 channels, lane
  // -> (g, t) as in the mma.sync kernel): one 16-byte load, loaded while the tensor cores run the
  // step before, and four 4-byte stores, a warp's 32 lanes filling 32 consecutive floats.
  constexpr int kAFrags = Cfg::kBM / 16 * Cfg::kKb;  // fragments of one tap's step
  static_assert(!Cfg::kSmemA || Cfg::kThreads == 32 * kAFrags, "one fragment a thread a tap");
  constexpr int kARegTaps = Cfg::kSmemA ? Cfg::kMaxTaps : 1;
  uint4 a_next[kARegTaps];
  int a_next_count = 0;
  const int a_mt = warp % (Cfg::kBM / 16), a_kb = warp / (Cfg::kBM / 16);
  const uint4* const a_thread =
      reinterpret_cast<const uint4*>(p.wp) + (m0 / 16 + a_mt) * 32 + lane + a_kb * mt_total * 32;
  const auto load_a = [&](int step) {
    const int64_t chunk = step / planes;
    const int kh = taps.active[step % planes];
    const int first = taps.plane_first[kh];
    a_next_count = taps.plane_count[kh];
#pragma unroll
    for (int jj = 0; jj < kARegTaps; ++jj) {
      if (jj < a_next_count)
        a_next[jj] = __ldg(a_thread +
                           (taps.tap_w[first + jj] * kb_total + chunk * Cfg::kKb) * mt_total * 32);
    }
  };
  const auto store_a = [&](int step) {
    float* const dst = a_smem + (step & 1) * p.a_floats;
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int jj = 0; jj < kARegTaps; ++jj) {
      if (jj < a_next_count) {
        float* const d = dst + jj * Cfg::kBM * Cfg::kChunk + (a_mt * 16 + g) * 4 + t;
        const uint4 v = a_next[jj];
        // Fragment value i is row g + 8*(i & 1), channel t + 4*(i >> 1) of the fragment.
        d[(2 * a_kb * Cfg::kBM) * 4] = __uint_as_float(v.x);
        d[(2 * a_kb * Cfg::kBM + 8) * 4] = __uint_as_float(v.y);
        d[((2 * a_kb + 1) * Cfg::kBM) * 4] = __uint_as_float(v.z);
        d[((2 * a_kb + 1) * Cfg::kBM + 8) * 4] = __uint_as_float(v.w);
      }
    }
  };
  // Descriptor of tap jj's k8 block kb in stage buf: core matrices 128 bytes apart along M (8
  // rows), kBM*16 bytes along K (4 channels).
  const uint32_t a_smem_addr = smem_addr(a_smem) + static_cast<uint32_t>(wgm * 64 * 16);
  constexpr uint32_t kLboA = Cfg::kBM * 16;
  const auto a_desc = [&](int buf, int jj, int kb) {
    return wgmma_desc(
        a_smem_addr + static_cast<uint32_t>((buf * p.a_floats + jj * Cfg::kBM * Cfg::kChunk) * 4 +
                                            2 * kb * kLboA),
        kLboA, 128);
  };
  // Descriptor pieces: this warpgroup's first column in conv[0], LBO, SBO.
  const uint32_t conv_addr = smem_addr(smem) + static_cast<uint32_t>(wgn * Cfg::kN * 16);
  const uint32_t lbo = static_cast<uint32_t>(p.win_cols) * 16;
  float acc[Cfg::kN / 2] = {};
  // 3xTF32: each tap's chain (16 channels, three products each) is added into sum with
  // round-to-nearest FADDs, as in the mma.sync kernel (tf32_mma.cuh, flush_into).
  float sum[Cfg::kSplit ? Cfg::kN / 2 : 1] = {};

  const int ahead = p.raw_stages - 1;
  for (int step = 0; step < ahead; ++step) {
    if (step < steps) load_window(step);
    cp_async_commit();
  }
  if (steps > 0) {
    if constexpr (Cfg::kSmemA) load_a(0);
    igemm_wait_oldest(ahead);
    __syncthreads();
    convert_window(0);
    if constexpr (Cfg::kSmemA) store_a(0);
  }
  fence_proxy_async();
  __syncthreads();

  for (int step = 0; step < steps; ++step) {
    const int64_t chunk = step / planes;
    const int kh = taps.active[step % planes];
    const int first = taps.plane_first[kh], count = taps.plane_count[kh];
    const uint32_t conv_step = conv_addr + static_cast<uint32_t>((step & 1) * p.conv_floats * 4);
    // kSmemA: the step's kTaps x kKb wgmmas as straight-line code (one instance per tap count),
    // A (staged before the last barrier) and B both through descriptors.
    auto issue_smem_a = [&](auto taps_c) {
      constexpr int kTaps = decltype(taps_c)::value;
      wgmma_fence();
#pragma unroll
      for (int jj = 0; jj < kTaps; ++jj) {
        const uint32_t tap_addr = conv_step + static_cast<uint32_t>(taps.tap_col[first + jj] * 16);
#pragma unroll
        for (int kb = 0; kb < Cfg::kKb; ++kb)
          wgmma_tf32_ss<Cfg::kN>(acc, a_desc(step & 1, jj, kb),
                                 wgmma_desc(tap_addr + 2 * kb * lbo, lbo, 128));
      }
      wgmma_commit();
    };
    // 1xTF32, any tap count: one commit group a tap, A fragments double-buffered.
    auto issue_pipelined = [&] {
      uint4 a[2][Cfg::kKb];
      auto tap = [&](auto buf_c, int jj) {
        constexpr int kBuf = decltype(buf_c)::value;
        if (jj >= 2) wgmma_wait_one();  // the tap two before, which read a[kBuf], is done
        const uint4* aj =
            a_lane + (taps.tap_w[first + jj] * kb_total + chunk * Cfg::kKb) * mt_total * 32;
#pragma unroll
        for (int kb = 0; kb < Cfg::kKb; ++kb)
          a[kBuf][kb] = __ldg(aj + kb * mt_total * 32);
        const uint32_t tap_addr = conv_step + static_cast<uint32_t>(taps.tap_col[first + jj] * 16);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < Cfg::kKb; ++kb)
          wgmma_tf32<Cfg::kN>(acc, a[kBuf][kb], wgmma_desc(tap_addr + 2 * kb * lbo, lbo, 128));
        wgmma_commit();
      };
      for (int jj = 0; jj < count; jj += 2) {
        tap(std::integral_constant<int, 0>{}, jj);
        if (jj + 1 < count) tap(std::integral_constant<int, 1>{}, jj + 1);
      }
    };
    // 3xTF32, one tap: small products first, then the big one; the chain starts from zero
    // (scale_d 0), so the flushed accumulators need no clearing.
    auto issue_split = [&](int jj) {
      const uint4* aj =
          a_lane + (taps.tap_w[first + jj] * kb_total + chunk * Cfg::kKb) * a_frag_stride;
      uint4 a_big[Cfg::kKb], a_small[Cfg::kKb];
#pragma unroll
      for (int kb = 0; kb < Cfg::kKb; ++kb) {
        a_big[kb] = __ldg(aj + kb * a_frag_stride);
        a_small[kb] = __ldg(aj + kb * a_frag_stride + 1);
      }
      const uint32_t big = conv_step + static_cast<uint32_t>(taps.tap_col[first + jj] * 16);
      const uint32_t small = big + static_cast<uint32_t>(Cfg::kChunk * p.win_cols * 4);
      wgmma_fence();
#pragma unroll
      for (int kb = 0; kb < Cfg::kKb; ++kb)
        wgmma_tf32<Cfg::kN>(acc, a_small[kb], wgmma_desc(big + 2 * kb * lbo, lbo, 128), kb > 0);
#pragma unroll
      for (int kb = 0; kb < Cfg::kKb; ++kb)
        wgmma_tf32<Cfg::kN>(acc, a_big[kb], wgmma_desc(small + 2 * kb * lbo, lbo, 128));
#pragma unroll
      for (int kb = 0; kb < Cfg::kKb; ++kb)
        wgmma_tf32<Cfg::kN>(acc, a_big[kb], wgmma_desc(big + 2 * kb * lbo, lbo, 128));
      wgmma_commit();
    };
    auto flush = [&] {
#pragma unroll
      for (int i = 0; i < Cfg::kN / 2; ++i)
        sum[i] += acc[i];
    };
    if constexpr (Cfg::kSplit) {
      for (int jj = 0; jj < count; ++jj) {
        if (jj > 0) {
          wgmma_wait_all();
          flush();
        }
        issue_split(jj);
      }
    } else if constexpr (Cfg::kMaxTaps == 0) {
      issue_pipelined();
    } else {
      static_assert(Cfg::kSmemA, "1xTF32 with a tap limit stages its weights in shared memory");
      with_count<Cfg::kMaxTaps>(count, issue_smem_a);
    }
    // kSmemA: the weights of step + 1 are loaded here, in flight through the copies, the wait
    // and the conversion, and stored into the stage step - 1's wgmmas read (done before the
    // last barrier).
    if constexpr (Cfg::kSmemA) {
      if (step + 1 < steps) load_a(step + 1);
    }
    if (step + ahead < steps) load_window(step + ahead);
    cp_async_commit();
    if (step + 1 < steps) {
      igemm_wait_oldest(ahead);
      __syncthreads();  // every thread's copies of step + 1 have landed
      convert_window(step + 1);
      if constexpr (Cfg::kSmemA) store_a(step + 1);
    }
    fence_proxy_async();
    wgmma_wait_all();
    if constexpr (Cfg::kSplit) flush();
    __syncthreads();
  }

  auto result = [&](int i) {
    if constexpr (Cfg::kSplit) {
      return sum[i];
    } else {
      return acc[i];
    }
  };
  // acc[nt*4 + i] holds row g + 8*(i / 2), column nt*8 + 2t + i % 2 of this warp's 16 x kN.
  const int g = lane / 4, t = lane % 4;
  const int64_t q_count = r < p.Wo ? (p.Wo - r + p.s_out - 1) / p.s_out : 0;
  const bool pairs = p.s_out == 1 && p.Wo % 2 == 0 && (reinterpret_cast<uintptr_t>(p.out) & 7) == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t m = m0 + wgm * 64 + wq * 16 + g + half * 8;
    if (m >= p.M) continue;
    int64_t m_out = m, oh_out = oh, m_total = p.M, ho_total = p.Ho;
    if constexpr (kMode == kFold) {
      const bool second = m >= p.fold_m;
      m_out = second ? m - p.fold_m : m;
      oh_out = 2 * oh + second;
      m_total = p.fold_m, ho_total = p.fold_ho;
      if (oh_out >= ho_total) continue;
    }
    const float bias = p.bias ? p.bias[m_out] : 0.0f;
    float* out_row = p.out + ((n * m_total + m_out) * ho_total + oh_out) * p.Wo;
#pragma unroll
    for (int nt = 0; nt < Cfg::kN / 8; ++nt) {
      const float v0 = result(nt * 4 + half * 2) + bias, v1 = result(nt * 4 + half * 2 + 1) + bias;
      const int64_t q = q0 + wgn * Cfg::kN + nt * 8 + 2 * t;  // even
      if constexpr (kMode == kFill) {
        igemm_store_filled(p, out_row, r, q, v0, v1, bias);
      } else if (pairs && q + 1 < q_count) {
        *reinterpret_cast<float2*>(out_row + q) = make_float2(v0, v1);
      } else {
        if (q < q_count) out_row[q * p.s_out + r] = v0;
        if (q + 1 < q_count) out_row[(q + 1) * p.s_out + r] = v1;
      }
    }
  }
#else
  // Built without sm_90a's features the body would be empty and the output never written;
  // trap instead (the host probe below normally refuses before a launch gets here).
  __trap();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Writes 1 when this file's device code was compiled with sm_90a's features (wgmma), 0 when
// not: the kernel above is empty without them.
__global__ void wgmma_arch_probe_kernel(int* has_features) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *has_features = 1;
#else
  *has_features = 0;
#endif
}

template <class Cfg>
void wgmma_launch(CachingAllocator& alloc, IgemmProblem p, const float* w, int device) {
  std::shared_ptr<void> packed = igemm_pack_weights(alloc, p, w, Cfg::kSplit, device);
  p.wp = static_cast<const float*>(packed.get());
  const unsigned blocks = static_cast<unsigned>(igemm_ctas(p));
  auto kernel = p.fill         ? conv_wgmma_kernel<Cfg, kFill>
                : p.fold_m > 0 ? conv_wgmma_kernel<Cfg, kFold>
                               : conv_wgmma_kernel<Cfg, kPlain>;
  TGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes));
  kernel<<<blocks, Cfg::kThreads, p.smem_bytes>>>(p);
  TGRAD_CUDA_CHECK_LAUNCH("conv_wgmma_kernel");
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

// Launches the one of Cfgs whose tile and tap limit the plan names; false when none does.
template <class... Cfgs>
bool wgmma_launch_tile(CachingAllocator& alloc, const IgemmProblem& p, const IgemmTiling& t,
                       int max_taps, const float* w, int device) {
  auto try_one = [&](auto cfg) {
    using Cfg = decltype(cfg);
    if (Cfg::kBM != t.bm || Cfg::kBN != t.bn || Cfg::kChunk != t.chunk ||
        Cfg::kMinBlocks != t.min_blocks || Cfg::kSplit != t.split ||
        (!Cfg::kSplit && Cfg::kMaxTaps != max_taps) ||
        (Cfg::kSmemA ? Cfg::kMaxTaps : 0) != t.a_smem_taps)
      return false;
    wgmma_launch<Cfg>(alloc, p, w, device);
    return true;
  };
  return (try_one(Cfgs{}) || ...);
}

}  // namespace

void check_wgmma_code(int device) {
  static std::mutex mutex;
  static std::array<int, 64> checked{};  // 0 unknown, 1 present
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= 0 && device < static_cast<int>(checked.size()) && checked[device] == 1) return;
  cudaFuncAttributes attr{};
  const cudaError_t found = cudaFuncGetAttributes(&attr, wgmma_arch_probe_kernel);
  int has = 0;
  if (found == cudaSuccess) {
    int* flag = nullptr;
    TGRAD_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    TGRAD_CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    wgmma_arch_probe_kernel<<<1, 1>>>(flag);
    const cudaError_t launched = cudaGetLastError();
    const cudaError_t copied = launched == cudaSuccess
                                   ? cudaMemcpy(&has, flag, sizeof(int), cudaMemcpyDeviceToHost)
                                   : launched;
    cudaFree(flag);
    TGRAD_CUDA_CHECK(copied);
  } else {
    (void)cudaGetLastError();  // clear the lookup's error; the check below reports it
  }
  TGRAD_CHECK(
      found == cudaSuccess && has == 1,
      "conv_wgmma: this tgrad build has no sm_90a code for the wgmma conv kernel on device ",
      device, " (", cudaGetErrorString(found),
      "); build cuda/conv_transpose_wgmma.cu with CUDA_ARCHITECTURES 90a-real");
  if (device >= 0 && device < static_cast<int>(checked.size())) checked[device] = 1;
}

// The kernel is built for sm_90a alone (cuda/CMakeLists.txt), which runs on compute
// capability 9.0 only.
bool wgmma_supported(int device) {
  int major = 0, minor = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
         major == 9 && minor == 0;
}

int64_t conv_wgmma_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

void conv_wgmma_launch(CachingAllocator& alloc, IgemmProblem p, const IgemmTiling& tile,
                       int max_taps, const float* w, int device) {
  check_wgmma_code(device);
  // The instances the planner's wgmma tiles name (rule_wgmma in conv_plan.cpp): 3xTF32 with
  // N = 64 a warpgroup, two along M (M > 64) or along N; 1xTF32 with N = 128, any tap count
  // (two taps' A fragments in flight, two warpgroups along M or N) or, along N only (M <= 64),
  // up to three taps loaded at once.
  const bool launched = wgmma_launch_tile<
      WgmmaConfig<2, 1, 64, 16, 3, 2, true>, WgmmaConfig<1, 2, 64, 16, 3, 2, true>,
      WgmmaConfig<1, 2, 128, 16, 0, 2, false>, WgmmaConfig<2, 1, 128, 16, 0, 2, false>,
      WgmmaConfig<1, 2, 128, 16, 3, 2, false>>(alloc, p, tile, max_taps, w, device);
  TGRAD_CHECK(launched, "conv_wgmma: no wgmma instance has the planned tile ", tile.bm, "x",
              tile.bn, "/", tile.chunk, (tile.split ? " 3xTF32" : " 1xTF32"), " with max_taps ",
              max_taps);
}

}  // namespace tgrad::cuda
