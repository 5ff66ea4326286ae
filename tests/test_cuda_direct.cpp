// The direct kernels (cuda/conv_transpose_direct.cu, planner row "direct") on the GPU, forced for
// all three passes: the suite's layers with few channels per group (RGB and mono outputs, grouped
// and depthwise layers) and edge geometries (several weight stages, channel counts off the
// register blocks, groups with dilation and output padding, phases without taps, unequal strides,
// padding past the kernel, more taps than the depthwise wgrad takes, planes smaller than a warp),
// each element of y (with bias), dx and dw against float64 within its own error budget
// (tests/conv_budget.h). The kernels compute in full float32 at both precisions, so "high" is held
// to the float32 budget too. Then float64 against the CPU, and the planner's choice on the suite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench/decoder_layers.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/random.h"
#include "cuda/conv_plan.h"
#include "cuda/kernel_stats.h"
#include "tests/conv_budget.h"
#include "tests/decoder_layer_inputs.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using bench::ConvLayerSpec;
using testing::budget_factor;
using testing::within_budget;

using Result = testing::AllPasses;
constexpr auto run = testing::all_passes;

void check_layer(const ConvLayerSpec& l, int64_t batch) {
  const testing::LayerOperands in = testing::layer_operands(l, batch, kFloat32, 23);
  const auto f64 = [](const Tensor& t) { return t.to(kFloat64); };
  const auto mag64 = [](const Tensor& t) { return abs(t).to(kFloat64); };
  const Result ref = run(l, f64(in.x), f64(in.w), f64(in.b), f64(in.dy));
  const Result mag = run(l, mag64(in.x), mag64(in.w), mag64(in.b), mag64(in.dy));
  const testing::ConvSettingsGuard restore;
  set_conv_kernel(cuda::kKernelDirect);
  const Device cuda(kCUDA);
  const int64_t cig = l.in_channels / l.groups, cog = l.out_channels / l.groups;
  for (const char* precision : {"highest", "high"}) {
    SCOPED_TRACE(l.id + " at " + precision);
    set_float32_matmul_precision(precision);
    const int64_t launches = cuda::conv_direct_launches();
    const Result got = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
    // Full float32 at either precision: the float32 budget (one more term than the taps in the
    // forward: the bias).
    EXPECT_TRUE(
        within_budget(got.y, ref.y, mag.y, budget_factor(false, cig * in.taps + 1), "forward"));
    EXPECT_TRUE(
        within_budget(got.dx, ref.dx, mag.dx, budget_factor(false, cog * in.taps), "dgrad"));
    EXPECT_TRUE(within_budget(got.dw, ref.dw, mag.dw, budget_factor(false, in.positions), "wgrad"));
    EXPECT_EQ(cuda::conv_direct_launches() - launches, 3);
    for (cuda::ConvPass pass :
         {cuda::ConvPass::forward, cuda::ConvPass::dgrad, cuda::ConvPass::wgrad}) {
      const cuda::ConvPlan plan = cuda::last_conv_plan(pass);
      EXPECT_EQ(plan.kernel, cuda::kKernelDirect) << plan.describe();
    }
  }
}

// The suite's layers with few channels per group, at batch 2 (the planner sends them to the
// direct kernels; see ConvPlan.SuiteLayersRunTheMeasuredForwardAndDgradKernels).
std::vector<ConvLayerSpec> narrow_suite_layers() {
  std::vector<ConvLayerSpec> v;
  for (const ConvLayerSpec& l : bench::decoder_layers()) {
    const int64_t cig = l.in_channels / l.groups, cog = l.out_channels / l.groups;
    if (std::min(cig, cog) <= 8 || (l.groups > 1 && cig * cog <= 1024)) v.push_back(l);
  }
  return v;
}

class CudaDirectSuite : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaDirectSuite, EveryPassWithinBudgetOnTheForcedKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), 2);
}

