// Convolution, normalization and dropout modules, and module buffers: values, gradients and
// running statistics against PyTorch (tests/data/torch_nn_layer_cases.json, written by
// tests/python/make_nn_layer_cases.py), finite differences, buffers in state dicts and
// checkpoints, and bad options.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

// PyTorch computes these statistics and sums in another order: float64 rounding of sums of a
// few dozen terms.
constexpr Tolerance kVsTorch{1e-12, 1e-10, 0.0};

const nlohmann::json& cases() {
  static const nlohmann::json all = [] {
    const std::string path = std::string(TGRAD_TEST_DATA_DIR) + "/torch_nn_layer_cases.json";
    std::ifstream in(path);
    if (!in) ADD_FAILURE() << "cannot open " << path;
    return nlohmann::json::parse(in);
  }();
  return all;
}

Tensor load(const nlohmann::json& j) {
  return from_vector(j.at("data").get<std::vector<double>>(), j.at("shape").get<Shape>());
}

void set(const Tensor& target, const Tensor& value) {
  NoGradGuard no_grad;
  Tensor t = target;
  t.copy_(value);
}

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

TEST(NnLayers, BatchNorm2dTrainsAndEvaluatesAsPyTorch) {
  const nlohmann::json& j = cases().at("batchnorm2d");
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(3).momentum(0.2));
  bn->to(kFloat64);
  set(bn->weight, from_vector<double>({1.5, -0.5, 2.0}, {3}));
  set(bn->bias, from_vector<double>({0.1, 0.2, -0.3}, {3}));
  const Tensor x1 = load(j.at("x1")).requires_grad_(true);
  const Tensor y1 = bn(x1);
  EXPECT_TRUE(tensors_close(y1, load(j.at("y1")), kVsTorch, "train y"));
  y1.backward(sin((arange(36.0, kFloat64).reshape({2, 3, 2, 3}) * 0.21 + 0.3)) * 2.0);
  EXPECT_TRUE(tensors_close(x1.grad(), load(j.at("dx1")), kVsTorch, "dx"));
  EXPECT_TRUE(tensors_close(bn->weight.grad(), load(j.at("dweight")), kVsTorch, "dweight"));
  EXPECT_TRUE(tensors_close(bn->bias.grad(), load(j.at("dbias")), kVsTorch, "dbias"));
  bn(load(j.at("x2")));
  EXPECT_TRUE(tensors_close(bn->running_mean, load(j.at("running_mean")), kVsTorch, "mean"));
  EXPECT_TRUE(tensors_close(bn->running_var, load(j.at("running_var")), kVsTorch, "var"));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);  // to(kFloat64) kept the counter int64
  bn->eval();
  EXPECT_TRUE(tensors_close(bn(load(j.at("x2"))), load(j.at("y_eval")), kVsTorch, "eval"));
  // The state dict has PyTorch's keys, in PyTorch's order.
  std::vector<std::string> keys;
  for (const auto& [name, t] : bn->state_dict())
    keys.push_back(name);
  EXPECT_EQ(keys, j.at("state_dict_keys").get<std::vector<std::string>>());
  EXPECT_EQ(bn->parameters().size(), 2u);
  EXPECT_EQ(bn->buffers().size(), 3u);
}

TEST(NnLayers, BatchNorm1dWithoutMomentumKeepsTheCumulativeAverage) {
  const nlohmann::json& j = cases().at("batchnorm1d_cumulative");
  nn::BatchNorm1d bn(nn::BatchNorm1dOptions(4).momentum(std::nullopt));
  bn->to(kFloat64);
  bn(load(j.at("a")));
  EXPECT_TRUE(tensors_close(bn(load(j.at("b"))), load(j.at("y_b")), kVsTorch, "y"));
  EXPECT_TRUE(tensors_close(bn->running_mean, load(j.at("running_mean")), kVsTorch, "mean"));
  EXPECT_TRUE(tensors_close(bn->running_var, load(j.at("running_var")), kVsTorch, "var"));
}

