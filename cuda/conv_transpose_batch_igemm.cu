// The batch-positions implicit GEMM of conv_transpose forward and dgrad (planner row
// "batch-igemm"). Index formula, per output phase (conv_batch_igemm.h):
//   out[n, m, qy*os + oby, qx*os + obx] = bias[m]
//       + sum_{(kh, kw) of the phase} sum_c W[m, c, kh, kw] * src[n, c, qy*ss + sby(kh),
//                                                                qx*ss + sbx(kw)]
// GEMM rows are m; columns are j = (n*Qy + qy)*Qx + qx over the whole batch; K is (tap, c).
//
// Why a kernel of its own: the implicit GEMMs of conv_transpose_igemm.cu tile one output row,
// so DCGAN's 4x4..32x32 images or U-Net's 28x28 leave their 128/256-wide tiles mostly empty,
// and the GEMM path (conv_transpose_gemm.cu) fills its tiles only by writing a column buffer of
// C_out*taps x batch*positions floats and reading it back, a DRAM round trip as large as the
// GEMM's operands (docs/performance.md, run 31). Here the B tile is gathered straight from src
// into shared memory (cp.async, zero fill outside the plane), so nothing but x, w (and its
// packed copy) and y moves through DRAM. Tensor cores through mma.sync (tf32_mma.cuh's helpers,
// any sm_80+ GPU), not wgmma: run 34 (docs/performance.md) measured it ahead of the GEMM path
// for M <= 256 and of mma.sync's row tiles on 2-D images; run 37 profiled it and cut the K
// loop's address arithmetic and the epilogue's scattered stores (65-87 TFLOP/s at "high" on the
// 2-D suite layers); what was tried and what bounds it now is written there.
//
// Layout. A (weights) is packed once per call by pack_kernel into [tap][c_pad][m_pad], already
// rounded to TF32 (and for 3xTF32 a second array of residuals), zero padded, so a K step's A
// tile is kBK rows of kBM contiguous floats: 16-byte cp.async, no bounds checks. Within each 16
// rows m the order is m0, m8, m1, m9, ..., m7, m15 (a_slot): an A fragment's rows g and g + 8
// sit side by side, so a fragment is two 8-byte loads, not four 4-byte ones. B is kBK
// channels x kBN columns of one tap: each thread owns one column for the whole K loop (its (n,
// qy, qx) decomposed once) and kBK * kBN / kThreads rows of it; a warp's lanes are consecutive
// columns, so forward's loads (ss = 1) are coalesced. Both tiles are k-major with a row pitch of
// 8 mod 32 floats, which makes every fragment load conflict-free. B is converted to TF32 (or
// split) as fragments are read: each value is read by one warp row only.
//
// K order: taps outer, channels inner, kBK channels a step; kBatchIgemmStages steps in flight.
// "highest" (3xTF32) flushes each step's chain into a float32 register sum (tf32_mma.cuh says
// why). Each output is written once by one CTA from a fixed-order sum: deterministic.
// Index arithmetic: the plane offsets are 32-bit (the planner's fits_plane32), every offset that
// crosses channels or samples is int64.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/batch_igemm_device.cuh"
#include "cuda/conv_batch_igemm.h"
#include "cuda/conv_transpose_batch_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

