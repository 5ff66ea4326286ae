// The CUDA conv fast paths (tensor-core implicit GEMM for forward/dgrad, split-K tensor-core
// GEMM for wgrad) against the float64 result of the same pass on the GPU (the general kernels,
// which test_conv_sweep checks against the CPU), at both float32 precisions, on shapes that hit
// every edge of the tiling: partial tiles, odd lengths, channel counts that are not multiples of
// 8/16, stride 2/3 with dilation and padding, 2-D, batch 1, groups (the general path), and bit
// determinism.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/random.h"
#include "core/tensor.h"
#include "cuda/conv_plan.h"
#include "cuda/kernel_stats.h"
#include "tests/conv_cases.h"
#include "tests/reference/conv_transpose_reference.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

// These tests exercise the tensor-core kernels on shapes built around their tiles, many too
// small to be worth them: the planner's speed preferences (tiles mostly empty -> GEMM path)
// are off while a case runs, so the kernels under test are the ones planned.
struct PreferencesOff {
  PreferencesOff() { cuda::set_conv_preferences(false); }
  ~PreferencesOff() { cuda::set_conv_preferences(true); }
  PreferencesOff(const PreferencesOff&) = delete;
  PreferencesOff& operator=(const PreferencesOff&) = delete;
};

using testing::tensors_close;
using testing::Tolerance;

// "highest" is 3xTF32 with float32 accumulation: float32-level error, a few 1e-7 in relative
// L2 on these reductions (K up to a few thousand terms; wgrad sums up to ~1e4 positions).
constexpr Tolerance kHighest{0.0, 0.0, 2e-6};
// "high" is 1xTF32 (10-bit mantissa): about 3e-4 in relative L2; 2e-3 catches wrong results.
constexpr Tolerance kHigh{0.0, 0.0, 2e-3};

// Spatial arrays are (H, W) in every case; a 1-D case uses W only (and H = 1 entries).
struct Case {
  const char* what;
  int dims;
  int64_t n, c_in, c_out, groups;
  std::array<int64_t, 2> in, kernel, stride, padding, dilation, output_padding;
};

// The args' arrays hold the user's axes: (H, W) for 2-D, (W) in entry 0 for 1-D.
std::array<int64_t, 2> user_axes(const Case& c, const std::array<int64_t, 2>& hw) {
  return c.dims == 1 ? std::array<int64_t, 2>{hw[1], hw[0]} : hw;
}

ConvGeometry geometry(const Case& c, Precision precision) {
  ConvTransposeArgs a;
  a.fn = c.dims == 1 ? "conv_transpose1d" : "conv_transpose2d";
  a.spatial_dims = c.dims;
  a.x_shape = {c.n, c.c_in};
  a.w_shape = {c.c_in, c.c_out / c.groups};
  for (int axis = 0; axis < c.dims; ++axis) {
    a.x_shape.push_back(user_axes(c, c.in)[axis]);
    a.w_shape.push_back(user_axes(c, c.kernel)[axis]);
  }
  a.stride = user_axes(c, c.stride);
  a.padding = user_axes(c, c.padding);
  a.dilation = user_axes(c, c.dilation);
  a.output_padding = user_axes(c, c.output_padding);
  a.groups = c.groups;
  ConvGeometry g = make_conv_transpose_geometry(a);
  g.precision = precision;
  return g;
}

Shape x_shape(const ConvGeometry& g) {
  return {g.batch, g.in_channels, g.in_size[0], g.in_size[1]};
}
Shape y_shape(const ConvGeometry& g) {
  return {g.batch, g.out_channels, g.out_size[0], g.out_size[1]};
}
Shape w_shape(const ConvGeometry& g) {
  return {g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]};
}

struct Operands {
  Tensor x, w, b, dy;
};

Operands random_operands(const ConvGeometry& g, uint64_t seed) {
  Generator gen(seed);
  const TensorOptions f32 = TensorOptions().dtype(kFloat32);
  const Device cuda(kCUDA);
  return {randn(x_shape(g), gen, f32).to(cuda), randn(w_shape(g), gen, f32).to(cuda),
          randn({g.out_channels}, gen, f32).to(cuda), randn(y_shape(g), gen, f32).to(cuda)};
}

struct Passes {
  Tensor y, dx, dw;
};

