// The float32 precision a CUDA kernel uses is the one in force when it runs: a backward run
// under "highest" after a forward under "high" must be float32-accurate (GPU only).
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

// Restores the precision setting when a test ends, pass or fail.
class PrecisionScope {
 public:
  PrecisionScope() : saved_(get_float32_matmul_precision()) {}
  ~PrecisionScope() { set_float32_matmul_precision(saved_); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  std::string saved_;
};

double relative_l2(const Tensor& a, const Tensor& b) {
  const Tensor d = a.to(kFloat64).cpu() - b.to(kFloat64).cpu();
  return std::sqrt(sum(d * d).item()) / std::sqrt(sum(b * b).item());
}

TEST(CudaPrecision, BackwardUsesThePrecisionInForceWhenItRuns) {
  TGRAD_SKIP_WITHOUT_CUDA();
  PrecisionScope restore;
  Generator gen(11);
  // A channel-heavy 1-D layer: at "high" its passes run on TF32 tensor cores (10-bit mantissa,
  // relative L2 error around 1e-4 to 1e-3); at "highest" they are float32-accurate (around
  // 1e-7). 1e-5 separates the two with two orders of magnitude on each side.
  constexpr double kFloat32Level = 1e-5;
  const Tensor x64 = randn({4, 128, 2048}, gen, kFloat64);
  const Tensor w64 = randn({128, 128, 3}, gen, kFloat64) * 0.05;
  const Tensor dy64 = randn({4, 128, 2050}, gen, kFloat64);
  const Tensor x = x64.to(kFloat32).cuda().requires_grad_(true);
  const Tensor w = w64.to(kFloat32).cuda().requires_grad_(true);

  // The float64 reference gradients.
  const Tensor xr = x64.detach().requires_grad_(true), wr = w64.detach().requires_grad_(true);
  conv_transpose1d(xr, wr).backward(dy64);

  set_float32_matmul_precision("high");
  const Tensor y = conv_transpose1d(x, w);
  set_float32_matmul_precision("highest");
  y.backward(dy64.to(kFloat32).cuda());
  EXPECT_LT(relative_l2(x.grad(), xr.grad()), kFloat32Level) << "dgrad ran at TF32";
  EXPECT_LT(relative_l2(w.grad(), wr.grad()), kFloat32Level) << "wgrad ran at TF32";
}

}  // namespace
}  // namespace tgrad::testing