TEST(NnLayers, GroupLayerAndInstanceNormMatchPyTorch) {
  const nlohmann::json& c = cases();
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4));
  gn->to(kFloat64);
  set(gn->weight, from_vector<double>({1.0, 2.0, -1.0, 0.5}, {4}));
  set(gn->bias, from_vector<double>({0.0, 0.1, 0.2, 0.3}, {4}));
  EXPECT_TRUE(tensors_close(gn(load(c.at("groupnorm").at("x"))), load(c.at("groupnorm").at("y")),
                            kVsTorch, "GroupNorm"));
  nn::LayerNorm ln(nn::LayerNormOptions({3, 2}));
  ln->to(kFloat64);
  set(ln->weight, load(c.at("layernorm").at("weight")));
  set(ln->bias, load(c.at("layernorm").at("bias")));
  EXPECT_TRUE(tensors_close(ln(load(c.at("layernorm").at("x"))), load(c.at("layernorm").at("y")),
                            kVsTorch, "LayerNorm"));
  // LibTorch's defaults: no affine, no running statistics (unlike BatchNorm's).
  EXPECT_FALSE(nn::InstanceNormOptions(2).affine());
  EXPECT_FALSE(nn::InstanceNormOptions(2).track_running_stats());
  nn::InstanceNorm2d in(nn::InstanceNormOptions(2).affine(true));
  in->to(kFloat64);
  set(in->weight, from_vector<double>({0.7, -1.2}, {2}));
  set(in->bias, from_vector<double>({0.5, 0.0}, {2}));
  EXPECT_TRUE(tensors_close(in(load(c.at("instancenorm2d").at("x"))),
                            load(c.at("instancenorm2d").at("y")), kVsTorch, "InstanceNorm2d"));
}

TEST(NnLayers, NormalizationGradientsPassFiniteDifferencesTwice) {
  Generator gen(8);
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(2));
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4));
  nn::LayerNorm ln(nn::LayerNormOptions({5}));
  for (nn::Module* m : std::vector<nn::Module*>{bn.get(), gn.get(), ln.get()})
    m->to(kFloat64);
  const std::vector<std::pair<nn::Module*, Shape>> runs = {
      {bn.get(), {3, 2, 2, 2}}, {gn.get(), {2, 4, 3}}, {ln.get(), {2, 3, 5}}};
  for (const auto& [m, shape] : runs) {
    GradcheckFn f = [m = m](const std::vector<Tensor>& in) { return m->forward(in[0]); };
    const std::vector<Tensor> in = {randn(shape, gen, kFloat64).requires_grad_(true)};
    GradcheckOptions o;
    o.config = m->type_name();
    const GradcheckResult r1 = gradcheck(f, in, o);
    EXPECT_TRUE(r1.ok) << r1.report;
    o.fast_mode = true;
    const GradcheckResult r2 = gradgradcheck(f, in, o);
    EXPECT_TRUE(r2.ok) << r2.report;
  }
}

