// tgrad's CPU GEMM (cpu/gemm.h), which every CPU conv pass runs on, against a float64 reference
// on sizes below, at and past its register tile and cache blocks, both layouts of each operand,
// with and without accumulation. tests/CMakeLists.txt builds this file once per x86-64 level,
// each copy with that level's compiler flags and TGRAD_CPU_ISA_NS, as a program of its own (a
// level's code must not share an inline function with another level's, which the linker would
// merge), so every copy's register tile and edge handling is checked, not only the one this CPU
// dispatches to. Exit status 0: all cases match; 1: a mismatch (printed); 77: this CPU cannot
// run the level (ctest reports a skip).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/gemm.h"

namespace {

namespace g = ::tgrad::cpu::TGRAD_CPU_ISA_NS::gemm;

// A deterministic pseudo-random value in [-1, 1) for index i of stream s.
inline double gemm_value(uint64_t s, uint64_t i) {
  uint64_t z = (s * 0x9E3779B97F4A7C15ull) ^ (i + 0x632BE59BD9B4E019ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(uint64_t{1} << 52) - 1.0;
}

// One case: A (m x k) stored row- or column-major, B (k x n) likewise, C (m x n) with rows ldc =
// n + 3 apart (the 3 padding elements must stay untouched), = A B or += A B. Returns "" or what
// went wrong.
template <class T>
std::string gemm_case(int64_t m, int64_t n, int64_t k, bool a_col_major, bool b_col_major,
                      bool accumulate) {
  std::vector<T> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<T>(gemm_value(1, i));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<T>(gemm_value(2, i));
  const g::View<T> av = a_col_major ? g::View<T>{a.data(), 1, m} : g::View<T>{a.data(), k, 1};
  const g::View<T> bv = b_col_major ? g::View<T>{b.data(), 1, k} : g::View<T>{b.data(), n, 1};
  const int64_t ldc = n + 3;
  const T pad = T(12345);
  std::vector<T> c(static_cast<size_t>(m * ldc), pad);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      // Without accumulate C's old contents must not matter: start from NaN.
      c[i * ldc + j] = accumulate ? static_cast<T>(gemm_value(3, i * n + j))
                                  : std::numeric_limits<T>::quiet_NaN();
  // Exactly the scratch it asks for (an AddressSanitizer build catches a write past it).
  std::vector<T> scratch(static_cast<size_t>(g::scratch_elems<T>(m, n, k)));
  g::gemm<T>(m, n, k, av, bv, c.data(), ldc, accumulate, scratch.data());

  std::ostringstream err;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = accumulate ? static_cast<double>(static_cast<T>(gemm_value(3, i * n + j))) : 0;
      double magnitude = std::abs(want);
      for (int64_t p = 0; p < k; ++p) {
        const double prod = static_cast<double>(av.p[i * av.rs + p * av.cs]) *
                            static_cast<double>(bv.p[p * bv.rs + j * bv.cs]);
        want += prod;
        magnitude += std::abs(prod);
      }
      // A sum of k + 1 rounded terms in T: each partial sum's rounding is at most eps times the
      // running magnitude, so the error is at most (k + 1) eps times the sum of magnitudes.
      const double tol = static_cast<double>(k + 1) *
                         static_cast<double>(std::numeric_limits<T>::epsilon()) * magnitude;
      const double got = static_cast<double>(c[i * ldc + j]);
      if (!(std::abs(got - want) <= tol)) {
        err << "C[" << i << "," << j << "] = " << got << ", want " << want << " (tol " << tol
            << ")";
        return err.str();
      }
    }
    for (int64_t j = n; j < ldc; ++j) {
      if (c[i * ldc + j] != pad) {
        err << "the padding after row " << i << " was written";
        return err.str();
      }
    }
  }
  return "";
}

