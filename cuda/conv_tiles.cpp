// The tile arithmetic of conv_tiles.h: fitting the implicit GEMM of forward/dgrad and the split-K
// GEMM of wgrad to a geometry. Moved verbatim from the .cu launchers so that the planner computes
// on the host, without CUDA, the fields the kernels are launched with.
#include "cuda/conv_tiles.h"

#include <algorithm>

namespace tgrad::cuda {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

int64_t igemm_phase_taps(const IgemmProblem& p, int64_t r) {
  int64_t count = 0;
  for (int64_t kw = 0; kw < p.kW; ++kw)
    count += (((r + p.pW - kw * p.dW) % p.sW) + p.sW) % p.sW == 0;
  return count;
}

const char* igemm_plan_tiles(IgemmProblem& p, const IgemmTiling& t) {
  if (p.kH * p.kW > kIgemmMaxTaps) return "more than 32 taps";
  if (p.kH > kIgemmMaxKh) return "more than 8 kernel rows";
  // Fill mode when exactly one phase of the output columns gets taps.
  if (p.gather && p.phases > 1 && !p.fill && p.fold_m == 0) {
    int with_taps = 0, which = 0;
    for (int64_t r = 0; r < p.phases; ++r) {
      if (igemm_phase_taps(p, r) > 0) ++with_taps, which = static_cast<int>(r);
    }
    if (with_taps == 1) p.fill = true, p.phase0 = which, p.phases = 1;
  }
  // The kernels list taps in 32-bit arithmetic.
  constexpr int64_t kSmall = int64_t{1} << 30;
  if (p.Hs >= kSmall || p.Ho * p.sH >= kSmall || p.kH * p.dH + p.pH >= kSmall ||
      p.kW * p.dW + p.pW >= kSmall || p.sW >= kSmall)
    return "sizes past the kernels' 32-bit tap arithmetic";
  // Column span of the taps of one row, in window columns.
  int64_t span;
  if (p.gather) {
    p.win_step = 1, p.b_step = 1;
    span = (p.kW - 1) * p.dW / p.sW;
  } else if (p.dW % p.sW == 0) {
    p.win_step = static_cast<int>(p.sW), p.b_step = 1;
    span = (p.kW - 1) * p.dW / p.sW;
  } else {
    p.win_step = 1, p.b_step = static_cast<int>(p.s_in);
    span = (p.kW - 1) * p.dW;
  }
  const int64_t win_cols = (t.bn - 1) * int64_t{p.b_step} + span + 1;
  if (win_cols > 4096) return "window wider than 4096 columns";
  p.win_cols = static_cast<int>(win_cols);
  p.raw_pitch = static_cast<int>(ceil_div(win_cols, 32) * 32 + 8);  // == 8 mod 32: no conflicts
  // The converted window of one stage: every value once, twice (value, residual) for 3xTF32.
  p.conv_floats = t.chunk * p.win_cols * (t.split ? 2 : 1);
  // 227 KB is the most one CTA may have; min_blocks CTAs share an SM's 228 KB, each also taking
  // the 1 KB the driver reserves and the kernels' static tap table (IgemmTaps, 512 bytes). Up to
  // 4 raw stages (3 steps of copies in flight: one step's multiply is shorter than a DRAM round
  // trip), at least 2.
  const int64_t limit =
      std::min<int64_t>(227 * 1024, 228 * 1024 / t.min_blocks - kReservedSmemPerCta) -
      kIgemmStaticSmem;
  p.a_floats = t.a_smem_taps * t.bm * t.chunk;
  p.raw_stages = 4;
  int64_t bytes = 0;
  for (; p.raw_stages >= 2; --p.raw_stages) {
    bytes = (2 * int64_t{p.conv_floats} + 2 * int64_t{p.a_floats} +
             p.raw_stages * t.chunk * int64_t{p.raw_pitch}) *
            4;
    if (bytes <= limit) break;
  }
  if (p.raw_stages < 2) return "two raw stages pass the shared memory of min_blocks CTAs per SM";
  p.smem_bytes = static_cast<int>(bytes);
  p.c_pad = ceil_div(p.C, t.chunk) * t.chunk;
  if (p.c_pad / t.chunk * p.kH >= kSmall) return "steps past 32 bits";
  p.m_tiles = ceil_div(p.M, t.bm);
  p.m_pad = p.m_tiles * t.bm;
  const int64_t q_max = ceil_div(p.Wo, p.s_out);
  p.q_tiles = ceil_div(q_max, t.bn);
  const int64_t blocks = igemm_ctas(p);
  if (blocks <= 0) return "no CTA to launch";
  if (blocks >= (int64_t{1} << 31)) return "2^31 CTAs or more";
  return nullptr;
}

namespace {

// Values per conv dy column: the smallest padding that puts the B fragment loads of one LDS phase
// (lanes g along co, t along u_step * dy_pitch) in distinct banks: 32 lanes x 1 word, or half a
// warp x 2 words for 3xTF32.
int conv_dy_pitch(int bn, int u_step, bool split) {
  for (int pitch = bn; pitch < bn + 32; ++pitch) {
    const int stride = u_step * pitch;
    if (split ? stride % 16 == 4 || stride % 16 == 12 : stride % 32 == 8 || stride % 32 == 24)
      return pitch;
  }
  return bn;  // no padding helps (u_step a multiple of 8): correct, with bank conflicts
}

}  // namespace

const char* wgrad_plan_tiles(const WgradShape& p, bool split, const WgradDeviceLimits& dev,
                             WgradLaunch& out) {
  WgradPlan s{};
  s.warps_m = p.Ci > kWgradWarpM ? 2 : 1;
  s.warps_n = p.Co > kWgradWarpN ? 2 : 1;
  const int per_tap = s.warps_m * s.warps_n;
  const int bm = s.warps_m * kWgradWarpM, bn = s.warps_n * kWgradWarpN;
  const int words = split ? 2 : 1;
  int raw_bytes = 0, conv_bytes = 0;
  // Taps per CTA: as many as the warps allow, fewer where one stage of their dy window would
  // pass kGroupBytes (wide dilations; the five workloads need at most ~105 KB). A constant,
  // not the device's limit, so that the split of K (and so the bits) depends on the shape
  // alone.
  constexpr int kGroupBytes = 160 * 1024;
  for (s.kw_groups = ceil_div(p.kW, int64_t{kWgradMaxWarps / per_tap}); s.kw_groups <= p.kW;
       ++s.kw_groups) {
    s.taps_per_cta = static_cast<int>(ceil_div(p.kW, s.kw_groups));
    const int64_t span = (kWgradSegment - 1) * p.sW + (s.taps_per_cta - 1) * p.dW + 1 + 3;
    if (span > 4096) continue;
    s.win_cols = static_cast<int>(ceil_div(span, int64_t{4}) * 4);
    s.win_pitch = s.win_cols % 8 == 0 ? s.win_cols + 4 : s.win_cols;  // == 4 mod 8
    s.col_step = p.dW % p.sW == 0 ? static_cast<int>(p.sW) : 1;
    s.u_step = static_cast<int>(p.sW) / s.col_step;
    s.conv_cols = (s.win_cols + s.col_step - 1) / s.col_step;
    s.dy_pitch = conv_dy_pitch(bn, s.u_step, split);
    raw_bytes = (bm * kWgradXPitch + bn * s.win_pitch) * static_cast<int>(sizeof(float));
    conv_bytes = words * (bm * kWgradSegment + s.conv_cols * s.dy_pitch) * 4;
    if (raw_bytes + conv_bytes <= kGroupBytes) break;
  }
  if (s.kw_groups > p.kW) return "no tap group's dy window fits 4096 columns and 160 KB";
  s.kw_groups = ceil_div(p.kW, int64_t{s.taps_per_cta});  // no group without a tap
  // Which shapes decline depends on the GPU only through its shared memory limit; the split of K
  // (and so the bits) depends on the shape alone.
  const int threads = per_tap * s.taps_per_cta * 32;
  WgradInstance instance = WgradInstance::tf32;
  int regs = dev.regs_tf32;
  if (split) {
    instance = threads == 7 * 32 ? WgradInstance::x3tf32_7warps : WgradInstance::x3tf32;
    regs = threads == 7 * 32 ? dev.regs_x3tf32_7warps : dev.regs_x3tf32;
  }
  // Two raw stages keep a segment's copies in flight for a whole step, but not at the cost of
  // the second CTA per SM that the registers allow (S1 needs 136-column windows): one SM with
  // a single CTA of few warps idles at every barrier. The runtime reserves 1 KB per CTA.
  const int64_t ctas_by_regs =
      std::clamp<int64_t>(dev.regs_per_sm / std::max(1, regs * threads), 1, 2);
  const int64_t two_stages = 2 * raw_bytes + conv_bytes;
  s.raw_stages = two_stages <= dev.smem_per_block_optin &&
                         ctas_by_regs * (two_stages + 1024) <= dev.smem_per_sm
                     ? 2
                     : 1;
  const int smem = s.raw_stages * raw_bytes + conv_bytes;
  if (smem > dev.smem_per_block_optin) return "one raw stage passes the shared memory of a CTA";

  const int64_t elements = p.Ci * p.Co * p.kH * p.kW;
  s.m_tiles = ceil_div(p.Ci, int64_t{bm});
  s.n_tiles = ceil_div(p.Co, int64_t{bn});
  s.w_tiles = ceil_div(p.Wi, int64_t{kWgradSegment});
  s.segments = p.N * p.Hi * s.w_tiles;
  const int64_t tiles = p.kH * s.kw_groups * s.m_tiles * s.n_tiles;
  int64_t splits = std::clamp<int64_t>(ceil_div(kWgradTargetCtas, tiles), 1, s.segments);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, kWgradMaxPartialBytes / (elements * 4)));
  s.segs_per_split = ceil_div(s.segments, splits);
  s.splits = ceil_div(s.segments, s.segs_per_split);
  out.plan = s;
  out.instance = instance;
  out.threads = threads;
  out.smem_bytes = smem;
  return nullptr;
}

}  // namespace tgrad::cuda
