// Which conv kernel ran, for tests that must know a fast path was taken (its results alone
// cannot tell two tensor-core kernels apart). Plain C++: tests include it without CUDA headers.
// Private to the project (not installed).
#pragma once

#include <cstdint>
#include <string>

#include "core/conv_geometry.h"
#include "core/dtype.h"
#include "cuda/conv_plan.h"

namespace tgrad::cuda {

// True when the wgmma conv kernel can run on `device` (compute capability 9.0).
bool wgmma_supported(int device);

// Launches of the wgmma conv kernel (forward and dgrad, either precision) since the process
// started.
int64_t conv_wgmma_launches();

// Runs of the GEMM path (conv_transpose_gemm.cu), of the depthwise kernels
// (conv_transpose_depthwise.cu) and of the direct kernels (conv_transpose_direct.cu), one per
// pass, since the process started.
int64_t conv_gemm_launches();
int64_t conv_depthwise_launches();
int64_t conv_direct_launches();
// Runs of the thin-output kernels (conv_transpose_thin.cu), one per pass.
int64_t conv_thin_launches();

// The kernel the planner chooses for a call on CUDA device `device` (plan_conv with the device's
// caps, preferences on, nothing forced), to compare with last_conv_plan after the call ran;
// empty in a build without CUDA.
std::string conv_planned_kernel(ConvPass pass, const ConvGeometry& g, DType dtype, int device);

}  // namespace tgrad::cuda
