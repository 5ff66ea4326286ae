// The thin-output kernels (planner row "thin", conv_transpose_thin.cu). Private to the project.
#pragma once

#include "cuda/allocator.h"
#include "cuda/conv_plan.h"
#include "cuda/conv_thin.h"
#include "cuda/conv_transpose_gemm.h"

namespace tgrad::cuda {

// Runs `pass` through the thin kernels with the planner's configuration
// (thin_path_declined); tgrad::Error for tensors that do not match g or a dtype other than
// float32.
void conv_thin_run(CachingAllocator& alloc, ConvPass pass, const ThinPlan& plan,
                   const ConvGeometry& g, const ConvOperands& t);

}  // namespace tgrad::cuda
