// compare() and tensors_close(): elementwise or relative-L2 comparison with a readable report.
#include "tests/test_util.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "core/backend.h"

namespace tgrad::testing {

CompareResult compare(const Tensor& actual, const Tensor& expected, Tolerance tol,
                      const std::string& config) {
  CompareResult r;
  std::ostringstream report;
  if (actual.shape() != expected.shape()) {
    r.ok = false;
    report << config << "\n  shape mismatch: actual " << detail::cat(actual.shape())
           << " vs expected " << detail::cat(expected.shape());
    r.report = report.str();
    return r;
  }
  const std::vector<double> a = actual.to_vector<double>();
  const std::vector<double> e = expected.to_vector<double>();
  double diff2 = 0.0, ref2 = 0.0;
  int shown = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - e[i]);
    const bool finite = std::isfinite(a[i]) && std::isfinite(e[i]);
    diff2 += d * d;
    ref2 += e[i] * e[i];
    if (!finite) {
      if (!(std::isnan(a[i]) && std::isnan(e[i])) && a[i] != e[i]) {
        ++bad;
        if (shown++ < 8) report << "\n  [" << i << "] actual " << a[i] << " expected " << e[i];
      }
      continue;
    }
    r.max_abs = std::max(r.max_abs, d);
    if (e[i] != 0.0) r.max_rel = std::max(r.max_rel, d / std::abs(e[i]));
    if (tol.l2 <= 0.0 && d > tol.atol + tol.rtol * std::abs(e[i])) {
      ++bad;
      if (shown++ < 8) {
        report.precision(17);
        report << "\n  [" << i << "] actual " << a[i] << " expected " << e[i] << " (abs err " << d
               << ")";
      }
    }
  }
  r.rel_l2 = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  if (tol.l2 > 0.0 && !(r.rel_l2 <= tol.l2)) ++bad;
  if (bad > 0) {
    r.ok = false;
    std::ostringstream head;
    head << config << "\n  " << bad << " of " << a.size() << " elements out of tolerance (atol "
         << tol.atol << ", rtol " << tol.rtol << ", l2 " << tol.l2 << "); max abs " << r.max_abs
         << ", max rel " << r.max_rel << ", rel L2 " << r.rel_l2;
    r.report = head.str() + report.str();
  }
  return r;
}

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected,
                                         Tolerance tol, const std::string& config) {
  const CompareResult r = compare(actual, expected, tol, config);
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.report;
}

std::vector<cpu::Capability> cpu_levels_this_machine_runs() {
  std::vector<cpu::Capability> levels;
  for (cpu::Capability c :
       {cpu::Capability::default_, cpu::Capability::avx2, cpu::Capability::avx512}) {
    if (static_cast<int>(c) <= static_cast<int>(cpu::best_capability())) levels.push_back(c);
  }
  return levels;
}

std::string cuda_unavailable_reason() {
  if (cuda_backend() == nullptr) return "tgrad was built without CUDA";
  return "no CUDA device is visible to this process";
}

}  // namespace tgrad::testing
