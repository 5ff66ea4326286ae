// The batch-positions implicit GEMM of conv_transpose forward and dgrad on sm_90a's wgmma
// (planner row "batch-wgmma": 1xTF32 at "high", 3xTF32 at "highest"). The same GEMM as batch-igemm
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
// B from a channels-last copy (plan.channels_last). Gathered from NCHW, a column's 4 channels
// are 4 loads a plane apart, and a dgrad's columns are s src columns apart, so most of each
// loaded line is wasted at wide strides; and the register staging leaves one step of B in
// flight. Where the planner finds the copy worth its cost (many multiply-adds per src value, or
// a dgrad at stride 5 or more), to_channels_last_kernel first writes src as [n][y][x][group]
// [c_pad] rounded to TF32, and the kernel copies B with 16-byte cp.async (zero filled outside
// the plane), two steps ahead like A: each row of the B tile is one column's 32 channels of a
// step, one 128-byte line of the copy, stored with wgmma's 128-byte swizzle (16-byte group c of
// row j at group c ^ (j % 8)) so that 8 lanes writing one row hit all 32 banks.
//
// Copied by TMA (plan.tma: 1xTF32 with channels-last B, where one im2col map serves every phase).
// batch_wgmma_tma_kernel runs the same GEMM and stages, but thread 0 copies a step's A as one box
// of the packed weights and its B in the tensor memory accelerator's im2col mode: kBN
// consecutive columns' 32 channels at the step's tap offset, the traversal wrapping across rows
// and samples, out-of-plane positions zero filled, landing with the 128-byte swizzle. Both
// complete on the stage's mbarrier. No other thread computes a copy's address, which in the
// cp.async kernel was a large share of its instructions (docs/performance.md).
//
// Pipeline, one barrier a step, kBatchWgmmaStages stages:
//   load B of step s + 1 into registers -> wait for this thread's A copies of step s, fence its
//   B stores of step s for the async proxy, wait for this warpgroup's wgmmas of step s - 1 ->
//   barrier (step s is complete in shared memory; every warpgroup is done with step s - 1) ->
//   issue step s's wgmmas and copy A of step s + 2 into step s - 1's stage (1xTF32 in that
//   order, 3xTF32 the copies first) -> round and store B of step s + 1 (its stage was last read
//   by step s - 2).
// The B loads are in flight through the waits, the barrier and step s's multiplies, and two
// CTAs per SM fill each other's barriers. Each output is written once from a fixed-order sum:
// deterministic.
//
// K slices (plan.k_slices; the planner cuts 3xTF32 plans whose grid would leave SMs idle or a
// last wave mostly empty): the grid's y is slice x row tile, and a CTA runs one run of its tile's
// steps (batch_igemm_slice_steps; a phase with fewer steps may leave a slice none). Its epilogue
// writes its accumulators to a workspace and counts itself in the tile's counter; the last slice
// to count sums the partials in slice order and stores the tile (sum_slices). At 1xTF32 a step
// is short and the partials' traffic measured more than the idle SMs cost (docs/performance.md).
// The sliced instances (kSliced) are separate, so that the others keep no code for it.
//
// 3xTF32 ("highest", kSplit): every tile is held twice, values rounded to TF32 and their TF32
// residuals (A packed both ways once a call, B split as it is stored or in the channels-last
// copies), and a step issues small x big, big x small, then big x big for each k8 block, the
// chain starting from zero; once the step's wgmmas are waited for, the chain is added into a
// float32 sum (as the row kernels' 3xTF32 does), so that the tensor cores' accumulation never
// spans more than one step. Twice the tiles fit two stages at two CTAs per SM, and the
// accumulator and its sum fit 128 registers with 64 columns a warpgroup.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/batch_igemm_device.cuh"
#include "cuda/conv_transpose_batch_igemm.cuh"
#include "cuda/conv_transpose_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"

