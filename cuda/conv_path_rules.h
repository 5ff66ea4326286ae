// When the GEMM path (cuda/conv_transpose_gemm.cu) and the depthwise kernels
// (cuda/conv_transpose_depthwise.cu) can run a pass: the planner's rules for those two rows.
// Plain C++, compiled in every build with the planner. Private to the project (not installed).
#pragma once

#include <cstdint>
#include <string>

#include "core/conv_geometry.h"
#include "core/dtype.h"
#include "cuda/conv_plan.h"

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

// The depthwise wgrad keeps one accumulator per tap in registers.
inline constexpr int64_t kDepthwiseMaxTaps = 32;

// Empty when the GEMM path can run `pass` of g in `dtype` at `precision`; else why not.
std::string gemm_path_declined(ConvPass pass, const ConvGeometry& g, Precision precision,
                               DType dtype);

// Empty when the depthwise kernels can run `pass` of g in `dtype`; else why not.
std::string depthwise_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype);

}  // namespace tgrad::cuda
