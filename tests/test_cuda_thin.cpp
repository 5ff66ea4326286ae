// The thin-output kernels (cuda/conv_transpose_thin.cu, planner row "thin") on the GPU, forced
// for all three passes: the suite's RGB and mono layers and edge geometries (cells cut by
// padding, dilation and output padding, phases without taps, unequal strides, padding past the
// kernel, groups, channel splits and wgrad chunks, partial register blocks and channel blocks,
// 1x1 inputs, planes smaller than a warp), each element of y (with bias), dx and dw against
// float64 within its own error budget (tests/conv_budget.h). The kernels compute in full float32 at
// both precisions, so "high" is held to the float32 budget too. Then the same bits on a second run,
// and the planner's choice.
#include <gtest/gtest.h>

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
using testing::within_budget;

using Result = testing::AllPasses;
constexpr auto run = testing::all_passes;

void check_layer(const ConvLayerSpec& l, int64_t batch, bool planned) {
  const testing::LayerOperands in = testing::layer_operands(l, batch, kFloat32, 29);
  const auto f64 = [](const Tensor& t) { return t.to(kFloat64); };
  const auto mag64 = [](const Tensor& t) { return abs(t).to(kFloat64); };
  const Result ref = run(l, f64(in.x), f64(in.w), f64(in.b), f64(in.dy));
  const Result mag = run(l, mag64(in.x), mag64(in.w), mag64(in.b), mag64(in.dy));
  const testing::ConvSettingsGuard restore;
  // Forced for the edges (and for the suite's layers in WithinBudgetForced); as planned, each
  // pass runs where the planner sends it: the thin row for most forwards and dgrads, the GEMM
  // path for those of large planes with many multiplies per position (pix2pix's and
  // Conv-TasNet's, gemm_first in cuda/conv_plan.cpp), and the thin wgrad only where the planner
  // names it (at "highest" where batch-wgmma gives the call away, with a full block of 64 input
  // channels or more). A pass off the thin row at "high" runs on TF32: held to the TF32 budget.
  if (!planned) set_conv_kernel("thin");
  ConvGeometry g = make_conv_transpose_geometry(bench::conv_args(l, batch));
  const Device cuda(kCUDA);
  const int64_t cig = l.in_channels / l.groups, cog = l.out_channels / l.groups;
  for (const char* precision : {"highest", "high"}) {
    SCOPED_TRACE(l.id + " at " + precision);
    set_float32_matmul_precision(precision);
    const bool high = std::string(precision) == "high";
    g.precision = high ? Precision::high : Precision::highest;
    const auto on_thin = [&](cuda::ConvPass pass) {
      return !planned || cuda::conv_planned_kernel(pass, g, DType::float32, 0) == cuda::kKernelThin;
    };
    const bool thin_fwd = on_thin(cuda::ConvPass::forward);
    const bool thin_dgrad = on_thin(cuda::ConvPass::dgrad);
    const bool thin_wgrad = on_thin(cuda::ConvPass::wgrad);
    const int64_t launches = cuda::conv_thin_launches();
    const Result got = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
    // The thin kernels are full float32 at either precision: the float32 budget (the forward's
    // sum has one more term, the bias).
    EXPECT_TRUE(within_budget(got.y, ref.y, mag.y,
                              budget_factor(high && !thin_fwd, cig * in.taps + 1), "forward"));
    EXPECT_TRUE(within_budget(got.dx, ref.dx, mag.dx,
                              budget_factor(high && !thin_dgrad, cog * in.taps), "dgrad"));
    EXPECT_TRUE(within_budget(got.dw, ref.dw, mag.dw,
                              budget_factor(high && !thin_wgrad, in.positions), "wgrad"));
    EXPECT_EQ(cuda::conv_thin_launches() - launches,
              int64_t{thin_fwd} + int64_t{thin_dgrad} + int64_t{thin_wgrad});
    for (cuda::ConvPass pass :
         {cuda::ConvPass::forward, cuda::ConvPass::dgrad, cuda::ConvPass::wgrad}) {
      const cuda::ConvPlan plan = cuda::last_conv_plan(pass);
      if (on_thin(pass)) {
        EXPECT_EQ(plan.kernel, cuda::kKernelThin) << plan.describe();
      } else {
        EXPECT_NE(plan.kernel, cuda::kKernelThin) << plan.describe();
      }
    }
  }
}

