// The conv planner of conv_plan.h: the candidate table (one row per kernel and pass, in priority
// order, each with the rule that says why it declines a call), plan_conv, and the plan's trace
// line. The rules are the ones the .cu launchers applied before the planner existed, unchanged.
#include "cuda/conv_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "cuda/conv_path_rules.h"

namespace tgrad::cuda {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// How many q in [0, count) have 0 <= q*step + offset < size (step > 0).
int64_t positions_inside(int64_t count, int64_t step, int64_t offset, int64_t size) {
  // q >= ceil(-offset / step) and q <= floor((size - 1 - offset) / step), in floor arithmetic.
  const auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const int64_t lo = std::max<int64_t>(0, -floor_div(offset, step));
  const int64_t hi = std::min<int64_t>(count - 1, floor_div(size - 1 - offset, step));
  return std::max<int64_t>(0, hi - lo + 1);
}

// The share of the batch-positions GEMMs' (position, tap) pairs whose src index lands inside
// src (the rest gather zero fill), over every phase, per axis multiplied. forward: src = x.
double gathered_tap_use(const ConvGeometry& g, bool fwd) {
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  double use = 1.0;
  for (size_t u = 0; u < 2; ++u) {
    const int64_t src_size = fwd ? g.in_size[u] : g.out_size[u];
    const int64_t out_size = fwd ? g.out_size[u] : g.in_size[u];
    const int64_t phases = fwd ? std::min<int64_t>(g.stride[u], 65536) : 1;
    int64_t pairs = 0, inside = 0;
    for (int64_t r = 0; r < phases; ++r) {
      int sb[kBatchIgemmMaxTaps];
      const BatchIgemmAxis ax =
          batch_igemm_axis(fwd, i(out_size), i(g.kernel[u]), i(g.stride[u]), i(g.padding[u]),
                           i(g.dilation[u]), i(r), nullptr, sb, kBatchIgemmMaxTaps);
      // Tap t reads src q*ss + sb[t] for q in [0, ax.q): count the q landing in [0, src_size).
      for (int t = 0; t < std::min(ax.taps, kBatchIgemmMaxTaps); ++t) {
        inside += positions_inside(ax.q, ax.ss, sb[t], src_size);
        pairs += ax.q;
      }
    }
    if (pairs > 0) use *= static_cast<double>(inside) / static_cast<double>(pairs);
  }
  return use;
}

// The tensor-core kernels (wgmma, mma.sync, wgrad's mma.sync) run float32 with groups 1.
std::string tensor_core_reason(const PlanInput& in) {
  if (in.dtype != DType::float32)
    return std::string(dtype_name(in.dtype)) + ": the tensor-core kernels are float32 only";
  if (in.g.groups != 1)
    return "groups=" + std::to_string(in.g.groups) + ": the tensor-core kernels need groups 1";
  return "";
}

// Few channels per group: at most kNarrowChannels input or output channels in a group (RGB or
// mono outputs and their gradients), or a grouped call whose groups are small (C_in/groups x
// C_out/groups up to kNarrowGroupProduct; a float32 wgrad up to kNarrowGroupProductWgrad). There
// the GEMMs of the other rows are mostly padding (M or K of a few channels) or, for groups, one
// small GEMM per group over a column buffer, and the pass is bound by memory: the direct
// kernels, which read each operand about once, take it. A float32 grouped wgrad stayed ahead of
// the GEMM path past 32 x 32 per group (48 x 24: 1.31x; 64 x 32: even; GPU run 100, H200, every
// kernel timed by benchmark mode).
// The forward also needs short sums: each output of the direct forward is one thread's chain of
// C_in/groups x (taps per stride phase) FMAs, and past kDirectFwdMaxSum products the GEMM path's
// tensor cores were faster even with mostly empty tiles (Conv-TasNet's 512 x 2, pix2pix's
// 128 x 4; measured in docs/performance.md, "The direct kernels").
// A float32 wgrad at "high" with groups 1 also needs few (co, tap) columns: past
// kDirectWgradHighMaxCols the GEMM path's TF32 GEMM, whose N is those columns, was faster (DCGAN's
// and pix2pix's RGB outputs, 3 x 16 columns; Conv-TasNet's 1 x 16 columns the other way;
// docs/performance.md). With groups, a group's GEMM of more than kNarrowChannels rows (C_in/groups)
// and at least kDirectWgradHighMinGroupGemm entries (rows x C_out/groups x taps, 1/16 of
// batch-wgmma's 128 x 128 tile) goes to the tensor cores too: once batch-wgmma's wgrad stopped
// spilling, its TF32 ran grouped_g8's 16 x 64 per group in 0.78x of the direct kernel's time,
// and three other grouped layers of 1024-2048 entries in 0.44x-0.77x; at "highest" its 3xTF32
// took 0.56x-0.69x on the two of 2048 entries and tied or lost at 1024, hence
// kDirectWgradHighestMinGroupGemm (docs/performance.md, "Runs 299-301").
constexpr int64_t kNarrowChannels = 8;
constexpr int64_t kNarrowGroupProduct = 1024;
constexpr int64_t kNarrowGroupProductWgrad = 2048;
constexpr int64_t kDirectFwdMaxSum = 256;
constexpr int64_t kDirectWgradHighMaxCols = 16;
constexpr int64_t kDirectWgradHighMinGroupGemm = 1024, kDirectWgradHighestMinGroupGemm = 2048;

// The taps of one forward stride phase: a phase's taps step by stride / gcd(dilation, stride)
// along each axis.
int64_t forward_taps_per_phase(const ConvGeometry& g) {
  int64_t taps = 1;
  for (size_t a = 0; a < 2; ++a)
    taps *= ceil_div(g.kernel[a], g.stride[a] / std::gcd(g.dilation[a], g.stride[a]));
  return taps;
}

bool narrow_call(ConvPass pass, const ConvGeometry& g, DType dtype) {
  const int64_t cig = g.in_channels_per_group(), cog = g.out_channels_per_group();
  const int64_t group_bound = pass == ConvPass::wgrad && dtype == DType::float32
                                  ? kNarrowGroupProductWgrad
                                  : kNarrowGroupProduct;
  const bool narrow =
      std::min(cig, cog) <= kNarrowChannels || (g.groups > 1 && cig * cog <= group_bound);
  if (!narrow) return false;
  if (pass == ConvPass::wgrad) {
    const bool tf32_gemm = dtype == DType::float32 && g.precision == Precision::high;
    const int64_t cols = cog * g.kernel[0] * g.kernel[1];
    if (tf32_gemm && g.groups == 1) return cols <= kDirectWgradHighMaxCols;
    const int64_t min_group_gemm = g.precision == Precision::high ? kDirectWgradHighMinGroupGemm
                                                                  : kDirectWgradHighestMinGroupGemm;
    return !(dtype == DType::float32 && g.groups > 1 && cig > kNarrowChannels &&
             cig * cols >= min_group_gemm);
  }
  if (pass != ConvPass::forward) return true;
  return cig * forward_taps_per_phase(g) <= kDirectFwdMaxSum;
}

// A forward's useful multiplies per thin-kernel multiply: a cell multiplies TH x TW inputs into
// its whole register block, whose slots past sH*sW*C_out/groups and whose taps between dilated
// ones or past the kernel are zeros. Under kThinMinUse the direct kernels waste less.
constexpr double kThinMinUse = 0.5;

double thin_use(const ConvGeometry& g, const ThinPlan& t) {
  return static_cast<double>(g.kernel[0] * g.kernel[1] * g.out_channels_per_group()) /
         static_cast<double>(t.th * t.tw * t.block);
}

// Why the thin wgrad is not preferred for the call, or empty. It was measured (GPU runs 90, 92
// and 96) against the direct kernel, the kernel it would replace at "highest": 1.41x faster on
// pix2pix's 128 -> 3, 1.11x on DCGAN's 64 -> 3 (a block of 64 channels), even on Conv-TasNet's
// 512 -> 1. Under 64 channels a block's lanes sit partly empty, and the direct kernel keeps the
// call. At "high", batch-wgmma's TF32 was as fast or faster on those layers (1.06x-2.8x, run 90),
// so the rows above keep the call there; at "highest" batch-wgmma's 3xTF32 keeps those it takes
// (narrow_wgrad_on_wgmma), and this kernel the rest.
std::string thin_wgrad_declined(const ConvGeometry& g) {
  if (g.precision == Precision::high)
    return "wgrad at \"high\": the tensor-core rows measured faster on thin outputs";
  if (g.in_channels_per_group() < kThinWgradMinChannels) {
    return "wgrad with C_in/groups=" + std::to_string(g.in_channels_per_group()) +
           ": under one block of " + std::to_string(kThinWgradMinChannels) +
           " channels, the direct kernel keeps it";
  }
  return "";
}

// Whether the thin kernels can run the call and, for a forward, waste few multiplies (for a
// wgrad, thin_wgrad_declined).
bool thin_call(const PlanInput& in) {
  ThinPlan t;
  if (!thin_path_declined(in.pass, in.g, in.dtype, &t).empty()) return false;
  if (in.pass == ConvPass::wgrad) return thin_wgrad_declined(in.g).empty();
  return in.pass != ConvPass::forward || thin_use(in.g, t) >= kThinMinUse;
}

// A grouped forward or dgrad past kDirectFirstGroupProduct channels per group (C_in/groups x
// C_out/groups, and more than kNarrowChannels each way) goes to the batch-positions kernels
// first, when they take it; else the direct kernels keep it (narrow_call's bound). Measured on
// eleven grouped layers, the suite's and others (GPU run 100, H200, every kernel timed by
// benchmark mode): the direct kernels won at 16 x 8 and 16 x 16 per group (1.1x-1.5x),
// batch-igemm from 32 x 16 (1.2x-1.35x at "high") up (32 x 32: 1.65x-3.9x at both precisions).
constexpr int64_t kDirectFirstGroupProduct = 256;

bool wide_groups_first(const PlanInput& in) {
  const int64_t cig = in.g.in_channels_per_group(), cog = in.g.out_channels_per_group();
  return in.pass != ConvPass::wgrad && in.g.groups > 1 && std::min(cig, cog) > kNarrowChannels &&
         cig * cog > kDirectFirstGroupProduct;
}

// Why a thin output's forward or dgrad goes to the GEMM path, or empty. With one group and
// large planes (gemm_per_sample) the path multiplies each sample's plane where it lies, and when
// the input channels are at least the column buffer's rows (C_in >= C_out x taps) its copies
// are small next to x or dx. What then decides is the multiplies per input position, C_in x
// C_out x taps, which the thin kernels do one FMA at a time: at "high" the GEMM path's TF32 GEMM
// was as fast or faster on every such call measured from kThinGemmMinWorkHigh and slower under
// it; at "highest" its FP32 GEMM won on most forwards from kThinGemmMinWorkHighest and lost on
// most dgrads, which stay (docs/performance.md, "Runs 225-230").
constexpr int64_t kThinGemmMinWorkHigh = 2048, kThinGemmMinWorkHighest = 4096;

std::string gemm_first(const PlanInput& in) {
  const ConvGeometry& g = in.g;
  if (!in.prefer || in.pass == ConvPass::wgrad || !gemm_per_sample(g)) return "";
  const bool high = g.precision == Precision::high;
  if (!high && in.pass != ConvPass::forward) return "";
  const int64_t rows = g.out_channels * g.kernel[0] * g.kernel[1];
  const int64_t work = g.in_channels * rows;
  const int64_t min_work = high ? kThinGemmMinWorkHigh : kThinGemmMinWorkHighest;
  if (g.in_channels < rows || work < min_work || !thin_call(in)) return "";
  if (!gemm_path_declined(in.pass, g, g.precision, in.dtype).empty()) return "";
  return "C_in x C_out x taps=" + std::to_string(work) + " >= " + std::to_string(min_work) +
         " (C_in >= C_out x taps=" + std::to_string(rows) + ") over " +
         std::to_string(g.in_size[0] * g.in_size[1]) +
         " positions a sample: the GEMM path's per-sample GEMMs";
}

// Empty when the rows above the thin and direct kernels keep the call; else why they give way
// to them (or, gemm_first, to the GEMM path): a thin output the thin kernels run, or a narrow call
// the direct kernels can run, while the speed preferences are on.
std::string direct_first(const PlanInput& in) {
  if (!in.prefer) return "";
  if (std::string gemm = gemm_first(in); !gemm.empty()) return gemm;
  if (thin_call(in)) {
    return "C_out/groups=" + std::to_string(in.g.out_channels_per_group()) +
           ": a thin output, the thin kernels";
  }
  if (!narrow_call(in.pass, in.g, in.dtype)) return "";
  if (wide_groups_first(in)) return "";
  if (!direct_path_declined(in.pass, in.g, in.dtype, nullptr).empty()) return "";
  return "C_in/groups=" + std::to_string(in.g.in_channels_per_group()) +
         ", C_out/groups=" + std::to_string(in.g.out_channels_per_group()) +
         ": few channels per group, the direct kernels";
}

// The implicit GEMM of forward (src = x, M = C_out, channels = C_in, taps gathered per phase
// r = ow mod sW) or dgrad (src = dy, M = C_in, channels = C_out, src column iw*sW - pW + kw*dW:
// a window read with column stride sW). Pointers stay null: the launcher sets them.
IgemmProblem igemm_problem(ConvPass pass, const ConvGeometry& g) {
  IgemmProblem q{};
  const bool fwd = pass == ConvPass::forward;
  q.N = g.batch;
  q.C = fwd ? g.in_channels : g.out_channels;
  q.M = fwd ? g.out_channels : g.in_channels;
  q.Hs = fwd ? g.in_size[0] : g.out_size[0];
  q.Ws = fwd ? g.in_size[1] : g.out_size[1];
  q.Ho = fwd ? g.out_size[0] : g.in_size[0];
  q.Wo = fwd ? g.out_size[1] : g.in_size[1];
  q.kH = g.kernel[0];
  q.kW = g.kernel[1];
  q.sH = g.stride[0];
  q.pH = g.padding[0];
  q.dH = g.dilation[0];
  q.sW = g.stride[1];
  q.pW = g.padding[1];
  q.dW = g.dilation[1];
  q.gather = fwd;
  q.phases = fwd ? g.stride[1] : 1;
  q.s_in = fwd ? 1 : g.stride[1];
  q.s_out = fwd ? g.stride[1] : 1;
  return q;
}

// The most taps one src row of p contributes to an output row (over the phases).
int64_t taps_per_row(const IgemmProblem& p) {
  if (!p.gather) return p.kW;
  int64_t most = 0;
  for (int64_t r = p.phase0; r < p.phase0 + p.phases; ++r)
    most = std::max(most, igemm_phase_taps(p, r));
  return most;
}

std::string tile_name(const IgemmTiling& t) {
  std::ostringstream os;
  os << t.bm << 'x' << t.bn << '/' << t.chunk << "ch";
  return os.str();
}

// Tile utilization. The implicit GEMMs tile one output row (per phase) by bn positions and the
// output channels by bm; a row shorter than the tile, or fewer channels than its rows, leaves
// most of each tile's work empty (DCGAN's 4x4..32x32 images, RGB or mono outputs). The GEMM
// path's N spans batch x positions instead, so it keeps its tiles full there. Below half
// useful work, the tensor-core rows give way to it (when it can take the call): measured on the
// decoder suite, the GEMM path was 1.2x to 20x faster on such calls (docs/performance.md).
// batch-igemm (whose N also spans batch x positions, without the GEMM path's column buffer)
// takes them first where it can.
constexpr double kMinTileUse = 0.5;

// Why a batch-positions kernel declines the call (wgmma: batch-wgmma, else batch-igemm; empty
// when it takes it), and the kernel that takes it (batch-wgmma before batch-igemm) or null.
const std::string& batch_declined(const PlanInput& in, bool wgmma, BatchIgemmPlan* out);
const char* batch_kernel_taking(const PlanInput& in);
std::string batch_prefers_gemm(const PlanInput& in);

std::string low_use_reason(const PlanInput& in, double use, const std::string& what) {
  if (!in.prefer || use >= kMinTileUse) return "";
  // Give way only to a row below that can take the call: a batch-positions kernel (forward,
  // dgrad) or the GEMM path, whose N all span batch x positions.
  const char* batch = batch_kernel_taking(in);
  if (batch == nullptr && !gemm_path_declined(in.pass, in.g, in.g.precision, in.dtype).empty())
    return "";
  std::ostringstream os;
  os.precision(2);
  os << what << " would do " << use * 100.0 << "% useful work (below " << kMinTileUse * 100.0
     << "%): " << (batch ? batch : "the GEMM path") << " spans batch x positions";
  return os.str();
}

std::string igemm_use_reason(const PlanInput& in, const IgemmProblem& p, const IgemmTiling& t) {
  const double row = static_cast<double>((p.Wo + p.s_out - 1) / p.s_out);
  const double use = static_cast<double>(p.M) / static_cast<double>(p.m_tiles * t.bm) *
                     (row / static_cast<double>(p.q_tiles * t.bn));
  return low_use_reason(in, std::min(use, 1.0), "tile " + tile_name(t));
}

// The batch-positions kernels before the kernels whose tiles cover one output row of one sample
// (wgmma, mma.sync) where their tiles, spanning rows and samples, fill better: 2-D calls with
// short rows (wgmma) and 1-D calls with few output positions (batch x length). Long rows and
// sequences fill the row kernels' tiles, and they stay faster there than batch-igemm. Its
// strided dgrad is bound by its gathers, which cost the same at either precision, so at "high"
// mma.sync keeps 1-D dgrad. The forced A/B behind the bounds is docs/performance.md's "Run 38".
// Empty when a batch-positions kernel takes the call, else why the row kernel keeps it.
constexpr int64_t kBatchIgemmRowsBelow = 512;
constexpr int64_t kBatchIgemmMaxPositions1d = int64_t{1} << 17;

std::string batch_igemm_first(const PlanInput& in, bool wgmma) {
  const ConvGeometry& g = in.g;
  if (!in.prefer) return "preferences off";
  const bool fwd = in.pass == ConvPass::forward;
  const int64_t out_h = fwd ? g.out_size[0] : g.in_size[0];
  const int64_t out_w = fwd ? g.out_size[1] : g.in_size[1];
  const bool two_d = g.in_size[0] > 1 && g.out_size[0] > 1;
  // A forward whose taps all fall in one phase; when strided, wgmma's fill mode writes the other
  // phases' bias beside them (S1 forward).
  const bool one_phase = fwd && (g.kernel[1] == 1 || g.dilation[1] % g.stride[1] == 0);
  const bool fill = one_phase && g.stride[1] > 1;
  // batch-wgmma, where it takes a call at "high", was ahead of both row kernels on every call of
  // the suite and of S1-S5 in run 54's benchmark mode, and on 2-D rows of 512 with M = 128 and
  // 256. Its 3xTF32 instance ("highest") was ahead of them on the 1-D calls it takes (S2 and S3
  // 1.20x-1.29x, S4's forward 1.04x, EnCodec x5's forward 1.69x; runs 103 and 105), except a
  // one-phase forward (S1's, 1.25x slower than fill mode); on 2-D calls the bounds below, batch-
  // igemm's, decide there (S5, rows of 512, 1.5x slower on batch-wgmma). Its 64-row tile at
  // "high" (M <= 64, taken only where TMA copies it) was measured against batch-igemm alone, so
  // the bounds below decide for it too.
  BatchIgemmPlan bw;
  if (batch_declined(in, true, &bw).empty() && !(bw.tma && bw.bm == 64) &&
      (g.precision == Precision::high || (!two_d && !fill)))
    return "";
  if (two_d) {
    if (wgmma && out_w >= kBatchIgemmRowsBelow) return "2-D rows of 512 or more";
  } else {
    // A strided call's row tiles cover one phase's positions, or (dgrad) gather every s-th src
    // column, and batch-igemm measured ahead of them at any length for strides 2 to 4 (run 54:
    // S1 dgrad, EnCodec's x2 and x4), unless the forward's taps all fall in one phase, where
    // wgmma's fill mode writes the other phases' bias beside them (S1 forward).
    // Past stride 4 a dgrad's gathers waste most of their loads in either kernel, and mma.sync
    // kept EnCodec's x5 dgrad at "high".
    if (g.stride[1] == 1 || g.stride[1] > 4 || one_phase) {
      if (g.batch * out_h * out_w > kBatchIgemmMaxPositions1d)
        return "1-D, more than 2^17 positions";
      if (!fwd && g.precision != Precision::highest) return "1-D dgrad at \"high\"";
    }
  }
  return batch_kernel_taking(in) ? "" : "the batch-positions kernels decline";
}

// A grid under half the SMs leaves most of the GPU idle for the whole call (each CTA runs the
// whole K loop): the row kernel gives way to the GEMM path, whose GEMMs span batch x positions,
// when it can take the call (measured: docs/performance.md, "Run 53").
std::string few_ctas_reason(const PlanInput& in, int64_t ctas) {
  if (!in.prefer || in.caps.sm_count <= 0 || 2 * ctas >= in.caps.sm_count) return "";
  if (!gemm_path_declined(in.pass, in.g, in.g.precision, in.dtype).empty()) return "";
  return std::to_string(ctas) + " CTAs for " + std::to_string(in.caps.sm_count) +
         " SMs (under half): the GEMM path spans batch x positions";
}

// A dgrad with stride > 4 and M > 256: the row and batch kernels' gathers then use one src
// column in s, and the GEMM path, whose column buffer holds only the taps that land, measured up
// to 2x faster (EnCodec's x8 dgrad at "highest", run 54). Empty when that is not the call, else
// the reason to give way.
constexpr int64_t kStridedDgradMaxStride = 4, kStridedDgradMaxM = 256;

std::string wide_strided_dgrad(ConvPass pass, const ConvGeometry& g, int64_t M) {
  const int64_t s_max = std::max(g.stride[0], g.stride[1]);
  if (pass != ConvPass::dgrad || s_max <= kStridedDgradMaxStride || M <= kStridedDgradMaxM)
    return "";
  return "dgrad with stride " + std::to_string(s_max) + " and M=" + std::to_string(M) + " > " +
         std::to_string(kStridedDgradMaxM) + ": the GEMM path";
}

// The row kernels give way on such a dgrad when the GEMM path can take it.
std::string strided_dgrad_reason(const PlanInput& in, int64_t M) {
  if (!in.prefer) return "";
  std::string why = wide_strided_dgrad(in.pass, in.g, M);
  if (why.empty() || !gemm_path_declined(in.pass, in.g, in.g.precision, in.dtype).empty())
    return "";
  return why;
}

// A dgrad at "high" with M = C_in/groups >= kHighDgradGemmMinM goes to the GEMM path when it
// can take it, from the row and batch kernels alike. With every suite dgrad forced to the GEMM
// path at "high", its TF32 GEMM won at M = 512, and at 256 once its large planes skipped the
// packed copy (gemm_per_sample) on three of the four layers, losing a little on the fourth
// (docs/performance.md, "Runs 225-230"). Empty when that is not the call.
constexpr int64_t kHighDgradGemmMinM = 256;

std::string high_dgrad_gemm(const PlanInput& in) {
  const ConvGeometry& g = in.g;
  const int64_t M = g.in_channels_per_group();
  if (!in.prefer || in.pass != ConvPass::dgrad || g.precision != Precision::high ||
      M < kHighDgradGemmMinM || !gemm_path_declined(in.pass, g, g.precision, in.dtype).empty())
    return "";
  return "dgrad at \"high\" with M=" + std::to_string(M) +
         " >= " + std::to_string(kHighDgradGemmMinM) + ": the GEMM path's TF32 GEMM";
}

// ---- wgmma (sm_90a; forward and dgrad) ------------------------------------------------------

std::string rule_wgmma(const PlanInput& in, ConvPlan& plan) {
  std::string why = tensor_core_reason(in);
  if (!why.empty()) return why;
  // The kernel is built for sm_90a alone (cuda/CMakeLists.txt), which runs on 9.0 only.
  if (in.caps.sm_major != 9 || in.caps.sm_minor != 0)
    return "compute capability " + std::to_string(in.caps.sm_major) + "." +
           std::to_string(in.caps.sm_minor) + ": wgmma needs 9.0";
  if (!in.caps.wgmma_compiled) return "this build has no sm_90a code for the wgmma kernel";
  if (std::string narrow = direct_first(in); !narrow.empty()) return narrow;
  if (std::string high = high_dgrad_gemm(in); !high.empty()) return high;
  if (batch_igemm_first(in, true).empty())
    return "the batch-positions kernels' tiles span rows and samples (short rows or few positions)";
  if (std::string gemm = batch_prefers_gemm(in); !gemm.empty()) return gemm;
  IgemmProblem p = igemm_problem(in.pass, in.g);
  // Row fold (see IgemmProblem::fold_m): at M <= 32 half of each 64-row tile would be empty, so
  // folding two output rows into one tile measured faster at both precisions (the numbers are
  // in docs/performance.md).
  if (p.M <= 32 && p.kH > 1 && p.kH < kIgemmMaxKh && (p.kH + 1) * p.kW <= kIgemmMaxTaps &&
      p.sH == 1 && p.dH == 1 && p.Ho > 1) {
    p.fold_m = p.M, p.fold_ho = p.Ho;
    p.M *= 2, p.Ho = (p.Ho + 1) / 2, p.kH += 1;
  }
  // Which shapes go here is measured (same-run A/B against the mma.sync kernel on the H200,
  // docs/performance.md): M <= 32 unfolded (1-D) leaves half of each 64-row warpgroup tile
  // empty, which 1xTF32 with three taps (S1 dgrad) still wins and 3xTF32 does not; rows of more
  // than three taps (S4, S5) run with one tap's A fragments (3xTF32, a wait after each tap) or two
  // (1xTF32) in registers, since a whole row's would not fit two CTAs per SM. M > 64: two
  // warpgroups along M share the window; otherwise two along N. Two CTAs per SM: one CTA's copies,
  // conversion and stores overlap the other's wgmmas. The tiles are WgmmaConfig's kBM x kBN.
  IgemmTiling tile{};
  int max_taps = 3;
  if (in.g.precision == Precision::highest) {
    if (p.M <= 32)
      return "highest with M=" + std::to_string(p.M) +
             " <= 32 unfolded: half of each 64-row tile would be empty (mma.sync is faster)";
    // N = 64 a warpgroup: the chain and its float32 sum take 64 registers, so two CTAs fit.
    tile = p.M > 64 ? IgemmTiling{128, 64, 16, 2, true} : IgemmTiling{64, 128, 16, 2, true};
  } else if (taps_per_row(p) > 3 || p.M > 64) {
    // More than three taps a row (S4, S5), or M > 64: two taps' A fragments in flight, whatever
    // the count. For more taps this beat the mma.sync kernel. At M > 64 (two warpgroups along M)
    // three taps' fragments loaded at once measured a little faster, but at the 128-register cap
    // of two CTAs per SM ptxas serializes those wgmmas (C7512), and batch-wgmma now takes nearly
    // every such "high" call (it gives way only on strided dgrad past M = 256 or stride 4).
    tile = p.M > 64 ? IgemmTiling{128, 128, 16, 2, false} : IgemmTiling{64, 256, 16, 2, false};
    max_taps = 0;
  } else {
    // M <= 64, three taps or fewer: all of a step's taps issued at once, their weights staged in
    // shared memory a step ahead. With their A fragments in registers instead (24 beside the 64
    // accumulators at the 128-register cap of two CTAs per SM) ptxas serialized the wgmmas
    // (C7512). Staged, with one raw stage fewer for the room, it measured as fast or faster,
    // while the register-only alternatives had been slower on S2 dgrad (two taps in flight, a
    // 64 x 192 tile, 8-channel steps; docs/performance.md, "Runs 284-287" and earlier).
    tile = {64, 256, 16, 2, false, 3};
  }
  if (!tile.split && max_taps > 0 && taps_per_row(p) > max_taps)
    return "more than " + std::to_string(max_taps) + " taps a row";
  if (const char* no = igemm_plan_tiles(p, tile)) return "tile " + tile_name(tile) + ": " + no;
  if (p.b_step != 1)
    return "window column step " + std::to_string(p.b_step) +
           ": a tap's shift must be whole columns of the window";
  if (std::string low = igemm_use_reason(in, p, tile); !low.empty()) return low;
  if (std::string few = few_ctas_reason(in, igemm_ctas(p)); !few.empty()) return few;
  if (std::string strided = strided_dgrad_reason(in, p.M); !strided.empty()) return strided;
  plan.igemm = p;
  plan.tile = tile;
  plan.wgmma_max_taps = max_taps;
  return "";
}

// ---- mma.sync implicit GEMM (forward and dgrad) ----------------------------------------------

std::string rule_mma_sync(const PlanInput& in, ConvPlan& plan) {
  std::string why = tensor_core_reason(in);
  if (!why.empty()) return why;
  // This kernel's tiles cover one output row of one sample, batch-igemm's span rows and samples:
  // it gives way on every 2-D call and on short 1-D calls (batch_igemm_first; measured in
  // docs/performance.md, runs 34 and 38).
  if (std::string narrow = direct_first(in); !narrow.empty()) return narrow;
  if (std::string high = high_dgrad_gemm(in); !high.empty()) return high;
  if (batch_igemm_first(in, false).empty())
    return "the batch-positions kernels' tiles span rows and samples (2-D, or few positions)";
  if (std::string gemm = batch_prefers_gemm(in); !gemm.empty()) return gemm;
  IgemmProblem p = igemm_problem(in.pass, in.g);
  // Each shape first with 32 channels per step (fewer steps: each step's fixed costs, the
  // barrier and the window conversion, are paid less often), then 16 and 8 where shared memory
  // does not allow it (wide dilations). 3xTF32 keeps the tensor-core chain and the FADD sum:
  // one CTA per SM at 64x32 / 32x64 warp tiles, two at 32x32; 1xTF32 two everywhere.
  // The tiles are IgemmConfig's kBM x kBN: 128 x 128 (warp tile 64 x 32), 64 x 256 (32 x 64),
  // 32 x 256 (32 x 32).
  const bool split = in.g.precision == Precision::highest;
  const int big_blocks = split ? 1 : 2;
  std::vector<IgemmTiling> tiles;
  if (p.M > 64) {
    tiles = {{128, 128, 32, big_blocks, split},
             {128, 128, 16, big_blocks, split},
             {128, 128, 8, big_blocks, split}};
  } else if (p.M > 32) {
    tiles = {{64, 256, 32, big_blocks, split},
             {64, 256, 16, big_blocks, split},
             {64, 256, 8, big_blocks, split}};
  } else if (split) {
    tiles = {{32, 256, 16, 2, true}, {32, 256, 8, 2, true}};
  } else {
    tiles = {{32, 256, 16, 2, false}, {32, 256, 8, 2, false}};
  }
  std::string misses;
  for (const IgemmTiling& t : tiles) {
    // One problem across the tries, as the first-fit launcher had it (fill, once set, stays).
    const char* no = igemm_plan_tiles(p, t);
    if (no == nullptr) {
      if (std::string low = igemm_use_reason(in, p, t); !low.empty()) return low;
      if (std::string few = few_ctas_reason(in, igemm_ctas(p)); !few.empty()) return few;
      if (std::string strided = strided_dgrad_reason(in, p.M); !strided.empty()) return strided;
      plan.igemm = p;
      plan.tile = t;
      return "";
    }
    misses += (misses.empty() ? "" : "; ") + tile_name(t) + ": " + no;
  }
  return "no tile fits (" + misses + ")";
}

// ---- batch-igemm: the implicit GEMM with N over batch x positions (forward and dgrad) ---------

// What batch-wgmma (every pass) cannot run: a device other than 9.0, a build without its code.
// Empty when it can.
std::string batch_wgmma_declined(const PlanInput& in) {
  // Built for sm_90a alone (cuda/CMakeLists.txt), which runs on 9.0 only.
  if (in.caps.sm_major != 9 || in.caps.sm_minor != 0)
    return "compute capability " + std::to_string(in.caps.sm_major) + "." +
           std::to_string(in.caps.sm_minor) + ": wgmma needs 9.0";
  if (!in.caps.wgmma_compiled) return "this build has no sm_90a code for the wgmma kernels";
  return "";
}

constexpr double kChannelsLastMinUses = 1024;
constexpr int64_t kChannelsLastMinStride = 5;
constexpr double kChannelsLastTmaMinUses = 512;
constexpr int64_t kChannelsLastTmaMinStride = 4;
constexpr double kNarrowTmaMinUses = 512;

// Empty when the batch-positions kernel (conv_transpose_batch_igemm.cu) runs the call, with its
// plan in `plan`; else why not: what it cannot run, then (in.prefer) where the GEMM path measured
// faster.
constexpr int64_t kBatchIgemmMaxPreferredM = 512;
constexpr int64_t kFewCtasMaxSteps = 16;

// wgmma: the sm_90a instance (batch-wgmma), which multiplies with wgmma from shared memory
// instead of mma.sync; the same GEMM, arithmetic and preferences.
std::string batch_igemm_check(const PlanInput& in, BatchIgemmPlan& plan, bool wgmma) {
  // Groups are the grid's z, the phases part of its x: one GEMM per group and phase.
  if (in.dtype != DType::float32)
    return std::string(dtype_name(in.dtype)) + ": the tensor-core kernels are float32 only";
  if (wgmma) {
    if (std::string no = batch_wgmma_declined(in); !no.empty()) return no;
  } else if (in.caps.sm_major < 8) {
    return "compute capability " + std::to_string(in.caps.sm_major) + "." +
           std::to_string(in.caps.sm_minor) + ": TF32 mma.sync needs 8.0";
  }
  const ConvGeometry& g = in.g;
  // The kernel's plane arithmetic is 32-bit; offsets across channels and samples are int64.
  if (!fits_plane32(g)) return "a spatial size or plane past the kernel's 32-bit plane arithmetic";
  const bool fwd = in.pass == ConvPass::forward;
  // One group's channels: C summed over, M computed.
  const int64_t C = (fwd ? g.in_channels : g.out_channels) / g.groups;
  const int64_t M = (fwd ? g.out_channels : g.in_channels) / g.groups;
  constexpr int64_t kIntMax = 2147483647;
  if (C > kIntMax / 2 || M > kIntMax / 2) return "more than 2^30 channels";
  plan.groups = g.groups;
  plan.phases_h = fwd ? static_cast<int>(std::min<int64_t>(g.stride[0], 65536)) : 1;
  plan.phases_w = fwd ? static_cast<int>(std::min<int64_t>(g.stride[1], 65536)) : 1;
  if (g.groups > 65535)
    return "groups=" + std::to_string(g.groups) + ": more than 65535 (the grid's z)";
  // Per axis, the most taps and output positions of any phase (the same arithmetic as the
  // kernel's, conv_batch_igemm.h).
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  int most_taps[2] = {0, 0};
  int64_t most_q[2] = {0, 0};
  const int64_t out_size[2] = {fwd ? g.out_size[0] : g.in_size[0],
                               fwd ? g.out_size[1] : g.in_size[1]};
  const int phases[2] = {plan.phases_h, plan.phases_w};
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    for (int r = 0; r < phases[a]; ++r) {
      const BatchIgemmAxis ax =
          batch_igemm_axis(fwd, i(out_size[a]), i(g.kernel[u]), i(g.stride[u]), i(g.padding[u]),
                           i(g.dilation[u]), r, nullptr, nullptr, 0);
      most_taps[a] = std::max(most_taps[a], ax.taps);
      most_q[a] = std::max<int64_t>(most_q[a], ax.q);
    }
  }
  plan.tap_use = gathered_tap_use(g, fwd);
  const int64_t taps = int64_t{most_taps[0]} * most_taps[1];
  if (taps > kBatchIgemmMaxTaps)
    return std::to_string(taps) + " taps in one output phase, more than " +
           std::to_string(kBatchIgemmMaxTaps);
  plan.max_taps = static_cast<int>(taps);
  plan.split = g.precision == Precision::highest;
  plan.wgmma = wgmma;
  if (wgmma) {
    // A warpgroup's wgmma covers 64 rows: 128 x 128 tiles (two warpgroups along M), or 64 x 128
    // for M <= 64, whose warpgroups split N into m64n64 multiplies (where batch-igemm's
    // narrower tiles take the call unless TMA copies it: below).
    // A dgrad past stride 4, whose gather would use one src column in s, reads the
    // channels-last copy (below), whose lines are whole.
    plan.bm = M > 64 ? 128 : 64;
    plan.bn = plan.split && plan.bm == 128 ? 64 : 128;
  } else {
    // The tile rows follow M (fewest empty rows); 3xTF32's 128-row tile is 64 columns wide
    // (a register sum beside each accumulator).
    plan.bm = M > 64 ? 128 : M > 32 ? 64 : 32;
    plan.bn = plan.split && plan.bm == 128 ? 64 : 128;
  }
  plan.max_q = g.batch * most_q[0] * most_q[1];
  plan.n_tiles = ceil_div(plan.max_q, plan.bn);
  plan.m_tiles = ceil_div(M, plan.bm);
  if (plan.n_tiles * plan.phases_h * plan.phases_w > kIntMax)
    return "more than 2^31-1 column tiles x phases (the grid's x)";
  if (plan.m_tiles > 65535) return "more than 65535 row tiles (the grid's y)";
  plan.c_pad = ceil_div(C, kBatchIgemmChunk) * kBatchIgemmChunk;
  plan.m_pad = plan.m_tiles * plan.bm;
  const int64_t packed =
      g.groups * g.kernel[0] * g.kernel[1] * plan.c_pad * plan.m_pad * 4 * (plan.split ? 2 : 1);
  if (packed > kGemmWorkspaceBytes)
    return "packed weights of " + std::to_string(packed) + " bytes, over the workspace budget of " +
           std::to_string(kGemmWorkspaceBytes);
  // batch-wgmma reads B from a channels-last copy of src (made per call: src read and written
  // once more) where that measured faster (run 69b, the suite and S1-S5 forced both ways):
  // - each src value feeds at least kChannelsLastMinUses multiply-adds (M x the taps that read
  //   it: every tap forward, taps / (sH*sW) in dgrad), so the copy costs little beside them
  //   (DeconvNet deconv5 1.19x, U-Net 1024 -> 512 dgrad 1.44x); below it the copy dominated
  //   (U-Net 128 -> 64 dgrad 0.50x, S1-S4 0.48x-0.90x);
  // - a dgrad at stride 5 or more: the register gather there reads one src column in s, most
  //   of each line it loads wasted, while the copy's lines are whole (EnCodec x8 / x5 dgrad
  //   2.66x / 2.29x, HiFi-GAN's x8 dgrads 1.45x-1.78x).
  if (wgmma) {
    const double uses = static_cast<double>(M) * static_cast<double>(g.kernel[0] * g.kernel[1]) /
                        static_cast<double>(fwd ? 1 : g.stride[0] * g.stride[1]);
    const bool wide_stride = !fwd && std::max(g.stride[0], g.stride[1]) >= kChannelsLastMinStride;
    // - at 1xTF32 with TMA copies (batch_wgmma_tma_check), also a dgrad from
    //   kChannelsLastTmaMinUses uses or at stride kChannelsLastTmaMinStride: one thread's copy
    //   a step replaces the gather's strided loads, while with fewer uses at stride 2 the
    //   copy's own pass over src costs more than it saves, and forwards, whose gather reads
    //   consecutive columns, gain less than the copy costs below kChannelsLastMinUses
    //   (docs/performance.md, batch-wgmma's copies by TMA).
    const bool tma_ok = !plan.split && batch_wgmma_tma_check(g, fwd, plan).empty();
    const bool tma_dgrad = tma_ok && !fwd &&
                           (uses >= kChannelsLastTmaMinUses ||
                            std::max(g.stride[0], g.stride[1]) >= kChannelsLastTmaMinStride);
    // - 32 < M <= 64 at 1xTF32, where batch-igemm's mma.sync tiles are the alternative
    //   (below): a forward from kNarrowTmaMinUses uses reads the copy by TMA, on which the
    //   64-row tile ran faster than batch-igemm, while below it the copy's pass over src did not
    //   pay (docs/performance.md, batch-wgmma's copies by TMA). M <= 32 would leave half the
    //   tile empty.
    const bool narrow = M <= (plan.split ? 32 : 64);
    const bool tma_narrow_fwd = tma_ok && fwd && narrow && M > 32 && uses >= kNarrowTmaMinUses;
    plan.channels_last = uses >= kChannelsLastMinUses || wide_stride || tma_dgrad || tma_narrow_fwd;
    plan.tma = tma_ok && plan.channels_last;
    // At "high" batch-igemm measured as fast or faster than the gathering 64 x 128 tile; at
    // "highest" (3xTF32, 128 x 64 or 64 x 128) batch-wgmma was the faster on every suite call
    // with M >= 64 and the slower on those with M <= 32, where half its tile is padding. Read
    // by TMA, the 64-row tile beat batch-igemm (docs/performance.md).
    if (in.prefer && narrow && !(plan.tma && M > 32))
      return "M=" + std::to_string(M) + " <= " + std::to_string(plan.split ? 32 : 64) +
             ": batch-igemm's narrower tiles";
  }
  plan.smem_bytes = wgmma ? batch_wgmma_smem_bytes(plan.bm, plan.bn, plan.channels_last, plan.split)
                          : batch_igemm_smem_bytes(plan.bm, plan.bn, plan.split);
  if (plan.smem_bytes > in.caps.smem_per_block_optin)
    return "tile " + std::to_string(plan.bm) + "x" + std::to_string(plan.bn) + " needs " +
           std::to_string(plan.smem_bytes) + " bytes of shared memory, the device allows " +
           std::to_string(in.caps.smem_per_block_optin);
  // K slices at 3xTF32 where the grid leaves SMs idle or its last wave mostly empty (wgmma
  // only: its epilogue sums the slices). At 1xTF32 a step is a third as long, so a slice's fixed
  // costs (its partial's write, the last slice's reads of all of them) outweighed the SMs it
  // filled: slicing was slower on most such calls (docs/performance.md, "K slices").
  // The partials must fit the workspace budget, the slices the grid's y. `steps` is a tile's K
  // loop in the longest phase.
  const int64_t steps = int64_t{plan.max_taps} * plan.c_pad / kBatchIgemmChunk;
  if (wgmma && plan.split && in.caps.sm_count > 0) {
    const int64_t tiles = plan.tiles();
    int64_t slices = batch_wgmma_k_slices(tiles, steps, in.caps.sm_count);
    while (slices > 1 && (tiles * slices * plan.bm * plan.bn * 4 > kGemmWorkspaceBytes ||
                          plan.m_tiles * slices > 65535))
      --slices;
    plan.k_slices = slices;
  }
  if (std::string narrow = direct_first(in); !narrow.empty()) return narrow;
  // Speed preferences, where the GEMM path (next row) can take the call. Each was measured on
  // the decoder suite, the kernel and the GEMM path forced in one run (H100, run 34 in
  // docs/performance.md), and is a property of the problem, not of a listed layer:
  if (in.prefer && gemm_path_declined(in.pass, g, g.precision, in.dtype).empty()) {
    // - Few output channels or summed channels (RGB or mono outputs, their dgrad): the tile's
    //   rows or its 32-channel K steps are mostly zero padding.
    const double use = static_cast<double>(M) / static_cast<double>(plan.m_pad) *
                       static_cast<double>(C) / static_cast<double>(plan.c_pad);
    if (use < kMinTileUse) {
      std::ostringstream os;
      os.precision(2);
      os << "tile " << plan.bm << "x" << plan.bn << " would do " << use * 100.0
         << "% useful work (C=" << C << ", M=" << M << "): the GEMM path";
      return os.str();
    }
    // - Taps mostly outside src (small inputs under wide kernels: DCGAN's 1x1 latent under a
    //   4x4 kernel lands 1 tap in 16): the gathered K is mostly zero fill, while the GEMM path
    //   multiplies each src value once and scatters.
    if (plan.tap_use < kMinTileUse) {
      std::ostringstream os;
      os.precision(2);
      os << plan.tap_use * 100.0
         << "% of the gathered taps land inside src: the direct kernels or the GEMM path";
      return os.str();
    }
    // - Few CTAs: the grid, K slices included, covers under half the SMs (at 1xTF32 each CTA
    //   runs a tile's whole K loop); the GEMM path's cuBLAS splits or picks narrower tiles. The
    //   loop's length below is a tile's, unsliced. At "highest" a
    //   loop of at most kFewCtasMaxSteps steps stays here: there the GEMM path's fixed costs
    //   (column buffer, FP32 GEMM, scatter) outweigh a short serial loop, while the row kernel
    //   above would otherwise keep the call (HiFi-GAN V3's first x8 forward); longer loops
    //   (2-D k4 s2 at small images) stay faster on the GEMM path. At "high" the TF32 GEMM path
    //   was as fast on the short loops. Measured with every kernel timed: docs/performance.md,
    //   "Runs 112 and 115".
    const int64_t ctas = plan.tiles() * plan.k_slices;
    const bool short_loop = g.precision == Precision::highest && steps <= kFewCtasMaxSteps;
    // A forward copied by TMA keeps its few CTAs over a loop of at most 2 x kFewCtasMaxSteps
    // steps: there the GEMM path's scatter of the columns cost more than the idle SMs
    // (docs/performance.md); a dgrad's GEMM path has no scatter.
    const bool tma_forward = plan.tma && fwd && steps <= 2 * kFewCtasMaxSteps;
    if (in.caps.sm_count > 0 && 2 * ctas < in.caps.sm_count && !short_loop && !tma_forward)
      return std::to_string(ctas) + " CTAs for " + std::to_string(in.caps.sm_count) + " SMs of " +
             std::to_string(steps) + " K steps a tile: the GEMM path";
    // - Many output channels at "high": the column buffer costs the GEMM path 8 bytes of
    //   traffic per column and K row against 2*M flops, small next to its TF32 cuBLAS GEMM's
    //   higher rate at M = 1024; up to 512 these kernels were the faster (run 54's benchmark
    //   mode, forward and dgrad). At "highest" the GEMM path's GEMM is float32 FMA, and 3xTF32
    //   batch-wgmma was the faster on every forward and dgrad past M = 512 timed, in the suite
    //   and outside it (docs/performance.md).
    if (M > kBatchIgemmMaxPreferredM && g.precision == Precision::high)
      return "M=" + std::to_string(M) + " > " + std::to_string(kBatchIgemmMaxPreferredM) +
             " at \"high\": the GEMM path's column traffic is small next to its TF32 GEMM's speed";
    // A dgrad copied by TMA whose taps outnumber twice the stride phases keeps the call: the
    // GEMM path's column buffer then holds more than two values per dy value, where the copy
    // holds one (docs/performance.md).
    const bool tma_dense_dgrad =
        plan.tma && !fwd && g.kernel[0] * g.kernel[1] > 2 * g.stride[0] * g.stride[1];
    if (std::string high = high_dgrad_gemm(in); !high.empty() && !tma_dense_dgrad) return high;
    // A dgrad past stride 4 loads one src column in s; batch-wgmma reading the channels-last
    // copy loads whole lines instead, and keeps such a dgrad at "highest": it was the faster on
    // every such layer timed whose grid filled the GPU (docs/performance.md); smaller grids go to
    // the GEMM path by the few-CTAs rule above.
    if (std::string strided = wide_strided_dgrad(in.pass, g, M);
        !strided.empty() && !(wgmma && plan.channels_last))
      return strided;
  }
  return "";
}

