// Device pieces shared by the two batch-positions implicit GEMMs of conv_transpose forward and
// dgrad (conv_transpose_batch_igemm.cu on mma.sync, conv_transpose_batch_wgmma.cu on sm_90a's
// wgmma): their arguments, the phase and tap tables a CTA starts from, and the epilogue that
// writes a staged output tile. Index formula in conv_batch_igemm.h. Private to cuda/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/conv_batch_igemm.h"
#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

// The kernels' arguments (by value). Sizes per conv_batch_igemm.h; gather: forward's phase
// arithmetic.
// C and M are one group's channels; a CTA's group is blockIdx.z, its phase blockIdx.x % phases
// and its column tile blockIdx.x / phases (batch_igemm_group rebases the pointers to the group).
// The phases of a column tile are neighbours in the grid: a strided forward's phases interleave
// in y, so the CTAs that write the same output sectors run at about the same time and L2 merges
// their writes (with the phase slowest, a phase's partial sectors of a y larger than L2 were
// evicted before the next phase filled them).
struct BiArgs {
  const float* src;
  const float* a_big;    // packed TF32 weights (each kernel its own layout), group after group
  const float* a_small;  // their TF32 residuals (3xTF32), else null
  const float* bias;     // groups x M values or null
  float* out;
  int64_t N;
  int C, M, Hs, Ws, Ho, Wo, kH, kW, sH, sW, pH, pW, dH, dW;
  int phases, phases_w;  // output phases (phases_h x phases_w), and along W
  bool gather;
  int64_t c_pad, m_pad;
  int64_t src_sample, out_sample;  // floats from one sample to the next (all groups' channels)
  int64_t packed_group;            // floats of packed weights per group
  // batch-wgmma's channels-last source, or null: src as [n][y][x][group][c_pad], rounded to
  // TF32 and zero past C; cl_pixel = groups * c_pad floats a pixel. 3xTF32: src_cl_small holds
  // the TF32 residuals in the same layout, else null.
  const float* src_cl;
  const float* src_cl_small;
  int64_t cl_pixel;
  // batch-wgmma's K slices (BatchIgemmPlan::k_slices; 0 or 1: none): each tile's slices write
  // their partials to `partials` (k_slices x the tile's values, tile after tile) and count
  // themselves in counters[tile] (zero before the launch); the last one sums them.
  int k_slices;
  float* partials;
  unsigned* counters;
};

// The arguments of this CTA's group: src, out, bias and the packed weights moved to its first
// channel.
__device__ inline BiArgs batch_igemm_group(const BiArgs& args) {
  BiArgs a = args;
  const int64_t g = blockIdx.z;
  if (g == 0) return a;
  a.src += g * a.C * int64_t{a.Hs} * a.Ws;
  a.out += g * a.M * int64_t{a.Ho} * a.Wo;
  if (a.bias) a.bias += g * a.M;
  a.a_big += g * a.packed_group;
  if (a.src_cl) a.src_cl += g * a.c_pad;
  if (a.src_cl_small) a.src_cl_small += g * a.c_pad;
  if (a.a_small) a.a_small += g * a.packed_group;
  return a;
}

// Weight W[m, c, tap] of group g, as the GEMM sees it, from w (C_in, C_out/groups, taps); C and
// M are one group's channels. forward (gather): m = co, c = ci, w[g*C + c, m, tap]; dgrad:
// m = ci, c = co, w[g*M + m, c, tap].
__device__ inline float batch_igemm_weight(const float* w, int64_t g, int64_t m, int64_t c,
                                           int64_t tap, int64_t C, int64_t M, int64_t taps,
                                           bool gather) {
  return gather ? w[((g * C + c) * M + m) * taps + tap] : w[((g * M + m) * C + c) * taps + tap];
}

// ---- Weight packing --------------------------------------------------------------------------
// Both batch kernels pack W once a call into a layout of their own (the A operand). A block of
// their pack kernels stages kPackRows rows m x kPackChannels channels c x up to kPackTaps taps of
// one group's W in shared memory: read along w, whose taps are contiguous and then its rows
// (forward) or channels (dgrad), and written along the packed layout, so that both sides move
// whole runs. Each thread's kPackPerThread loads are issued before any is used, and the tile is
// small enough that a layer's weights make hundreds of blocks: one thread a packed value, as
// before, read w a row or channel stride apart and spent its time on 64-bit index divisions,
// while larger tiles left small layers a few blocks of serial loads (docs/performance.md).
inline constexpr int kPackRows = 32, kPackChannels = 4, kPackTaps = 8;
inline constexpr int kPackTile = kPackRows * kPackChannels;
inline constexpr int kPackPitch =
    kPackTile + 1;  // floats a tap: the taps of a row in distinct banks