namespace tgrad::cuda {

namespace {

constexpr int kBK = kBatchIgemmChunk;

template <int kWgM_, int kWgN_, int kN_, bool kSplit_ = false>
struct BwConfig {
  static constexpr int kWgM = kWgM_, kWgN = kWgN_;  // warpgroups along M and N
  static constexpr int kN = kN_;                    // wgmma N: columns of one warpgroup
  static constexpr bool kSplit = kSplit_;           // 3xTF32: values and residuals
  static constexpr int kStages = kSplit ? kBatchWgmmaSplitStages : kBatchWgmmaStages;
  static constexpr int kPlanes = kSplit ? 2 : 1;
  static constexpr int kThreads = 128 * kWgM * kWgN;
  static constexpr int kBM = 64 * kWgM, kBN = kN * kWgN;
  // One plane of each tile; a stage is [A planes][B planes].
  static constexpr int kAFloats = kBK * kBM, kBFloats = kBK * kBN;
  static constexpr int kStageFloats = kPlanes * (kAFloats + kBFloats);
  static constexpr int kSmemBytes = kStages * kStageFloats * 4;
  static_assert(kThreads % kBN == 0 && (kBK / 4) % (kThreads / kBN) == 0, "B groups per thread");
  static_assert(kSmemBytes == batch_wgmma_smem_bytes(kBM, kBN, false, kSplit),
                "the planner's count");
  static_assert((kBK / 4) * kBM % kThreads == 0, "A vectors per thread");
};

// Group after group, wp[((tap*(c_pad/4) + c/4)*m_pad + m)*4 + c % 4] = tf32(W[m, c, tap]), zero
// outside M x C, and (3xTF32) small[...] its TF32 residual; W (one group's) is
// batch_igemm_weight's, as in batch-igemm. Staged by batch_igemm_pack_tiles, c % 4 fastest.
template <bool kGather>
__global__ void __launch_bounds__(kPackThreads)
    pack_kmajor_kernel(const float* __restrict__ w, float* __restrict__ wp,
                       float* __restrict__ small, int groups, int C, int M, int taps, int c_pad,
                       int m_pad) {
  const int64_t per_group = int64_t{taps} * c_pad * m_pad;
  batch_igemm_pack_tiles<kGather, true>(
      w, wp, small, groups, C, M, taps, c_pad, m_pad, [&](int g, int tap, int c, int m) {
        return g * per_group + ((int64_t{tap} * (c_pad / 4) + c / 4) * m_pad + m) * 4 + c % 4;
      });
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The epilogue of both kernels, once every warpgroup is done with the stages: this thread's
// accumulators (acc[nt*4 + i] holds row g + 8*(i / 2), column nt*8 + 2t + i % 2 of its warp's
// 16 x kN) staged in smem as the output tile, then written with the bias by
// batch_igemm_store. Staged with a pitch of 8 mod 32 floats: a half warp's 8-byte writes hit
// distinct banks.
//
// A sliced instance's (kSliced) slices first meet here (sum_slices): only the last to arrive
// stores, the sum of every slice's result. Only the sliced instances hold that code: compiled
// into the others, it cost them registers and speed (docs/performance.md, "K slices").
template <class Cfg>
__device__ inline bool sum_slices(const BiArgs& a, float (&result)[Cfg::kN / 2],
                                  const BiTile& tile);

template <class Cfg, bool kSliced = false>
__device__ inline void store_tile(const BiArgs& a, float* smem, float (&result)[Cfg::kN / 2],
                                  const BiTile& tile) {
  if constexpr (kSliced) {
    if (!sum_slices<Cfg>(a, result, tile)) return;
  }
  constexpr int kLdC = Cfg::kBN + 8;
  static_assert(Cfg::kBM * kLdC <= Cfg::kStages * Cfg::kStageFloats,
                "the output tile fits the stages");
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, wgm = wg / Cfg::kWgN, wgn = wg % Cfg::kWgN;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float* row = smem + (wgm * 64 + (warp % 4) * 16 + g + 8 * half) * kLdC + wgn * Cfg::kN + 2 * t;
#pragma unroll
    for (int nt = 0; nt < Cfg::kN / 8; ++nt)
      *reinterpret_cast<float2*>(row + nt * 8) =
          make_float2(result[nt * 4 + half * 2], result[nt * 4 + half * 2 + 1]);
  }
  __syncthreads();
  batch_igemm_store<Cfg::kBM, Cfg::kBN, Cfg::kThreads>(a, smem, kLdC, tile.ay, tile.ax, tile.n0,
                                                       tile.m0);
}

// Each thread writes its kN/2 accumulators to its slice's partial (value i of thread t at
// i * kThreads + t: a warp's writes are whole lines), and the CTA counts itself in the tile's
// counter. The CTA that brings the count to k_slices is the last: it reads back every slice's
// partial (its own included) and sums them in slice order, so the result does not depend on
// which slice finished last (deterministic), and returns true; the others are done. The fences
// order the partials before the count (writers) and after it (the last). No CTA waits for
// another, so the slices need not be resident together.
template <class Cfg>
__device__ inline bool sum_slices(const BiArgs& a, float (&result)[Cfg::kN / 2],
                                  const BiTile& tile) {
  constexpr int kValues = Cfg::kN / 2, kPartial = kValues * Cfg::kThreads;
  __shared__ bool last;
  const int tid = static_cast<int>(threadIdx.x);
  float* const parts = a.partials + tile.id * a.k_slices * int64_t{kPartial} + tid;
  float* const mine = parts + int64_t{tile.slice} * kPartial;
#pragma unroll
  for (int i = 0; i < kValues; ++i)
    __stcg(mine + i * Cfg::kThreads, result[i]);
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(&a.counters[tile.id], 1u) == static_cast<unsigned>(a.k_slices - 1);
  __syncthreads();
  if (!last) return false;
  __threadfence();
#pragma unroll
  for (int i = 0; i < kValues; ++i)
    result[i] = __ldcg(parts + i * Cfg::kThreads);
  for (int k = 1; k < a.k_slices; ++k) {
#pragma unroll
    for (int i = 0; i < kValues; ++i)
      result[i] += __ldcg(parts + int64_t{k} * kPartial + i * Cfg::kThreads);
  }
  return true;
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// kCl: B from the channels-last copy (a.src_cl), each 16-byte group of 4 channels of a column
// copied by cp.async into 128-byte swizzled rows (below); else gathered from src through
// registers. kSliced: the plan's K slices (3xTF32 only), the grid's y slice x row tile.
template <class Cfg, bool kCl, bool kSliced = false>
__global__ void __launch_bounds__(Cfg::kThreads, 2) batch_wgmma_kernel(const BiArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const BiArgs a = batch_igemm_group(args);
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kStages = Cfg::kStages;
  extern __shared__ __align__(128) float smem_raw[];
  __shared__ BiTaps tt;
  // The swizzled B rows repeat their pattern every 1024 bytes, from a 1024-byte aligned address.
  float* const smem = kCl ? smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024) / 4 : smem_raw;

  const int tid = static_cast<int>(threadIdx.x);
  const BiTile tile =
      kSliced ? batch_igemm_sliced_tile(a, tt, kBM, kBN) : batch_igemm_tile(a, tt, kBM, kBN);
  if (tile.n0 >= tile.n_total) return;  // this phase has fewer positions than the largest one
  const BatchIgemmAxis ay = tile.ay, ax = tile.ax;
  const int64_t n0 = tile.n0;
  const int m0 = tile.m0;
  int steps = ay.taps * ax.taps * static_cast<int>(a.c_pad / kBK);
  BiCursor start{0, 0, 0};
  if constexpr (kSliced) {  // this CTA's slice: `steps` steps from `start`
    const BiSteps range = batch_igemm_slice_steps(steps, a.k_slices, tile.slice);
    steps = range.count;
    start = batch_igemm_cursor(range.first, static_cast<int>(a.c_pad / kBK), kBK, ax.taps);
  }
  const int64_t plane_s = int64_t{a.Hs} * a.Ws;

  // B: this thread's column (tid % kBN, decomposed once for the whole K loop) and its 16-byte
  // channel groups cg = tid / kBN + kCgStep*u.
  const int warp = tid / 32;
  constexpr int kCgStep = Cfg::kThreads / kBN, kUnits = kBK / 4 / kCgStep;
  const int col = tid % kBN, cg0 = tid / kBN;
  const BiSource source = batch_igemm_source(a, tile, n0 + col);
  const bool col_ok = source.ok;
  const int sy0 = source.sy0, sx0 = source.sx0;
  const float* const src_n = source.src_n + (col_ok ? int64_t{cg0} * 4 * plane_s : 0);
  // A's planes, then B's (each plane's residuals kAFloats / kBFloats after its values).
  const auto a_tile = [&](int stage) { return smem + stage * Cfg::kStageFloats; };
  const auto b_tile = [&](int stage) {
    return smem + stage * Cfg::kStageFloats + Cfg::kPlanes * Cfg::kAFloats;
  };

  // Two cursors over the steps: A's copies run two steps ahead, B's loads one.
  const auto advance = [&](BiCursor& k) {
    if ((k.c0 += kBK) == a.c_pad) {
      k.c0 = 0;
      if (++k.tw == ax.taps) k.tw = 0, ++k.th;
    }
  };
  BiCursor ka = start, kb_cur = start;
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
      if constexpr (Cfg::kSplit)
        cp_async16(at + Cfg::kAFloats + 4 * v,
                   a.a_small + (ag - a.a_big) + (int64_t{cg} * a.m_pad + m) * 4);
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
    for (int u = 0; u < kUnits; ++u) {
      float* dst = bt + (cg0 + kCgStep * u) * kBN * 4;
      store_tf32x4<Cfg::kSplit>(dst, dst + Cfg::kBFloats, bv[u][0], bv[u][1], bv[u][2], bv[u][3]);
    }
  };