// batch_igemm_check, once per PlanInput and instance; *out (when not null) gets the plan when it
// takes the call.
const std::string& batch_declined(const PlanInput& in, bool wgmma, BatchIgemmPlan* out) {
  auto& verdict = wgmma ? in.batch_wgmma : in.batch_igemm;
  if (!verdict) {
    BatchIgemmPlan plan;
    std::string why = batch_igemm_check(in, plan, wgmma);
    verdict.emplace(std::move(why), plan);
  }
  if (out != nullptr && verdict->first.empty()) *out = verdict->second;
  return verdict->first;
}

const char* batch_kernel_taking(const PlanInput& in) {
  if (in.pass == ConvPass::wgrad) return nullptr;
  if (batch_declined(in, true, nullptr).empty()) return kKernelBatchWgmma;
  if (batch_declined(in, false, nullptr).empty()) return kKernelBatchIgemm;
  return nullptr;
}

// Where a batch-positions kernel could run a forward or dgrad but leaves it to the GEMM path for
// speed (batch_igemm_check's preferences: few CTAs, taps mostly outside src, M > 512 at "high",
// strided dgrads), the row kernels give way to the GEMM path too: ahead of the batch kernels in
// the table, they kept such calls and ran them several times slower than the GEMM path (short 1-D
// layers with many channels; docs/performance.md). Empty when that is not the call, else the
// batch kernel's reason.
std::string batch_prefers_gemm(const PlanInput& in) {
  if (!in.prefer || in.pass == ConvPass::wgrad || batch_kernel_taking(in) != nullptr) return "";
  if (!gemm_path_declined(in.pass, in.g, in.g.precision, in.dtype).empty()) return "";
  // The same call with preferences off (fresh verdicts): what the batch kernels can run.
  const PlanInput able{in.pass,
                       in.g,
                       in.dtype,
                       in.caps,
                       /*prefer=*/false,
                       in.forced,
                       /*batch_igemm=*/std::nullopt,
                       /*batch_wgmma=*/std::nullopt};
  for (const bool wgmma : {true, false}) {
    BatchIgemmPlan unused;
    if (batch_igemm_check(able, unused, wgmma).empty())
      return std::string("as ") + (wgmma ? kKernelBatchWgmma : kKernelBatchIgemm) + ": " +
             batch_declined(in, wgmma, nullptr);
  }
  return "";
}