// gemm_packed_a on rows [row0, row0 + m) of an A packed whole (whole_m rows, stored row- or
// column-major: the forward's transposed weight is the latter) gives the same bits as gemm() on
// those rows of the unpacked A. Returns "" or what went wrong.
template <class T>
std::string packed_rows_case(int64_t whole_m, int64_t row0, int64_t m, int64_t n, int64_t k,
                             bool a_col_major) {
  std::vector<T> a(static_cast<size_t>(whole_m * k)), b(static_cast<size_t>(k * n));
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<T>(gemm_value(4, i));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<T>(gemm_value(5, i));
  std::vector<T> whole(static_cast<size_t>(g::packed_whole_a_elems<T>(whole_m, k)));
  const g::View<T> av = a_col_major ? g::View<T>{a.data(), 1, whole_m} : g::View<T>{a.data(), k, 1};
  g::pack_whole_a<T>(av, whole_m, k, whole.data());
  std::vector<T> scratch(static_cast<size_t>(g::scratch_elems<T>(m, n, k)));
  std::vector<T> want(static_cast<size_t>(m * n)), got(static_cast<size_t>(m * n));
  g::gemm<T>(m, n, k, {av.p + row0 * av.rs, av.rs, av.cs}, {b.data(), n, 1}, want.data(), n, false,
             scratch.data());
  g::gemm_packed_a<T>(m, n, k, whole.data(), whole_m, row0, {b.data(), n, 1}, got.data(), n, false,
                      scratch.data());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0) {
      std::ostringstream err;
      err << "packed rows " << row0 << ".." << row0 + m << " of " << whole_m << " ("
          << (a_col_major ? "column" : "row") << "-major): element " << i << " is " << got[i]
          << ", gemm() gives " << want[i];
      return err.str();
    }
  }
  return "";
}

// A product's columns have the same bits whatever panel they fall in: C = A B on n columns (its
// last panel partial, run by a narrower register tile) and on B widened to whole panels, with
// and without accumulation. The conv passes cut a product's columns for the threads and promise
// the same bits for any cut. Returns "" or what went wrong.
template <class T>
std::string column_bits_case(int64_t m, int64_t n, int64_t k, bool accumulate) {
  const int64_t wide = g::round_up(n, g::kCols<T>);
  std::vector<T> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * wide));
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<T>(gemm_value(6, i));
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<T>(gemm_value(7, i));
  std::vector<T> narrow_c(static_cast<size_t>(m * n)), wide_c(static_cast<size_t>(m * wide));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < wide; ++j)
      wide_c[i * wide + j] = static_cast<T>(gemm_value(8, i * wide + j));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      narrow_c[i * n + j] = wide_c[i * wide + j];
  std::vector<T> scratch(static_cast<size_t>(g::scratch_elems<T>(m, wide, k)));
  g::gemm<T>(m, n, k, {a.data(), k, 1}, {b.data(), wide, 1}, narrow_c.data(), n, accumulate,
             scratch.data());
  g::gemm<T>(m, wide, k, {a.data(), k, 1}, {b.data(), wide, 1}, wide_c.data(), wide, accumulate,
             scratch.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (std::memcmp(&narrow_c[i * n + j], &wide_c[i * wide + j], sizeof(T)) != 0) {
        std::ostringstream err;
        err.precision(std::numeric_limits<T>::max_digits10);
        err << "columns of " << n << " against " << wide << (accumulate ? ", +=" : "") << ": C["
            << i << "," << j << "] is " << narrow_c[i * n + j] << ", " << wide_c[i * wide + j]
            << " in the wider product";
        return err.str();
      }
    }
  }
  return "";
}