TEST(NnLayers, ConvModulesPadAsPyTorch) {
  for (const char* mode : {"reflect", "replicate"}) {
    const nlohmann::json& j = cases().at(std::string("conv2d_") + mode);
    nn::Conv2dOptions o(2, 3, {3, 2});
    o.padding({1, 2});
    if (std::string(mode) == "reflect") {
      o.padding_mode(kReflect);
    } else {
      o.padding_mode(kReplicate);
    }
    nn::Conv2d conv(o);
    conv->to(kFloat64);
    set(conv->weight, load(j.at("weight")));
    set(conv->bias, load(j.at("bias")));
    EXPECT_TRUE(tensors_close(conv(load(j.at("x"))), load(j.at("y")), kVsTorch, mode));
  }
  // Zero padding goes straight to conv2d; the module's weight has PyTorch's layout and bounds.
  Generator gen(3);
  nn::Conv1d c1(nn::Conv1dOptions(4, 6, 3).stride(2).padding(1).groups(2), gen);
  EXPECT_EQ(c1->weight.shape(), (Shape{6, 2, 3}));
  const double bound = 1.0 / std::sqrt(6.0);  // fan_in = C_in/groups * k = 6
  for (float v : c1->bias.to_vector<float>())
    EXPECT_LE(std::abs(v), bound);
  const Tensor x = randn({2, 4, 9}, gen);
  EXPECT_TRUE(tensors_close(
      c1(x), conv1d(x, c1->weight, c1->bias, Conv1dFuncOptions().stride(2).padding(1).groups(2)),
      Tolerance{}, "Conv1d module = conv1d"));
  nn::Conv2d same(nn::Conv2dOptions(3, 2, 4).padding(kSame));
  EXPECT_EQ(same(randn({1, 3, 7, 6})).shape(), (Shape{1, 2, 7, 6}));
}

TEST(NnLayers, DropoutZeroesAndScalesWhileTrainingOnly) {
  manual_seed(5);
  nn::Dropout drop(0.25);
  const Tensor x = ones({20000}).requires_grad_(true);
  const Tensor y = drop(x);
  const std::vector<float> v = y.to_vector<float>();
  int64_t zeros_seen = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || std::abs(e - 1.0f / 0.75f) < 1e-6f) << e;
    zeros_seen += e == 0.0f;
  }
  // 20000 draws of p = 0.25: the count of zeros is 5000 +- 4.3 standard deviations (sd 61).
  EXPECT_NEAR(static_cast<double>(zeros_seen), 5000.0, 265.0);
  sum(y).backward();
  EXPECT_TRUE(tensors_close(x.grad(), y.detach(), Tolerance{}, "gradient is the scaled mask"));
  drop->eval();
  EXPECT_TRUE(equal(drop(x), x.detach()));
  nn::Dropout2d drop2d(0.5);
  const std::vector<float> m = drop2d(ones({4, 8, 3, 3})).to_vector<float>();
  for (size_t c = 0; c < 32; ++c) {
    for (size_t k = 1; k < 9; ++k)
      EXPECT_EQ(m[c * 9 + k], m[c * 9]) << "channel " << c;  // whole channels
  }
}

TEST(NnLayers, BuffersTravelThroughCheckpointsAndMoves) {
  nn::Sequential model({std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(1, 2, 3).padding(1)),
                        std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(2))});
  model(randn({4, 1, 5, 5}));  // one training step moves the running statistics
  const auto path = std::filesystem::temp_directory_path() / "tgrad_nn_layers_bn.safetensors";
  nn::save_module(model, path.string());
  nn::Sequential fresh({std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(1, 2, 3).padding(1)),
                        std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(2))});
  nn::load_module(fresh, path.string());
  std::filesystem::remove(path);
  const nn::NamedTensors a = model->state_dict(), b = fresh->state_dict();
  ASSERT_EQ(
      a.size(),
      7u);  // 0.weight 0.bias 1.weight 1.bias 1.running_mean 1.running_var 1.num_batches_tracked
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(equal(a[i].second, b[i].second)) << a[i].first;
  }
  EXPECT_EQ(b[6].first, "1.num_batches_tracked");
  EXPECT_EQ(b[6].second.item<int64_t>(), 1);
}