std::string rule_batch_igemm(const PlanInput& in, ConvPlan& plan) {
  return batch_declined(in, false, &plan.batch);
}

std::string rule_batch_wgmma(const PlanInput& in, ConvPlan& plan) {
  return batch_declined(in, true, &plan.batch);
}

// ---- batch-wgmma's wgrad (sm_90a) ---------------------------------------------------------------

// K is cut into slices for about kBatchWgradCtas CTAs (four waves of two CTAs per SM on a
// 132-SM H100 or H200), each at least kBatchWgradMinSteps steps long: a shorter slice would
// write a partial tile about as large as the inputs it reads. The count depends on the shape
// alone, so the bits (the slices' sum order) do not depend on the GPU.
constexpr int64_t kBatchWgradCtas = 512;
constexpr int64_t kBatchWgradMinSteps = 16;
constexpr int64_t kBatchWgradGemmMinCin = 256;
constexpr int64_t kBatchWgradBigGemm = 4096;  // columns and positions of a "big" wgrad GEMM
constexpr int64_t kBatchWgradMmaMaxCin = 32;

std::string rule_wgrad_mma_sync(const PlanInput& in, ConvPlan& plan);

// Few channels per group (narrow_call's channel test, without its group test).
bool few_channels(const ConvGeometry& g) {
  return std::min(g.in_channels_per_group(), g.out_channels_per_group()) <= kNarrowChannels;
}

