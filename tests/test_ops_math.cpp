// The math ops (clamp, sin, cos, max/min, argmax/argmin, softmax, log_softmax): values against
// PyTorch's (float64, printed by tests/python/gen_ops_shape.py), gradcheck and gradgradcheck,
// CUDA against CPU, bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "core/device.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/op_checks.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::check_cuda_matches_cpu;
using testing::check_grads;
using testing::error_of;
using testing::tensors_close;
using testing::Tolerance;
constexpr Tolerance kTight = testing::kOpsTight;

Tensor base() {
  return testing::ops_base();
}
Tensor leaf(const Shape& shape, uint64_t seed) {
  return testing::ops_leaf(shape, seed);
}
Tensor two_rows() {
  return from_vector<double>({1., 3., 3., -2., 0.5, -1., 7., 7.}, {2, 4});
}

TEST(OpsMath, ValuesMatchPyTorch) {
  const Tensor s = two_rows();
  EXPECT_TRUE(tensors_close(
      softmax(s, 1),
      from_vector<double>(
          {0.06317957823585768, 0.46683744789153037, 0.46683744789153037, 0.003145525981081455,
           0.0007510290621338403, 0.00016757723491004885, 0.49954069685147806, 0.49954069685147806},
          {2, 4}),
      kTight, "softmax"));
  EXPECT_TRUE(tensors_close(
      log_softmax(s, 0),
      from_vector<double>(
          {-0.4740769841801067, -0.01814992791780978, -4.0181499279178094, -9.000123402189724,
           -0.9740769841801067, -4.0181499279178094, -0.01814992791780978, -0.00012340218972333965},
          {2, 4}),
      kTight, "log_softmax"));
  // torch.max(s, 1) = ([3, 7], [1, 2]): ties go to the first position.
  const auto [v, i] = max(s, 1);
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{3., 7.}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(i.dtype(), kInt64);
  const auto [mv, mi] = min(s, 0, true);
  EXPECT_EQ(mv.shape(), (Shape{1, 4}));
  EXPECT_EQ(mi.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(argmax(s).item<int64_t>(), 6);
  EXPECT_EQ(argmin(s, 1, true).to_vector<int64_t>(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(max(s).item(), 7.0);
  EXPECT_EQ(argmax(base()).item<int64_t>(), 23);  // increasing values: the last
  EXPECT_EQ(min(s).item(), -2.0);
  EXPECT_EQ(clamp(s, 0.0, 2.0).to_vector<double>(),
            (std::vector<double>{1., 2., 2., 0., 0.5, 0., 2., 2.}));
  EXPECT_EQ(clamp(s, std::nullopt, 0.0).to_vector<double>()[0], 0.0);
  EXPECT_EQ(sin(s).to_vector<double>()[1], std::sin(3.0));
  EXPECT_EQ(cos(s).to_vector<double>()[1], std::cos(3.0));
}

TEST(OpsMath, SoftmaxIsStableForLargeInputs) {
  const Tensor big = from_vector<double>({1000., 1001., -1000.}, {3});
  const std::vector<double> p = softmax(big, 0).to_vector<double>();
  EXPECT_NEAR(p[1] / p[0], std::exp(1.0), 1e-12);
  EXPECT_TRUE(std::isfinite(log_softmax(big, 0).to_vector<double>()[2]));
}

TEST(OpsMath, FullMaxSpreadsTheGradientOverTies) {
  // torch.tensor([1., 3., 3., -2.], requires_grad=True).max().backward() gives [0, .5, .5, 0].
  const Tensor t = from_vector<double>({1., 3., 3., -2.}, {4}).requires_grad_(true);
  max(t).backward();
  EXPECT_EQ(t.grad().to_vector<double>(), (std::vector<double>{0., 0.5, 0.5, 0.}));
  const Tensor u = from_vector<double>({1., -2., 3., -2.}, {4}).requires_grad_(true);
  min(u).backward();
  EXPECT_EQ(u.grad().to_vector<double>(), (std::vector<double>{0., 0.5, 0., 0.5}));
}

TEST(OpsMath, MaxPropagatesNaN) {
  const Tensor t = from_vector<double>({1., NAN, 3.}, {3});
  EXPECT_TRUE(std::isnan(max(t).item()));
  EXPECT_EQ(argmax(t).item<int64_t>(), 1);
}

TEST(OpsMath, Gradients) {
  const Tensor x = leaf({3, 4}, 4);
  check_grads([](const std::vector<Tensor>& in) { return clamp(in[0], -0.5, 0.5); }, {x}, "clamp");
  check_grads([](const std::vector<Tensor>& in) { return clamp(in[0], 0.1); }, {x}, "clamp_min");
  check_grads([](const std::vector<Tensor>& in) { return sin(in[0]); }, {x}, "sin");
  check_grads([](const std::vector<Tensor>& in) { return cos(in[0]); }, {x}, "cos");
  check_grads([](const std::vector<Tensor>& in) { return std::get<0>(max(in[0], 1)); }, {x}, "max");
  check_grads([](const std::vector<Tensor>& in) { return std::get<0>(min(in[0], 0, true)); }, {x},
              "min");
  check_grads([](const std::vector<Tensor>& in) { return max(in[0]); }, {x}, "max_all");
  check_grads([](const std::vector<Tensor>& in) { return softmax(in[0], 1); }, {x}, "softmax");
  check_grads([](const std::vector<Tensor>& in) { return log_softmax(in[0], 0); }, {x},
              "log_softmax");
}

TEST(OpsMath, BadInput) {
  const Tensor s = two_rows();
  const Tensor ints = zeros({2}, kInt64);
  EXPECT_NE(error_of([&] { softmax(ints, 0); }).find("softmax"), std::string::npos);
  EXPECT_NE(error_of([&] { softmax(ints, 0); }).find("int64"), std::string::npos);
  EXPECT_NE(error_of([&] { argmax(ints); }).find("int64"), std::string::npos);
  EXPECT_NE(error_of([&] { clamp(ints, 0.0); }).find("int64"), std::string::npos);
  EXPECT_NE(error_of([&] { sin(ints); }).find("int64"), std::string::npos);
  EXPECT_NE(error_of([&] { clamp(s, std::nullopt, std::nullopt); }).find("at least one"),
            std::string::npos);
  EXPECT_NE(error_of([&] { max(zeros({0}, kFloat64)); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { max(zeros({2, 0}, kFloat64), 1); }).find("size 0"), std::string::npos);
  EXPECT_NE(error_of([&] { softmax(s, 2); }).find("out of range"), std::string::npos);
}

TEST(OpsMathCuda, MatchesCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const Tensor x = leaf({3, 5}, 5);
  check_cuda_matches_cpu([](const Tensor& t) { return clamp(t, -0.5, 0.5); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return sin(t); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return cos(t); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return std::get<0>(max(t, 1)); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return std::get<0>(min(t, 0)); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return max(t); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return min(t); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return softmax(t, 1); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return log_softmax(t, 0); }, x);
  EXPECT_TRUE(tensors_close(argmax(x.cuda(), 1), argmax(x, 1), kTight, "argmax"));
  EXPECT_TRUE(tensors_close(argmin(x.cuda()), argmin(x), kTight, "argmin"));
}

}  // namespace
}  // namespace tgrad
