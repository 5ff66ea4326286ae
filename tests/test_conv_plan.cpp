// The conv planner (cuda/conv_plan.h) on the CPU: the plan of every suite layer and S1-S5 at both
// precisions and all three passes with H100 caps, the kernels of docs/performance.md's table,
// rule-level declines, the override and its errors, the trace line, plan_conv_call's plan cache
// (settings changes, failures, its bound, concurrent callers); and on a GPU, the runtime override
// and the plan that ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench/decoder_layers.h"
#include "core/conv_geometry.h"
#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/random.h"
#include "cuda/conv_path_rules.h"
#include "cuda/conv_plan.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using bench::ConvLayerSpec;
using cuda::ConvPass;
using cuda::ConvPlan;
using cuda::DeviceCaps;
using cuda::plan_conv;

constexpr ConvPass kPasses[] = {ConvPass::forward, ConvPass::dgrad, ConvPass::wgrad};

ConvGeometry geometry(const ConvLayerSpec& l, Precision precision) {
  ConvGeometry g = make_conv_transpose_geometry(bench::conv_args(l));
  g.precision = precision;
  return g;
}

// S1-S5 as bench/conv_bench.cu defines them (docs/performance.md): 1-D S1-S4, 2-D S5.
std::vector<ConvLayerSpec> s_workloads() {
  using bench::layer1d;
  std::vector<ConvLayerSpec> w = {
      layer1d("S1", "S1", 16, 32, 64, 131072, 3, 2, 1),
      layer1d("S2", "S2", 64, 64, 128, 65536, 3, 1, 0),
      layer1d("S3", "S3", 64, 128, 128, 65536, 3, 1, 0),
      layer1d("S4", "S4", 32, 32, 64, 131072, 5, 1, 0),
  };
  w[0].dilation = {2, 0};
  w[3].dilation = {3, 0};
  ConvLayerSpec s5 = bench::layer2d("S5", "S5", 8, 32, 32, 512, 3, 1, 1);
  s5.in_size = {512, 1024};
  s5.kernel = {3, 7};
  s5.padding = {1, 3};
  w.push_back(s5);
  return w;
}

// The candidates of `pass`, in priority order.
std::vector<std::string> candidates(ConvPass pass) {
  std::vector<std::string> names;
  for (const cuda::Candidate& c : cuda::conv_candidates())
    if (c.pass == pass) names.push_back(c.kernel);
  return names;
}

// The plan is a known kernel of the pass and its declined list names, with a reason, exactly
// the candidates above it, in order.
void expect_consistent(const ConvPlan& plan, ConvPass pass, const std::string& config) {
  const std::vector<std::string> names = candidates(pass);
  size_t chosen = names.size();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == plan.kernel) chosen = i;
  ASSERT_LT(chosen, names.size()) << config << ": unknown kernel '" << plan.kernel << "'";
  ASSERT_EQ(plan.declined.size(), chosen) << config << ": " << plan.describe();
  for (size_t i = 0; i < chosen; ++i) {
    EXPECT_EQ(plan.declined[i].kernel, names[i]) << config;
    EXPECT_FALSE(plan.declined[i].reason.empty()) << config << ": " << names[i];
  }
}

// The direct kernels' share of the planner, written out independently of it: few channels per
// group (at most 8 in or out, or groups of at most 1024 channel pairs); for the forward at most
// 256 products a output (C_in/groups x taps per stride phase); for a float32 wgrad at "high"
// with groups 1 at most 16 (co, tap) columns.
// For a forward: of the (output position, tap of its stride phase) pairs, the share whose x
// index lands inside x, both axes multiplied (counted directly, output by output).
double forward_tap_use(const ConvLayerSpec& l, const ConvGeometry& g) {
  double use = 1.0;
  for (int a = 0; a < l.dims; ++a) {
    const auto u = static_cast<size_t>(a), v = static_cast<size_t>(2 - l.dims + a);
    int64_t pairs = 0, inside = 0;
    for (int64_t o = 0; o < g.out_size[v]; ++o) {
      for (int64_t k = 0; k < l.kernel[u]; ++k) {
        const int64_t t = o + l.padding[u] - k * l.dilation[u];
        if (((t % l.stride[u]) + l.stride[u]) % l.stride[u] != 0) continue;
        ++pairs;
        if (t >= 0 && t / l.stride[u] < l.in_size[u]) ++inside;
      }
    }
    if (pairs > 0) use *= static_cast<double>(inside) / static_cast<double>(pairs);
  }
  return use;
}

bool expect_direct(ConvPass pass, const ConvLayerSpec& l, DType dtype, Precision precision) {
  const int64_t cig = l.in_channels / l.groups, cog = l.out_channels / l.groups;
  if (pass == ConvPass::forward) {
    // Under a quarter of the taps inside x, short sums over those that land: the direct forward.
    const ConvGeometry g = geometry(l, precision);
    int64_t taps_per_phase = 1;
    for (int a = 0; a < l.dims; ++a) {
      const auto u = static_cast<size_t>(a);
      const int64_t step = l.stride[u] / std::gcd(l.stride[u], l.dilation[u]);
      taps_per_phase *= (l.kernel[u] + step - 1) / step;
    }
    const double use = forward_tap_use(l, g);
    if (use < 0.25 && static_cast<double>(cig * taps_per_phase) * use <= 256.0) return true;
  }
  // Grouped: up to 32 x 32 per group (a float32 wgrad 2048 channel pairs), but a float32
  // forward or dgrad past 16 x 16 goes to the batch-positions kernels first.
  const int64_t group_bound = pass == ConvPass::wgrad && dtype == DType::float32 ? 2048 : 1024;
  if (!(std::min(cig, cog) <= 8 || (l.groups > 1 && cig * cog <= group_bound))) return false;
  if (pass != ConvPass::wgrad && dtype == DType::float32 && l.groups > 1 &&
      std::min(cig, cog) > 8 && cig * cog > 256)
    return false;
  if (pass == ConvPass::wgrad) {
    if (dtype != DType::float32) return true;
    // batch-wgmma keeps the calls narrow through their groups alone; at "high" the GEMM path's
    // TF32 those with more than 16 (C_out, tap) columns, at "highest" batch-wgmma's 3xTF32 those
    // narrow through C_out alone (groups 1, more than 8 input channels); batch-wgmma also takes a
    // grouped call whose group GEMM has more than 8 rows and at least 1024 entries (rows x
    // C_out/groups x taps) at "high", 2048 at "highest".
    int64_t cols = cog;
    for (int a = 0; a < l.dims; ++a)
      cols *= l.kernel[static_cast<size_t>(a)];
    if (precision == Precision::highest)
      return std::min(cig, cog) <= 8 && !(l.groups == 1 && cig > 8) &&
             !(l.groups > 1 && cig > 8 && cig * cols >= 2048);
    return std::min(cig, cog) <= 8 && !(l.groups == 1 && cols > 16) &&
           !(l.groups > 1 && cig > 8 && cig * cols >= 1024);
  }
  if (pass != ConvPass::forward) return true;
  int64_t taps_per_phase = 1;
  for (int a = 0; a < l.dims; ++a) {
    const auto u = static_cast<size_t>(a);
    const int64_t step = l.stride[u] / std::gcd(l.stride[u], l.dilation[u]);
    taps_per_phase *= (l.kernel[u] + step - 1) / step;
  }
  return cig * taps_per_phase <= 256;
}

// Whether the thin row takes the call: a float32 forward or dgrad with at most four output
// channels per group that is not depthwise; a forward's cell (strides x C_out/groups) within 32
// slots with at least half its multiplies useful, a dgrad's window (C_out/groups x taps) within 64.
// No wgrad: the thin wgrad runs at "highest" only where batch-wgmma cannot, and these caps (an
// H100's) have it. Of the depthwise calls, the 2-D forwards under 2^20 outputs whose cells read
// 2 x 2 inputs.
bool expect_thin(ConvPass pass, const ConvLayerSpec& l, DType dtype) {
  const int64_t cog = l.out_channels / l.groups;
  if (dtype != DType::float32 || cog > 4) return false;
  int64_t taps = 1, used = cog, inputs = 1;  // a 1-D spec fills axis 0 only
  bool two_by_two = l.dims == 2;
  for (size_t a = 0; a < static_cast<size_t>(l.dims); ++a) {
    taps *= l.kernel[a];
    used *= l.stride[a];
    const int64_t axis_inputs = ((l.kernel[a] - 1) * l.dilation[a] + l.stride[a]) / l.stride[a];
    inputs *= axis_inputs;
    two_by_two = two_by_two && axis_inputs == 2;
  }
  const bool depthwise = l.groups == l.in_channels && l.groups == l.out_channels;
  if (depthwise && (pass != ConvPass::forward || !two_by_two)) return false;
  if (depthwise && geometry(l, Precision::high).y_numel() >= (int64_t{1} << 20)) return false;
  if (pass == ConvPass::dgrad) return cog * taps <= 64;
  // The thin wgrad runs at "highest" where batch-wgmma cannot (these caps have it).
  if (pass == ConvPass::wgrad) return false;
  if (used > 32) return false;
  int64_t block = 1;
  for (int64_t b : {1, 2, 4, 8, 12, 16, 24, 32}) {
    if (used <= b) {
      block = b;
      break;
    }
  }
  return 2 * taps * cog >= inputs * block;
}

// Whether a thin call goes to the GEMM path instead (gemm_first): groups 1, at least 2048 input
// positions a sample, C_in >= C_out x taps, and C_in x C_out x taps of at least 2048 at "high"
// (forward and dgrad) or 4096 at "highest" (forward only).
bool expect_gemm_first(ConvPass pass, const ConvLayerSpec& l, DType dtype, Precision precision) {
  if (!expect_thin(pass, l, dtype) || l.groups != 1) return false;
  const int64_t positions = l.dims == 2 ? l.in_size[0] * l.in_size[1] : l.in_size[0];
  const int64_t rows = l.out_channels * (l.dims == 2 ? l.kernel[0] * l.kernel[1] : l.kernel[0]);
  const bool high = precision == Precision::high;
  if (!high && pass != ConvPass::forward) return false;
  return positions >= 2048 && l.in_channels >= rows && l.in_channels * rows >= (high ? 2048 : 4096);
}

TEST(ConvPlan, EverySuiteLayerPlansAKnownKernelAndExplainsTheDeclines) {
  std::vector<ConvLayerSpec> layers = bench::decoder_layers();
  for (const ConvLayerSpec& s : s_workloads())
    layers.push_back(s);
  const DeviceCaps caps = DeviceCaps::h100();
  for (const ConvLayerSpec& l : layers) {
    for (Precision precision : {Precision::highest, Precision::high}) {
      const ConvGeometry g = geometry(l, precision);
      for (ConvPass pass : kPasses) {
        for (DType dtype : {DType::float32, DType::float64}) {
          const std::string config = l.id + " " + cuda::conv_pass_name(pass) + " " +
                                     dtype_name(dtype) +
                                     (precision == Precision::high ? " high" : " highest");
          const ConvPlan plan = plan_conv(pass, g, dtype, caps);
          expect_consistent(plan, pass, config);
          // The tensor cores take float32 only, the row kernels and wgrad's mma.sync groups 1
          // only (the batch-positions kernels, wgrad's too, run one GEMM per group); depthwise
          // layers take the depthwise kernels (wgrad up to 32 taps); narrow calls (few channels
          // per group) the direct kernels, at either dtype; the other calls the tensor cores
          // decline take the GEMM path unless one sample's columns pass its workspace (S4, S5 in
          // float64), and only then the general kernels.
          const bool depthwise = g.groups == g.in_channels && g.groups == g.out_channels;
          const bool gemm_first = expect_gemm_first(pass, l, dtype, precision);
          const bool thin = expect_thin(pass, l, dtype) && !gemm_first;
          const bool dw_row =
              depthwise && !thin && (pass != ConvPass::wgrad || g.kernel[0] * g.kernel[1] <= 32);
          if (gemm_first) {
            EXPECT_EQ(plan.kernel, "gemm") << config << ": " << plan.describe();
          } else if (thin) {
            EXPECT_EQ(plan.kernel, "thin") << config << ": " << plan.describe();
          } else if (!dw_row && expect_direct(pass, l, dtype, precision)) {
            EXPECT_EQ(plan.kernel, "direct") << config << ": " << plan.describe();
          } else if (dtype == DType::float32 && g.groups > 1 && !dw_row) {
            EXPECT_TRUE(plan.kernel == "batch-igemm" || plan.kernel == "batch-wgmma" ||
                        plan.kernel == "gemm")
                << config << ": " << plan.describe();
          } else if (dtype == DType::float64 || g.groups > 1) {
            EXPECT_NE(plan.kernel, "wgmma") << config;
            EXPECT_NE(plan.kernel, "mma.sync") << config;
            const bool over_budget =
                plan.describe().find("over the workspace budget") != std::string::npos;
            EXPECT_EQ(plan.kernel, dw_row ? "depthwise" : (over_budget ? "fma" : "gemm")) << config;
          } else {
            EXPECT_NE(plan.kernel, "direct") << config << ": " << plan.describe();
          }
        }
      }
    }
  }
}

// docs/performance.md's table, "kernel" column (run 20a, H200; the H100 has the same caps for
// these rules: compute capability 9.0 and 227 KB of shared memory per CTA).
TEST(ConvPlan, S1ToS5RunTheKernelsOfThePerformanceTable) {
  struct Row {
    const char* id;
    ConvPass pass;
    const char* highest;
    const char* high;
  };
  const Row rows[] = {
      {"S1", ConvPass::forward, "wgmma, fill", "wgmma, fill"},
      {"S1", ConvPass::dgrad, "batch-igemm", "batch-igemm"},
      {"S1", ConvPass::wgrad, "wgrad (mma.sync)", "wgrad (mma.sync)"},
      {"S2", ConvPass::forward, "batch-wgmma", "batch-wgmma"},
      {"S2", ConvPass::dgrad, "batch-wgmma", "wgmma"},
      {"S2", ConvPass::wgrad, "wgrad (batch-wgmma)", "wgrad (mma.sync)"},
      {"S3", ConvPass::forward, "batch-wgmma", "batch-wgmma"},
      {"S3", ConvPass::dgrad, "batch-wgmma", "batch-wgmma"},
      {"S3", ConvPass::wgrad, "wgrad (batch-wgmma)", "wgrad (batch-wgmma)"},
      {"S4", ConvPass::forward, "batch-wgmma", "wgmma, 2 taps in flight"},
      {"S4", ConvPass::dgrad, "mma.sync", "wgmma, 2 taps in flight"},
      {"S4", ConvPass::wgrad, "wgrad (mma.sync)", "wgrad (mma.sync)"},
      {"S5", ConvPass::forward, "wgmma, row fold", "wgmma, 2 taps in flight, row fold"},
      {"S5", ConvPass::dgrad, "wgmma, row fold", "wgmma, 2 taps in flight, row fold"},
      {"S5", ConvPass::wgrad, "wgrad (mma.sync)", "wgrad (mma.sync)"},
  };
  const std::vector<ConvLayerSpec> s = s_workloads();
  for (const Row& row : rows) {
    const ConvLayerSpec& l = s[static_cast<size_t>(row.id[1] - '1')];
    ASSERT_EQ(l.id, row.id);
    for (Precision precision : {Precision::highest, Precision::high}) {
      const ConvPlan plan =
          plan_conv(row.pass, geometry(l, precision), DType::float32, DeviceCaps::h100());
      EXPECT_EQ(plan.label(), precision == Precision::high ? row.high : row.highest)
          << plan.describe();
    }
  }
}

// A row implicit-GEMM plan (wgmma, mma.sync) counts its shared memory as the kernels lay it out
// (two converted windows, two weight stages, the raw stages) and leaves room for its min_blocks
// CTAs on an SM with the reserved kilobyte and the static tap table each, within the 227 KB one
// CTA may have.
void expect_row_plan_smem_fits(const ConvPlan& plan, const DeviceCaps& caps) {
  const cuda::IgemmProblem& p = plan.igemm;
  const cuda::IgemmTiling& t = plan.tile;
  EXPECT_EQ(p.a_floats, t.a_smem_taps * t.bm * t.chunk) << plan.describe();
  EXPECT_EQ(p.smem_bytes, (2 * int64_t{p.conv_floats} + 2 * p.a_floats +
                           int64_t{p.raw_stages} * t.chunk * p.raw_pitch) *
                              4)
      << plan.describe();
  EXPECT_GE(p.raw_stages, 2) << plan.describe();
  EXPECT_LE(p.raw_stages, 4) << plan.describe();
  const int64_t per_cta = p.smem_bytes + cuda::kIgemmStaticSmem + cuda::kReservedSmemPerCta;
  EXPECT_LE(t.min_blocks * per_cta, caps.smem_per_sm) << plan.describe();
  EXPECT_LE(p.smem_bytes + cuda::kIgemmStaticSmem, caps.smem_per_block_optin) << plan.describe();
}

// The "high" wgmma instance that issues all of a row's taps at once (S1 forward, S2 dgrad) stages
// their weights in shared memory, two stages of three taps; the others keep A in registers. Its
// shared memory must still leave two CTAs per SM with three raw stages on S2's window.
TEST(ConvPlan, WgmmaAllTapsInstanceStagesItsWeightsInSharedMemory) {
  const std::vector<ConvLayerSpec> s = s_workloads();
  const auto plan_of = [&](int index, ConvPass pass, Precision precision) {
    return plan_conv(pass, geometry(s[static_cast<size_t>(index)], precision), DType::float32,
                     DeviceCaps::h100());
  };
  for (const ConvPlan& plan : {plan_of(1, ConvPass::dgrad, Precision::high),
                               plan_of(0, ConvPass::forward, Precision::high)}) {
    ASSERT_EQ(plan.kernel, "wgmma") << plan.describe();
    EXPECT_EQ(plan.wgmma_max_taps, 3) << plan.describe();
    EXPECT_EQ(plan.tile.a_smem_taps, 3) << plan.describe();
    EXPECT_EQ(plan.igemm.a_floats, 3 * 64 * 16) << plan.describe();
    EXPECT_EQ(plan.tile.min_blocks, 2) << plan.describe();
    expect_row_plan_smem_fits(plan, DeviceCaps::h100());
  }
  EXPECT_GE(plan_of(1, ConvPass::dgrad, Precision::high).igemm.raw_stages, 3);
  for (const ConvPlan& plan : {plan_of(3, ConvPass::dgrad, Precision::high),
                               plan_of(4, ConvPass::forward, Precision::highest)}) {
    ASSERT_EQ(plan.kernel, "wgmma") << plan.describe();
    EXPECT_EQ(plan.tile.a_smem_taps, 0) << plan.describe();
    EXPECT_EQ(plan.igemm.a_floats, 0) << plan.describe();
  }
}

