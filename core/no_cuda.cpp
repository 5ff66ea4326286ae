// Linked instead of cuda/ in a build without CUDA: there is no CUDA backend to register, and no
// CUDA kernel ever runs.
#include "core/backend.h"
#include "cuda/kernel_stats.h"

namespace tgrad {

Backend* cuda_backend() {
  return nullptr;
}

namespace cuda {

bool wgmma_supported(int /*device*/) {
  return false;
}

int64_t conv_wgmma_launches() {
  return 0;
}

int64_t conv_gemm_launches() {
  return 0;
}

int64_t conv_depthwise_launches() {
  return 0;
}

int64_t conv_direct_launches() {
  return 0;
}

int64_t conv_thin_launches() {
  return 0;
}

std::string conv_planned_kernel(ConvPass /*pass*/, const ConvGeometry& /*g*/, DType /*dtype*/,
                                int /*device*/) {
  return "";
}

}  // namespace cuda
}  // namespace tgrad
