// Bad input to conv_transpose1d/2d: each case throws a tgrad::Error whose message names the
// function, the argument and the values, and leaves every operand (values and .grad) unchanged.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

// Operands that require grad, so that a half-done call would be visible in .grad.
Tensor operand(const Shape& shape, DType dtype = kFloat64) {
  Tensor t = randn(shape, TensorOptions(dtype));
  t.requires_grad_(true);
  return t;
}

// Runs `call`, which must throw tgrad::Error with every piece of `pieces` in its message, and
// checks that the operands kept their values and got no gradient.
void expect_conv_error(const std::function<void()>& call, const std::vector<std::string>& pieces,
                       const std::vector<Tensor>& operands) {
  std::vector<Tensor> before;
  for (const Tensor& t : operands)
    before.push_back(t.detach().clone());
  try {
    call();
    ADD_FAILURE() << "no tgrad::Error thrown; expected one mentioning '" << pieces.front() << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& piece : pieces)
      EXPECT_NE(message.find(piece), std::string::npos)
          << "message \"" << message << "\" lacks \"" << piece << "\"";
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    EXPECT_TRUE(equal(operands[i].detach(), before[i])) << "operand " << i << " changed";
    EXPECT_FALSE(operands[i].grad().defined()) << "operand " << i << " got a gradient";
  }
}

using Opts1d = ConvTranspose1dFuncOptions;
using Opts2d = ConvTranspose2dFuncOptions;

TEST(ConvErrors, StrideNotPositive) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3}), b = operand({3});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, b, Opts2d().stride({0, 1}));
      },
      {"conv_transpose2d", "stride[0]=0", "positive"}, {x, w, b});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, b, Opts2d().stride({2, -1}));
      },
      {"conv_transpose2d", "stride[1]=-1"}, {x, w, b});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 3});
  expect_conv_error([&] { conv_transpose1d(x1, w1, Tensor(), Opts1d().stride(0)); },
                    {"conv_transpose1d", "stride", "=0"}, {x1, w1});
}

TEST(ConvErrors, PaddingNegative) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, Tensor(), Opts2d().padding({1, -1}));
      },
      {"conv_transpose2d", "padding[1]=-1"}, {x, w});
  const Tensor x1 = operand({2, 5}), w1 = operand({2, 3, 3});
  expect_conv_error([&] { conv_transpose1d(x1, w1, Tensor(), Opts1d().padding(-2)); },
                    {"conv_transpose1d", "padding", "=-2"}, {x1, w1});
}

TEST(ConvErrors, OutputPaddingNegative) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, Tensor(), Opts2d().stride(2).output_padding({-1, 0}));
      },
      {"conv_transpose2d", "output_padding[0]=-1"}, {x, w});
}

TEST(ConvErrors, DilationNotPositive) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, Tensor(), Opts2d().dilation({1, 0}));
      },
      {"conv_transpose2d", "dilation[1]=0"}, {x, w});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 3});
  expect_conv_error([&] { conv_transpose1d(x1, w1, Tensor(), Opts1d().dilation(-3)); },
                    {"conv_transpose1d", "dilation", "=-3"}, {x1, w1});
}

TEST(ConvErrors, KernelSizeZero) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 0});
  expect_conv_error([&] { conv_transpose2d(x, w); }, {"conv_transpose2d", "kernel", "=0"}, {x, w});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 0});
  expect_conv_error([&] { conv_transpose1d(x1, w1); }, {"conv_transpose1d", "kernel", "=0"},
                    {x1, w1});
}

TEST(ConvErrors, GroupsNotPositive) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3});
  expect_conv_error([&] { conv_transpose2d(x, w, Tensor(), Opts2d().groups(0)); },
                    {"conv_transpose2d", "groups=0"}, {x, w});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 3});
  expect_conv_error([&] { conv_transpose1d(x1, w1, Tensor(), Opts1d().groups(-1)); },
                    {"conv_transpose1d", "groups=-1"}, {x1, w1});
}

// PyTorch's rule: output_padding must be smaller than the stride or the dilation of its axis.
TEST(ConvErrors, OutputPaddingNotSmallerThanStrideOrDilation) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, Tensor(), Opts2d().stride({3, 2}).output_padding({2, 3}));
      },
      {"conv_transpose2d", "output_padding[1]=3", "stride[1]=2", "dilation[1]=1"}, {x, w});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 3});
  expect_conv_error(
      [&] { conv_transpose1d(x1, w1, Tensor(), Opts1d().stride(2).dilation(2).output_padding(2)); },
      {"conv_transpose1d", "output_padding", "=2", "stride", "dilation"}, {x1, w1});
  // Equal to the stride but smaller than the dilation is allowed.
  EXPECT_NO_THROW(conv_transpose1d(x1.detach(), w1.detach(), Tensor(),
                                   Opts1d().stride(2).dilation(3).output_padding(2)));
}

TEST(ConvErrors, InputChannelsDifferFromWeight) {
  const Tensor x = operand({1, 3, 5}), w = operand({4, 2, 3});
  expect_conv_error([&] { conv_transpose1d(x, w); },
                    {"conv_transpose1d", "input channels 3", "weight.size(0)=4"}, {x, w});
  const Tensor x2 = operand({3, 4, 4}), w2 = operand({2, 2, 3, 3});  // unbatched
  expect_conv_error([&] { conv_transpose2d(x2, w2); },
                    {"conv_transpose2d", "input channels 3", "weight.size(0)=2"}, {x2, w2});
}

TEST(ConvErrors, WeightChannelsNotDivisibleByGroups) {
  const Tensor x = operand({1, 3, 4, 4}), w = operand({3, 2, 3, 3});
  expect_conv_error([&] { conv_transpose2d(x, w, Tensor(), Opts2d().groups(2)); },
                    {"conv_transpose2d", "weight.size(0)=3", "groups=2"}, {x, w});
}

TEST(ConvErrors, BiasNotOneDimensional) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3, 3}), b = operand({1, 3});
  expect_conv_error([&] { conv_transpose2d(x, w, b); }, {"conv_transpose2d", "bias", "[1, 3]"},
                    {x, w, b});
}

TEST(ConvErrors, BiasLengthNotOutputChannels) {
  // C_out = weight.size(1) * groups = 2 * 2 = 4.
  const Tensor x = operand({1, 4, 5}), w = operand({4, 2, 3}), b = operand({2});
  expect_conv_error([&] { conv_transpose1d(x, w, b, Opts1d().groups(2)); },
                    {"conv_transpose1d", "bias", "4", "[2]"}, {x, w, b});
}

TEST(ConvErrors, InputRankWrong) {
  const Tensor w = operand({2, 3, 3, 3});
  const Tensor x2 = operand({2, 4}), x5 = operand({1, 1, 2, 4, 4});
  expect_conv_error([&] { conv_transpose2d(x2, w); }, {"conv_transpose2d", "input", "2-D"},
                    {x2, w});
  expect_conv_error([&] { conv_transpose2d(x5, w); }, {"conv_transpose2d", "input", "5-D"},
                    {x5, w});
  const Tensor x1 = operand({1, 2, 4, 4}), w1 = operand({2, 3, 3});
  expect_conv_error([&] { conv_transpose1d(x1, w1); }, {"conv_transpose1d", "input", "4-D"},
                    {x1, w1});
}

TEST(ConvErrors, WeightRankWrong) {
  const Tensor x = operand({1, 2, 4, 4}), w = operand({2, 3, 3});
  expect_conv_error([&] { conv_transpose2d(x, w); }, {"conv_transpose2d", "weight", "3-D"}, {x, w});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 3, 3});
  expect_conv_error([&] { conv_transpose1d(x1, w1); }, {"conv_transpose1d", "weight", "4-D"},
                    {x1, w1});
}

// (1 - 1)*1 - 2*1 + 1*(1 - 1) + 0 + 1 = -1 on the W axis.
TEST(ConvErrors, OutputSizeBelowOne) {
  const Tensor x = operand({1, 2, 3, 1}), w = operand({2, 3, 2, 1});
  expect_conv_error(
      [&] {
        conv_transpose2d(x, w, Tensor(), Opts2d().padding({0, 1}));
      },
      {"conv_transpose2d", "output size -1", "padding=1"}, {x, w});
  const Tensor x1 = operand({1, 2, 2}), w1 = operand({2, 3, 1});  // (2-1) - 2*2 + 0 + 1 = -2
  expect_conv_error([&] { conv_transpose1d(x1, w1, Tensor(), Opts1d().padding(2)); },
                    {"conv_transpose1d", "output size -2"}, {x1, w1});
}

TEST(ConvErrors, DtypeMismatch) {
  const Tensor x = operand({1, 2, 4, 4}, kFloat32), w = operand({2, 3, 3, 3}, kFloat64);
  expect_conv_error([&] { conv_transpose2d(x, w); },
                    {"conv_transpose2d", "dtype", "float32", "float64"}, {x, w});
  const Tensor x1 = operand({1, 2, 5}), w1 = operand({2, 3, 3}), b1 = operand({3}, kFloat32);
  expect_conv_error([&] { conv_transpose1d(x1, w1, b1); },
                    {"conv_transpose1d", "dtype", "bias", "float32"}, {x1, w1, b1});
}

TEST(ConvErrors, ExpandingArrayWrongCount) {
  expect_conv_error([] { Opts2d().stride({1, 2, 3}); }, {"ExpandingArray", "2", "got 3"}, {});
  expect_conv_error([] { Opts1d().padding({1, 1}); }, {"ExpandingArray", "got 2"}, {});
  expect_conv_error([] { Opts2d().dilation({}); }, {"ExpandingArray", "got 0"}, {});
}

}  // namespace
}  // namespace tgrad::testing