INSTANTIATE_TEST_SUITE_P(Suite, CudaDirectSuite, ::testing::ValuesIn(narrow_suite_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

std::vector<ConvLayerSpec> edge_layers() {
  using bench::layer1d;
  using bench::layer2d;
  std::vector<ConvLayerSpec> v;
  // RGB output on an odd plane, k4 s2 p1: three output channels in a register block of four.
  ConvLayerSpec rgb = layer2d("rgb_k4_s2", "edge", 3, 40, 3, 9, 4, 2, 1);
  rgb.in_size = {9, 7};
  v.push_back(rgb);
  // Mono output, k16 s8 with padding: eight phases of two taps, the first positions cut.
  v.push_back(layer1d("mono_k16_s8_p4", "edge", 2, 96, 1, 37, 16, 8, 4));
  // Mono output with dilation 2 and output padding: dgrad's single-channel loop steps by dW.
  ConvLayerSpec mono_dil = layer1d("mono_k5_s3_d2", "edge", 2, 12, 1, 29, 5, 3, 2, 1);
  mono_dil.dilation = {2, 2};
  v.push_back(mono_dil);
  // 200 input channels, 8 output channels, k16: the forward's weights take seven stages.
  v.push_back(layer1d("fwd_stages", "edge", 2, 200, 8, 23, 16, 8, 0));
  // 8 input channels, 200 output channels, k16: dgrad's weights take three stages.
  v.push_back(layer1d("dgrad_stages", "edge", 2, 8, 200, 21, 16, 8, 0));
  // Groups 3 of 3 -> 2 channels, k3 s2 p1 op1, dilation 2, on a 5x6 plane.
  ConvLayerSpec grouped = layer2d("g3_dil2_op1", "edge", 2, 9, 6, 5, 3, 2, 1, 1, 3);
  grouped.in_size = {5, 6};
  grouped.dilation = {2, 2};
  v.push_back(grouped);
  // Groups 4 of 5 -> 3 channels, 1-D k5 s3 p2 op1.
  v.push_back(layer1d("g4_k5_s3", "edge", 3, 20, 12, 50, 5, 3, 2, 1, 4));
  // k1 s4: three of four phases have no tap, their outputs are the bias alone.
  v.push_back(layer1d("k1_s4", "edge", 3, 5, 3, 33, 1, 4, 0, 3));
  // Unequal strides and kernels: (2, 1), (4, 3).
  ConvLayerSpec e = layer2d("s2x1_k4x3", "edge", 2, 6, 5, 5, 4, 2, 1);
  e.in_size = {5, 11};
  e.stride = {2, 1};
  e.kernel = {4, 3};
  e.padding = {1, 1};
  v.push_back(e);
  // Padding larger than the kernel's reach.
  v.push_back(layer1d("pad_gt_k", "edge", 3, 7, 2, 40, 4, 2, 3));
  // Depthwise with 7x7 taps (more than the depthwise wgrad's 32).
  ConvLayerSpec dw = layer2d("depthwise_k7", "edge", 2, 4, 4, 6, 7, 2, 3, 1, 4);
  v.push_back(dw);
  // 1x1 input planes, batch 40: a warp's 32 positions span samples.
  ConvLayerSpec tiny = layer2d("latent_to_4x4", "edge", 40, 16, 3, 1, 4, 1, 0);
  v.push_back(tiny);
  return v;
}

class CudaDirectEdges : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaDirectEdges, EveryPassWithinBudgetOnTheForcedKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), GetParam().batch);
}

INSTANTIATE_TEST_SUITE_P(Edges, CudaDirectEdges, ::testing::ValuesIn(edge_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

// float64 through the direct kernels against the CPU's float64: the same sums in another order,
// so within float64 roundoff of the magnitudes.
TEST(CudaDirect, Float64MatchesTheCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  for (const ConvLayerSpec& l : edge_layers()) {
    SCOPED_TRACE(l.id);
    const testing::LayerOperands in = testing::layer_operands(l, l.batch, kFloat64, 23);
    const Result ref = run(l, in.x, in.w, in.b, in.dy);
    const Result mag = run(l, abs(in.x), abs(in.w), abs(in.b), abs(in.dy));
    const testing::ConvSettingsGuard restore;
    set_conv_kernel(cuda::kKernelDirect);
    const Device cuda(kCUDA);
    const Result got = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
    // float64's unit roundoff is 2^-53: the float32 budget scaled by 2^-29.
    const double scale = std::ldexp(1.0, -29);
    const int64_t cig = l.in_channels / l.groups, cog = l.out_channels / l.groups;
    EXPECT_TRUE(within_budget(got.y, ref.y, mag.y, scale * budget_factor(false, cig * in.taps + 1),
                              "forward"));
    EXPECT_TRUE(within_budget(got.dx, ref.dx, mag.dx, scale * budget_factor(false, cog * in.taps),
                              "dgrad"));
    EXPECT_TRUE(
        within_budget(got.dw, ref.dw, mag.dw, scale * budget_factor(false, in.positions), "wgrad"));
    for (cuda::ConvPass pass :
         {cuda::ConvPass::forward, cuda::ConvPass::dgrad, cuda::ConvPass::wgrad})
      EXPECT_EQ(cuda::last_conv_plan(pass).kernel, cuda::kKernelDirect);
  }
}

// Two runs of the same inputs give the same bits (fixed-order sums, no atomics).
TEST(CudaDirect, RunsAreBitIdentical) {
  TGRAD_SKIP_WITHOUT_CUDA();
  ConvLayerSpec l;  // fwd_stages: several stages and wgrad chunks
  for (const ConvLayerSpec& e : edge_layers())
    if (e.id == "fwd_stages") l = e;
  ASSERT_EQ(l.id, "fwd_stages");
  const testing::LayerOperands in = testing::layer_operands(l, 4, kFloat32, 23);
  const testing::ConvSettingsGuard restore;
  set_conv_kernel(cuda::kKernelDirect);
  const Device cuda(kCUDA);
  const Result a = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
  const Result b = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
  EXPECT_EQ(a.y.to(Device(kCPU)).to_vector<float>(), b.y.to(Device(kCPU)).to_vector<float>());
  EXPECT_EQ(a.dx.to(Device(kCPU)).to_vector<float>(), b.dx.to(Device(kCPU)).to_vector<float>());
  EXPECT_EQ(a.dw.to(Device(kCPU)).to_vector<float>(), b.dw.to(Device(kCPU)).to_vector<float>());
}

}  // namespace
}  // namespace tgrad
