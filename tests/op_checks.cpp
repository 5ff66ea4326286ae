// The tensor-op tests' shared checks (see tests/op_checks.h).
#include "tests/op_checks.h"

#include "core/ops.h"
#include "core/random.h"

namespace tgrad::testing {

Tensor ops_base() {
  return arange(24.0, TensorOptions(kFloat64)).reshape({2, 3, 4}) * 0.5 - 3.0;
}

Tensor ops_leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen, TensorOptions(kFloat64)).requires_grad_(true);
}

void check_grads(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const char* name) {
  GradcheckOptions o;
  o.name = name;
  const GradcheckResult first = gradcheck(fn, inputs, o);
  EXPECT_TRUE(first.ok) << first.report;
  o.fast_mode = true;
  const GradcheckResult second = gradgradcheck(fn, inputs, o);
  EXPECT_TRUE(second.ok) << second.report;
}

void check_cuda_matches_cpu(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  const Tensor xc = x.detach().requires_grad_(true);
  const Tensor xg = x.detach().cuda().requires_grad_(true);
  const Tensor yc = fn(xc), yg = fn(xg);
  EXPECT_TRUE(tensors_close(yg, yc, kOpsTight, "forward"));
  sum(yc * yc).backward();
  sum(yg * yg).backward();
  EXPECT_TRUE(tensors_close(xg.grad(), xc.grad(), kOpsTight, "gradient"));
}

}  // namespace tgrad::testing