// Runs the three backend passes on operands of any float dtype (y includes the bias).
Passes run_passes(const ConvGeometry& g, const Operands& o) {
  Backend& be = backend(Device(kCUDA));
  const TensorOptions opt = TensorOptions().dtype(o.x.dtype()).device(Device(kCUDA));
  Passes r{empty(y_shape(g), opt), empty(x_shape(g), opt), empty(w_shape(g), opt)};
  be.conv_transpose_forward(g, o.x, o.w, &o.b, r.y);
  be.conv_transpose_dgrad(g, o.dy, o.w, r.dx);
  be.conv_transpose_wgrad(g, o.x, o.dy, r.dw);
  return r;
}

Operands to_float64(const Operands& o) {
  return {o.x.to(kFloat64), o.w.to(kFloat64), o.b.to(kFloat64), o.dy.to(kFloat64)};
}

// Every pass of `c` at both precisions against float64 on the same float32 inputs.
void check_case(const Case& c, uint64_t seed) {
  const PreferencesOff preferences_off;
  const ConvGeometry g64 = geometry(c, Precision::highest);
  const Operands o = random_operands(g64, seed);
  const Passes ref = run_passes(g64, to_float64(o));
  for (Precision precision : {Precision::highest, Precision::high}) {
    const ConvGeometry g = geometry(c, precision);
    const Tolerance tol = precision == Precision::highest ? kHighest : kHigh;
    const std::string config = std::string(c.what) + " " + g.str() +
                               (precision == Precision::highest ? " highest" : " high");
    const Passes out = run_passes(g, o);
    const std::pair<const Tensor*, const Tensor*> pairs[] = {
        {&out.y, &ref.y}, {&out.dx, &ref.dx}, {&out.dw, &ref.dw}};
    const char* const names[] = {" forward", " dgrad", " wgrad"};
    for (int i = 0; i < 3; ++i) {
      const testing::CompareResult r =
          testing::compare(*pairs[i].first, *pairs[i].second, tol, config + names[i]);
      EXPECT_TRUE(r.ok) << r.report;
      // The general kernels multiply in float32 FMA (error ~1e-7): a "high" error this small
      // means a planner declined the tensor-core path and the case tested the general kernel.
      if (precision == Precision::high && c.groups == 1) {
        EXPECT_GT(r.rel_l2, 1e-5) << config << names[i] << ": fast path not taken?";
      }
    }
  }
}

// Sizes are chosen against the tiles: forward/dgrad tile M (channels out of the GEMM) by 128,
// 64 or 32 (chosen by M), positions by 128 or 256, channels of K by 32, 16 or 8; wgrad tiles
// (C_in, C_out) by 64 or 32 each, positions by 64, and kW taps in groups of at most 12, 6 or 3
// (one warp per 32x32 tile and tap, 12 warps at most).
TEST(CudaFastPaths, OneDimStrideOne) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {
      // M = 96 > 64 (128-row tile, partial); K channels 72 (not a multiple of 16); L = 301 odd.
      {"big tile", 1, 2, 72, 96, 1, {1, 301}, {1, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}},
      // M = 40 (64-row tile), C_in = 20, k 5 dilation 3 (wide halo), L = 517.
      {"mid tile", 1, 2, 20, 40, 1, {1, 517}, {1, 5}, {1, 1}, {0, 0}, {1, 3}, {0, 0}},
      // M <= 32 (32-row tile), 7 and 13 channels, padding wider than the kernel reach.
      {"small tile", 1, 3, 7, 13, 1, {1, 1000}, {1, 3}, {1, 1}, {0, 2}, {1, 1}, {0, 0}},
      // S3-like channel counts, several position tiles, batch 1.
      {"S3-like batch 1", 1, 1, 128, 128, 1, {1, 700}, {1, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}},
      // wgrad tap groups: 64x64 tiles take 3 taps per CTA, so k 7 is groups of 3, 3 and 1.
      {"tap groups", 1, 2, 40, 40, 1, {1, 300}, {1, 7}, {1, 1}, {0, 3}, {1, 1}, {0, 0}},
      // wgrad with k 13 on 32x32 tiles: two groups of 7 taps, the second one warp short.
      {"13 taps", 1, 2, 8, 8, 1, {1, 260}, {1, 13}, {1, 1}, {0, 5}, {1, 1}, {0, 0}},
      // A length shorter than the kernel's reach and one position.
      {"tiny length", 1, 2, 9, 17, 1, {1, 1}, {1, 4}, {1, 1}, {0, 1}, {1, 2}, {0, 0}},
      // Dilation 120: a 609-column window, too wide for 32 channels per step in shared
      // memory, so the planner falls back to 16 channels and fewer raw stages.
      {"wide window", 1, 1, 16, 80, 1, {1, 700}, {1, 5}, {1, 1}, {0, 0}, {1, 120}, {0, 0}},
  };
  uint64_t seed = 100;
  for (const Case& c : cases)
    check_case(c, ++seed);
}

