// The rules of the planner's GEMM-path and depthwise rows (conv_path_rules.h).
#include "cuda/conv_path_rules.h"

#include <algorithm>

namespace tgrad::cuda {

namespace {
constexpr int64_t kIntMax = 2147483647;  // cuBLAS takes 32-bit sizes
}  // namespace

std::string gemm_path_declined(ConvPass pass, const ConvGeometry& g, Precision /*precision*/,
                               DType dtype) {
  // Both float32 precisions are served (the GEMM's compute type follows the precision).
  if (dtype != DType::float32 && dtype != DType::float64) {
    return "GEMM path: dtype " + std::string(dtype_name(dtype)) + " is not float32 or float64";
  }
  if (g.groups <= 0 || g.in_channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return "GEMM path: bad groups in " + g.str();
  }
  if (!fits_plane32(g)) return "GEMM path: a spatial size or plane past the 32-bit kernels";
  const int64_t elem = dtype == DType::float64 ? 8 : 4;
  const int64_t per_sample = gemm_workspace_per_sample(g) * elem;
  if (per_sample > kGemmWorkspaceBytes) {
    return "GEMM path: one sample needs " + std::to_string(per_sample) +
           " bytes of columns, over the workspace budget of " + std::to_string(kGemmWorkspaceBytes);
  }
  // cuBLAS's 32-bit sizes: the longest row is L (<= budget / elem), the rest are channel counts.
  const int64_t cogk = g.out_channels_per_group() * g.kernel[0] * g.kernel[1];
  if (cogk * g.in_channels_per_group() > kIntMax || g.groups > kIntMax) {
    return "GEMM path: a group's weight has more than 2^31-1 elements";
  }
  (void)pass;  // every pass has the same limits
  return {};
}

// Default slicing: slices of at least 4096 columns, aiming at 2^20 dW elements x splits. At
// "highest" float32, cuBLAS's strict float32 GEMM (no tensor cores) is bound by its FMAs, and a
// dW of at most 2^20 elements leaves most SMs idle: there slices go down to 1024 columns and aim
// at 2^23. Larger weights already give the GEMMs enough tiles, and TF32 ("high") is not bound by
// its FMAs: both keep the default (the forced A/B behind this is in docs/performance.md,
// "Run 52").
int64_t gemm_wgrad_splits(const ConvGeometry& g, DType dtype, int64_t L) {
  if (g.groups > kGemmWgradMaxSplitGroups) return 1;
  const int64_t elements = g.in_channels * g.out_channels_per_group() * g.kernel[0] * g.kernel[1];
  if (elements <= 0) return 1;
  const bool fine = dtype == DType::float32 && g.precision == Precision::highest &&
                    elements <= (int64_t{1} << 20);
  const int64_t min_k = fine ? 1024 : 4096;
  const int64_t target = fine ? int64_t{1} << 23 : int64_t{1} << 20;
  const int64_t max_splits = fine ? 128 : 64;
  return std::clamp<int64_t>(std::min(L / min_k, (target + elements - 1) / elements), 1,
                             max_splits);
}

std::string depthwise_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype) {
  if (dtype != DType::float32 && dtype != DType::float64) {
    return "depthwise path: dtype " + std::string(dtype_name(dtype)) + " is not float32 or float64";
  }
  if (g.groups <= 0 || g.in_channels != g.groups || g.out_channels != g.groups) {
    return "depthwise path: needs C_in == C_out == groups, got " + g.str();
  }
  if (pass == ConvPass::wgrad && g.kernel[0] * g.kernel[1] > kDepthwiseMaxTaps) {
    return "depthwise path: wgrad takes at most " + std::to_string(kDepthwiseMaxTaps) +
           " taps, got " + std::to_string(g.kernel[0] * g.kernel[1]);
  }
  // The kernels index in int64 and launch grid-stride loops, and stage 1 has one block per
  // (channel, chunk): C * chunks <= C + kTargetBlocks blocks.
  if (g.in_channels > 1 << 30) return "depthwise path: more than 2^30 channels";
  if (!fits_plane32(g)) return "depthwise path: a spatial size or plane past the 32-bit kernels";
  return {};
}

}  // namespace tgrad::cuda

