// The one tolerance type and the one tensor comparison of the test suite. A failed comparison
// prints the config it was given, the first mismatches, and the max abs and rel errors.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "cpu/isa.h"

namespace tgrad::testing {

// |actual - expected| <= atol + rtol * |expected| elementwise, or, when l2 > 0, the relative L2
// error ||actual - expected|| / ||expected|| <= l2 (for float32 results of long reductions).
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double l2 = 0.0;
};
// Exact float64 work against float64 references: a few ulps of the longest reduction.
inline constexpr Tolerance kFloat64Tight{1e-12, 1e-12, 0.0};

struct CompareResult {
  bool ok = true;
  double max_abs = 0.0;
  double max_rel = 0.0;
  double rel_l2 = 0.0;
  std::string report;  // empty when ok
};

// Compares two tensors (any devices, any dtypes; values compared in float64). Shapes must match.
CompareResult compare(const Tensor& actual, const Tensor& expected, Tolerance tol,
                      const std::string& config);

// gtest assertion form: EXPECT_TRUE(tensors_close(a, b, tol, g.str())).
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected,
                                         Tolerance tol, const std::string& config);

// Skips the calling test (GTEST_SKIP with the reason) when no CUDA device is usable.
#define TGRAD_SKIP_WITHOUT_CUDA()                                                        \
  do {                                                                                   \
    if (!::tgrad::cuda_is_available())                                                   \
      GTEST_SKIP() << "no CUDA device: " << ::tgrad::testing::cuda_unavailable_reason(); \
  } while (0)
std::string cuda_unavailable_reason();

// The CPU kernels' instruction-set levels this machine runs (cpu/isa.h), lowest first: tests of
// kernels whose choices depend on the level run each of them.
std::vector<cpu::Capability> cpu_levels_this_machine_runs();

// Restores the CPU level and the thread count a test changes.
class CpuLevelScope {
 public:
  CpuLevelScope() : level_(cpu::capability()), threads_(get_num_threads()) {}
  ~CpuLevelScope() {
    cpu::set_capability(level_);
    set_num_threads(threads_);
  }
  CpuLevelScope(const CpuLevelScope&) = delete;
  CpuLevelScope& operator=(const CpuLevelScope&) = delete;

 private:
  cpu::Capability level_;
  int threads_;
};

// f(level) at each of cpu_levels_this_machine_runs(), that level set; the level and thread count
// restored after.
template <class F>
void for_each_cpu_level(F&& f) {
  const CpuLevelScope restore;
  for (cpu::Capability level : cpu_levels_this_machine_runs()) {
    cpu::set_capability(level);
    f(level);
  }
}

// The message of the tgrad::Error that f() throws, or "<no tgrad::Error thrown>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no tgrad::Error thrown>";
}

}  // namespace tgrad::testing
