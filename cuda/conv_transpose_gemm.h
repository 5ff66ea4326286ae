// The GEMM path of the three transposed-conv passes (an explicit column buffer and cuBLAS
// strided-batched GEMMs with the groups as the batch), its eligibility predicate, and the hook
// through which the dispatch runs it and the depthwise kernels. Plain C++: tests include it.
// Private to the project (not installed).
#pragma once

#include <cstdint>
#include <string>

#include "core/backend.h"
#include "cuda/allocator.h"

namespace tgrad::cuda {

enum class ConvPass { forward, dgrad, wgrad };

// The tensors of one pass: forward a = x, b = w, bias (may be null), out = y; dgrad a = dy,
// b = w, out = dx; wgrad a = x, b = dy, out = dw.
struct ConvOperands {
  const Tensor& a;
  const Tensor& b;
  const Tensor* bias;
  Tensor& out;
};

// The column buffer and the packed activations of one batch chunk stay under this many bytes:
// the batch is cut into chunks of as many samples as fit (a layer whose single sample does not
// fit is declined, and the general kernel runs it).
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{256} << 20;

// Empty when the GEMM path can run `pass` of g in `dtype` at `precision`; else why not.
std::string gemm_path_declined(ConvPass pass, const ConvGeometry& g, Precision precision,
                               DType dtype);

// Runs `pass` through the GEMM path; the caller has checked gemm_path_declined and the tensors.
void conv_gemm_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                   const ConvOperands& t);

// Where the environment places a path: TGRAD_CONV_GEMM / TGRAD_CONV_DEPTHWISE unset or empty =
// automatic (where the general kernel would run), "0" = never, "1" = whenever eligible, before
// the tuned fast paths. Any other value throws tgrad::Error. Read at every call.
enum class PathOverride { automatic, never, always };
PathOverride path_override(const char* env_var);

// The dispatch hook. The dispatch calls it with before_fast_paths = true first (forced paths)
// and false where it would run its general kernel; it runs the depthwise kernels or the GEMM
// path (in that order) when the override and the geometry allow, and returns whether it did.
bool run_conv_extra_paths(CachingAllocator& alloc, ConvPass pass, bool before_fast_paths,
                          const ConvGeometry& g, const ConvOperands& t);

}  // namespace tgrad::cuda
