// The weight gradient as one implicit GEMM over the whole batch on sm_90a's wgmma (planner row
// "batch-wgmma", pass wgrad: 1xTF32 at "high", 3xTF32 at "highest"). The GEMM is
// conv_batch_igemm.h's BatchWgradPlan:
//   dw[m, j] = sum_k x[n, m, ih, iw] * dy[n, co, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW]
// with rows m (a group's input channels), columns j = (co*kH + kh)*kW + kw (dw's layout) and K
// over k = (n*Hi + ih)*Wi + iw, every sample and position.
//
// Why: the GEMM path writes this B operand (C_out x taps rows of dy, one per position) to a
// column buffer and reads it back for cuBLAS, and that traffic was most of its time on the
// decoder layers; the split-K mma.sync kernel tiles one input row of one sample, which short rows
// and small images leave mostly empty. Here K spans samples and rows, so 4x4 images and long
// sequences alike fill 128 x 128 x 32 steps, and B is gathered from dy straight into shared
// memory.
//
// Work split. A CTA owns one tile (128 x 128; 3xTF32: 128 x 64 or 64 x 128) of one group and
// one slice of K (the planner cuts K into slices so that the grid fills the GPU); its tile goes
// to that slice's partial and conv_transpose_wgrad.cu sums the partials in slice order, so the
// bits do not depend on timing.
//
// Layout. wgmma takes TF32 operands K-major in core matrices of 8 rows x 4 positions (128
// contiguous bytes): A (x) lands in [k/4][m][k % 4], B (dy) in [k/4][j][k % 4], as in
// conv_transpose_batch_wgmma.cu. Thread t owns the 4 positions k = k_step + 4*((t / 8) % 8) + i of
// every step, and rows (A) and columns (B) r = t % 8 + 8*(t / 64) + 32*u (u < 4 on a side of
// 128, u < 2 on a side of 64): its loads read 4 consecutive positions of a row, its stores are
// one 16-byte group per (u, operand), and the 8 lanes of each quarter warp store 8 consecutive
// rows (128 contiguous bytes: no bank conflicts). Values are rounded to TF32 (round to nearest, as
// every tgrad kernel at "high") on the way to shared memory.
//
// Pipeline, two stages, one barrier a step: load step s + 1 into registers -> fence this thread's
// stores of step s for the async proxy, wait for this warpgroup's wgmmas of step s - 1 ->
// barrier -> issue step s's wgmmas -> round and store step s + 1 into the other stage (last read
// by step s - 1, which every warpgroup finished before the barrier). The loads are in flight
// through the barrier and step s's multiplies.
//
// 3xTF32 ("highest", kSplit): each tile is stored twice, the values rounded to TF32 and their
// TF32 residuals (split_tf32), and a step issues small x big, big x small, then big x big for each
// k8 block into a chain that starts from zero; once the step's wgmmas are waited for, the chain is
// added into a float32 sum (as batch-wgmma's forward does), so the tensor cores' accumulation
// never spans more than one step. Twice the tiles and the sum beside the accumulator fit two
// CTAs per SM with 64 columns a warpgroup: 128 x 64 (warpgroups along M) or 64 x 128 (along N,
// for C_in/groups <= 64).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/conv_batch_igemm.h"
#include "cuda/conv_transpose_batch_igemm.cuh"
#include "cuda/conv_transpose_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"
#include "cuda/wgmma.cuh"

