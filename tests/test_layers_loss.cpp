// Losses: values against the formulas, the three reductions, stability of the logits form for
// huge inputs, the gradient at a logit of 0, gradcheck in float64, and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/loss.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using nn::Reduction;
using testing::kFloat64Tight;
using testing::tensors_close;

const Tensor kX = from_vector(std::vector<double>{-3.0, -0.5, 0.0, 0.25, 2.0, 7.0}, {2, 3});
const Tensor kT = from_vector(std::vector<double>{0.0, 1.0, 0.5, 0.0, 1.0, 0.2}, {2, 3});

TEST(Loss, ValuesAndReductions) {
  const std::vector<double> x = kX.to_vector<double>(), t = kT.to_vector<double>();
  std::vector<double> se, ae, bce;
  for (size_t i = 0; i < x.size(); ++i) {
    se.push_back((x[i] - t[i]) * (x[i] - t[i]));
    ae.push_back(std::abs(x[i] - t[i]));
    const double s = 1.0 / (1.0 + std::exp(-x[i]));
    bce.push_back(-(t[i] * std::log(s) + (1 - t[i]) * std::log(1 - s)));
  }
  auto check = [&](auto loss, const std::vector<double>& expected, const char* name) {
    double total = 0;
    for (double v : expected)
      total += v;
    EXPECT_TRUE(tensors_close(loss(kX, kT, Reduction::none), from_vector(expected, {2, 3}),
                              kFloat64Tight, std::string(name) + " none"));
    EXPECT_NEAR(loss(kX, kT, Reduction::sum).item(), total, 1e-12) << name;
    EXPECT_NEAR(loss(kX, kT, Reduction::mean).item(), total / 6.0, 1e-12) << name;
    EXPECT_EQ(loss(kX, kT, Reduction::mean).dim(), 0) << name;
  };
  check(nn::mse_loss, se, "mse_loss");
  check(nn::l1_loss, ae, "l1_loss");
  check(nn::binary_cross_entropy_with_logits, bce, "binary_cross_entropy_with_logits");
}

TEST(Loss, LogitsFormIsStableForHugeInputs) {
  const Tensor x = from_vector(std::vector<float>{-1000.0f, 1000.0f, -100.0f, 100.0f}, {4});
  const Tensor t = from_vector(std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f}, {4});
  const std::vector<float> l =
      nn::binary_cross_entropy_with_logits(x, t, Reduction::none).to_vector<float>();
  EXPECT_EQ(l[0], 0.0f);
  EXPECT_EQ(l[1], 0.0f);
  EXPECT_FLOAT_EQ(l[2], 100.0f);
  EXPECT_FLOAT_EQ(l[3], 100.0f);
}

TEST(Loss, LogitsGradientAtZeroIsSigmoidMinusTarget) {
  const Tensor x = zeros({3}, kFloat64).requires_grad_();
  const Tensor t = from_vector(std::vector<double>{0.0, 0.3, 1.0}, {3});
  nn::binary_cross_entropy_with_logits(x, t, Reduction::sum).backward();
  EXPECT_TRUE(tensors_close(x.grad(), from_vector(std::vector<double>{0.5, 0.2, -0.5}, {3}),
                            kFloat64Tight, "d/dx at x = 0"));
}

TEST(Loss, Gradcheck) {
  Generator gen(21);
  // Inputs away from the kinks of |x - t| (l1) so finite differences are valid there.
  const Tensor x = randn({3, 4}, gen, kFloat64).requires_grad_();
  const Tensor t = (rand({3, 4}, gen, kFloat64)).requires_grad_();
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    GradcheckOptions opt;
    opt.config = "reduction " + std::to_string(static_cast<int>(r));
    opt.name = "mse_loss";
    auto res =
        gradcheck([&](const auto& in) { return nn::mse_loss(in[0], in[1], r); }, {x, t}, opt);
    EXPECT_TRUE(res.ok) << res.report;
    opt.name = "l1_loss";
    res = gradcheck([&](const auto& in) { return nn::l1_loss(in[0], in[1], r); }, {x, t}, opt);
    EXPECT_TRUE(res.ok) << res.report;
    opt.name = "binary_cross_entropy_with_logits";
    res = gradcheck(
        [&](const auto& in) { return nn::binary_cross_entropy_with_logits(in[0], in[1], r); },
        {x, t}, opt);
    EXPECT_TRUE(res.ok) << res.report;
  }
}

TEST(Loss, RejectsMismatchedArguments) {
  try {
    nn::mse_loss(zeros({2, 3}), zeros({3, 2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "mse_loss: input shape [2, 3] does not match target shape [3, 2]");
  }
  EXPECT_THROW(nn::l1_loss(zeros({2}), zeros({2}, kFloat64)), Error);
  EXPECT_THROW(nn::binary_cross_entropy_with_logits(zeros({2}), Tensor()), Error);
  // The mean of nothing is not an error: NaN, as in PyTorch (tests/test_bad_input.cpp).
  EXPECT_TRUE(std::isnan(nn::mse_loss(zeros({0}), zeros({0})).item()));
}

}  // namespace
}  // namespace tgrad
