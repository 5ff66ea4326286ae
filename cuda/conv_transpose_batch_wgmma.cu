// The batch-positions implicit GEMM of conv_transpose forward and dgrad on sm_90a's wgmma
// (planner row "batch-wgmma", "high": 1xTF32). The same GEMM as batch-igemm
// (conv_transpose_batch_igemm.cu; index formula in conv_batch_igemm.h): rows m, columns
// j = (n*Qy + qy)*Qx + qx over the whole batch of one output phase, K = (tap, channel), B
// gathered from src straight into shared memory, no column buffer.
//
// Why a second kernel: batch-igemm multiplies with mma.sync, each warp loading every A and B
// fragment into registers; on the 2-D decoder layers it is latency bound well below the tensor
// cores' rate (docs/performance.md). Here two warpgroups each issue one asynchronous
// m64n128k8 (or m64n64k8) wgmma per 8 channels, both operands read by the tensor cores from
// shared memory through matrix descriptors, while the threads gather the next steps.
//
// Layout. wgmma takes TF32 operands K-major in core matrices of 8 rows x 4 channels (128
// contiguous bytes). A (weights) is packed once per call into [tap][c/4][m_pad][c % 4], rounded
// to TF32 and zero padded, so a step's A tile is kBK/4 runs of kBM*4 contiguous floats (16-byte
// cp.async, no bounds checks) that land in [c/4][m][c % 4]. B (kBK channels x kBN columns of one
// tap) lands in [c/4][j][c % 4]. Core matrices are 128 bytes apart along M/N (SBO) and
// kBM*16 / kBN*16 bytes along K (LBO).
//
// B through registers. A thread owns one column for the whole K loop and loads 4 channels of it
// per 16-byte group, rounds them to TF32 (round to nearest, as every tgrad kernel at "high") and
// stores the group with one 16-byte store. A warp's lanes are 32 consecutive columns: its loads
// read consecutive src columns (forward) and its stores fill 512 contiguous bytes. Gathered with
// 4-byte cp.async instead (each lane 4 channels of 8 columns, so that the stores did not
// conflict), then rounded in place, the same tile cost three times the L1 wavefronts, and Nsight
// Compute found the kernel bound by L1 (docs/performance.md).
//
// Pipeline, one barrier a step, kBatchWgmmaStages stages:
//   load B of step s + 1 into registers -> wait for this thread's A copies of step s, fence its
//   B stores of step s for the async proxy, wait for this warpgroup's wgmmas of step s - 1 ->
//   barrier (step s is complete in shared memory; every warpgroup is done with step s - 1) ->
//   copy A of step s + 2 into step s - 1's stage -> issue step s's wgmmas -> round and store B
//   of step s + 1 (its stage was last read by step s - 2).
// The B loads are in flight through the waits, the barrier and step s's multiplies, and two
// CTAs per SM fill each other's barriers. Each output is written once from a fixed-order sum:
// deterministic.
#include <cuda_runtime.h>

#include "cuda/batch_igemm_device.cuh"
#include "cuda/conv_transpose_batch_igemm.cuh"
#include "cuda/conv_transpose_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"
#include "cuda/wgmma.cuh"

