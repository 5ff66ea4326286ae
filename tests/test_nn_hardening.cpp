// Modules and schedules under careless use: cycles between containers, a layer reused twice,
// names that are not UTF-8, a Linear with no inputs, a schedule that overflows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

// A Module that registers whatever it is given, to reach register_parameter/register_module.
class Open : public nn::Module {
 public:
  Open() : nn::Module("Open") {}
  void add_parameter(const std::string& name, const Tensor& t) { register_parameter(name, t); }
  void add_module(const std::string& name, const nn::ModulePtr& m) { register_module(name, m); }
};

TEST(NnHardening, ContainersThatWouldContainEachOtherAreRefused) {
  auto a = std::make_shared<nn::SequentialImpl>();
  auto b = std::make_shared<nn::SequentialImpl>();
  a->push_back(std::make_shared<nn::LinearImpl>(2, 2));
  a->push_back(b);
  const std::string e = error_of([&] { b->push_back(a); });
  EXPECT_TRUE(contains(e, "would make a cycle")) << e;
  EXPECT_EQ(b->size(), 0u);  // nothing registered
  // Deeper: c inside b inside a; registering a under c is a cycle too.
  auto c = std::make_shared<nn::SequentialImpl>();
  b->push_back(c);
  EXPECT_TRUE(contains(error_of([&] { c->push_back(a); }), "would make a cycle"));
  EXPECT_EQ(a->parameters().size(), 2u);  // and the tree still walks
}

TEST(NnHardening, AReusedLayerListsItsParametersOnce) {
  auto shared = std::make_shared<nn::LinearImpl>(3, 3);
  nn::Sequential twice({shared, std::make_shared<nn::TanhImpl>(), shared});
  const nn::NamedTensors named = twice->named_parameters();
  ASSERT_EQ(named.size(), 2u);  // weight and bias, once each, as PyTorch
  EXPECT_EQ(named[0].first, "0.weight");
  EXPECT_EQ(named[1].first, "0.bias");
  // An optimizer over them is accepted, and a step moves each parameter once.
  optim::SGD opt(twice->parameters(), optim::SGDOptions(0.1));
  sum(twice(randn({2, 3}))).backward();
  opt.step();
  EXPECT_EQ(twice->state_dict().size(), 2u);
}

TEST(NnHardening, NamesThatAreNotUtf8AreRefusedAtRegistration) {
  Open m;
  const std::string bad = "w\xff";
  const std::string e = error_of([&] { m.add_parameter(bad, zeros({1})); });
  EXPECT_TRUE(contains(e, "is not valid UTF-8")) << e;
  EXPECT_TRUE(contains(e, "w\\xff")) << e;  // shown escaped
  EXPECT_TRUE(contains(error_of([&] { m.add_module("\xc0\x80", std::make_shared<nn::TanhImpl>()); }),
                       "is not valid UTF-8"));
  EXPECT_TRUE(m.named_parameters().empty());
  m.add_parameter("poids_\xc3\xa9", zeros({1}));  // "poids_e-acute": valid UTF-8 is fine
  EXPECT_EQ(m.named_parameters().size(), 1u);
}

// PyTorch: nn.Linear(0, 4)(torch.randn(5, 0)) is the bias broadcast to (5, 4), and the bias is
// drawn from U(0, 0) since the fan-in is 0, so zeros.
TEST(NnHardening, LinearWithNoInputFeaturesReturnsTheBiasBroadcast) {
  nn::Linear lin(0, 4);
  const Tensor y = lin(randn({5, 0}));
  EXPECT_EQ(y.shape(), (Shape{5, 4}));
  EXPECT_TRUE(tensors_close(y, zeros({5, 4}), Tolerance{}, "Linear(0, 4)"));
  {
    NoGradGuard no_grad;
    lin->bias.copy_(from_vector<float>({1, 2, 3, 4}, {4}));
  }
  const Tensor y3 = lin(randn({2, 3, 0}));
  EXPECT_EQ(y3.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y3.to_vector<float>()[7], 4.0f);
  sum(y3).backward();
  EXPECT_TRUE(tensors_close(lin->bias.grad(), full({4}, 6.0), Tolerance{}, "db = rows"));
  EXPECT_EQ(lin->weight.grad().shape(), (Shape{4, 0}));
}

TEST(NnHardening, AScheduleStepThatOverflowsChangesNothing) {
  nn::Linear lin(2, 2);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(1.0));
  optim::StepLR schedule(opt, 1, 1e300);  // lr * 1e300^epoch: infinite at epoch 2
  schedule.step();
  EXPECT_EQ(schedule.last_epoch(), 1);
  EXPECT_EQ(opt.lr(), 1e300);
  const std::string e = error_of([&] { schedule.step(); });
  EXPECT_TRUE(contains(e, "nothing was changed")) << e;
  EXPECT_EQ(schedule.last_epoch(), 1);
  EXPECT_EQ(opt.lr(), 1e300);
}

}  // namespace
}  // namespace tgrad::testing
