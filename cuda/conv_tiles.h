// The tile arithmetic of the tensor-core conv kernels: the implicit-GEMM problem of forward/dgrad
// (IgemmProblem) and the split-K plan of wgrad (WgradPlan), with the functions that fit a tile
// shape to a geometry. Plain C++ (no CUDA headers): the planner, and its tests on machines
// without a GPU, compute exactly the fields the kernels are launched with. Private to cuda/.
#pragma once

#include <cstdint>

namespace tgrad::cuda {

// ---- Forward / dgrad: the implicit GEMM (index formula in conv_transpose_igemm.cuh) ----------

inline constexpr int kIgemmMaxTaps = 32;
inline constexpr int kIgemmMaxKh = 8;
// Shared memory an SM 9.0 CTA takes beside its dynamic allocation: what the driver reserves
// (cudaDevAttrReservedSharedMemoryPerBlock) and the row kernels' static tap table (IgemmTaps).
inline constexpr int kReservedSmemPerCta = 1024;
inline constexpr int kIgemmStaticSmem = 512;

struct IgemmProblem {
  const float* src;   // (N, C, Hs, Ws)
  const float* wp;    // packed weights [tap][c_pad][m_pad], zero padded
  const float* bias;  // M values or null
  float* out;         // (N, M, Ho, Wo)
  int64_t N, C, M, Hs, Ws, Ho, Wo, c_pad, m_pad;
  int64_t kH, kW, sH, pH, dH, sW, pW, dW;
  bool gather;     // forward's index map (divide by the stride) instead of dgrad's
  int64_t phases;  // forward: sW; dgrad: 1 (the planner may set 1, see fill)
  int phase0 = 0;  // phase of the CTAs with phase index 0
  // Forward where only phase phase0 of the output columns gets taps (S1: stride 2, dilation 2):
  // one CTA per position tile writes that phase's results and the bias of the other phases.
  bool fill = false;
  // Row fold (2-D with stride and dilation 1 along H, M <= 32; the wgmma kernel): GEMM rows
  // [0, fold_m) compute output row 2*oh and rows [fold_m, 2*fold_m) row 2*oh + 1 from the same
  // src rows, so a 64-row tile is full. M, Ho and kH are then the folded ones (2*fold_m,
  // ceil(Ho / 2), kH + 1: tap kh' holds kh' - 1 and kh' of the two rows, in the order the index
  // map needs); fold_m and fold_ho are the true M and Ho. fold_m == 0: no fold.
  int64_t fold_m = 0, fold_ho = 0;
  int64_t s_in;   // window columns per position: forward 1, dgrad sW
  int64_t s_out;  // output columns per position: forward sW, dgrad 1
  // Tiling, filled by the planner. Window column j holds src column col0 + j*win_step; position
  // q of a tap reads window column q*b_step + (the tap's offset). dgrad with dW % sW == 0 loads
  // only the columns its taps read (win_step = sW); otherwise win_step = 1, b_step = s_in.
  int64_t q_tiles, m_tiles;
  int win_step, b_step;
  int win_cols;     // window columns staged per channel
  int raw_pitch;    // floats per channel row of the raw (as loaded) window
  int conv_floats;  // converted window of one stage
  int raw_stages;   // raw windows in flight, 2 to 4
  int a_floats;     // one stage of weights staged in shared memory (0: A from registers)
  int smem_bytes;   // two converted stages, two A stages and the raw ones
};

// CTAs of the implicit GEMM's launch (grid x), once the tiling fields are filled.
inline int64_t igemm_ctas(const IgemmProblem& p) {
  return p.m_tiles * p.q_tiles * p.phases * p.Ho * p.N;
}

// A tile shape as the planner sees it: bm x bn outputs per CTA, chunk channels per step.
struct IgemmTiling {
  int bm, bn, chunk, min_blocks;  // min_blocks: CTAs per SM that shared memory must allow
  bool split;                     // 3xTF32: each staged value with its residual
  // The wgmma kernel's weights staged in shared memory for up to this many taps a step (two
  // stages), read through descriptors; 0: A fragments from registers (every other instance).
  int a_smem_taps = 0;
};

// Forward (gather): how many of the kW taps land on src for output phase r, i.e. have
// r + pW - kw*dW a multiple of sW (the device side's igemm_list_taps applies the same test).
int64_t igemm_phase_taps(const IgemmProblem& p, int64_t r);

// Fills p's tiling fields (everything below "Tiling") for t; returns null when the geometry fits,
// else why not: too many taps, a window wider than 4096 columns, more shared memory than
// min_blocks CTAs per SM may have, or sizes past the kernels' 32-bit tap arithmetic. May set
// p.fill (and phases, phase0) even when it then declines: fill depends on the geometry alone.
const char* igemm_plan_tiles(IgemmProblem& p, const IgemmTiling& t);

// ---- wgrad: the split-K tensor-core GEMM (conv_transpose_wgrad.cu) ---------------------------

inline constexpr int kWgradSegment = 64;                // K per step: consecutive iw of one (n, ih)
inline constexpr int kWgradXPitch = kWgradSegment + 4;  // == 4 mod 32: conflict-free conversion
inline constexpr int kWgradWarpM = 32, kWgradWarpN = 32;  // warp tile: 32 ci x 32 co of one tap
inline constexpr int kWgradMaxWarps = 12;                 // 384 threads: up to 168 registers each
inline constexpr int64_t kWgradTargetCtas = 1024;         // per launch, from the shape only
inline constexpr int64_t kWgradMaxPartialBytes = int64_t{256} << 20;

// A CTA owns warps_m*32 ci x warps_n*32 co x taps_per_cta consecutive taps kw of one kh, and one
// split of the K segments. Warp w computes tap w / per_tap. Passed to the kernel by value.
struct WgradPlan {
  int warps_m, warps_n, taps_per_cta;
  int win_cols, win_pitch;  // raw dy window: columns (a multiple of 4) / floats per row
  int col_step, u_step;     // conv dy keeps window columns r0 + u*col_step; K step in u
  int conv_cols, dy_pitch;  // conv dy: columns u / values per column (bank-conflict padding)
  int raw_stages;           // 2, or 1 when 2 would cost a second CTA per SM
  int64_t m_tiles, n_tiles, kw_groups, w_tiles, segments, segs_per_split, splits;
};

// The kernel instances of the wgrad tensor-core GEMM (template arguments in
// conv_transpose_wgrad.cu).
enum class WgradInstance {
  tf32,           // 1xTF32, two CTAs per SM
  x3tf32,         // 3xTF32, one CTA per SM
  x3tf32_7warps,  // 3xTF32 with 7 warps (one per tap of 7), capped so that two CTAs fit
};

// Registers and shared memory of the device, and the registers of each wgrad instance as
// compiled, which decide the raw stages (never whether the kernel runs, beyond shared memory).
struct WgradDeviceLimits {
  int64_t smem_per_block_optin, smem_per_sm, regs_per_sm;
  int regs_tf32, regs_x3tf32, regs_x3tf32_7warps;
};

// What wgrad's tensor-core kernel is launched with.
struct WgradLaunch {
  WgradPlan plan;
  WgradInstance instance;
  int threads, smem_bytes;
};

// Plans the wgrad GEMM of a (N, C_in, Hi, Wi) x -> (N, C_out, Ho, Wo) transposed conv with groups 1
// (elements = C_in * C_out * kH * kW); returns null when it fits, else why not.
struct WgradShape {
  int64_t N, Ci, Co, Hi, Wi, Ho, Wo, kH, kW, sW, dW;
};
const char* wgrad_plan_tiles(const WgradShape& p, bool split, const WgradDeviceLimits& dev,
                             WgradLaunch& out);

}  // namespace tgrad::cuda