// A wgrad at "highest" narrow through C_out/groups alone (groups 1, more than kNarrowChannels
// input channels: RGB and mono outputs) stays here, unless a preference below sends it on: its
// rows are the input channels, which fill the tile, and its 3xTF32 multiplies measured faster
// than the direct and thin kernels on the suite's three such layers (docs/performance.md,
// "Runs 112 and 115").
bool narrow_wgrad_on_wgmma(const PlanInput& in) {
  const ConvGeometry& g = in.g;
  return g.precision == Precision::highest && g.groups == 1 && g.in_channels > kNarrowChannels;
}

std::string rule_wgrad_batch_wgmma(const PlanInput& in, ConvPlan& plan) {
  if (in.dtype != DType::float32)
    return std::string(dtype_name(in.dtype)) + ": the tensor-core kernels are float32 only";
  if (std::string no = batch_wgmma_declined(in); !no.empty()) return no;
  // Calls narrow through their groups alone (more than kNarrowChannels channels each side) stay
  // here: one GEMM per group in the grid measured faster than the direct kernel (groups 4 of
  // 32 -> 16 channels; docs/performance.md).
  if (std::string narrow = direct_first(in);
      !narrow.empty() && few_channels(in.g) && !narrow_wgrad_on_wgmma(in))
    return narrow;
  const ConvGeometry& g = in.g;
  // Sizes inside a plane, channel counts and taps are 32-bit in the kernel; offsets are int64.
  if (!fits_plane32(g)) return "a spatial size or plane past the kernel's 32-bit plane arithmetic";
  constexpr int64_t kIntMax = 2147483647;
  const int64_t cig = g.in_channels_per_group();
  const int64_t cols = g.out_channels_per_group() * g.kernel[0] * g.kernel[1];
  if (g.in_channels > kIntMax / 2 || g.out_channels > kIntMax / 2 || cols > kIntMax / 2)
    return "more than 2^30 channels or (C_out/groups) x taps columns";
  BatchWgradPlan& p = plan.batch_wgrad;
  p.groups = g.groups;
  // 3xTF32's tiles hold 64 columns a warpgroup: 128 x 64, or 64 x 128 where a group's rows fit
  // 64 (a 128-row tile would be half padding).
  p.split = g.precision == Precision::highest;
  p.bm = p.split && cig <= 64 ? 64 : kBatchWgradBM;
  p.bn = p.split && cig > 64 ? 64 : kBatchWgradBN;
  p.m_tiles = ceil_div(cig, p.bm);
  p.n_tiles = ceil_div(cols, p.bn);
  p.steps = ceil_div(g.batch * g.in_size[0] * g.in_size[1], kBatchWgradBK);
  const int64_t tiles = p.m_tiles * p.n_tiles * p.groups;
  const int64_t most = std::max<int64_t>(1, p.steps / kBatchWgradMinSteps);
  const int64_t splits = std::clamp<int64_t>(ceil_div(kBatchWgradCtas, tiles), 1, most);
  p.steps_per_split = ceil_div(p.steps, splits);
  p.splits = ceil_div(p.steps, p.steps_per_split);
  if (tiles * p.splits > kIntMax)
    return std::to_string(tiles * p.splits) + " CTAs: more than the grid's 2^31 - 1";
  p.smem_bytes = batch_wgrad_smem_bytes(p.bm, p.bn, p.split);
  if (p.smem_bytes > in.caps.smem_per_block_optin)
    return std::to_string(p.smem_bytes) + " bytes of shared memory a CTA, more than the device's " +
           std::to_string(in.caps.smem_per_block_optin);
  if (!in.prefer) return "";
  // The preferences below are measured: every suite layer's and S1-S5's wgrad at "high" forced to
  // each kernel (docs/performance.md, run 68). This kernel's dy gathers are bound by L1, so
  // where another kernel reuses what it loads better, that kernel is faster:
  // - C_in/groups >= kBatchWgradGemmMinCin: the GEMM path's cuBLAS GEMM (M = C_in) earns back its
  //   column buffer (DCGAN 512 -> 256, U-Net 1024 -> 512 and 512 -> 256, EnCodec x8, HiFi-GAN
  //   V1 x8, DeconvNet deconv5); since its im2col stopped dividing per element, from 256 too
  //   (every such suite layer faster there), while at 128 and under this kernel kept most
  //   (docs/performance.md, "Runs 223-224");
  // - a grid under a quarter of the SMs (a short K in few tiles: HiFi-GAN V3's first x8) leaves
  //   most of the GPU idle, while the GEMM path's GEMM spans it;
  // - C_in/groups <= 32, or <= 64 with stride 1: the split-K mma.sync kernel's 32-row warp tiles
  //   fit the few rows (at least half of these 128-row tiles would be empty), and at stride 1 it
  //   stages one dy window for every tap (S1, S2, S4, S5: 1.5x-2.9x faster there).
  // At "highest" (3xTF32: three wgmmas for each gathered value) the extra multiplies hide the
  // gathers, and the 3xTF32 tiles are 64 rows where a group's rows fit 64, so two of the rules
  // change (every kernel timed: docs/performance.md, "Runs 112 and 115"):
  // - C_in/groups >= 512 stays here: the GEMM path's cuBLAS GEMM is float32 FMA at "highest",
  //   and this kernel was the faster on most such layers, but for the largest GEMMs (below);
  // - C_in/groups in (32, 64] at stride 1 stays here too (a 64-row tile is full); at 32 and
  //   under the split-K kernel keeps its lead.
  // - at "highest", a GEMM of at least kBatchWgradGemmMinCin rows with both
  //   kBatchWgradBigGemm columns (C_out/groups x taps) and positions goes to the GEMM path: there
  //   cuBLAS's float32 GEMM ran near its peak while this kernel's 3xTF32 stayed well under it
  //   (EnCodec x8 and DeconvNet deconv5, forced and in benchmark mode); with fewer positions
  //   (DCGAN 512 -> 256) or columns (U-Net 1024 -> 512) this kernel was as fast or faster
  //   (docs/performance.md, "Runs 294-297").
  const bool gemm_ok = gemm_path_declined(in.pass, g, g.precision, in.dtype).empty();
  if (cig >= kBatchWgradGemmMinCin && gemm_ok && !p.split)
    return "C_in/groups=" + std::to_string(cig) + " >= " + std::to_string(kBatchWgradGemmMinCin) +
           ": the GEMM path's cuBLAS GEMM earns back its column buffer";
  const int64_t positions = g.batch * g.in_size[0] * g.in_size[1];
  if (p.split && gemm_ok && cig >= kBatchWgradGemmMinCin && cols >= kBatchWgradBigGemm &&
      positions >= kBatchWgradBigGemm)
    return "a " + std::to_string(cig) + " x " + std::to_string(cols) + " x " +
           std::to_string(positions) + " GEMM at \"highest\": the GEMM path's float32 GEMM runs " +
           "near its peak";
  const int64_t ctas = tiles * p.splits;
  if (4 * ctas < in.caps.sm_count && gemm_ok)
    return std::to_string(ctas) + " CTAs for " + std::to_string(in.caps.sm_count) +
           " SMs (under a quarter): the GEMM path spans batch x positions";
  const bool stride1 = g.stride[0] == 1 && g.stride[1] == 1;
  if (cig <= kBatchWgradMmaMaxCin || (!p.split && cig <= 2 * kBatchWgradMmaMaxCin && stride1)) {
    ConvPlan scratch;
    if (rule_wgrad_mma_sync(in, scratch).empty())
      return "C_in/groups=" + std::to_string(cig) + (stride1 ? " at stride 1" : "") +
             ": the split-K mma.sync kernel's 32-row tiles fit it";
  }
  return "";
}

