// Every layer of the decoder-layer suite (bench/decoder_layers.h) on the GPU at a reduced batch,
// at both float32 precisions: forward, input gradient and weight gradient through the public API,
// each element checked against a float64 CPU run of the same inputs within its own error budget,
// so a single wrong element fails the test (a relative L2 over a whole tensor would hide it),
// and each pass ran the kernel the planner chose for it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench/decoder_layers.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "cuda/conv_plan.h"
#include "cuda/kernel_stats.h"
#include "tests/conv_budget.h"
#include "tests/decoder_layer_inputs.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using bench::ConvLayerSpec;
using testing::budget_factor;
using testing::layer_conv;
using testing::within_budget;

struct Passes {
  Tensor y, dx, dw;
};

// y = conv(x, w), without bias (its gradient is a plain sum, checked elsewhere); dx, dw = the
// gradients of sum(y * dy), i.e. dgrad(dy) and wgrad(x, dy).
Passes run(const ConvLayerSpec& l, const Tensor& x, const Tensor& w, const Tensor& dy) {
  const Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
  const Tensor y = layer_conv(l, xr, wr, Tensor());
  sum(y * dy).backward();
  return {y.detach(), xr.grad(), wr.grad()};
}

class CudaDecoderLayers : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaDecoderLayers, EveryElementWithinItsBudgetAtBothPrecisions) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const ConvLayerSpec& l = GetParam();
  // Batch 1 keeps the float64 CPU reference of every layer quick; the layer's channels, sizes
  // and options are the suite's.
  const ConvGeometry g = make_conv_transpose_geometry(bench::conv_args(l, 1));
  Generator gen(7);
  Shape x_shape = {1, l.in_channels}, w_shape = {l.in_channels, l.out_channels / l.groups};
  for (int a = 0; a < l.dims; ++a) {
    x_shape.push_back(l.in_size[static_cast<size_t>(a)]);
    w_shape.push_back(l.kernel[static_cast<size_t>(a)]);
  }
  const Tensor x = randn(x_shape, gen, TensorOptions(kFloat32));
  const Tensor w = randn(w_shape, gen, TensorOptions(kFloat32)) * 0.05;
  Shape y_shape = {1, l.out_channels};
  for (int a = 0; a < l.dims; ++a)
    y_shape.push_back(g.out_size[static_cast<size_t>(2 - l.dims + a)]);
  const Tensor dy = randn(y_shape, gen, TensorOptions(kFloat32));

  // Reference and budget scale: float64 on the CPU, from the same float32 values.
  const Passes ref = run(l, x.to(kFloat64), w.to(kFloat64), dy.to(kFloat64));
  const Passes mag = run(l, abs(x).to(kFloat64), abs(w).to(kFloat64), abs(dy).to(kFloat64));
  int64_t taps = 1;
  for (int a = 0; a < l.dims; ++a)
    taps *= l.kernel[static_cast<size_t>(a)];
  int64_t positions = 1;
  for (int a = 0; a < l.dims; ++a)
    positions *= l.in_size[static_cast<size_t>(a)];
  const int64_t k_fwd = l.in_channels / l.groups * taps, k_dgrad = l.out_channels / l.groups * taps,
                k_wgrad = positions;

  const Device cuda(kCUDA);
  struct RestorePrecision {
    std::string saved = get_float32_matmul_precision();
    ~RestorePrecision() { set_float32_matmul_precision(saved); }
  } restore;
  for (const char* precision : {"highest", "high"}) {
    SCOPED_TRACE(std::string(l.id) + " at " + precision);
    set_float32_matmul_precision(precision);
    const bool high = std::string(precision) == "high";
    const Passes got = run(l, x.to(cuda), w.to(cuda), dy.to(cuda));
    EXPECT_TRUE(within_budget(got.y, ref.y, mag.y, budget_factor(high, k_fwd), "forward"));
    EXPECT_TRUE(within_budget(got.dx, ref.dx, mag.dx, budget_factor(high, k_dgrad), "dgrad"));
    EXPECT_TRUE(within_budget(got.dw, ref.dw, mag.dw, budget_factor(high, k_wgrad), "wgrad"));
    // Which kernel ran each pass: the one the planner names for this call on this device (so
    // the elements above checked that kernel, not a fallback), printed on failure.
    ConvGeometry gp = g;
    gp.precision = high ? Precision::high : Precision::highest;
    for (cuda::ConvPass pass :
         {cuda::ConvPass::forward, cuda::ConvPass::dgrad, cuda::ConvPass::wgrad}) {
      const cuda::ConvPlan ran = cuda::last_conv_plan(pass);
      EXPECT_FALSE(ran.kernel.empty()) << cuda::conv_pass_name(pass);
      EXPECT_EQ(ran.kernel, cuda::conv_planned_kernel(pass, gp, DType::float32, 0))
          << ran.describe();
    }
  }
}

// The budget itself, on the CPU: float32 results of a suite layer fit it at "highest", and one
// element moved by one tap's worth (|x||w| of one of its taps, here a thousandth of its
// magnitude sum, below any single tap of these inputs) fails it.
TEST(DecoderLayerBudget, FitsFloat32AndCatchesOneWrongElement) {
  ConvLayerSpec l = bench::decoder_layers().front();
  for (const ConvLayerSpec& candidate : bench::decoder_layers())
    if (candidate.id == "hifigan_v3_up3") l = candidate;
  Generator gen(3);
  const Tensor x = randn({1, l.in_channels, l.in_size[0]}, gen);
  const Tensor w = randn({l.in_channels, l.out_channels / l.groups, l.kernel[0]}, gen) * 0.05;
  const Tensor y32 = layer_conv(l, x, w, Tensor());
  const Tensor y64 = layer_conv(l, x.to(kFloat64), w.to(kFloat64), Tensor());
  const Tensor mag = layer_conv(l, abs(x).to(kFloat64), abs(w).to(kFloat64), Tensor());
  const double factor = budget_factor(false, l.in_channels / l.groups * l.kernel[0]);
  EXPECT_TRUE(within_budget(y32, y64, mag, factor, "float32 CPU forward"));
  std::vector<float> moved = y32.to_vector<float>();
  const size_t e = moved.size() / 2;
  moved[e] += static_cast<float>(mag.to_vector<double>()[e] * 1e-3);
  EXPECT_FALSE(within_budget(from_vector(moved, y32.shape()), y64, mag, factor, "one element"));
}

INSTANTIATE_TEST_SUITE_P(Suite, CudaDecoderLayers, ::testing::ValuesIn(bench::decoder_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

}  // namespace
}  // namespace tgrad