// Every row implicit-GEMM plan (wgmma, mma.sync; planned or forced) over a sweep of geometries
// counts its shared memory and fits its CTAs per SM (expect_row_plan_smem_fits).
TEST(ConvPlan, RowKernelPlansFitTheirCtasPerSm) {
  const DeviceCaps h100 = DeviceCaps::h100();
  int checked = 0, weights_staged = 0;
  for (int dims : {1, 2}) {
    for (int64_t ci : {8, 40, 64, 256}) {
      for (int64_t co : {24, 64, 100}) {
        for (int64_t k : {2, 3, 5, 7}) {
          for (int64_t stride : {1, 2, 3}) {
            for (int64_t dilation : {1, 3}) {
              ConvLayerSpec l = dims == 1
                                    ? bench::layer1d("t", "t", 2, ci, co, 3000, k, stride, k / 2)
                                    : bench::layer2d("t", "t", 1, ci, co, 9, k, stride, k / 2);
              if (dims == 2) l.in_size = {9, 1500};
              l.dilation = {dilation, dims == 2 ? dilation : 1};
              for (Precision precision : {Precision::highest, Precision::high}) {
                for (ConvPass pass : {ConvPass::forward, ConvPass::dgrad}) {
                  for (const char* forced : {"", "wgmma", "mma.sync"}) {
                    ConvPlan plan;
                    try {
                      plan = plan_conv(pass, geometry(l, precision), DType::float32, h100, forced);
                    } catch (const Error&) {
                      continue;  // a forced kernel that cannot run the call
                    }
                    if (plan.kernel != "wgmma" && plan.kernel != "mma.sync") continue;
                    ++checked;
                    weights_staged += plan.tile.a_smem_taps > 0;
                    expect_row_plan_smem_fits(plan, h100);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  // The sweep reaches both kernels and the instance that stages its weights.
  EXPECT_GT(checked, 100);
  EXPECT_GT(weights_staged, 10);
}

// 128 x 128: rows long enough to fill the implicit GEMM's tiles.
ConvGeometry small_2d(int64_t ci, int64_t co, int64_t groups, Precision precision) {
  ConvLayerSpec l = bench::layer2d("t", "t", 2, ci, co, 128, 3, 1, 1, 0, groups);
  return geometry(l, precision);
}

std::string reason_of(const ConvPlan& plan, const std::string& kernel) {
  for (const cuda::Declined& d : plan.declined)
    if (d.kernel == kernel) return d.reason;
  return "<not declined>";
}

TEST(ConvPlan, GroupsDeclineTheRowKernelsNamingGroups) {
  // Groups of 64 x 64 channels: too wide for the direct kernels. The row kernels and wgrad's
  // split-K GEMM take groups 1 only; the batch kernels run one GEMM per group (M = 64 x 9 taps:
  // batch-wgmma by TMA at "high"), and so does wgrad's batch-wgmma at both precisions.
  for (Precision precision : {Precision::high, Precision::highest}) {
    const ConvGeometry g = small_2d(128, 128, 2, precision);
    for (ConvPass pass : kPasses) {
      const ConvPlan plan = plan_conv(pass, g, DType::float32, DeviceCaps::h100());
      if (pass == ConvPass::wgrad) {
        EXPECT_EQ(plan.kernel, "batch-wgmma") << plan.describe();
        EXPECT_EQ(plan.batch_wgrad.groups, 2) << plan.describe();
        EXPECT_NE(plan.describe().find(", 2 groups]"), std::string::npos) << plan.describe();
        continue;  // the rows below batch-wgmma were not asked
      }
      if (precision == Precision::high) {
        EXPECT_EQ(plan.kernel, "batch-wgmma") << plan.describe();
        EXPECT_TRUE(plan.batch.tma) << plan.describe();
        EXPECT_EQ(plan.batch.groups, 2) << plan.describe();
        EXPECT_NE(plan.describe().find(", 2 groups, copies by TMA]"), std::string::npos)
            << plan.describe();
      }
      if (pass != ConvPass::wgrad) {
        EXPECT_NE(reason_of(plan, "wgmma").find("groups=2"), std::string::npos) << plan.describe();
      }
      EXPECT_NE(reason_of(plan, "mma.sync").find("groups=2"), std::string::npos) << plan.describe();
    }
  }
}

TEST(ConvPlan, ComputeCapabilityDecidesWgmma) {
  const ConvGeometry g = small_2d(64, 64, 1, Precision::high);
  DeviceCaps a100 = DeviceCaps::h100();
  a100.sm_major = 8, a100.sm_minor = 0;
  for (ConvPass pass : {ConvPass::forward, ConvPass::dgrad}) {
    // With the speed preferences, this layer's short rows send it to batch-igemm on any device;
    // without them, 9.0 runs wgmma.
    EXPECT_EQ(plan_conv(pass, g, DType::float32, DeviceCaps::h100(), "", /*prefer=*/false).kernel,
              "wgmma");
    // Without wgmma, this 2-D layer goes past mma.sync (whose tiles cover one row) to
    // batch-igemm; a 1-D one with many positions stays on mma.sync.
    const ConvPlan plan = plan_conv(pass, g, DType::float32, a100);
    EXPECT_EQ(plan.kernel, "batch-igemm") << plan.describe();
    EXPECT_NE(reason_of(plan, "wgmma").find("compute capability 8.0"), std::string::npos)
        << plan.describe();
    EXPECT_NE(reason_of(plan, "mma.sync").find("2-D"), std::string::npos) << plan.describe();
    const ConvLayerSpec row = bench::layer1d("t", "t", 64, 64, 64, 4096, 3, 1, 1);
    EXPECT_EQ(plan_conv(pass, geometry(row, Precision::high), DType::float32, a100).kernel,
              "mma.sync");
  }
  DeviceCaps no_code = DeviceCaps::h100();
  no_code.wgmma_compiled = false;
  EXPECT_EQ(plan_conv(ConvPass::forward, g, DType::float32, no_code).kernel, "batch-igemm");
}

TEST(ConvPlan, HighestDeclinesWgmmaForNarrowUnfoldedProblems) {
  // 1-D, C_out = 32: no row fold (one kernel row), so a 64-row tile would be half empty. With
  // preferences off: at 2 samples the speed preferences give this small call to batch-igemm or
  // the GEMM path, while this rule is not a preference.
  const ConvLayerSpec l = bench::layer1d("t", "t", 2, 64, 32, 256, 3, 1, 1);
  const ConvPlan highest = plan_conv(ConvPass::forward, geometry(l, Precision::highest),
                                     DType::float32, DeviceCaps::h100(), "", /*prefer=*/false);
  EXPECT_EQ(highest.kernel, "mma.sync");
  EXPECT_NE(reason_of(highest, "wgmma").find("M=32"), std::string::npos) << highest.describe();
  const ConvPlan high = plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32,
                                  DeviceCaps::h100(), "", /*prefer=*/false);
  EXPECT_EQ(high.label(), "wgmma");
}

TEST(ConvPlan, TooManyTapsLeaveTheRowImplicitGemmsForBatchIgemmThenTheGemmPath) {
  // 2-D 7x7 = 49 taps: past the row implicit GEMMs' 32, within batch-igemm's 64 a phase (batch
  // 64: enough column tiles to fill the GPU; 32 output channels, which batch-wgmma leaves to
  // batch-igemm).
  ConvLayerSpec l = bench::layer2d("t", "t", 64, 64, 32, 16, 7, 1, 3);
  const ConvPlan plan = plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32,
                                  DeviceCaps::h100());
  EXPECT_EQ(plan.kernel, "batch-igemm");
  // wgmma and mma.sync give way to batch-igemm on short 2-D rows first; without preferences
  // they name the taps, and batch-wgmma (which, preferring, leaves M = 32 to batch-igemm) runs it.
  const ConvPlan no_prefer = plan_conv(ConvPass::forward, geometry(l, Precision::high),
                                       DType::float32, DeviceCaps::h100(), "", /*prefer=*/false);
  EXPECT_EQ(no_prefer.kernel, "batch-wgmma") << no_prefer.describe();
  EXPECT_NE(reason_of(no_prefer, "wgmma").find("more than 32 taps"), std::string::npos)
      << no_prefer.describe();
  EXPECT_NE(reason_of(no_prefer, "mma.sync").find("more than 32 taps"), std::string::npos)
      << no_prefer.describe();
  // 9x9 = 81 taps in the one phase of stride 1: past batch-igemm's 64 too.
  l.kernel = {9, 9};
  l.padding = {4, 4};
  const ConvPlan wide = plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32,
                                  DeviceCaps::h100());
  EXPECT_EQ(wide.kernel, "gemm") << wide.describe();
  EXPECT_NE(reason_of(wide, "batch-igemm").find("81 taps in one output phase"), std::string::npos)
      << wide.describe();
  // Stride 3 splits them: at most 3 x 3 taps a phase, so batch-igemm can run it.
  l.stride = {3, 3};
  const ConvPlan phased = plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32,
                                    DeviceCaps::h100(), "batch-igemm");
  EXPECT_EQ(phased.batch.max_taps, 9) << phased.describe();
  EXPECT_EQ(phased.batch.phases_h * phased.batch.phases_w, 9) << phased.describe();
}

TEST(ConvPlan, WgradSharedMemoryComesFromTheDevice) {
  // A device whose CTAs may have 48 KB declines wgrad's tensor cores for S2 (two raw stages and
  // the converted buffers need more); the H100 runs them.
  const ConvGeometry g = geometry(s_workloads()[1], Precision::high);
  EXPECT_EQ(plan_conv(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100()).kernel, "mma.sync");
  DeviceCaps small = DeviceCaps::h100();
  small.smem_per_block_optin = 48 * 1024;
  small.smem_per_sm = 64 * 1024;
  const ConvPlan plan = plan_conv(ConvPass::wgrad, g, DType::float32, small);
  EXPECT_EQ(plan.kernel, "gemm");
  EXPECT_NE(reason_of(plan, "mma.sync").find("shared memory"), std::string::npos)
      << plan.describe();
  // Forced to the general kernels, wgrad gets its chunking from the plan.
  EXPECT_GT(plan_conv(ConvPass::wgrad, g, DType::float32, small, "fma").fma_chunks, 0);
}

TEST(ConvPlan, ForcedKernelRunsOrThrowsNamingItAndTheReason) {
  const ConvGeometry g = small_2d(64, 64, 1, Precision::high);
  const ConvPlan forced =
      plan_conv(ConvPass::forward, g, DType::float32, DeviceCaps::h100(), "fma");
  EXPECT_EQ(forced.kernel, "fma");
  // wgmma, mma.sync, batch-wgmma, batch-igemm, depthwise, thin, direct, gemm
  ASSERT_EQ(forced.declined.size(), 8u);
  EXPECT_NE(forced.declined[0].reason.find("forced"), std::string::npos);
  EXPECT_EQ(plan_conv(ConvPass::dgrad, g, DType::float32, DeviceCaps::h100(), "mma.sync").kernel,
            "mma.sync");

  const ConvGeometry grouped = small_2d(64, 64, 4, Precision::high);
  const std::string e = testing::error_of(
      [&] { plan_conv(ConvPass::forward, grouped, DType::float32, DeviceCaps::h100(), "wgmma"); });
  EXPECT_NE(e.find("'wgmma'"), std::string::npos) << e;
  EXPECT_NE(e.find("groups=4"), std::string::npos) << e;
  const std::string f64 = testing::error_of(
      [&] { plan_conv(ConvPass::wgrad, g, DType::float64, DeviceCaps::h100(), "mma.sync"); });
  EXPECT_NE(f64.find("float64"), std::string::npos) << f64;
  const std::string none = testing::error_of(
      [&] { plan_conv(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100(), "wgmma"); });
  EXPECT_NE(none.find("no kernel 'wgmma'"), std::string::npos) << none;
}

TEST(ConvPlan, SetConvKernelParsesSpecsAndRejectsBadOnes) {
  struct Restore {
    std::string spec = get_conv_kernel();
    ~Restore() { set_conv_kernel(spec); }
  } restore;
  set_conv_kernel("fma");
  EXPECT_EQ(get_conv_kernel(), "fma");
  for (ConvPass pass : kPasses)
    EXPECT_EQ(cuda::conv_kernel_forced(pass), "fma");
  // A bare name forces the passes that have it: wgrad has no wgmma.
  set_conv_kernel("wgmma");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::forward), "wgmma");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::wgrad), "");
  set_conv_kernel("batch-igemm");  // forward and dgrad only
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::forward), "batch-igemm");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::dgrad), "batch-igemm");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::wgrad), "");
  set_conv_kernel("fwd=wgmma,wgrad=fma");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::forward), "wgmma");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::dgrad), "");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::wgrad), "fma");
  set_conv_kernel("");
  EXPECT_EQ(cuda::conv_kernel_forced(ConvPass::forward), "");

  EXPECT_NE(testing::error_of([] { set_conv_kernel("cudnn"); }).find("unknown conv kernel 'cudnn'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { set_conv_kernel("bwd=fma"); }).find("unknown pass 'bwd'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              set_conv_kernel("wgrad=wgmma");
            }).find("no kernel 'wgmma' for pass wgrad"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { set_conv_kernel("fwd=fma,"); }).find("set_conv_kernel"),
            std::string::npos);
  // A rejected spec leaves the previous one in force.
  EXPECT_EQ(get_conv_kernel(), "");
}

TEST(ConvPlan, TraceLineNamesPassGeometryKernelConfigAndDeclines) {
  const ConvGeometry g = geometry(s_workloads()[3], Precision::highest);  // S4
  const std::string line =
      plan_conv(ConvPass::dgrad, g, DType::float32, DeviceCaps::h100()).describe();
  for (const char* part :
       {"tgrad conv dgrad:", "C_in=32", "float32 precision=highest", "-> mma.sync",
        "[tile 32x256/16ch 3xTF32", "declined: wgmma (highest with M=32"}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " in: " << line;
  }
  // batch-igemm's line names its tile, precision, phases, taps and grid (DCGAN g3's forward).
  ConvLayerSpec dcgan = bench::decoder_layers()[2];
  ASSERT_EQ(dcgan.id, "dcgan_g3");
  const std::string bi = plan_conv(ConvPass::forward, geometry(dcgan, Precision::highest),
                                   DType::float32, DeviceCaps::h100())
                             .describe();
  for (const char* part :
       {"-> batch-wgmma [tile 128x64/32ch 3xTF32, channels-last B, 4 phases, taps<=4",
        "grid 512x1x1]", "declined: wgmma (", "; mma.sync ("}) {
    EXPECT_NE(bi.find(part), std::string::npos) << part << " in: " << bi;
  }
  struct Restore {
    bool on = get_conv_trace();
    ~Restore() { set_conv_trace(on); }
  } restore;
  set_conv_trace(true);
  EXPECT_TRUE(get_conv_trace());
  set_conv_trace(false);
  EXPECT_FALSE(get_conv_trace());
}

// On a GPU: the override reaches the launchers, last_conv_plan says what ran, and a forced
// kernel that cannot run the call throws before anything is launched.
TEST(ConvPlanCuda, ForcedKernelsRunAndAgree) {
  TGRAD_SKIP_WITHOUT_CUDA();
  struct Restore {
    std::string spec = get_conv_kernel();
    ~Restore() { set_conv_kernel(spec); }
  } restore;
  manual_seed(7);
  const TensorOptions opt = TensorOptions().device(Device(kCUDA));
  // 64 channels fill the tensor-core tiles, so the planner picks one of those kernels (short
  // 2-D rows: batch-igemm, or batch-wgmma on a 9.0 device).
  const Tensor x = randn({2, 64, 96, 96}, opt), w = randn({64, 64, 3, 3}, opt);
  set_conv_kernel("");
  const Tensor planned = conv_transpose2d(x, w).to(Device(kCPU));
  const std::string chosen = cuda::last_conv_plan(ConvPass::forward).kernel;
  EXPECT_TRUE(chosen == "wgmma" || chosen == "mma.sync" || chosen == "batch-igemm" ||
              chosen == "batch-wgmma")
      << chosen;
  set_conv_kernel("fma");
  const Tensor general = conv_transpose2d(x, w).to(Device(kCPU));
  EXPECT_EQ(cuda::last_conv_plan(ConvPass::forward).kernel, "fma");
  // float32 "highest": both kernels are float32-accurate (3xTF32 against FMA, each ~1e-7
  // relative L2 from exact), so they agree to well under 1e-6.
  EXPECT_TRUE(testing::tensors_close(planned, general, {0.0, 0.0, 1e-6}, "forced fma"));

  // The trace: one line per pass on stderr, naming the kernel that ran.
  struct RestoreTrace {
    bool on = get_conv_trace();
    ~RestoreTrace() { set_conv_trace(on); }
  } restore_trace;
  set_conv_trace(true);
  ::testing::internal::CaptureStderr();
  conv_transpose2d(x, w);
  const std::string trace = ::testing::internal::GetCapturedStderr();
  set_conv_trace(false);
  EXPECT_NE(trace.find("tgrad conv fwd: conv_transpose2d N=2 C_in=64 C_out=64"), std::string::npos)
      << trace;
  EXPECT_NE(trace.find("-> fma"), std::string::npos) << trace;

  set_conv_kernel("fwd=wgmma");
  const Tensor xg = randn({2, 64, 12, 12}, opt), wg = randn({64, 8, 3, 3}, opt);
  const std::string e = testing::error_of(
      [&] { conv_transpose2d(xg, wg, Tensor(), ConvTranspose2dFuncOptions().groups(4)); });
  EXPECT_NE(e.find("'wgmma'"), std::string::npos) << e;
  EXPECT_NE(e.find("groups=4"), std::string::npos) << e;
}

// Benchmark mode on the CPU, with a fake runner and timer (run_conv_call is plain C++): every
// kernel that can run the call is timed once, the fastest is kept for the later calls of the same
// inputs and runs last, a tie keeps the planner's plan, a candidate that throws is skipped, and
// a forced kernel or the mode off bypasses the timing. Each test uses geometries of its own:
// the mode's plans are process-wide.
struct BenchmarkMode {
  BenchmarkMode() { set_conv_benchmark(true); }
  ~BenchmarkMode() {
    set_conv_benchmark(false);
    set_conv_kernel("");
  }
};

struct FakeCalls {
  std::vector<std::string> ran;  // every run, timed or not
  int timed = 0;
  std::function<double(const std::string&)> ms = [](const std::string&) { return 1.0; };
  cuda::ConvRunner runner() {
    return [this](const ConvPlan& p) { ran.push_back(p.kernel); };
  }
  cuda::ConvTimer timer() {
    return [this](const cuda::ConvRunner& run, const ConvPlan& p) {
      ++timed;
      run(p);
      return ms(p.kernel);
    };
  }
};

// The kernels that can run `pass` of g when forced: the planner's first, then the table's order.
std::vector<std::string> runnable(ConvPass pass, const ConvGeometry& g) {
  const std::string planned = plan_conv(pass, g, DType::float32, DeviceCaps::h100()).kernel;
  std::vector<std::string> names{planned};
  for (const std::string& k : candidates(pass)) {
    if (k == planned) continue;
    try {
      plan_conv(pass, g, DType::float32, DeviceCaps::h100(), k);
      names.push_back(k);
    } catch (const Error&) {
    }
  }
  return names;
}

