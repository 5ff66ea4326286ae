// gradcheck must fail when it should: a wrong formula, a non-reentrant backward, a gradient
// from a zero upstream gradient, a wrong gradient shape; and pass a correct composite function.
#include <gtest/gtest.h>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"

namespace tgrad {
namespace {

// y = x^2 recorded with a caller-chosen backward, to plant mistakes.
Tensor square_with(const Tensor& x, BackwardFn backward) {
  Tensor y;
  {
    NoGradGuard g;
    y = x * x;
  }
  return record("planted_square", y, {x}, Formula{std::move(backward), {}});
}

Tensor input(Generator& gen) {
  return randn({3, 2}, gen, kFloat64).requires_grad_(true);
}

TEST(Gradcheck, PassesACorrectCompositeFunction) {
  Generator gen(1);
  GradcheckFn f = [](const std::vector<Tensor>& in) {
    const Tensor h = tanh(matmul(in[0], in[1]));  // (3, 4)
    return sum(h * sum(sigmoid(in[1]), {0}), {1});
  };
  for (bool fast : {false, true}) {
    GradcheckOptions o;
    o.fast_mode = fast;
    const GradcheckResult r =
        gradcheck(f, {input(gen), randn({2, 4}, gen, kFloat64).requires_grad_(true)}, o);
    EXPECT_TRUE(r.ok) << r.report;
  }
}

// The first derivative is right (2x) but computed from a detached x, so its own derivative
// (2 dy) is lost: gradcheck passes and gradgradcheck must not.
TEST(Gradcheck, GradgradcheckFindsAWrongSecondDerivative) {
  Generator gen(9);
  GradcheckFn wrong = [](const std::vector<Tensor>& in) {
    return square_with(in[0], [x = in[0].detach()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy * x * 2.0};
    });
  };
  GradcheckFn right = [](const std::vector<Tensor>& in) {
    return square_with(in[0], [x = in[0]](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy * x * 2.0};
    });
  };
  const Tensor x = input(gen);
  EXPECT_TRUE(gradcheck(wrong, {x}).ok);
  for (bool fast : {false, true}) {
    GradcheckOptions o;
    o.fast_mode = fast;
    const GradcheckResult bad = gradgradcheck(wrong, {x}, o);
    EXPECT_FALSE(bad.ok);
    EXPECT_NE(bad.report.find("gradgradcheck"), std::string::npos) << bad.report;
    const GradcheckResult good = gradgradcheck(right, {x}, o);
    EXPECT_TRUE(good.ok) << good.report;
  }
}

TEST(Gradcheck, FindsAWrongFormulaAndNamesIt) {
  Generator gen(2);
  GradcheckFn f = [](const std::vector<Tensor>& in) {
    // Wrong: d(x^2) = 2x, here 2.1x.
    return square_with(in[0], [x = in[0].detach()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy * x * 2.1};
    });
  };
  for (bool fast : {false, true}) {
    GradcheckOptions o;
    o.fast_mode = fast;
    o.config = "planted 5% error";
    const GradcheckResult r = gradcheck(f, {input(gen)}, o);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.report.find("planted_square"), std::string::npos) << r.report;
    EXPECT_NE(r.report.find("planted 5% error"), std::string::npos) << r.report;
    EXPECT_NE(r.report.find("analytic"), std::string::npos) << r.report;
    EXPECT_NE(r.report.find("numeric"), std::string::npos) << r.report;
  }
}

TEST(Gradcheck, FindsANonReentrantBackward) {
  Generator gen(3);
  auto calls = std::make_shared<int>(0);
  GradcheckFn f = [calls](const std::vector<Tensor>& in) {
    return square_with(in[0], [x = in[0].detach(), calls](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy * x * (2.0 + 1e-12 * ++*calls)};
    });
  };
  const GradcheckResult r = gradcheck(f, {input(gen)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report.find("different bits"), std::string::npos) << r.report;
}

TEST(Gradcheck, FindsAGradientFromAZeroUpstreamGradient) {
  Generator gen(4);
  GradcheckFn f = [](const std::vector<Tensor>& in) {
    return square_with(in[0], [x = in[0].detach()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy * x * 2.0 + 1e-3};
    });
  };
  const GradcheckResult r = gradcheck(f, {input(gen)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report.find("zero upstream gradient"), std::string::npos) << r.report;
}

TEST(Gradcheck, FindsAWrongGradientShape) {
  Generator gen(5);
  GradcheckFn f = [](const std::vector<Tensor>& in) {
    return square_with(in[0], [x = in[0].detach()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{(dy * x * 2.0).reshape({-1})};
    });
  };
  const GradcheckResult r = gradcheck(f, {input(gen)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.report.find("does not match the input shape"), std::string::npos) << r.report;
}

TEST(Gradcheck, RejectsFloat32InputsAndNoGradInputs) {
  GradcheckFn f = [](const std::vector<Tensor>& in) { return in[0] * 2.0; };
  EXPECT_THROW(gradcheck(f, {ones({2}).requires_grad_(true)}), Error);
  EXPECT_THROW(gradcheck(f, {ones({2}, kFloat64)}), Error);
}

}  // namespace
}  // namespace tgrad