namespace tgrad::cuda {

namespace {

constexpr int kBK = kBatchWgradBK, kCtaThreads = kBatchWgradThreads;
static_assert(kCtaThreads == 256 && kBK == 32,
              "the thread-to-tile map below assumes 256 threads and 32 positions a step");

// Two warpgroups, kWgM along M and kWgN along N, each m64 x kN.
template <int kWgM_, int kWgN_, int kN_, bool kSplit_>
struct WgConfig {
  static constexpr int kWgM = kWgM_, kWgN = kWgN_, kN = kN_;
  static constexpr bool kSplit = kSplit_;
  static constexpr int kBM = 64 * kWgM, kBN = kN * kWgN;
  static constexpr int kPlanes = kSplit ? 2 : 1;
  // Rows (A) and columns (B) a thread loads per step: 32 threads' worth each.
  static constexpr int kUnitsA = kBM / 32, kUnitsB = kBN / 32;
  // One plane of each tile; a stage is [A planes][B planes].
  static constexpr int kAFloats = kBK * kBM, kBFloats = kBK * kBN;
  static constexpr int kStageFloats = kPlanes * (kAFloats + kBFloats);
  static_assert(kWgM * kWgN * 128 == kCtaThreads, "two warpgroups");
  static_assert(kBatchWgradStages == 2 && batch_wgrad_smem_bytes(kBM, kBN, kSplit) ==
                                              kBatchWgradStages * kStageFloats * 4,
                "the planner's shared-memory count");
};

struct WgArgs {
  const float* x;
  const float* dy;
  float* out;  // partials: slice z at out + z * (C_in * cols)
  int64_t N;
  int Ci, Co, Cig, Cog, Hi, Wi, Ho, Wo, kH, kW, sH, sW, pH, pW, dH, dW;
  int64_t cols;  // C_out/groups * taps: the columns of one group's GEMM and dw's row length
  int64_t k_total, steps_per_split;
  int64_t m_tiles, n_tiles, groups;
};

// One column of a tile's B: dy's offset from a sample's group start for position (0, 0), and
// the row and column offsets (kh*dH - pH, kw*dW - pW) that bound it.
struct alignas(16) WgColumn {
  int64_t off;
  int oh, ow;
};
// A row offset that fails every bounds check: for any row oh0 >= 0, oh0 + kNoRow is negative
// (and cannot overflow).
constexpr int kNoRow = -2147483647 - 1;

// kRowAligned: Wi % 4 == 0 and x 16-byte aligned. A thread's 4 positions are then one row of one
// sample (its first is a multiple of 4): x is one float4 a row, and each column of dy one output
// row at columns ow, ow + sW, ... Otherwise each position is placed on its own (rows and samples
// may change between them).
template <class Cfg, bool kRowAligned>
__global__ void __launch_bounds__(kCtaThreads, 2) wgrad_wgmma_kernel(const WgArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kUnitsA = Cfg::kUnitsA, kUnitsB = Cfg::kUnitsB;
  extern __shared__ __align__(128) float smem[];
  // Column tiles fastest: CTAs that run together read the same slice of x through L2.
  int64_t b = blockIdx.x;
  const int64_t nt = b % a.n_tiles;
  b /= a.n_tiles;
  const int64_t mt = b % a.m_tiles;
  b /= a.m_tiles;
  const int64_t g = b % a.groups, z = b / a.groups;
  const int m0 = static_cast<int>(mt) * kBM;
  const int64_t j0 = nt * kBN;
  const int64_t k_begin = z * a.steps_per_split * kBK;
  const int64_t k_end = min(a.k_total, k_begin + a.steps_per_split * kBK);
  const int steps = static_cast<int>((k_end - k_begin + kBK - 1) / kBK);

  const int tid = static_cast<int>(threadIdx.x);
  const int grp = (tid / 8) % 8;            // this thread's 4 positions of a step
  const int r0 = tid % 8 + 8 * (tid / 64);  // its rows / columns r0 + 32*u
  const int64_t hw = int64_t{a.Hi} * a.Wi, howo = int64_t{a.Ho} * a.Wo;
  const int64_t x_sample = int64_t{a.Ci} * hw, dy_sample = int64_t{a.Co} * howo;
  // A: rows m0 + r0 + 32u of the group, valid below a_rows.
  const int a_rows = a.Cig - m0 - r0;
  const float* const xg = a.x + (g * a.Cig + m0 + r0) * hw;
  // B: column j of the tile is (co, kh, kw). Position (n, ih, iw) reads it at dy row ih*sH + oh,
  // column iw*sW + ow, i.e. at dy_g + n*dy_sample + ih*sH*Wo + iw*sW + off. The table holds
  // (off, oh, ow) for the tile's kBN columns and is read back at every load: kept in registers
  // for a thread's four columns, the 16 values pushed the kernel past 128 registers into local
  // memory, whose traffic went through the L1 that the gathers already keep busy
  // (docs/performance.md, "Run 298"). A column past the group's (a partial last tile) gets an
  // oh that no row passes.
  __shared__ WgColumn table[kBN];
  if (tid < kBN) {
    const int64_t j = j0 + tid;
    const int kw = static_cast<int>(j % a.kW), kh = static_cast<int>(j / a.kW % a.kH);
    const int64_t co = j / (int64_t{a.kW} * a.kH);
    WgColumn c{};
    c.oh = j < a.cols ? kh * a.dH - a.pH : kNoRow;
    c.ow = kw * a.dW - a.pW;
    c.off = j < a.cols ? co * howo + int64_t{c.oh} * a.Wo + c.ow : 0;
    table[tid] = c;
  }
  __syncthreads();
  const float* const dy_g = a.dy + g * a.Cog * howo;

  // Where this thread's 4 positions of the next step to load start, as (n, ih, iw); advanced a
  // step (kBK positions) at a time with at most two divisions.
  int64_t cn;
  int cih, ciw;
  {
    const int64_t k = k_begin + 4 * grp;
    cn = k / hw;
    const int64_t p = k - cn * hw;
    cih = static_cast<int>(p / a.Wi), ciw = static_cast<int>(p % a.Wi);
  }
  const auto advance = [&] {
    ciw += kBK;
    if (ciw >= a.Wi) {
      cih += ciw / a.Wi, ciw %= a.Wi;
      if (cih >= a.Hi) cn += cih / a.Hi, cih %= a.Hi;
    }
  };

  // A (x's rows r0 + 32u) and B (dy for columns r0 + 32u) at the step's 4 positions, into
  // registers: zero past the batch, past the group's rows and columns, and where dy's index
  // leaves its plane.
  float xv[kUnitsA][4], bv[kUnitsB][4];
  const auto load = [&] {
    if constexpr (kRowAligned) {
      const bool in = cn < a.N;
      const float* const xp = xg + (in ? cn * x_sample + int64_t{cih} * a.Wi + ciw : 0);
#pragma unroll
      for (int u = 0; u < kUnitsA; ++u) {
        const float4 v = in && 32 * u < a_rows
                             ? __ldg(reinterpret_cast<const float4*>(xp + 32 * u * hw))
                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        xv[u][0] = v.x, xv[u][1] = v.y, xv[u][2] = v.z, xv[u][3] = v.w;
      }
      const int oh0 = cih * a.sH, ow0 = ciw * a.sW;
      const float* const dyp = dy_g + (cn * dy_sample + int64_t{oh0} * a.Wo + ow0);
#pragma unroll
      for (int u = 0; u < kUnitsB; ++u) {
        const WgColumn c = table[r0 + 32 * u];
        const bool row = in && static_cast<unsigned>(oh0 + c.oh) < static_cast<unsigned>(a.Ho);
        const int ow = ow0 + c.ow;
        const float* const p = dyp + c.off;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool ok = row && static_cast<unsigned>(ow + i * a.sW) < static_cast<unsigned>(a.Wo);
          bv[u][i] = ok ? __ldg(p + i * a.sW) : 0.0f;
        }
      }
    } else {
      // Each position on its own: rows and samples may change between them.
      int64_t n = cn;
      int ih = cih, iw = ciw;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (i > 0 && ++iw == a.Wi) {
          iw = 0;
          if (++ih == a.Hi) ih = 0, ++n;
        }
        const bool in = n < a.N;
        const float* const xp = xg + (in ? n * x_sample + int64_t{ih} * a.Wi + iw : 0);
#pragma unroll
        for (int u = 0; u < kUnitsA; ++u)
          xv[u][i] = in && 32 * u < a_rows ? __ldg(xp + 32 * u * hw) : 0.0f;
        const int oh0 = ih * a.sH, ow0 = iw * a.sW;
        const float* const dyp = dy_g + (n * dy_sample + int64_t{oh0} * a.Wo + ow0);
#pragma unroll
        for (int u = 0; u < kUnitsB; ++u) {
          const WgColumn c = table[r0 + 32 * u];
          const bool ok = in && static_cast<unsigned>(oh0 + c.oh) < static_cast<unsigned>(a.Ho) &&
                          static_cast<unsigned>(ow0 + c.ow) < static_cast<unsigned>(a.Wo);
          bv[u][i] = ok ? __ldg(dyp + c.off) : 0.0f;
        }
      }
    }
    advance();
  };
  // Rounded to TF32, one 16-byte group per row (A) and column (B): [k/4][r][k % 4]; 3xTF32 also
  // stores the residuals, one plane (plane floats) further.
  const auto put = [](float* dst, int plane, const float(&v)[4]) {
    store_tf32x4<Cfg::kSplit>(dst, dst + plane, v[0], v[1], v[2], v[3]);
  };
  const auto store = [&](int stage) {
    float* const at = smem + stage * Cfg::kStageFloats + (grp * kBM + r0) * 4;
    float* const bt =
        smem + stage * Cfg::kStageFloats + Cfg::kPlanes * Cfg::kAFloats + (grp * kBN + r0) * 4;
#pragma unroll
    for (int u = 0; u < kUnitsA; ++u)
      put(at + 32 * u * 4, Cfg::kAFloats, xv[u]);
#pragma unroll
    for (int u = 0; u < kUnitsB; ++u)
      put(bt + 32 * u * 4, Cfg::kBFloats, bv[u]);
  };