namespace {

constexpr int kBK = kBatchIgemmChunk;
constexpr int kStages = kBatchIgemmStages;
constexpr int kThreadsBI = kBatchIgemmThreads;

template <int kWarpsM_, int kWarpsN_, int kFragM_, int kFragN_, bool kSplit_, int kMinBlocks_>
struct BiConfig {
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kFragM = kFragM_, kFragN = kFragN_;  // m16 / n8 blocks per warp
  static constexpr bool kSplit = kSplit_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kBM = kWarpsM * kFragM * 16, kBN = kWarpsN * kFragN * 8;
  static constexpr int kLdA = kBM + 8, kLdB = kBN + 8;  // == 8 mod 32: conflict-free fragments
  static constexpr int kAFloats = kBK * kLdA * (kSplit ? 2 : 1), kBFloats = kBK * kLdB;
  static constexpr int kStageFloats = kAFloats + kBFloats;
  static constexpr int kSmemBytes = kStages * kStageFloats * 4;
  static_assert(kWarpsM * kWarpsN * 32 == kThreadsBI, "one thread count for every instance");
  static_assert(kThreadsBI % kBN == 0 && kBK * kBN % kThreadsBI == 0, "B rows per thread");
  static_assert(kBK * kBM / 4 % kThreadsBI == 0, "A vectors per thread");
  static_assert(kSmemBytes == batch_igemm_smem_bytes(kBM, kBN, kSplit), "the planner's count");
};

// The slot of row m within the packed row block (see Layout): rows g and g + 8 of each 16 adjacent.
__host__ __device__ constexpr int64_t a_slot(int64_t m) {
  return (m & ~int64_t{15}) | (m & 7) << 1 | (m >> 3 & 1);
}
static_assert(a_slot(0) == 0 && a_slot(8) == 1 && a_slot(1) == 2 && a_slot(15) == 15 &&
                  a_slot(16) == 16 && a_slot(25) == 19,
              "a_slot interleaves rows g and g + 8");

// Group after group, wp[(tap*c_pad + c)*m_pad + a_slot(m)] = tf32(W[m, c, tap]) (residual into
// wp_small when split), zero outside M x C; W (one group's) is batch_igemm_weight's. Staged by
// batch_igemm_pack_tiles, m fastest (a_slot permutes rows within 16, so a tile's rows are one
// run of slots).
template <bool kGather>
__global__ void __launch_bounds__(kPackThreads)
    pack_kernel(const float* __restrict__ w, float* __restrict__ big, float* __restrict__ small,
                int groups, int C, int M, int taps, int c_pad, int m_pad) {
  const int64_t per_group = int64_t{taps} * c_pad * m_pad;
  batch_igemm_pack_tiles<kGather, false>(
      w, big, small, groups, C, M, taps, c_pad, m_pad, [&](int g, int tap, int c, int m) {
        return g * per_group + (int64_t{tap} * c_pad + c) * m_pad + a_slot(m);
      });
}

template <class Cfg>
__global__ void __launch_bounds__(kThreadsBI, Cfg::kMinBlocks)
    batch_igemm_kernel(const BiArgs args) {
  const BiArgs a = batch_igemm_group(args);
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kLdA = Cfg::kLdA, kLdB = Cfg::kLdB;
  constexpr bool kSplit = Cfg::kSplit;
  constexpr int kFM = Cfg::kFragM, kFN = Cfg::kFragN;
  extern __shared__ __align__(16) float smem[];
  __shared__ BiTaps tt;
  const int* const tap_kh = tt.kh;
  const int* const tap_sh = tt.sh;
  const int* const tap_kw = tt.kw;
  const int* const tap_sw = tt.sw;

  const int tid = static_cast<int>(threadIdx.x);
  const BiTile tile = batch_igemm_tile(a, tt, kBM, kBN);
  if (tile.n0 >= tile.n_total) return;  // this phase has fewer positions than the largest one
  const BatchIgemmAxis ay = tile.ay, ax = tile.ax;
  const int64_t n0 = tile.n0;
  const int m0 = tile.m0;
  const int taps = ay.taps * ax.taps;  // the planner keeps this <= kBatchIgemmMaxTaps
  const int c_steps = static_cast<int>(a.c_pad / kBK);
  const int steps = taps * c_steps;
  const int64_t plane_s = int64_t{a.Hs} * a.Ws;

  // This thread's B column, fixed for the whole K loop.
  const int col = tid % kBN, row0 = tid / kBN;
  constexpr int kRowStep = kThreadsBI / kBN, kRows = kBK * kBN / kThreadsBI;
  const BiSource source = batch_igemm_source(a, tile, n0 + col);
  const bool col_ok = source.ok;
  const int sy0 = source.sy0, sx0 = source.sx0;
  const float* const src_n = source.src_n;

  float* const smem_f = smem;
  const auto a_tile = [&](int stage) { return smem_f + stage * Cfg::kStageFloats; };
  const auto b_tile = [&](int stage) { return smem_f + stage * Cfg::kStageFloats + Cfg::kAFloats; };

  // The next step to stage: tap (ld_th, ld_tw), channels from ld_c0. load() stages the steps in
  // order, so a cursor replaces the divisions by c_steps and the tap count (Nsight Compute, run
  // 37: they and the per-row 64-bit address arithmetic were half of the K loop's instructions).
  int ld_th = 0, ld_tw = 0, ld_c0 = 0;
  // A: this thread's first 16-byte vector of the packed weights' row block, and the float
  // distance between its vectors (kThreadsBI / (kBM / 4) rows apart).
  constexpr int kAVecs = kBK * kBM / 4 / kThreadsBI, kARowStep = kThreadsBI / (kBM / 4);
  static_assert(kThreadsBI % (kBM / 4) == 0, "A vectors per thread start on whole rows");
  const int a_r0 = tid / (kBM / 4), a_c4 = (tid % (kBM / 4)) * 4;
  const int64_t a_off0 = int64_t{a_r0} * a.m_pad + m0 + a_c4;
  const int64_t a_vstep = int64_t{kARowStep} * a.m_pad;
  const int64_t b_rstep = int64_t{kRowStep} * plane_s;

  // Stages the cursor's step into `stage` and advances the cursor.
  const auto load = [&](int stage) {
    const int th = ld_th, tw = ld_tw, c0 = ld_c0;
    if ((ld_c0 += kBK) == a.c_pad) {
      ld_c0 = 0;
      if (++ld_tw == ax.taps) ld_tw = 0, ++ld_th;
    }
    const int wtap = tap_kh[th] * a.kW + tap_kw[tw];
    // A: kBK rows of kBM floats from the packed weights.
    float* at = a_tile(stage) + a_r0 * kLdA + a_c4;
    const int64_t a_step = (int64_t{wtap} * a.c_pad + c0) * a.m_pad + a_off0;
#pragma unroll
    for (int v = 0; v < kAVecs; ++v) {
      cp_async16(at + v * kARowStep * kLdA, a.a_big + a_step + v * a_vstep);
      if constexpr (kSplit)
        cp_async16(at + kBK * kLdA + v * kARowStep * kLdA, a.a_small + a_step + v * a_vstep);
    }
    // B: this thread's column, kRows channels of the tap's src element (zero outside). Rows
    // are kRowStep channels apart: one pointer step each; outside the plane every row reads
    // nothing (size 0) from the always valid a.src.
    float* bt = b_tile(stage) + row0 * kLdB + col;
    const int sy = sy0 + tap_sh[th], sx = sx0 + tap_sw[tw];
    const bool in = col_ok && sy >= 0 && sy < a.Hs && sx >= 0 && sx < a.Ws;
    const float* p = in ? src_n + int64_t{sy} * a.Ws + sx + int64_t{c0 + row0} * plane_s : a.src;
    const int64_t rs = in ? b_rstep : 0;
    if (c0 + kBK <= a.C) {  // every channel of the chunk exists (uniform across the CTA)
#pragma unroll
      for (int r = 0; r < kRows; ++r, p += rs)
        cp_async4(bt + r * kRowStep * kLdB, p, in);
    } else {
#pragma unroll
      for (int r = 0; r < kRows; ++r, p += rs) {
        const bool ok = in && c0 + row0 + r * kRowStep < a.C;
        cp_async4(bt + r * kRowStep * kLdB, ok ? p : a.src, ok);
      }
    }
  };

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
  const int wm = (warp % Cfg::kWarpsM) * kFM * 16, wn = (warp / Cfg::kWarpsM) * kFN * 8;
  float acc[kFM][kFN][4] = {};
  float sum[kSplit ? kFM : 1][kSplit ? kFN : 1][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  // Rotating stage indices (read: step s; write: step s + kStages - 1) instead of s % kStages.
  int rd = 0, wr = kStages - 1;
  for (int s = 0; s < steps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step s is visible to all; the slot refilled below was read at s - 1
    if (s + kStages - 1 < steps) load(wr);
    cp_async_commit();
    const float* at = a_tile(rd);
    const float* bt = b_tile(rd);
    rd = rd + 1 == kStages ? 0 : rd + 1;
    wr = wr + 1 == kStages ? 0 : wr + 1;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 8) {
      Frag<4, kSplit> fa[kFM];
      Frag<2, kSplit> fb[kFN];
#pragma unroll
      for (int i = 0; i < kFM; ++i) {
        // Rows g and g + 8 (slots 2g, 2g + 1) at k = tq and tq + 4. 8-byte loads take a half
        // warp per pass: its lanes (4 g x 4 tq) hit banks 8*tq + 2g + {0, 1}, all distinct.
        const float* p = at + (kk + tq) * kLdA + wm + i * 16 + 2 * g;
        const auto pair = [](const float* q) { return *reinterpret_cast<const float2*>(q); };
        const float2 lo = pair(p), hi = pair(p + 4 * kLdA);
        fa[i].big[0] = __float_as_uint(lo.x), fa[i].big[1] = __float_as_uint(lo.y);
        fa[i].big[2] = __float_as_uint(hi.x), fa[i].big[3] = __float_as_uint(hi.y);
        if constexpr (kSplit) {
          const float2 slo = pair(p + kBK * kLdA), shi = pair(p + kBK * kLdA + 4 * kLdA);
          fa[i].small[0] = __float_as_uint(slo.x), fa[i].small[1] = __float_as_uint(slo.y);
          fa[i].small[2] = __float_as_uint(shi.x), fa[i].small[3] = __float_as_uint(shi.y);
        }
      }
#pragma unroll
      for (int n = 0; n < kFN; ++n) {
        const float* p = bt + (kk + tq) * kLdB + wn + n * 8 + g;
        if constexpr (kSplit) {
          split_tf32(p[0], fb[n].big[0], fb[n].small[0]);
          split_tf32(p[4 * kLdB], fb[n].big[1], fb[n].small[1]);
        } else {
          fb[n].big[0] = to_tf32(p[0]);
          fb[n].big[1] = to_tf32(p[4 * kLdB]);
        }
      }
      mma_tile<kSplit>(acc, fa, fb);
    }
    if constexpr (kSplit) flush_into(sum, acc);
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp has read its last stage: the stages now hold the output tile

  // Epilogue through shared memory: the fragments' owners hold 2 adjacent columns of 8 rows, so
  // direct stores used 8 of each 32-byte sector (Nsight Compute, run 37); staged, a warp stores
  // 32 consecutive columns of one row (forward: every os-th float, dgrad: contiguous). The tile
  // (bm x bn, pitch == 8 mod 32: each half warp's 8-byte writes hit distinct banks) fits in
  // the pipeline's stages.
  constexpr int kLdC = kBN + 8;
  static_assert(kBM * kLdC <= kStages * Cfg::kStageFloats, "the output tile fits the stages");
  const auto stage_out = [&](const float(&res)[kFM][kFN][4]) {
#pragma unroll
    for (int i = 0; i < kFM; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* row = smem_f + (wm + i * 16 + g + 8 * h) * kLdC + wn + 2 * tq;
#pragma unroll
        for (int n = 0; n < kFN; ++n)
          *reinterpret_cast<float2*>(row + n * 8) =
              make_float2(res[i][n][2 * h], res[i][n][2 * h + 1]);
      }
    }
  };
  if constexpr (kSplit) {
    stage_out(sum);
  } else {
    stage_out(acc);
  }
  __syncthreads();
  batch_igemm_store<kBM, kBN, kThreadsBI>(a, smem_f, kLdC, ay, ax, n0, m0);
}

template <class Cfg>
void launch(const BiArgs& args, const BatchIgemmPlan& plan) {
  batch_igemm_launch(batch_igemm_kernel<Cfg>, "batch_igemm_kernel", kThreadsBI, Cfg::kSmemBytes,
                     args, plan);
}

// The instances: (warps M x N, m16 x n8 blocks per warp, split, CTAs per SM). 1xTF32: 128 x 128,
// 64 x 128, 32 x 128, two CTAs per SM (three for the smallest). 3xTF32 keeps a register sum
// beside the chain, so its 128-row tile is 128 x 64 at one CTA per SM.
using Hi128 = BiConfig<2, 4, 4, 4, false, 2>;
using Hi64 = BiConfig<2, 4, 2, 4, false, 2>;
using Hi32 = BiConfig<1, 8, 2, 2, false, 2>;
using Hx128 = BiConfig<2, 4, 4, 2, true, 1>;
using Hx64 = BiConfig<2, 4, 2, 4, true, 1>;
using Hx32 = BiConfig<1, 8, 2, 2, true, 2>;

template <class Cfg>
bool matches(const BatchIgemmPlan& p) {
  return Cfg::kBM == p.bm && Cfg::kBN == p.bn && Cfg::kSplit == p.split;
}

}  // namespace

