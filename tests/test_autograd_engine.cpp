// The tape engine under stress: in-place writes after forward (version counters), double
// backward, threads sharing parameters, graphs of a million nodes, gradients that must not share
// storage, parameters moved between forward and backward, and sizes that cannot exist.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

// ---- version counters ----

TEST(AutogradVersions, WritingASavedInputAfterForwardIsAnErrorNamingTheOp) {
  const Tensor w = randn({3}, kFloat64).requires_grad_(true);
  Tensor x = randn({3}, kFloat64);
  const Tensor loss = sum(w * x);
  x.fill_(0.0);  // mul saved x to compute w's gradient
  const std::string e = error_of([&] { loss.backward(); });
  EXPECT_TRUE(contains(e, "saved by 'mul'")) << e;
  EXPECT_TRUE(contains(e, "modified by an in-place operation")) << e;
  EXPECT_FALSE(w.grad().defined());  // nothing half-done
}

TEST(AutogradVersions, WritingASavedOutputIsCaughtToo) {
  const Tensor w = randn({4}, kFloat64).requires_grad_(true);
  const Tensor y = exp(w);
  const Tensor loss = sum(y);
  {
    NoGradGuard no_grad;  // in grad mode the write itself is refused (y requires grad)
    y.detach().copy_(zeros({4}, kFloat64));
  }
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "saved by 'exp'"));
}

TEST(AutogradVersions, AnOptimizerStepBetweenForwardAndBackwardIsCaught) {
  nn::Linear lin(3, 2);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(0.1));
  const Tensor x = randn({4, 3});
  const Tensor loss = sum(lin(x) * lin(x));
  sum(lin(x)).backward();
  opt.step();  // writes weight in place; the first graph saved it
  EXPECT_TRUE(contains(error_of([&] { loss.backward(); }), "modified by an in-place operation"));
}

TEST(AutogradVersions, InPlaceWritesIntoTensorsThatRequireGradAreRefusedInGradMode) {
  const Tensor w = randn({2, 3}).requires_grad_(true);
  Tensor view = w.reshape({6});  // recorded: a view of a leaf that requires grad
  EXPECT_TRUE(contains(error_of([&] { view.fill_(1.0); }), "does not record in-place writes"));
  Tensor rows = w.narrow(0, 0, 1);
  EXPECT_TRUE(contains(error_of([&] { rows.zero_(); }), "'narrow'"));
  Tensor leaf = w;
  EXPECT_TRUE(contains(error_of([&] { leaf.fill_(0.0); }), "leaf tensor that requires grad"));
  // Nothing was written.
  EXPECT_EQ(w.version(), 0u);
  // A detached alias may be written, as in PyTorch, and the write is counted on the shared
  // counter.
  Tensor d = w.detach();
  d.fill_(2.0);
  EXPECT_EQ(w.version(), 1u);
  EXPECT_EQ(w.to_vector<double>()[0], 2.0);
}

TEST(AutogradVersions, ViewsShareTheCounter) {
  Tensor t = zeros({4, 2});
  Tensor v = t.reshape({8});
  v.fill_(1.0);
  EXPECT_EQ(t.version(), 1u);
  t.narrow(0, 1, 2).fill_(3.0);
  EXPECT_EQ(v.version(), 2u);
}

// ---- double backward ----

TEST(AutogradDoubleBackward, SecondDerivativeOfACubic) {
  const Tensor x = from_vector<double>({1.0, -2.0, 0.5}, {3}).requires_grad_(true);
  const Tensor y = sum(pow(x, 3.0));
  const Tensor g = grad({y}, {x}, {}, std::nullopt, true)[0];  // 3x^2, with history
  EXPECT_TRUE(g.requires_grad());
  sum(g).backward();  // d/dx sum(3x^2) = 6x
  EXPECT_TRUE(
      tensors_close(x.grad(), from_vector<double>({6.0, -12.0, 3.0}, {3}), kFloat64Tight, "6x"));
}

