// The rules of the planner's GEMM-path and depthwise rows (conv_path_rules.h).
#include "cuda/conv_path_rules.h"

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
           " bytes of columns, over the workspace budget of " +
           std::to_string(kGemmWorkspaceBytes);
  }
  // cuBLAS's 32-bit sizes: the longest row is L (<= budget / elem), the rest are channel counts.
  const int64_t cogk = g.out_channels_per_group() * g.kernel[0] * g.kernel[1];
  if (cogk * g.in_channels_per_group() > kIntMax || g.groups > kIntMax) {
    return "GEMM path: a group's weight has more than 2^31-1 elements";
  }
  (void)pass;  // every pass has the same limits
  return {};
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
