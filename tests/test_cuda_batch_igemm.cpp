// The batch-positions implicit GEMMs on the GPU, forced: batch-igemm
// (cuda/conv_transpose_batch_igemm.cu, mma.sync, both precisions, forward and dgrad) and
// batch-wgmma (sm_90a's wgmma: cuda/conv_transpose_batch_wgmma.cu for forward and dgrad at both
// precisions, cuda/conv_transpose_wgrad_wgmma.cu for wgrad at both). Every layer of the
// decoder suite at batch 2 (so a tile's columns, or wgrad's K steps, cross samples), grouped and
// depthwise ones included (one GEMM per group), and edge geometries (dilation, output padding,
// phases without taps, M and C off the tile sizes, unequal strides, groups of odd sizes), each
// element of y (with bias), dx and dw against float64 within its own error budget
// (tests/conv_budget.h), and the plan that ran is the forced kernel with the precision's
// multiply. batch-wgmma's two ways of loading B (from a
// channels-last copy of src, or gathered from src) are both among these layers (the plan says
// which, by M and taps: ConvPlan.BatchWgmmaCopiesSrcChannelsLastWhereItPays).
#include <gtest/gtest.h>

#include <functional>
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

using Result = testing::ForwardDgrad;
constexpr auto run = testing::forward_dgrad;

// `also(high)` runs after each precision's checks, while that call's plans are the last ones.
void check_layer(const ConvLayerSpec& l, int64_t batch, const std::string& kernel,
                 const std::function<void(bool high)>& also = {}) {
  const testing::LayerOperands o = testing::layer_operands(l, batch, kFloat32, 11);
  const Tensor &x = o.x, &w = o.w, &b = o.b, &dy = o.dy;
  const int64_t taps = o.taps;
  const Result ref = run(l, x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), dy.to(kFloat64));
  const Result mag =
      run(l, abs(x).to(kFloat64), abs(w).to(kFloat64), abs(b).to(kFloat64), abs(dy).to(kFloat64));

  const testing::ConvSettingsGuard restore;
  set_conv_kernel("fwd=" + kernel + ",dgrad=" + kernel);
  const Device cuda(kCUDA);
  const bool wgmma = kernel == cuda::kKernelBatchWgmma;
  for (const char* precision : {"highest", "high"}) {
    SCOPED_TRACE(l.id + " at " + precision);
    set_float32_matmul_precision(precision);
    const bool high = std::string(precision) == "high";
    const Result got = run(l, x.to(cuda), w.to(cuda), b.to(cuda), dy.to(cuda));
    // One more term than the taps: the bias.
    EXPECT_TRUE(within_budget(got.y, ref.y, mag.y,
                              budget_factor(high, l.in_channels / l.groups * taps + 1), "forward"));
    EXPECT_TRUE(within_budget(got.dx, ref.dx, mag.dx,
                              budget_factor(high, l.out_channels / l.groups * taps), "dgrad"));
    for (cuda::ConvPass pass : {cuda::ConvPass::forward, cuda::ConvPass::dgrad}) {
      const cuda::ConvPlan plan = cuda::last_conv_plan(pass);
      EXPECT_EQ(plan.kernel, kernel) << plan.describe();
      EXPECT_EQ(plan.batch.split, !high) << plan.describe();
      EXPECT_EQ(plan.batch.wgmma, wgmma) << plan.describe();
    }
    if (also) also(high);
  }
}

