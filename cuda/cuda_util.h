// Small shared pieces of the CUDA backend: DeviceGuard (RAII current device), launch sizing for
// grid-stride loops, and the float32/float64 dispatch. Private to cuda/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/check.h"

namespace tgrad::cuda {

// Makes `device` current for its lifetime and restores the previous device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TGRAD_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) TGRAD_CUDA_CHECK(cudaSetDevice(device));
  }
  explicit DeviceGuard(const Device& device) : DeviceGuard(device.index()) {}
  ~DeviceGuard() {
    int current = previous_;
    // Restoring cannot usefully fail (the device was valid when we started); never throw here.
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

inline constexpr int kThreads = 256;
// Grid-stride loops cover any n; more blocks than this only add scheduling overhead.
inline constexpr int64_t kMaxBlocks = 65536;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
__host__ __device__ inline int64_t min_i64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Blocks for a grid-stride loop over n items with kThreads threads each (n > 0).
inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(n, kThreads), 1, kMaxBlocks));
}

// Calls f(float{}) or f(double{}) for the dtype, so a generic lambda can name T = decltype(tag).
template <class F>
void dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::float32) {
    f(float{});
  } else {
    f(double{});
  }
}

}  // namespace tgrad::cuda