// The modules on CUDA against the CPU: forward, input gradient and parameter gradients.
TEST(NnLayersCuda, ModulesMatchTheCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(12);
  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::SequentialImpl>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(3, 8, 3).padding(1).padding_mode(kReflect)),
        std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(8)),
        std::make_shared<nn::LeakyReLUImpl>(0.2),
        std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(8, 8, 4).padding(kSame)),
        std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(2, 8)),
        std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({6})),
        std::make_shared<nn::InstanceNorm2dImpl>(nn::InstanceNormOptions(8).affine(true))});
  };
  auto cpu_model = make(), cuda_model = make();
  cpu_model->to(kFloat64);
  cuda_model->to(kFloat64);
  cuda_model->to(Device(kCUDA));
  const Tensor x = randn({2, 3, 6, 6}, gen, kFloat64);
  const Tensor xc = x.detach().requires_grad_(true), xg = x.cuda().requires_grad_(true);
  const Tensor yc = (*cpu_model)(xc), yg = (*cuda_model)(xg);
  EXPECT_TRUE(tensors_close(yg, yc, kFloat64Tight, "forward"));
  sum(yc * yc).backward();
  sum(yg * yg).backward();
  EXPECT_TRUE(tensors_close(xg.grad(), xc.grad(), kVsTorch, "dx"));
  const nn::NamedTensors pc = cpu_model->named_parameters(), pg = cuda_model->named_parameters();
  for (size_t i = 0; i < pc.size(); ++i)
    EXPECT_TRUE(tensors_close(pg[i].second.grad(), pc[i].second.grad(), kVsTorch, pc[i].first));
  const nn::NamedTensors bc = cpu_model->named_buffers(), bg = cuda_model->named_buffers();
  for (size_t i = 0; i < bc.size(); ++i)
    EXPECT_TRUE(tensors_close(bg[i].second, bc[i].second, kFloat64Tight, bc[i].first));
}

// PyTorch: ConvTranspose2d(2, 3, 3, stride=2, padding=1) maps (4, 5) to (7, 9) by the formula,
// and output_size=[8, 10] is reachable (output_padding 1, 1) while [9, 10] is not (valid sizes
// range from [7, 9] to [8, 10]).
TEST(NnLayers, ConvTransposeForwardWithOutputSize) {
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(2, 3, 3).stride(2).padding(1));
  const Tensor x = randn({1, 2, 4, 5});
  EXPECT_EQ(up(x).shape(), (Shape{1, 3, 7, 9}));
  const Tensor y = up->forward(x, {8, 10});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 8, 10}));
  EXPECT_TRUE(equal(
      y, conv_transpose2d(x, up->weight, up->bias,
                          ConvTranspose2dFuncOptions().stride(2).padding(1).output_padding(1))));
  EXPECT_EQ(up->forward(x, {1, 3, 7, 10}).shape(), (Shape{1, 3, 7, 10}));  // all dims given
  const std::string e = error_of([&] { up->forward(x, {9, 10}); });
  EXPECT_TRUE(contains(e, "valid sizes of dim 0 range from 7 to 8")) << e;
  EXPECT_TRUE(contains(error_of([&] { up->forward(x, {8}); }), "must list 2 spatial sizes or 4"));
}

TEST(NnLayers, UpsamplingModulesWrapTheOps) {
  const Tensor x = randn({1, 8, 3, 4});
  nn::Upsample nearest(nn::UpsampleOptions().scale_factor(std::vector<double>{2.0, 2.0}));
  EXPECT_TRUE(equal(nearest(x), interpolate(x, InterpolateFuncOptions().scale_factor(
                                                   std::vector<double>{2.0, 2.0}))));
  nn::Upsample bilinear(
      nn::UpsampleOptions().size(std::vector<int64_t>{5, 7}).mode(kBilinear).align_corners(true));
  EXPECT_EQ(bilinear(x).shape(), (Shape{1, 8, 5, 7}));
  nn::PixelShuffle shuffle(2);
  nn::PixelUnshuffle unshuffle(2);
  EXPECT_EQ(shuffle(x).shape(), (Shape{1, 2, 6, 8}));
  EXPECT_TRUE(equal(unshuffle(shuffle(x)), x));
  EXPECT_TRUE(contains(error_of([] { nn::Upsample(nn::UpsampleOptions()); }),
                       "exactly one of size and scale_factor"));
  EXPECT_TRUE(contains(error_of([] { nn::PixelShuffle(0); }), "upscale_factor=0"));
}

