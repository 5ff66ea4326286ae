// Checkpoint interop with PyTorch, both ways: a tgrad checkpoint loads into the same torch.nn
// model and gives the same outputs, and a PyTorch state_dict saved as safetensors loads into
// tgrad and does the same. Runs tests/python/checkpoint_interop.py; skips without torch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

namespace fs = std::filesystem;
using testing::tensors_close;

// float32 forward passes in two libraries with different summation orders; the outputs are
// O(1), so agreement to 1e-5 is float32 rounding of a few dozen-term sums (and the brief's bar).
constexpr testing::Tolerance kInteropTol{1e-5, 0.0, 0.0};

// The first interpreter that can import torch and numpy: $TGRAD_PYTHON, /usr/bin/python3, python3.
std::string find_python_uncached() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TGRAD_PYTHON")) candidates.emplace_back(env);
  candidates.emplace_back("/usr/bin/python3");
  candidates.emplace_back("python3");
  for (const std::string& py : candidates) {
    const std::string cmd = py + " -c \"import torch, numpy\" > /dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

const std::string& find_python() {
  static const std::string python = find_python_uncached();  // importing torch takes seconds
  return python;
}

const fs::path kScript = fs::path(__FILE__).parent_path() / "python" / "checkpoint_interop.py";

// Must match make_model() in tests/python/checkpoint_interop.py layer for layer.
std::shared_ptr<nn::SequentialImpl> make_model(const std::string& kind, uint64_t seed) {
  Generator gen(seed);
  auto net = std::make_shared<nn::SequentialImpl>();
  if (kind == "2d") {
    net->push_back(std::make_shared<nn::LinearImpl>(5, 32, gen));
    net->push_back(std::make_shared<nn::LeakyReLUImpl>(0.1));
    net->push_back(std::make_shared<nn::UnflattenImpl>(1, Shape{2, 4, 4}));
    net->push_back(std::make_shared<nn::ConvTranspose2dImpl>(nn::ConvTranspose2dOptions(2, 4, {3, 2})
                                                             .stride({2, 1})
                                                             .padding({1, 0})
                                                             .output_padding({1, 0})
                                                             .dilation({1, 2}),
                                                         gen));
    net->push_back(std::make_shared<nn::TanhImpl>());
    net->push_back(std::make_shared<nn::ConvTranspose2dImpl>(
        nn::ConvTranspose2dOptions(4, 4, 3).stride(2).padding(1).groups(2).bias(false), gen));
    net->push_back(std::make_shared<nn::SigmoidImpl>());
  } else {
    net->push_back(std::make_shared<nn::ConvTranspose1dImpl>(
        nn::ConvTranspose1dOptions(3, 4, 5).stride(3).padding(2).output_padding(1).dilation(2),
        gen));
    net->push_back(std::make_shared<nn::ReLUImpl>());
    net->push_back(
        std::make_shared<nn::ConvTranspose1dImpl>(nn::ConvTranspose1dOptions(4, 2, 3).groups(2), gen));
  }
  return net;
}

Tensor tensor_named(const safetensors::File& f, const std::string& name) {
  for (const auto& [n, t] : f.tensors) {
    if (n == name) return t;
  }
  ADD_FAILURE() << "no tensor '" << name << "'";
  return Tensor();
}

class Interop : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    python_ = find_python();
    if (python_.empty()) {
      GTEST_SKIP() << "no python3 with torch and numpy (set TGRAD_PYTHON, or install "
                      "python3-torch)";
    }
    dir_ = fs::temp_directory_path() /
           ("tgrad_interop_" + std::to_string(::getpid()) + "_" + GetParam());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void run_script(const std::string& action, const fs::path& ckpt, const fs::path& in,
                  const fs::path& out) {
    const std::string cmd = python_ + " " + kScript.string() + " " + action + " " + GetParam() +
                            " " + ckpt.string() + " " + in.string() + " " + out.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::string python_;
  fs::path dir_;
};

TEST_P(Interop, TgradCheckpointLoadsIntoPyTorch) {
  const std::string kind = GetParam();
  auto net = make_model(kind, 42);
  nn::save_module(*net, (dir_ / "tgrad.safetensors").string());
  Generator gen(7);
  const Tensor x = kind == "2d" ? randn({3, 5}, gen) : randn({2, 3, 7}, gen);
  safetensors::save((dir_ / "in.safetensors").string(), {{"x", x}}, {{"format", "pt"}});
  run_script("load", dir_ / "tgrad.safetensors", dir_ / "in.safetensors", dir_ / "out.safetensors");
  const auto out = safetensors::load((dir_ / "out.safetensors").string());
  const Tensor y_torch = tensor_named(out, "y");
  EXPECT_TRUE(tensors_close(net->forward(x), y_torch, kInteropTol, kind + " tgrad -> torch"));
}

TEST_P(Interop, PyTorchCheckpointLoadsIntoTgrad) {
  const std::string kind = GetParam();
  run_script("export", dir_ / "torch.safetensors", dir_ / "unused", dir_ / "out.safetensors");
  auto net = make_model(kind, 1);
  nn::load_module(*net, (dir_ / "torch.safetensors").string());
  const auto out = safetensors::load((dir_ / "out.safetensors").string());
  EXPECT_TRUE(tensors_close(net->forward(tensor_named(out, "x")), tensor_named(out, "y"),
                            kInteropTol, kind + " torch -> tgrad"));
}

INSTANTIATE_TEST_SUITE_P(Models, Interop, ::testing::Values("2d", "1d"));

}  // namespace
}  // namespace tgrad