// wgrad forced to batch-wgmma at both precisions: every element of dw within its budget (a sum
// over the batch's positions), the plan that ran the forced kernel with the precision's multiply
// and tile, and its K slices summed in order: a second run gives the same bits.
void check_wgrad_layer(const ConvLayerSpec& l, int64_t batch) {
  const testing::LayerOperands o = testing::layer_operands(l, batch, kFloat32, 12);
  const Tensor &x = o.x, &w = o.w, &b = o.b, &dy = o.dy;
  const auto dw_of = [&](const Tensor& xs, const Tensor& ws, const Tensor& bs, const Tensor& dys) {
    const Tensor wr = ws.detach().requires_grad_();
    sum(testing::layer_conv(l, xs, wr, bs) * dys).backward();
    return wr.grad();
  };
  const Tensor ref = dw_of(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), dy.to(kFloat64));
  const Tensor mag =
      dw_of(abs(x).to(kFloat64), abs(w).to(kFloat64), abs(b).to(kFloat64), abs(dy).to(kFloat64));

  const testing::ConvSettingsGuard restore;
  set_conv_kernel(std::string("wgrad=") + cuda::kKernelBatchWgmma);
  const Device cuda(kCUDA);
  for (const char* precision : {"highest", "high"}) {
    SCOPED_TRACE(l.id + " at " + precision);
    set_float32_matmul_precision(precision);
    const bool high = std::string(precision) == "high";
    const Tensor got = dw_of(x.to(cuda), w.to(cuda), b.to(cuda), dy.to(cuda));
    EXPECT_TRUE(within_budget(got, ref, mag, budget_factor(high, o.positions), "wgrad"));
    const cuda::ConvPlan plan = cuda::last_conv_plan(cuda::ConvPass::wgrad);
    EXPECT_EQ(plan.kernel, cuda::kKernelBatchWgmma) << plan.describe();
    EXPECT_EQ(plan.batch_wgrad.split, !high) << plan.describe();
    // 3xTF32 runs 64 x 128 where a group's rows fit 64, else 128 x 64.
    const int64_t cig = l.in_channels / l.groups;
    EXPECT_EQ(plan.batch_wgrad.bm, high || cig > 64 ? 128 : 64) << plan.describe();
    EXPECT_GE(plan.batch_wgrad.splits, 1) << plan.describe();
    const Tensor again = dw_of(x.to(cuda), w.to(cuda), b.to(cuda), dy.to(cuda));
    // Tolerance{} is exact: no atomics, the slices summed in a fixed order.
    EXPECT_TRUE(testing::tensors_close(again, got, testing::Tolerance{}, "wgrad run twice"));
  }
}

// batch-wgmma is built for sm_90a alone.
#define SKIP_WITHOUT_WGMMA() \
  if (!cuda::wgmma_supported(0)) GTEST_SKIP() << "batch-wgmma needs compute capability 9.0"

class CudaBatchIgemmSuite : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaBatchIgemmSuite, ForwardAndDgradWithinBudgetOnTheForcedKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), 2, cuda::kKernelBatchIgemm);
}

TEST_P(CudaBatchIgemmSuite, ForwardAndDgradWithinBudgetOnTheForcedWgmmaKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_WGMMA();
  check_layer(GetParam(), 2, cuda::kKernelBatchWgmma);
}

TEST_P(CudaBatchIgemmSuite, WgradWithinBudgetOnTheForcedWgmmaKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_WGMMA();
  check_wgrad_layer(GetParam(), 2);
}