TEST(CudaFastPaths, OneDimStridedDilatedPadded) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {
      // S1's geometry (stride 2, dilation 2, padding 1: the even output columns get no taps, so
      // forward runs one CTA per position tile that also writes their bias).
      {"S1-like", 1, 2, 32, 64, 1, {1, 257}, {1, 3}, {1, 2}, {0, 1}, {1, 2}, {0, 0}},
      // The same with M = 24 (the mma.sync kernel at both precisions on sm_90) and an odd
      // output row (601 columns), so rows start at every 4-byte offset mod 16: each of the
      // 16-byte, 8-byte and 4-byte stores of the filled runs is taken.
      {"S1-like M 24", 1, 3, 16, 24, 1, {1, 300}, {1, 3}, {1, 2}, {0, 1}, {1, 2}, {0, 0}},
      // stride 3, dilation 2, padding 2, output_padding 1: three phases with 1 or 2 taps.
      {"stride 3", 1, 2, 24, 40, 1, {1, 199}, {1, 4}, {1, 3}, {0, 2}, {1, 2}, {0, 1}},
      // stride 2 with no dilation and a large M, 17 channels.
      {"stride 2 big", 1, 1, 17, 130, 1, {1, 333}, {1, 5}, {1, 2}, {0, 3}, {1, 1}, {0, 1}},
      // dgrad stages only every third dy column when dilation is a multiple of the stride;
      // padding 4 puts the first read column at -4, output_padding 2.
      {"dilation 3 stride 3", 1, 2, 20, 36, 1, {1, 211}, {1, 4}, {1, 3}, {0, 4}, {1, 3}, {0, 2}},
  };
  uint64_t seed = 200;
  for (const Case& c : cases)
    check_case(c, ++seed);
}

TEST(CudaFastPaths, TwoDim) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {
      // S5's kernel and padding on a small image (edge rows lose taps; W not a tile multiple).
      {"S5-like", 2, 2, 32, 32, 1, {9, 300}, {3, 7}, {1, 1}, {1, 3}, {1, 1}, {0, 0}},
      // strides (2, 3), dilation (1, 2), odd channels.
      {"2-D strided", 2, 2, 11, 21, 1, {7, 33}, {3, 3}, {2, 3}, {1, 2}, {1, 2}, {1, 0}},
      // M > 64 in 2-D, batch 1.
      {"2-D big M", 2, 1, 16, 80, 1, {5, 70}, {2, 2}, {1, 1}, {0, 0}, {2, 1}, {0, 0}},
      // stride 2 with dilation 2 on both axes: forward skips the rows of other phases,
      // dgrad reads every other dy column; 9 channels (one partial chunk per row).
      {"2-D stride 2 dilation 2", 2, 2, 9, 33, 1, {6, 45}, {3, 5}, {2, 2}, {2, 3}, {2, 2}, {1, 1}},
  };
  uint64_t seed = 300;
  for (const Case& c : cases)
    check_case(c, ++seed);
}

// groups > 1 runs the general kernels; groups == 1 of the same sizes the fast ones: both must
// match float64.
TEST(CudaFastPaths, GroupsUseGeneralPathAndAgree) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_case({"groups 2", 1, 2, 16, 24, 2, {1, 150}, {1, 3}, {1, 2}, {0, 1}, {1, 1}, {0, 0}}, 401);
  check_case({"groups 1", 1, 2, 16, 24, 1, {1, 150}, {1, 3}, {1, 2}, {0, 1}, {1, 1}, {0, 0}}, 402);
}