TEST(ConvPlanBenchmark, TimesEachRunnableKernelOnceAndKeepsTheFastest) {
  const BenchmarkMode on;
  EXPECT_TRUE(get_conv_benchmark());
  const ConvGeometry g =
      geometry(bench::layer2d("t", "t", 7, 512, 256, 52, 2, 2, 0), Precision::high);
  const std::vector<std::string> names = runnable(ConvPass::wgrad, g);
  ASSERT_GE(names.size(), 3u);  // gemm (the planner's), mma.sync, direct forced, fma
  EXPECT_EQ(names.front(), "gemm");
  FakeCalls calls;
  calls.ms = [](const std::string& k) { return k == "mma.sync" ? 0.25 : k == "fma" ? 0.5 : 1.0; };
  const size_t kept = cuda::conv_plans_benchmarked();
  cuda::run_conv_call(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100(), calls.runner(),
                      calls.timer());
  EXPECT_EQ(calls.timed, static_cast<int>(names.size()));
  ASSERT_EQ(calls.ran.size(), names.size() + 1);
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(calls.ran[i], names[i]);
  EXPECT_EQ(calls.ran.back(), "mma.sync");  // the outputs hold the fastest kernel's results
  const ConvPlan last = cuda::last_conv_plan(ConvPass::wgrad);
  EXPECT_EQ(last.kernel, "mma.sync");
  ASSERT_EQ(last.timed.size(), names.size());
  EXPECT_EQ(last.timed.front().first, "wgrad (gemm)");
  EXPECT_DOUBLE_EQ(last.timed.front().second, 1.0);
  EXPECT_NE(last.describe().find("benchmarked, fastest kept: wgrad (gemm) 1.000 ms"),
            std::string::npos)
      << last.describe();
  EXPECT_EQ(cuda::conv_plans_benchmarked(), kept + 1);
  // The same inputs again: no timing, the kept plan.
  cuda::run_conv_call(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100(), calls.runner(),
                      calls.timer());
  EXPECT_EQ(calls.timed, static_cast<int>(names.size()));
  EXPECT_EQ(calls.ran.back(), "mma.sync");
  EXPECT_EQ(cuda::conv_plans_benchmarked(), kept + 1);
  // Another precision is another key: timed again.
  ConvGeometry highest = g;
  highest.precision = Precision::highest;
  cuda::run_conv_call(ConvPass::wgrad, highest, DType::float32, DeviceCaps::h100(), calls.runner(),
                      calls.timer());
  EXPECT_GT(calls.timed, static_cast<int>(names.size()));
}

TEST(ConvPlanBenchmark, TiesKeepThePlannersPlanAndThrowingCandidatesAreSkipped) {
  const BenchmarkMode on;
  const ConvGeometry g =
      geometry(bench::layer2d("t", "t", 5, 128, 64, 40, 4, 2, 1), Precision::highest);
  const std::vector<std::string> names = runnable(ConvPass::forward, g);
  ASSERT_GE(names.size(), 2u);
  FakeCalls ties;  // every kernel 1.0 ms
  cuda::run_conv_call(ConvPass::forward, g, DType::float32, DeviceCaps::h100(), ties.runner(),
                      ties.timer());
  EXPECT_EQ(cuda::last_conv_plan(ConvPass::forward).kernel, names.front());
  EXPECT_EQ(ties.ran.back(), names.front());

  // The second runnable kernel would win, but its runs throw: it is left out of the timings.
  ConvGeometry g2 = g;
  g2.batch = 6;
  FakeCalls failing;
  const std::string broken = names[1];
  cuda::ConvTimer time = [&](const cuda::ConvRunner& run, const ConvPlan& p) -> double {
    ++failing.timed;
    if (p.kernel == broken) TGRAD_FAIL("workspace did not fit");
    run(p);
    return 2.0;
  };
  cuda::run_conv_call(ConvPass::forward, g2, DType::float32, DeviceCaps::h100(), failing.runner(),
                      time);
  const ConvPlan last = cuda::last_conv_plan(ConvPass::forward);
  EXPECT_EQ(last.kernel, names.front());
  EXPECT_EQ(last.timed.size(), names.size() - 1);
  for (const auto& t : last.timed)  // no label starts with the broken kernel's name
    EXPECT_NE(t.first.rfind(broken, 0), 0u) << t.first;
  // The planner's own plan throwing is the call's error.
  ConvGeometry g3 = g;
  g3.batch = 9;
  const std::string planned = names.front();
  cuda::ConvTimer fails = [&](const cuda::ConvRunner&, const ConvPlan& p) -> double {
    if (p.kernel == planned) TGRAD_FAIL("out of memory");
    return 1.0;
  };
  FakeCalls none;
  const std::string e = testing::error_of([&] {
    cuda::run_conv_call(ConvPass::forward, g3, DType::float32, DeviceCaps::h100(), none.runner(),
                        fails);
  });
  EXPECT_NE(e.find("out of memory"), std::string::npos) << e;
  EXPECT_TRUE(none.ran.empty());
}

TEST(ConvPlanBenchmark, AForcedKernelOrTheModeOffSkipsTheTiming) {
  const ConvGeometry g =
      geometry(bench::layer1d("t", "t", 11, 64, 32, 1000, 4, 2, 1), Precision::high);
  {
    const BenchmarkMode on;
    set_conv_kernel("wgrad=fma");
    FakeCalls calls;
    cuda::run_conv_call(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100(), calls.runner(),
                        calls.timer());
    EXPECT_EQ(calls.timed, 0);
    EXPECT_EQ(calls.ran, std::vector<std::string>{"fma"});
  }
  EXPECT_FALSE(get_conv_benchmark());
  FakeCalls calls;
  cuda::run_conv_call(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100(), calls.runner(),
                      calls.timer());
  EXPECT_EQ(calls.timed, 0);
  ASSERT_EQ(calls.ran.size(), 1u);
  EXPECT_EQ(calls.ran[0], plan_conv(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100()).kernel);
  EXPECT_TRUE(cuda::last_conv_plan(ConvPass::wgrad).timed.empty());
}

// On a GPU: benchmark mode times real kernels, keeps one per geometry, and its results are the
// bits of that kernel run forced, call after call.
TEST(ConvPlanCuda, BenchmarkModeRunsTheFastestKernelAndKeepsItsBits) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const BenchmarkMode on;
  manual_seed(11);
  const TensorOptions opt = TensorOptions().device(Device(kCUDA));
  const Tensor x = randn({3, 96, 20, 20}, opt), w = randn({96, 48, 4, 4}, opt) * 0.05;
  const Tensor dy = randn({3, 48, 40, 40}, opt);
  const auto passes = [&] {
    const Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
    const Tensor y =
        conv_transpose2d(xr, wr, Tensor(), ConvTranspose2dFuncOptions().stride(2).padding(1));
    sum(y * dy).backward();
    return std::vector<std::vector<float>>{y.detach().to(Device(kCPU)).to_vector<float>(),
                                           xr.grad().to(Device(kCPU)).to_vector<float>(),
                                           wr.grad().to(Device(kCPU)).to_vector<float>()};
  };
  const std::vector<std::vector<float>> first = passes();
  std::string spec;
  for (ConvPass pass : kPasses) {
    const ConvPlan plan = cuda::last_conv_plan(pass);
    EXPECT_GE(plan.timed.size(), 2u) << plan.describe();  // fma runs every call, at least
    spec += std::string(spec.empty() ? "" : ",") + cuda::conv_pass_name(pass) + "=" + plan.kernel;
  }
  EXPECT_EQ(passes(), first);  // the kept plans again
  for (ConvPass pass : kPasses)
    EXPECT_FALSE(cuda::last_conv_plan(pass).timed.empty());
  set_conv_kernel(spec);  // the winners forced: the same bits
  EXPECT_EQ(passes(), first) << spec;
}

// The rows of the depthwise kernels and the GEMM path decline with their reasons.
TEST(ConvPlan, DepthwiseAndGemmRowsSayWhyTheyDecline) {
  ConvTransposeArgs args;
  args.fn = "test";
  args.spatial_dims = 2;
  args.x_shape = {1, 256, 4, 4};
  args.w_shape = {256, 64, 3, 3};  // groups 4 of 64 x 64 channels: not depthwise, not narrow
  args.groups = 4;
  const ConvGeometry grouped = make_conv_transpose_geometry(args);
  const ConvPlan plan = plan_conv(ConvPass::forward, grouped, DType::float32, DeviceCaps::h100());
  EXPECT_EQ(plan.kernel, "gemm") << plan.describe();
  bool saw_depthwise = false;
  for (const auto& d : plan.declined) {
    if (d.kernel == "depthwise") {
      saw_depthwise = true;
      EXPECT_NE(d.reason.find("C_in == C_out == groups"), std::string::npos) << d.reason;
    }
  }
  EXPECT_TRUE(saw_depthwise) << plan.describe();
  // One sample whose columns pass the GEMM path's 256 MiB: C_out * taps * positions floats
  // (16 input channels: too many for the direct kernels).
  args.x_shape = {1, 16, 512, 512};
  args.w_shape = {16, 64, 16, 16};
  args.groups = 1;
  const ConvGeometry huge = make_conv_transpose_geometry(args);
  const ConvPlan big = plan_conv(ConvPass::forward, huge, DType::float64, DeviceCaps::h100());
  EXPECT_EQ(big.kernel, "fma") << big.describe();
  EXPECT_NE(big.describe().find("over the workspace budget"), std::string::npos) << big.describe();
  EXPECT_THROW(plan_conv(ConvPass::forward, huge, DType::float64, DeviceCaps::h100(), "gemm"),
               Error);
}

// Tiles mostly empty give way to a batch-positions kernel (batch-wgmma on sm_90) or the GEMM
// path (all span batch x positions): a DCGAN layer's 8x8
// rows leave a 64- or 128-wide row tile nearly empty; the same layer with rows of 512 keeps
// wgmma forward at "highest". Six output channels (one past what the thin row takes) fill 6 of
// batch-igemm's 32 tile rows too: the GEMM path.
TEST(ConvPlan, MostlyEmptyTilesGiveWayToBatchIgemmOrTheGemmPath) {
  const ConvLayerSpec small = bench::layer2d("t", "t", 64, 256, 128, 8, 4, 2, 1);
  const ConvLayerSpec rgb = bench::layer2d("t", "t", 8, 128, 6, 128, 4, 2, 1);
  const ConvLayerSpec big = bench::layer2d("t", "t", 8, 256, 128, 256, 4, 2, 1);
  for (Precision precision : {Precision::highest, Precision::high}) {
    const std::string batch = "batch-wgmma";
    for (ConvPass pass : kPasses) {
      const ConvPlan a =
          plan_conv(pass, geometry(small, precision), DType::float32, DeviceCaps::h100());
      if (pass == ConvPass::forward) {
        EXPECT_EQ(a.kernel, batch) << a.describe();
      } else if (pass == ConvPass::dgrad) {
        EXPECT_TRUE(a.kernel == batch || a.kernel == "gemm") << a.describe();
      } else {
        // wgrad: batch-wgmma at "highest" (K spans the batch's positions); at "high" its 256
        // input channels take the GEMM path's TF32 GEMM.
        EXPECT_EQ(a.kernel, precision == Precision::high ? "gemm" : batch) << a.describe();
      }
      // forward and dgrad: the row kernels give way to the batch kernels on short 2-D rows
      // before looking at their tiles.
      if (pass != ConvPass::wgrad && a.kernel == batch) {
        EXPECT_NE(reason_of(a, "mma.sync").find("batch-positions kernels' tiles span rows"),
                  std::string::npos)
            << a.describe();
      }
    }
    // Rows of 512 fill the row tiles: wgmma keeps them at "highest"; at "high" batch-wgmma,
    // ahead of it there too, takes them.
    const ConvPlan b =
        plan_conv(ConvPass::forward, geometry(big, precision), DType::float32, DeviceCaps::h100());
    EXPECT_EQ(b.kernel, precision == Precision::high ? "batch-wgmma" : "wgmma") << b.describe();
    const ConvPlan c =
        plan_conv(ConvPass::forward, geometry(rgb, precision), DType::float32, DeviceCaps::h100());
    EXPECT_EQ(c.kernel, "gemm") << c.describe();
    EXPECT_NE(reason_of(c, "batch-igemm").find("useful work (C=128, M=6)"), std::string::npos)
        << c.describe();
    // A preference, not an inability: forced, or with preferences off, the tensor cores run it.
    EXPECT_EQ(plan_conv(ConvPass::forward, geometry(small, precision), DType::float32,
                        DeviceCaps::h100(), "mma.sync")
                  .kernel,
              "mma.sync");
    EXPECT_NE(plan_conv(ConvPass::forward, geometry(small, precision), DType::float32,
                        DeviceCaps::h100(), "", /*prefer=*/false)
                  .kernel,
              batch);
  }
}

