// The CUDA conv GEMM path (cuda/conv_transpose_gemm.cu) and depthwise kernels
// (cuda/conv_transpose_depthwise.cu), forced through the planner's override (set_conv_kernel) on
// every layer of the decoder suite at batch 1-2 and on odd geometries: all three passes against
// the CPU backend in float64, element by element within an error budget, with the path's launch
// counter proving it ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/decoder_layers.h"
#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/tensor.h"
#include "cuda/conv_path_rules.h"
#include "cuda/conv_plan.h"
#include "cuda/kernel_stats.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::tensors_close;
using testing::Tolerance;

// Forces conv kernels (set_conv_kernel) for its lifetime and restores the previous setting.
class KernelGuard {
 public:
  explicit KernelGuard(const std::string& spec) : old_(get_conv_kernel()) { set_conv_kernel(spec); }
  ~KernelGuard() { set_conv_kernel(old_); }
  KernelGuard(const KernelGuard&) = delete;
  KernelGuard& operator=(const KernelGuard&) = delete;

 private:
  std::string old_;
};

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

// The three passes of g on `device` (y includes the bias).
struct Passes {
  Tensor y, dx, dw;
};

Passes run_passes(const ConvGeometry& g, const Operands& o, Device device) {
  Backend& be = backend(device);
  const TensorOptions opt = TensorOptions().dtype(o.x.dtype()).device(device);
  Passes r{empty(y_shape(g), opt), empty(x_shape(g), opt), empty(w_shape(g), opt)};
  be.conv_transpose_forward(g, o.x, o.w, &o.b, r.y);
  be.conv_transpose_dgrad(g, o.dy, o.w, r.dx);
  be.conv_transpose_wgrad(g, o.x, o.dy, r.dw);
  return r;
}

Operands convert(const Operands& o, Device device, DType dtype) {
  return {o.x.to(device, dtype), o.w.to(device, dtype), o.b.to(device, dtype),
          o.dy.to(device, dtype)};
}

// The CPU float64 reference of float32-valued operands, and each output element's sum over its
// taps of |a||b| (the same passes on the absolute values): the scale of its rounding error.
struct Reference {
  Passes value, scale;
};

Reference reference(const ConvGeometry& g, const Operands& o32) {
  ConvGeometry g64 = g;
  g64.precision = Precision::highest;
  const Operands o = convert(o32, Device(kCPU), kFloat64);
  const Operands a{abs(o.x), abs(o.w), abs(o.b), abs(o.dy)};
  return {run_passes(g64, o, Device(kCPU)), run_passes(g64, a, Device(kCPU))};
}

// |got - ref| <= c * u * scale per element. The rounding errors of a dot product are u times its
// partial sums, which for these zero-mean random operands grow as a random walk: their
// root-mean-square total is about u * scale / 2, whatever the length. TF32 ("high") rounds each
// operand to 10 mantissa bits (truncation at worst: 2u per operand, 4u per product with
// u = 2^-11), which bounds its error by 4u * scale outright. c = 16 covers both with a wide
// margin over the largest of millions of elements, and at u = 2^-24 or 2^-53 an error of one
// wrong or missing tap (|a||b| of one term, about scale / taps) is still orders of magnitude
// above it. (At "high" one wrong tap of a long sum may hide inside the budget; "highest" and
// float64 run the same code and catch it.)
constexpr double kBudgetFactor = 16.0;

// The elementwise excess of |got - ref| over the budget, compared with zero, so the helper's
// report names the worst elements.
::testing::AssertionResult within_budget(const Tensor& got, const Tensor& ref, const Tensor& scale,
                                         double u, const std::string& config) {
  const Tensor g = got.to(Device(kCPU), kFloat64);
  const double* gp = g.data_ptr<double>();
  const double* rp = ref.data_ptr<double>();
  const double* sp = scale.data_ptr<double>();
  std::vector<double> excess(static_cast<size_t>(g.numel()));
  for (size_t i = 0; i < excess.size(); ++i) {
    excess[i] = std::max(0.0, std::fabs(gp[i] - rp[i]) - kBudgetFactor * u * sp[i]);
  }
  // Exactly zero: any element past its budget fails.
  return tensors_close(from_vector(excess, g.shape()), zeros(g.shape(), kFloat64), Tolerance{},
                       config + " (excess over c*u*sum|a||b|)");
}

