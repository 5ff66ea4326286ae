// Direct kernels for depthwise transposed convolutions (groups == C_in == C_out: one input and
// one output channel per group): forward and dgrad as gathers, wgrad as a two-stage per-(channel,
// tap) reduction. Plain C++: tests include it. Private to the project (not installed).
#pragma once

#include <string>

#include "core/backend.h"
#include "cuda/allocator.h"
#include "cuda/conv_transpose_gemm.h"

namespace tgrad::cuda {

// Runs `pass` through the depthwise kernels; the caller has checked depthwise_path_declined.
void conv_depthwise_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                        const ConvOperands& t);

}  // namespace tgrad::cuda