TEST(AutogradDoubleBackward, GradientPenaltyThroughAConvolution) {
  // WGAN-GP style: the gradient of ||d out / d x||^2 with respect to the weights.
  Generator gen(5);
  const Tensor x = randn({2, 3, 5, 5}, gen, kFloat64).requires_grad_(true);
  const Tensor w = randn({4, 3, 3, 3}, gen, kFloat64).requires_grad_(true);
  GradcheckFn penalty = [&](const std::vector<Tensor>& in) {
    // gradcheck evaluates without grad mode for its finite differences; the penalty needs the
    // graph of the inner gradient either way.
    EnableGradGuard on;
    const Tensor xi = in[0].requires_grad() ? in[0] : in[0].detach().requires_grad_(true);
    const Tensor out = sum(tanh(conv2d(xi, in[1], Tensor(), Conv2dFuncOptions().padding(1))));
    const Tensor gx = grad({out}, {xi}, {}, std::nullopt, true)[0];
    return sum(gx * gx);
  };
  GradcheckOptions o;
  o.fast_mode = true;
  o.config = "gradient penalty";
  const GradcheckResult r = gradcheck(penalty, {x, w}, o);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(AutogradDoubleBackward, BackwardOfAGradientMadeWithoutCreateGraphNamesTheCause) {
  const Tensor x = randn({3}, kFloat64).requires_grad_(true);
  const Tensor g = grad({sum(x * x)}, {x})[0];
  const std::string e = error_of([&] { sum(g).backward(); });
  EXPECT_TRUE(contains(e, "create_graph=true")) << e;
}

// ---- threads ----

// Two threads (and then eight) run forward and backward through one shared model; every
// contribution reaches .grad. The sum over threads is added in the order they finish, so it is
// compared with the one-thread sum to float64 rounding of a handful of additions.
TEST(AutogradThreads, ConcurrentBackwardThroughSharedLeavesSumsEveryContribution) {
  Generator gen(6);
  nn::Sequential model({std::make_shared<nn::LinearImpl>(8, 16), std::make_shared<nn::TanhImpl>(),
                        std::make_shared<nn::LinearImpl>(16, 1)});
  model->to(kFloat64);
  constexpr int kThreads = 8, kSteps = 20;
  std::vector<Tensor> batches;
  for (int t = 0; t < kThreads; ++t)
    batches.push_back(randn({4, 8}, gen, kFloat64));
  auto run = [&](int t) {
    for (int s = 0; s < kSteps; ++s)
      sum(model(batches[static_cast<size_t>(t)])).backward();
  };
  for (int t = 0; t < kThreads; ++t)
    run(t);
  std::vector<Tensor> expected;
  for (const Tensor& p : model->parameters())
    expected.push_back(p.grad().clone());
  model->zero_grad();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(run, t);
  for (auto& th : threads)
    th.join();
  const std::vector<Tensor> params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined());
    EXPECT_TRUE(tensors_close(params[i].grad(), expected[i], Tolerance{1e-12, 1e-12, 0.0},
                              "parameter " + std::to_string(i)));
  }
}

// ---- long graphs ----

TEST(AutogradLongGraphs, AMillionNodeChainRunsBackwardAndFreesWithoutRecursion) {
  const Tensor x = scalar_tensor(1.0, kFloat64).requires_grad_(true);
  Tensor y = x;
  constexpr int kNodes = 1000000;
  for (int i = 0; i < kNodes; ++i)
    y = y * 1.0;  // one node each
  y.backward();
  EXPECT_EQ(x.grad().item(), 1.0);
  // A second chain is dropped without backward: freeing it must not recurse either.
  Tensor z = x;
  for (int i = 0; i < kNodes; ++i)
    z = tanh(z);
  z = Tensor();
  SUCCEED();
}

TEST(AutogradLongGraphs, ARecurrentLoopOfAHundredThousandStepsAccumulatesItsLoss) {
  const Tensor w = scalar_tensor(0.5, kFloat64).requires_grad_(true);
  Tensor h = scalar_tensor(0.1, kFloat64);
  Tensor loss = scalar_tensor(0.0, kFloat64);
  for (int i = 0; i < 100000; ++i) {
    h = tanh(h * w + 0.1);
    loss = loss + h;
  }
  loss.backward();
  EXPECT_TRUE(std::isfinite(w.grad().item()));
  EXPECT_NE(w.grad().item(), 0.0);
}

// ---- .grad storage, moved parameters, set_grad ----

TEST(AutogradGrads, EveryLeafGetsGradientStorageOfItsOwn) {
  const Tensor a = randn({3}).requires_grad_(true);
  const Tensor b = randn({3}).requires_grad_(true);
  sum((a + b) * 2.0).backward();
  EXPECT_NE(a.grad().impl()->storage, b.grad().impl()->storage);
  // Scaling one in place (as gradient clipping does) leaves the other alone.
  Tensor ga = a.grad();
  {
    NoGradGuard no_grad;
    ga.fill_(0.0);
  }
  EXPECT_EQ(b.grad().to_vector<float>()[0], 2.0f);
}

