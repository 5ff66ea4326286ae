// The per-element error budget of the float32 conv tests (test_cuda_decoder_layers.cpp,
// test_cuda_batch_igemm.cpp): each element of a float32 result against its float64 reference,
// within a bound proportional to its own magnitude sum over its taps. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace tgrad::testing {

// Per-element budget: c * u * S, where S is the same pass run in float64 on |inputs| (for each
// element the sum over its taps of |a||b|). u is float32's unit roundoff (2^-24) at "highest";
// at "high" the inputs are rounded to TF32 (unit roundoff 2^-11), so each product may be off by
// 2 * 2^-11 relative, plus the float32 accumulation. The accumulation of K terms is bounded by
// sqrt(K)-growth in practice (K up to a few thousand here; worst case K, which would be too loose
// to catch a missing tap), hence c_acc = 2 sqrt(K) + 8.
inline double budget_factor(bool high, int64_t k) {
  const double acc = (2.0 * std::sqrt(static_cast<double>(k)) + 8.0) * std::ldexp(1.0, -24);
  return high ? 2.0 * std::ldexp(1.0, -11) + acc : acc;
}

// The index and size of the worst element (|got - ref| / budget), and whether all are within.
inline ::testing::AssertionResult within_budget(const Tensor& got, const Tensor& ref,
                                                const Tensor& scale, double factor,
                                                const std::string& what) {
  const std::vector<double> g = got.to(Device(kCPU), kFloat64).to_vector<double>();
  const std::vector<double> r = ref.to_vector<double>();
  const std::vector<double> s = scale.to_vector<double>();
  if (g.size() != r.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  size_t worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    // The budget is at least one float32 ulp of the reference, for elements whose taps cancel.
    const double budget = std::max(factor * s[i], std::abs(r[i]) * std::ldexp(1.0, -23));
    const double err = std::abs(g[i] - r[i]);
    const double ratio = budget > 0.0 ? err / budget : (err > 0.0 ? INFINITY : 0.0);
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << worst << " is " << g[worst] << ", float64 gives " << r[worst]
         << ", error " << std::abs(g[worst] - r[worst]) << " against a budget of "
         << std::max(factor * s[worst], std::abs(r[worst]) * std::ldexp(1.0, -23)) << " ("
         << worst_ratio << "x)";
}

}  // namespace tgrad::testing
