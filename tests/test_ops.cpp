// The non-convolution ops on the CPU backend: values against std:: math, broadcasting,
// reductions, products, empty tensors, and the errors of bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>

#include "core/ops.h"
#include "core/random.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::error_of;
using testing::for_each_cpu_level;
using testing::tensors_close;
using testing::Tolerance;

Tensor vec(std::vector<double> v, Shape s) {
  return from_vector(v, s);
}

// Host-side expectation of a unary op.
Tensor host_map(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v)
    e = f(e);
  return from_vector(v, x.shape(), x.dtype());
}

class UnaryOps : public ::testing::TestWithParam<DType> {};

TEST_P(UnaryOps, MatchStdMath) {
  const DType dtype = GetParam();
  // float32 results of libm-style functions: within a few ulps of the float64 value.
  const Tolerance tol = dtype == kFloat32 ? Tolerance{1e-6, 1e-6, 0} : Tolerance{1e-15, 1e-14, 0};
  Generator gen(5);
  const Tensor x = randn({4, 5}, gen, dtype);
  const Tensor pos = add(abs(x), 0.1);
  auto check = [&](const char* name, const Tensor& got, const Tensor& in,
                   std::function<double(double)> f) {
    EXPECT_TRUE(tensors_close(got, host_map(in, f), tol, name));
    EXPECT_EQ(got.dtype(), dtype) << name;
  };
  check("neg", neg(x), x, [](double v) { return -v; });
  check("exp", exp(x), x, [](double v) { return std::exp(v); });
  check("log", log(pos), pos, [](double v) { return std::log(v); });
  check("abs", abs(x), x, [](double v) { return std::abs(v); });
  check("sqrt", sqrt(pos), pos, [](double v) { return std::sqrt(v); });
  check("pow", pow(pos, 2.5), pos, [](double v) { return std::pow(v, 2.5); });
  check("relu", relu(x), x, [](double v) { return v > 0 ? v : 0.0; });
  check("leaky_relu", leaky_relu(x, 0.1), x, [](double v) { return v > 0 ? v : 0.1 * v; });
  check("sigmoid", sigmoid(x), x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  check("tanh", tanh(x), x, [](double v) { return std::tanh(v); });
  check("add_scalar", x + 2.0, x, [](double v) { return v + 2.0; });
  check("rsub_scalar", 2.0 - x, x, [](double v) { return 2.0 - v; });
  check("mul_scalar", x * 3.0, x, [](double v) { return v * 3.0; });
  check("rdiv_scalar", 2.0 / pos, pos, [](double v) { return 2.0 / v; });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, UnaryOps, ::testing::Values(kFloat32, kFloat64));

TEST(Ops, SigmoidIsFiniteForLargeInputs) {
  const Tensor s = sigmoid(vec({-1000, 1000, -50, 50}, {4}).to(kFloat32));
  const std::vector<float> v = s.to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_GT(v[2], 0.0f);
  EXPECT_LT(v[3], 1.0001f);
}

// The float sigmoid is computed with an exponential of its own (cpu/elementwise.cpp), so it is
// checked across the whole float range at each CPU level, not only at a few random values: a
// sample of every sign, exponent and mantissa (every 4099th bit pattern, some 2 M values, the
// denormals and the clamp at -105 included) and the special values, each within 2.5 ulp of the
// float64 sigmoid (its worst is 2.2 ulp, one division on an exponential within 1.2 ulp; the libm
// form it replaced was within 2.3), an ulp of a result in the denormals being the smallest
// denormal.
TEST(Ops, FloatSigmoidIsWithinTwoAndAHalfUlpsEverywhere) {
  std::vector<float> in;
  for (uint64_t b = 0; b < 0x7F800000u; b += 4099)
    for (uint32_t sign : {0u, 0x80000000u})
      in.push_back(std::bit_cast<float>(static_cast<uint32_t>(b) | sign));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, inf, -inf, -105.0f, -104.0f, -103.9f, -88.0f, 88.0f, 17.0f, -17.0f})
    in.push_back(v);
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  const Tensor x = from_vector(in, {static_cast<int64_t>(in.size())}, kFloat32);
  for_each_cpu_level([&](cpu::Capability level) {
    const std::vector<float> got = sigmoid(x).to_vector<float>();
    int bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const double v = in[i];
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(got[i])) << cpu::capability_name(level);
        continue;
      }
      const double ref = 1.0 / (1.0 + std::exp(-v));
      const float nearest = static_cast<float>(ref);
      const double ulp = std::max<double>(std::nextafter(nearest, inf) - nearest,
                                          std::numeric_limits<float>::denorm_min());
      if (!(std::abs(got[i] - ref) <= 2.5 * ulp) && ++bad <= 5)
        ADD_FAILURE() << cpu::capability_name(level) << ": sigmoid(" << in[i] << ") = " << got[i]
                      << ", float64 " << ref;
    }
    EXPECT_EQ(bad, 0) << cpu::capability_name(level);
  });
}