TEST(AutogradGrads, MovingAModuleBetweenForwardAndBackwardIsRefusedClearly) {
  nn::Linear lin(3, 2);
  const Tensor loss = sum(lin(randn({4, 3})));
  lin->to(kFloat64);
  const std::string e = error_of([&] { loss.backward(); });
  EXPECT_TRUE(contains(e, "in-place") || contains(e, "moved with Module::to()")) << e;
  EXPECT_FALSE(lin->weight.grad().defined());
  // A leaf that no node saved (the bias) is caught where its gradient arrives.
  const Tensor b = randn({3}).requires_grad_(true);
  const Tensor loss2 = sum(b + 1.0);
  b.set_data(b.detach().to(kFloat64));
  EXPECT_TRUE(contains(error_of([&] { loss2.backward(); }), "moved with Module::to()"));
  EXPECT_FALSE(b.grad().defined());
}

TEST(AutogradGrads, ATensorCannotBeItsOwnGradient) {
  const Tensor w = randn({3}).requires_grad_(true);
  EXPECT_TRUE(contains(error_of([&] { w.set_grad(w); }), "its own gradient"));
  EXPECT_TRUE(contains(error_of([&] { w.set_grad(w.detach()); }), "its own gradient"));
  EXPECT_FALSE(w.grad().defined());
  w.set_grad(w.detach().clone());
  EXPECT_TRUE(w.grad().defined());
}

TEST(AutogradGrads, InferenceModeRecordsNothing) {
  const Tensor w = randn({3}).requires_grad_(true);
  {
    InferenceMode guard;
    EXPECT_TRUE(is_inference_mode_enabled());
    EXPECT_FALSE((w * 2.0).requires_grad());
  }
  EXPECT_FALSE(is_inference_mode_enabled());
  EXPECT_TRUE((w * 2.0).requires_grad());
}

// ---- sizes that cannot exist ----

TEST(Sizes, HugeFactoriesAreErrorsBeforeAnyAllocation) {
  const int64_t two40 = int64_t{1} << 40;
  EXPECT_TRUE(contains(error_of([&] { randn({two40}); }), "out of memory"));
  EXPECT_TRUE(contains(error_of([&] { rand({two40, 4}); }), "out of memory"));
  EXPECT_TRUE(contains(error_of([] { arange(1e12); }), "out of memory"));
  EXPECT_TRUE(contains(error_of([] { arange(0.0, 1e300); }), "more than a tensor can hold"));
  EXPECT_TRUE(contains(error_of([] { arange(0.0, 1.0, 1e-300); }), "more than a tensor can hold"));
  EXPECT_TRUE(contains(error_of([] { arange(-1e308, 1e308, 1e-10); }), "arange"));
}

TEST(Sizes, EmptyShapesWhoseOtherSizesOverflowAreRefusedAlike) {
  const int64_t two40 = int64_t{1} << 40;
  const std::string first = error_of([&] { zeros({0, two40, two40}); });
  const std::string last = error_of([&] { zeros({two40, two40, 0}); });
  EXPECT_TRUE(contains(first, "multiply past int64")) << first;
  EXPECT_TRUE(contains(last, "multiply past int64")) << last;
  EXPECT_EQ(zeros({0, two40}).numel(), 0);  // fine: the non-zero sizes fit
}

TEST(Sizes, OutputSizeHelperRefusesOverflowInsteadOfReturningGarbage) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_TRUE(
      contains(error_of([&] { conv_transpose_out_size(big, 3, 4, 0, 1, 0); }), "leaves int64"));
  EXPECT_EQ(conv_transpose_out_size(4, 3, 2, 1, 1, 1), 8);  // 3*2 - 2 + 2 + 1 + 1
}

TEST(Int64, IndexTensorsHoldExactValuesAndArithmeticRefusesThem) {
  const Tensor i = from_vector<int64_t>({0, (int64_t{1} << 53) + 1, -7}, {3});
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.to_vector<int64_t>()[1], (int64_t{1} << 53) + 1);
  EXPECT_EQ(i.narrow(0, 1, 1).item<int64_t>(), (int64_t{1} << 53) + 1);  // exact, not via double
  EXPECT_NE(
      error_of([&] { i.data_ptr<float>(); }).find("asked for float32 but the tensor is int64"),
      std::string::npos);
  EXPECT_EQ(i.to(kFloat64).to_vector<double>()[2], -7.0);
  EXPECT_TRUE(contains(error_of([&] { exp(i); }), "exp: argument 'input' is int64"));
  EXPECT_TRUE(contains(error_of([&] { add(i, i); }), "add: argument 'self' is int64"));
  EXPECT_TRUE(contains(error_of([&] { sum(i); }), "sum: argument 'input' is int64"));
  std::ostringstream os;
  os << i;
  EXPECT_TRUE(contains(os.str(), "-7")) << os.str();
  EXPECT_TRUE(contains(os.str(), "int64")) << os.str();
}

}  // namespace
}  // namespace tgrad::testing