namespace tgrad::cuda {

namespace {

constexpr int kBK = kBatchIgemmChunk;
constexpr int kStages = kBatchWgmmaStages;

template <int kWgM_, int kWgN_, int kN_>
struct BwConfig {
  static constexpr int kWgM = kWgM_, kWgN = kWgN_;  // warpgroups along M and N
  static constexpr int kN = kN_;                    // wgmma N: columns of one warpgroup
  static constexpr int kThreads = 128 * kWgM * kWgN;
  static constexpr int kBM = 64 * kWgM, kBN = kN * kWgN;
  static constexpr int kAFloats = kBK * kBM, kBFloats = kBK * kBN;
  static constexpr int kStageFloats = kAFloats + kBFloats;
  static constexpr int kSmemBytes = kStages * kStageFloats * 4;
  static_assert(kThreads % kBN == 0 && (kBK / 4) % (kThreads / kBN) == 0, "B groups per thread");
  static_assert(kSmemBytes == batch_wgmma_smem_bytes(kBM, kBN), "the planner's count");
  static_assert((kBK / 4) * kBM % kThreads == 0, "A vectors per thread");
};

// Group after group, wp[((tap*(c_pad/4) + c/4)*m_pad + m)*4 + c % 4] = tf32(W[m, c, tap]), zero
// outside M x C; W (one group's) is batch_igemm_weight's, as in batch-igemm.
__global__ void pack_kmajor_kernel(const float* __restrict__ w, float* __restrict__ wp,
                                   int64_t groups, int64_t C, int64_t M, int64_t taps,
                                   int64_t c_pad, int64_t m_pad, bool gather) {
  const int64_t per_group = taps * c_pad * m_pad, total = groups * per_group;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c4 = e % 4, m = e / 4 % m_pad, cg = e / (4 * m_pad) % (c_pad / 4);
    const int64_t tap = e / (c_pad * m_pad) % taps, c = cg * 4 + c4;
    float v = 0.0f;
    if (m < M && c < C) v = batch_igemm_weight(w, e / per_group, m, c, tap, C, M, taps, gather);
    wp[e] = __uint_as_float(to_tf32(v));
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 2) batch_wgmma_kernel(const BiArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const BiArgs a = batch_igemm_group(args);
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN;
  extern __shared__ __align__(128) float smem[];
  __shared__ BiTaps tt;

  const int tid = static_cast<int>(threadIdx.x);
  const BiTile tile = batch_igemm_tile(a, tt, kBM, kBN);
  if (tile.n0 >= tile.n_total) return;  // this phase has fewer positions than the largest one
  const BatchIgemmAxis ay = tile.ay, ax = tile.ax;
  const int64_t n0 = tile.n0;
  const int m0 = tile.m0;
  const int steps = ay.taps * ax.taps * static_cast<int>(a.c_pad / kBK);
  const int64_t plane_s = int64_t{a.Hs} * a.Ws;

  // B: this thread's column (tid % kBN, decomposed once for the whole K loop) and its 16-byte
  // channel groups cg = tid / kBN + kCgStep*u.
  const int warp = tid / 32, lane = tid % 32;
  constexpr int kCgStep = Cfg::kThreads / kBN, kUnits = kBK / 4 / kCgStep;
  const int col = tid % kBN, cg0 = tid / kBN;
  const BiSource source = batch_igemm_source(a, tile, n0 + col);
  const bool col_ok = source.ok;
  const int sy0 = source.sy0, sx0 = source.sx0;
  const float* const src_n = source.src_n + (col_ok ? int64_t{cg0} * 4 * plane_s : 0);
  const auto a_tile = [&](int stage) { return smem + stage * Cfg::kStageFloats; };
  const auto b_tile = [&](int stage) { return smem + stage * Cfg::kStageFloats + Cfg::kAFloats; };

  // Two cursors over the steps (tap (th, tw), channels from c0): A's copies run two steps
  // ahead, B's loads one.
  struct Cursor {
    int th = 0, tw = 0, c0 = 0;
  };
  const auto advance = [&](Cursor& k) {
    if ((k.c0 += kBK) == a.c_pad) {
      k.c0 = 0;
      if (++k.tw == ax.taps) k.tw = 0, ++k.th;
    }
  };
  Cursor ka, kb_cur;
  constexpr int kAVecs = (kBK / 4) * kBM / Cfg::kThreads;  // 16-byte vectors a thread
  // A: kBK/4 runs of kBM*4 floats, vector v of the tile at float 4v of both.
  const auto load_a = [&](int stage) {
    const int wtap = tt.kh[ka.th] * a.kW + tt.kw[ka.tw];
    float* at = a_tile(stage);
    const float* ag = a.a_big + ((int64_t{wtap} * (a.c_pad / 4) + ka.c0 / 4) * a.m_pad + m0) * 4;
#pragma unroll
    for (int i = 0; i < kAVecs; ++i) {
      const int v = tid + i * Cfg::kThreads, cg = v / kBM, m = v - cg * kBM;
      cp_async16(at + 4 * v, ag + (int64_t{cg} * a.m_pad + m) * 4);
    }
    advance(ka);
  };
  // B into registers: channels c0 + 4*(cg0 + kCgStep*u) + i of this column, zero outside the
  // plane and past C; then rounded to TF32 and stored 16 bytes a group ([c/4][j][c % 4]): a
  // warp's lanes are 32 consecutive columns, so its loads are consecutive src columns (forward)
  // and its stores 512 contiguous bytes.
  float bv[kUnits][4];
  const auto load_b = [&] {
    const int sy = sy0 + tt.sh[kb_cur.th], sx = sx0 + tt.sw[kb_cur.tw];
    const bool in = col_ok && sy >= 0 && sy < a.Hs && sx >= 0 && sx < a.Ws;
    const float* p = src_n + (in ? int64_t{sy} * a.Ws + sx + int64_t{kb_cur.c0} * plane_s : 0);
    const int c_first = kb_cur.c0 + 4 * cg0;
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t off = (int64_t{u} * kCgStep * 4 + i) * plane_s;
        bv[u][i] = in && c_first + 4 * kCgStep * u + i < a.C ? __ldg(p + off) : 0.0f;
      }
    }
    advance(kb_cur);
  };
  const auto store_b = [&](int stage) {
    float* bt = b_tile(stage) + col * 4;
#pragma unroll
    for (int u = 0; u < kUnits; ++u)
      *reinterpret_cast<uint4*>(bt + (cg0 + kCgStep * u) * kBN * 4) =
          make_uint4(to_tf32(bv[u][0]), to_tf32(bv[u][1]), to_tf32(bv[u][2]), to_tf32(bv[u][3]));
  };

