// LibTorch idioms: module holders (TGRAD_MODULE), modules named by their class, Sequential over
// user modules whose forward hides Module::forward, tgrad::save / load, binary_cross_entropy
// and allclose. The whole-program check is tests/libtorch (a LibTorch DCGAN built by renames).
// These modules declare forward as LibTorch code does (by value, no override), which hides
// Module's virtual forward: what is tested here is that holders and Sequential still call it.
// -Woverloaded-virtual (in GCC 13's and clang's -Wall) reports the hiding, so it is off in this
// file (before the includes: GCC reports it at Module's declaration).
#pragma GCC diagnostic ignored "-Woverloaded-virtual"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::tensors_close;
using testing::Tolerance;

struct TwiceImpl : nn::Module {
  // Hides Module::forward with LibTorch's by-value signature: Sequential must still call it.
  Tensor forward(Tensor x) { return x * 2.0; }
};
TGRAD_MODULE(Twice);

struct BlockImpl : nn::Module {
  explicit BlockImpl(int64_t width) : fc(width, width) { register_module("fc", fc); }
  Tensor forward(Tensor x) { return relu(fc(x)); }
  nn::Linear fc;
};
TGRAD_MODULE(Block);

TEST(ModuleHolder, CopiesShareOneModuleAndCallForward) {
  nn::Linear a(3, 2);
  nn::Linear b = a;  // a second handle, not a second layer
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->weight.impl(), b->weight.impl());
  const Tensor x = randn({4, 3});
  EXPECT_TRUE(equal(a(x), a->forward(x)));
  std::shared_ptr<nn::Module> as_module = a.ptr();  // the module as a ModulePtr
  EXPECT_EQ(as_module.get(), a.get());
}

TEST(ModuleHolder, EmptyHolderIsAnErrorNotACrash) {
  nn::Conv2d conv{nullptr};
  EXPECT_TRUE(conv.is_empty());
  try {
    (void)conv.ptr();
    ADD_FAILURE() << "an empty holder was dereferenced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the holder is empty"), std::string::npos) << e.what();
  }
  conv = nn::Conv2d(nn::Conv2dOptions(1, 2, 3));
  EXPECT_FALSE(conv.is_empty());
  EXPECT_EQ(conv->parameters().size(), 2u);
}

TEST(ModuleHolder, UserModulesAreNamedByTheirClassAndRegisterHolders) {
  Block block(4);
  EXPECT_EQ(block->type_name(), "BlockImpl");
  const auto named = block->named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "fc.weight");
  std::ostringstream printed;
  printed << block;
  EXPECT_EQ(printed.str(), "BlockImpl(\n  (fc): Linear(in_features=4, out_features=4, bias=true)\n)");
}

TEST(ModuleHolder, SequentialCallsEachModulesOwnForward) {
  // Braces as well as parentheses: holders are not ModulePtrs, so this is the variadic form.
  nn::Sequential seq{Twice(), nn::ReLU(), Twice()};
  const Tensor x = from_vector<float>({-1.0f, 2.0f}, {2});
  // Twice's forward is not an override of Module::forward; the base one would throw.
  EXPECT_EQ(seq->forward(x).to_vector<float>(), (std::vector<float>{0.0f, 8.0f}));
  seq->push_back(Twice());
  EXPECT_EQ(seq(x).to_vector<float>(), (std::vector<float>{0.0f, 16.0f}));
  EXPECT_EQ(seq->size(), 4u);
}

TEST(ModuleHolder, SaveAndLoadTakeHolders) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tgrad_holder_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "block.safetensors").string();
  Block a(3), b(3);
  tgrad::save(a, path);
  EXPECT_FALSE(equal(a->fc->weight, b->fc->weight));
  tgrad::load(b, path);
  EXPECT_TRUE(equal(a->fc->weight, b->fc->weight));
  EXPECT_TRUE(equal(a->fc->bias, b->fc->bias));
  std::filesystem::remove_all(dir);
}

TEST(Losses, BinaryCrossEntropyMatchesPyTorch) {
  // torch.nn.functional.binary_cross_entropy(x, y) and its gradient, float64 (PyTorch 1.13).
  const Tensor x = from_vector<double>({0.1, 0.5, 0.9}, {3}).requires_grad_();
  const Tensor y = from_vector<double>({0.0, 1.0, 0.7}, {3});
  const Tensor loss = binary_cross_entropy(x, y);
  // A handful of float64 logs and divisions: agreement to a few ulps.
  constexpr Tolerance kTol{1e-15, 1e-14, 0.0};
  EXPECT_TRUE(tensors_close(loss, scalar_tensor(0.5210118616921546, kFloat64), kTol, "loss"));
  loss.backward();
  EXPECT_TRUE(tensors_close(
      x.grad(), from_vector<double>({0.3703703703703703, -0.6666666666666666, 0.740740740740741}, {3}),
      kTol, "grad"));
  // Saturated probabilities: each log is clamped at -100, as PyTorch's.
  const Tensor sat = nn::binary_cross_entropy(from_vector<double>({0.0, 1.0}, {2}),
                                              from_vector<double>({1.0, 0.0}, {2}),
                                              nn::Reduction::none);
  EXPECT_EQ(sat.to_vector<double>(), (std::vector<double>{100.0, 100.0}));
  // Inputs that are not probabilities (logits passed by mistake) are refused.
  try {
    binary_cross_entropy(from_vector<double>({-0.5, 0.5}, {2}), from_vector<double>({0, 1}, {2}));
    ADD_FAILURE() << "a negative probability was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("binary_cross_entropy: every input element must be a "
                                         "probability in [0, 1]; got values from -0.5 to 0.5"),
              std::string::npos)
        << e.what();
  }
}

TEST(TensorCompare, AllcloseUsesPyTorchsRule) {
  const Tensor b = from_vector<double>({1.0, 100.0}, {2});
  // |a - b| <= atol + rtol * |b| with rtol 1e-5, atol 1e-8: 100 tolerates 1.00001e-3.
  EXPECT_TRUE(allclose(from_vector<double>({1.0, 100.0009}, {2}), b));
  EXPECT_FALSE(allclose(from_vector<double>({1.0, 100.0011}, {2}), b));
  EXPECT_FALSE(allclose(from_vector<double>({1.0}, {1}), b));  // shapes differ
  const Tensor nan = from_vector<double>({std::nan(""), 1.0}, {2});
  EXPECT_FALSE(allclose(nan, nan));
  EXPECT_TRUE(allclose(nan, nan, 1e-5, 1e-8, /*equal_nan=*/true));
  EXPECT_THROW(allclose(b, b, -1.0), Error);
}

}  // namespace
}  // namespace tgrad