enum class Path { gemm, depthwise };

int64_t launches(Path path) {
  return path == Path::gemm ? cuda::conv_gemm_launches() : cuda::conv_depthwise_launches();
}

// Forces `path` and checks every pass of g (batch as given) at "highest", "high" and float64.
// expected_runs: how many of the three passes the path must take (3 unless it declines some).
void check_path(Path path, const ConvGeometry& geometry, uint64_t seed, const std::string& what,
                int expected_runs = 3) {
  // The path is forced on each pass whose rule accepts the geometry; the others run whatever
  // the planner picks.
  std::string spec;
  for (const cuda::ConvPass pass :
       {cuda::ConvPass::forward, cuda::ConvPass::dgrad, cuda::ConvPass::wgrad}) {
    const std::string declined =
        path == Path::gemm ? cuda::gemm_path_declined(pass, geometry, Precision::highest, kFloat32)
                           : cuda::depthwise_path_declined(pass, geometry, kFloat32);
    if (!declined.empty()) continue;
    if (!spec.empty()) spec.push_back(',');
    spec.append(cuda::conv_pass_name(pass));
    spec.push_back('=');
    spec.append(path == Path::gemm ? cuda::kKernelGemm : cuda::kKernelDepthwise);
  }
  const KernelGuard forced(spec);
  Generator gen(seed);
  const Operands o{randn(x_shape(geometry), gen), randn(w_shape(geometry), gen),
                   randn({geometry.out_channels}, gen), randn(y_shape(geometry), gen)};
  const Reference ref = reference(geometry, o);
  struct Run {
    DType dtype;
    Precision precision;
    double u;
    const char* name;
  };
  const Run runs[] = {{kFloat32, Precision::highest, std::ldexp(1.0, -24), "float32 highest"},
                      {kFloat32, Precision::high, std::ldexp(1.0, -11), "float32 high"},
                      {kFloat64, Precision::highest, std::ldexp(1.0, -53), "float64"}};
  for (const Run& run : runs) {
    ConvGeometry g = geometry;
    g.precision = run.precision;
    const std::string config = what + " " + run.name + " " + g.str();
    const int64_t before = launches(path);
    const Passes out = run_passes(g, convert(o, Device(kCUDA), run.dtype), Device(kCUDA));
    EXPECT_EQ(launches(path) - before, expected_runs) << config << ": the path did not run";
    EXPECT_TRUE(within_budget(out.y, ref.value.y, ref.scale.y, run.u, config + " forward"));
    EXPECT_TRUE(within_budget(out.dx, ref.value.dx, ref.scale.dx, run.u, config + " dgrad"));
    EXPECT_TRUE(within_budget(out.dw, ref.value.dw, ref.scale.dw, run.u, config + " wgrad"));
  }
}

ConvGeometry layer_geometry(const bench::ConvLayerSpec& l, int64_t batch) {
  return make_conv_transpose_geometry(bench::conv_args(l, batch));
}

// Spatial arrays (H, W); a 1-D case passes H entries of 1 (0 padding/output_padding).
ConvGeometry odd_geometry(int dims, int64_t n, int64_t ci, int64_t co, int64_t groups,
                          std::array<int64_t, 2> in, std::array<int64_t, 2> k,
                          std::array<int64_t, 2> s, std::array<int64_t, 2> p,
                          std::array<int64_t, 2> d, std::array<int64_t, 2> op) {
  ConvTransposeArgs a;
  a.fn = dims == 1 ? "conv_transpose1d" : "conv_transpose2d";
  a.spatial_dims = dims;
  const auto axes = [&](std::array<int64_t, 2> hw) {
    return dims == 1 ? std::array<int64_t, 2>{hw[1], hw[0]} : hw;
  };
  a.x_shape = {n, ci};
  a.w_shape = {ci, co / groups};
  for (int axis = 0; axis < dims; ++axis) {
    a.x_shape.push_back(axes(in)[static_cast<size_t>(axis)]);
    a.w_shape.push_back(axes(k)[static_cast<size_t>(axis)]);
  }
  a.stride = axes(s);
  a.padding = axes(p);
  a.dilation = axes(d);
  a.output_padding = axes(op);
  a.groups = groups;
  return make_conv_transpose_geometry(a);
}

