// Training utilities against PyTorch's numbers: gradient clipping, zero_grad without freeing,
// LinearLR warm-up and ReduceLROnPlateau, and the DataLoader's batching, shuffling and
// drop_last. Expected values: torch.nn.utils.clip_grad_norm_/clip_grad_value_ and
// torch.optim.lr_scheduler in float64 on the same inputs (PyTorch 1.13, Debian's python3-torch).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "core/ops.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

// Two parameters with gradients a = (3, -4, 1) and b = ((0.5, -2), (6, 0.25)).
std::vector<Tensor> params_with_grads() {
  Tensor a = zeros({3}, kFloat64).requires_grad_(true);
  Tensor b = zeros({2, 2}, kFloat64).requires_grad_(true);
  a.set_grad(from_vector<double>({3.0, -4.0, 1.0}, {3}));
  b.set_grad(from_vector<double>({0.5, -2.0, 6.0, 0.25}, {2, 2}));
  return {a, b};
}

std::vector<double> all_grads(const std::vector<Tensor>& ps) {
  std::vector<double> out;
  for (const Tensor& p : ps) {
    for (double v : p.grad().to_vector<double>())
      out.push_back(v);
  }
  return out;
}

// PyTorch sums |g|^p in another order: a few ulps.
void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-14 * std::max(1.0, std::abs(want[i]))) << "element " << i;
}

TEST(TrainingUtils, ClipGradNormMatchesPyTorchForEveryNormType) {
  struct Case {
    double norm_type, total;
    std::vector<double> grads;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {2.0,
       8.143248737451165,
       {0.9210082266674409, -1.2280109688899212, 0.3070027422224803, 0.15350137111124015,
        -0.6140054844449606, 1.8420164533348817, 0.07675068555562008}},
      {inf,
       6.0,
       {1.2499997916667014, -1.6666663888889353, 0.4166665972222338, 0.2083332986111169,
        -0.8333331944444676, 2.4999995833334028, 0.10416664930555845}},
      {1.5,
       10.121337102156877,
       {0.7410087405737128, -0.9880116540982837, 0.24700291352457093, 0.12350145676228547,
        -0.49400582704914187, 1.4820174811474256, 0.06175072838114273}},
  };
  for (const Case& c : cases) {
    const std::vector<Tensor> ps = params_with_grads();
    const double total = nn::utils::clip_grad_norm_(ps, 2.5, c.norm_type);
    EXPECT_NEAR(total, c.total, 1e-13 * c.total) << "norm_type " << c.norm_type;
    expect_near_all(all_grads(ps), c.grads);
  }
  // Under the cap, gradients are kept (multiplied by exactly 1).
  const std::vector<Tensor> ps = params_with_grads();
  nn::utils::clip_grad_norm_(ps, 100.0);
  expect_near_all(all_grads(ps), {3.0, -4.0, 1.0, 0.5, -2.0, 6.0, 0.25});
}

TEST(TrainingUtils, ClipGradValueClampsEachElement) {
  const std::vector<Tensor> ps = params_with_grads();
  nn::utils::clip_grad_value_(ps, 1.0);
  expect_near_all(all_grads(ps), {1.0, -1.0, 1.0, 0.5, -1.0, 1.0, 0.25});
}

TEST(TrainingUtils, ClippingChecksItsArgumentsAndChangesNothingOnError) {
  std::vector<Tensor> ps = params_with_grads();
  EXPECT_TRUE(contains(error_of([&] { nn::utils::clip_grad_norm_(ps, -1.0); }), "max_norm=-1"));
  EXPECT_TRUE(contains(error_of([&] { nn::utils::clip_grad_norm_(ps, 1.0, 0.0); }), "norm_type=0"));
  EXPECT_TRUE(contains(error_of([&] { nn::utils::clip_grad_value_(ps, -2.0); }), "clip_value=-2"));
  ps[0].set_grad(from_vector<double>({NAN, 1.0, 1.0}, {3}));
  EXPECT_TRUE(
      contains(error_of([&] { nn::utils::clip_grad_norm_(ps, 1.0, 2.0, true); }), "not finite"));
  EXPECT_EQ(ps[1].grad().to_vector<double>()[2], 6.0);  // untouched
}

TEST(TrainingUtils, ZeroGradCanKeepTheTensors) {
  nn::Linear lin(3, 2);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(0.1));
  sum(lin(randn({4, 3}))).backward();
  const Tensor before = lin->weight.grad();
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(lin->weight.grad().defined());
  EXPECT_EQ(lin->weight.grad().impl(), before.impl());  // the same tensor, now zeros
  EXPECT_EQ(sum(abs(lin->weight.grad())).item(), 0.0);
  lin->zero_grad();  // LibTorch's default: to none
  EXPECT_FALSE(lin->weight.grad().defined());
}