// Every case at both precisions: sizes below, at and past one register tile, one cache block of
// each dimension (kMc, kNc, kKc) and a reduction of zero; each with both layouts of A and B, and
// with and without accumulation. Then row blocks of an A packed whole.
// Prints each failed case.
int run_checks() {
  struct Size {
    int64_t m, n, k;
  };
  // Products of one or two row panels read a row-major B in place (past kKc and kNc too, the
  // last column tile packed) unless its rows are a multiple of 512 bytes apart: {10, 70, 300},
  // {10, 70, 300} and {5, 600, 270} read it in place at every level, {20, 70, 300} at AVX-512
  // (12-row panels), and {4, 128, 20} packs it.
  const Size sizes[] = {{1, 1, 1},     {1, 37, 5},    {7, 1, 19},    {12, 32, 8},    {13, 33, 9},
                        {5, 17, 0},    {25, 70, 300}, {97, 64, 257}, {100, 530, 40}, {3, 1100, 2},
                        {200, 9, 520}, {10, 70, 300}, {20, 70, 300}, {4, 128, 20},   {5, 600, 270}};
  int failures = 0, cases = 0;
  for (const Size& s : sizes) {
    for (int layout = 0; layout < 4; ++layout) {
      for (bool accumulate : {false, true}) {
        const bool a_cm = (layout & 1) != 0, b_cm = (layout & 2) != 0;
        for (int precision = 0; precision < 2; ++precision) {
          const std::string e = precision == 0
                                    ? gemm_case<float>(s.m, s.n, s.k, a_cm, b_cm, accumulate)
                                    : gemm_case<double>(s.m, s.n, s.k, a_cm, b_cm, accumulate);
          ++cases;
          if (!e.empty()) {
            ++failures;
            std::ostringstream line;
            line << (precision == 0 ? "float" : "double") << " m=" << s.m << " n=" << s.n
                 << " k=" << s.k << " A " << (a_cm ? "column" : "row") << "-major, B "
                 << (b_cm ? "column" : "row") << "-major" << (accumulate ? ", +=" : "") << ": "
                 << e;
            std::printf("cpu_gemm_check: %s\n", line.str().c_str());
          }
        }
      }
    }
  }
  // Row blocks of a weight packed once (forward_by_positions cuts W^T this way).
  constexpr int64_t MR = g::kRows;
  const Size whole[] = {{5 * MR + 3, 70, 300}, {2 * MR, 33, 7}, {g::kMc + 2 * MR, 40, 260}};
  for (const Size& s : whole) {
    for (int64_t row0 = 0; row0 < s.m; row0 += 2 * MR) {
      const int64_t m = std::min<int64_t>(3 * MR - 1, s.m - row0);
      for (int precision = 0; precision < 2; ++precision) {
        for (bool a_cm : {false, true}) {
          const std::string e = precision == 0
                                    ? packed_rows_case<float>(s.m, row0, m, s.n, s.k, a_cm)
                                    : packed_rows_case<double>(s.m, row0, m, s.n, s.k, a_cm);
          ++cases;
          if (!e.empty()) {
            ++failures;
            std::printf("cpu_gemm_check: %s: %s\n", precision == 0 ? "float" : "double", e.c_str());
          }
        }
      }
    }
  }
  // Last panels of 1, 3, 19, 36, 8 and 24 columns (partial vectors after 0, 1 and 2 whole ones),
  // over rows that leave a partial register tile and a reduction of two cache blocks.
  for (int64_t n : {1, 3, 19, 36, 8, 24}) {
    for (bool accumulate : {false, true}) {
      for (int precision = 0; precision < 2; ++precision) {
        const std::string e = precision == 0
                                  ? column_bits_case<float>(2 * MR + 5, n, 300, accumulate)
                                  : column_bits_case<double>(2 * MR + 5, n, 300, accumulate);
        ++cases;
        if (!e.empty()) {
          ++failures;
          std::printf("cpu_gemm_check: %s: %s\n", precision == 0 ? "float" : "double", e.c_str());
        }
      }
    }
  }
  std::printf("cpu_gemm_check: %d of %d cases mismatch\n", failures, cases);
  return failures == 0 ? 0 : 1;
}

}  // namespace

// main and the check below are compiled for baseline x86-64, so that checking cannot itself use
// an instruction the CPU lacks.
#if defined(__x86_64__)
#define TGRAD_BASELINE_CODE __attribute__((target("arch=x86-64")))
#else
#define TGRAD_BASELINE_CODE
#endif

// Whether this CPU runs the level the file was compiled for.
TGRAD_BASELINE_CODE static bool cpu_runs_this_level() {
#if defined(__AVX512F__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#elif defined(__AVX2__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return true;
#endif
}

TGRAD_BASELINE_CODE int main() {
  if (!cpu_runs_this_level()) {
    std::puts("cpu_gemm_check: this CPU cannot run this level: skipped");
    return 77;
  }
  return run_checks();
}
