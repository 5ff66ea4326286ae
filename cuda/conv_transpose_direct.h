// The direct transposed-conv kernels (planner row "direct"): float32 / float64 FMA kernels for
// calls with few channels per group. Plain C++: tests include it. Private to the project.
#pragma once

#include "core/backend.h"
#include "cuda/allocator.h"
#include "cuda/conv_direct.h"
#include "cuda/conv_transpose_gemm.h"

namespace tgrad::cuda {

// Runs `pass` through the direct kernels with the planner's configuration (direct_path_declined
// has accepted the call and filled `plan`).
void conv_direct_run(CachingAllocator& alloc, ConvPass pass, const DirectPlan& plan,
                     const ConvGeometry& g, const ConvOperands& t);

}  // namespace tgrad::cuda