  // Channels-last B: row j of a stage's B tile holds the step's 32 channels of column j, 128
  // bytes, its 16-byte group c stored at group c ^ (j % 8) (the 128-byte swizzle wgmma reads).
  // Thread t copies group t % 8 of columns t / 8 + kClStep*u: 8 lanes fill one row (a 128-byte
  // line of src_cl, one conflict-free row of shared memory).
  constexpr int kClStep = Cfg::kThreads / 8, kClUnits = kBN / kClStep;
  static_assert(kBN % kClStep == 0 && kClStep % 8 == 0, "whole swizzle rows a thread step");
  const int cl_group = tid % 8, cl_row0 = tid / 8;
  const float* cl_src[kCl ? kClUnits : 1];
  int cl_sy0[kCl ? kClUnits : 1], cl_sx0[kCl ? kClUnits : 1];
  unsigned cl_ok = 0;
  if constexpr (kCl) {
    const int64_t pixels = int64_t{a.Hs} * a.Ws;
#pragma unroll
    for (int u = 0; u < kClUnits; ++u) {
      const int64_t j = n0 + cl_row0 + kClStep * u;
      const bool ok = j < tile.n_total;
      const BiColumn c = batch_igemm_column(ok ? j : 0, tile.qplane, ax.q);
      cl_src[u] = a.src_cl + c.n * pixels * a.cl_pixel + cl_group * 4;
      cl_sy0[u] = c.qy * ay.ss, cl_sx0[u] = c.qx * ax.ss;
      cl_ok |= ok ? 1u << u : 0u;
    }
  }
  const auto load_b_cl = [&](int stage) {
    const int sh = tt.sh[kb_cur.th], sw = tt.sw[kb_cur.tw];
    float* const bt = b_tile(stage) + cl_row0 * 32 + ((cl_group ^ (cl_row0 % 8)) * 4);
#pragma unroll
    for (int u = 0; u < kClUnits; ++u) {
      const int sy = cl_sy0[u] + sh, sx = cl_sx0[u] + sw;
      const bool in = (cl_ok >> u & 1u) && sy >= 0 && sy < a.Hs && sx >= 0 && sx < a.Ws;
      const int64_t off = in ? (int64_t{sy} * a.Ws + sx) * a.cl_pixel + kb_cur.c0 : 0;
      cp_async16_zfill(bt + kClStep * u * 32, in ? cl_src[u] + off : a.src_cl, in);
      if constexpr (Cfg::kSplit)
        cp_async16_zfill(bt + Cfg::kBFloats + kClStep * u * 32,
                         in ? cl_src[u] + (a.src_cl_small - a.src_cl) + off : a.src_cl_small, in);
    }
    advance(kb_cur);
  };

