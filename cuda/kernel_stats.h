// Which conv kernel ran, for tests that must know a fast path was taken (its results alone
// cannot tell two tensor-core kernels apart). Plain C++: tests include it without CUDA headers.
// Private to the project (not installed).
#pragma once

#include <cstdint>

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

}  // namespace tgrad::cuda