// The suite's layers the thin row takes (RGB and mono outputs), at batch 2 and at a batch that
// makes the forward split its channels less (or not at all).
std::vector<ConvLayerSpec> thin_suite_layers() {
  std::vector<ConvLayerSpec> v;
  for (const ConvLayerSpec& l : bench::decoder_layers())
    if (l.out_channels / l.groups <= 4 && l.in_channels != l.groups) v.push_back(l);
  return v;
}

class CudaThinSuite : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaThinSuite, WithinBudgetAsPlanned) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), 2, /*planned=*/true);
}

// Every pass forced onto the thin kernels, those the planner sends elsewhere included.
TEST_P(CudaThinSuite, WithinBudgetForced) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), 2, /*planned=*/false);
}

INSTANTIATE_TEST_SUITE_P(Suite, CudaThinSuite, ::testing::ValuesIn(thin_suite_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

std::vector<ConvLayerSpec> edge_layers() {
  using bench::layer1d;
  using bench::layer2d;
  std::vector<ConvLayerSpec> v;
  // RGB output on an odd, non-square plane, k4 s2 p1: the padding cuts the first and last cells.
  ConvLayerSpec rgb = layer2d("rgb_k4_s2", "edge", 3, 40, 3, 9, 4, 2, 1);
  rgb.in_size = {9, 7};
  v.push_back(rgb);
  // Mono output, k16 s8 p4 with 96 channels over 3 samples: 3 splits of 32 channels, the
  // forward's partials summed in order.
  v.push_back(layer1d("mono_k16_s8_p4", "edge", 3, 96, 1, 37, 16, 8, 4));
  // 100 channels: splits of 34 + 34 + 32, a remainder in both kernels' channel loops.
  v.push_back(layer1d("mono_splits_100", "edge", 2, 100, 1, 45, 10, 5, 0));
  // 3000 positions of 8 channels: more than one tile of cells and positions, wgrad's chunks (the
  // last one short) in blocks of 128 channels with 120 of them empty.
  v.push_back(layer1d("rgb_chunks", "edge", 2, 8, 3, 1500, 4, 2, 1));
  // 200 channels: wgrad's second channel block holds 72 of 128.
  v.push_back(layer2d("c200_k4_s2", "edge", 2, 200, 2, 5, 4, 2, 1));
  // Mono output with dilation 2 and output padding: taps between dilated ones are zero weights.
  ConvLayerSpec mono_dil = layer1d("mono_k5_s3_d2", "edge", 2, 12, 1, 29, 5, 3, 2, 1);
  mono_dil.dilation = {2, 2};
  v.push_back(mono_dil);
  // 2-D dilation 2 at stride 2 with two output channels: every other cell row of weights zero.
  ConvLayerSpec dil2d = layer2d("c2_k3_s2_d2_op1", "edge", 2, 7, 2, 6, 3, 2, 1, 1);
  dil2d.dilation = {2, 2};
  v.push_back(dil2d);
  // Groups 3 of 3 -> 2 channels, k3 s2 p1 op1 on a 5x6 plane.
  ConvLayerSpec grouped = layer2d("g3_k3_s2_op1", "edge", 2, 9, 6, 5, 3, 2, 1, 1, 3);
  grouped.in_size = {5, 6};
  v.push_back(grouped);
  // Groups 4 of 5 -> 3 channels, 1-D k5 s3 p2 op1 (9 slots in a block of 12).
  v.push_back(layer1d("g4_k5_s3", "edge", 3, 20, 12, 50, 5, 3, 2, 1, 4));
  // k1 s4: three of four phases have no tap, their outputs are the bias alone.
  v.push_back(layer1d("k1_s4", "edge", 3, 5, 3, 33, 1, 4, 0, 3));
  // Unequal strides and kernels: (2, 1), (4, 3), four output channels.
  ConvLayerSpec e = layer2d("s2x1_k4x3", "edge", 2, 6, 4, 5, 4, 2, 1);
  e.in_size = {5, 11};
  e.stride = {2, 1};
  e.kernel = {4, 3};
  e.padding = {1, 1};
  v.push_back(e);
  // Padding larger than the kernel's reach: whole cells of outputs fall outside.
  v.push_back(layer1d("pad_gt_k", "edge", 3, 7, 2, 40, 4, 2, 3));
  // Stride 1, 3x3, RGB: one cell per output, 3 slots in a block of 4.
  v.push_back(layer2d("rgb_k3_s1", "edge", 2, 16, 3, 12, 3, 1, 1));
  // 1x1 input planes, batch 40 (DCGAN's latent): a warp's cells span samples.
  v.push_back(layer2d("latent_to_4x4", "edge", 40, 16, 3, 1, 4, 1, 0));
  // Depthwise (groups = channels), k3 s2 p1 op1 on a 7x9 plane: the forward the planner gives
  // the thin kernel (2 x 2 inputs a cell), one channel a group.
  ConvLayerSpec dw = layer2d("dw_k3_s2_op1", "edge", 3, 24, 24, 7, 3, 2, 1, 1, 24);
  dw.in_size = {7, 9};
  v.push_back(dw);
  // 4 output channels x 4x4 taps: dgrad's full window of 64.
  v.push_back(layer2d("c4_k4_s2", "edge", 2, 10, 4, 6, 4, 2, 1));
  return v;
}

class CudaThinEdges : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaThinEdges, EveryPassWithinBudgetOnTheForcedKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), GetParam().batch, /*planned=*/false);
}