// A long wgrad reduction (split-K over many CTAs, summed in fixed order).
TEST(CudaFastPaths, LongWgradReduction) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_case({"long K", 1, 4, 64, 64, 1, {1, 20000}, {1, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}}, 501);
}

TEST(CudaFastPaths, Deterministic) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const Case c{"determinism", 1, 3, 48, 136, 1, {1, 4001}, {1, 3}, {1, 2}, {0, 1}, {1, 2}, {0, 0}};
  for (Precision precision : {Precision::highest, Precision::high}) {
    const ConvGeometry g = geometry(c, precision);
    const Operands o = random_operands(g, 601);
    const Passes a = run_passes(g, o);
    const Passes b = run_passes(g, o);
    EXPECT_TRUE(equal(a.y, b.y)) << g.str() << " forward";
    EXPECT_TRUE(equal(a.dx, b.dx)) << g.str() << " dgrad";
    EXPECT_TRUE(equal(a.dw, b.dw)) << g.str() << " wgrad";
  }
}

// ---- the wgmma kernel (sm_90a; 1xTF32 "high", 3xTF32 "highest") -----------------------------
// It shares the mma.sync kernel's decomposition, so the cases above run through it too; these aim
// at what is its own: two warpgroups along M (M > 64) or along N (M <= 64) and their partial
// tiles (M = 20 fills a third of a warpgroup), 16-channel steps with 1 to 3 taps (one
// straight-line wgmma sequence per tap count) or, in 3xTF32, any number (one chain per tap),
// descriptors shifted by each tap's column, 16-byte window copies from a 4-aligned column (odd
// padding puts the first column anywhere), "high" rows of more than 3 taps (two taps' A
// fragments in flight: odd and even counts, counts that differ between phases), the row fold of
// 2-D problems with M <= 32 (an odd number of output rows, phases), and the declines: "highest"
// with M <= 32 and no fold, dgrad whose taps step by a fraction of a window column. Each case
// asserts which kernel ran, through the launch counter.
struct WgmmaRuns {
  bool forward, dgrad;  // expected to run on the wgmma kernel
};
struct WgmmaCase {
  Case c;
  WgmmaRuns highest, high;
};

// Forward and dgrad of w at both precisions against float64, asserting which kernel ran.
void check_wgmma_case(const WgmmaCase& w, uint64_t seed) {
  const PreferencesOff preferences_off;
  const ConvGeometry g64 = geometry(w.c, Precision::highest);
  const Operands o = random_operands(g64, seed);
  const Operands o64 = to_float64(o);
  Backend& be = backend(Device(kCUDA));
  auto opt = [](const Tensor& like) {
    return TensorOptions().dtype(like.dtype()).device(Device(kCUDA));
  };
  Tensor y64 = empty(y_shape(g64), opt(o64.x)), dx64 = empty(x_shape(g64), opt(o64.x));
  be.conv_transpose_forward(g64, o64.x, o64.w, &o64.b, y64);
  be.conv_transpose_dgrad(g64, o64.dy, o64.w, dx64);
  for (Precision precision : {Precision::highest, Precision::high}) {
    const ConvGeometry g = geometry(w.c, precision);
    const bool high = precision == Precision::high;
    const std::string config =
        std::string(w.c.what) + " " + g.str() + (high ? " high" : " highest");
    // NaN-filled outputs: every element must be written.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Tensor y = full(y_shape(g), nan, opt(o.x)), dx = full(x_shape(g), nan, opt(o.x));
    const int64_t before = cuda::conv_wgmma_launches();
    be.conv_transpose_forward(g, o.x, o.w, &o.b, y);
    const int64_t after_forward = cuda::conv_wgmma_launches();
    be.conv_transpose_dgrad(g, o.dy, o.w, dx);
    const int64_t after_dgrad = cuda::conv_wgmma_launches();
    const WgmmaRuns& runs = high ? w.high : w.highest;
    EXPECT_EQ(after_forward - before, runs.forward ? 1 : 0) << config << " forward: wgmma launches";
    EXPECT_EQ(after_dgrad - after_forward, runs.dgrad ? 1 : 0)
        << config << " dgrad: wgmma launches";
    for (auto [out, ref, name] :
         {std::tuple{&y, &y64, " forward"}, std::tuple{&dx, &dx64, " dgrad"}}) {
      const testing::CompareResult r =
          testing::compare(*out, *ref, high ? kHigh : kHighest, config + name);
      EXPECT_TRUE(r.ok) << r.report;
      if (high) {
        EXPECT_GT(r.rel_l2, 1e-5) << config << name << ": tensor-core path not taken?";
      }
    }
  }
}