  const int wg = warp / 4;
  const int wgm = wg / Cfg::kWgN, wgn = wg % Cfg::kWgN;
  const uint32_t base = smem_addr(smem);
  constexpr uint32_t kLboA = kBM * 16, kLboB = kBN * 16;
  float acc[Cfg::kN / 2] = {};
  // 3xTF32: each step's chain, added into sum once its wgmmas are done.
  float sum[Cfg::kSplit ? Cfg::kN / 2 : 1] = {};
  const auto flush = [&] { add_step_chain<Cfg::kSplit>(sum, acc); };

  // Prologue: A of steps 0 and 1 in flight, and B of step 0 in place (channels-last: B of steps
  // 0 and 1 in flight beside A).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) {
      load_a(s);
      if constexpr (kCl) load_b_cl(s);
    }
    cp_async_commit();
  }
  if (!kCl && steps > 0) {
    load_b();
    store_b(0);
  }
  int rd = 0, wr = kStages - 1;
  for (int s = 0; s < steps; ++s) {
    // B of step s + 1 into registers first (step s's were stored last iteration): the loads
    // are in flight through the waits and the barrier below and while step s multiplies.
    const bool next_b = !kCl && s + 1 < steps;
    if (next_b) load_b();
    cp_async_wait<kStages - 2>();  // this thread's copies of step s have landed
    fence_proxy_async();           // and its stores and copies of step s are visible to wgmma
    wgmma_wait_all();              // this warpgroup's step s - 1
    if (s > 0) flush();
    __syncthreads();  // step s is complete in shared memory; every warpgroup is done with s - 1
    // The copies of step s + 2 go to step s - 1's stage, which every warpgroup is done with. At
    // 1xTF32 they are issued after step s's four wgmmas: their address arithmetic, before them,
    // held the tensor cores idle after each barrier. At 3xTF32 they go first: behind twelve
    // wgmmas their data landed late (docs/performance.md).
    const auto copy_ahead = [&] {
      if (s + kStages - 1 < steps) {
        load_a(wr);
        if constexpr (kCl) load_b_cl(wr);
      }
      cp_async_commit();
    };
    if constexpr (Cfg::kSplit) copy_ahead();
    const uint32_t a_addr =
        base + static_cast<uint32_t>(rd * Cfg::kStageFloats * 4 + wgm * 64 * 16);
    wgmma_fence();
    // B: channels-last rows of 128 bytes with the 128-byte swizzle (8-row groups 1024 bytes
    // apart, each k8 step 32 bytes further along the rows: the swizzle applies to the address
    // bits), else core matrices [c/4][column][c % 4].
    const uint32_t b_addr =
        base + static_cast<uint32_t>((rd * Cfg::kStageFloats + Cfg::kPlanes * Cfg::kAFloats) * 4 +
                                     wgn * Cfg::kN * (kCl ? 128 : 16));
    const auto a_desc = [&](int kb, int plane) {
      return wgmma_desc(a_addr + plane * Cfg::kAFloats * 4 + 2 * kb * kLboA, kLboA, 128);
    };
    const auto b_desc = [&](int kb, int plane) {
      const uint32_t b = b_addr + plane * Cfg::kBFloats * 4;
      return kCl ? wgmma_desc_sw128(b + kb * 32) : wgmma_desc(b + 2 * kb * kLboB, kLboB, 128);
    };
    wgmma_tf32_step<Cfg::kN, Cfg::kSplit, kBK / 8>(acc, a_desc, b_desc);
    wgmma_commit();
    if constexpr (!Cfg::kSplit) copy_ahead();
    rd = rd + 1 == kStages ? 0 : rd + 1;
    wr = wr + 1 == kStages ? 0 : wr + 1;
    // Step s + 1's stage (rd now) was last read by step s - 2, done before the barrier above.
    if (next_b) store_b(rd);
  }
  wgmma_wait_all();
  if (steps > 0) flush();
  cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done with the stages: they now hold the output tile
  if constexpr (Cfg::kSplit) {
    store_tile<Cfg, kSliced>(a, smem, sum, tile);
  } else {
    store_tile<Cfg, kSliced>(a, smem, acc, tile);
  }