bool is_depthwise(const ConvGeometry& g) {
  return g.in_channels == g.groups && g.out_channels == g.groups;
}

TEST(CudaConvPaths, GemmOnEveryDecoderLayer) {
  TGRAD_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1500;
  for (const bench::ConvLayerSpec& l : bench::decoder_layers()) {
    // Batch 2 where one sample is small, 1 for the big images (CPU reference time).
    const ConvGeometry g1 = layer_geometry(l, 1);
    const int64_t batch = g1.x_numel() + g1.y_numel() < (int64_t{1} << 20) ? 2 : 1;
    check_path(Path::gemm, layer_geometry(l, batch), ++seed, l.id);
  }
}

TEST(CudaConvPaths, DepthwiseOnEveryDepthwiseDecoderLayer) {
  TGRAD_SKIP_WITHOUT_CUDA();
  uint64_t seed = 1600;
  int layers = 0;
  for (const bench::ConvLayerSpec& l : bench::decoder_layers()) {
    const ConvGeometry g = layer_geometry(l, 2);
    if (!is_depthwise(g)) continue;
    ++layers;
    check_path(Path::depthwise, g, ++seed, l.id);
  }
  EXPECT_GE(layers, 2);  // fcn_up2_dw and depthwise_256
}

TEST(CudaConvPaths, GemmOnOddGeometries) {
  TGRAD_SKIP_WITHOUT_CUDA();
  struct Odd {
    const char* what;
    ConvGeometry g;
  };
  const Odd cases[] = {
      {"2-D dilation, output_padding, groups 3, non-square",
       odd_geometry(2, 2, 6, 9, 3, {5, 7}, {3, 2}, {2, 3}, {1, 0}, {2, 3}, {1, 2})},
      {"1-D groups 3, stride 3, dilation 2",
       odd_geometry(1, 2, 9, 6, 3, {1, 37}, {1, 5}, {1, 3}, {0, 2}, {1, 2}, {0, 1})},
      {"non-square kernel 1x4",
       odd_geometry(2, 1, 4, 5, 1, {3, 11}, {1, 4}, {1, 2}, {0, 1}, {1, 1}, {0, 0})},
      {"1-D k16 s8 output_padding 3",
       odd_geometry(1, 2, 8, 4, 1, {1, 10}, {1, 16}, {1, 8}, {0, 4}, {1, 1}, {0, 3})},
      {"padding past the kernel's reach",
       odd_geometry(2, 2, 3, 4, 1, {4, 4}, {2, 2}, {1, 1}, {2, 2}, {1, 1}, {0, 0})},
      {"depthwise, dilated",
       odd_geometry(2, 2, 5, 5, 5, {6, 9}, {3, 3}, {2, 1}, {1, 2}, {1, 2}, {1, 0})},
      // One float64 sample needs 158 MB, so float64 runs four batch chunks of one sample (wgrad
      // adds them in order) and float32 two (three samples and one).
      {"batch chunks",
       odd_geometry(2, 4, 2, 16, 1, {256, 300}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0})},
  };
  uint64_t seed = 1700;
  for (const Odd& c : cases)
    check_path(Path::gemm, c.g, ++seed, c.what);
}

