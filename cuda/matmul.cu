// y(M,N) = op(a) op(b) through cuBLAS. cuBLAS is column-major and a row-major matrix is its
// transpose in column-major, so we ask cuBLAS for y^T (N,M) = op(b)^T op(a)^T: the operands swap
// places and keep their transpose flags; leading dimensions are the row-major column counts.
#include <cublas_v2.h>

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
    TGRAD_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, in, im, ik, &alpha, b.data_ptr<float>(), ldb,
                                   a.data_ptr<float>(), lda, &beta, y.data_ptr<float>(), in));
  } else {
    const double alpha = 1.0, beta = 0.0;
    TGRAD_CUBLAS_CHECK(cublasDgemm(handle, op_b, op_a, in, im, ik, &alpha, b.data_ptr<double>(),
                                   ldb, a.data_ptr<double>(), lda, &beta, y.data_ptr<double>(),
                                   in));
  }
}

}  // namespace tgrad::cuda