#else
  // Built without sm_90a's features the body would be empty and the output never written.
  __trap();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// The TMA kernel's tensor maps (by value, in the kernel's parameter space: __grid_constant__).
// a: the packed weights as a 3-D tiled map (32 floats: 8 rows m x 4 channels; m_pad / 8; all
// groups' taps x c_pad / 4), a step's A tile one box of 32 x kBM/8 x kBK/4, which lands as
// [c/4][m][c % 4] like load_a's copies. b: the channels-last copy as a 4-D im2col map (all
// groups' c_pad channels, Ws, Hs, N) with the 128-byte swizzle, a step's B tile kBN positions x
// 32 channels at one tap's offset, which lands as load_b_cl's rows. lower: the map's
// bounding-box corner (H, W) that position 0 of a phase starts at.
struct BwTmaMaps {
  CUtensorMap a;
  CUtensorMap b;
  int lower_h, lower_w;
};

// batch_wgmma_kernel at 1xTF32 with channels-last B, both tiles copied by the tensor memory
// accelerator. Thread 0 issues a step's two copies, which complete on the stage's mbarrier with
// its byte count; every thread waits on it instead of on its own cp.async groups. The same
// ring of kStages stages and the same barrier a step (a stage is refilled only once every
// warpgroup is done with it), but no thread computes an address per copy: the per-step
// instructions that the cp.async copies cost (docs/performance.md) are gone. TMA fills the
// padding and the columns past the last sample with zeros.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 2)
    batch_wgmma_tma_kernel(const BiArgs args, const __grid_constant__ BwTmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!Cfg::kSplit, "3xTF32 copies its residual planes by cp.async");
  const BiArgs a = batch_igemm_group(args);
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kStages = Cfg::kStages;
  constexpr uint32_t kStageBytes = Cfg::kStageFloats * 4;
  extern __shared__ __align__(128) float smem_raw[];
  __shared__ BiTaps tt;
  __shared__ uint64_t full[kStages];
  // The swizzled B rows repeat their pattern every 1024 bytes, from a 1024-byte aligned address.
  float* const smem = smem_raw + ((1024 - smem_addr(smem_raw) % 1024) % 1024) / 4;

  const int tid = static_cast<int>(threadIdx.x);
  const BiTile tile = batch_igemm_tile(a, tt, kBM, kBN);
  if (tile.n0 >= tile.n_total) return;  // this phase has fewer positions than the largest one
  const BatchIgemmAxis ay = tile.ay, ax = tile.ax;
  const int steps = ay.taps * ax.taps * static_cast<int>(a.c_pad / kBK);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s)
      mbarrier_init(&full[s], 1);
    mbarrier_init_fence();
  }
  __syncthreads();

  // The tile's first column: its sample and traversal coordinates; the group's first channel
  // and its packed weights' first row.
  const BiColumn first = batch_igemm_column(tile.n0, tile.qplane, ax.q);
  const int n = static_cast<int>(first.n);
  const int w0 = first.qx * ax.ss + maps.lower_w, h0 = first.qy * ay.ss + maps.lower_h;
  const int group = static_cast<int>(blockIdx.z);
  const int c_base = group * static_cast<int>(a.c_pad);
  const int taps = a.kH * a.kW;
  const int rows_c4 = static_cast<int>(a.c_pad / 4);
  int th = 0, tw = 0, c0 = 0;  // the next step to copy: tap (th, tw), channels from c0
  const auto copy = [&](int stage) {
    float* const at = smem + stage * Cfg::kStageFloats;
    const int wtap = tt.kh[th] * a.kW + tt.kw[tw];
    mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
    tma_load_tile_3d(at, &maps.a, 0, tile.m0 / 8, (group * taps + wtap) * rows_c4 + c0 / 4,
                     &full[stage]);
    tma_load_im2col_4d(at + Cfg::kAFloats, &maps.b, c_base + c0, w0, h0, n,
                       static_cast<uint16_t>(tt.sw[tw] - maps.lower_w),
                       static_cast<uint16_t>(tt.sh[th] - maps.lower_h), &full[stage]);
    if ((c0 += kBK) == a.c_pad) {
      c0 = 0;
      if (++tw == ax.taps) tw = 0, ++th;
    }
  };
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s)
      if (s < steps) copy(s);
  }

  const int wg = tid / 128;
  const int wgm = wg / Cfg::kWgN, wgn = wg % Cfg::kWgN;
  const uint32_t base = smem_addr(smem);
  constexpr uint32_t kLboA = kBM * 16;
  float acc[Cfg::kN / 2] = {};
  int rd = 0, wr = kStages - 1;
  for (int s = 0; s < steps; ++s) {
    mbarrier_wait(&full[rd], static_cast<uint32_t>(s / kStages) & 1u);  // step s has landed
    wgmma_wait_all();  // this warpgroup's step s - 1
    __syncthreads();   // every warpgroup is done with step s - 1: its stage may be refilled
    const uint32_t a_addr = base + static_cast<uint32_t>(rd * kStageBytes + wgm * 64 * 16);
    const uint32_t b_addr =
        base + static_cast<uint32_t>(rd * kStageBytes + Cfg::kAFloats * 4 + wgn * Cfg::kN * 128);
    wgmma_fence();
    wgmma_tf32_step<Cfg::kN, false, kBK / 8>(
        acc, [&](int kb, int) { return wgmma_desc(a_addr + 2 * kb * kLboA, kLboA, 128); },
        [&](int kb, int) { return wgmma_desc_sw128(b_addr + kb * 32); });
    wgmma_commit();
    // Step s + kStages - 1 into step s - 1's stage, after step s's wgmmas are issued.
    if (tid == 0 && s + kStages - 1 < steps) copy(wr);
    rd = rd + 1 == kStages ? 0 : rd + 1;
    wr = wr + 1 == kStages ? 0 : wr + 1;
  }
  wgmma_wait_all();
  __syncthreads();  // every warpgroup is done with the stages: they now hold the output tile
  store_tile<Cfg>(a, smem, acc, tile);