TEST(Ops, BroadcastingFollowsNumpyRules) {
  const Tensor a = vec({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = vec({10, 20, 30}, {3});
  const Tensor c = vec({100, 200}, {2, 1});
  EXPECT_EQ((a + b).to_vector<double>(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ((a - c).to_vector<double>(), (std::vector<double>{-99, -98, -97, -196, -195, -194}));
  EXPECT_EQ((b * c).shape(), (Shape{2, 3}));
  EXPECT_EQ((b * c).to_vector<double>(), (std::vector<double>{1000, 2000, 3000, 2000, 4000, 6000}));
  EXPECT_EQ((a / scalar_tensor(2.0, kFloat64)).to_vector<double>(),
            (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
}

TEST(Ops, ShapesThatDoNotBroadcastAreErrors) {
  const std::string e = error_of([] { vec({1, 2, 3}, {3}) + vec({1, 2}, {2}); });
  EXPECT_NE(e.find("add"), std::string::npos) << e;
  EXPECT_NE(e.find("[3] and [2]"), std::string::npos) << e;
  EXPECT_NE(e.find("do not broadcast"), std::string::npos) << e;
}

TEST(Ops, DtypeMismatchIsAnError) {
  const std::string e = error_of([] { mul(ones({2}), ones({2}, kFloat64)); });
  EXPECT_NE(e.find("mul: dtype mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("float32"), std::string::npos) << e;
  EXPECT_NE(e.find("float64"), std::string::npos) << e;
  EXPECT_NE(error_of([] { add(Tensor(), ones({1})); }).find("undefined"), std::string::npos);
}

TEST(Ops, ReductionsOverDims) {
  const Tensor x = arange(24, kFloat64).reshape({2, 3, 4});
  EXPECT_EQ(sum(x).item(), 276.0);
  EXPECT_EQ(sum(x).dim(), 0);
  EXPECT_EQ(mean(x).item(), 11.5);
  const Tensor s1 = sum(x, {1});
  EXPECT_EQ(s1.shape(), (Shape{2, 4}));
  EXPECT_EQ(s1.to_vector<double>(), (std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_EQ(sum(x, {-1}, true).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(sum(x, {0, 2}).to_vector<double>(), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(mean(x, {0}).to_vector<double>()[0], 6.0);
  EXPECT_EQ(sum_to(x, {3, 1}).to_vector<double>(), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(expand(vec({1, 2}, {2, 1}), {2, 3}).to_vector<double>(),
            (std::vector<double>{1, 1, 1, 2, 2, 2}));
}

// expand copies values bit for bit (a gather with stride 0 on the broadcast axes): -0.0, NaN and
// infinities arrive unchanged, on every device, and its gradient sums over the broadcast axes.
void check_expand_on(Device device) {
  const double nz = -0.0, inf = std::numeric_limits<double>::infinity();
  const Tensor x = from_vector(std::vector<double>{nz, 1.5, inf, -2.0, std::nan(""), 0.0},
                               {2, 1, 3}, TensorOptions(kFloat32).device(device))
                       .requires_grad_();
  const Tensor y = expand(x, {4, 2, 5, 3});
  ASSERT_EQ(y.shape(), (Shape{4, 2, 5, 3}));
  const std::vector<float> got = y.to_vector<float>(), src = x.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    const size_t k = (i / 15 % 2) * 3 + i % 3;  // y[a, b, c, d] = x[b, 0, d]
    EXPECT_EQ(std::memcmp(&got[i], &src[k], sizeof(float)), 0) << i << " on " << device.str();
  }
  EXPECT_TRUE(std::signbit(got[0])) << "-0.0 lost its sign on " << device.str();
  sum(expand(x, {4, 2, 5, 3})).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>(6, 20.0))) << device.str();
}

TEST(Ops, ExpandCopiesValuesBitForBitCpu) {
  check_expand_on(Device(kCPU));
}

TEST(Ops, ExpandCopiesValuesBitForBitCuda) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_expand_on(Device(kCUDA));
}

TEST(Ops, BadReductionDimsAreErrors) {
  const Tensor x = zeros({2, 3});
  EXPECT_NE(error_of([&] { sum(x, {2}); }).find("sum: dim 2 is out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { sum(x, {0, -2}); }).find("more than once"), std::string::npos);
  EXPECT_NE(error_of([&] { sum_to(x, {4}); }).find("cannot be summed"), std::string::npos);
  EXPECT_NE(error_of([&] { expand(x, {3, 3}); }).find("expand"), std::string::npos);
}

TEST(Ops, MatmulAndLinear) {
  const Tensor a = vec({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = vec({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(matmul(a, b).to_vector<double>(), (std::vector<double>{4, 5, 10, 11}));
  const Tensor w = vec({1, 0, 0, 0, 1, 0}, {2, 3});  // picks features 0 and 1
  const Tensor bias = vec({100, 200}, {2});
  const Tensor y = linear(a.reshape({1, 2, 3}), w, bias);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{101, 202, 104, 205}));
  EXPECT_NE(error_of([&] { matmul(a, a); }).find("cannot be multiplied (3 != 2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { matmul(a.reshape({6}), a); }).find("2-D"), std::string::npos);
  EXPECT_NE(error_of([&] { linear(a, w, vec({1}, {1})); }).find("bias"), std::string::npos);
}

TEST(Ops, MatmulMatchesNaiveLoopsOnLargerShapes) {
  Generator gen(9);
  const Tensor a = randn({37, 53}, gen, kFloat64), b = randn({53, 29}, gen, kFloat64);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expect(37 * 29, 0.0);
  for (int i = 0; i < 37; ++i)
    for (int k = 0; k < 53; ++k)
      for (int j = 0; j < 29; ++j)
        expect[i * 29 + j] += av[i * 53 + k] * bv[k * 29 + j];
  // float64 dot products of length 53: rounding differs only in summation order.
  EXPECT_TRUE(tensors_close(matmul(a, b), from_vector(expect, {37, 29}), Tolerance{1e-12, 1e-12, 0},
                            "matmul 37x53x29"));
}

TEST(Ops, EmptyTensorsGiveEmptyResults) {
  const Tensor e = zeros({0, 3});
  EXPECT_EQ((e + 1.0).shape(), (Shape{0, 3}));
  EXPECT_EQ(sum(e).item(), 0.0);
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(sum(e, {0}).to_vector<double>(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(matmul(zeros({2, 0}), zeros({0, 3})).to_vector<double>(), std::vector<double>(6, 0));
}

}  // namespace
}  // namespace tgrad