// ---- wgrad's split-K tensor-core GEMM ---------------------------------------------------------

// The GEMM path ahead of the split-K kernel where it measured faster at both precisions (every
// suite layer's wgrad forced to each; the numbers are in docs/performance.md, "Run 52"):
// - C_in >= kWgradGemmMinCin: each float of the GEMM path's column buffer feeds 2 * C_in FLOPs of
//   cuBLAS's GEMM, which runs several times the split-K kernel's rate; from 256 input channels
//   that outweighs writing and reading the buffer. Below, the split-K kernel was as fast or
//   faster.
// - fewer than kWgradMinSegsPerSplit segments a split: each CTA then streams too few segments for
//   its copies to overlap its multiplies, and its partial tile weighs as much as its inputs.
// Empty when the split-K kernel keeps the call.
constexpr int64_t kWgradGemmMinCin = 256;
constexpr int64_t kWgradMinSegsPerSplit = 4;

std::string wgrad_gemm_first(const PlanInput& in, const WgradPlan& s) {
  if (!in.prefer) return "";
  if (!gemm_path_declined(in.pass, in.g, in.g.precision, in.dtype).empty()) return "";
  if (in.g.in_channels >= kWgradGemmMinCin)
    return "C_in=" + std::to_string(in.g.in_channels) + " >= " + std::to_string(kWgradGemmMinCin) +
           ": the GEMM path's cuBLAS GEMM earns back its column buffer";
  if (s.segs_per_split < kWgradMinSegsPerSplit)
    return std::to_string(s.segs_per_split) + " segment(s) of " + std::to_string(kWgradSegment) +
           " positions a split (below " + std::to_string(kWgradMinSegsPerSplit) +
           "): too short to pipeline, the GEMM path";
  return "";
}