#else
  __trap();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// The instances: 128 x 128 (two warpgroups along M) and 64 x 128 (along N, M <= 64); 3xTF32
// 128 x 64 and 64 x 128, 64 columns a warpgroup (its chain and sum in 64 registers).
using Bw128 = BwConfig<2, 1, 128>;
using Bw64 = BwConfig<1, 2, 64>;
using Bw128Split = BwConfig<2, 1, 64, true>;
using Bw64Split = BwConfig<1, 2, 64, true>;

template <class Cfg, bool kCl, bool kSliced>
void launch(const BiArgs& args, const BatchIgemmPlan& plan) {
  batch_igemm_launch(batch_wgmma_kernel<Cfg, kCl, kSliced>, "batch_wgmma_kernel", Cfg::kThreads,
                     batch_wgmma_smem_bytes(Cfg::kBM, Cfg::kBN, kCl, Cfg::kSplit), args, plan);
}

// Sliced instances exist for 3xTF32 alone (the planner slices nothing else).
template <class Cfg, bool kSliced = false>
void launch(const BiArgs& args, const BatchIgemmPlan& plan) {
  plan.channels_last ? launch<Cfg, true, kSliced>(args, plan)
                     : launch<Cfg, false, kSliced>(args, plan);
}

// The driver's tensor-map encoders, through the runtime's entry point (no link to libcuda).
template <class Fn>
Fn driver_entry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  TGRAD_CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found));
  TGRAD_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
              "conv batch-wgmma: the driver has no ", symbol);
  return reinterpret_cast<Fn>(fn);
}

