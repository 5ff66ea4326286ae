// The fast path of conv_transpose forward and dgrad: one implicit GEMM on TF32 tensor cores,
//   out[n, m, oh, q*s_out + r] = bias[m] + sum_{c, (kh,kw)} W[m, c, kh, kw] * src[n, c, row(oh,
//   kh), q*s_in + off(r, kw)]
// forward: src = x, m = co, c = ci, row/off gather (o + p - k*d)/s where exact, r = ow mod sW
// (so structurally zero taps are skipped); dgrad: src = dy, m = ci, c = co, row = oh*s - p + k*d.
// The problem and its tiling are in conv_tiles.h (the planner fills them); kernels in
// conv_transpose_igemm.cu. Private to cuda/.
#pragma once

#include <cstdint>
#include <memory>

#include "core/conv_geometry.h"
#include "cuda/allocator.h"
#include "cuda/conv_plan.h"
#include "cuda/conv_tiles.h"

namespace tgrad::cuda {

// Packs w ((C_in, C_out, kH, kW)) for p (tiling fields set) into mma A-fragment order,
// converted to TF32 (split: value and residual), zero padded to c_pad x m_pad; returns the
// workspace. Both implicit-GEMM kernels read A this way (wgmma's register A fragment of one warp
// is the m16n8k8 one).
std::shared_ptr<void> igemm_pack_weights(CachingAllocator& alloc, const IgemmProblem& p,
                                         const float* w, bool split, int device);

// The wgmma (sm_90a) kernel, in conv_transpose_wgmma.cu ("highest": 3xTF32, "high": 1xTF32):
// launches the instance of `tile` and `max_taps` (ConvPlan's wgmma_max_taps) for p, whose
// tiling fields the planner filled. tgrad::Error when the device lacks the sm_90a code.
void conv_wgmma_launch(CachingAllocator& alloc, IgemmProblem p, const IgemmTiling& tile,
                       int max_taps, const float* w, int device);

// Whether the wgmma code in this build can run on `device`, asked once per device (the probe
// kernel in conv_transpose_wgmma.cu). A device of compute capability 9.0 whose build lacks the
// sm_90a code is a broken build: tgrad::Error. Every wgmma launcher calls it first.
void check_wgmma_code(int device);

// Runs the plan of a forward or dgrad call whose kernel is wgmma or mma.sync: p is the plan's
// problem with src, bias (forward, or null) and out set; w is the (C_in, C_out, kH, kW) weight,
// packed into a workspace first. The mma.sync kernel multiplies in 3xTF32 (float32-level error)
// when the tile says split ("highest"), else in 1xTF32.
void conv_igemm(CachingAllocator& alloc, const ConvPlan& plan, IgemmProblem p, const float* w,
                int device);

}  // namespace tgrad::cuda