inline constexpr int kPackThreads = 256;
inline constexpr int kPackPerThread = kPackTaps * kPackTile / kPackThreads;

// The pack grid: x over row tiles, y over 4-channel groups, z over (group, tap chunk); the
// kernel strides over y and z past the grid's limits.
inline dim3 batch_igemm_pack_grid(int64_t groups, int64_t taps, int64_t c_pad, int64_t m_pad) {
  const int64_t chunks = groups * ((taps + kPackTaps - 1) / kPackTaps);
  return dim3(static_cast<unsigned>((m_pad + kPackRows - 1) / kPackRows),
              static_cast<unsigned>(std::min<int64_t>(c_pad / kPackChannels, 65535)),
              static_cast<unsigned>(std::min<int64_t>(chunks, 65535)));
}

// big[e] = tf32(W[m, c, tap]) and, where small is not null (3xTF32), small[e] its TF32 residual,
// with e = at(g, tap, c, m), for every m < m_pad, c < c_pad and tap of every group, zero outside
// M x C; kGather: forward's weights (batch_igemm_weight); kChannelsInner orders the stores c % 4
// fastest, then m (a layout [..][m][c % 4]), else m fastest (a layout [..][c][m]). Launched with
// kPackThreads threads on batch_igemm_pack_grid (batch_igemm_pack). Every index is a shift or a
// mask of the thread's slot (taps past the chunk idle their lanes): runtime divisions here cost
// more than the copy.
template <bool kGather, bool kChannelsInner, class At>
__device__ inline void batch_igemm_pack_tiles(const float* __restrict__ w, float* __restrict__ big,
                                              float* __restrict__ small, int groups, int C, int M,
                                              int taps, int c_pad, int m_pad, const At& at) {
  static_assert((kPackTaps & (kPackTaps - 1)) == 0 && (kPackRows & (kPackRows - 1)) == 0 &&
                    (kPackChannels & (kPackChannels - 1)) == 0,
                "powers of two: slots split by shifts and masks");
  __shared__ float tile[kPackTaps * kPackPitch];
  const int m0 = static_cast<int>(blockIdx.x) * kPackRows;
  const int chunks = (taps + kPackTaps - 1) / kPackTaps;
  const int tid = static_cast<int>(threadIdx.x);
  for (int z = static_cast<int>(blockIdx.z); z < groups * chunks;
       z += static_cast<int>(gridDim.z)) {
    const int g = z / chunks, t0 = (z - g * chunks) * kPackTaps, tc = min(kPackTaps, taps - t0);
    for (int c0 = static_cast<int>(blockIdx.y) * kPackChannels; c0 < c_pad;
         c0 += static_cast<int>(gridDim.y) * kPackChannels) {
      // Along w: taps fastest, then rows (forward: w[g*C + c][m][tap]) or channels (dgrad:
      // w[g*M + m][c][tap]).
      constexpr int kInner = kGather ? kPackRows : kPackChannels;
      struct Slot {
        int t, m, c4;
      };
      const auto slot = [&](int k) {  // this thread's k-th value of the tile, in w's order
        const int i = tid + k * kPackThreads;
        const int t = i % kPackTaps, rest = i / kPackTaps;
        return Slot{t, kGather ? rest % kInner : rest / kInner,
                    kGather ? rest / kInner : rest % kInner};
      };
      float v[kPackPerThread];
#pragma unroll
      for (int k = 0; k < kPackPerThread; ++k) {
        const Slot e = slot(k);
        const bool in = e.t < tc && m0 + e.m < M && c0 + e.c4 < C;
        v[k] = in ? batch_igemm_weight(w, g, m0 + e.m, c0 + e.c4, t0 + e.t, C, M, taps, kGather)
                  : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kPackPerThread; ++k) {
        const Slot e = slot(k);
        tile[e.t * kPackPitch + e.m * kPackChannels + e.c4] = v[k];
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kPackPerThread; ++k) {
        const int i = tid + k * kPackThreads;
        const int t = i / kPackTile, r = i % kPackTile;
        const int m = kChannelsInner ? r / kPackChannels : r % kPackRows;
        const int c4 = kChannelsInner ? r % kPackChannels : r / kPackRows;
        if (t < tc && m0 + m < m_pad) {
          const int64_t e = at(g, t0 + t, c0 + c4, m0 + m);
          uint32_t hi, residual;
          split_tf32(tile[t * kPackPitch + m * kPackChannels + c4], hi, residual);
          big[e] = __uint_as_float(hi);
          if (small != nullptr) small[e] = __uint_as_float(residual);
        }
      }
      __syncthreads();  // the tile is refilled by the next channels or taps
    }
  }
}

