// The fast path of conv_transpose forward and dgrad: one implicit GEMM on TF32 tensor cores,
//   out[n, m, oh, q*s_out + r] = bias[m] + sum_{c, (kh,kw)} W[m, c, kh, kw] * src[n, c, row(oh,
//   kh), q*s_in + off(r, kw)]
// forward: src = x, m = co, c = ci, row/off gather (o + p - k*d)/s where exact, r = ow mod sW
// (so structurally zero taps are skipped); dgrad: src = dy, m = ci, c = co, row = oh*s - p + k*d.
// Kernels in conv_transpose_igemm.cu. Private to cuda/.
#pragma once

#include <cstdint>
#include <memory>

#include "core/conv_geometry.h"
#include "cuda/allocator.h"

namespace tgrad::cuda {

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
  int smem_bytes;   // two converted stages and the raw ones
};

// A tile shape as the planner sees it: bm x bn outputs per CTA, chunk channels per step.
struct IgemmTiling {
  int bm, bn, chunk, min_blocks;  // min_blocks: CTAs per SM that shared memory must allow
  bool split;                     // 3xTF32: each staged value with its residual
};

// Forward (gather): how many of the kW taps land on src for output phase r, i.e. have
// r + pW - kw*dW a multiple of sW (the device side's igemm_list_taps applies the same test).
int64_t igemm_phase_taps(const IgemmProblem& p, int64_t r);

// Fills p's tiling fields (everything below "Tiling") for t; false when the geometry does not
// fit: too many taps, a window wider than 4096 columns, more shared memory than min_blocks CTAs
// per SM may have, or sizes past the kernels' 32-bit tap arithmetic.
bool igemm_plan_tiles(IgemmProblem& p, const IgemmTiling& t);

// Packs w ((C_in, C_out, kH, kW)) for p (tiling fields set) into mma A-fragment order,
// converted to TF32 (split: value and residual), zero padded to c_pad x m_pad; returns the
// workspace. Both implicit-GEMM kernels read A this way (wgmma's register A fragment of one warp
// is the m16n8k8 one).
std::shared_ptr<void> igemm_pack_weights(CachingAllocator& alloc, const IgemmProblem& p,
                                         const float* w, bool split, int device);

// The wgmma (sm_90a) kernel, in conv_transpose_wgmma.cu ("highest": 3xTF32, "high": 1xTF32):
// launches and returns true when the device is sm_90 and the geometry is one it runs faster
// than the mma.sync kernel (taps a whole window column apart; "highest": M > 32, or M <= 32
// folded over two output rows); false, having launched nothing, otherwise.
bool conv_wgmma(CachingAllocator& alloc, IgemmProblem p, const float* w, Precision precision,
                int device);

// Runs the tensor-core implicit GEMM for p (geometry fields set; the tiling fields are filled
// here) when it fits one of the tile shapes; returns false, having launched nothing, when the
// general kernel must run instead. "highest" multiplies in 3xTF32 (float32-level error), "high"
// in 1xTF32. w is the (C_in, C_out, kH, kW) weight; it is packed into a workspace first.
bool conv_igemm(CachingAllocator& alloc, IgemmProblem p, const float* w, Precision precision,
                int device);

}  // namespace tgrad::cuda
