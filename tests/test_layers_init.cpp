// nn::init and the layers' default initialisation: PyTorch's bounds (fan_in of a ConvTranspose
// weight is C_out/groups * prod(k)), and rough mean/variance over large tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

struct Stats {
  double min, max, mean, var;
};

Stats stats_of(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  Stats s{*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), 0, 0};
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  for (double x : v)
    s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size());
  return s;
}

// Checks a uniform(-bound, bound) sample of n values: inside the bounds, reaching near them,
// mean ~0 and variance ~bound^2/3. The statistical slack is 6 standard errors (std of the
// mean = bound/sqrt(3n); of the variance about 0.9 * var/sqrt(n)), so seeds cannot flake.
void expect_uniform(const Tensor& t, double bound, const std::string& what) {
  const double n = static_cast<double>(t.numel());
  const Stats s = stats_of(t);
  EXPECT_GE(s.min, -bound) << what;
  EXPECT_LE(s.max, bound) << what;
  EXPECT_LT(s.min, -bound * (1 - 50.0 / n)) << what;
  EXPECT_GT(s.max, bound * (1 - 50.0 / n)) << what;
  EXPECT_NEAR(s.mean, 0.0, 6 * bound / std::sqrt(3 * n)) << what;
  const double var = bound * bound / 3;
  EXPECT_NEAR(s.var, var, 6 * 0.9 * var / std::sqrt(n)) << what;
}

TEST(Init, FanInAndFanOutFollowPyTorch) {
  // ConvTranspose2d weight (C_in=8, C_out/groups=3, 5, 2): fan_in = 3*10, fan_out = 8*10.
  const auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(empty({8, 3, 5, 2}));
  EXPECT_EQ(fan_in, 30);
  EXPECT_EQ(fan_out, 80);
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(empty({7, 4})).first, 4);
  EXPECT_THROW(nn::init::calculate_fan_in_and_fan_out(empty({7})), Error);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(nn::init::Nonlinearity::leaky_relu, std::sqrt(5.0)),
                   std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(nn::init::Nonlinearity::tanh), 5.0 / 3.0);
}

// A negative slope is a slope, not "use the default": torch.nn.init.calculate_gain('leaky_relu')
// = 1.4141428569978354, ('leaky_relu', -0.5) = 1.2649110640673518 (Debian's PyTorch), and
// kaiming_uniform_(w, a=-0.5) draws within +-gain * sqrt(3 / fan_in).
TEST(Init, NegativeLeakyReluSlopeIsUsedAsGiven) {
  using nn::init::Nonlinearity;
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::leaky_relu), 1.4141428569978354);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain(Nonlinearity::leaky_relu, -0.5), 1.2649110640673518);
  Generator gen(5);
  Tensor w = empty({400, 250}, kFloat64);
  nn::init::kaiming_uniform_(w, -0.5, nn::init::FanMode::fan_in, Nonlinearity::leaky_relu, gen);
  expect_uniform(w, 1.2649110640673518 * std::sqrt(3.0 / 250.0), "kaiming_uniform_ a=-0.5");
}

TEST(Init, ConvTransposeDefaultInitWithGroups) {
  Generator gen(11);
  // groups = 4: weight (64, 48/4 = 12, 3, 3), fan_in = 12 * 9 = 108.
  nn::ConvTranspose2d conv(nn::ConvTranspose2dOptions(64, 48, 3).groups(4), gen);
  ASSERT_EQ(conv->weight.shape(), (Shape{64, 12, 3, 3}));
  expect_uniform(conv->weight, 1.0 / std::sqrt(108.0), "ConvTranspose2d weight");
  const Stats b = stats_of(conv->bias);
  EXPECT_LE(std::max(-b.min, b.max), 1.0 / std::sqrt(108.0));

  nn::ConvTranspose1d conv1(nn::ConvTranspose1dOptions(32, 40, 5).groups(2), gen);
  expect_uniform(conv1->weight, 1.0 / std::sqrt(20.0 * 5.0), "ConvTranspose1d weight");
}

