// Error checks of the CUDA backend: every CUDA runtime call, cuBLAS call and kernel launch goes
// through one of these macros, which turn a failure into tgrad::Error naming the expression, the
// file and line, and the CUDA error string. Private to cuda/.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace tgrad::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file,
                                          int line) {
  TGRAD_FAIL("CUDA error: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", expr,
             " at ", file, ":", line);
}

inline void check_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, expr, file, line);
}

inline void check_cublas(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    TGRAD_FAIL("cuBLAS error: ", cublasGetStatusName(status), " (", cublasGetStatusString(status),
               ") in ", expr, " at ", file, ":", line);
  }
}

}  // namespace tgrad::cuda

#define TGRAD_CUDA_CHECK(expr) ::tgrad::cuda::check_cuda((expr), #expr, __FILE__, __LINE__)
#define TGRAD_CUBLAS_CHECK(expr) ::tgrad::cuda::check_cublas((expr), #expr, __FILE__, __LINE__)
// After every <<<...>>> launch: catches bad configurations (and, on a synchronous error, faults).
#define TGRAD_CUDA_CHECK_LAUNCH(name) \
  ::tgrad::cuda::check_cuda(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)