std::string rule_wgrad_mma_sync(const PlanInput& in, ConvPlan& plan) {
  std::string why = tensor_core_reason(in);
  if (!why.empty()) return why;
  if (std::string narrow = direct_first(in); !narrow.empty()) return narrow;
  const ConvGeometry& g = in.g;
  // Each step reduces kWgradSegment consecutive positions of one input row into 32 x 32 warp
  // tiles of (C_in, C_out): short rows and narrow channel counts leave them mostly empty.
  const auto fill = [](int64_t n, int64_t tile) {
    return static_cast<double>(n) / static_cast<double>((n + tile - 1) / tile * tile);
  };
  const double use = fill(g.in_size[1], kWgradSegment) * fill(g.in_channels, kWgradWarpM) *
                     fill(g.out_channels, kWgradWarpN);
  if (std::string low = low_use_reason(in, use, "the split-K tiles"); !low.empty()) return low;
  const WgradShape shape{g.batch,      g.in_channels, g.out_channels, g.in_size[0],
                         g.in_size[1], g.out_size[0], g.out_size[1],  g.kernel[0],
                         g.kernel[1],  g.stride[1],   g.dilation[1]};
  const WgradDeviceLimits dev{in.caps.smem_per_block_optin, in.caps.smem_per_sm,
                              in.caps.regs_per_sm,          in.caps.wgrad_regs_tf32,
                              in.caps.wgrad_regs_x3tf32,    in.caps.wgrad_regs_x3tf32_7warps};
  if (const char* no = wgrad_plan_tiles(shape, g.precision == Precision::highest, dev, plan.wgrad))
    return no;
  return wgrad_gemm_first(in, plan.wgrad.plan);
}

// ---- Depthwise direct kernels and the GEMM path (conv_path_rules.h) ---------------------------