// batch-wgmma (the batch-positions GEMM on sm_90a's wgmma, 1xTF32) takes what batch-igemm would
// at "high" on a 9.0 device with its code, for M > 64; it also keeps forward and stride-1 dgrad
// calls with M > 256 from the GEMM path, and dgrad at stride > 4 (from its channels-last copy).
// Each decline names its reason (measured in docs/performance.md, runs 54 and 69).
TEST(ConvPlan, BatchWgmmaTakesHighCallsWithWideTilesOnSm90) {
  const auto kernel_of = [](ConvPass pass, const ConvLayerSpec& l, Precision precision) {
    return plan_conv(pass, geometry(l, precision), DType::float32, DeviceCaps::h100()).kernel;
  };
  const ConvLayerSpec l = bench::layer2d("t", "t", 64, 256, 128, 8, 4, 2, 1);  // M = 128
  const ConvPlan high = plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32,
                                  DeviceCaps::h100());
  EXPECT_EQ(high.kernel, "batch-wgmma") << high.describe();
  EXPECT_TRUE(high.batch.wgmma && !high.batch.split) << high.describe();
  EXPECT_EQ(high.batch.bm, 128);
  EXPECT_EQ(high.batch.bn, 128);
  // 128 rows x 16 taps per x value: B from the channels-last copy, its stages 1024-byte aligned.
  EXPECT_TRUE(high.batch.channels_last) << high.describe();
  EXPECT_EQ(high.batch.smem_bytes, cuda::batch_wgmma_smem_bytes(128, 128, true));
  EXPECT_NE(
      high.describe().find("-> batch-wgmma [tile 128x128/32ch 1xTF32, channels-last B, 4 phases"),
      std::string::npos)
      << high.describe();
  // "highest" multiplies in 3xTF32: values and residuals in two stages, 64 columns a warpgroup
  // at M > 64 (its chain and sum in registers).
  const ConvPlan highest = plan_conv(ConvPass::forward, geometry(l, Precision::highest),
                                     DType::float32, DeviceCaps::h100());
  EXPECT_EQ(highest.kernel, "batch-wgmma") << highest.describe();
  EXPECT_TRUE(highest.batch.wgmma && highest.batch.split) << highest.describe();
  EXPECT_EQ(highest.batch.bm, 128);
  EXPECT_EQ(highest.batch.bn, 64);
  EXPECT_EQ(highest.batch.smem_bytes, cuda::batch_wgmma_smem_bytes(128, 64, true, true));
  // M = 32 at "highest": half of its 64-row tile would be padding, batch-igemm's 32-row tile
  // takes the call (at "high", up to M = 64); forced, batch-wgmma runs it with a 64 x 128 tile.
  const ConvLayerSpec m32 = bench::layer2d("t", "t", 64, 256, 32, 8, 4, 2, 1);
  const ConvPlan narrow32 = plan_conv(ConvPass::forward, geometry(m32, Precision::highest),
                                      DType::float32, DeviceCaps::h100());
  EXPECT_EQ(narrow32.kernel, "batch-igemm") << narrow32.describe();
  EXPECT_NE(reason_of(narrow32, "batch-wgmma").find("M=32 <= 32: batch-igemm's narrower tiles"),
            std::string::npos)
      << narrow32.describe();
  const ConvPlan m64_highest =
      plan_conv(ConvPass::forward,
                geometry(bench::layer2d("t", "t", 64, 256, 64, 8, 4, 2, 1), Precision::highest),
                DType::float32, DeviceCaps::h100());
  EXPECT_EQ(m64_highest.kernel, "batch-wgmma") << m64_highest.describe();
  EXPECT_EQ(m64_highest.batch.bm, 64);
  EXPECT_EQ(m64_highest.batch.bn, 128);
  const ConvPlan narrow_forced = plan_conv(ConvPass::forward, geometry(m32, Precision::highest),
                                           DType::float32, DeviceCaps::h100(), "batch-wgmma");
  EXPECT_TRUE(narrow_forced.batch.split && narrow_forced.batch.bm == 64)
      << narrow_forced.describe();
  // Forced where it cannot run, it throws naming itself and the reason.
  EXPECT_NE(testing::error_of([&] {
              plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float64,
                        DeviceCaps::h100(), "batch-wgmma");
            }).find("float32 only"),
            std::string::npos);
  // An 8.0 device, or a build without the sm_90a code: batch-igemm.
  DeviceCaps a100 = DeviceCaps::h100();
  a100.sm_major = 8, a100.sm_minor = 0;
  const ConvPlan on_a100 =
      plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32, a100);
  EXPECT_EQ(on_a100.kernel, "batch-igemm") << on_a100.describe();
  EXPECT_NE(reason_of(on_a100, "batch-wgmma").find("wgmma needs 9.0"), std::string::npos);
  DeviceCaps no_code = DeviceCaps::h100();
  no_code.wgmma_compiled = false;
  const ConvPlan without =
      plan_conv(ConvPass::forward, geometry(l, Precision::high), DType::float32, no_code);
  EXPECT_EQ(without.kernel, "batch-igemm") << without.describe();
  EXPECT_NE(reason_of(without, "batch-wgmma").find("no sm_90a code"), std::string::npos);
  // M <= 64: batch-igemm's narrower tiles (a preference: forced, it runs with a 64-row tile),
  // unless TMA copies the channels-last copy, which a forward reads from 512 uses (64 x 16
  // taps here; U-Net 256 -> 128's 64 x 4 keeps batch-igemm).
  const ConvLayerSpec narrow = bench::layer2d("t", "t", 8, 128, 64, 196, 2, 2, 0);
  const ConvPlan m64 = plan_conv(ConvPass::forward, geometry(narrow, Precision::high),
                                 DType::float32, DeviceCaps::h100());
  EXPECT_EQ(m64.kernel, "batch-igemm") << m64.describe();
  EXPECT_NE(reason_of(m64, "batch-wgmma").find("M=64 <= 64"), std::string::npos) << m64.describe();
  const ConvPlan m64_forced = plan_conv(ConvPass::forward, geometry(narrow, Precision::high),
                                        DType::float32, DeviceCaps::h100(), "batch-wgmma");
  EXPECT_EQ(m64_forced.batch.bm, 64) << m64_forced.describe();
  EXPECT_EQ(m64_forced.batch.smem_bytes,
            cuda::batch_wgmma_smem_bytes(64, 128, m64_forced.batch.channels_last));
  const ConvLayerSpec narrow_tma = bench::layer2d("t", "t", 64, 256, 64, 8, 4, 2, 1);
  const ConvPlan m64_tma = plan_conv(ConvPass::forward, geometry(narrow_tma, Precision::high),
                                     DType::float32, DeviceCaps::h100());
  EXPECT_EQ(m64_tma.kernel, "batch-wgmma") << m64_tma.describe();
  EXPECT_EQ(m64_tma.batch.bm, 64) << m64_tma.describe();
  EXPECT_TRUE(m64_tma.batch.tma) << m64_tma.describe();
  EXPECT_EQ(m64_tma.batch.smem_bytes, cuda::batch_wgmma_smem_bytes(64, 128, true));
  // M = 512: the forward stays on the batch kernels (on 8.0, batch-igemm); past 512 rows, for a
  // dgrad with stride > 4 past 256, and for a dgrad at "high" from 256, the GEMM path, unless
  // TMA copies it and its taps outnumber twice its stride phases (the GEMM path's columns then
  // hold more than two values per dy value): DeconvNet deconv5 (9 taps at stride 1) stays, U-Net
  // 1024 -> 512 (4 taps at stride 2) goes; at "highest" both stay on batch-wgmma.
  const ConvLayerSpec wide = bench::layer2d("t", "t", 8, 1024, 512, 28, 2, 2, 0);
  const ConvPlan wide_fwd = plan_conv(ConvPass::forward, geometry(wide, Precision::high),
                                      DType::float32, DeviceCaps::h100());
  EXPECT_EQ(wide_fwd.kernel, "batch-wgmma") << wide_fwd.describe();
  EXPECT_EQ(
      plan_conv(ConvPass::forward, geometry(wide, Precision::high), DType::float32, a100).kernel,
      "batch-igemm");
  const ConvLayerSpec wide_s1 = bench::layer2d("t", "t", 64, 512, 512, 14, 3, 1, 1);
  ConvLayerSpec wide_s2 = wide;
  std::swap(wide_s2.in_channels, wide_s2.out_channels);  // dgrad M = C_in = 512
  for (const ConvLayerSpec& m512 : {wide_s1, wide_s2}) {
    EXPECT_EQ(kernel_of(ConvPass::dgrad, m512, Precision::highest), "batch-wgmma");
    const ConvPlan d = plan_conv(ConvPass::dgrad, geometry(m512, Precision::high), DType::float32,
                                 DeviceCaps::h100());
    if (m512.kernel[0] == 3) {  // DeconvNet deconv5
      EXPECT_EQ(d.kernel, "batch-wgmma") << d.describe();
      EXPECT_TRUE(d.batch.tma) << d.describe();
      continue;
    }
    EXPECT_EQ(d.kernel, "gemm") << d.describe();
    EXPECT_NE(reason_of(d, "batch-wgmma").find("dgrad at \"high\" with M=512 >= 256"),
              std::string::npos)
        << d.describe();
  }
  // M = 256 at "high" goes to the GEMM path too, from the row kernels as well, where its taps
  // are few (U-Net 512 -> 256 at stride 2: 4 taps); DCGAN's and CycleGAN's 256 -> 128 (16 and 9
  // taps at stride 2) stay on batch-wgmma by TMA, the row kernels giving way to it (mma.sync
  // names the GEMM path's rule); M = 128 stays, and at "highest" so does M = 256 (at batch 128:
  // 128 CTAs; at 64 the grid would cover under half the SMs, the GEMM path by that rule).
  const ConvLayerSpec m256 = bench::layer2d("t", "t", 128, 256, 128, 8, 4, 2, 1);
  const ConvLayerSpec m256_rows = bench::layer2d("t", "t", 4, 256, 128, 64, 3, 2, 1, 1);
  for (const ConvLayerSpec& layer : {m256, m256_rows}) {
    const ConvPlan d = plan_conv(ConvPass::dgrad, geometry(layer, Precision::high), DType::float32,
                                 DeviceCaps::h100());
    EXPECT_EQ(d.kernel, "batch-wgmma") << d.describe();
    EXPECT_TRUE(d.batch.tma) << d.describe();
    EXPECT_EQ(kernel_of(ConvPass::dgrad, layer, Precision::highest), "batch-wgmma");
  }
  const ConvLayerSpec m256_k2 = bench::layer2d("t", "t", 8, 256, 128, 100, 2, 2, 0);
  const ConvPlan k2 = plan_conv(ConvPass::dgrad, geometry(m256_k2, Precision::high), DType::float32,
                                DeviceCaps::h100());
  EXPECT_EQ(k2.kernel, "gemm") << k2.describe();
  EXPECT_NE(reason_of(k2, "batch-wgmma").find("dgrad at \"high\" with M=256 >= 256"),
            std::string::npos)
      << k2.describe();
  EXPECT_NE(reason_of(plan_conv(ConvPass::dgrad, geometry(m256_rows, Precision::high),
                                DType::float32, DeviceCaps::h100()),
                      "mma.sync")
                .find("dgrad at \"high\" with M=256 >= 256"),
            std::string::npos);
  const ConvLayerSpec m128 = bench::layer2d("t", "t", 128, 128, 64, 16, 4, 2, 1);
  EXPECT_EQ(kernel_of(ConvPass::dgrad, m128, Precision::high), "batch-wgmma");
  // M > 512: the GEMM path at "high" (forward, and dgrad by either rule), batch-wgmma's 3xTF32
  // at "highest", where the GEMM path's GEMM is float32 FMA.
  const ConvPlan m1024 = plan_conv(ConvPass::dgrad, geometry(wide, Precision::high), DType::float32,
                                   DeviceCaps::h100());  // M = C_in = 1024
  EXPECT_EQ(m1024.kernel, "gemm") << m1024.describe();
  const ConvLayerSpec wide_out = bench::layer2d("t", "t", 8, 2048, 1024, 14, 2, 2, 0);
  const ConvPlan fwd1024 = plan_conv(ConvPass::forward, geometry(wide_out, Precision::high),
                                     DType::float32, DeviceCaps::h100());  // M = C_out = 1024
  EXPECT_EQ(fwd1024.kernel, "gemm") << fwd1024.describe();
  for (const char* batch : {"batch-wgmma", "batch-igemm"}) {
    EXPECT_NE(reason_of(fwd1024, batch).find("M=1024 > 512 at \"high\""), std::string::npos)
        << fwd1024.describe();
  }
  EXPECT_EQ(kernel_of(ConvPass::dgrad, wide, Precision::highest), "batch-wgmma");
  EXPECT_EQ(kernel_of(ConvPass::forward, wide_out, Precision::highest), "batch-wgmma");
  EXPECT_EQ(kernel_of(ConvPass::dgrad, wide_out, Precision::highest), "batch-wgmma");
  // A dgrad past stride 4 with M > 256: batch-wgmma reads the channels-last copy and keeps it at
  // "highest" where its grid fills the GPU (EnCodec x8: 300 CTAs); batch-igemm, whose gathers
  // load one src column in s, gives it to the GEMM path. On a small grid (8 samples of 64
  // positions: 32 tiles of 256 steps) 3xTF32 cuts K into 8 slices, whose 256 CTAs fill the GPU.
  const ConvLayerSpec wide_s8 = bench::layer1d("t", "t", 64, 512, 256, 75, 16, 8, 0);
  const ConvPlan s8_wide = plan_conv(ConvPass::dgrad, geometry(wide_s8, Precision::highest),
                                     DType::float32, DeviceCaps::h100());
  EXPECT_EQ(s8_wide.kernel, "batch-wgmma") << s8_wide.describe();
  EXPECT_TRUE(s8_wide.batch.channels_last) << s8_wide.describe();
  const ConvPlan s8_igemm =
      plan_conv(ConvPass::dgrad, geometry(wide_s8, Precision::highest), DType::float32, a100);
  EXPECT_EQ(s8_igemm.kernel, "gemm") << s8_igemm.describe();
  EXPECT_NE(reason_of(s8_igemm, "batch-igemm").find("dgrad with stride 8 and M=512 > 256"),
            std::string::npos)
      << s8_igemm.describe();
  const ConvLayerSpec small_s8 = bench::layer1d("t", "t", 8, 512, 256, 64, 16, 8, 4);
  const ConvPlan s8_small = plan_conv(ConvPass::dgrad, geometry(small_s8, Precision::highest),
                                      DType::float32, DeviceCaps::h100());
  EXPECT_EQ(s8_small.kernel, "batch-wgmma") << s8_small.describe();
  EXPECT_EQ(s8_small.batch.k_slices, 8) << s8_small.describe();
  // dgrad with stride 8 (k16 s8, M = 128): batch-wgmma reads the channels-last copy, whose lines
  // are whole however wide the stride; stride 4 reads it too at "high", where TMA copies it, and
  // keeps the gather at "highest".
  const ConvLayerSpec s8 = bench::layer1d("t", "t", 64, 128, 64, 512, 16, 8, 4);
  const ConvPlan s8_dgrad =
      plan_conv(ConvPass::dgrad, geometry(s8, Precision::high), DType::float32, DeviceCaps::h100());
  EXPECT_EQ(s8_dgrad.kernel, "batch-wgmma") << s8_dgrad.describe();
  EXPECT_TRUE(s8_dgrad.batch.channels_last) << s8_dgrad.describe();
  const ConvLayerSpec s4 = bench::layer1d("t", "t", 64, 128, 64, 512, 8, 4, 2);
  const ConvPlan s4_dgrad =
      plan_conv(ConvPass::dgrad, geometry(s4, Precision::high), DType::float32, DeviceCaps::h100());
  EXPECT_EQ(s4_dgrad.kernel, "batch-wgmma") << s4_dgrad.describe();
  EXPECT_TRUE(s4_dgrad.batch.channels_last) << s4_dgrad.describe();
  EXPECT_TRUE(s4_dgrad.batch.tma) << s4_dgrad.describe();
  const ConvPlan s4_highest = plan_conv(ConvPass::dgrad, geometry(s4, Precision::highest),
                                        DType::float32, DeviceCaps::h100(), "batch-wgmma");
  EXPECT_FALSE(s4_highest.batch.channels_last) << s4_highest.describe();
  // Long 1-D sequences with M > 64 leave the row kernels for batch-wgmma at both precisions; at
  // "highest" a strided forward whose taps all fall in one phase stays with wgmma's fill mode,
  // and 2-D rows of 512 with the row kernels.
  const ConvLayerSpec seq = bench::layer1d("t", "t", 64, 128, 128, 65536, 3, 1, 0);
  EXPECT_EQ(kernel_of(ConvPass::forward, seq, Precision::high), "batch-wgmma");
  EXPECT_EQ(kernel_of(ConvPass::forward, seq, Precision::highest), "batch-wgmma");
  ConvLayerSpec one_phase = bench::layer1d("t", "t", 16, 128, 128, 65536, 3, 2, 1);
  one_phase.dilation = {2, 1};
  EXPECT_EQ(kernel_of(ConvPass::forward, one_phase, Precision::highest), "wgmma");
  const ConvLayerSpec rows512 = bench::layer2d("t", "t", 4, 128, 128, 512, 3, 1, 1);
  EXPECT_EQ(kernel_of(ConvPass::forward, rows512, Precision::highest), "wgmma");
}

// The batch kernels give way to the GEMM path when their grid covers under half the SMs, naming
// the CTAs and their K steps; at "highest" not when each CTA's loop is at most 16 steps (the GEMM
// path's fixed costs outweigh it there: docs/performance.md), at "high" not for a forward that
// TMA copies with at most 32 steps. Forced, they run the call.
TEST(ConvPlan, BatchKernelsWithFewCtasGiveWayToTheGemmPathUnlessTheirLoopIsShort) {
  const DeviceCaps h100 = DeviceCaps::h100();
  const auto plan = [&](const ConvLayerSpec& l, Precision precision,
                        const std::string& forced = "") {
    return plan_conv(ConvPass::forward, geometry(l, precision), DType::float32, h100, forced);
  };
  // HiFi-GAN V3's first x8 (8 phases of 2 taps, 256 channels): at "highest" 32 CTAs of 128 x 64
  // and 16 steps, at "high" 16 of 128 x 128 and 16 steps (8 channel steps of 32 x 2 taps).
  const ConvLayerSpec x8 = bench::layer1d("t", "t", 8, 256, 128, 32, 16, 8, 4);
  const ConvPlan a = plan(x8, Precision::highest);
  EXPECT_EQ(a.kernel, "batch-wgmma") << a.describe();
  // At "high" TMA copies this forward, which keeps its few CTAs over a loop of at most 32 steps
  // (the GEMM path's scatter costs more); its dgrad, with no scatter on the GEMM path, gives way.
  const ConvPlan b = plan(x8, Precision::high);
  EXPECT_EQ(b.kernel, "batch-wgmma") << b.describe();
  EXPECT_TRUE(b.batch.tma) << b.describe();
  const ConvPlan bd =
      plan_conv(ConvPass::dgrad, geometry(x8, Precision::high), DType::float32, h100);
  EXPECT_EQ(bd.kernel, "gemm") << bd.describe();
  EXPECT_NE(reason_of(bd, "batch-wgmma").find("CTAs for 132 SMs"), std::string::npos)
      << bd.describe();
  // DCGAN-like 512 -> 256 at 4x4, batch 8: 4 taps a phase x 16 channel steps = 64 steps. At
  // "high" the GEMM path; at "highest" 3xTF32 cuts K into 16 slices, 256 CTAs in all, and keeps
  // it.
  const ConvLayerSpec small2d = bench::layer2d("t", "t", 8, 512, 256, 4, 4, 2, 1);
  const ConvPlan c = plan(small2d, Precision::high);
  EXPECT_EQ(c.kernel, "gemm") << c.describe();
  EXPECT_NE(reason_of(c, "batch-wgmma").find("8 CTAs for 132 SMs of 64 K steps a tile"),
            std::string::npos)
      << c.describe();
  EXPECT_EQ(plan(small2d, Precision::high, "batch-wgmma").kernel, "batch-wgmma");
  const ConvPlan c3 = plan(small2d, Precision::highest);
  EXPECT_EQ(c3.kernel, "batch-wgmma") << c3.describe();
  EXPECT_EQ(c3.batch.k_slices, 16) << c3.describe();
  EXPECT_EQ(plan(x8, Precision::high, "batch-igemm").kernel, "batch-igemm");
}

// The batch-positions kernels gather every tap of a phase; where most land outside src (a small
// input under a wide kernel) they decline, and a forward with short sums over the taps that land
// goes to the direct kernel, which visits only those. DCGAN's first layer: a 1x1 latent under a
// 4x4 kernel (stride 1, padding 0) lands one tap of 4 per axis, 100 x 16 / 16 products a output.
TEST(ConvPlan, BatchKernelsLeaveTapsMostlyOutsideSrcToDirectOrTheGemmPath) {
  const ConvLayerSpec latent = bench::decoder_layers()[0];
  ASSERT_EQ(latent.id, "dcgan_g1");
  const ConvGeometry g = geometry(latent, Precision::highest);
  const ConvPlan plan = plan_conv(ConvPass::forward, g, DType::float32, DeviceCaps::h100());
  EXPECT_EQ(plan.kernel, "direct") << plan.describe();
  EXPECT_NE(reason_of(plan, "batch-igemm").find("6.2% of the gathered taps land inside src"),
            std::string::npos)
      << plan.describe();
  const ConvPlan forced =
      plan_conv(ConvPass::forward, g, DType::float32, DeviceCaps::h100(), "batch-igemm");
  EXPECT_DOUBLE_EQ(forced.batch.tap_use, 1.0 / 16.0);
  // 8x8 -> 16x16, k4 s2 p1 (DCGAN's third layer): per axis and phase, 2 taps on 8 positions,
  // and one of the two reads src index 8 or -1 once: 15 of 16 pairs land, (15/16)^2 in 2-D.
  const ConvLayerSpec g3 = bench::decoder_layers()[2];
  ASSERT_EQ(g3.id, "dcgan_g3");
  const ConvPlan inside = plan_conv(ConvPass::forward, geometry(g3, Precision::highest),
                                    DType::float32, DeviceCaps::h100(), "batch-igemm");
  EXPECT_DOUBLE_EQ(inside.batch.tap_use, 225.0 / 256.0);
  // A dgrad gathers strided src, dy index 2q - 1 + k for dx position q: taps 0 and 3 miss once.
  const ConvPlan dgrad = plan_conv(ConvPass::dgrad, geometry(g3, Precision::highest),
                                   DType::float32, DeviceCaps::h100(), "batch-igemm");
  EXPECT_DOUBLE_EQ(dgrad.batch.tap_use, 225.0 / 256.0);
}

// gemm_first's bounds, each on a layer the suite does not have: a thin output goes to the GEMM
// path only with groups 1, at least 2048 input positions a sample, C_in >= C_out x taps, and
// C_in x C_out x taps of at least 2048 at "high" (forward and dgrad) or 4096 at "highest"
// (forward only; "Runs 225-228" in docs/performance.md).
TEST(ConvPlan, ThinOutputsOverLargePlanesTakeTheGemmPathByTheirWork) {
  const auto kernel = [](ConvPass pass, const ConvLayerSpec& l, Precision precision) {
    return plan_conv(pass, geometry(l, precision), DType::float32, DeviceCaps::h100()).kernel;
  };
  // 64 -> 3 k4 s2 at 128 x 128: 3072 multiplies a position, between the two bounds.
  const ConvLayerSpec mid = bench::layer2d("t", "t", 8, 64, 3, 128, 4, 2, 1);
  EXPECT_EQ(kernel(ConvPass::forward, mid, Precision::high), "gemm");
  EXPECT_EQ(kernel(ConvPass::dgrad, mid, Precision::high), "gemm");
  EXPECT_EQ(kernel(ConvPass::forward, mid, Precision::highest), "thin");
  EXPECT_EQ(kernel(ConvPass::dgrad, mid, Precision::highest), "thin");
  const ConvPlan why = plan_conv(ConvPass::forward, geometry(mid, Precision::high), DType::float32,
                                 DeviceCaps::h100());
  EXPECT_NE(reason_of(why, "thin").find("C_in x C_out x taps=3072 >= 2048"), std::string::npos)
      << why.describe();
  // 256 -> 1 k16 s8 over 4000 steps: 4096, the "highest" bound; its dgrad stays thin there.
  const ConvLayerSpec mono = bench::layer1d("t", "t", 16, 256, 1, 4000, 16, 8, 0);
  EXPECT_EQ(kernel(ConvPass::forward, mono, Precision::highest), "gemm");
  EXPECT_EQ(kernel(ConvPass::dgrad, mono, Precision::highest), "thin");
  // 32 -> 3: 1536, under both.
  const ConvLayerSpec light = bench::layer2d("t", "t", 8, 32, 3, 128, 4, 2, 1);
  EXPECT_EQ(kernel(ConvPass::forward, light, Precision::high), "thin");
  // 32 -> 4 k4: 2048 multiplies, but 64 column rows for 32 channels.
  const ConvLayerSpec wide_cols = bench::layer2d("t", "t", 8, 32, 4, 128, 4, 2, 1);
  EXPECT_EQ(kernel(ConvPass::forward, wide_cols, Precision::high), "thin");
  // 128 -> 3 at 32 x 32: 1024 positions a sample, under 2048.
  const ConvLayerSpec small = bench::layer2d("t", "t", 128, 128, 3, 32, 4, 2, 1);
  EXPECT_EQ(kernel(ConvPass::forward, small, Precision::high), "thin");
  // Two groups: no per-sample GEMMs.
  const ConvLayerSpec grouped = bench::layer2d("t", "t", 8, 256, 4, 128, 4, 2, 1, 0, 2);
  EXPECT_NE(kernel(ConvPass::forward, grouped, Precision::high), "gemm");
  // gemm_per_sample itself, the GEMM path's switch: groups 1, 2048 input positions a sample.
  EXPECT_TRUE(cuda::gemm_per_sample(geometry(mid, Precision::high)));     // 16384 positions
  EXPECT_TRUE(cuda::gemm_per_sample(geometry(mono, Precision::high)));    // 4000
  EXPECT_FALSE(cuda::gemm_per_sample(geometry(small, Precision::high)));  // 1024
  EXPECT_FALSE(cuda::gemm_per_sample(geometry(grouped, Precision::high)));
  EXPECT_TRUE(cuda::gemm_per_sample(
      geometry(bench::layer1d("t", "t", 2, 8, 8, 2048, 4, 2, 1), Precision::high)));
  EXPECT_FALSE(cuda::gemm_per_sample(
      geometry(bench::layer1d("t", "t", 2, 8, 8, 2047, 4, 2, 1), Precision::high)));
}