// A pack kernel of either batch kernel: (w, big, small, groups, C, M, taps, c_pad, m_pad).
using BatchIgemmPackKernel = void (*)(const float*, float*, float*, int, int, int, int, int, int);

// Packs one call's weights with `forward` (gather) or `dgrad`, the two instances of a pack kernel.
inline void batch_igemm_pack(BatchIgemmPackKernel forward, BatchIgemmPackKernel dgrad, bool gather,
                             const float* w, float* big, float* small, int64_t groups, int64_t C,
                             int64_t M, int64_t taps, int64_t c_pad, int64_t m_pad) {
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  (gather ? forward : dgrad)<<<batch_igemm_pack_grid(groups, taps, c_pad, m_pad), kPackThreads>>>(
      w, big, small, i(groups), i(C), i(M), i(taps), i(c_pad), i(m_pad));
}

// The CTA's phase (blockIdx.x % phases): both axes and their tap tables (kernel index, src offset),
// in shared memory. Thread 0 fills them; the caller synchronizes before reading.
struct BiTaps {
  int kh[kBatchIgemmMaxTaps], sh[kBatchIgemmMaxTaps];
  int kw[kBatchIgemmMaxTaps], sw[kBatchIgemmMaxTaps];
  BatchIgemmAxis axis[2];
};

__device__ inline void batch_igemm_list_taps(const BiArgs& a, BiTaps& t) {
  if (threadIdx.x != 0) return;
  const int phase = static_cast<int>(blockIdx.x % a.phases);
  const int rh = phase / a.phases_w, rw = phase % a.phases_w;
  t.axis[0] =
      batch_igemm_axis(a.gather, a.Ho, a.kH, a.sH, a.pH, a.dH, rh, t.kh, t.sh, kBatchIgemmMaxTaps);
  t.axis[1] =
      batch_igemm_axis(a.gather, a.Wo, a.kW, a.sW, a.pW, a.dW, rw, t.kw, t.sw, kBatchIgemmMaxTaps);
}

// A CTA's place in the GEMM: its phase's axes (thread 0 lists the taps into tt; every thread
// waits for them), the phase's columns (batch x positions), the CTA's first column and row, and
// in K slices (batch_igemm_sliced_tile) its slice and its tile's index in the grid (id: the same
// for every slice of the tile). n0 >= n_total when this phase has fewer positions than the
// largest one: nothing to do.
struct BiTile {
  BatchIgemmAxis ay, ax;
  int64_t qplane, n_total, n0, id;
  int m0, slice;
};
__device__ inline BiTile batch_igemm_tile(const BiArgs& a, BiTaps& tt, int bm, int bn) {
  batch_igemm_list_taps(a, tt);
  __syncthreads();
  BiTile t;
  t.ay = tt.axis[0], t.ax = tt.axis[1];
  t.qplane = int64_t{t.ay.q} * t.ax.q;
  t.n_total = a.N * t.qplane;
  t.n0 = int64_t{blockIdx.x / a.phases} * bn;
  t.m0 = static_cast<int>(blockIdx.y) * bm;
  t.id = 0, t.slice = 0;
  return t;
}

// batch_igemm_tile for an instance run in K slices: the grid's y is slice x row tile.
__device__ inline BiTile batch_igemm_sliced_tile(const BiArgs& a, BiTaps& tt, int bm, int bn) {
  BiTile t = batch_igemm_tile(a, tt, bm, bn);
  const int m_tiles = static_cast<int>(a.m_pad) / bm;
  t.slice = static_cast<int>(blockIdx.y) / m_tiles;
  const int m_tile = static_cast<int>(blockIdx.y) - t.slice * m_tiles;
  t.m0 = m_tile * bm;
  t.id = (int64_t{blockIdx.z} * m_tiles + m_tile) * gridDim.x + blockIdx.x;
  return t;
}

