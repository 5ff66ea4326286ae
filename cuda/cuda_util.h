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
  switch (dtype) {
    case DType::float32:
      f(float{});
      return;
    case DType::float64:
      f(double{});
      return;
    case DType::int64:
      break;
  }
  TGRAD_FAIL("CUDA backend: this kernel takes float32 or float64, got ", dtype);
}

// dispatch_float, plus int64 (for the kernels that move values without arithmetic: fill, cast).
template <class F>
void dispatch_all(DType dtype, F&& f) {
  if (dtype == DType::int64) {
    f(int64_t{});
  } else {
    dispatch_float(dtype, f);
  }
}

}  // namespace tgrad::cuda