// The maps of batch_wgmma_tma_kernel (BwTmaMaps) for this call's packed weights and channels-last
// copy.
BwTmaMaps tma_maps(const BiArgs& a, const BatchIgemmPlan& plan) {
  using EncodeTiled =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  using EncodeIm2col = CUresult (*)(
      CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
      const int*, const int*, cuuint32_t, cuuint32_t, const cuuint32_t*, CUtensorMapInterleave,
      CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const auto encode_tiled = driver_entry<EncodeTiled>("cuTensorMapEncodeTiled");
  static const auto encode_im2col = driver_entry<EncodeIm2col>("cuTensorMapEncodeIm2col");
  BwTmaMaps maps{};
  const auto u = [](int64_t v) { return static_cast<cuuint64_t>(v); };
  // A: [group][tap][c/4][m_pad][c % 4] as (32 floats, m_pad / 8, groups x taps x c_pad / 4).
  const int64_t rows = plan.groups * a.kH * a.kW * (a.c_pad / 4);
  const cuuint64_t a_dim[3] = {32, u(a.m_pad / 8), u(rows)};
  const cuuint64_t a_stride[2] = {32 * 4, u(a.m_pad * 16)};
  const cuuint32_t a_box[3] = {32, static_cast<cuuint32_t>(plan.bm / 8), kBK / 4};
  const cuuint32_t ones[4] = {1, 1, 1, 1};
  CUresult r =
      encode_tiled(&maps.a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(a.a_big), a_dim,
                   a_stride, a_box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TGRAD_CHECK(r == CUDA_SUCCESS, "conv batch-wgmma: encoding the weights' tensor map failed (",
              static_cast<int>(r), ")");
  // B: [n][y][x][group][c_pad] as (all groups' channels, Ws, Hs, N); dgrad's positions are
  // strided src columns. Corners (W, H), innermost first as the dims.
  const cuuint64_t b_dim[4] = {u(a.cl_pixel), u(a.Ws), u(a.Hs), u(a.N)};
  const cuuint64_t b_stride[3] = {u(a.cl_pixel * 4), u(a.cl_pixel * 4 * a.Ws),
                                  u(a.cl_pixel * 4 * a.Ws * a.Hs)};
  const int lower[2] = {plan.tma_lower[1], plan.tma_lower[0]};
  const int upper[2] = {plan.tma_upper[1], plan.tma_upper[0]};
  const cuuint32_t strides[4] = {1, static_cast<cuuint32_t>(a.gather ? 1 : a.sW),
                                 static_cast<cuuint32_t>(a.gather ? 1 : a.sH), 1};
  r = encode_im2col(&maps.b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, const_cast<float*>(a.src_cl),
                    b_dim, b_stride, lower, upper, kBK, static_cast<cuuint32_t>(plan.bn), strides,
                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TGRAD_CHECK(r == CUDA_SUCCESS, "conv batch-wgmma: encoding the channels-last tensor map failed (",
              static_cast<int>(r), ")");
  maps.lower_h = plan.tma_lower[0], maps.lower_w = plan.tma_lower[1];
  return maps;
}

template <class Cfg>
void launch_tma(const BiArgs& args, const BatchIgemmPlan& plan) {
  batch_igemm_launch(batch_wgmma_tma_kernel<Cfg>, "batch_wgmma_tma_kernel", Cfg::kThreads,
                     batch_wgmma_smem_bytes(Cfg::kBM, Cfg::kBN, true, false), args, plan,
                     tma_maps(args, plan));
}

// dst[n][p][g][c] = tf32(src[n][g*C + c][p]) for c < C, 0 for C <= c < c_pad (p a pixel of the
// plane): the channels-last copy B is read from; small (3xTF32, else null) gets the TF32
// residuals. A tile of 32 channels x kClCopyPixels pixels a block, through shared memory, so that
// both the reads (along pixels) and the writes (along channels) are whole lines, eight of each a
// thread in flight. The grid is pixel tiles x channel tiles x (sample, group), strided past its
// limits: a flat tile index cost 64-bit divisions that left the copy compute-bound
// (docs/performance.md).
constexpr int kClCopyPixels = 64;
__global__ void __launch_bounds__(256)
    to_channels_last_kernel(const float* __restrict__ src, float* __restrict__ dst,
                            float* __restrict__ small, int64_t N, int64_t groups, int64_t C,
                            int64_t c_pad, int64_t pixels) {
  __shared__ float tile[32][kClCopyPixels + 1];
  const int tx = static_cast<int>(threadIdx.x % 32), ty = static_cast<int>(threadIdx.x / 32);
  const int64_t p0 = int64_t{blockIdx.x} * kClCopyPixels;
  for (int64_t ng = blockIdx.z; ng < N * groups; ng += gridDim.z) {
    const int64_t n = ng / groups, g = ng - n * groups;
    for (int64_t c0 = int64_t{blockIdx.y} * 32; c0 < c_pad; c0 += int64_t{gridDim.y} * 32) {
      // Read: channel c0 + ty + 8i, pixels p0 + tx + 32h.
      const float* s = src + (ng * C + c0 + ty) * pixels + p0 + tx;
      float v[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          v[i][h] = c0 + ty + 8 * i < C && p0 + tx + 32 * h < pixels
                        ? s[int64_t{8 * i} * pixels + 32 * h]
                        : 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          tile[ty + 8 * i][tx + 32 * h] = v[i][h];
      __syncthreads();
      // Write: pixel p0 + ty + 8i, channels c0 + tx.
      const int64_t pixel_stride = groups * c_pad;
      const int64_t d0 = ((n * pixels + p0 + ty) * groups + g) * c_pad + c0 + tx;
#pragma unroll
      for (int i = 0; i < kClCopyPixels / 8; ++i) {
        if (p0 + ty + 8 * i < pixels) {
          const int64_t e = d0 + int64_t{8 * i} * pixel_stride;
          uint32_t big, residual;
          split_tf32(tile[tx][ty + 8 * i], big, residual);
          dst[e] = __uint_as_float(big);
          if (small != nullptr) small[e] = __uint_as_float(residual);
        }
      }
      __syncthreads();  // the tile is rewritten by this block's next one
    }
  }
}

}  // namespace

void conv_batch_wgmma(CachingAllocator& alloc, const BiArgs& args, const BatchIgemmPlan& plan,
                      const float* w, int device) {
  check_wgmma_code(device);
  // 1xTF32: 128 x 128 or 64 x 128; 3xTF32: 128 x 64 or 64 x 128 (Bw*Split).
  const bool tile_ok = plan.split
                           ? (plan.bm == 128 && plan.bn == 64) || (plan.bm == 64 && plan.bn == 128)
                           : (plan.bm == 128 || plan.bm == 64) && plan.bn == 128;
  TGRAD_CHECK(tile_ok, "conv batch-wgmma: no instance has the planned tile ", plan.bm, "x", plan.bn,
              plan.split ? " 3xTF32" : " 1xTF32");
  const int64_t taps = int64_t{args.kH} * args.kW;
  const int64_t values = plan.groups * args.packed_group;
  const int64_t planes = plan.split ? 2 : 1;
  std::shared_ptr<void> packed = alloc.allocate(planes * values * int64_t{sizeof(float)}, device);
  float* wp = static_cast<float*>(packed.get());
  float* wp_small = plan.split ? wp + values : nullptr;
  batch_igemm_pack(pack_kmajor_kernel<true>, pack_kmajor_kernel<false>, args.gather, w, wp,
                   wp_small, plan.groups, args.C, args.M, taps, plan.c_pad, plan.m_pad);
  TGRAD_CUDA_CHECK_LAUNCH("batch_wgmma pack_kmajor_kernel");
  BiArgs a = args;
  a.a_big = wp, a.a_small = wp_small;
  a.src_cl = nullptr, a.src_cl_small = nullptr, a.cl_pixel = 0;
  std::shared_ptr<void> cl_copy;
  if (plan.channels_last) {
    const int64_t pixels = int64_t{args.Hs} * args.Ws,
                  cl_values = args.N * pixels * plan.groups * plan.c_pad;
    cl_copy = alloc.allocate(planes * cl_values * int64_t{sizeof(float)}, device);
    float* cl = static_cast<float*>(cl_copy.get());
    float* cl_small = plan.split ? cl + cl_values : nullptr;
    const dim3 grid(static_cast<unsigned>((pixels + kClCopyPixels - 1) / kClCopyPixels),
                    static_cast<unsigned>(std::min<int64_t>(plan.c_pad / 32, 65535)),
                    static_cast<unsigned>(std::min<int64_t>(args.N * plan.groups, 65535)));
    to_channels_last_kernel<<<grid, 256>>>(args.src, cl, cl_small, args.N, plan.groups, args.C,
                                           plan.c_pad, pixels);
    TGRAD_CUDA_CHECK_LAUNCH("batch_wgmma to_channels_last_kernel");
    a.src_cl = cl, a.src_cl_small = cl_small, a.cl_pixel = plan.groups * plan.c_pad;
  }
  // K slices: the partials (a bm x bn tile a slice, tile after tile of the grid) and the tiles'
  // counters, zeroed first.
  TGRAD_CHECK(plan.k_slices == 1 || plan.split, "conv batch-wgmma: K slices (", plan.k_slices,
              ") need a 3xTF32 plan");
  a.k_slices = static_cast<int>(plan.k_slices);
  a.partials = nullptr, a.counters = nullptr;
  std::shared_ptr<void> partials, counters;
  if (plan.k_slices > 1) {
    const int64_t tiles = plan.tiles();
    partials =
        alloc.allocate(tiles * plan.k_slices * plan.bm * plan.bn * int64_t{sizeof(float)}, device);
    counters = alloc.allocate(tiles * int64_t{sizeof(unsigned)}, device);
    a.partials = static_cast<float*>(partials.get());
    a.counters = static_cast<unsigned*>(counters.get());
    TGRAD_CUDA_CHECK(cudaMemsetAsync(a.counters, 0, tiles * sizeof(unsigned)));
  }
  if (plan.tma) {
    TGRAD_CHECK(plan.channels_last && !plan.split,
                "conv batch-wgmma: TMA copies need a 1xTF32 plan with channels-last B");
    plan.bm == 128 ? launch_tma<Bw128>(a, plan) : launch_tma<Bw64>(a, plan);
  } else if (plan.split && plan.k_slices > 1) {
    plan.bm == 128 ? launch<Bw128Split, true>(a, plan) : launch<Bw64Split, true>(a, plan);
  } else if (plan.split) {
    plan.bm == 128 ? launch<Bw128Split>(a, plan) : launch<Bw64Split>(a, plan);
  } else {
    plan.bm == 128 ? launch<Bw128>(a, plan) : launch<Bw64>(a, plan);
  }
}

}  // namespace tgrad::cuda