// A slice's steps and where a step starts: batch_igemm_slice_steps and batch_igemm_cursor
// (conv_batch_igemm.h).

// Column j = (n*Qy + qy)*Qx + qx of a phase: its sample and position.
struct BiColumn {
  int64_t n;
  int qy, qx;
};
__device__ inline BiColumn batch_igemm_column(int64_t j, int64_t qplane, int qx_count) {
  BiColumn c;
  c.n = j / qplane;
  const int rest = static_cast<int>(j - c.n * qplane);
  c.qy = rest / qx_count, c.qx = rest - c.qy * qx_count;
  return c;
}

// Where column j of the CTA's phase reads src: its sample's first src value and the src
// position of its tap offset 0 (ok false past the phase's columns: src_n stays a.src).
struct BiSource {
  bool ok;
  int sy0, sx0;
  const float* src_n;
};
__device__ inline BiSource batch_igemm_source(const BiArgs& a, const BiTile& t, int64_t j) {
  BiSource s{j < t.n_total, 0, 0, a.src};
  if (s.ok) {
    const BiColumn c = batch_igemm_column(j, t.qplane, t.ax.q);
    s.sy0 = c.qy * t.ay.ss, s.sx0 = c.qx * t.ax.ss;
    s.src_n = a.src + c.n * a.src_sample;
  }
  return s;
}

// Writes the CTA's output tile, staged in shared memory as kBM rows of ld floats (row m - m0,
// column j - n0), plus the bias. Thread t takes column t % kBN and every (kThreads / kBN)-th row
// from t / kBN: a warp stores 32 consecutive columns of one row (forward: every os-th float of
// an output row, dgrad: contiguous), not the fragments' scattered pairs.
template <int kBM, int kBN, int kThreads>
__device__ inline void batch_igemm_store(const BiArgs& a, const float* tile, int ld,
                                         const BatchIgemmAxis& ay, const BatchIgemmAxis& ax,
                                         int64_t n0, int m0) {
  static_assert(kThreads % kBN == 0, "whole rows of threads");
  const int tid = static_cast<int>(threadIdx.x);
  const int col = tid % kBN, row0 = tid / kBN;
  constexpr int kRowStep = kThreads / kBN;
  const int64_t qplane = int64_t{ay.q} * ax.q;
  const int64_t j = n0 + col;
  if (j >= a.N * qplane) return;
  const BiColumn c = batch_igemm_column(j, qplane, ax.q);
  const int64_t plane_o = int64_t{a.Ho} * a.Wo;
  float* out_j = a.out + c.n * a.out_sample + int64_t{c.qy * ay.os + ay.ob} * a.Wo +
                 (c.qx * ax.os + ax.ob) + int64_t{m0 + row0} * plane_o;
  const float* cs = tile + row0 * ld + col;
  const int rows = min(kBM, a.M - m0);
  const int64_t out_step = int64_t{kRowStep} * plane_o;
#pragma unroll 4
  for (int r = row0; r < rows; r += kRowStep, cs += kRowStep * ld, out_j += out_step)
    *out_j = *cs + (a.bias ? a.bias[m0 + r] : 0.0f);
}

// Launches one instance with (args, extra...): `what` names the kernel in errors; the grid is
// (column tiles x phases, the phase fastest) x (K slices x row tiles) x groups; smem_bytes must be
// what the planner counted for the plan's tile.
template <class Kernel, class... Extra>
void batch_igemm_launch(Kernel kernel, const char* what, int threads, int smem_bytes,
                        const BiArgs& args, const BatchIgemmPlan& plan, const Extra&... extra) {
  TGRAD_CHECK(smem_bytes == plan.smem_bytes, "conv ", what, ": the plan's ", plan.smem_bytes,
              " bytes of shared memory are not the instance's ", smem_bytes);
  TGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const dim3 grid(static_cast<unsigned>(plan.n_tiles * plan.phases_h * plan.phases_w),
                  static_cast<unsigned>(plan.m_tiles * plan.k_slices),
                  static_cast<unsigned>(plan.groups));
  kernel<<<grid, threads, smem_bytes>>>(args, extra...);
  check_cuda(cudaGetLastError(), what, __FILE__, __LINE__);  // as TGRAD_CUDA_CHECK_LAUNCH
}

}  // namespace tgrad::cuda