  const int warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const int wgm = wg / Cfg::kWgN, wgn = wg % Cfg::kWgN;
  const uint32_t base = smem_addr(smem);
  constexpr uint32_t kLboA = kBM * 16, kLboB = kBN * 16;
  float acc[Cfg::kN / 2] = {};
  // 3xTF32: each step's chain, added into sum once its wgmmas are done.
  float sum[Cfg::kSplit ? Cfg::kN / 2 : 1] = {};
  const auto flush = [&] { add_step_chain<Cfg::kSplit>(sum, acc); };

  if (steps > 0) {
    load();
    store(0);
  }
  for (int s = 0; s < steps; ++s) {
    const int rd = s & 1;
    const bool next = s + 1 < steps;
    if (next) load();     // step s + 1's loads fly through the barrier and step s's multiplies
    fence_proxy_async();  // this thread's stores of step s are visible to wgmma
    wgmma_wait_all();     // this warpgroup's step s - 1
    if (s > 0) flush();
    __syncthreads();  // step s is in shared memory; every warpgroup is done with step s - 1
    const uint32_t a_addr =
        base + static_cast<uint32_t>(rd * Cfg::kStageFloats * 4 + wgm * 64 * 16);
    const uint32_t b_addr =
        base + static_cast<uint32_t>((rd * Cfg::kStageFloats + Cfg::kPlanes * Cfg::kAFloats) * 4 +
                                     wgn * Cfg::kN * 16);
    const auto a_desc = [&](int kb, int plane) {
      return wgmma_desc(a_addr + plane * Cfg::kAFloats * 4 + 2 * kb * kLboA, kLboA, 128);
    };
    const auto b_desc = [&](int kb, int plane) {
      return wgmma_desc(b_addr + plane * Cfg::kBFloats * 4 + 2 * kb * kLboB, kLboB, 128);
    };
    wgmma_fence();
    wgmma_tf32_step<Cfg::kN, Cfg::kSplit, kBK / 8>(acc, a_desc, b_desc);
    wgmma_commit();
    // The other stage was last read by step s - 1, which every warpgroup finished before the
    // barrier.
    if (next) store(rd ^ 1);
  }
  wgmma_wait_all();
  if (steps > 0) flush();
  const float* const result = Cfg::kSplit ? sum : acc;