TEST(CudaFastPathsWgmma, TilesTapsAndDeclines) {
  TGRAD_SKIP_WITHOUT_CUDA();
  if (!cuda::wgmma_supported(0)) GTEST_SKIP() << "the wgmma kernel needs compute capability 9.0";
  constexpr WgmmaRuns kBoth{true, true}, kNeither{false, false}, kForward{true, false};
  const std::vector<WgmmaCase> cases = {
      // M = 64 both ways: one warpgroup row, two along N; L = 600: several position tiles, the
      // last one partial.
      {{"M 64", 1, 2, 64, 64, 1, {1, 600}, {1, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}}, kBoth, kBoth},
      // M = 128 and M = 80 (two warpgroups along M, the second one partly past M); batch 1.
      {{"M 128", 1, 1, 128, 128, 1, {1, 300}, {1, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}},
       kBoth,
       kBoth},
      {{"M 80", 1, 2, 48, 80, 1, {1, 257}, {1, 3}, {1, 1}, {0, 2}, {1, 1}, {0, 0}}, kBoth, kBoth},
      // C 72 and 40: a partial last 16-channel step; padding 3 shifts the window start off the
      // 4-column grid; dilation 2; L 531 odd.
      {{"C 72", 1, 2, 72, 40, 1, {1, 531}, {1, 3}, {1, 1}, {0, 3}, {1, 2}, {0, 0}}, kBoth, kBoth},
      // S1's geometry: forward phase 0 has no taps, phase 1 three; dgrad stages every other dy
      // column (dilation a multiple of the stride).
      {{"S1-like", 1, 2, 48, 64, 1, {1, 401}, {1, 3}, {1, 2}, {0, 1}, {1, 2}, {0, 0}},
       kBoth,
       kBoth},
      // 2-D, 3x3 with padding: several kh planes per output row, edge rows with fewer.
      {{"2-D 3x3", 2, 2, 48, 64, 1, {5, 70}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}}, kBoth, kBoth},
      // 5 taps in a row (S4's): 3xTF32 runs them one chain each, 1xTF32 two taps in flight.
      {{"5 taps", 1, 2, 48, 72, 1, {1, 531}, {1, 5}, {1, 1}, {0, 0}, {1, 3}, {0, 0}}, kBoth, kBoth},
      // 2-D 3x7 (S5's kernel, 7 taps a row) with M = 40.
      {{"2-D 3x7", 2, 1, 40, 40, 1, {4, 90}, {3, 7}, {1, 1}, {1, 3}, {1, 1}, {0, 0}}, kBoth, kBoth},
      // 4 taps (an even count) with M = 100: two M tiles, the second partial.
      {{"4 taps M 100", 1, 1, 48, 100, 1, {1, 200}, {1, 4}, {1, 1}, {0, 1}, {1, 2}, {0, 0}},
       kBoth,
       kBoth},
      // Stride 2 with 7 taps: the forward's phases get 4 and 3 taps (one kernel, both counts);
      // dgrad's taps step by half a window column and decline.
      {{"stride 2 7 taps", 1, 2, 48, 64, 1, {1, 300}, {1, 7}, {1, 2}, {0, 3}, {1, 1}, {0, 1}},
       kForward,
       kForward},
      // M = 32 and 20 in dgrad (C_in): "high" runs them in a partly empty 64-row tile, "highest"
      // declines; forward (M = 64 and 48) runs at both.
      {{"C_in 32", 1, 2, 32, 64, 1, {1, 300}, {1, 3}, {1, 1}, {0, 0}, {1, 1}, {0, 0}},
       kForward,
       kBoth},
      {{"C_in 20", 1, 2, 20, 48, 1, {1, 333}, {1, 2}, {1, 1}, {0, 1}, {1, 1}, {0, 0}},
       kForward,
       kBoth},
      // Row fold (2-D, M <= 32: GEMM rows 32.. compute the next output row): S5's 3x7 with
      // M = 32 both ways and 9 output rows (the last pair has one); 3x3 with M = 24 / 20, a
      // stride-2 W (forward phases; dgrad declines) and output padding.
      {{"fold 3x7", 2, 2, 32, 32, 1, {9, 70}, {3, 7}, {1, 1}, {1, 3}, {1, 1}, {0, 0}},
       kBoth,
       kBoth},
      {{"fold stride W 2", 2, 1, 20, 24, 1, {6, 50}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {0, 1}},
       kForward,
       kForward},
      // Dilation 2 along H: no fold (the two output rows would read different src rows), so
      // "highest" declines M = 24 / 32 and "high" runs the half-empty tile.
      {{"no fold dH 2", 2, 1, 24, 32, 1, {7, 40}, {3, 3}, {1, 1}, {2, 1}, {2, 1}, {0, 0}},
       kNeither,
       kBoth},
      // Stride 2, dilation 1: forward runs (phases), dgrad's taps step by half a window column.
      {{"stride 2", 1, 2, 48, 64, 1, {1, 300}, {1, 3}, {1, 2}, {0, 1}, {1, 1}, {0, 1}},
       kForward,
       kForward},
  };
  uint64_t seed = 1100;
  for (const WgmmaCase& w : cases)
    check_wgmma_case(w, ++seed);
}