// A small depthwise forward whose thin cells read 2 x 2 inputs (2-D, both axes' taps over two
// inputs a phase: k4 s2, k3 s2) gives way to the thin kernel, whose four-input cells load a
// channel's inputs together and write the sH x sW outputs that share them. On cells of other
// shapes (k2 s2: one input a cell; 3x3 s1: nine; 1-D k16 s8: two) the depthwise kernel was the
// faster. Since the depthwise forward works out a position's taps once and walks planes, it is
// as fast or faster on large layers too; only where the output is small (its grid then runs one
// plane a thread, sharing no tap setup across planes) did the thin kernel keep its lead. Both
// measured with every kernel timed: docs/performance.md, "Runs 284-287" and run 102's section.
constexpr int64_t kThinDepthwiseMaxOutputs = int64_t{1} << 20;

bool thin_depthwise_forward(const PlanInput& in) {
  if (!in.prefer || in.pass != ConvPass::forward) return false;
  if (in.g.y_numel() >= kThinDepthwiseMaxOutputs) return false;
  ThinPlan t;
  if (!thin_path_declined(in.pass, in.g, in.dtype, &t).empty()) return false;
  return t.th == 2 && t.tw == 2 && thin_use(in.g, t) >= kThinMinUse;
}

std::string rule_depthwise(const PlanInput& in, ConvPlan& /*plan*/) {
  if (std::string no = depthwise_path_declined(in.pass, in.g, in.dtype); !no.empty()) return no;
  if (!in.forced && thin_depthwise_forward(in))
    return "a forward under " + std::to_string(kThinDepthwiseMaxOutputs) +
           " outputs whose cells read 2 x 2 inputs: the thin kernel's";
  return "";
}

// The direct kernels run narrow calls (narrow_call), and any call they can when forced; the
// others are left to the GEMM path, whose GEMMs fill their tiles there.
// A forward where under a quarter of the taps land in x (a small input under a wide kernel:
// DCGAN's 1x1 latent under 4x4 lands one tap in 16) with short sums over those: the direct kernel
// visits only those, while the GEMM kernels multiply the zero fill or scatter a column buffer
// (the direct kernel measured faster than the GEMM path there, docs/performance.md run 54).
constexpr double kSparseTapUse = 0.25;  // under a quarter of the taps land

bool sparse_forward(const PlanInput& in) {
  if (in.pass != ConvPass::forward) return false;
  const double use = gathered_tap_use(in.g, true);
  return use < kSparseTapUse &&
         static_cast<double>(in.g.in_channels_per_group() * forward_taps_per_phase(in.g)) * use <=
             static_cast<double>(kDirectFwdMaxSum);
}

std::string rule_direct(const PlanInput& in, ConvPlan& plan) {
  if (std::string no = direct_path_declined(in.pass, in.g, in.dtype, &plan.direct); !no.empty())
    return no;
  if (std::string gemm = gemm_first(in); !gemm.empty()) return gemm;
  if (!in.forced && !narrow_call(in.pass, in.g, in.dtype) && !(in.prefer && sparse_forward(in)))
    return "C_in/groups=" + std::to_string(in.g.in_channels_per_group()) +
           ", C_out/groups=" + std::to_string(in.g.out_channels_per_group()) +
           (in.pass == ConvPass::forward
                ? " with " + std::to_string(in.g.kernel[0] * in.g.kernel[1]) + " taps"
                : std::string()) +
           ": not few channels per group, or (forward) sums too long for one thread, or (wgrad at "
           "\"high\") columns enough for the GEMM path's TF32";
  return "";
}

// The thin kernels run thin outputs (thin_call) while the preferences are on, and any call they
// can when forced. They were written for the RGB and mono layers that end decoders, where the
// direct kernels read x once per output tap (forward) or dy once per channel block (dgrad,
// wgrad) and the GEMM path's tiles are mostly padding.
std::string rule_thin(const PlanInput& in, ConvPlan& plan) {
  if (std::string no = thin_path_declined(in.pass, in.g, in.dtype, &plan.thin); !no.empty())
    return no;
  if (in.forced) return "";
  if (!in.prefer) return "preferences off: the thin kernels run when forced";
  if (std::string gemm = gemm_first(in); !gemm.empty()) return gemm;
  if (in.pass == ConvPass::forward && thin_use(in.g, plan.thin) < kThinMinUse) {
    std::ostringstream os;
    os.precision(2);
    os << "a cell's multiplies are " << thin_use(in.g, plan.thin)
       << " useful (zero slots or dilated gaps), under " << kThinMinUse;
    return os.str();
  }
  if (in.pass == ConvPass::wgrad) return thin_wgrad_declined(in.g);
  return "";
}

std::string rule_gemm(const PlanInput& in, ConvPlan& /*plan*/) {
  return gemm_path_declined(in.pass, in.g, in.g.precision, in.dtype);
}

// ---- The general kernels (every dtype, groups, geometry) ---------------------------------------

std::string rule_fma(const PlanInput& in, ConvPlan& plan) {
  if (in.pass != ConvPass::wgrad) return "";
  // wgrad: each (weight tile of 4 C_out, chunk of positions) block meets in a shared-memory tree;
  // chunking depends on the shape only, so the bits do not depend on the GPU model.
  constexpr int64_t kTileCo = 4, kMinChunk = 4096, kTargetBlocks = 8192;
  const ConvGeometry& g = in.g;
  const int64_t r_total = g.batch * g.in_size[0] * g.in_size[1];
  if (r_total == 0) return "";  // nothing to sum: the launcher writes zeros
  const int64_t tiles =
      g.in_channels * ceil_div(g.out_channels_per_group(), kTileCo) * g.kernel[0] * g.kernel[1];
  int64_t chunks =
      std::max<int64_t>(1, std::min(ceil_div(r_total, kMinChunk), ceil_div(kTargetBlocks, tiles)));
  plan.fma_chunk_len = ceil_div(r_total, chunks);
  plan.fma_chunks = ceil_div(r_total, plan.fma_chunk_len);
  return "";
}

}  // namespace

// The cost model of batch_wgmma_k_slices, in K steps of one CTA: waves of CTAs (two per SM),
// each CTA its slice's steps plus kSliceFixedSteps (the pipeline's fill and the epilogue) and,
// sliced, kSlicePartialSteps (its partial's write, and the last slice's reads of them). A slice
// keeps at least kMinSliceSteps steps, and slicing must cut the cost to kSliceGain of the
// unsliced grid's: the model is coarse, and a near tie is not worth the partials' traffic.
constexpr int64_t kSliceFixedSteps = 4, kSlicePartialSteps = 3, kMinSliceSteps = 2;
constexpr double kSliceGain = 0.85;

int64_t batch_wgmma_k_slices(int64_t ctas, int64_t steps, int64_t sm_count) {
  if (ctas <= 0 || sm_count <= 0 || steps < 2 * kMinSliceSteps) return 1;
  const int64_t slots = 2 * sm_count;
  const auto cost = [&](int64_t s) {
    return ceil_div(ctas * s, slots) *
           (ceil_div(steps, s) + kSliceFixedSteps + (s > 1 ? kSlicePartialSteps : 0));
  };
  int64_t best = 1;
  for (int64_t s = 2; s <= kMaxKSlices && steps / s >= kMinSliceSteps; ++s)
    if (cost(s) < cost(best)) best = s;
  return static_cast<double>(cost(best)) <= kSliceGain * static_cast<double>(cost(1)) ? best : 1;
}

std::string batch_wgmma_tma_check(const ConvGeometry& g, bool forward, BatchIgemmPlan& plan) {
  const char* const axis_name[2] = {"H", "W"};
  const int phases[2] = {plan.phases_h, plan.phases_w};
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  for (int a = 0; a < 2; ++a) {
    const auto u = static_cast<size_t>(a);
    const int stride = i(g.stride[u]);
    // dgrad's positions are src columns s apart: the traversal stride, at most 8.
    if (!forward && stride > kTmaMaxTraversalStride)
      return std::string("stride ") + std::to_string(stride) + " along " + axis_name[a] +
             ": past TMA's traversal stride of " + std::to_string(kTmaMaxTraversalStride);
    const int src = i(forward ? g.in_size[u] : g.out_size[u]);
    const int out = i(forward ? g.out_size[u] : g.in_size[u]);
    // One map serves every phase: the phases that read src must have as many positions (the
    // traversal wraps after them), and the box starts at the lowest src offset of any tap.
    int q = -1, lower = 0, reach = 0;
    for (int r = 0; r < phases[a]; ++r) {
      int sb[kBatchIgemmMaxTaps] = {};
      const BatchIgemmAxis ax =
          batch_igemm_axis(forward, out, i(g.kernel[u]), stride, i(g.padding[u]), i(g.dilation[u]),
                           r, nullptr, sb, kBatchIgemmMaxTaps);
      if (ax.taps == 0) continue;  // a phase of bias alone loads nothing
      if (ax.taps > kBatchIgemmMaxTaps)
        return std::to_string(ax.taps) + " taps along " + axis_name[a] + ", more than " +
               std::to_string(kBatchIgemmMaxTaps);
      if (q >= 0 && ax.q != q)
        return std::string("phases of ") + std::to_string(q) + " and " + std::to_string(ax.q) +
               " positions along " + axis_name[a] + ": one im2col traversal serves them all";
      if (q < 0) lower = sb[0], reach = sb[0];
      q = ax.q;
      for (int t = 0; t < ax.taps; ++t)
        lower = std::min(lower, sb[t]), reach = std::max(reach, sb[t]);
    }
    if (q < 0) return "no phase reads src";
    // The traversal covers [lower, src + upper) in steps of ss (1 forward, s in dgrad): q
    // positions when src + upper - lower = (q - 1)*ss + 1.
    const int ss = forward ? 1 : stride;
    const int64_t upper = int64_t{q - 1} * ss + 1 - src + lower;
    if (lower < kTmaMinCorner || upper < kTmaMinCorner || lower > kTmaMaxCorner ||
        upper > kTmaMaxCorner)
      return std::string("im2col corners ") + std::to_string(lower) + ", " + std::to_string(upper) +
             " along " + axis_name[a] + ": past a 4-D map's [" + std::to_string(kTmaMinCorner) +
             ", " + std::to_string(kTmaMaxCorner) + "]";
    if (reach - lower > kTmaMaxOffset)
      return std::string("filter offsets up to ") + std::to_string(reach - lower) + " along " +
             axis_name[a] + ": past 16 bits";
    plan.tma_lower[a] = lower, plan.tma_upper[a] = static_cast<int>(upper);
  }
  // The map's coordinates are 32-bit and its byte strides under 2^40.
  const int64_t channels = g.groups * plan.c_pad;
  const int64_t sample_bytes =
      channels * 4 * (forward ? g.in_size[0] * g.in_size[1] : g.out_size[0] * g.out_size[1]);
  if (g.batch > kTmaMaxCoordinate || channels > kTmaMaxCoordinate ||
      sample_bytes >= (int64_t{1} << 40))
    return "a channels-last src past TMA's 32-bit coordinates or 40-bit strides";
  return "";
}

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return "fwd";
    case ConvPass::dgrad:
      return "dgrad";
    case ConvPass::wgrad:
      return "wgrad";
  }
  return "?";
}