TEST(Init, LinearDefaultInit) {
  Generator gen(12);
  nn::Linear lin(200, 300, gen);
  expect_uniform(lin->weight, 1.0 / std::sqrt(200.0), "Linear weight");
  const Stats b = stats_of(lin->bias);
  EXPECT_LE(std::max(-b.min, b.max), 1.0 / std::sqrt(200.0));
}

TEST(Init, SameSeedSameWeights) {
  Generator a(5), b(5), c(6);
  nn::ConvTranspose2d x(nn::ConvTranspose2dOptions(3, 4, 3), a);
  nn::ConvTranspose2d y(nn::ConvTranspose2dOptions(3, 4, 3), b);
  nn::ConvTranspose2d z(nn::ConvTranspose2dOptions(3, 4, 3), c);
  EXPECT_TRUE(equal(x->weight, y->weight));
  EXPECT_TRUE(equal(x->bias, y->bias));
  EXPECT_FALSE(equal(x->weight, z->weight));
}

TEST(Init, FunctionsInPlace) {
  Generator gen(13);
  Tensor t = empty({200, 500}, kFloat64).requires_grad_();
  const Tensor handle = t;
  nn::init::uniform_(t, -2.0, 2.0, gen);
  expect_uniform(handle, 2.0, "uniform_");
  nn::init::normal_(t, 1.0, 3.0, gen);
  Stats s = stats_of(t);
  // 6 standard errors of the mean (3/sqrt(n)) and of the variance (9*sqrt(2/n)).
  EXPECT_NEAR(s.mean, 1.0, 6 * 3.0 / std::sqrt(1e5));
  EXPECT_NEAR(s.var, 9.0, 6 * 9.0 * std::sqrt(2.0 / 1e5));
  nn::init::kaiming_uniform_(t, 0.0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu, gen);
  expect_uniform(t, std::sqrt(2.0) * std::sqrt(3.0 / 500.0), "kaiming_uniform_ relu");
  nn::init::kaiming_normal_(t, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu, gen);
  s = stats_of(t);
  EXPECT_NEAR(s.var, 2.0 / 200.0, 6 * (2.0 / 200.0) * std::sqrt(2.0 / 1e5));
  nn::init::xavier_uniform_(t, 1.0, gen);
  expect_uniform(t, std::sqrt(6.0 / 700.0), "xavier_uniform_");
  nn::init::zeros_(t);
  EXPECT_EQ(stats_of(t).max, 0.0);
  nn::init::ones_(t);
  EXPECT_EQ(stats_of(t).min, 1.0);
  EXPECT_TRUE(t.requires_grad());
  EXPECT_THROW(nn::init::uniform_(t, 1.0, -1.0), Error);
  EXPECT_THROW(nn::init::normal_(t, 0.0, -1.0), Error);
  EXPECT_THROW(nn::init::zeros_(Tensor()), Error);
}