void conv_batch_igemm(CachingAllocator& alloc, ConvPass pass, const BatchIgemmPlan& plan,
                      const ConvGeometry& g, const float* src, const float* w, const float* bias,
                      float* out, int device) {
  const bool fwd = pass == ConvPass::forward;
  const int64_t taps = g.kernel[0] * g.kernel[1];
  // One group's channels: C summed over, M computed.
  const int64_t C = (fwd ? g.in_channels : g.out_channels) / g.groups;
  const int64_t M = (fwd ? g.out_channels : g.in_channels) / g.groups;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  BiArgs args{};
  args.src = src, args.bias = bias, args.out = out;
  args.N = g.batch;
  args.C = i(C), args.M = i(M);
  // src and out planes: forward reads x and writes y; dgrad reads dy and writes dx.
  args.Hs = i(fwd ? g.in_size[0] : g.out_size[0]), args.Ws = i(fwd ? g.in_size[1] : g.out_size[1]);
  args.Ho = i(fwd ? g.out_size[0] : g.in_size[0]), args.Wo = i(fwd ? g.out_size[1] : g.in_size[1]);
  args.kH = i(g.kernel[0]), args.kW = i(g.kernel[1]);
  args.sH = i(g.stride[0]), args.sW = i(g.stride[1]);
  args.pH = i(g.padding[0]), args.pW = i(g.padding[1]);
  args.dH = i(g.dilation[0]), args.dW = i(g.dilation[1]);
  args.phases = plan.phases_h * plan.phases_w, args.phases_w = plan.phases_w;
  args.gather = fwd;
  args.c_pad = plan.c_pad, args.m_pad = plan.m_pad;
  args.src_sample = C * g.groups * int64_t{args.Hs} * args.Ws;
  args.out_sample = M * g.groups * int64_t{args.Ho} * args.Wo;
  args.packed_group = taps * plan.c_pad * plan.m_pad;
  if (plan.wgmma) {
    conv_batch_wgmma(alloc, args, plan, w, device);
    return;
  }
  TGRAD_CHECK(plan.k_slices == 1, "conv batch-igemm: K slices (", plan.k_slices,
              ") are batch-wgmma's alone");

  const int64_t values = g.groups * args.packed_group;
  std::shared_ptr<void> packed =
      alloc.allocate(values * (plan.split ? 2 : 1) * int64_t{sizeof(float)}, device);
  float* big = static_cast<float*>(packed.get());
  float* small = plan.split ? big + values : nullptr;
  batch_igemm_pack(pack_kernel<true>, pack_kernel<false>, fwd, w, big, small, g.groups, C, M, taps,
                   plan.c_pad, plan.m_pad);
  TGRAD_CUDA_CHECK_LAUNCH("batch_igemm pack_kernel");
  args.a_big = big, args.a_small = small;

  bool launched = false;
  const auto try_one = [&](auto cfg) {
    using Cfg = decltype(cfg);
    if (launched || !matches<Cfg>(plan)) return;
    launch<Cfg>(args, plan);
    launched = true;
  };
  try_one(Hi128{}), try_one(Hi64{}), try_one(Hi32{});
  try_one(Hx128{}), try_one(Hx64{}), try_one(Hx32{});
  TGRAD_CHECK(launched, "conv batch-igemm: no instance has the planned tile ", plan.bm, "x",
              plan.bn, plan.split ? " 3xTF32" : " 1xTF32");
}

}  // namespace tgrad::cuda
