// Direct kernels for depthwise transposed convolutions (groups == C_in == C_out: one input and
// one output channel per group): forward and dgrad as gathers, wgrad as a two-stage per-(channel,
// tap) reduction. Plain C++: tests include it. Private to the project (not installed).
#pragma once

#include <string>

#include "core/backend.h"
#include "cuda/allocator.h"
#include "cuda/conv_transpose_gemm.h"

namespace tgrad::cuda {

// wgrad keeps one accumulator per tap in registers.
inline constexpr int64_t kDepthwiseMaxTaps = 32;

// Empty when the depthwise kernels can run `pass` of g in `dtype`; else why not.
std::string depthwise_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype);

// Runs `pass` through the depthwise kernels; the caller has checked depthwise_path_declined.
void conv_depthwise_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                        const ConvOperands& t);

}  // namespace tgrad::cuda