namespace tgrad::cuda {

namespace {

int64_t div_up(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// 16-byte shared-memory loads that bring one tap's register block of weights.
int64_t block_loads(int64_t reg, int64_t elem) {
  return std::max<int64_t>(1, reg * elem / 16);
}

// The register block of forward (over Cog) and dgrad (over Cig): the fewest instructions per
// position and tap, counting one activation load, the weight loads and the FMAs of each block,
// so a block past the channel count pays for its padding.
int direct_reg(int64_t channels, int64_t elem) {
  int best = 0;
  int64_t best_cost = 0;
  for (int reg : {8, 4, 2, 1}) {
    const int64_t cost = div_up(channels, reg) * (1 + block_loads(reg, elem) + reg);
    if (best == 0 || cost < best_cost) best = reg, best_cost = cost;
  }
  return best;
}

// wgrad's register block: per position, each (channel block, column block) loads reg activations
// and, per column, its dy value (about nine instructions with the bounds and the address) and reg
// FMAs.
int direct_wgrad_reg(int64_t cig, int64_t cog_taps) {
  int best = 0;
  int64_t best_cost = 0;
  for (int reg : {8, 4, 2, 1}) {
    const int64_t cols = kDirectWgradCols(reg);
    const int64_t cost = div_up(cig, reg) * div_up(cog_taps, cols) * (reg + cols * (9 + reg));
    if (best == 0 || cost < best_cost) best = reg, best_cost = cost;
  }
  return best;
}

// How a wgrad cuts its `positions` into chunks, each summed by its own blocks (`combos` of them)
// into partials that are added in chunk order: at least enough chunks that none is longer than
// max_chunk (a thread's float32 chain), then more, down to min_chunk positions, until the grid
// has about `target` blocks; lengths a multiple of `multiple`. Shape-only, so the bits do not
// depend on the GPU.
struct Chunking {
  int64_t chunks, len;
};

Chunking chunk_positions(int64_t positions, int64_t combos, int64_t max_chunk, int64_t min_chunk,
                         int64_t target, int64_t multiple) {
  const int64_t lo = std::max<int64_t>(1, div_up(positions, max_chunk));
  const int64_t hi = std::max(lo, div_up(positions, min_chunk));
  const int64_t chunks = std::clamp(div_up(target, combos), lo, hi);
  const int64_t len = std::max<int64_t>(1, div_up(div_up(positions, chunks), multiple) * multiple);
  return {std::max<int64_t>(1, div_up(positions, len)), len};
}

}  // namespace

std::string direct_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype,
                                 DirectPlan* out) {
  if (dtype != DType::float32 && dtype != DType::float64) {
    return "direct: dtype " + std::string(dtype_name(dtype)) + " is not float32 or float64";
  }
  if (g.groups <= 0 || g.in_channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return "direct: bad groups in " + g.str();
  }
  if (!fits_plane32(g)) return "direct: a spatial size or plane past the 32-bit kernels";
  const int64_t elem = dtype == DType::float64 ? 8 : 4;
  const int64_t taps = g.kernel[0] * g.kernel[1];
  if (taps > (int64_t{1} << 20)) return "direct: more than 2^20 taps";
  const int64_t cig = g.in_channels_per_group(), cog = g.out_channels_per_group();
  const int64_t in_plane = g.in_size[0] * g.in_size[1];
  DirectPlan plan;
  if (pass == ConvPass::wgrad) {
    plan.reg = direct_wgrad_reg(cig, cog * taps);
    plan.cols = kDirectWgradCols(plan.reg);
    const int64_t combos = g.groups * div_up(cig, plan.reg) * div_up(cog * taps, plan.cols);
    // Each thread's float32 chain stays under kDirectWgradMaxChunk / 128 terms.
    const Chunking c = chunk_positions(g.batch * in_plane, combos, kDirectWgradMaxChunk,
                                       kDirectWgradMinChunk, kDirectWgradTargetBlocks, 1);
    plan.chunks = c.chunks;
    plan.chunk_len = c.len;
    plan.grid_x = combos * plan.chunks;
    plan.grid_y = 1;
    if (plan.grid_x > kIntMax) return "direct: more than 2^31-1 wgrad blocks";
    const int64_t partials = plan.chunks > 1 ? plan.chunks * g.w_numel() * elem : 0;
    if (partials > kGemmWorkspaceBytes) {
      return "direct: wgrad partials of " + std::to_string(partials) +
             " bytes, over the workspace budget of " + std::to_string(kGemmWorkspaceBytes);
    }
  } else {
    const bool fwd = pass == ConvPass::forward;
    // The register block runs over the output channels (forward) or the input channels (dgrad);
    // the weights are staged over the other.
    plan.reg = direct_reg(fwd ? cog : cig, elem);
    const int64_t summed = fwd ? cig : cog;
    const int64_t per_channel = taps * plan.reg * elem;
    plan.stage = std::min(summed, kDirectSmemBytes / per_channel);
    if (fwd) plan.stage = std::min(plan.stage, kDirectFwdChunk);
    if (plan.stage < 1) {
      return "direct: one channel's weights (" + std::to_string(per_channel) +
             " bytes) exceed the shared-memory stage of " + std::to_string(kDirectSmemBytes);
    }
    plan.smem_bytes = plan.stage * per_channel;
    plan.grid_y = g.groups * div_up(fwd ? cog : cig, plan.reg);
    if (plan.grid_y > 65535) return "direct: more than 65535 channel blocks (the grid's y)";
    if (fwd) {
      const int64_t phases = g.stride[0] * g.stride[1];
      if (phases > 65536) return "direct: more than 65536 stride phases";
      // Eight runs of 32 positions a block at least (over the phases), at most 16 warps.
      plan.groups32 = static_cast<int>(std::max<int64_t>(1, div_up(8, phases)));
      plan.warps = static_cast<int>(std::min<int64_t>(phases * plan.groups32, 16));
      const int64_t q =
          g.batch * div_up(g.out_size[0], g.stride[0]) * div_up(g.out_size[1], g.stride[1]);
      plan.grid_x = div_up(q, int64_t{32} * plan.groups32);
    } else {
      plan.grid_x = div_up(g.batch * in_plane, 256);
    }
    if (plan.grid_x > kIntMax) return "direct: more than 2^31-1 blocks (the grid's x)";
  }
  if (out != nullptr) *out = plan;
  return {};
}

std::string thin_path_declined(ConvPass pass, const ConvGeometry& g, DType dtype, ThinPlan* out) {
  if (dtype != DType::float32) {
    return "thin: dtype " + std::string(dtype_name(dtype)) + " is not float32";
  }
  if (g.groups <= 0 || g.in_channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return "thin: bad groups in " + g.str();
  }
  const int64_t cig = g.in_channels_per_group(), cog = g.out_channels_per_group();
  if (cog > kThinMaxCog) {
    return "thin: C_out/groups=" + std::to_string(cog) + " is over " + std::to_string(kThinMaxCog);
  }
  if (!fits_plane32(g)) return "thin: a spatial size or plane past the 32-bit kernels";
  // The smallest register block that holds `used` slots, 0 if none does.
  const auto block_for = [](int64_t used, const auto& blocks) {
    for (int b : blocks)
      if (used <= b) return b;
    return 0;
  };
  ThinPlan plan;
  const bool fwd = pass == ConvPass::forward;
  int64_t per_channel = 0;  // bytes of one input channel's staged weights (forward, dgrad)
  if (fwd) {
    // A cell is the sH x sW outputs sharing their inputs; it reads the inputs under the dilated
    // kernel's extent, TH x TW of them (a dilated kernel's gaps are zero weights).
    const int64_t used = g.stride[0] * g.stride[1] * cog;
    plan.block = used <= 32 ? block_for(used, kThinFwdBlocks) : 0;
    if (plan.block == 0) {
      return "thin: a cell's " + std::to_string(used) +
             " outputs (strides x C_out/groups) exceed 32";
    }
    plan.th = div_up((g.kernel[0] - 1) * g.dilation[0] + 1, g.stride[0]);
    plan.tw = div_up((g.kernel[1] - 1) * g.dilation[1] + 1, g.stride[1]);
    per_channel = plan.th * plan.tw * plan.block * 4;
    plan.cell0_h = g.padding[0] / g.stride[0];
    plan.cell0_w = g.padding[1] / g.stride[1];
    plan.cells_h = (g.out_size[0] - 1 + g.padding[0]) / g.stride[0] - plan.cell0_h + 1;
    plan.cells_w = (g.out_size[1] - 1 + g.padding[1]) / g.stride[1] - plan.cell0_w + 1;
    plan.used = static_cast<int>(used);
    plan.items = g.batch * plan.cells_h * plan.cells_w;
  } else {
    // dgrad and wgrad: each input position's window of dy, C_out/groups x taps values.
    const int64_t used = cog * g.kernel[0] * g.kernel[1];
    plan.block = pass == ConvPass::wgrad ? block_for(used, kThinWgradBlocks)
                                         : block_for(used, kThinDgradBlocks);
    if (plan.block == 0) {
      return "thin: a window of " + std::to_string(used) +
             " dy values (C_out/groups x taps) exceeds 64";
    }
    per_channel = plan.block * 4;
    plan.used = static_cast<int>(used);
    plan.items = g.batch * g.in_size[0] * g.in_size[1];
  }
  const int64_t items = std::max<int64_t>(1, plan.items);
  if (pass == ConvPass::wgrad) {
    const int64_t combos = div_up(cig, thin_wgrad_channels(cig)) * g.groups;
    const Chunking c = chunk_positions(items, combos, kThinWgradMaxChunk, kThinWgradMinChunk,
                                       kThinWgradTargetBlocks, kThinWgradTile);
    plan.splits = c.chunks;
    plan.split_len = c.len;
    plan.grid_x = plan.splits;
    plan.grid_y = combos;
    if (plan.grid_x > kIntMax) return "thin: more than 2^31-1 wgrad chunks";
    if (plan.grid_y > 65535) return "thin: more than 65535 channel blocks x groups (the grid's y)";
    const int64_t partials = plan.splits > 1 ? plan.splits * g.w_numel() * 4 : 0;
    if (partials > kGemmWorkspaceBytes) {
      return "thin: wgrad partials of " + std::to_string(partials) +
             " bytes, over the workspace budget of " + std::to_string(kGemmWorkspaceBytes);
    }
    if (out != nullptr) *out = plan;
    return {};
  }
  if (per_channel > kThinSmemBytes) {
    return "thin: one channel's weights (" + std::to_string(per_channel) +
           " bytes) exceed the shared-memory budget of " + std::to_string(kThinSmemBytes);
  }
  // Splits of the input channels: enough for the pass's target (conv_thin.h), none under
  // kThinMinSplit channels, and each split's weights in shared memory.
  const int64_t want = std::clamp(div_up(fwd ? kThinFwdTarget : kThinDgradTarget, items),
                                  int64_t{1}, std::max<int64_t>(1, cig / kThinMinSplit));
  plan.split_len = std::min(div_up(cig, want), kThinSmemBytes / per_channel);
  plan.splits = div_up(cig, plan.split_len);
  plan.smem_bytes = plan.split_len * per_channel;
  const int per_thread = fwd ? 1 : thin_dgrad_items(plan.block);
  plan.grid_x = std::min(div_up(items, kThinThreads * per_thread), kThinMaxBlocks);
  plan.grid_y = plan.splits * g.groups;
  if (plan.grid_y > 65535) return "thin: more than 65535 splits x groups (the grid's y)";
  if (fwd && plan.splits > 1 && plan.splits * g.y_numel() * 4 > kGemmWorkspaceBytes) {
    return "thin: forward partials of " + std::to_string(plan.splits * g.y_numel() * 4) +
           " bytes, over the workspace budget of " + std::to_string(kGemmWorkspaceBytes);
  }
  if (out != nullptr) *out = plan;
  return {};
}

}  // namespace tgrad::cuda
