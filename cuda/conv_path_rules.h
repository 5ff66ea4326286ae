// When the GEMM path (cuda/conv_transpose_gemm.cu) and the depthwise kernels
// (cuda/conv_transpose_depthwise.cu) can run a pass: the planner's rules for those two rows.
// Plain C++, compiled in every build with the planner. Private to the project (not installed).
#pragma once

#include <cstdint>
#include <string>

#include "core/conv_geometry.h"
#include "core/dtype.h"
#include "cuda/conv_direct.h"
#include "cuda/conv_plan.h"
#include "cuda/conv_thin.h"

namespace tgrad::cuda {

// The column buffer and the packed activations of one batch chunk stay under this many bytes:
// the batch is cut into chunks of as many samples as fit (a layer whose single sample does not
// fit is declined).
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{256} << 20;

// Elements of GEMM-path workspace one sample needs: the column buffer plus the packed activations.
inline int64_t gemm_workspace_per_sample(const ConvGeometry& g) {
  const int64_t positions = g.in_size[0] * g.in_size[1];
  return (g.out_channels * g.kernel[0] * g.kernel[1] + g.in_channels) * positions;
}

// Forward and dgrad on the GEMM path multiply each sample's plane where it lies in x or dx (one
// GEMM per sample, batched: no packed copy, and no copy back) when the groups are 1 and a sample
// has at least this many input positions. Under it a sample's GEMM is too short to fill the GPU
// and the packed (C_in, batch x positions) operand's one long GEMM is faster; from there up the
// per-sample GEMMs were faster on every suite layer, both passes and precisions
// (docs/performance.md, "Runs 225-230").
inline constexpr int64_t kGemmPerSampleMinPositions = 2048;
inline bool gemm_per_sample(const ConvGeometry& g) {
  return g.groups == 1 && g.in_size[0] * g.in_size[1] >= kGemmPerSampleMinPositions;
}

// True when every per-axis size of g fits the 32-bit kernels (conv_transpose_gemm.cuh: the
// arithmetic inside a plane is 32-bit).
inline bool fits_plane32(const ConvGeometry& g) {
  constexpr int64_t kAxisMax = int64_t{1} << 30, kPlaneMax = 2147483647;
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    if (g.in_size[u] >= kAxisMax || g.out_size[u] >= kAxisMax || g.stride[u] >= kAxisMax ||
        g.padding[u] >= kAxisMax || g.kernel[u] * g.dilation[u] >= kAxisMax) {
      return false;
    }
  }
  return g.in_size[0] * g.in_size[1] <= kPlaneMax && g.out_size[0] * g.out_size[1] <= kPlaneMax;
}

// The depthwise wgrad keeps one accumulator per tap in registers.
inline constexpr int64_t kDepthwiseMaxTaps = 32;

// Empty when the GEMM path can run `pass` of g in `dtype` at `precision`; else why not.
std::string gemm_path_declined(ConvPass pass, const ConvGeometry& g, Precision precision,
                               DType dtype);

// How many slices the GEMM path's wgrad cuts K (the L = batch chunk x positions columns) into:
// when dW is small next to L, its GEMMs have too few tiles to fill the GPU, so each slice of K
// gets its own partial dW (summed in slice order). It depends on the shape, dtype and precision
// only, so the bits do not depend on the GPU; splits x dW elements stays under twice the
// target (the partials' workspace). 1 for more than kGemmWgradMaxSplitGroups groups.
int64_t gemm_wgrad_splits(const ConvGeometry& g, DType dtype, int64_t L);
inline constexpr int64_t kGemmWgradMaxSplitGroups = 16;  // one batched GEMM per group

// Empty when the depthwise kernels can run `pass` of g in `dtype`; else why not.
std::string depthwise_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype);

// Empty when the direct kernels (conv_transpose_direct.cu) can run `pass` of g in `dtype`, with
// their configuration in *plan (when not null); else why not. Whether they are worth running is
// the planner's question (conv_plan.cpp), not this one.
std::string direct_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype,
                                 DirectPlan* plan);

// Empty when the thin-output kernels (conv_transpose_thin.cu) can run `pass` of g in `dtype`,
// with their configuration in *plan (when not null); else why not.
std::string thin_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype, ThinPlan* plan);

}  // namespace tgrad::cuda