  // result[nt*4 + i] holds row g + 8*(i / 2), column nt*8 + 2t + i % 2 of this warp's 16 rows of
  // its warpgroup's 64 x kN; written straight to the slice's partial (row-major, cols long).
  const int gq = lane / 4, t = lane % 4;
  const int64_t jw = j0 + wgn * Cfg::kN;
  float* const out = a.out + z * (int64_t{a.Ci} * a.cols) + (g * a.Cig) * a.cols + jw;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = m0 + wgm * 64 + (warp % 4) * 16 + gq + 8 * half;
    if (row >= a.Cig) continue;
    float* const orow = out + int64_t{row} * a.cols;
#pragma unroll
    for (int nt8 = 0; nt8 < Cfg::kN / 8; ++nt8) {
      const int col = nt8 * 8 + 2 * t;
      if (jw + col < a.cols) orow[col] = result[nt8 * 4 + half * 2];
      if (jw + col + 1 < a.cols) orow[col + 1] = result[nt8 * 4 + half * 2 + 1];
    }
  }
#else
  // Built without sm_90a's features the body would be empty and dw never written.
  __trap();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// The instances: 1xTF32 128 x 128; 3xTF32 128 x 64 and 64 x 128 (64 columns a warpgroup).
using Wg128 = WgConfig<2, 1, 128, false>;
using Wg128Split = WgConfig<2, 1, 64, true>;
using Wg64Split = WgConfig<1, 2, 64, true>;