TEST(NnLayers, ModulesAndApplyWalkTheTreeOnce) {
  auto shared = std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(2, 2, 3));
  auto inner = std::make_shared<nn::SequentialImpl>(
      std::initializer_list<nn::ModulePtr>{shared, std::make_shared<nn::ReLUImpl>()});
  nn::Sequential model({inner, shared, std::make_shared<nn::TanhImpl>()});
  std::vector<std::string> names;
  for (const auto& [name, m] : model->named_modules())
    names.push_back(name);
  // PyTorch's named_modules() order without its first entry (the model itself, ""); the shared
  // conv appears once, under its first name.
  EXPECT_EQ(names, (std::vector<std::string>{"0", "0.0", "0.1", "2"}));
  EXPECT_EQ(model->modules().size(), 4u);
  std::vector<std::string> visited;
  model->apply([&](nn::Module& m) {
    visited.push_back(m.type_name());
    if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(&m)) nn::init::zeros_(conv->weight);
  });
  EXPECT_EQ(visited,
            (std::vector<std::string>{"Conv2d", "ReLU", "Sequential", "Tanh", "Sequential"}));
  EXPECT_EQ(sum(abs(shared->weight)).item(), 0.0);
}

TEST(NnLayers, BadOptionsAndInputsAreErrorsNamingThem) {
  EXPECT_TRUE(contains(error_of([] { nn::BatchNorm2d(nn::BatchNorm2dOptions(0)); }),
                       "BatchNorm2d: num_features=0"));
  EXPECT_TRUE(
      contains(error_of([] { nn::BatchNorm1d(nn::BatchNorm1dOptions(3).eps(0.0)); }), "eps=0"));
  EXPECT_TRUE(contains(error_of([] { nn::BatchNorm1d(nn::BatchNorm1dOptions(3).momentum(1.5)); }),
                       "momentum=1.5"));
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(3));
  EXPECT_TRUE(contains(error_of([&] { bn(zeros({2, 4, 3, 3})); }), "input has 4 channels"));
  EXPECT_TRUE(contains(error_of([&] { bn(zeros({2, 3, 3})); }), "expected 4-D"));
  EXPECT_TRUE(contains(error_of([&] {
                         bn(zeros({1, 3, 1, 1}));
                       }),
                       "more than 1 value per channel"));
  EXPECT_TRUE(contains(error_of([] { nn::GroupNorm(nn::GroupNormOptions(3, 4)); }),
                       "divisible by num_groups=3"));
  nn::LayerNorm ln(nn::LayerNormOptions({4}));
  EXPECT_TRUE(contains(error_of([&] { ln(zeros({2, 3})); }), "must be normalized_shape"));
  EXPECT_TRUE(contains(
      error_of([] { nn::InstanceNorm2d(nn::InstanceNormOptions(2).track_running_stats(true)); }),
      "track_running_stats=true is not supported"));
  EXPECT_TRUE(contains(error_of([] { nn::Dropout(1.5); }), "Dropout: p=1.5"));
  EXPECT_TRUE(contains(error_of([] { dropout(ones({2}), -0.1); }), "dropout: p=-0.1"));
  EXPECT_TRUE(contains(error_of([] { nn::Conv2d(nn::Conv2dOptions(4, 6, 3).groups(4)); }),
                       "out_channels=6 must be divisible by groups=4"));
  EXPECT_TRUE(
      contains(error_of([] { nn::Conv1d(nn::Conv1dOptions(2, 2, 3).stride(2).padding(kSame)); }),
               "padding=kSame needs stride 1"));
  EXPECT_TRUE(contains(error_of([] {
                         nn::Conv2d(nn::Conv2dOptions(2, 2, {3, 0}));
                       }),
                       "kernel_size[1]=0"));
}

}  // namespace
}  // namespace tgrad::testing