// The forward and dgrad kernel of every suite layer at both precisions with H100 caps, as the
// forced A/B runs measured them (docs/performance.md, runs 34, 38 and 54). batch-igemm runs where
// it was ahead: M <= 256 with enough CTAs, before the row kernels on 2-D rows under 512 (DCGAN,
// U-Net, CycleGAN, DeconvNet deconv1) and on 1-D calls of at most 2^17 positions (HiFi-GAN,
// EnCodec x8 forward; dgrad at "highest" only); EnCodec's long layers keep wgmma / mma.sync,
// wide M the GEMM path at "high" (U-Net 1024 -> 512's dgrad; at "highest" batch-wgmma),
// and so does EnCodec x8's dgrad at "highest" (its channels-last copy); float64 calls never reach
// it, grouped ones one GEMM per group. At "highest", batch-wgmma's 3xTF32 takes those with M > 32.
// At "high", batch-wgmma takes batch-igemm's calls with M > 64, the forward and stride-1
// dgrad with M = 512 (U-Net's first up-conv, DeconvNet deconv5) and the long 1-D calls with M = 128
// (EnCodec x5 forward, x4 dgrad), and EnCodec x5's dgrad (from its channels-last copy);
// the x8 dgrads with M >= 256 stay on the GEMM path, and so do the dgrads with M >= 256 (U-Net
// 512 -> 256 and 256 -> 128, DeconvNet deconv5, DCGAN 256 -> 128, CycleGAN 256 -> 128, EnCodec
// x5; "Runs 225-228"). RGB and mono outputs (DCGAN's and pix2pix's last layers, Conv-TasNet's
// decoder) run the thin kernels, except pix2pix's and Conv-TasNet's forwards and their dgrads
// at "high" (large planes, many multiplies per position: the GEMM path's per-sample GEMMs);
// other calls with few channels per group (grouped layers) the direct kernels. A row
// kernel whose grid would fill under half the SMs gives way to the GEMM path (HiFi-GAN V3 x8
// dgrad at "highest": 32 CTAs; run 52), and so do the batch kernels, but at "highest" not with
// K loops of at most 16 steps (HiFi-GAN V3's first x8 forward: 64 CTAs of 16 steps on
// batch-wgmma; docs/performance.md, "Runs 112 and 115").
TEST(ConvPlan, SuiteLayersRunTheMeasuredForwardAndDgradKernels) {
  struct Row {
    const char* id;
    const char *fwd_highest, *dgrad_highest, *fwd_high, *dgrad_high;
  };
  const Row rows[] = {
      {"dcgan_g1", "direct", "gemm", "direct", "gemm"},
      {"dcgan_g2", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"dcgan_g3", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"dcgan_g4", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"dcgan_g5", "thin", "thin", "thin", "thin"},
      {"unet_up1", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"unet_up2", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"unet_up3", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"unet_up4", "batch-wgmma", "batch-wgmma", "batch-igemm", "batch-wgmma"},
      {"cyclegan_up1", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"cyclegan_up2", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"pix2pix_out", "gemm", "thin", "gemm", "gemm"},
      {"hifigan_v1_up1", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"hifigan_v1_up2", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"hifigan_v1_up3", "batch-wgmma", "batch-wgmma", "batch-igemm", "batch-wgmma"},
      {"hifigan_v1_up4", "batch-igemm", "batch-wgmma", "batch-igemm", "batch-igemm"},
      {"hifigan_v3_up1", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"hifigan_v3_up2", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"hifigan_v3_up3", "batch-igemm", "batch-wgmma", "batch-igemm", "batch-wgmma"},
      {"encodec_up8", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"encodec_up5", "batch-wgmma", "batch-wgmma", "batch-wgmma", "gemm"},
      {"encodec_up4", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"encodec_up2", "batch-igemm", "batch-wgmma", "batch-igemm", "batch-igemm"},
      {"convtasnet_dec", "gemm", "thin", "gemm", "gemm"},
      {"grouped_g2", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"grouped_g4", "batch-igemm", "batch-igemm", "batch-igemm", "batch-igemm"},
      {"grouped_g8", "direct", "direct", "direct", "direct"},
      {"fcn_up2_dw", "thin", "depthwise", "thin", "depthwise"},
      {"depthwise_256", "depthwise", "depthwise", "depthwise", "depthwise"},
      {"deconvnet_5", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
      {"deconvnet_1", "batch-wgmma", "batch-wgmma", "batch-wgmma", "batch-wgmma"},
  };
  const std::vector<ConvLayerSpec> layers = bench::decoder_layers();
  ASSERT_EQ(layers.size(), std::size(rows));
  for (size_t i = 0; i < layers.size(); ++i) {
    const Row& row = rows[i];
    ASSERT_EQ(layers[i].id, row.id);
    for (Precision precision : {Precision::highest, Precision::high}) {
      const bool high = precision == Precision::high;
      const ConvGeometry g = geometry(layers[i], precision);
      const ConvPlan fwd = plan_conv(ConvPass::forward, g, DType::float32, DeviceCaps::h100());
      const ConvPlan dgrad = plan_conv(ConvPass::dgrad, g, DType::float32, DeviceCaps::h100());
      EXPECT_EQ(fwd.kernel, high ? row.fwd_high : row.fwd_highest) << fwd.describe();
      EXPECT_EQ(dgrad.kernel, high ? row.dgrad_high : row.dgrad_highest) << dgrad.describe();
    }
  }
}

// The wgrad kernel of every suite layer at both precisions with H100 caps, as the forced A/B of
// runs 51 and 68 and the benchmark-mode timings of "Runs 112 and 115" measured them
// (docs/performance.md).
// "highest": batch-wgmma's 3xTF32 takes every layer but those with few channels per group
// (grouped_g8: direct), the depthwise ones, and the two whose GEMMs are big along every axis
// (EnCodec x8: 512 x 4096 x 4800, DeconvNet deconv5: 512 x 4608 x 12544; the GEMM path, as
// measured), the RGB and mono outputs included (it was faster than the thin and
// direct kernels there). "high": batch-wgmma takes every layer but those with
// 256 input channels or more (the GEMM path) and HiFi-GAN V3's first
// x8 (a grid of 32 CTAs: the GEMM path), DeconvNet deconv1 (64 channels at stride 1: the split-K
// kernel), Conv-TasNet's mono output (direct) and the depthwise layers; grouped_g8's 16 x 64
// group GEMMs it takes too (run 299: 0.78x of the direct kernel's time).
TEST(ConvPlan, SuiteLayersRunTheMeasuredWgradKernels) {
  struct Row {
    const char *id, *highest, *high;
  };
  const Row rows[] = {
      {"dcgan_g1", "batch-wgmma", "batch-wgmma"},
      {"dcgan_g2", "batch-wgmma", "gemm"},
      {"dcgan_g3", "batch-wgmma", "gemm"},
      {"dcgan_g4", "batch-wgmma", "batch-wgmma"},
      {"dcgan_g5", "batch-wgmma", "batch-wgmma"},
      {"unet_up1", "batch-wgmma", "gemm"},
      {"unet_up2", "batch-wgmma", "gemm"},
      {"unet_up3", "batch-wgmma", "gemm"},
      {"unet_up4", "batch-wgmma", "batch-wgmma"},
      {"cyclegan_up1", "batch-wgmma", "gemm"},
      {"cyclegan_up2", "batch-wgmma", "batch-wgmma"},
      {"pix2pix_out", "batch-wgmma", "batch-wgmma"},
      {"hifigan_v1_up1", "batch-wgmma", "gemm"},
      {"hifigan_v1_up2", "batch-wgmma", "gemm"},
      {"hifigan_v1_up3", "batch-wgmma", "batch-wgmma"},
      {"hifigan_v1_up4", "batch-wgmma", "batch-wgmma"},
      {"hifigan_v3_up1", "batch-wgmma", "gemm"},
      {"hifigan_v3_up2", "batch-wgmma", "batch-wgmma"},
      {"hifigan_v3_up3", "batch-wgmma", "batch-wgmma"},
      {"encodec_up8", "gemm", "gemm"},
      {"encodec_up5", "batch-wgmma", "gemm"},
      {"encodec_up4", "batch-wgmma", "batch-wgmma"},
      {"encodec_up2", "batch-wgmma", "batch-wgmma"},
      {"convtasnet_dec", "batch-wgmma", "direct"},
      {"grouped_g2", "batch-wgmma", "batch-wgmma"},
      {"grouped_g4", "batch-wgmma", "batch-wgmma"},
      {"grouped_g8", "direct", "batch-wgmma"},
      {"fcn_up2_dw", "depthwise", "depthwise"},
      {"depthwise_256", "depthwise", "depthwise"},
      {"deconvnet_5", "gemm", "gemm"},
      {"deconvnet_1", "batch-wgmma", "mma.sync"},
  };
  const std::vector<ConvLayerSpec> layers = bench::decoder_layers();
  ASSERT_EQ(layers.size(), std::size(rows));
  for (size_t i = 0; i < layers.size(); ++i) {
    ASSERT_EQ(layers[i].id, rows[i].id);
    for (Precision precision : {Precision::highest, Precision::high}) {
      const ConvPlan plan = plan_conv(ConvPass::wgrad, geometry(layers[i], precision),
                                      DType::float32, DeviceCaps::h100());
      EXPECT_EQ(plan.kernel, precision == Precision::high ? rows[i].high : rows[i].highest)
          << plan.describe();
    }
  }
}

// The row kernels (wgmma, mma.sync) give way to the GEMM path when a grid would cover under half
// the SMs, naming the count: theirs, or batch-wgmma's where it could run the call but gives it to
// the GEMM path; forced, or with preferences off, the row kernel runs the small call.
TEST(ConvPlan, RowKernelsWithFewCtasGiveWayToTheGemmPath) {
  // HiFi-GAN V3 x8 dgrad at "high": 16 samples of 256 positions, 32 tiles of 128 x 128.
  const ConvLayerSpec small = bench::layer1d("t", "t", 16, 128, 64, 256, 16, 8, 4);
  const ConvLayerSpec more = bench::layer1d("t", "t", 64, 128, 64, 256, 16, 8, 4);
  const ConvGeometry g = geometry(small, Precision::high);
  const ConvPlan a = plan_conv(ConvPass::dgrad, g, DType::float32, DeviceCaps::h100());
  EXPECT_EQ(a.kernel, "gemm") << a.describe();
  // The row kernels give way as batch-wgmma does, naming its grid.
  EXPECT_NE(reason_of(a, "mma.sync").find("as batch-wgmma: 32 CTAs for 132 SMs"), std::string::npos)
      << a.describe();
  // Four times the samples: the batch-positions grid fills the GPU and batch-wgmma (M = 128)
  // takes the call first.
  const ConvPlan b = plan_conv(ConvPass::dgrad, geometry(more, Precision::high), DType::float32,
                               DeviceCaps::h100());
  EXPECT_EQ(b.kernel, "batch-wgmma") << b.describe();
  EXPECT_EQ(b.describe().find("(under half)"), std::string::npos) << b.describe();
  // At "highest" (64 tiles of 128 x 64) 3xTF32 cuts K into 4 slices, whose 256 CTAs fill the GPU:
  // batch-wgmma keeps the call. Forced, or with preferences off, the row kernel runs it.
  const ConvGeometry g3 = geometry(small, Precision::highest);
  const ConvPlan a3 = plan_conv(ConvPass::dgrad, g3, DType::float32, DeviceCaps::h100());
  EXPECT_EQ(a3.kernel, "batch-wgmma") << a3.describe();
  EXPECT_EQ(a3.batch.k_slices, 4) << a3.describe();
  EXPECT_EQ(plan_conv(ConvPass::dgrad, g3, DType::float32, DeviceCaps::h100(), "mma.sync").kernel,
            "mma.sync");
  EXPECT_EQ(plan_conv(ConvPass::dgrad, g3, DType::float32, DeviceCaps::h100(), "", false).kernel,
            "mma.sync");
  // A device of 48 SMs: the batch-positions grid fills it without slices, so batch-wgmma (ahead
  // of the row kernels on short 1-D calls) runs it; no row names too few CTAs.
  DeviceCaps smaller = DeviceCaps::h100();
  smaller.sm_count = 48;
  const ConvPlan c =
      plan_conv(ConvPass::dgrad, geometry(small, Precision::highest), DType::float32, smaller);
  EXPECT_EQ(c.kernel, "batch-wgmma") << c.describe();
  EXPECT_EQ(c.batch.k_slices, 1) << c.describe();
  EXPECT_EQ(c.describe().find("(under half)"), std::string::npos) << c.describe();
  // A forward at "high" whose batch-positions grid covers under half the SMs (1-D 1024 -> 512, 16
  // samples of 64 positions: 64 CTAs), where wgmma's own grid of 128 row tiles would keep it:
  // both row kernels give way to the GEMM path with batch-wgmma's reason.
  const ConvLayerSpec short_rows = bench::layer1d("t", "t", 16, 1024, 512, 64, 4, 2, 1);
  const ConvPlan f = plan_conv(ConvPass::forward, geometry(short_rows, Precision::high),
                               DType::float32, DeviceCaps::h100());
  EXPECT_EQ(f.kernel, "gemm") << f.describe();
  for (const char* row : {"wgmma", "mma.sync"}) {
    EXPECT_NE(reason_of(f, row).find("as batch-wgmma: 64 CTAs for 132 SMs"), std::string::npos)
        << f.describe();
  }
  EXPECT_EQ(plan_conv(ConvPass::forward, geometry(short_rows, Precision::high), DType::float32,
                      DeviceCaps::h100(), "", false)
                .kernel,
            "wgmma");
}

// batch-wgmma reads B from a channels-last copy of src when each src value feeds 1024
// multiply-adds or more (M x the taps that read it), or in a dgrad at stride 5 or more; else it
// gathers B from src. The plan says which. At "highest" (3xTF32, no TMA copies) these are the
// only rules; "high" adds dgrads that TMA copies (ConvPlan.BatchWgmmaCopiesByTmaWhereOneMapServes).
TEST(ConvPlan, BatchWgmmaCopiesSrcChannelsLastWhereItPays) {
  struct Case {
    ConvLayerSpec layer;
    ConvPass pass;
    bool channels_last;
  };
  const Case cases[] = {
      // DeconvNet deconv5: 512 rows x 9 taps per value, both passes.
      {bench::layer2d("t", "t", 64, 512, 512, 14, 3, 1, 1), ConvPass::forward, true},
      {bench::layer2d("t", "t", 64, 512, 512, 14, 3, 1, 1), ConvPass::dgrad, true},
      // U-Net 128 -> 64 (k2 s2): 64 x 4 forward, 128 x 4 / 4 dgrad.
      {bench::layer2d("t", "t", 8, 128, 64, 196, 2, 2, 0), ConvPass::forward, false},
      {bench::layer2d("t", "t", 8, 128, 64, 196, 2, 2, 0), ConvPass::dgrad, false},
      // EnCodec x5's dgrad: 256 x 10 / 5 = 512 uses, but stride 5.
      {bench::layer1d("t", "t", 64, 256, 128, 600, 10, 5, 0), ConvPass::dgrad, true},
      // EnCodec x4's dgrad: 128 x 8 / 4 = 256 uses at stride 4, which reads the copy by TMA at
      // "high" only (below).
      {bench::layer1d("t", "t", 64, 128, 64, 3000, 8, 4, 0), ConvPass::dgrad, false},
  };
  for (const Case& c : cases) {
    const ConvPlan plan = plan_conv(c.pass, geometry(c.layer, Precision::highest), DType::float32,
                                    DeviceCaps::h100(), "batch-wgmma");
    EXPECT_EQ(plan.batch.channels_last, c.channels_last) << plan.describe();
    EXPECT_EQ(plan.describe().find("channels-last B") != std::string::npos, c.channels_last)
        << plan.describe();
    EXPECT_EQ(plan.batch.smem_bytes,
              cuda::batch_wgmma_smem_bytes(plan.batch.bm, plan.batch.bn, c.channels_last, true));
    // batch-igemm (mma.sync) has no channels-last copy.
    EXPECT_FALSE(plan_conv(c.pass, geometry(c.layer, Precision::highest), DType::float32,
                           DeviceCaps::h100(), "batch-igemm")
                     .batch.channels_last);
  }
}

// The slices' steps (batch_igemm_slice_steps, shared with the kernel) cover a phase's steps once
// each and in order, however the phase's count compares with the slices (empty slices at the
// end), and the cursor of a slice's first step (batch_igemm_cursor) is where the kernel's
// step-by-step advance (channels, then tw, then th) would have brought it.
TEST(ConvPlan, KSlicesCoverEveryStepOnceInOrder) {
  for (int steps = 0; steps <= 70; ++steps) {
    for (int k_slices = 1; k_slices <= 17; ++k_slices) {
      int next = 0;
      for (int slice = 0; slice < k_slices; ++slice) {
        const cuda::BiSteps r = cuda::batch_igemm_slice_steps(steps, k_slices, slice);
        ASSERT_EQ(r.first, next) << steps << " steps, slice " << slice << " of " << k_slices;
        ASSERT_GE(r.count, 0);
        ASSERT_LE(r.count, (steps + k_slices - 1) / k_slices);
        next += r.count;
      }
      ASSERT_EQ(next, steps) << steps << " steps in " << k_slices << " slices";
    }
  }
  for (int chunks : {1, 2, 3}) {
    for (int tw_taps : {1, 2, 5}) {
      cuda::BiCursor k{0, 0, 0};
      for (int step = 0; step < chunks * tw_taps * 4; ++step) {
        const cuda::BiCursor c = cuda::batch_igemm_cursor(step, chunks, 32, tw_taps);
        ASSERT_EQ(c.th, k.th) << step;
        ASSERT_EQ(c.tw, k.tw) << step;
        ASSERT_EQ(c.c0, k.c0) << step;
        if ((k.c0 += 32) == chunks * 32) {  // the kernel's advance
          k.c0 = 0;
          if (++k.tw == tw_taps) k.tw = 0, ++k.th;
        }
      }
    }
  }
}

// batch-wgmma's K slices (BatchIgemmPlan::k_slices): the cost model picks the count whose waves
// of slices finish soonest, only where that clearly beats the unsliced grid, at most
// kMaxKSlices and never under two steps a slice; the planner cuts only 3xTF32 plans ("high"'s
// 1xTF32 slices measured slower). In the suite, the "highest" calls sliced are exactly those
// whose slices were timed (docs/performance.md, "K slices").
TEST(ConvPlan, BatchWgmmaCutsKIntoSlicesAtHighestWhereTheGridLeavesSmsIdle) {
  using cuda::batch_wgmma_k_slices;
  EXPECT_EQ(batch_wgmma_k_slices(10000, 64, 132), 1);  // many waves: the last one is a sliver
  EXPECT_EQ(batch_wgmma_k_slices(32, 16, 132), 8);     // 32 CTAs: 8 slices of 2 steps
  EXPECT_EQ(batch_wgmma_k_slices(1, 1000, 132), cuda::kMaxKSlices);
  EXPECT_EQ(batch_wgmma_k_slices(1, 3, 132), 1);     // under two steps a slice
  EXPECT_EQ(batch_wgmma_k_slices(1, 8, 132), 4);     // 2 steps a slice: 9 against 12
  EXPECT_EQ(batch_wgmma_k_slices(200, 32, 132), 1);  // one wave already; slices add a wave
  EXPECT_EQ(batch_wgmma_k_slices(32, 16, 0), 1);     // no SM count: no model
  struct Row {
    const char* id;
    cuda::ConvPass pass;
    int64_t slices;
  };
  const Row sliced[] = {
      {"dcgan_g2", ConvPass::dgrad, 2},         {"hifigan_v1_up1", ConvPass::forward, 2},
      {"hifigan_v1_up1", ConvPass::dgrad, 8},   {"hifigan_v1_up2", ConvPass::dgrad, 2},
      {"hifigan_v3_up1", ConvPass::forward, 4}, {"hifigan_v3_up1", ConvPass::dgrad, 16},
      {"hifigan_v3_up2", ConvPass::dgrad, 4},   {"encodec_up8", ConvPass::dgrad, 4},
  };
  for (const ConvLayerSpec& l : bench::decoder_layers()) {
    for (Precision precision : {Precision::highest, Precision::high}) {
      for (ConvPass pass : {ConvPass::forward, ConvPass::dgrad}) {
        const ConvPlan p =
            plan_conv(pass, geometry(l, precision), DType::float32, DeviceCaps::h100());
        int64_t want = 1;
        for (const Row& r : sliced)
          if (precision == Precision::highest && l.id == r.id && pass == r.pass) want = r.slices;
        EXPECT_EQ(p.batch.k_slices, want) << p.describe();
        if (want > 1) {
          EXPECT_EQ(p.kernel, "batch-wgmma") << p.describe();
          EXPECT_NE(p.describe().find(std::to_string(want) + " K slices"), std::string::npos);
        }
      }
    }
  }
}

// batch-wgmma copies both tiles by TMA where it reads the channels-last copy at 1xTF32 and one
// im2col map serves every phase; the map's corners follow the phase arithmetic; otherwise it
// keeps its cp.async copies and batch_wgmma_tma_check says why.
TEST(ConvPlan, BatchWgmmaCopiesByTmaWhereOneMapServes) {
  const auto plan = [](const ConvLayerSpec& l, ConvPass pass, Precision precision) {
    return plan_conv(pass, geometry(l, precision), DType::float32, DeviceCaps::h100(),
                     "batch-wgmma");
  };
  // Every suite layer forced: TMA exactly where channels-last B is read at "high" (every suite
  // layer's phases have equal position counts), never at "highest" (3xTF32's residual planes).
  int tma = 0;
  for (const ConvLayerSpec& l : bench::decoder_layers()) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::dgrad}) {
      const ConvPlan high = plan(l, pass, Precision::high);
      EXPECT_EQ(high.batch.tma, high.batch.channels_last) << high.describe();
      EXPECT_EQ(high.describe().find("copies by TMA") != std::string::npos, high.batch.tma)
          << high.describe();
      tma += high.batch.tma ? 1 : 0;
      EXPECT_FALSE(plan(l, pass, Precision::highest).batch.tma) << l.id;
    }
  }
  EXPECT_GE(tma, 10);
  // DeconvNet deconv5 (k3 s1 p1): forward taps read src q - 1 .. q + 1, so the box starts at -1
  // and ends 1 past the plane; dgrad the same at stride 1.
  const ConvLayerSpec deconv5 = bench::layer2d("t", "t", 64, 512, 512, 14, 3, 1, 1);
  for (ConvPass pass : {ConvPass::forward, ConvPass::dgrad}) {
    const ConvPlan p = plan(deconv5, pass, Precision::high);
    ASSERT_TRUE(p.batch.tma) << p.describe();
    EXPECT_EQ(p.batch.tma_lower[0], -1);
    EXPECT_EQ(p.batch.tma_lower[1], -1);
    EXPECT_EQ(p.batch.tma_upper[0], -1);
    EXPECT_EQ(p.batch.tma_upper[1], -1);
  }
  // At "high", where TMA copies the channels-last copy, a dgrad reads it from 512 uses or at
  // stride 4: DCGAN 128 -> 64 (128 x 16 / 4 = 512), EnCodec x4 (256 at stride 4); U-Net 128 ->
  // 64 (128 x 4 / 4 = 128) and CycleGAN 128 -> 64 (128 x 9 / 4 = 288, stride 2) keep the gather,
  // and a forward keeps the 1024 of every precision (U-Net 256 -> 128: 128 x 4 = 512).
  const struct {
    ConvLayerSpec layer;
    ConvPass pass;
    bool channels_last;
  } high_cases[] = {
      {bench::layer2d("t", "t", 128, 128, 64, 16, 4, 2, 1), ConvPass::dgrad, true},
      {bench::layer1d("t", "t", 64, 128, 64, 3000, 8, 4, 0), ConvPass::dgrad, true},
      {bench::layer2d("t", "t", 8, 128, 64, 196, 2, 2, 0), ConvPass::dgrad, false},
      {bench::layer2d("t", "t", 4, 128, 64, 128, 3, 2, 1, 1), ConvPass::dgrad, false},
      {bench::layer2d("t", "t", 8, 256, 128, 100, 2, 2, 0), ConvPass::forward, false},
  };
  for (const auto& c : high_cases) {
    const ConvPlan p = plan(c.layer, c.pass, Precision::high);
    EXPECT_EQ(p.batch.channels_last, c.channels_last) << p.describe();
    EXPECT_EQ(p.batch.tma, c.channels_last) << p.describe();
  }
  // HiFi-GAN's x8 dgrad (k16 s8 p4, 32 -> 256): dx position q reads dy q*8 - 4 + k, so the box
  // starts at -4, and 32 positions at stride 8 span (32 - 1)*8 + 1 = 249 = 256 + upper + 4.
  const ConvLayerSpec hifigan = bench::layer1d("t", "t", 16, 512, 256, 32, 16, 8, 4);
  const ConvPlan h = plan(hifigan, ConvPass::dgrad, Precision::high);
  ASSERT_TRUE(h.batch.tma) << h.describe();
  EXPECT_EQ(h.batch.tma_lower[1], -4);
  EXPECT_EQ(h.batch.tma_upper[1], -11);
  EXPECT_EQ(h.batch.tma_lower[0], 0);
  EXPECT_EQ(h.batch.tma_upper[0], 0);
  // Declined, each with its reason (the plan stays on cp.async copies).
  struct Case {
    ConvLayerSpec layer;
    ConvPass pass;
    const char* reason;
  };
  ConvLayerSpec odd = bench::layer2d("t", "t", 8, 512, 256, 16, 3, 2, 1);  // 31 x 31 outputs
  const Case cases[] = {
      // Stride 9: dgrad's positions 9 src columns apart.
      {bench::layer1d("t", "t", 8, 512, 256, 64, 18, 9, 0), ConvPass::dgrad, "traversal stride"},
      // k3 s2 p1 without output padding: phases of 16 and 15 positions.
      {odd, ConvPass::forward, "one im2col traversal"},
  };
  for (const Case& c : cases) {
    const ConvPlan p = plan(c.layer, c.pass, Precision::high);
    ASSERT_TRUE(p.batch.channels_last) << p.describe();
    EXPECT_FALSE(p.batch.tma) << p.describe();
    cuda::BatchIgemmPlan copy = p.batch;
    const std::string why = cuda::batch_wgmma_tma_check(geometry(c.layer, Precision::high),
                                                        c.pass == ConvPass::forward, copy);
    EXPECT_NE(why.find(c.reason), std::string::npos) << why;
  }
  // More taps along an axis than the tap tables hold: declined, not read past them.
  ConvLayerSpec long_k = bench::layer1d("t", "t", 2, 64, 64, 400, 80, 1, 0);
  cuda::BatchIgemmPlan long_plan;
  long_plan.c_pad = 64;
  const std::string taps_why =
      cuda::batch_wgmma_tma_check(geometry(long_k, Precision::high), false, long_plan);
  EXPECT_NE(taps_why.find("80 taps along W"), std::string::npos) << taps_why;
  // Padding past the map's corner range (128 positions of zeros before the first src value).
  ConvLayerSpec far = bench::layer1d("t", "t", 2, 256, 256, 400, 3, 1, 0);
  far.dilation = {200, 0};
  cuda::BatchIgemmPlan far_plan = plan(far, ConvPass::dgrad, Precision::high).batch;
  const std::string corner =
      cuda::batch_wgmma_tma_check(geometry(far, Precision::high), false, far_plan);
  EXPECT_NE(corner.find("corners"), std::string::npos) << corner;
}