// Every initialiser refuses non-finite, inverted or unrepresentable arguments with a message
// naming the function and the argument, and leaves the tensor as it was.
TEST(Init, NonFiniteOrInvertedArgumentsAreRefused) {
  using nn::init::FanMode;
  using nn::init::Nonlinearity;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const DType dtype : {kFloat32, kFloat64}) {
    const Tensor t = full({4, 5}, 0.25, dtype);
    struct Case {
      const char* what;
      std::function<void()> call;
      std::string message;
    };
    const std::vector<Case> cases = {
        {"uniform_ -inf..inf", [&] { nn::init::uniform_(t, -inf, inf); },
         "nn::init::uniform_: low=-inf must be finite"},
        {"uniform_ 0..inf", [&] { nn::init::uniform_(t, 0.0, inf); },
         "nn::init::uniform_: high=inf must be finite"},
        {"uniform_ nan", [&] { nn::init::uniform_(t, nan, 1.0); }, "low=nan must be finite"},
        {"uniform_ inverted", [&] { nn::init::uniform_(t, 1.0, 0.0); },
         "low=1 must not exceed high=0"},
        // In float64 the range overflows on the way (high - low = inf); float32 cannot even
        // hold the bounds.
        {"uniform_ range", [&] { nn::init::uniform_(t, -1e308, 1e308); },
         dtype == kFloat64 ? "high - low (high=1e+308, low=-1e+308) is out of range"
                           : "low=-1e+308 is out of range for a float32 tensor"},
        {"normal_ std inf", [&] { nn::init::normal_(t, 0.0, inf); }, "std=inf must be finite"},
        {"normal_ std nan", [&] { nn::init::normal_(t, 0.0, nan); }, "std=nan must be finite"},
        {"normal_ mean inf", [&] { nn::init::normal_(t, inf, 1.0); }, "mean=inf must be finite"},
        {"normal_ mean nan", [&] { nn::init::normal_(t, nan, 1.0); }, "mean=nan must be finite"},
        {"normal_ std negative", [&] { nn::init::normal_(t, 0.0, -1.0); },
         "std=-1 must be non-negative"},
        {"kaiming_uniform_ a", [&] { nn::init::kaiming_uniform_(t, nan); },
         "nn::init::kaiming_uniform_: a=nan must be finite"},
        {"kaiming_uniform_ a inf", [&] { nn::init::kaiming_uniform_(t, inf); },
         "nn::init::kaiming_uniform_: a=inf must be finite"},
        {"kaiming_normal_ a", [&] { nn::init::kaiming_normal_(t, inf, FanMode::fan_out); },
         "nn::init::kaiming_normal_: a=inf must be finite"},
        {"xavier_uniform_ gain inf", [&] { nn::init::xavier_uniform_(t, inf); },
         "nn::init::xavier_uniform_: gain=inf must be finite and non-negative"},
        {"xavier_uniform_ gain nan", [&] { nn::init::xavier_uniform_(t, nan); }, "gain=nan"},
        {"xavier_uniform_ gain negative", [&] { nn::init::xavier_uniform_(t, -1.0); },
         "gain=-1 must be finite and non-negative"},
        {"calculate_gain", [&] { nn::init::calculate_gain(Nonlinearity::leaky_relu, nan); },
         "nn::init::calculate_gain: param=nan must be finite"},
    };
    for (const Case& c : cases) {
      const std::string e = testing::error_of(c.call);
      EXPECT_NE(e.find(c.message), std::string::npos) << dtype << " " << c.what << ": " << e;
      EXPECT_EQ(t.to_vector<double>(), std::vector<double>(20, 0.25)) << c.what;
    }
  }
  // float32 holds less than float64: bounds past FLT_MAX would be filled as inf. (PyTorch refuses
  // these too: "from is out of bounds for float", "to-from <= numeric_limits<float>::max()".)
  const Tensor f = full({3}, 0.25);
  EXPECT_NE(testing::error_of([&] {
              nn::init::uniform_(f, 0.0, 1e39);
            }).find("high=1e+39 is out of range for a float32 tensor"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              nn::init::uniform_(f, -3e38, 3e38);
            }).find("high - low (high=3e+38, low=-3e+38) is out of range for a float32"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              nn::init::normal_(f, 0.0, 1e39);
            }).find("std=1e+39 is out of range for a float32 tensor"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              nn::init::constant_(f, -1e39);
            }).find("nn::init::constant_: value=-1e+39 is out of range for a float32 tensor"),
            std::string::npos);
  EXPECT_EQ(f.to_vector<double>(), std::vector<double>(3, 0.25));
  // The same values fit float64; constant_ fills inf and NaN as asked, as PyTorch's does.
  const Tensor d = full({3}, 0.25, kFloat64);
  nn::init::uniform_(d, -3e38, 3e38);
  nn::init::constant_(d, -1e39);
  EXPECT_EQ(d.to_vector<double>(), std::vector<double>(3, -1e39));
  nn::init::constant_(f, inf);
  EXPECT_EQ(f.to_vector<double>(), std::vector<double>(3, inf));
}

}  // namespace
}  // namespace tgrad
