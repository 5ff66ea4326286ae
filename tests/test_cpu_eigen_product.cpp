// cpu/eigen_product.h: Eigen's blocked product with its packing buffers lent by the backend's
// allocator must give exactly the bits of Eigen's own `noalias() =` and `+=` for every layout the
// kernels use (row- and column-major destinations, strided maps, blocks, transposed operands),
// on sizes that take Eigen's coefficient-based product, its GEMV, and its blocked product with
// buffers on the stack and lent; and the lent buffers must come from the allocator's cache.
//
// The header is compiled here as a copy of its own (namespace isa_test), as each per-level copy
// of the kernels compiles it.
#define TGRAD_CPU_ISA_NS isa_test
#include "cpu/eigen_product.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/backend.h"
#include "core/device.h"

namespace tgrad::testing {
namespace {

using cpu::isa_test::eigen_product;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// Deterministic values in [-1, 1).
template <class M>
void fill(M& m, uint64_t seed) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    m.data()[i] = static_cast<typename M::Scalar>(
        static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 52) - 1.0);
  }
}

template <class A, class B>
bool same_bits(const A& a, const B& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.rows(); ++i)
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      const auto x = a(i, j), y = b(i, j);
      if (std::memcmp(&x, &y, sizeof(x)) != 0) return false;
    }
  return true;
}

// C (m x n) = A (m x k) B (k x n) and C += A B, with A and B each stored as itself or as the
// transpose of a stored matrix, into a row-major matrix, a column-major one and a strided map of
// a wider row-major buffer; each against Eigen's own expression on the same operands.
template <class T>
std::string check_case(Eigen::Index m, Eigen::Index n, Eigen::Index k) {
  RowMat<T> a(m, k), at(k, m), b(k, n), bt(n, k), c0(m, n);
  fill(a, 1);
  fill(at, 2);
  fill(b, 3);
  fill(bt, 4);
  fill(c0, 5);
  std::string err;
  const auto run = [&](const char* what, const auto& lhs, const auto& rhs) {
    for (const bool acc : {false, true}) {
      const std::string tag = std::string(what) + (acc ? " +=" : " =") + " at " +
                              std::to_string(m) + "x" + std::to_string(n) + "x" +
                              std::to_string(k) + "; ";
      RowMat<T> want_r = c0, got_r = c0;
      ColMat<T> want_c = c0, got_c = c0;
      // A strided destination: C's rows 7 elements apart past its width, the padding untouched.
      RowMat<T> wide_want = RowMat<T>::Constant(m, n + 7, T(3)), wide_got = wide_want;
      using Strided = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
      Strided want_s(wide_want.data(), m, n, Eigen::OuterStride<>(n + 7));
      Strided got_s(wide_got.data(), m, n, Eigen::OuterStride<>(n + 7));
      want_s = c0;
      got_s = c0;
      if (acc) {
        want_r.noalias() += lhs * rhs;
        want_c.noalias() += lhs * rhs;
        want_s.noalias() += lhs * rhs;
      } else {
        want_r.noalias() = lhs * rhs;
        want_c.noalias() = lhs * rhs;
        want_s.noalias() = lhs * rhs;
      }
      eigen_product(got_r, lhs, rhs, acc);
      eigen_product(got_c, lhs, rhs, acc);
      eigen_product(got_s, lhs, rhs, acc);
      if (!same_bits(want_r, got_r)) err += tag + "row-major destination differs; ";
      if (!same_bits(want_c, got_c)) err += tag + "column-major destination differs; ";
      if (!same_bits(wide_want, wide_got)) err += tag + "strided destination differs; ";
      // A block of rows of a taller destination (matmul's tasks write middleRows).
      RowMat<T> tall_want = RowMat<T>::Constant(m + 5, n, T(2)), tall_got = tall_want;
      if (acc) {
        tall_want.middleRows(3, m).noalias() += lhs * rhs;
      } else {
        tall_want.middleRows(3, m).noalias() = lhs * rhs;
      }
      eigen_product(tall_got.middleRows(3, m), lhs, rhs, acc);
      if (!same_bits(tall_want, tall_got)) err += tag + "block destination differs; ";
    }
  };
  run("A B", a, b);
  run("A^T B", at.transpose(), b);
  run("A B^T", a, bt.transpose());
  run("A^T B^T", at.transpose(), bt.transpose());
  return err;
}

TEST(CpuEigenProduct, SameBitsAsEigensOwnProduct) {
  // Sizes: below Eigen's coefficient-based threshold; vectors (GEMV); a small blocked product
  // (buffers on Eigen's stack); products whose packed panels pass 128 KiB (lent buffers), with
  // edges off every register tile.
  const Eigen::Index sizes[][3] = {{3, 4, 5},       {1, 37, 19},    {29, 1, 40},
                                   {17, 23, 1},     {48, 40, 33},   {97, 61, 50},
                                   {150, 620, 260}, {700, 90, 300}, {257, 513, 129}};
  for (const auto& s : sizes) {
    EXPECT_EQ(check_case<float>(s[0], s[1], s[2]), "");
    EXPECT_EQ(check_case<double>(s[0], s[1], s[2]), "");
  }
}

TEST(CpuEigenProduct, LargeBuffersComeFromTheAllocatorsCache) {
  Backend& cpu = backend(Device(kCPU));
  // Whether the allocator caches here (not under AddressSanitizer, nor with
  // TGRAD_CPU_NO_CACHING set): a freed block of the smallest cached size stays reserved.
  cpu.empty_cache(Device(kCPU));
  cpu.allocate(cpu::HostAllocator::kCacheMin, Device(kCPU)).reset();
  const MemoryStats probe = cpu.memory_stats(Device(kCPU));
  if (probe.reserved == probe.allocated)
    GTEST_SKIP() << "the CPU allocator keeps no cache in this build or environment";
  cpu.empty_cache(Device(kCPU));
  const MemoryStats before = cpu.memory_stats(Device(kCPU));
  RowMat<float> a(300, 400), b(400, 600), c(300, 600);
  fill(a, 6);
  fill(b, 7);
  eigen_product(c, a, b, false);
  const MemoryStats after = cpu.memory_stats(Device(kCPU));
  // The product's packed panel of B alone, 400 x 600 floats at most, passes Eigen's 128 KiB stack
  // limit: it was lent, then kept in the cache (reserved, not allocated).
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.reserved - after.allocated, int64_t{128} << 10);
  // Empty the cache: the next product must take a block again, and gives the same bits.
  RowMat<float> c2(300, 600);
  cpu.empty_cache(Device(kCPU));
  eigen_product(c2, a, b, false);
  EXPECT_TRUE(same_bits(c, c2));
}

}  // namespace
}  // namespace tgrad::testing
