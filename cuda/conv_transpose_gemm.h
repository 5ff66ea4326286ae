// The GEMM path of the three transposed-conv passes (an explicit column buffer and cuBLAS
// strided-batched GEMMs with the groups as the batch), run when the planner picks it (its rule
// is in conv_path_rules.h). Plain C++: tests include it. Private to the project (not installed).
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "cuda/allocator.h"
#include "cuda/conv_params.h"
#include "cuda/conv_path_rules.h"

namespace tgrad::cuda {

// The tensors of one pass: forward a = x, b = w, bias (may be null), out = y; dgrad a = dy,
// b = w, out = dx; wgrad a = x, b = dy, out = dw.
struct ConvOperands {
  const Tensor& a;
  const Tensor& b;
  const Tensor* bias;
  Tensor& out;
};

// The ConvParams of `pass` from its operands, checked as make_conv_params checks them; messages
// name the pass and the path: the depthwise kernels' when `depthwise`, else the GEMM path's.
ConvParams conv_operand_params(ConvPass pass, const ConvGeometry& g, const ConvOperands& t,
                               bool depthwise);

// Runs `pass` through the GEMM path; the caller has checked gemm_path_declined and the tensors.
void conv_gemm_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                   const ConvOperands& t);

// Runs `plan` when its kernel is one of the paths that take ConvOperands (depthwise, direct,
// thin, gemm) and returns true; false for the other kernels, which each launcher runs itself.
bool conv_operand_path_run(CachingAllocator& alloc, ConvPass pass, const ConvPlan& plan,
                           const ConvGeometry& g, const ConvOperands& t);

}  // namespace tgrad::cuda