// wgrad's batch-wgmma: float32 on a 9.0 device with the sm_90a code, 1xTF32 128 x 128 tiles at
// "high", 3xTF32 128 x 64 (or 64 x 128 for at most 64 rows) at "highest"; K (the batch's
// positions) cut into slices of at least 16 steps that cover it once; and the measured
// preferences, each named: grids under a quarter of the SMs go to the GEMM path, and so do 256
// input channels or more at "high"; C_in <= 32 (or <= 64 at stride 1 at
// "high") to the split-K kernel; few channels to the direct kernels, but at "highest" it keeps
// outputs narrow through C_out alone. Forced, it runs all of them.
TEST(ConvPlan, WgradBatchWgmmaTakesBothPrecisionsAndNamesItsPreferences) {
  const DeviceCaps h100 = DeviceCaps::h100();
  const auto plan = [&](const ConvLayerSpec& l, Precision precision = Precision::high,
                        const DeviceCaps& caps = DeviceCaps::h100(), const std::string& forced = "",
                        DType dtype = DType::float32) {
    return plan_conv(ConvPass::wgrad, geometry(l, precision), dtype, caps, forced);
  };
  // DCGAN 128 -> 64 at 16x16, batch 128: 32768 positions = 1024 steps, one row tile of 128 and
  // 1024 / 128 = 8 column tiles; 512 CTAs wanted, so 64 slices of 16 steps.
  const ConvLayerSpec dcgan = bench::layer2d("t", "t", 128, 128, 64, 16, 4, 2, 1);
  const ConvPlan a = plan(dcgan);
  ASSERT_EQ(a.kernel, "batch-wgmma") << a.describe();
  EXPECT_EQ(a.label(), "wgrad (batch-wgmma)");
  const cuda::BatchWgradPlan& p = a.batch_wgrad;
  EXPECT_EQ(p.m_tiles, 1);
  EXPECT_EQ(p.n_tiles, 8);
  EXPECT_EQ(p.steps, 1024);
  EXPECT_EQ(p.splits, 64) << a.describe();
  EXPECT_EQ(p.steps_per_split, 16);
  EXPECT_NE(a.describe().find("64 K slices of 16 steps"), std::string::npos) << a.describe();
  // The slices depend on the shape alone (the bits do not depend on the GPU's SM count).
  DeviceCaps fewer_sms = h100;
  fewer_sms.sm_count = 78;
  EXPECT_EQ(plan(dcgan, Precision::high, fewer_sms).batch_wgrad.splits, 64);
  // Slices cover K once for any length: the last one may be short, none is empty.
  for (int64_t n : {1, 3, 7, 129}) {
    const ConvPlan b = plan(bench::layer2d("t", "t", n, 128, 64, 16, 4, 2, 1), Precision::high,
                            h100, "batch-wgmma");
    const cuda::BatchWgradPlan& q = b.batch_wgrad;
    EXPECT_EQ(q.steps, (n * 256 + 31) / 32) << b.describe();
    EXPECT_GE(q.splits * q.steps_per_split, q.steps) << b.describe();
    EXPECT_LT((q.splits - 1) * q.steps_per_split, q.steps) << b.describe();
    EXPECT_TRUE(q.splits == 1 || q.steps_per_split >= 16) << b.describe();
  }
  // "highest": 3xTF32 on 128 x 64 tiles (128 rows), twice the operands in shared memory, so
  // 16 column tiles; 64 x 128 where the rows fit 64.
  const ConvPlan h = plan(dcgan, Precision::highest);
  ASSERT_EQ(h.kernel, "batch-wgmma") << h.describe();
  const cuda::BatchWgradPlan& hp = h.batch_wgrad;
  EXPECT_TRUE(hp.split);
  EXPECT_EQ(hp.bm, 128);
  EXPECT_EQ(hp.bn, 64);
  EXPECT_EQ(hp.m_tiles, 1);
  EXPECT_EQ(hp.n_tiles, 16);
  EXPECT_EQ(hp.smem_bytes, 2 * 2 * 32 * (128 + 64) * 4);
  EXPECT_NE(h.describe().find("tile 128x64/32 positions 3xTF32"), std::string::npos)
      << h.describe();
  EXPECT_FALSE(a.batch_wgrad.split);
  const ConvPlan h64 = plan(bench::layer2d("t", "t", 128, 64, 32, 32, 4, 2, 1), Precision::highest);
  ASSERT_EQ(h64.kernel, "batch-wgmma") << h64.describe();
  EXPECT_EQ(h64.batch_wgrad.bm, 64);
  EXPECT_EQ(h64.batch_wgrad.bn, 128);
  EXPECT_EQ(h64.batch_wgrad.n_tiles, 4);  // 32 x 16 columns
  // What it cannot run: float64, another device, a build without sm_90a code.
  EXPECT_NE(reason_of(plan(dcgan, Precision::high, h100, "", DType::float64), "batch-wgmma")
                .find("float32 only"),
            std::string::npos);
  DeviceCaps a100 = h100;
  a100.sm_major = 8;
  EXPECT_NE(reason_of(plan(dcgan, Precision::high, a100), "batch-wgmma")
                .find("compute capability 8.0: wgmma needs 9.0"),
            std::string::npos);
  DeviceCaps no_code = h100;
  no_code.wgmma_compiled = false;
  EXPECT_NE(reason_of(plan(dcgan, Precision::high, no_code), "batch-wgmma").find("no sm_90a code"),
            std::string::npos);
  // Forced there, it throws naming the pass, itself and the reason.
  const std::string forced_f64 =
      testing::error_of([&] { plan(dcgan, Precision::high, h100, "batch-wgmma", DType::float64); });
  EXPECT_NE(forced_f64.find("conv_transpose wgrad: the forced kernel 'batch-wgmma'"),
            std::string::npos)
      << forced_f64;
  EXPECT_NE(forced_f64.find("float32 only"), std::string::npos) << forced_f64;
  // The preferences, each named, at "high" and at "highest" (empty: it keeps the call); forced,
  // the kernel runs the call at both.
  struct Case {
    ConvLayerSpec layer;
    const char *kernel_high, *reason_high, *kernel_highest, *reason_highest;
  };
  const Case cases[] = {
      {bench::layer2d("t", "t", 8, 512, 256, 52, 2, 2, 0), "gemm", "C_in/groups=512 >= 256",
       "batch-wgmma", ""},
      // HiFi-GAN V3's first x8: 256 input channels at "high" (32 CTAs of 128 x 128 too), 64 CTAs
      // of 128 x 64 at "highest".
      {bench::layer1d("t", "t", 16, 256, 128, 32, 16, 8, 4), "gemm", "C_in/groups=256 >= 256",
       "batch-wgmma", ""},
      {bench::layer1d("t", "t", 8, 128, 64, 32, 16, 8, 4), "gemm",
       "8 CTAs for 132 SMs (under a quarter)", "gemm", "16 CTAs for 132 SMs (under a quarter)"},
      {bench::layer1d("t", "t", 16, 32, 64, 131072, 3, 2, 1), "mma.sync",
       "C_in/groups=32: the split-K mma.sync kernel's 32-row tiles fit it", "mma.sync",
       "C_in/groups=32: the split-K mma.sync kernel's 32-row tiles fit it"},
      {bench::layer1d("t", "t", 64, 64, 128, 65536, 3, 1, 0), "mma.sync",
       "C_in/groups=64 at stride 1", "batch-wgmma", ""},
      {bench::layer1d("t", "t", 8, 512, 1, 3999, 16, 8, 0), "direct", "few channels per group",
       "batch-wgmma", ""},
      // Groups of 16 x 8 channels (grouped_g8): few channels either way, but at "high" a group's
      // 16 x 64 GEMM is big enough for batch-wgmma's TF32; with 4 taps (16 x 32) it is not.
      {bench::layer1d("t", "t", 64, 128, 64, 3000, 8, 4, 2, 0, 8), "batch-wgmma", "", "direct",
       "few channels per group"},
      {bench::layer1d("t", "t", 64, 128, 64, 3000, 4, 2, 1, 0, 8), "direct",
       "few channels per group", "direct", "few channels per group"},
      // 16 x 8 channels with 16 taps (2048 entries a group): batch-wgmma at both precisions.
      {bench::layer2d("t", "t", 32, 128, 64, 32, 4, 2, 1, 0, 8), "batch-wgmma", "", "batch-wgmma",
       ""},
  };
  for (const Case& c : cases) {
    for (Precision precision : {Precision::high, Precision::highest}) {
      const bool high = precision == Precision::high;
      const ConvPlan d = plan(c.layer, precision);
      EXPECT_EQ(d.kernel, high ? c.kernel_high : c.kernel_highest) << d.describe();
      const std::string reason = high ? c.reason_high : c.reason_highest;
      if (!reason.empty()) {
        EXPECT_NE(reason_of(d, "batch-wgmma").find(reason), std::string::npos) << d.describe();
      }
      EXPECT_EQ(plan(c.layer, precision, h100, "batch-wgmma").kernel, "batch-wgmma");
    }
  }
  // At stride 2, 64 input channels stay here (EnCodec x2).
  EXPECT_EQ(plan(bench::layer1d("t", "t", 64, 64, 32, 12000, 4, 2, 0)).kernel, "batch-wgmma");
}