// ---- wgrad fast path against the CPU float64 reference loops -----------------------------------
// The tensor-core wgrad stages x and a dy window per 64-position segment, converts them once into
// fragment-ordered TF32 buffers (dy columns compacted to one residue mod sW when dW is a multiple
// of sW) and runs one warp per (32x32 tile, tap). These cases aim at each edge of that layout:
// channel counts that leave partial 32-wide tiles, lengths that leave a partial segment, strides
// with dilations that do and do not share a residue, several kw groups, 2-D, and windows wide
// enough that only one raw stage fits.
struct WgradCase {
  const char* what;
  int dims;
  int64_t n, c_in, c_out;
  std::vector<int64_t> in, kernel, stride, padding, dilation;  // user axes: (W) or (H, W)
};

// Compares dw at both precisions with reference::conv_transpose_wgrad on the same float32 values.
void check_wgrad(const WgradCase& w, uint64_t seed) {
  const PreferencesOff preferences_off;
  Shape x_user{w.n, w.c_in}, w_user{w.c_in, w.c_out};
  x_user.insert(x_user.end(), w.in.begin(), w.in.end());
  w_user.insert(w_user.end(), w.kernel.begin(), w.kernel.end());
  const testing::ConvCase c =
      testing::conv_case_from_shapes(w.dims, x_user, w_user, false, w.stride, w.padding,
                                     std::vector<int64_t>(w.in.size(), 0), w.dilation, 1);
  testing::ConvData d = testing::make_conv_data(c, seed);
  // The reference sees exactly the float32 values the GPU gets.
  for (std::vector<double>* v : {&d.x, &d.dy}) {
    for (double& e : *v)
      e = static_cast<double>(static_cast<float>(e));
  }
  const Tensor expected =
      testing::host_tensor(reference::conv_transpose_wgrad(c.p, d.x, d.dy), c.w_shape4());
  const testing::ConvTensors t = testing::conv_tensors(c, d, kFloat32, Device(kCUDA));
  for (Precision precision : {Precision::highest, Precision::high}) {
    ConvGeometry g = make_conv_transpose_geometry(c.args());
    g.precision = precision;
    const bool highest = precision == Precision::highest;
    const std::string config =
        std::string(w.what) + " " + c.str() + (highest ? " highest" : " high") + " wgrad";
    // NaN-filled: every element must be written.
    Tensor dw = full(c.w_shape4(), std::numeric_limits<double>::quiet_NaN(),
                     TensorOptions(kFloat32).device(Device(kCUDA)));
    backend(Device(kCUDA)).conv_transpose_wgrad(g, t.x, t.dy, dw);
    // kHighest: 3xTF32 keeps ~21 mantissa bits per product and float32 sums (flushed chains,
    // splits added in float64), measured 3e-7..5e-7; 2e-6 fails a dropped or doubled position,
    // tap or channel (an error of ~1/sqrt(terms per element), >= 5e-3 in these cases).
    // kHigh: 1xTF32 rounds both operands to 11 bits, ~3e-4 relative L2; 2e-3 still fails a
    // missing position out of a few thousand, a wrong tap or a wrong channel.
    const testing::CompareResult r =
        testing::compare(dw, expected, highest ? kHighest : kHigh, config);
    EXPECT_TRUE(r.ok) << r.report;
    // The general kernel accumulates in float64 (error ~1e-8): a "high" error this small means
    // the tensor-core path did not run and the case tests nothing of it.
    if (!highest) {
      EXPECT_GT(r.rel_l2, 1e-5) << config << ": fast path not taken?";
    }
  }
}

