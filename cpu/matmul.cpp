// matmul on the CPU: y(M,N) = op(a)(M,K) * op(b)(K,N) with Eigen's GEMM on row-major maps,
// op = transpose when asked. y is cut into fixed blocks of rows (or of columns, when N > M),
// one GEMM per block, so the result does not depend on the thread count.
#include <Eigen/Core>

#include "cpu/eigen_product.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

#ifndef TGRAD_CPU_ISA_NS
#error "compiled once per level with TGRAD_CPU_ISA_NS set (cpu/CMakeLists.txt)"
#endif

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS {
namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr int64_t kBlock = 128;  // rows (or columns) of y per GEMM task

template <class T>
void matmul_typed(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a, bool transpose_b,
                  int threads) {
  const Eigen::Map<const RowMajor<T>> am(data<T>(a), a.size(0), a.size(1));
  const Eigen::Map<const RowMajor<T>> bm(data<T>(b), b.size(0), b.size(1));
  Eigen::Map<RowMajor<T>> ym(data<T>(y), y.size(0), y.size(1));
  const int64_t m = ym.rows(), n = ym.cols();
  const int64_t k = transpose_a ? am.rows() : am.cols();
  if (k == 0) {
    ym.setZero();
    return;
  }
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  const int64_t tasks = (extent + kBlock - 1) / kBlock;
  const int nthreads =
      threads_for(2.0 * static_cast<double>(m * n) * static_cast<double>(k), threads);
  auto run = [&](const auto& op_a, const auto& op_b) {
    parallel_for(nthreads, tasks, [&](int64_t t) {
      const int64_t start = t * kBlock;
      const int64_t len = std::min(kBlock, extent - start);
      if (by_rows) {
        eigen_product(ym.middleRows(start, len), op_a.middleRows(start, len), op_b, false);
      } else {
        eigen_product(ym.middleCols(start, len), op_a, op_b.middleCols(start, len), false);
      }
    });
  };
  if (transpose_a && transpose_b) {
    run(am.transpose(), bm.transpose());
  } else if (transpose_a) {
    run(am.transpose(), bm);
  } else if (transpose_b) {
    run(am, bm.transpose());
  } else {
    run(am, bm);
  }
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a, bool transpose_b,
            int threads) {
  TGRAD_CHECK(a.dim() == 2 && b.dim() == 2 && y.dim() == 2, "cpu backend: matmul: a ", a.shape(),
              ", b ", b.shape(), " and y ", y.shape(), " must all be 2-D");
  const int64_t m = transpose_a ? a.size(1) : a.size(0);
  const int64_t ka = transpose_a ? a.size(0) : a.size(1);
  const int64_t kb = transpose_b ? b.size(1) : b.size(0);
  const int64_t n = transpose_b ? b.size(0) : b.size(1);
  TGRAD_CHECK(ka == kb && y.size(0) == m && y.size(1) == n, "cpu backend: matmul: a ", a.shape(),
              (transpose_a ? "^T" : ""), " times b ", b.shape(), (transpose_b ? "^T" : ""),
              " does not give y ", y.shape());
  dispatch_floating(
      y.dtype(), [&]<class T>() { matmul_typed<T>(a, b, y, transpose_a, transpose_b, threads); });
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS
