// conv1d / conv2d: values, gradients and second-order gradients against PyTorch
// (tests/data/torch_conv_regular_cases.json, written by make_torch_conv_regular_cases.py), on the
// CPU and on CUDA; the identity that makes them the transposed convolution's input-gradient
// pass; and their argument errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

nlohmann::json load_cases() {
  const std::string path = std::string(TGRAD_TEST_DATA_DIR) + "/torch_conv_regular_cases.json";
  std::ifstream in(path);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  return nlohmann::json::parse(in);
}

Tensor json_tensor(const nlohmann::json& j, Device device) {
  return from_vector(j.at("data").get<std::vector<double>>(), j.at("shape").get<Shape>(),
                     TensorOptions(kFloat64).device(device));
}

template <size_t D>
ConvFuncOptions<D> options_of(const nlohmann::json& j) {
  ConvFuncOptions<D> o;
  std::array<int64_t, D> s{}, d{};
  for (size_t i = 0; i < D; ++i) {
    s[i] = j.at("stride")[i].get<int64_t>();
    d[i] = j.at("dilation")[i].get<int64_t>();
  }
  o.stride(s).dilation(d).groups(j.at("groups").get<int64_t>());
  const nlohmann::json& p = j.at("padding");
  if (p.is_string()) {
    if (p == "same") {
      o.padding(kSame);
    } else {
      o.padding(kValid);
    }
  } else {
    std::array<int64_t, D> pad{};
    for (size_t i = 0; i < D; ++i)
      pad[i] = p[i].get<int64_t>();
    o.padding(pad);
  }
  return o;
}

Tensor run_conv(const nlohmann::json& j, const Tensor& x, const Tensor& w, const Tensor& b) {
  if (j.at("op") == "conv1d") return conv1d(x, w, b, options_of<1>(j));
  return conv2d(x, w, b, options_of<2>(j));
}

// PyTorch sums in another order (im2col + GEMM), so agreement is to float64 rounding of sums of
// a few dozen terms.
constexpr Tolerance kVsTorch{1e-12, 1e-10, 0.0};

void check_against_torch(Device device) {
  const nlohmann::json all = load_cases();
  ASSERT_GE(all.at("cases").size(), 8u);
  for (const nlohmann::json& j : all.at("cases")) {
    const std::string config = j.at("name").get<std::string>();
    const Tensor x = json_tensor(j.at("x"), device).requires_grad_(true);
    const Tensor w = json_tensor(j.at("w"), device).requires_grad_(true);
    const Tensor b =
        j.at("b").is_null() ? Tensor() : json_tensor(j.at("b"), device).requires_grad_(true);
    const Tensor dy = json_tensor(j.at("dy"), device).requires_grad_(true);
    const Tensor y = run_conv(j, x, w, b);
    EXPECT_TRUE(tensors_close(y, json_tensor(j.at("y"), device), kVsTorch, config + " y"));
    std::vector<Tensor> inputs = {x, w};
    if (b.defined()) inputs.push_back(b);
    const std::vector<Tensor> g = grad({y}, inputs, {dy}, true, true);
    EXPECT_TRUE(tensors_close(g[0], json_tensor(j.at("dx"), device), kVsTorch, config + " dx"));
    EXPECT_TRUE(tensors_close(g[1], json_tensor(j.at("dw"), device), kVsTorch, config + " dw"));
    if (b.defined()) {
      EXPECT_TRUE(tensors_close(g[2], json_tensor(j.at("db"), device), kVsTorch, config + " db"));
    }
    // Second order: the gradient of <dw, u> with respect to x and dy (a gradient penalty's path).
    const Tensor u = json_tensor(j.at("u"), device);
    const std::vector<Tensor> gg = grad({g[1]}, {x, dy}, {u});
    EXPECT_TRUE(tensors_close(gg[0], json_tensor(j.at("ggx"), device), kVsTorch, config + " ggx"));
    EXPECT_TRUE(
        tensors_close(gg[1], json_tensor(j.at("ggdy"), device), kVsTorch, config + " ggdy"));
  }
}

TEST(ConvRegular, MatchesPyTorchWithGradientsAndSecondOrderCpu) {
  check_against_torch(Device(kCPU));
}

TEST(ConvRegular, MatchesPyTorchWithGradientsAndSecondOrderCuda) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_against_torch(Device(kCUDA));
}

// conv2d(x, w) is conv_transpose2d's input gradient: <conv_transpose2d(g, w), x> equals
// <g, conv2d(x, w)> for any g, x (the adjoint identity), to float64 rounding.
TEST(ConvRegular, IsTheAdjointOfTheTransposedConvolution) {
  Generator gen(3);
  const Tensor w = randn({4, 3, 3, 2}, gen, kFloat64);   // conv: C_out 4, C_in 3
  const Tensor x = randn({2, 3, 10, 8}, gen, kFloat64);  // H: 10 + 2 - 3 = 9 = 2*4 + 1
  const auto o = Conv2dFuncOptions().stride({2, 1}).padding({1, 0}).dilation({1, 2});
  const Tensor y = conv2d(x, w, Tensor(), o);
  const Tensor g = randn(y.shape(), gen, kFloat64);
  // The transposed convolution with the same arguments maps y's shape back to x's, give or take
  // the rows a stride leaves over, which output_padding restores.
  const Tensor back = conv_transpose2d(
      g, w, Tensor(),
      ConvTranspose2dFuncOptions().stride({2, 1}).padding({1, 0}).dilation({1, 2}).output_padding(
          {1, 0}));
  ASSERT_EQ(back.shape(), x.shape());
  const double lhs = sum(back * x).item(), rhs = sum(g * y).item();
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::abs(rhs));
}

TEST(ConvRegular, Conv1dEqualsConv2dWithHeightOne) {
  Generator gen(4);
  const Tensor x = randn({2, 4, 13}, gen, kFloat64);
  const Tensor w = randn({6, 2, 3}, gen, kFloat64);
  const Tensor b = randn({6}, gen, kFloat64);
  const Tensor y1 = conv1d(x, w, b, Conv1dFuncOptions().stride(2).padding(1).dilation(2).groups(2));
  const Tensor y2 =
      conv2d(x.reshape({2, 4, 1, 13}), w.reshape({6, 2, 1, 3}), b,
             Conv2dFuncOptions().stride({1, 2}).padding({0, 1}).dilation({1, 2}).groups(2));
  EXPECT_TRUE(equal(y1, y2.reshape(y1.shape())));
}

// padding=kSame with an even kernel extent puts the odd element after, as PyTorch. Expected
// values: torch.nn.functional.conv1d/conv2d(..., padding='same') in float64 on these inputs.
TEST(ConvRegular, SamePaddingWithAnEvenKernelMatchesPyTorch) {
  const Tensor x = arange(30.0, kFloat64).reshape({2, 3, 5}) * 0.1 - 0.7;
  const Tensor w = arange(48.0, kFloat64).reshape({4, 3, 4}) * 0.05 - 1.0;
  const Tensor y = conv1d(x, w, Tensor(), Conv1dFuncOptions().padding(kSame));
  const std::vector<double> y_torch = {1.26,   1.31,  0.44,  -0.045, -0.29, 0.72,   0.95,   0.8,
                                       0.495,  0.25,  0.18,  0.59,   1.16,  1.035,  0.79,   -0.36,
                                       0.23,   1.52,  1.575, 1.33,   -8.19, -11.74, -12.61, -10.17,
                                       -7.265, -0.63, -1.3,  -1.45,  -1.53, -1.325, 6.93,   9.14,
                                       9.71,   7.11,  4.615, 14.49,  19.58, 20.87,  15.75,  10.555};
  // PyTorch's and tgrad's sums of a dozen terms differ in order only.
  EXPECT_TRUE(tensors_close(y, from_vector(y_torch, {2, 4, 5}), Tolerance{1e-12, 1e-12, 0.0},
                            "conv1d k4 same"));
  const Tensor x2 = arange(40.0, kFloat64).reshape({1, 2, 4, 5}) * 0.1 - 2.0;
  const Tensor w2 = arange(48.0, kFloat64).reshape({3, 2, 2, 4}) * 0.03 - 0.5;
  const Tensor y2 = conv2d(x2, w2, Tensor(), Conv2dFuncOptions().padding(kSame));
  const std::vector<double> y2_torch = {
      3.672, 4.86,  4.42,   3.21,  2.062,  2.112,  2.66,   2.22,   1.47,   0.842, 0.552, 0.46,
      0.02,  -0.27, -0.378, -0.42, -0.752, -1.02,  -0.948, -0.758, -0.072, 0.252, 0.58,  0.618,
      0.526, 1.248, 1.892,  2.22,  1.758,  1.226,  2.568,  3.532,  3.86,   2.898, 1.926, 1.308,
      1.744, 1.86,  1.356,  0.874, -3.816, -4.356, -3.26,  -1.974, -1.01,  0.384, 1.124, 2.22,
      2.046, 1.61,  4.584,  6.604, 7.7,    6.066,  4.23,   3.036,  4.24,   4.74,  3.66,  2.506};
  EXPECT_TRUE(tensors_close(y2, from_vector(y2_torch, {1, 3, 4, 5}), Tolerance{1e-12, 1e-12, 0.0},
                            "conv2d 2x4 same"));
  // And it is differentiable through the padding, first and second order.
  GradcheckOptions o;
  o.fast_mode = true;
  GradcheckFn f = [](const std::vector<Tensor>& in) {
    return conv1d(in[0], in[1], Tensor(), Conv1dFuncOptions().padding(kSame).dilation(3));
  };
  const std::vector<Tensor> inputs = {x.detach().requires_grad_(true),
                                      w.detach().requires_grad_(true)};
  const GradcheckResult r1 = gradcheck(f, inputs, o);
  EXPECT_TRUE(r1.ok) << r1.report;
  const GradcheckResult r2 = gradgradcheck(f, inputs, o);
  EXPECT_TRUE(r2.ok) << r2.report;
}

TEST(ConvRegular, BadArgumentsAreErrorsNamingThem) {
  const Tensor x = zeros({1, 4, 5}, kFloat64), w = zeros({6, 2, 3}, kFloat64);
  EXPECT_NE(error_of([&] { conv1d(x, w); }).find("conv1d: input channels 4"), std::string::npos);
  EXPECT_NE(error_of([&] {
              conv1d(x, zeros({5, 2, 3}, kFloat64), Tensor(), Conv1dFuncOptions().groups(2));
            }).find("weight.size(0)=5 (output channels) must be divisible by groups=2"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv1d(x, zeros({6, 4, 7}, kFloat64));
            }).find("smaller than the kernel's extent"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv1d(x, zeros({6, 4, 3}, kFloat64), Tensor(),
                     Conv1dFuncOptions().stride(2).padding(kSame));
            }).find("padding=kSame needs stride 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv1d(x, zeros({6, 4, 3}, kFloat64), zeros({5}, kFloat64));
            }).find("bias must be 1-D of size C_out=6"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv2d(zeros({4, 5}, kFloat64), zeros({6, 4, 3, 3}, kFloat64));
            }).find("conv2d: input must be 3-D (unbatched) or 4-D (batched)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv1d(x, zeros({6, 4, 3}, kFloat64), Tensor(), Conv1dFuncOptions().stride(0));
            }).find("stride[0]=0 must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv1d(zeros({1, 4, 5}, kInt64), zeros({6, 4, 3}, kInt64));
            }).find("conv1d: argument 'input' is int64"),
            std::string::npos);
}

}  // namespace
}  // namespace tgrad::testing