DeviceCaps DeviceCaps::h100() {
  DeviceCaps c;
  c.sm_major = 9, c.sm_minor = 0, c.sm_count = 132;
  c.smem_per_block_optin = 227 * 1024;
  c.smem_per_sm = 228 * 1024;
  c.regs_per_sm = 65536;
  c.wgmma_compiled = true;
  // ptxas -v (CUDA 13.0, sm_90) on wgrad_tc_kernel<false, 2>, <true, 1>, <true, 2, 224>.
  c.wgrad_regs_tf32 = 80, c.wgrad_regs_x3tf32 = 168, c.wgrad_regs_x3tf32_7warps = 128;
  return c;
}

// Rows are tried in this order, per pass. Adding a kernel: its rule above (filling whatever
// configuration fields it adds to ConvPlan), one row here, and one branch in the launcher of each
// pass it serves (conv_transpose_{fwd,dgrad,wgrad}.cu), which throws for a name it lacks.
const std::vector<Candidate>& conv_candidates() {
  static const std::vector<Candidate> table = {
      {kKernelWgmma, ConvPass::forward, rule_wgmma},
      {kKernelMmaSync, ConvPass::forward, rule_mma_sync},
      {kKernelBatchWgmma, ConvPass::forward, rule_batch_wgmma},
      {kKernelBatchIgemm, ConvPass::forward, rule_batch_igemm},
      {kKernelDepthwise, ConvPass::forward, rule_depthwise},
      {kKernelThin, ConvPass::forward, rule_thin},
      {kKernelDirect, ConvPass::forward, rule_direct},
      {kKernelGemm, ConvPass::forward, rule_gemm},
      {kKernelFma, ConvPass::forward, rule_fma},
      {kKernelWgmma, ConvPass::dgrad, rule_wgmma},
      {kKernelMmaSync, ConvPass::dgrad, rule_mma_sync},
      {kKernelBatchWgmma, ConvPass::dgrad, rule_batch_wgmma},
      {kKernelBatchIgemm, ConvPass::dgrad, rule_batch_igemm},
      {kKernelDepthwise, ConvPass::dgrad, rule_depthwise},
      {kKernelThin, ConvPass::dgrad, rule_thin},
      {kKernelDirect, ConvPass::dgrad, rule_direct},
      {kKernelGemm, ConvPass::dgrad, rule_gemm},
      {kKernelFma, ConvPass::dgrad, rule_fma},
      {kKernelBatchWgmma, ConvPass::wgrad, rule_wgrad_batch_wgmma},
      {kKernelMmaSync, ConvPass::wgrad, rule_wgrad_mma_sync},
      {kKernelDepthwise, ConvPass::wgrad, rule_depthwise},
      {kKernelThin, ConvPass::wgrad, rule_thin},
      {kKernelDirect, ConvPass::wgrad, rule_direct},
      {kKernelGemm, ConvPass::wgrad, rule_gemm},
      {kKernelFma, ConvPass::wgrad, rule_fma},
  };
  return table;
}

ConvPlan plan_conv(ConvPass pass, const ConvGeometry& g, DType dtype, const DeviceCaps& caps,
                   const std::string& forced, bool prefer) {
  // A forced kernel runs wherever it can: preferences do not decline it.
  const PlanInput in{
      pass, g, dtype, caps, prefer && forced.empty(), !forced.empty(), std::nullopt, std::nullopt};
  ConvPlan plan;
  plan.pass = pass;
  // str() names the precision when it is "high"; float32's default is named here too.
  plan.geometry = g.str() + " " + dtype_name(dtype);
  if (dtype == DType::float32 && g.precision == Precision::highest)
    plan.geometry += " precision=highest";
  std::string names;
  for (const Candidate& c : conv_candidates()) {
    if (c.pass != pass) continue;
    names += (names.empty() ? "" : ", ") + std::string(c.kernel);
    if (!forced.empty() && forced != c.kernel) {
      plan.declined.push_back({c.kernel, "not the forced kernel '" + forced + "'"});
      continue;
    }
    ConvPlan attempt = plan;
    const std::string why = c.rule(in, attempt);
    if (why.empty()) {
      attempt.kernel = c.kernel;
      return attempt;
    }
    TGRAD_CHECK(forced.empty(), "conv_transpose ", conv_pass_name(pass), ": the forced kernel '",
                forced, "' cannot run ", plan.geometry, ": ", why);
    plan.declined.push_back({c.kernel, why});
  }
  TGRAD_FAIL("conv_transpose ", conv_pass_name(pass), ": no kernel '", forced, "' for this pass (",
             names, ")");
}

std::string ConvPlan::label() const {
  if (kernel == kKernelWgmma) {
    std::string s = "wgmma";
    if (igemm.fill) s += ", fill";
    if (!tile.split && wgmma_max_taps == 0) s += ", 2 taps in flight";
    if (igemm.fold_m > 0) s += ", row fold";
    return s;
  }
  if (pass == ConvPass::wgrad) return "wgrad (" + kernel + ")";
  if (kernel == kKernelMmaSync && igemm.fill) return "mma.sync, fill";
  return kernel;
}

std::string ConvPlan::describe() const {
  std::ostringstream os;
  os << "tgrad conv " << conv_pass_name(pass) << ": " << geometry << " -> " << label();
  const IgemmProblem& p = igemm;
  if (kernel == kKernelWgmma || (kernel == kKernelMmaSync && pass != ConvPass::wgrad)) {
    os << " [tile " << tile_name(tile) << (tile.split ? " 3xTF32" : " 1xTF32") << ", "
       << tile.min_blocks << " CTA/SM";
    if (kernel == kKernelWgmma) {
      os << ", "
         << (tile.split            ? std::string("one tap's chain at a time")
             : wgmma_max_taps == 0 ? std::string("2 taps in flight")
                                   : "taps<=" + std::to_string(wgmma_max_taps));
      if (tile.a_smem_taps > 0) os << ", weights in shared memory";
    }
    os << ", raw stages " << p.raw_stages << ", smem " << p.smem_bytes << " B, grid "
       << igemm_ctas(p) << "]";
  } else if (kernel == kKernelBatchWgmma && pass == ConvPass::wgrad) {
    const BatchWgradPlan& b = batch_wgrad;
    os << " [tile " << b.bm << "x" << b.bn << "/" << kBatchWgradBK << " positions"
       << (b.split ? " 3xTF32, " : " 1xTF32, ") << b.splits << " K slices of " << b.steps_per_split
       << " steps, smem " << b.smem_bytes << " B, grid "
       << b.n_tiles * b.m_tiles * b.groups * b.splits
       << (b.groups > 1 ? ", " + std::to_string(b.groups) + " groups" : std::string()) << "]";
  } else if (kernel == kKernelBatchIgemm || kernel == kKernelBatchWgmma) {
    const BatchIgemmPlan& b = batch;
    os << " [tile " << b.bm << "x" << b.bn << "/" << kBatchIgemmChunk << "ch"
       << (b.split ? " 3xTF32" : " 1xTF32") << (b.channels_last ? ", channels-last B" : "") << ", "
       << b.phases_h * b.phases_w << " phases, taps<=" << b.max_taps << ", smem " << b.smem_bytes
       << " B, grid " << b.n_tiles * b.phases_h * b.phases_w << "x" << b.m_tiles << "x" << b.groups
       << (b.groups > 1 ? ", " + std::to_string(b.groups) + " groups" : std::string())
       << (b.tma ? ", copies by TMA" : "")
       << (b.k_slices > 1 ? ", " + std::to_string(b.k_slices) + " K slices" : std::string()) << "]";
  } else if (kernel == kKernelMmaSync) {
    const WgradPlan& s = wgrad.plan;
    os << " [" << s.warps_m * kWgradWarpM << "x" << s.warps_n * kWgradWarpN << "x" << s.taps_per_cta
       << " taps, " << wgrad.threads << " threads, raw stages " << s.raw_stages << ", smem "
       << wgrad.smem_bytes << " B, splits " << s.splits << "]";
  } else if (kernel == kKernelDirect) {
    const DirectPlan& d = direct;
    if (pass == ConvPass::wgrad) {
      os << " [" << d.reg << " channels x " << d.cols << " columns a thread, " << d.chunks
         << " chunks of " << d.chunk_len << ", grid " << d.grid_x << "]";
    } else {
      os << " [" << d.reg << (pass == ConvPass::forward ? " output" : " input")
         << " channels a thread, " << d.stage << " channels a stage, smem " << d.smem_bytes
         << " B, grid " << d.grid_x << "x" << d.grid_y;
      if (pass == ConvPass::forward) os << ", " << d.warps << " warps";
      os << "]";
    }
  } else if (kernel == kKernelThin) {
    const ThinPlan& t = thin;
    os << " [";
    if (pass == ConvPass::forward) {
      os << t.used << " of " << t.block << " outputs a cell, " << t.th << "x" << t.tw
         << " inputs a cell, ";
    } else {
      os << "window " << t.used << " of " << t.block << ", ";
    }
    if (pass == ConvPass::wgrad) {
      os << t.splits << " chunks of " << t.split_len << " positions";
    } else {
      os << t.splits << " splits of " << t.split_len << " channels, smem " << t.smem_bytes << " B";
    }
    os << ", grid " << t.grid_x << "x" << t.grid_y << "]";
  } else if (kernel == kKernelFma && pass == ConvPass::wgrad) {
    os << " [" << fma_chunks << " chunks of " << fma_chunk_len << "]";
  }
  os << "; declined:";
  if (declined.empty()) os << " none";
  for (size_t i = 0; i < declined.size(); ++i)
    os << (i ? "; " : " ") << declined[i].kernel << " (" << declined[i].reason << ")";
  if (!timed.empty()) {
    os << "; benchmarked, fastest kept:";
    os.precision(3);
    for (size_t i = 0; i < timed.size(); ++i)
      os << (i ? ", " : " ") << timed[i].first << " " << std::fixed << timed[i].second << " ms";
  }
  return os.str();
}

}  // namespace tgrad::cuda