INSTANTIATE_TEST_SUITE_P(Suite, CudaBatchIgemmSuite, ::testing::ValuesIn(bench::decoder_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

// Geometries the suite lacks: each stresses one part of the phase arithmetic or the tiling.
std::vector<ConvLayerSpec> edge_layers() {
  using bench::layer1d;
  using bench::layer2d;
  std::vector<ConvLayerSpec> v;
  // Dilation 2 with stride 3 and output padding: taps spread unevenly over the phases.
  ConvLayerSpec a = layer2d("dil2_s3_op1", "edge", 3, 37, 45, 7, 3, 3, 2, 1);
  a.in_size = {7, 9};
  a.dilation = {2, 2};
  v.push_back(a);
  // k1 s4: three of four phases have no tap, their outputs are the bias alone.
  v.push_back(layer1d("k1_s4", "edge", 3, 40, 70, 33, 1, 4, 0, 3));
  // M = 130: a partial second row tile; k5 s2 p2 op1.
  ConvLayerSpec c = layer2d("m130_k5_s2", "edge", 3, 64, 130, 6, 5, 2, 2, 1);
  c.in_size = {6, 5};
  v.push_back(c);
  // C_out = 1 with k16 s8 (Conv-TasNet's shape, small).
  v.push_back(layer1d("co1_k16_s8", "edge", 3, 50, 1, 20, 16, 8, 4));
  // Unequal strides and kernels: (2, 1), (4, 3).
  ConvLayerSpec e = layer2d("s2x1_k4x3", "edge", 3, 33, 60, 5, 4, 2, 1);
  e.in_size = {5, 11};
  e.stride = {2, 1};
  e.kernel = {4, 3};
  e.padding = {1, 1};
  v.push_back(e);
  // Padding larger than the kernel reach on the left: the first phases start at q0 > 0.
  v.push_back(layer1d("pad_gt_k", "edge", 3, 48, 36, 40, 4, 2, 3));
  // Three groups of 20 -> 18 channels (off the tile sizes), k4 s2: one GEMM per group and phase,
  // each reading and writing its own channels (and bias).
  ConvLayerSpec g3 = layer2d("groups3", "edge", 3, 60, 54, 7, 4, 2, 1, 0, 3);
  g3.in_size = {7, 9};
  v.push_back(g3);
  return v;
}

class CudaBatchIgemmEdges : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaBatchIgemmEdges, ForwardAndDgradWithinBudgetOnTheForcedKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_layer(GetParam(), GetParam().batch, cuda::kKernelBatchIgemm);
}

TEST_P(CudaBatchIgemmEdges, ForwardAndDgradWithinBudgetOnTheForcedWgmmaKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_WGMMA();
  check_layer(GetParam(), GetParam().batch, cuda::kKernelBatchWgmma);
}

TEST_P(CudaBatchIgemmEdges, WgradWithinBudgetOnTheForcedWgmmaKernel) {
  TGRAD_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_WGMMA();
  check_wgrad_layer(GetParam(), GetParam().batch);
}

INSTANTIATE_TEST_SUITE_P(Edges, CudaBatchIgemmEdges, ::testing::ValuesIn(edge_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

// batch-wgmma's TMA copies (1xTF32, channels-last B:
// ConvPlan.BatchWgmmaCopiesByTmaWhereOneMapServes) on layers that reach every part of the maps: the
// im2col box's negative lower corners (padding), tiles whose 128 columns cross samples, a partial
// second row tile, groups whose channels are padded to c_pad inside the map's channel axis,
// dilation, the 64-row instance, and dgrad's traversal strides 2, 5 and 8. Each names the passes
// that must run by TMA; every element of y and dx within its budget, as above.
struct TmaLayer {
  ConvLayerSpec l;
  bool fwd, dgrad;  // the passes planned by TMA
};

std::vector<TmaLayer> tma_layers() {
  using bench::layer1d;
  using bench::layer2d;
  std::vector<TmaLayer> v;
  ConvLayerSpec a = layer2d("k4_s2_m130", "tma", 3, 40, 130, 7, 4, 2, 1);
  a.in_size = {7, 9};
  v.push_back({a, true, false});
  ConvLayerSpec b = layer2d("k3_s2_op1_groups2", "tma", 3, 72, 256, 6, 3, 2, 1, 1, 2);
  b.in_size = {6, 5};
  v.push_back({b, true, false});
  v.push_back({layer1d("k16_s8", "tma", 3, 96, 80, 20, 16, 8, 4), true, true});
  ConvLayerSpec d = layer2d("k3_d2", "tma", 2, 48, 128, 9, 3, 1, 2);
  d.in_size = {9, 11};
  d.dilation = {2, 2};
  v.push_back({d, true, false});
  ConvLayerSpec e = layer2d("k4_s1_m64", "tma", 2, 40, 64, 10, 4, 1, 1);
  e.in_size = {10, 12};
  v.push_back({e, true, true});  // dgrad: 40 rows x 16 taps, the 64-row instance too
  // Forward: 40 rows x 16 taps, the 64-row tile by TMA from 512 uses.
  v.push_back({layer2d("dgrad_s2", "tma", 2, 256, 40, 6, 4, 2, 1), true, true});
  v.push_back({layer1d("dgrad_s5", "tma", 2, 64, 48, 30, 10, 5, 0), false, true});
  return v;
}

class CudaBatchWgmmaTma : public ::testing::TestWithParam<TmaLayer> {};

TEST_P(CudaBatchWgmmaTma, ForwardAndDgradWithinBudget) {
  TGRAD_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_WGMMA();
  const TmaLayer& t = GetParam();
  // Both precisions within budget on batch-wgmma; TMA copies the named passes at "high" only
  // (3xTF32 copies its residual planes by cp.async).
  check_layer(t.l, t.l.batch, cuda::kKernelBatchWgmma, [&](bool high) {
    const cuda::ConvPlan fwd = cuda::last_conv_plan(cuda::ConvPass::forward);
    const cuda::ConvPlan dgrad = cuda::last_conv_plan(cuda::ConvPass::dgrad);
    EXPECT_EQ(fwd.batch.tma, high && t.fwd) << fwd.describe();
    EXPECT_EQ(dgrad.batch.tma, high && t.dgrad) << dgrad.describe();
  });
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaBatchWgmmaTma, ::testing::ValuesIn(tma_layers()),
                         [](const ::testing::TestParamInfo<TmaLayer>& layer) {
                           return layer.param.l.id;
                         });

// batch-wgmma's K slices (BatchIgemmPlan::k_slices) on layers whose grids leave most SMs idle,
// so that both passes run in slices at "highest" (3xTF32; "high" is never sliced): a 1-D k16 s8
// upsampler (B from the channels-last copy; the forward in 8 slices, the dgrad's 64 steps in 16),
// and a 2-D k3 s2 layer (B gathered; its dgrad on the 64-row tile) whose phases hold 4, 2, 2 and 1
// taps, so that the short phases' last slices have no step and add zero partials. Every element
// of y and dx within its budget (check_layer); the slices summed in a fixed order: a second run
// gives the same bits.
std::vector<ConvLayerSpec> sliced_layers() {
  std::vector<ConvLayerSpec> v;
  v.push_back(bench::layer1d("k16_s8", "slices", 2, 256, 128, 32, 16, 8, 4));
  v.push_back(bench::layer2d("k3_s2_op1", "slices", 2, 64, 96, 6, 3, 2, 1, 1));
  return v;
}

class CudaBatchWgmmaSlices : public ::testing::TestWithParam<ConvLayerSpec> {};

TEST_P(CudaBatchWgmmaSlices, ForwardAndDgradWithinBudgetAndDeterministic) {
  TGRAD_SKIP_WITHOUT_CUDA();
  SKIP_WITHOUT_WGMMA();
  const ConvLayerSpec& l = GetParam();
  check_layer(l, l.batch, cuda::kKernelBatchWgmma, [&](bool high) {
    for (cuda::ConvPass pass : {cuda::ConvPass::forward, cuda::ConvPass::dgrad}) {
      const cuda::ConvPlan plan = cuda::last_conv_plan(pass);
      EXPECT_EQ(plan.batch.k_slices > 1, !high) << plan.describe();
    }
  });
  const testing::LayerOperands o = testing::layer_operands(l, l.batch, kFloat32, 13);
  const Device cuda(kCUDA);
  const Tensor x = o.x.to(cuda), w = o.w.to(cuda), b = o.b.to(cuda), dy = o.dy.to(cuda);
  const testing::ConvSettingsGuard restore;
  set_conv_kernel(std::string("fwd=") + cuda::kKernelBatchWgmma +
                  ",dgrad=" + cuda::kKernelBatchWgmma);
  set_float32_matmul_precision("highest");
  const Result first = run(l, x, w, b, dy);
  const Result second = run(l, x, w, b, dy);
  // Tolerance{} is exact: each tile's partials are summed in slice order.
  EXPECT_TRUE(testing::tensors_close(second.y, first.y, testing::Tolerance{}, "forward twice"));
  EXPECT_TRUE(testing::tensors_close(second.dx, first.dx, testing::Tolerance{}, "dgrad twice"));
}

INSTANTIATE_TEST_SUITE_P(Layers, CudaBatchWgmmaSlices, ::testing::ValuesIn(sliced_layers()),
                         [](const ::testing::TestParamInfo<ConvLayerSpec>& layer) {
                           return layer.param.id;
                         });

}  // namespace
}  // namespace tgrad