// The split-K kernel gives way to the GEMM path for two measured reasons, each named in the
// plan: 256 input channels or more, and splits of fewer than 4 segments. Preferences, not
// inabilities: forced, or with preferences off, the split-K kernel runs both.
TEST(ConvPlan, WgradGivesWideInputsAndShortSplitsToTheGemmPath) {
  // A 9.0 device without the sm_90a code: batch-wgmma, which takes most of these calls at
  // "high" first, declines, so both precisions reach the split-K kernel's rules.
  DeviceCaps caps = DeviceCaps::h100();
  caps.wgmma_compiled = false;
  const ConvLayerSpec wide = bench::layer2d("t", "t", 8, 512, 256, 52, 2, 2, 0);
  const ConvLayerSpec narrower = bench::layer2d("t", "t", 8, 128, 256, 52, 2, 2, 0);
  const ConvLayerSpec short_rows = bench::layer1d("t", "t", 16, 64, 32, 4096, 4, 2, 1);
  const ConvLayerSpec long_rows = bench::layer1d("t", "t", 64, 64, 32, 12000, 4, 2, 0);
  for (Precision precision : {Precision::highest, Precision::high}) {
    const auto plan = [&](const ConvLayerSpec& l, const std::string& forced = "",
                          bool prefer = true) {
      return plan_conv(ConvPass::wgrad, geometry(l, precision), DType::float32, caps, forced,
                       prefer);
    };
    const ConvPlan a = plan(wide);
    EXPECT_EQ(a.kernel, "gemm") << a.describe();
    EXPECT_NE(reason_of(a, "mma.sync").find("C_in=512 >= 256"), std::string::npos) << a.describe();
    // The same layer with 128 input channels keeps the split-K kernel.
    EXPECT_EQ(plan(narrower).kernel, "mma.sync") << plan(narrower).describe();
    const ConvPlan b = plan(short_rows);
    EXPECT_EQ(b.kernel, "gemm") << b.describe();
    EXPECT_NE(reason_of(b, "mma.sync").find("1 segment(s) of 64 positions a split (below 4)"),
              std::string::npos)
        << b.describe();
    // Four times the positions a sample, four times the samples: 12 segments a split.
    const ConvPlan c = plan(long_rows);
    EXPECT_EQ(c.kernel, "mma.sync") << c.describe();
    EXPECT_GE(c.wgrad.plan.segs_per_split, 4) << c.describe();
    for (const ConvLayerSpec* l : {&wide, &short_rows}) {
      EXPECT_EQ(plan(*l, "mma.sync").kernel, "mma.sync");
      EXPECT_EQ(plan(*l, "", /*prefer=*/false).kernel, "mma.sync");
    }
  }
}

// The GEMM path's wgrad slices K finer at "highest" float32 for weights of at most 2^20
// elements (down to 1024 columns a slice, aiming at 2^23 elements x slices), and keeps the
// default (4096 columns, 2^20) elsewhere; more than 16 groups never slice.
TEST(ConvPlan, GemmWgradSlicesFinerForSmallWeightsAtHighest) {
  using cuda::gemm_wgrad_splits;
  // HiFi-GAN x2: 64 x 32 x 4 = 8192 elements, L = 16 x 4096 columns.
  ConvGeometry small =
      geometry(bench::layer1d("t", "t", 16, 64, 32, 4096, 4, 2, 1), Precision::highest);
  const int64_t L = 16 * 4096;
  EXPECT_EQ(gemm_wgrad_splits(small, DType::float32, L), 64);    // min(65536 / 1024, 2^23 / 8192)
  EXPECT_EQ(gemm_wgrad_splits(small, DType::float64, L), 16);    // min(65536 / 4096, 2^20 / 8192)
  EXPECT_EQ(gemm_wgrad_splits(small, DType::float32, 2048), 2);  // 2048 / 1024 columns
  EXPECT_EQ(gemm_wgrad_splits(small, DType::float32, 512), 1);
  small.precision = Precision::high;
  EXPECT_EQ(gemm_wgrad_splits(small, DType::float32, L), 16);
  // 128 slices at most: 64 x 32 x 1 elements over 2^20 columns would want 1024.
  ConvGeometry tiny =
      geometry(bench::layer1d("t", "t", 256, 64, 32, 4096, 1, 1, 0), Precision::highest);
  EXPECT_EQ(gemm_wgrad_splits(tiny, DType::float32, int64_t{1} << 20), 128);
  // DeconvNet deconv5: 512 x 512 x 9 elements, past 2^20: the default at both precisions.
  ConvGeometry wide =
      geometry(bench::layer2d("t", "t", 64, 512, 512, 14, 3, 1, 1), Precision::highest);
  EXPECT_EQ(gemm_wgrad_splits(wide, DType::float32, 64 * 196), 1);  // min(3, 1)
  // Exactly 2^20 elements (256 x 256 x 16) still slices finely; more than 16 groups never.
  ConvGeometry edge =
      geometry(bench::layer2d("t", "t", 8, 256, 256, 32, 4, 2, 1), Precision::highest);
  EXPECT_EQ(gemm_wgrad_splits(edge, DType::float32, 8 * 1024), 8);  // min(8, 2^23 / 2^20)
  ConvLayerSpec many = bench::layer2d("t", "t", 8, 64, 64, 32, 4, 2, 1);
  many.groups = 32;
  EXPECT_EQ(gemm_wgrad_splits(geometry(many, Precision::highest), DType::float32, 1 << 20), 1);
}

// wgrad of the narrow suite layers: the direct kernels, but depthwise layers keep theirs, and
// batch-wgmma keeps the RGB and mono outputs (at "high" with more than 16 (C_out, tap) columns,
// at "highest" with more than 8 input channels).
TEST(ConvPlan, NarrowSuiteLayersRunTheDirectWgrad) {
  for (const ConvLayerSpec& l : bench::decoder_layers()) {
    const int64_t cig = l.in_channels / l.groups, cog = l.out_channels / l.groups;
    const bool depthwise = cig == 1 && cog == 1;
    for (Precision precision : {Precision::highest, Precision::high}) {
      const ConvPlan plan =
          plan_conv(ConvPass::wgrad, geometry(l, precision), DType::float32, DeviceCaps::h100());
      if (depthwise) {
        EXPECT_EQ(plan.kernel, "depthwise") << plan.describe();
      } else if (expect_direct(ConvPass::wgrad, l, DType::float32, precision)) {
        EXPECT_EQ(plan.kernel, "direct") << plan.describe();
        EXPECT_EQ(plan.label(), "wgrad (direct)");
      } else {
        EXPECT_NE(plan.kernel, "direct") << plan.describe();
      }
    }
  }
}

// The direct row: the rows above give way to it on narrow calls, naming the channels; it
// declines wide calls unless forced; its configuration follows the channel counts.
TEST(ConvPlan, TheDirectRowTakesNarrowCallsAndSaysWhy) {
  const DeviceCaps h100 = DeviceCaps::h100();
  // RGB output, k4 s2 at "highest": every pass goes to the thin row above the direct one
  // (ConvPlan.TheThinRowTakesThinOutputsAndSaysWhy), so the direct row is forced here; with 5
  // output channels (past the thin row) wgrad goes direct on its own.
  const ConvLayerSpec rgb = bench::layer2d("t", "t", 16, 64, 3, 32, 4, 2, 1);
  const ConvLayerSpec five = bench::layer2d("t", "t", 16, 64, 5, 32, 1, 1, 0);
  const ConvPlan five_w =
      plan_conv(ConvPass::wgrad, geometry(five, Precision::highest), DType::float32, h100);
  EXPECT_EQ(five_w.kernel, "direct") << five_w.describe();
  EXPECT_NE(reason_of(five_w, "mma.sync").find("C_in/groups=64, C_out/groups=5: few channels"),
            std::string::npos)
      << five_w.describe();
  for (ConvPass pass : kPasses) {
    const ConvPlan plan = plan_conv(pass, geometry(rgb, Precision::highest), DType::float32, h100);
    EXPECT_EQ(plan.kernel, "thin") << plan.describe();
    EXPECT_NE(reason_of(plan, "mma.sync").find("C_out/groups=3: a thin output"), std::string::npos)
        << plan.describe();
    const ConvPlan direct =
        plan_conv(pass, geometry(rgb, Precision::highest), DType::float32, h100, "direct");
    EXPECT_GT(direct.direct.grid_x, 0) << direct.describe();
  }
  const ConvPlan fwd = plan_conv(ConvPass::forward, geometry(rgb, Precision::highest),
                                 DType::float32, h100, "direct");
  EXPECT_EQ(fwd.direct.reg, 4) << fwd.describe();     // three channels in a block of four
  EXPECT_EQ(fwd.direct.stage, 32) << fwd.describe();  // 64 channels in stages of 32
  EXPECT_EQ(fwd.direct.warps, 8) << fwd.describe();   // 4 phases x 2 runs of 32 positions
  EXPECT_NE(fwd.describe().find("4 output channels a thread"), std::string::npos) << fwd.describe();
  const ConvPlan dgrad =
      plan_conv(ConvPass::dgrad, geometry(rgb, Precision::highest), DType::float32, h100, "direct");
  EXPECT_EQ(dgrad.direct.reg, 8) << dgrad.describe();
  EXPECT_EQ(dgrad.direct.grid_y, 8) << dgrad.describe();  // 64 input channels / 8
  const ConvPlan wgrad =
      plan_conv(ConvPass::wgrad, geometry(rgb, Precision::highest), DType::float32, h100, "direct");
  EXPECT_EQ(wgrad.direct.reg, 8) << wgrad.describe();
  EXPECT_EQ(wgrad.direct.cols, 8) << wgrad.describe();
  // Chunks cover the 16 x 32 x 32 positions, none longer than the float32 chain allows.
  EXPECT_GE(wgrad.direct.chunks * wgrad.direct.chunk_len, 16 * 32 * 32) << wgrad.describe();
  EXPECT_LE(wgrad.direct.chunk_len, cuda::kDirectWgradMaxChunk) << wgrad.describe();
  EXPECT_EQ(wgrad.direct.grid_x, (64 / 8) * (3 * 16 / 8) * wgrad.direct.chunks) << wgrad.describe();

  // Six output channels (past the thin row) from 512 input channels, k16 s8: the forward sums
  // 512 x 2 products a output, too long for one thread, so the GEMM path; dgrad and wgrad go
  // direct.
  const ConvLayerSpec mono = bench::layer1d("t", "t", 4, 512, 6, 500, 16, 8, 0);
  const ConvPlan long_sum =
      plan_conv(ConvPass::forward, geometry(mono, Precision::highest), DType::float32, h100);
  EXPECT_EQ(long_sum.kernel, "gemm") << long_sum.describe();
  EXPECT_NE(reason_of(long_sum, "direct").find("sums too long"), std::string::npos)
      << long_sum.describe();
  EXPECT_EQ(
      plan_conv(ConvPass::dgrad, geometry(mono, Precision::highest), DType::float32, h100).kernel,
      "direct");
  // Forced, the direct kernels run that forward and wide calls too; float64 as well.
  EXPECT_EQ(plan_conv(ConvPass::forward, geometry(mono, Precision::highest), DType::float32, h100,
                      "direct")
                .kernel,
            "direct");
  const ConvGeometry wide = small_2d(64, 64, 1, Precision::high);
  EXPECT_EQ(plan_conv(ConvPass::wgrad, wide, DType::float64, h100, "direct").kernel, "direct");
  // Unforced, a wide float64 call passes the direct row for the GEMM path.
  const ConvPlan wide64 = plan_conv(ConvPass::wgrad, wide, DType::float64, h100);
  EXPECT_EQ(wide64.kernel, "gemm") << wide64.describe();
  EXPECT_NE(reason_of(wide64, "direct").find("not few channels per group"), std::string::npos)
      << wide64.describe();
  // One input channel's weights past the shared-memory stage: 64 x 64 taps x 8 channels x 4 B.
  const ConvLayerSpec huge_taps = bench::layer2d("t", "t", 1, 4, 8, 8, 64, 1, 0);
  const std::string e = testing::error_of([&] {
    plan_conv(ConvPass::forward, geometry(huge_taps, Precision::highest), DType::float32, h100,
              "direct");
  });
  EXPECT_NE(e.find("exceed the shared-memory stage"), std::string::npos) << e;
  // int64 tensors reach no conv kernel.
  EXPECT_NE(cuda::direct_path_declined(ConvPass::forward, wide, DType::int64, nullptr)
                .find("int64 is not float32 or float64"),
            std::string::npos);
}

// Grouped calls: the direct kernels keep a forward and dgrad up to 16 x 16 channels per group;
// past that the batch-positions kernels take them (float32), while float64, which those cannot
// run, still goes direct up to 32 x 32. A float32 wgrad with more than 8 channels each way per
// group goes to batch-wgmma at both precisions. Depthwise: the thin kernel takes the 2-D forwards
// under 2^20 outputs whose cells read 2 x 2 inputs, the depthwise kernel keeps the others and
// every dgrad and wgrad.
// Geometries outside the suite (docs/performance.md has their timings).
TEST(ConvPlan, GroupedAndDepthwiseCallsGoWhereTheyMeasuredFastest) {
  const DeviceCaps h100 = DeviceCaps::h100();
  const auto kernel = [&](ConvPass pass, const ConvLayerSpec& l, Precision precision,
                          DType dtype = DType::float32) {
    return plan_conv(pass, geometry(l, precision), dtype, h100).kernel;
  };
  // 16 x 16 per group (8 groups, 1-D k4 s2): direct at both precisions.
  const ConvLayerSpec g16x16 = bench::layer1d("t", "t", 16, 128, 128, 4096, 4, 2, 1, 0, 8);
  // 32 x 32 per group (8 groups, 2-D k4 s2): batch-igemm.
  const ConvLayerSpec g32x32 = bench::layer2d("t", "t", 16, 256, 256, 32, 4, 2, 1, 0, 8);
  for (Precision precision : {Precision::highest, Precision::high}) {
    for (ConvPass pass : {ConvPass::forward, ConvPass::dgrad}) {
      EXPECT_EQ(kernel(pass, g16x16, precision), "direct");
      EXPECT_EQ(kernel(pass, g32x32, precision), "batch-igemm");
      EXPECT_EQ(kernel(pass, g32x32, precision, DType::float64), "direct");
    }
  }
  const ConvPlan wide_fwd = plan_conv(ConvPass::forward, geometry(g32x32, Precision::high),
                                      DType::float32, h100, "direct");
  EXPECT_EQ(wide_fwd.kernel, "direct");  // forced, it still runs
  // 48 x 24 per group (4 groups, 2-D k3 s2 op1): the wgrad goes to batch-wgmma at both
  // precisions (at "highest" its 3xTF32 was faster than the direct kernel); float64 keeps the
  // GEMM path past 32 x 32.
  const ConvLayerSpec g48x24 = bench::layer2d("t", "t", 16, 192, 96, 32, 3, 2, 1, 1, 4);
  EXPECT_EQ(kernel(ConvPass::wgrad, g48x24, Precision::highest), "batch-wgmma");
  EXPECT_EQ(kernel(ConvPass::wgrad, g48x24, Precision::high), "batch-wgmma");
  EXPECT_EQ(kernel(ConvPass::wgrad, g48x24, Precision::highest, DType::float64), "gemm");
  EXPECT_EQ(kernel(ConvPass::forward, g48x24, Precision::highest), "batch-igemm");

  // Depthwise, k3 s2 p1 op1 at 24x24 (2 x 2 inputs a cell, 16 x 96 x 48 x 48 = 3.5M outputs
  // at batch 16, 221K at batch 1): the small forward on the thin kernel, the depthwise row naming
  // why it gave way; the large one, dgrad and wgrad on the depthwise kernels.
  const ConvLayerSpec dw_k3s2 = bench::layer2d("t", "t", 1, 96, 96, 24, 3, 2, 1, 1, 96);
  ConvLayerSpec dw_k3s2_large = dw_k3s2;
  dw_k3s2_large.batch = 16;
  for (Precision precision : {Precision::highest, Precision::high}) {
    const ConvPlan fwd =
        plan_conv(ConvPass::forward, geometry(dw_k3s2, precision), DType::float32, h100);
    EXPECT_EQ(fwd.kernel, "thin") << fwd.describe();
    EXPECT_NE(reason_of(fwd, "depthwise").find("cells read 2 x 2 inputs"), std::string::npos)
        << fwd.describe();
    EXPECT_EQ(kernel(ConvPass::forward, dw_k3s2_large, precision), "depthwise");
    EXPECT_EQ(kernel(ConvPass::dgrad, dw_k3s2, precision), "depthwise");
    EXPECT_EQ(kernel(ConvPass::wgrad, dw_k3s2, precision), "depthwise");
    EXPECT_EQ(kernel(ConvPass::forward, dw_k3s2, precision, DType::float64), "depthwise");
  }
  // Cells of other shapes keep the depthwise forward: 3x3 s1 (nine inputs), k2 s2 (one), 1-D
  // k16 s8 (two).
  const ConvLayerSpec dw_k3s1 = bench::layer2d("t", "t", 16, 128, 128, 56, 3, 1, 1, 0, 128);
  const ConvLayerSpec dw_k2s2 = bench::layer2d("t", "t", 4, 512, 512, 32, 2, 2, 0, 0, 512);
  const ConvLayerSpec dw_1d = bench::layer1d("t", "t", 8, 32, 32, 8192, 16, 8, 4, 0, 32);
  for (const ConvLayerSpec& l : {dw_k3s1, dw_k2s2, dw_1d})
    EXPECT_EQ(kernel(ConvPass::forward, l, Precision::high), "depthwise");
  // Forced, the depthwise kernel still runs the forward the thin kernel would take.
  EXPECT_EQ(plan_conv(ConvPass::forward, geometry(dw_k3s2, Precision::high), DType::float32, h100,
                      "depthwise")
                .kernel,
            "depthwise");
}