  const int wg = warp / 4;
  const int wgm = wg / Cfg::kWgN, wgn = wg % Cfg::kWgN;
  const uint32_t base = smem_addr(smem);
  constexpr uint32_t kLboA = kBM * 16, kLboB = kBN * 16;
  float acc[Cfg::kN / 2] = {};

  // Prologue: A of steps 0 and 1 in flight, B of step 0 in place.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_a(s);
    cp_async_commit();
  }
  if (steps > 0) {
    load_b();
    store_b(0);
  }
  int rd = 0, wr = kStages - 1;
  for (int s = 0; s < steps; ++s) {
    // B of step s + 1 into registers first (step s's were stored last iteration): the loads
    // are in flight through the waits and the barrier below and while step s multiplies.
    const bool next_b = s + 1 < steps;
    if (next_b) load_b();
    cp_async_wait<kStages - 2>();  // this thread's copies of A for step s have landed
    fence_proxy_async();           // and its B stores of step s are visible to wgmma
    wgmma_wait_all();              // this warpgroup's step s - 1
    __syncthreads();  // step s is complete in shared memory; every warpgroup is done with s - 1
    if (s + kStages - 1 < steps) load_a(wr);
    cp_async_commit();
    const uint32_t a_addr =
        base + static_cast<uint32_t>(rd * Cfg::kStageFloats * 4 + wgm * 64 * 16);
    const uint32_t b_addr =
        base +
        static_cast<uint32_t>((rd * Cfg::kStageFloats + Cfg::kAFloats) * 4 + wgn * Cfg::kN * 16);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < kBK / 8; ++kb)
      wgmma_tf32_ss<Cfg::kN>(acc, wgmma_desc(a_addr + 2 * kb * kLboA, kLboA, 128),
                             wgmma_desc(b_addr + 2 * kb * kLboB, kLboB, 128));
    wgmma_commit();
    rd = rd + 1 == kStages ? 0 : rd + 1;
    wr = wr + 1 == kStages ? 0 : wr + 1;
    // Step s + 1's stage (rd now) was last read by step s - 2, done before the barrier above.
    if (next_b) store_b(rd);
  }
  wgmma_wait_all();
  cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the stages: they now hold the output tile

  // acc[nt*4 + i] holds row g + 8*(i / 2), column nt*8 + 2t + i % 2 of this warp's 16 x kN.
  // Staged with a pitch of 8 mod 32 floats: a half warp's 8-byte writes hit distinct banks.
  constexpr int kLdC = kBN + 8;
  static_assert(kBM * kLdC <= kStages * Cfg::kStageFloats, "the output tile fits the stages");
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float* row = smem + (wgm * 64 + (warp % 4) * 16 + g + 8 * half) * kLdC + wgn * Cfg::kN + 2 * t;
#pragma unroll
    for (int nt = 0; nt < Cfg::kN / 8; ++nt)
      *reinterpret_cast<float2*>(row + nt * 8) =
          make_float2(acc[nt * 4 + half * 2], acc[nt * 4 + half * 2 + 1]);
  }
  __syncthreads();
  batch_igemm_store<kBM, kBN, Cfg::kThreads>(a, smem, kLdC, ay, ax, n0, m0);
#else
  // Built without sm_90a's features the body would be empty and the output never written.
  __trap();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// The instances: 128 x 128 (two warpgroups along M) and 64 x 128 (along N, M <= 64).
using Bw128 = BwConfig<2, 1, 128>;
using Bw64 = BwConfig<1, 2, 64>;

template <class Cfg>
void launch(const BiArgs& args, const BatchIgemmPlan& plan) {
  batch_igemm_launch(batch_wgmma_kernel<Cfg>, "batch_wgmma_kernel", Cfg::kThreads, Cfg::kSmemBytes,
                     args, plan);
}

}  // namespace

void conv_batch_wgmma(CachingAllocator& alloc, const BiArgs& args, const BatchIgemmPlan& plan,
                      const float* w, int device) {
  check_wgmma_code(device);
  TGRAD_CHECK(!plan.split && (plan.bm == 128 || plan.bm == 64) && plan.bn == 128,
              "conv batch-wgmma: no instance has the planned tile ", plan.bm, "x", plan.bn,
              plan.split ? " 3xTF32" : " 1xTF32");
  const int64_t taps = int64_t{args.kH} * args.kW;
  const int64_t values = plan.groups * args.packed_group;
  std::shared_ptr<void> packed = alloc.allocate(values * int64_t{sizeof(float)}, device);
  float* wp = static_cast<float*>(packed.get());
  pack_kmajor_kernel<<<grid_for(values), kThreads>>>(w, wp, plan.groups, args.C, args.M, taps,
                                                     plan.c_pad, plan.m_pad, args.gather);
  TGRAD_CUDA_CHECK_LAUNCH("batch_wgmma pack_kmajor_kernel");
  BiArgs a = args;
  a.a_big = wp, a.a_small = nullptr;
  if (plan.bm == 128) {
    launch<Bw128>(a, plan);
  } else {
    launch<Bw64>(a, plan);
  }
}

}  // namespace tgrad::cuda