TEST(CudaConvPaths, DepthwiseOnOddGeometries) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_path(Path::depthwise,
             odd_geometry(2, 2, 5, 5, 5, {6, 9}, {3, 3}, {2, 1}, {1, 2}, {1, 2}, {1, 0}), 1801,
             "depthwise 2-D dilated, non-square, output_padding");
  check_path(Path::depthwise,
             odd_geometry(1, 3, 4, 4, 4, {1, 50}, {1, 7}, {1, 3}, {0, 1}, {1, 1}, {0, 2}), 1802,
             "depthwise 1-D stride 3");
  // More planes than the grid holds: each thread walks several (n, c) planes of one channel (the
  // grid's planes a multiple of C: the 2-D forward's 48 of 192; in 1-D 4100 of 6400, so some
  // threads walk one plane and others two).
  check_path(Path::depthwise,
             odd_geometry(2, 4, 48, 48, 48, {64, 64}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}), 1805,
             "depthwise, planes walked per thread, 2-D");
  check_path(Path::depthwise,
             odd_geometry(1, 64, 100, 100, 100, {1, 50}, {1, 4}, {1, 2}, {0, 1}, {1, 1}, {0, 0}),
             1806, "depthwise, planes walked per thread, 1-D");
  // Padding past the taps' reach on both axes: dgrad's tap spans are empty on the edge rows and
  // columns of dx (those elements are 0) and cut short on the next ones, with dilation 2 on H
  // (the span's first tap is rounded up to a whole dilation) and stride 3 on W.
  check_path(Path::depthwise,
             odd_geometry(2, 2, 3, 3, 3, {6, 7}, {3, 3}, {2, 3}, {6, 3}, {2, 1}, {0, 0}), 1807,
             "depthwise, padding past the taps' reach");
  // The forward's and dgrad's unrolled tap rectangles: 2 x 2 (k2 s2), 1 x 2 (1-D k2, dilated),
  // the forward's 4 x 4 (k4 at stride 1).
  check_path(Path::depthwise,
             odd_geometry(2, 2, 6, 6, 6, {9, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, {0, 0}), 1808,
             "depthwise k2 s2");
  check_path(Path::depthwise,
             odd_geometry(1, 2, 5, 5, 5, {1, 40}, {1, 2}, {1, 1}, {0, 1}, {1, 3}, {0, 0}), 1809,
             "depthwise 1-D k2 dilation 3");
  check_path(Path::depthwise,
             odd_geometry(2, 2, 4, 4, 4, {10, 11}, {4, 4}, {1, 1}, {1, 2}, {1, 1}, {0, 0}), 1810,
             "depthwise k4 s1");
  // More channels than the grid's planes (the forward's 256, dgrad's 512): a thread's planes are
  // of several channels, and it loads each one's weights in turn.
  check_path(Path::depthwise,
             odd_geometry(1, 2, 600, 600, 600, {1, 2048}, {1, 4}, {1, 2}, {0, 1}, {1, 1}, {0, 0}),
             1811, "depthwise, planes of several channels walked per thread");
  // 25 taps: wgrad's largest accumulator instance (32 taps).
  check_path(Path::depthwise,
             odd_geometry(2, 2, 3, 3, 3, {7, 6}, {5, 5}, {1, 2}, {2, 1}, {1, 1}, {0, 1}), 1804,
             "depthwise 25 taps");
  // 36 taps: wgrad declines (one register per tap, 32 at most) and the general kernel runs it;
  // forward and dgrad still take the depthwise kernels.
  check_path(Path::depthwise,
             odd_geometry(2, 2, 3, 3, 3, {5, 5}, {6, 6}, {2, 2}, {1, 1}, {1, 1}, {0, 0}), 1803,
             "depthwise 36 taps", 2);
}

TEST(CudaConvPaths, GemmIsDeterministic) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const KernelGuard forced(cuda::kKernelGemm);
  const ConvGeometry g =
      odd_geometry(1, 3, 12, 6, 3, {1, 300}, {1, 8}, {1, 4}, {0, 2}, {1, 1}, {0, 0});
  Generator gen(1900);
  const Operands o = convert({randn(x_shape(g), gen), randn(w_shape(g), gen),
                              randn({g.out_channels}, gen), randn(y_shape(g), gen)},
                             Device(kCUDA), kFloat32);
  const Passes a = run_passes(g, o, Device(kCUDA));
  const Passes b = run_passes(g, o, Device(kCUDA));
  // Bit-identical: no atomics, fixed summation orders.
  EXPECT_TRUE(tensors_close(a.y, b.y, Tolerance{}, "forward"));
  EXPECT_TRUE(tensors_close(a.dx, b.dx, Tolerance{}, "dgrad"));
  EXPECT_TRUE(tensors_close(a.dw, b.dw, Tolerance{}, "wgrad"));
}

}  // namespace
}  // namespace tgrad
