// Printing modules: `std::cout << *model` writes the tree with each module's options, in
// LibTorch's pretty_print form (PyTorch's repr with lists in [] and true/false).
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

std::string print(const nn::Module& m) {
  std::ostringstream s;
  s << m;
  return s.str();
}

// A user module with one child and one without: printed by the base pretty_print.
struct Net : nn::Module {
  Net() : nn::Module("Net") { register_module("body", std::make_shared<Net>(0)); }
  explicit Net(int) : nn::Module("Net") {}
};

// Expected text: PyTorch 2.x `print(m)` of the same model
//   nn.Sequential(nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1, bias=False),
//     nn.BatchNorm2d(8), nn.ReLU(), nn.Sequential(nn.Conv2d(8, 3, 3, padding="same",
//     padding_mode="reflect"), nn.Conv1d(2, 4, 3, stride=2, dilation=2, groups=2), nn.Tanh()),
//     nn.Linear(3, 2), nn.LeakyReLU(0.2), nn.Dropout(0.25), nn.GroupNorm(2, 4),
//     nn.LayerNorm([4, 5]), nn.InstanceNorm2d(3), nn.BatchNorm1d(4, momentum=None),
//     nn.Flatten(), nn.PixelShuffle(2), nn.Dropout2d())
// with LibTorch's spellings: tuples as [..], True/False as true/false, 'same', kReflect.
TEST(NnPrint, SequentialTreeMatchesPyTorchRepr) {
  auto inner = std::make_shared<nn::SequentialImpl>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Conv2dImpl>(
          nn::Conv2dOptions(8, 3, 3).padding(kSame).padding_mode(kReflect)),
      std::make_shared<nn::Conv1dImpl>(nn::Conv1dOptions(2, 4, 3).stride(2).dilation(2).groups(2)),
      std::make_shared<nn::TanhImpl>()});
  nn::Sequential model{
      std::make_shared<nn::ConvTranspose2dImpl>(
          nn::ConvTranspose2dOptions(16, 8, 4).stride(2).padding(1).bias(false)),
      std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(8)),
      std::make_shared<nn::ReLUImpl>(),
      inner,
      std::make_shared<nn::LinearImpl>(nn::LinearOptions(3, 2)),
      std::make_shared<nn::LeakyReLUImpl>(0.2),
      std::make_shared<nn::DropoutImpl>(0.25),
      std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(2, 4)),
      std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({4, 5})),
      std::make_shared<nn::InstanceNorm2dImpl>(nn::InstanceNorm2dOptions(3)),
      std::make_shared<nn::BatchNorm1dImpl>(nn::BatchNorm1dOptions(4).momentum(std::nullopt)),
      std::make_shared<nn::FlattenImpl>(),
      std::make_shared<nn::PixelShuffleImpl>(2),
      std::make_shared<nn::Dropout2dImpl>()};
  const std::string expected =
      "Sequential(\n"
      "  (0): ConvTranspose2d(16, 8, kernel_size=[4, 4], stride=[2, 2], padding=[1, 1], "
      "bias=false)\n"
      "  (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
      "  (2): ReLU()\n"
      "  (3): Sequential(\n"
      "    (0): Conv2d(8, 3, kernel_size=[3, 3], stride=[1, 1], padding='same', "
      "padding_mode=kReflect)\n"
      "    (1): Conv1d(2, 4, kernel_size=[3], stride=[2], dilation=[2], groups=2)\n"
      "    (2): Tanh()\n"
      "  )\n"
      "  (4): Linear(in_features=3, out_features=2, bias=true)\n"
      "  (5): LeakyReLU(negative_slope=0.2)\n"
      "  (6): Dropout(p=0.25, inplace=false)\n"
      "  (7): GroupNorm(2, 4, eps=1e-05, affine=true)\n"
      "  (8): LayerNorm([4, 5], eps=1e-05, elementwise_affine=true)\n"
      "  (9): InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=false, "
      "track_running_stats=false)\n"
      "  (10): BatchNorm1d(4, eps=1e-05, momentum=None, affine=true, track_running_stats=true)\n"
      "  (11): Flatten(start_dim=1, end_dim=-1)\n"
      "  (12): PixelShuffle(upscale_factor=2)\n"
      "  (13): Dropout2d(p=0.5, inplace=false)\n"
      ")";
  EXPECT_EQ(print(*model), expected);
}

// PyTorch: a module with no extra_repr prints "Name()" as a leaf and "Name(\n  (child): ...\n)"
// with children.
TEST(NnPrint, UserModulesUseTheBasePrint) {
  EXPECT_EQ(print(Net(0)), "Net()");
  EXPECT_EQ(print(Net()), "Net(\n  (body): Net()\n)");
  EXPECT_EQ(print(*nn::Sequential()), "Sequential()");
}

}  // namespace
}  // namespace tgrad::testing