// The thin row: the rows above give way to it on thin outputs, naming the channels; its
// configuration follows the geometry (cells, window, channel splits); it says why it declines
// what it cannot run, and a forced call it cannot run is a tgrad::Error naming why.
TEST(ConvPlan, TheThinRowTakesThinOutputsAndSaysWhy) {
  const DeviceCaps h100 = DeviceCaps::h100();
  // RGB output, k4 s2 p1, 16 samples at 32x32: a cell is 2x2 outputs of 3 channels (12 slots of
  // a block of 12) reading 2x2 inputs; 33x33 cells (the padding cuts the first and last).
  const ConvLayerSpec rgb = bench::layer2d("t", "t", 16, 64, 3, 32, 4, 2, 1);
  const ConvPlan fwd =
      plan_conv(ConvPass::forward, geometry(rgb, Precision::high), DType::float32, h100);
  ASSERT_EQ(fwd.kernel, "thin") << fwd.describe();
  EXPECT_EQ(fwd.thin.block, 12);
  EXPECT_EQ(fwd.thin.used, 12);
  EXPECT_EQ(fwd.thin.th, 2);
  EXPECT_EQ(fwd.thin.tw, 2);
  EXPECT_EQ(fwd.thin.cell0_h, 0);
  EXPECT_EQ(fwd.thin.cells_h, 33);
  EXPECT_EQ(fwd.thin.items, 16 * 33 * 33);
  // 17424 cells want 16 splits for 2^18 threads, but no split under 32 channels: 2 of 32.
  EXPECT_EQ(fwd.thin.splits, 2);
  EXPECT_EQ(fwd.thin.split_len, 32);
  EXPECT_EQ(fwd.thin.smem_bytes, 32 * 2 * 2 * 12 * 4);
  EXPECT_EQ(fwd.thin.grid_y, 2);
  EXPECT_NE(fwd.describe().find("12 of 12 outputs a cell, 2x2 inputs a cell, 2 splits of 32"),
            std::string::npos)
      << fwd.describe();
  EXPECT_NE(reason_of(fwd, "wgmma").find("C_out/groups=3: a thin output"), std::string::npos)
      << fwd.describe();
  const ConvPlan dgrad =
      plan_conv(ConvPass::dgrad, geometry(rgb, Precision::highest), DType::float32, h100);
  ASSERT_EQ(dgrad.kernel, "thin") << dgrad.describe();
  EXPECT_EQ(dgrad.thin.block, 48);  // 3 channels x 16 taps
  EXPECT_EQ(dgrad.thin.items, 16 * 32 * 32);
  EXPECT_EQ(dgrad.thin.splits, 2);
  EXPECT_NE(dgrad.describe().find("window 48 of 48, 2 splits of 32"), std::string::npos)
      << dgrad.describe();

  // Mono output from 512 channels, k16 s8 (Conv-TasNet's decoder, 4 samples of 500 frames): a
  // cell is the 8 outputs of one frame, reading 2 frames; 501 cells a sample. 2004 cells want
  // 131 splits, 512 channels allow 16.
  const ConvLayerSpec mono = bench::layer1d("t", "t", 4, 512, 1, 500, 16, 8, 0);
  const ConvPlan mfwd =
      plan_conv(ConvPass::forward, geometry(mono, Precision::highest), DType::float32, h100);
  ASSERT_EQ(mfwd.kernel, "thin") << mfwd.describe();
  EXPECT_EQ(mfwd.thin.block, 8);
  EXPECT_EQ(mfwd.thin.th * mfwd.thin.tw, 2);
  EXPECT_EQ(mfwd.thin.items, 4 * 501);
  EXPECT_EQ(mfwd.thin.splits, 16);
  EXPECT_EQ(mfwd.thin.split_len, 32);
  const ConvPlan mdgrad =
      plan_conv(ConvPass::dgrad, geometry(mono, Precision::highest), DType::float32, h100);
  ASSERT_EQ(mdgrad.kernel, "thin") << mdgrad.describe();
  EXPECT_EQ(mdgrad.thin.block, 16);
  EXPECT_EQ(mdgrad.thin.splits, 16);
  // A large call needs no splits: 2^18 positions or more.
  const ConvLayerSpec big = bench::layer1d("t", "t", 64, 512, 1, 4096, 16, 8, 0);
  EXPECT_EQ(plan_conv(ConvPass::dgrad, geometry(big, Precision::highest), DType::float32, h100)
                .thin.splits,
            1);
  // Weights past shared memory force more splits: 4 taps x 4 channels x 2x2 strides in a block
  // of 16 floats, 5x5 inputs a cell (k9 s2): 1600 B a channel, at most 30 channels a split.
  const ConvLayerSpec wide_cell = bench::layer2d("t", "t", 64, 256, 4, 64, 9, 2, 4);
  const ConvPlan wc =
      plan_conv(ConvPass::forward, geometry(wide_cell, Precision::highest), DType::float32, h100);
  ASSERT_EQ(wc.kernel, "thin") << wc.describe();
  EXPECT_EQ(wc.thin.split_len, 30) << wc.describe();
  EXPECT_EQ(wc.thin.splits, 9) << wc.describe();

  // What it declines, and why.
  const auto declined = [&](ConvPass pass, const ConvLayerSpec& l, DType dtype) {
    return reason_of(plan_conv(pass, geometry(l, Precision::highest), dtype, h100), "thin");
  };
  const ConvLayerSpec five = bench::layer2d("t", "t", 4, 64, 5, 16, 4, 2, 1);
  EXPECT_NE(declined(ConvPass::forward, five, DType::float32).find("C_out/groups=5 is over 4"),
            std::string::npos);
  EXPECT_NE(declined(ConvPass::dgrad, rgb, DType::float64).find("float64 is not float32"),
            std::string::npos);
  const ConvLayerSpec k5 = bench::layer2d("t", "t", 4, 64, 4, 16, 5, 2, 2);  // 4 x 25 taps
  EXPECT_NE(declined(ConvPass::dgrad, k5, DType::float32).find("window of 100 dy values"),
            std::string::npos);
  const ConvLayerSpec s4 = bench::layer2d("t", "t", 4, 64, 3, 16, 8, 4, 2);  // 4 x 4 x 3 slots
  EXPECT_NE(declined(ConvPass::forward, s4, DType::float32).find("a cell's 48 outputs"),
            std::string::npos);
  // Dilation 3 at stride 1: 3x3 taps spread over 7x7 inputs, 9 of 49 multiplies useful. The
  // rule sends it on; forced, the thin kernels still run it.
  ConvLayerSpec dil = bench::layer2d("t", "t", 4, 16, 1, 16, 3, 1, 3);
  dil.dilation = {3, 3};
  EXPECT_NE(declined(ConvPass::forward, dil, DType::float32).find("useful"), std::string::npos);
  EXPECT_EQ(
      plan_conv(ConvPass::forward, geometry(dil, Precision::highest), DType::float32, h100, "thin")
          .kernel,
      "thin");
  // wgrad: preferred at "highest" with a full block of input channels (the mono layer: 4 blocks
  // of 128, 2000 positions in 8 chunks of 256; the RGB layer: one block of 64); 48 channels and
  // any call at "high" stay on the rows that measured faster, each named; forced, it runs them.
  const ConvPlan mw =
      plan_conv(ConvPass::wgrad, geometry(mono, Precision::highest), DType::float32, h100);
  ASSERT_EQ(mw.kernel, "thin") << mw.describe();
  EXPECT_EQ(mw.thin.block, 16);
  EXPECT_EQ(mw.thin.grid_y, 4);
  EXPECT_EQ(mw.thin.split_len, 256);
  EXPECT_EQ(mw.thin.splits, 8);
  EXPECT_NE(mw.describe().find("8 chunks of 256 positions"), std::string::npos) << mw.describe();
  EXPECT_NE(reason_of(mw, "mma.sync").find("C_out/groups=1: a thin output"), std::string::npos)
      << mw.describe();
  const ConvPlan rw =
      plan_conv(ConvPass::wgrad, geometry(rgb, Precision::highest), DType::float32, h100);
  EXPECT_EQ(rw.kernel, "thin") << rw.describe();
  EXPECT_EQ(rw.thin.grid_y, 1) << rw.describe();
  const ConvLayerSpec rgb48 = bench::layer2d("t", "t", 16, 48, 3, 32, 4, 2, 1);
  const ConvPlan r48 =
      plan_conv(ConvPass::wgrad, geometry(rgb48, Precision::highest), DType::float32, h100);
  EXPECT_EQ(r48.kernel, "direct") << r48.describe();
  EXPECT_NE(reason_of(r48, "thin").find("C_in/groups=48: under one block of 64"), std::string::npos)
      << r48.describe();
  const ConvPlan hw =
      plan_conv(ConvPass::wgrad, geometry(mono, Precision::high), DType::float32, h100);
  EXPECT_NE(hw.kernel, "thin") << hw.describe();
  EXPECT_NE(reason_of(hw, "thin").find("at \"high\""), std::string::npos) << hw.describe();
  EXPECT_EQ(plan_conv(ConvPass::wgrad, geometry(rgb, Precision::high), DType::float32, h100, "thin")
                .kernel,
            "thin");
  EXPECT_NE(declined(ConvPass::wgrad, k5, DType::float32).find("window of 100 dy values"),
            std::string::npos);
  // A forced thin call it cannot run names the reason.
  const std::string e = testing::error_of([&] {
    plan_conv(ConvPass::forward, geometry(five, Precision::highest), DType::float32, h100, "thin");
  });
  EXPECT_NE(e.find("the forced kernel 'thin' cannot run"), std::string::npos) << e;
  EXPECT_NE(e.find("C_out/groups=5 is over 4"), std::string::npos) << e;
}

// ---- plan_conv_call's cache ------------------------------------------------------------------

// Restores every setting plan_conv_call reads (and the trace) when a test ends.
struct RestoreConvSettings {
  std::string spec = get_conv_kernel();
  bool trace = get_conv_trace();
  bool prefer = cuda::conv_preferences();
  ~RestoreConvSettings() {
    set_conv_kernel(spec);
    set_conv_trace(trace);
    cuda::set_conv_preferences(prefer);
  }
};

// What plan_conv_call must return under the settings in force: the planner run from scratch.
ConvPlan planned_from_scratch(ConvPass pass, const ConvGeometry& g, DType dtype,
                              const DeviceCaps& caps) {
  return plan_conv(pass, g, dtype, caps, cuda::conv_kernel_forced(pass), cuda::conv_preferences());
}

// plan_conv_call's plan, checked against the planner's from scratch; returns its kernel.
std::string call_kernel(ConvPass pass, const ConvGeometry& g, DType dtype, const DeviceCaps& caps) {
  const std::shared_ptr<const ConvPlan> plan = cuda::plan_conv_call(pass, g, dtype, caps);
  EXPECT_NE(plan, nullptr);
  if (plan == nullptr) return "<null plan>";
  EXPECT_EQ(plan->describe(), planned_from_scratch(pass, g, dtype, caps).describe());
  return plan->kernel;
}

TEST(ConvPlanCache, ASecondCallWithTheSameInputsGetsTheFirstCallsPlan) {
  RestoreConvSettings restore;
  set_conv_kernel("");
  cuda::set_conv_preferences(true);
  const ConvLayerSpec dcgan = bench::decoder_layers()[2];
  for (ConvPass pass : kPasses) {
    const std::shared_ptr<const ConvPlan> first = cuda::plan_conv_call(
        pass, geometry(dcgan, Precision::high), DType::float32, DeviceCaps::h100());
    ASSERT_NE(first, nullptr);
    // Equal inputs built anew: the key compares values, not addresses.
    const std::shared_ptr<const ConvPlan> second = cuda::plan_conv_call(
        pass, geometry(dcgan, Precision::high), DType::float32, DeviceCaps::h100());
    EXPECT_EQ(first.get(), second.get()) << "the second call planned again";
    EXPECT_EQ(first->describe(),
              plan_conv(pass, geometry(dcgan, Precision::high), DType::float32, DeviceCaps::h100())
                  .describe());
    EXPECT_EQ(cuda::last_conv_plan(pass).describe(), first->describe());
  }
}

// Each change of an input or setting between two calls of otherwise equal inputs gets the plan
// for the new inputs: a cache that missed one in its key would return the earlier call's plan.
TEST(ConvPlanCache, ChangedSettingsAndInputsGetTheirOwnPlans) {
  RestoreConvSettings restore;
  set_conv_kernel("");
  cuda::set_conv_preferences(true);
  const DeviceCaps h100 = DeviceCaps::h100();
  const ConvGeometry g = small_2d(64, 64, 1, Precision::high);
  const auto fwd = [&](const ConvGeometry& geo, DType dtype, const DeviceCaps& caps) {
    return call_kernel(ConvPass::forward, geo, dtype, caps);
  };
  EXPECT_EQ(fwd(g, DType::float32, h100), "batch-wgmma");
  // The forced kernel, set and cleared.
  set_conv_kernel("fma");
  EXPECT_EQ(fwd(g, DType::float32, h100), "fma");
  set_conv_kernel("fwd=mma.sync");
  EXPECT_EQ(fwd(g, DType::float32, h100), "mma.sync");
  EXPECT_EQ(call_kernel(ConvPass::wgrad, g, DType::float32, h100),
            plan_conv(ConvPass::wgrad, g, DType::float32, h100).kernel);
  set_conv_kernel("");
  EXPECT_EQ(fwd(g, DType::float32, h100), "batch-wgmma");
  // The preferences: off, the short rows no longer send the call past wgmma.
  cuda::set_conv_preferences(false);
  EXPECT_EQ(fwd(g, DType::float32, h100), "wgmma");
  cuda::set_conv_preferences(true);
  EXPECT_EQ(fwd(g, DType::float32, h100), "batch-wgmma");
  // The dtype: float64 never reaches the tensor cores.
  EXPECT_EQ(fwd(g, DType::float64, h100), "gemm");
  // The device: without sm_90a code, no wgmma (preferences off, so wgmma would take it).
  cuda::set_conv_preferences(false);
  DeviceCaps no_wgmma = h100;
  no_wgmma.wgmma_compiled = false;
  EXPECT_EQ(fwd(g, DType::float32, h100), "wgmma");
  EXPECT_EQ(fwd(g, DType::float32, no_wgmma), "mma.sync");
  cuda::set_conv_preferences(true);
  // The precision: S4's dgrad runs mma.sync at "highest" and wgmma at "high".
  const ConvLayerSpec s1 = s_workloads()[0], s4 = s_workloads()[3];
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(call_kernel(ConvPass::dgrad, geometry(s4, Precision::highest), DType::float32, h100),
              "mma.sync");
    EXPECT_EQ(call_kernel(ConvPass::dgrad, geometry(s4, Precision::high), DType::float32, h100),
              "wgmma");
  }
  // A geometry field the kernel choice does not read still names its own plan (the trace line
  // prints it): 1-D and 2-D spellings of the same sizes.
  ConvGeometry as_1d = geometry(s1, Precision::high);
  ConvGeometry as_2d = as_1d;
  as_2d.spatial_dims = 2;
  const auto p1 = cuda::plan_conv_call(ConvPass::forward, as_1d, DType::float32, h100);
  const auto p2 = cuda::plan_conv_call(ConvPass::forward, as_2d, DType::float32, h100);
  EXPECT_NE(p1->geometry, p2->geometry);
  EXPECT_EQ(p2->geometry, plan_conv(ConvPass::forward, as_2d, DType::float32, h100).geometry);
}

TEST(ConvPlanCache, AForcedKernelThatCannotRunTheCallThrowsOnEveryCall) {
  RestoreConvSettings restore;
  set_conv_kernel("fwd=wgmma");
  const ConvGeometry grouped = small_2d(64, 64, 4, Precision::high);
  for (int call = 0; call < 3; ++call) {
    const std::string e = testing::error_of([&] {
      cuda::plan_conv_call(ConvPass::forward, grouped, DType::float32, DeviceCaps::h100());
    });
    EXPECT_NE(e.find("the forced kernel 'wgmma' cannot run"), std::string::npos)
        << "call " << call << ": " << e;
    EXPECT_NE(e.find("groups=4"), std::string::npos) << "call " << call << ": " << e;
  }
  // The same call without the override plans (groups of 16 x 16 channels: the direct kernels).
  set_conv_kernel("");
  EXPECT_EQ(call_kernel(ConvPass::forward, grouped, DType::float32, DeviceCaps::h100()), "direct");
}

TEST(ConvPlanCache, TheTracePrintsOneLinePerCallHitOrMiss) {
  RestoreConvSettings restore;
  set_conv_kernel("");
  cuda::set_conv_preferences(true);
  set_conv_trace(true);
  const ConvGeometry g = geometry(s_workloads()[1], Precision::high);
  ::testing::internal::CaptureStderr();
  for (int call = 0; call < 3; ++call)
    cuda::plan_conv_call(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100());
  const std::string trace = ::testing::internal::GetCapturedStderr();
  const std::string line =
      plan_conv(ConvPass::wgrad, g, DType::float32, DeviceCaps::h100()).describe() + "\n";
  EXPECT_EQ(trace, line + line + line);
}

TEST(ConvPlanCache, ASweepOfManyGeometriesKeepsTheCacheBounded) {
  RestoreConvSettings restore;
  set_conv_kernel("");
  cuda::set_conv_preferences(true);
  ConvGeometry g = small_2d(64, 64, 1, Precision::high);
  const ConvGeometry first = g;
  for (size_t i = 0; i <= cuda::kMaxCachedConvPlans; ++i) {
    g.batch = 1 + static_cast<int64_t>(i);
    cuda::plan_conv_call(ConvPass::forward, g, DType::float32, DeviceCaps::h100());
    ASSERT_LE(cuda::conv_plans_cached(), cuda::kMaxCachedConvPlans) << "after " << i + 1;
  }
  EXPECT_GT(cuda::conv_plans_cached(), 0u);
  // Emptied once on the way: the calls still plan.
  EXPECT_EQ(call_kernel(ConvPass::forward, first, DType::float32, DeviceCaps::h100()),
            "batch-wgmma");
}

// Several threads planning the same calls (hits and misses) while another sweeps new geometries
// past the bound, so the cache is emptied under plans the others hold: every call gets the
// plan of its own inputs. Run under ThreadSanitizer by the tsan preset (names with "Thread").
TEST(ConvPlanThreads, ConcurrentCallsGetThePlansOfTheirInputs) {
  RestoreConvSettings restore;
  set_conv_kernel("");
  cuda::set_conv_preferences(true);
  struct Call {
    ConvPass pass;
    ConvGeometry g;
    DType dtype;
    std::string expected;
  };
  std::vector<Call> calls;
  const std::vector<ConvLayerSpec> layers = bench::decoder_layers();
  for (size_t i = 0; i < layers.size(); i += 5) {
    for (Precision precision : {Precision::highest, Precision::high}) {
      for (ConvPass pass : kPasses) {
        for (DType dtype : {DType::float32, DType::float64}) {
          const ConvGeometry g = geometry(layers[i], precision);
          calls.push_back(
              {pass, g, dtype, plan_conv(pass, g, dtype, DeviceCaps::h100()).describe()});
        }
      }
    }
  }
  constexpr int kThreads = 4, kRounds = 20;
  std::atomic<bool> sweep_done{false};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // At least kRounds, and on until the sweep is done, so some calls meet the cache's emptying.
      for (int round = 0; round < kRounds || !sweep_done.load(); ++round) {
        for (size_t k = 0; k < calls.size(); ++k) {
          // Each thread starts at a different call, so they race on different keys.
          const Call& c = calls[(k + static_cast<size_t>(t) * 7) % calls.size()];
          const std::string got =
              cuda::plan_conv_call(c.pass, c.g, c.dtype, DeviceCaps::h100())->describe();
          if (got != c.expected) {
            std::lock_guard<std::mutex> lock(failures_mutex);
            failures.push_back("expected " + c.expected + "\n got " + got);
          }
        }
      }
    });
  }
  threads.emplace_back([&] {
    ConvGeometry g = small_2d(64, 64, 1, Precision::high);
    for (size_t i = 0; i <= cuda::kMaxCachedConvPlans; ++i) {
      g.batch = 1000 + static_cast<int64_t>(i);
      const auto plan =
          cuda::plan_conv_call(ConvPass::forward, g, DType::float32, DeviceCaps::h100());
      if (plan->geometry.find("N=" + std::to_string(g.batch) + " ") == std::string::npos) {
        std::lock_guard<std::mutex> lock(failures_mutex);
        failures.push_back("sweep: the plan of N=" + std::to_string(g.batch) + " is " +
                           plan->describe());
      }
    }
    sweep_done.store(true);
  });
  for (std::thread& t : threads)
    t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " wrong plans, the first:\n"
                                << (failures.empty() ? "" : failures.front());
}

}  // namespace
}  // namespace tgrad