INSTANTIATE_TEST_SUITE_P(Edges, CudaThinEdges, ::testing::ValuesIn(edge_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

// Two runs of the same inputs give the same bits (fixed-order sums, the forward's partials added
// in split order, wgrad's in chunk order, no atomics).
TEST(CudaThin, RunsAreBitIdentical) {
  TGRAD_SKIP_WITHOUT_CUDA();
  // Forward channel splits; wgrad chunks.
  for (const ConvLayerSpec& l : {bench::layer1d("t", "t", 3, 96, 1, 37, 16, 8, 4),
                                 bench::layer1d("t", "t", 2, 8, 3, 1500, 4, 2, 1)}) {
    const testing::LayerOperands in = testing::layer_operands(l, l.batch, kFloat32, 29);
    const testing::ConvSettingsGuard restore;
    set_conv_kernel("thin");
    const Device cuda(kCUDA);
    const Result a = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
    const Result b = run(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda), in.dy.to(cuda));
    EXPECT_GT(cuda::last_conv_plan(cuda::ConvPass::forward).thin.splits *
                  cuda::last_conv_plan(cuda::ConvPass::wgrad).thin.splits,
              1);
    EXPECT_EQ(a.y.to(Device(kCPU)).to_vector<float>(), b.y.to(Device(kCPU)).to_vector<float>());
    EXPECT_EQ(a.dx.to(Device(kCPU)).to_vector<float>(), b.dx.to(Device(kCPU)).to_vector<float>());
    EXPECT_EQ(a.dw.to(Device(kCPU)).to_vector<float>(), b.dw.to(Device(kCPU)).to_vector<float>());
  }
}

// float64 has no thin kernel: forcing it is a tgrad::Error naming the kernel and the dtype.
TEST(CudaThin, Float64ForcedIsAClearError) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const ConvLayerSpec l = bench::layer2d("t", "t", 2, 8, 3, 5, 4, 2, 1);
  const testing::LayerOperands in = testing::layer_operands(l, 2, kFloat64, 29);
  const testing::ConvSettingsGuard restore;
  set_conv_kernel("fwd=thin");
  const Device cuda(kCUDA);
  const std::string e = testing::error_of(
      [&] { testing::layer_conv(l, in.x.to(cuda), in.w.to(cuda), in.b.to(cuda)); });
  EXPECT_NE(e.find("the forced kernel 'thin' cannot run"), std::string::npos) << e;
  EXPECT_NE(e.find("float64 is not float32"), std::string::npos) << e;
}

}  // namespace
}  // namespace tgrad