template <class Cfg>
void launch(const WgArgs& a, const BatchWgradPlan& plan, bool row_aligned) {
  const auto kernel = row_aligned ? wgrad_wgmma_kernel<Cfg, true> : wgrad_wgmma_kernel<Cfg, false>;
  TGRAD_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes));
  const int64_t ctas = plan.m_tiles * plan.n_tiles * plan.groups * plan.splits;
  kernel<<<static_cast<unsigned>(ctas), kCtaThreads, plan.smem_bytes>>>(a);
  TGRAD_CUDA_CHECK_LAUNCH("wgrad_wgmma_kernel");
}

}  // namespace

void conv_wgrad_wgmma(const BatchWgradPlan& plan, const ConvGeometry& g, const float* x,
                      const float* dy, float* out, int device) {
  check_wgmma_code(device);
  const bool tile_ok = plan.split
                           ? (plan.bm == 128 && plan.bn == 64) || (plan.bm == 64 && plan.bn == 128)
                           : plan.bm == 128 && plan.bn == 128;
  TGRAD_CHECK(tile_ok, "conv batch-wgmma wgrad: no instance has the planned tile ", plan.bm, "x",
              plan.bn, plan.split ? " 3xTF32" : " 1xTF32");
  const int smem = batch_wgrad_smem_bytes(plan.bm, plan.bn, plan.split);
  TGRAD_CHECK(plan.smem_bytes == smem && plan.splits > 0, "conv batch-wgmma wgrad: the plan's ",
              plan.smem_bytes, " bytes of shared memory are not the instance's ", smem);
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  WgArgs a{};
  a.x = x, a.dy = dy, a.out = out;
  a.N = g.batch;
  a.Ci = i(g.in_channels), a.Co = i(g.out_channels);
  a.Cig = i(g.in_channels_per_group());
  a.Cog = i(g.out_channels_per_group());
  a.Hi = i(g.in_size[0]), a.Wi = i(g.in_size[1]), a.Ho = i(g.out_size[0]), a.Wo = i(g.out_size[1]);
  a.kH = i(g.kernel[0]), a.kW = i(g.kernel[1]);
  a.sH = i(g.stride[0]), a.sW = i(g.stride[1]);
  a.pH = i(g.padding[0]), a.pW = i(g.padding[1]);
  a.dH = i(g.dilation[0]), a.dW = i(g.dilation[1]);
  a.cols = g.out_channels_per_group() * g.kernel[0] * g.kernel[1];
  a.k_total = g.batch * g.in_size[0] * g.in_size[1];
  a.steps_per_split = plan.steps_per_split;
  a.m_tiles = plan.m_tiles, a.n_tiles = plan.n_tiles, a.groups = plan.groups;
  const bool row_aligned = g.in_size[1] % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (!plan.split)
    launch<Wg128>(a, plan, row_aligned);
  else if (plan.bm == 128)
    launch<Wg128Split>(a, plan, row_aligned);
  else
    launch<Wg64Split>(a, plan, row_aligned);
}

}  // namespace tgrad::cuda
