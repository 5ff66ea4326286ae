// y(M,N) = op(a) op(b) through cuBLAS. cuBLAS is column-major and a row-major matrix is its
// transpose in column-major, so we ask cuBLAS for y^T (N,M) = op(b)^T op(a)^T: the operands swap
// places and keep their transpose flags; leading dimensions are the row-major column counts.
// float32 follows set_float32_matmul_precision at the time of the call: TF32 at "high".
#include <cublas_v2.h>

#include "core/backend.h"

#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

void matmul(cublasHandle_t handle, const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a,
            bool transpose_b) {
  TGRAD_CHECK(a.dim() == 2 && b.dim() == 2 && y.dim() == 2, "CUDA matmul: a ", a.shape(), ", b ",
              b.shape(), " and y ", y.shape(), " must be 2-D");
  const int64_t m = y.size(0), n = y.size(1);
  const int64_t k = transpose_a ? a.size(0) : a.size(1);
  TGRAD_CHECK((transpose_a ? a.size(1) : a.size(0)) == m &&
                  (transpose_b ? b.size(0) : b.size(1)) == n &&
                  (transpose_b ? b.size(1) : b.size(0)) == k,
              "CUDA matmul: shapes a ", a.shape(), (transpose_a ? "^T" : ""), " x b ", b.shape(),
              (transpose_b ? "^T" : ""), " do not give y ", y.shape());
  constexpr int64_t kIntMax = 2147483647;
  TGRAD_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax && a.size(0) <= kIntMax &&
                  a.size(1) <= kIntMax && b.size(0) <= kIntMax && b.size(1) <= kIntMax,
              "CUDA matmul: sizes above 2^31-1 are not supported by cuBLAS's 32-bit API (a ",
              a.shape(), ", b ", b.shape(), ")");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    fill(y, 0.0);
    return;
  }
  DeviceGuard guard(y.device());
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int lda = static_cast<int>(a.size(1)), ldb = static_cast<int>(b.size(1));
  if (y.dtype() == DType::float32) {
    const float alpha = 1.0f, beta = 0.0f;
    // The compute type is given per call rather than through the handle's math mode, so one
    // handle serves both precisions without state to restore.
    const cublasComputeType_t compute =
        float32_precision() == Precision::high ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    TGRAD_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, in, im, ik, &alpha, b.data_ptr<float>(),
                                    CUDA_R_32F, ldb, a.data_ptr<float>(), CUDA_R_32F, lda, &beta,
                                    y.data_ptr<float>(), CUDA_R_32F, in, compute,
                                    CUBLAS_GEMM_DEFAULT));
  } else {
    const double alpha = 1.0, beta = 0.0;
    TGRAD_CUBLAS_CHECK(cublasDgemm(handle, op_b, op_a, in, im, ik, &alpha, b.data_ptr<double>(),
                                   ldb, a.data_ptr<double>(), lda, &beta, y.data_ptr<double>(),
                                   in));
  }
}

}  // namespace tgrad::cuda
