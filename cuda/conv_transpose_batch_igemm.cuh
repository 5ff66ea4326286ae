// The launcher of the batch-positions implicit GEMM (conv_transpose_batch_igemm.cu; index formula
// in conv_batch_igemm.h): forward (src = x, out = y, bias may be null) and dgrad (src = dy, out =
// dx, bias null) of a float32, groups-1 transposed conv, as the planner's plan says. Private to
// cuda/.
#pragma once

#include "core/conv_geometry.h"
#include "cuda/allocator.h"
#include "cuda/conv_batch_igemm.h"
#include "cuda/conv_plan.h"

namespace tgrad::cuda {

// Packs w ((C_in, C_out, kH, kW)) into the plan's TF32 layout in a workspace, then launches the
// instance of plan's tile (plan.wgmma: conv_batch_wgmma's); the caller has checked the tensors
// against g.
void conv_batch_igemm(CachingAllocator& alloc, ConvPass pass, const BatchIgemmPlan& plan,
                      const ConvGeometry& g, const float* src, const float* w, const float* bias,
                      float* out, int device);

struct BiArgs;  // batch_igemm_device.cuh

// The sm_90a wgmma instance (conv_transpose_batch_wgmma.cu, 1xTF32): packs w into its K-major
// layout and launches plan's tile on args (src, bias, out and sizes set). tgrad::Error when the
// build lacks the sm_90a code.
void conv_batch_wgmma(CachingAllocator& alloc, const BiArgs& args, const BatchIgemmPlan& plan,
                      const float* w, int device);

// batch-wgmma's wgrad (conv_transpose_wgrad_wgmma.cu, 1xTF32): K slice z of plan writes its
// partial of dw ((C_in, C_out/groups * taps), float32) at out + z * dw's elements (out may be dw
// itself when plan.splits == 1); the caller sums the partials in order. tgrad::Error when the
// build lacks the sm_90a code.
void conv_wgrad_wgmma(const BatchWgradPlan& plan, const ConvGeometry& g, const float* x,
                      const float* dy, float* out, int device);

}  // namespace tgrad::cuda