TEST(TrainingUtils, LinearLRWarmsUpAsPyTorch) {
  nn::Linear lin(2, 2);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(0.5));
  optim::LinearLR warmup(opt, 0.25, 1.0, 4);
  std::vector<double> lrs = {opt.lr()};
  for (int i = 0; i < 6; ++i) {
    warmup.step();
    lrs.push_back(opt.lr());
  }
  const std::vector<double> torch_lrs = {0.125, 0.21875, 0.3125, 0.40625, 0.5, 0.5, 0.5};
  for (size_t i = 0; i < lrs.size(); ++i)
    EXPECT_NEAR(lrs[i], torch_lrs[i], 1e-15) << "epoch " << i;
  EXPECT_TRUE(contains(error_of([&] { optim::LinearLR(opt, 0.0); }), "start_factor=0"));
  EXPECT_TRUE(contains(error_of([&] { optim::LinearLR(opt, 0.5, 1.0, 0); }), "total_iters=0"));
}

TEST(TrainingUtils, ReduceLROnPlateauFollowsTheMetricAsPyTorch) {
  nn::Linear lin(2, 2);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(1.0));
  optim::ReduceLROnPlateau plateau(
      opt,
      optim::ReduceLROnPlateauOptions().factor(0.5).patience(2).threshold(0.1).cooldown(1).min_lr(
          0.1));
  const std::vector<double> metrics = {10, 9, 8.5, 8.4, 8.3, 8.2, 8.1, 5, 5, 5, 5, 5, 5, 5, 5, 5};
  const std::vector<double> torch_lrs = {1.0, 1.0, 1.0,  1.0,  1.0,  0.5,  0.5,   0.5,
                                         0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.125, 0.125};
  for (size_t i = 0; i < metrics.size(); ++i) {
    plateau.step(metrics[i]);
    EXPECT_EQ(opt.lr(), torch_lrs[i]) << "step " << i;
  }
  EXPECT_TRUE(contains(error_of([&] {
                         optim::ReduceLROnPlateau(opt,
                                                  optim::ReduceLROnPlateauOptions().factor(1.0));
                       }),
                       "factor=1"));
  EXPECT_TRUE(contains(error_of([&] { plateau.step(NAN); }), "NaN"));
}

TEST(TrainingUtils, DataLoaderBatchesShufflesAndDropsTheLastBatch) {
  const Tensor x = arange(10.0, kFloat64).reshape({5, 2});
  const Tensor y = arange(5.0, kFloat64);
  data::DataLoader ordered(data::TensorDataset({x, y}), data::DataLoaderOptions().batch_size(2));
  EXPECT_EQ(ordered.size(), 3);
  std::vector<double> seen;
  for (const std::vector<Tensor>& batch : ordered) {
    ASSERT_EQ(batch.size(), 2u);
    EXPECT_EQ(batch[0].size(0), batch[1].size(0));
    for (double v : batch[1].to_vector<double>())
      seen.push_back(v);
  }
  EXPECT_EQ(seen, (std::vector<double>{0, 1, 2, 3, 4}));  // in order, last batch of 1

  data::DataLoader shuffled(
      data::TensorDataset({x, y}),
      data::DataLoaderOptions().batch_size(2).shuffle(true).drop_last(true).seed(3));
  EXPECT_EQ(shuffled.size(), 2);
  std::vector<std::vector<double>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<double> order;
    for (const std::vector<Tensor>& batch : shuffled) {
      const std::vector<double> xs = batch[0].to_vector<double>(),
                                ys = batch[1].to_vector<double>();
      for (size_t r = 0; r < ys.size(); ++r) {
        EXPECT_EQ(xs[2 * r], 2 * ys[r]);  // rows of x and y stay paired
        order.push_back(ys[r]);
      }
    }
    EXPECT_EQ(order.size(), 4u);
    EXPECT_EQ(std::set<double>(order.begin(), order.end()).size(), 4u);  // no repeats
    epochs.push_back(order);
  }
  EXPECT_TRUE(epochs[0] != epochs[1] || epochs[1] != epochs[2]);  // reshuffled per epoch
  // The same seed gives the same epochs.
  data::DataLoader again(
      data::TensorDataset({x, y}),
      data::DataLoaderOptions().batch_size(2).shuffle(true).drop_last(true).seed(3));
  std::vector<double> first;
  for (const std::vector<Tensor>& batch : again) {
    for (double v : batch[1].to_vector<double>())
      first.push_back(v);
  }
  EXPECT_EQ(first, epochs[0]);
}

TEST(TrainingUtils, DataLoaderRefusesBadDatasetsAndOptions) {
  EXPECT_TRUE(contains(error_of([] {
                         data::TensorDataset({zeros({3, 2}), zeros({4})});
                       }),
                       "tensor 1 has 4 rows but tensor 0 has 3"));
  EXPECT_TRUE(contains(error_of([] { data::TensorDataset({}); }), "no tensors"));
  EXPECT_TRUE(contains(error_of([] {
                         data::DataLoader(data::TensorDataset({zeros({3})}),
                                          data::DataLoaderOptions().batch_size(0));
                       }),
                       "batch_size=0"));
}

}  // namespace
}  // namespace tgrad::testing
