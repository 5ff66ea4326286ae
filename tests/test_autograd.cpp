// The tape engine: gradients, accumulation, fan-out, no-grad, detach, retain_graph, grad(),
// and the errors of a misused graph (each leaving every .grad unchanged).
#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::error_of;
using testing::kFloat64Tight;
using testing::tensors_close;

Tensor leaf(std::vector<double> values, Shape shape) {
  return from_vector(values, shape).requires_grad_(true);
}

TEST(Autograd, GradientOfASimpleExpression) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(x * x * 3.0 + x);  // dy/dx = 6x + 1
  y.backward();
  EXPECT_TRUE(tensors_close(x.grad(), from_vector(std::vector<double>{7, 13, 19}, {3}),
                            kFloat64Tight, "6x + 1"));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name, "sum");
}

TEST(Autograd, GradientsAccumulateUntilZeroGrad) {
  Tensor x = leaf({1, -2}, {2});
  sum(x * 2.0).backward();
  sum(x * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 5}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}

TEST(Autograd, FanOutSumsBothUses) {
  Tensor x = leaf({2, 3}, {2});
  Tensor a = x * 2.0;
  Tensor y = sum(a * a + a);  // d/dx = (2a + 1) * 2 = 8x + 2
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{18, 26}));
}

TEST(Autograd, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  sum(a * b).backward();
  EXPECT_EQ(b.grad().shape(), (Shape{3}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{10, 20, 30, 10, 20, 30}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = leaf({1}, {1});
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_mode_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      EnableGradGuard enable;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
  }
  EXPECT_TRUE(grad_mode_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, DetachStopsTheGradient) {
  Tensor x = leaf({3}, {1});
  Tensor y = sum(x * x.detach());  // only the first factor carries a gradient: dy/dx = x
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3}));
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_EQ(x.detach().raw_data(), x.raw_data());
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 8}));
}

TEST(Autograd, SecondBackwardThroughAFreedGraphFailsAndChangesNothing) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward();
  const std::string e = error_of([&] { y.backward(); });
  EXPECT_NE(e.find("second time"), std::string::npos) << e;
  EXPECT_NE(e.find("retain_graph"), std::string::npos) << e;
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4}));
}

TEST(Autograd, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 3.0;
  const std::string e = error_of([&] { y.backward(); });
  EXPECT_NE(e.find("scalar"), std::string::npos) << e;
  EXPECT_NE(e.find("[2]"), std::string::npos) << e;
  EXPECT_FALSE(x.grad().defined());
  y.backward(from_vector(std::vector<double>{1, -1}, {2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, -3}));
}

TEST(Autograd, GradientMustMatchTheOutput) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 3.0;
  EXPECT_NE(error_of([&] { y.backward(ones({3}, kFloat64)); }).find("shape"), std::string::npos);
  EXPECT_NE(error_of([&] { y.backward(ones({2}, kFloat32)); }).find("dtype"), std::string::npos);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, BackwardOfATensorWithoutHistoryIsAnError) {
  Tensor x = ones({1});
  EXPECT_NE(error_of([&] { x.backward(); }).find("does not require grad"), std::string::npos);
}

TEST(Autograd, LeafOnlyOperationsAreGuarded) {
  Tensor x = leaf({1}, {1});
  Tensor y = x * 2.0;
  EXPECT_NE(error_of([&] { y.requires_grad_(false); }).find("non-leaf"), std::string::npos);
  EXPECT_NE(error_of([&] { x.fill_(0.0); }).find("in place"), std::string::npos);
  EXPECT_NE(error_of([&] { x.copy_(ones({1}, kFloat64)); }).find("in place"), std::string::npos);
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1}));
  NoGradGuard guard;
  x.fill_(5.0);  // allowed without grad mode, as optimizers do
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{5}));
}

TEST(Autograd, GradFunctionLeavesDotGradAlone) {
  Tensor x = leaf({1, 2}, {2});
  Tensor mid = x * x;
  Tensor y = sum(mid * 3.0);
  std::vector<Tensor> g = grad({y}, {x, mid});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{6, 12}));
  EXPECT_EQ(g[1].to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GradOfUnreachedInputIsUndefined) {
  Tensor x = leaf({1}, {1});
  Tensor z = leaf({1}, {1});
  std::vector<Tensor> g = grad({sum(x * 2.0)}, {x, z});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
}

TEST(Autograd, GraphIsFreedWithItsTensors) {
  std::weak_ptr<Node> node;
  Tensor x = leaf({1}, {1});
  {
    Tensor y = x * 2.0;
    node = y.grad_fn();
    EXPECT_FALSE(node.expired());
  }
  EXPECT_TRUE(node.expired());
}

TEST(Autograd, ConversionsAreDifferentiable) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(x.to(kFloat32).reshape({2, 1}).clone() * 2.0);
  y.backward();
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Autograd, AnomalyModeNamesTheFirstBackwardThatMadeANaN) {
  Tensor x = leaf({0.0, 1.0}, {2});
  {
    DetectAnomalyGuard anomaly;
    Tensor y;
    {
      RecordScope scope("decoder");
      RecordScope inner("head");
      y = sum(log(x) * 2.0);  // d log(x)/dx = 1/x: infinite at 0
    }
    const std::string e = error_of([&] { y.backward(); });
    EXPECT_NE(e.find("anomaly"), std::string::npos) << e;
    EXPECT_NE(e.find("'log'"), std::string::npos) << e;
    EXPECT_NE(e.find("decoder/head"), std::string::npos) << e;
    EXPECT_NE(e.find("inf"), std::string::npos) << e;
    EXPECT_FALSE(x.grad().defined());  // nothing written
  }
  EXPECT_FALSE(anomaly_mode_enabled());
  sum(log(x) * 2.0).backward();  // without anomaly mode, infinities propagate silently
  EXPECT_TRUE(std::isinf(x.grad().to_vector<double>()[0]));
}

}  // namespace
}  // namespace tgrad
