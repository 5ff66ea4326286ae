// Eigen's blocked matrix product with its packing buffers taken from the backend's allocator.
//
// Eigen packs each product's operands into two buffers (a block of the left operand, a panel of
// the right) that it allocates per product: on the stack up to 128 KiB, else with malloc. On
// glibc a freed buffer of a megabyte or so lands on top of the heap, the heap is trimmed back to
// the kernel, and the next product's buffer faults its pages in again, zeroed: on a 256 -> 128
// channel wgrad at one thread a tenth of the time went to page faults and brk. The backend's
// allocator keeps freed blocks from HostAllocator::kCacheMin up for reuse, so products through
// here pay for their buffers' pages once.
//
// Included by each per-level copy of the kernels inside its namespace TGRAD_CPU_ISA_NS (a
// template in each copy, renamed with it by isa_objects.cmake).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cpu/allocator.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"

#ifndef TGRAD_CPU_ISA_NS
#error "compiled once per level with TGRAD_CPU_ISA_NS set (cpu/CMakeLists.txt)"
#endif

namespace tgrad::cpu::TGRAD_CPU_ISA_NS {

namespace eigen_detail {

// Eigen's blocking for a product of run-time sizes (its block sizes chosen by Eigen, as in its
// own products), its buffers pointed into `space` rather than allocated by Eigen.
template <int DstOrder, class T>
class BorrowedBlocking
    : public Eigen::internal::gemm_blocking_space<DstOrder, T, T, Eigen::Dynamic, Eigen::Dynamic,
                                                  Eigen::Dynamic> {
  using Base = Eigen::internal::gemm_blocking_space<DstOrder, T, T, Eigen::Dynamic, Eigen::Dynamic,
                                                    Eigen::Dynamic>;

 public:
  BorrowedBlocking(Eigen::Index rows, Eigen::Index cols, Eigen::Index depth)
      : Base(rows, cols, depth, /*num_threads=*/1, /*l3_blocking=*/true) {}
  // Elements of A's and B's buffers, as Eigen's product sizes them.
  int64_t a_elems() const { return static_cast<int64_t>(this->mc()) * this->kc(); }
  int64_t b_elems() const { return static_cast<int64_t>(this->kc()) * this->nc(); }
  void lend(T* a, T* b) {
    this->m_blockA = a;
    this->m_blockB = b;
  }
  // The base's destructor frees its buffers: these are the workspace's.
  ~BorrowedBlocking() { lend(nullptr, nullptr); }
};

}  // namespace eigen_detail

// dst = lhs * rhs, or dst += lhs * rhs when `accumulate`: what `dst.noalias() = lhs * rhs` (or
// `+=`) computes, with the same sums in the same order. dst, lhs and rhs are Eigen matrices,
// maps, blocks of them or their transposes, with unit inner stride; dst must not alias either
// operand.
template <class Dst, class Lhs, class Rhs>
void eigen_product(Dst&& dst, const Lhs& lhs, const Rhs& rhs, bool accumulate) {
  using DstType = std::remove_cvref_t<Dst>;
  using T = typename DstType::Scalar;
  using LhsTraits = Eigen::internal::blas_traits<Lhs>;
  using RhsTraits = Eigen::internal::blas_traits<Rhs>;
  using LhsActual = std::remove_cvref_t<typename LhsTraits::DirectLinearAccessType>;
  using RhsActual = std::remove_cvref_t<typename RhsTraits::DirectLinearAccessType>;
  constexpr int kDstOrder =
      (DstType::Flags & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor;
  constexpr int kLhsOrder =
      (LhsActual::Flags & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor;
  constexpr int kRhsOrder =
      (RhsActual::Flags & Eigen::RowMajorBit) ? Eigen::RowMajor : Eigen::ColMajor;
  static_assert(DstType::InnerStrideAtCompileTime == 1, "dst needs a unit inner stride");

  const Eigen::Index rows = dst.rows(), cols = dst.cols(), depth = lhs.cols();
  // Vectors and tiny products take Eigen's other kernels (GEMV, the coefficient-based product),
  // whose buffers are small or absent: Eigen's own expression chooses them.
  const bool blocked = rows > 1 && cols > 1 && depth > 0 &&
                       rows + cols + depth >= EIGEN_GEMM_TO_COEFFBASED_THRESHOLD;
  if (!blocked) {
    if (accumulate) {
      dst.noalias() += lhs * rhs;
    } else {
      dst.noalias() = lhs * rhs;
    }
    return;
  }
  if (!accumulate) dst.setZero();  // as Eigen's assignment of a product does, then adds into it

  eigen_detail::BorrowedBlocking<kDstOrder, T> blocking(rows, cols, depth);
  const int64_t elem = static_cast<int64_t>(sizeof(T));
  // B's buffer starts on a cache line after A's.
  const int64_t a_elems = gemm::round_up(blocking.a_elems(), std::max<int64_t>(1, 64 / elem));
  const int64_t b_elems = blocking.b_elems();
  // Eigen puts buffers up to this size on the stack itself; the rest come from the allocator,
  // asked for at least its smallest cached size so that they are kept and reused.
  const bool a_stack = blocking.a_elems() * elem <= EIGEN_STACK_ALLOCATION_LIMIT;
  const bool b_stack = b_elems * elem <= EIGEN_STACK_ALLOCATION_LIMIT;
  const int64_t lent = (a_stack ? 0 : a_elems) + (b_stack ? 0 : b_elems);
  Workspace<T> space(lent == 0 ? 0 : std::max(lent, HostAllocator::kCacheMin / elem));
  T* a_buf = a_stack ? nullptr : space.data();
  T* b_buf = b_stack ? nullptr : space.data() + (a_stack ? 0 : a_elems);
  blocking.lend(a_buf, b_buf);

  const auto& lhs_actual = LhsTraits::extract(lhs);
  const auto& rhs_actual = RhsTraits::extract(rhs);
  const T alpha = Eigen::internal::combine_scalar_factors(T(1), lhs, rhs);
  Eigen::internal::general_matrix_matrix_product<
      Eigen::Index, T, kLhsOrder, bool(LhsTraits::NeedToConjugate), T, kRhsOrder,
      bool(RhsTraits::NeedToConjugate), kDstOrder, 1>::run(rows, cols, depth, lhs_actual.data(),
                                                           lhs_actual.outerStride(),
                                                           rhs_actual.data(),
                                                           rhs_actual.outerStride(), dst.data(), 1,
                                                           dst.outerStride(), alpha, blocking,
                                                           nullptr);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS
