// Optimizer parameter groups (LibTorch's OptimizerParamGroup): per-group options against
// PyTorch 1.13's answers and against independent single-group optimizers, add_param_group,
// state_dict with several groups, per-group schedulers, and the checks on bad groups.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/lr_scheduler.h"
#include "layers/optimizer.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using namespace optim;
using testing::tensors_close;
using testing::Tolerance;

// float64 updates in a different operation order than PyTorch's fused kernels differ by a few
// ulps per step; three steps stay far below 1e-12.
constexpr Tolerance kTorchTol{1e-12, 1e-12, 0.0};

Tensor f64(const std::vector<double>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, TensorOptions(kFloat64))
      .requires_grad_();
}

// loss = 0.5 * sum(a^2) + sum(b^3), the loss the PyTorch runs below used.
void backward_loss(const Tensor& a, const Tensor& b) {
  (sum(a * a) * 0.5 + sum(b * b * b)).backward();
}

void run_steps(Optimizer& opt, const Tensor& a, const Tensor& b, int steps) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    backward_loss(a, b);
    opt.step();
  }
}

TEST(OptimGroups, AdamPerGroupOptionsMatchPyTorch) {
  // torch.optim.Adam([{'params': [a]}, {'params': [b], 'lr': 0.01, 'betas': (0.5, 0.9),
  // 'weight_decay': 0.1}], lr=0.1), three steps, float64 (PyTorch 1.13).
  const Tensor a = f64({1.0, -2.0, 3.0}), b = f64({0.5, 0.25});
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<AdamOptions>(
                                                  AdamOptions(0.01)
                                                      .betas(std::make_tuple(0.5, 0.9))
                                                      .weight_decay(0.1)));
  Adam opt(groups, AdamOptions(0.1));
  run_steps(opt, a, b, 3);
  EXPECT_TRUE(tensors_close(a, f64({0.701586274504415, -1.7006233928121137, 2.7003815239578244}),
                            kTorchTol, "group 0 (defaults)"));
  EXPECT_TRUE(tensors_close(b, f64({0.4702033301186823, 0.22041395698488528}), kTorchTol,
                            "group 1 (own options)"));
}

TEST(OptimGroups, SgdPerGroupOptionsMatchPyTorch) {
  // torch.optim.SGD([{'params': [a], 'momentum': 0.9}, {'params': [b], 'lr': 0.5,
  // 'nesterov': True, 'momentum': 0.5}], lr=0.1), three steps, float64 (PyTorch 1.13).
  const Tensor a = f64({1.0, -2.0, 3.0}), b = f64({0.5, 0.25});
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a}, std::make_unique<SGDOptions>(SGDOptions(0.1).momentum(0.9)));
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<SGDOptions>(
                                                  SGDOptions(0.5).momentum(0.5).nesterov(true)));
  SGD opt(groups, SGDOptions(0.1));
  run_steps(opt, a, b, 3);
  EXPECT_TRUE(tensors_close(a, f64({0.486, -0.972, 1.458}), kTorchTol, "group 0"));
  EXPECT_TRUE(tensors_close(b, f64({-0.27466416358947754, 0.03497833665460348}), kTorchTol,
                            "group 1"));
}

TEST(OptimGroups, TwoGroupsEqualTwoSeparateOptimizers) {
  // Groups share nothing but the step() call: each must follow exactly the trajectory of an
  // optimizer that holds only its parameters (AdamW, amsgrad in one group only).
  const Tensor a = f64({1.0, -2.0, 3.0}), b = f64({0.5, 0.25});
  const Tensor a2 = f64({1.0, -2.0, 3.0}), b2 = f64({0.5, 0.25});
  const AdamOptions first = AdamWOptions(0.05);
  const AdamOptions second = AdamOptions(0.02).amsgrad(true).weight_decay(0.3).eps(1e-6);
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  AdamW grouped(groups, first);
  grouped.add_param_group(OptimizerParamGroup({b}, second.clone()));
  AdamW alone_a(std::vector<Tensor>{a2}, first), alone_b(std::vector<Tensor>{b2}, second);
  for (int s = 0; s < 4; ++s) {
    grouped.zero_grad();
    alone_a.zero_grad();
    alone_b.zero_grad();
    backward_loss(a, b);
    backward_loss(a2, b2);
    grouped.step();
    alone_a.step();
    alone_b.step();
  }
  // The same operations in the same order: bit-identical.
  EXPECT_TRUE(tensors_close(a, a2, Tolerance{0.0, 0.0, 0.0}, "group 0"));
  EXPECT_TRUE(tensors_close(b, b2, Tolerance{0.0, 0.0, 0.0}, "group 1"));
}

TEST(OptimGroups, GroupsAreReadAndEditedThroughParamGroups) {
  const Tensor a = f64({1.0}), b = f64({2.0});
  std::vector<OptimizerParamGroup> groups{OptimizerParamGroup({a}),
                                          OptimizerParamGroup({b}, SGDOptions(0.5).clone())};
  SGD opt(groups, SGDOptions(0.1).momentum(0.9));
  ASSERT_EQ(opt.param_groups().size(), 2u);
  // A group without options takes a copy of the defaults; one with options keeps its own.
  EXPECT_EQ(static_cast<SGDOptions&>(opt.param_groups()[0].options()).momentum(), 0.9);
  EXPECT_EQ(static_cast<SGDOptions&>(opt.param_groups()[1].options()).momentum(), 0.0);
  EXPECT_EQ(opt.lrs(), (std::vector<double>{0.1, 0.5}));
  static_cast<SGDOptions&>(opt.param_groups()[1].options()).lr(0.25);
  opt.param_groups()[0].options().set_lr(0.125);
  EXPECT_EQ(opt.lrs(), (std::vector<double>{0.125, 0.25}));
  EXPECT_EQ(opt.params().size(), 2u);
  // The edited lr is the one step() uses: b -= 0.25 * 1.
  opt.zero_grad();
  sum(b).backward();
  opt.step();
  EXPECT_DOUBLE_EQ(b.item(), 1.75);
  // Changing the defaults' copy in group 0 leaves the defaults alone.
  EXPECT_EQ(opt.options().lr(), 0.1);
}

TEST(OptimGroups, StateDictCarriesEveryGroupsLr) {
  const Tensor a = f64({1.0, 2.0}), b = f64({3.0});
  Adam opt(std::vector<OptimizerParamGroup>{OptimizerParamGroup({a}),
                                            OptimizerParamGroup({b}, AdamOptions(0.5).clone())},
           AdamOptions(0.1));
  run_steps(opt, a, b, 2);
  const nn::NamedTensors state = opt.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, t] : state)
    keys.push_back(k);
  // PyTorch numbers parameters across groups: b is parameter 1.
  EXPECT_EQ(keys, (std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                                            "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq",
                                            "param_groups.0.lr", "param_groups.1.lr"}));
  const Tensor a2 = f64({1.0, 2.0}), b2 = f64({3.0});
  Adam restored(std::vector<OptimizerParamGroup>{OptimizerParamGroup({a2}),
                                                 OptimizerParamGroup({b2})},
                AdamOptions(0.3));
  restored.load_state_dict(state);
  EXPECT_EQ(restored.lrs(), (std::vector<double>{0.1, 0.5}));
  // A state dict that lacks a group's lr, or names a group that does not exist, changes nothing.
  nn::NamedTensors missing, extra = state;
  for (const auto& [k, t] : state)
    if (k != "param_groups.1.lr") missing.emplace_back(k, t);
  extra.emplace_back("param_groups.2.lr", scalar_tensor(0.1, TensorOptions(kFloat64)));
  Adam fresh(std::vector<OptimizerParamGroup>{OptimizerParamGroup({f64({0.0, 0.0})}),
                                              OptimizerParamGroup({f64({0.0})})},
             AdamOptions(0.3));
  EXPECT_THROW(fresh.load_state_dict(missing), Error);
  EXPECT_THROW(fresh.load_state_dict(extra), Error);
  EXPECT_EQ(fresh.lrs(), (std::vector<double>{0.3, 0.3}));
  EXPECT_TRUE(fresh.state_dict().size() == 2u);  // still only the two lrs: no state was loaded
}

TEST(OptimGroups, SchedulersScaleEachGroupFromItsOwnBase) {
  const Tensor a = f64({1.0}), b = f64({2.0});
  SGD opt(std::vector<OptimizerParamGroup>{OptimizerParamGroup({a}),
                                           OptimizerParamGroup({b}, SGDOptions(0.4).clone())},
          SGDOptions(0.1));
  StepLR step_lr(opt, 2, 0.5);
  EXPECT_EQ(step_lr.base_lrs(), (std::vector<double>{0.1, 0.4}));
  step_lr.step();
  step_lr.step();
  EXPECT_EQ(step_lr.get_last_lrs(), (std::vector<double>{0.05, 0.2}));

  SGD opt2(std::vector<OptimizerParamGroup>{OptimizerParamGroup({f64({1.0})}),
                                            OptimizerParamGroup({f64({1.0})},
                                                                SGDOptions(0.02).clone())},
           SGDOptions(1.0));
  // LinearLR warm-up from a quarter: each group starts at a quarter of its own lr.
  LinearLR warmup(opt2, 0.25, 1.0, 4);
  EXPECT_EQ(opt2.lrs(), (std::vector<double>{0.25, 0.005}));

  SGD opt3(std::vector<OptimizerParamGroup>{OptimizerParamGroup({f64({1.0})}),
                                            OptimizerParamGroup({f64({1.0})},
                                                                SGDOptions(0.02).clone())},
           SGDOptions(1.0));
  // ReduceLROnPlateau reduces every group, each no lower than min_lr.
  ReduceLROnPlateau plateau(opt3, ReduceLROnPlateauOptions().patience(0).factor(0.5).min_lr(0.015));
  plateau.step(1.0);
  plateau.step(2.0);  // worse: one bad epoch > patience 0
  EXPECT_EQ(opt3.lrs(), (std::vector<double>{0.5, 0.015}));
}

TEST(OptimGroups, BadGroupsAreRefusedAndNothingChanges) {
  const Tensor a = f64({1.0}), b = f64({2.0});
  SGD opt(std::vector<Tensor>{a}, SGDOptions(0.1));
  // A parameter already held by another group.
  try {
    opt.add_param_group(OptimizerParamGroup({b, a}));
    ADD_FAILURE() << "a parameter in two groups was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("param group 1: parameter 1 is already in the optimizer"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(opt.param_groups().size(), 1u);
  EXPECT_EQ(opt.params().size(), 1u);
  // Options of another optimizer's type.
  try {
    opt.add_param_group(OptimizerParamGroup({b}, AdamOptions(0.1).clone()));
    ADD_FAILURE() << "AdamOptions were accepted by SGD";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SGD: param group 1 has options of another optimizer"),
              std::string::npos)
        << e.what();
  }
  // Bad values in a group's own options; an empty group.
  EXPECT_THROW(opt.add_param_group(OptimizerParamGroup({b}, SGDOptions(-1.0).clone())), Error);
  EXPECT_THROW(opt.add_param_group(OptimizerParamGroup(std::vector<Tensor>{})), Error);
  EXPECT_EQ(opt.param_groups().size(), 1u);
  // set_lrs needs one finite, non-negative lr per group.
  EXPECT_THROW(opt.set_lrs({0.1, 0.2}), Error);
  EXPECT_THROW(opt.set_lrs({-0.1}), Error);
  EXPECT_EQ(opt.lr(), 0.1);
  // An lr made negative through param_groups() is caught by step(), before anything moves.
  opt.param_groups()[0].options().set_lr(-0.5);
  sum(a).backward();
  try {
    opt.step();
    ADD_FAILURE() << "a negative lr was stepped with";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SGD (param group 0): lr=-0.5"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a.item(), 1.0);
  // A group with no options of its own, read before it was added.
  EXPECT_THROW(OptimizerParamGroup({b}).options(), Error);
}

}  // namespace
}  // namespace tgrad