// Each case with its own seed: first_seed + 1, first_seed + 2, ...
void check_wgrad_cases(const std::vector<WgradCase>& cases, uint64_t first_seed) {
  for (const WgradCase& w : cases)
    check_wgrad(w, ++first_seed);
}

TEST(CudaFastPathsWgrad, ChannelsAndLengthsOffTheTiles) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_wgrad_cases(
      {
          // 5 ci in a 32-row tile, 70 co: two 64-wide co tiles, the second holding 6; L 1001.
          {"5x70 L1001", 1, 2, 5, 70, {1001}, {3}, {1}, {1}, {1}},
          // 33 ci (a 64-row tile with 31 empty rows), 5 co; L 63: one partial segment.
          {"33x5 L63", 1, 3, 33, 5, {63}, {3}, {1}, {0}, {1}},
          // L 65: one full segment and one of a single position; dilation 2.
          {"70x33 L65", 1, 2, 70, 33, {65}, {4}, {1}, {0}, {2}},
          // L 1: one position per row, most of each window is zero fill.
          {"33x70 L1", 1, 4, 33, 70, {1}, {3}, {1}, {0}, {1}},
          // Long enough for many splits (fixed-order sum of partial tiles).
          {"64x128 L8000", 1, 3, 64, 128, {8000}, {3}, {1}, {1}, {1}},
      },
      700);
}

TEST(CudaFastPathsWgrad, StridesAndDilations) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_wgrad_cases(
      {
          // S1's geometry: dW 2 is a multiple of sW 2, so only odd window columns are converted;
          // the 136-column window leaves room for one raw stage only (two CTAs per SM).
          {"S1-like", 1, 2, 32, 64, {1001}, {3}, {2}, {1}, {2}},
          // sW 3, dW 6: one residue mod 3 again, at a window shift of 2.
          {"s3 d6", 1, 2, 16, 24, {200}, {3}, {3}, {1}, {6}},
          // sW 3, dW 2: taps read every residue (all columns kept, K step 3 columns); the window is
          // wide enough that 3xTF32 falls back to one raw stage.
          {"s3 d2", 1, 2, 33, 70, {517}, {4}, {3}, {2}, {2}},
          // sW 2, dW 3, odd length.
          {"s2 d3", 1, 1, 20, 40, {301}, {5}, {2}, {3}, {3}},
      },
      800);
}

TEST(CudaFastPathsWgrad, ManyTaps) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_wgrad_cases(
      {
          // 64x64 tiles: 4 warps per tap, 3 taps per CTA, so k 13 is five kw groups (the last one
          // with one tap and 8 idle warps); dilation 2.
          {"k13 64x64", 1, 2, 70, 70, {300}, {13}, {1}, {6}, {2}},
          // 32x32 tiles: one warp per tap, two groups of 7 taps; stride 2.
          {"k13 32x32 s2", 1, 2, 8, 8, {260}, {13}, {2}, {3}, {1}},
      },
      900);
}

TEST(CudaFastPathsWgrad, TwoDim) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_wgrad_cases(
      {
          // S5's kernel and padding: edge rows of each kh get no taps.
          {"S5-like", 2, 1, 32, 32, {6, 130}, {3, 7}, {1, 1}, {1, 3}, {1, 1}},
          // strides (2, 1), dilation (1, 2), channels off the tiles.
          {"2-D strided", 2, 2, 33, 40, {5, 77}, {3, 5}, {2, 1}, {1, 2}, {1, 2}},
      },
      1000);
}

}  // namespace
}  // namespace tgrad
