// The random conv sweep (tests/conv_cases.h) run three ways: the CPU backend's four passes and
// the public ops against the naive loops in float64, and the CUDA backend against the CPU one
// in float64 and float32. Every failure prints the case.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/ops.h"
#include "tests/conv_cases.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

// float32 results of reductions of up to several thousand products of values in [-1, 1): the
// relative L2 error is a few float32 ulps (~1e-7), growing slowly with the length; 1e-5 leaves
// room for any summation order yet catches a single wrong term.
constexpr Tolerance kFloat32L2{0.0, 0.0, 1e-5};

constexpr uint64_t kDataSeed = kConvSweepSeed + 1000;


TEST(ConvSweep, CoversEveryAxisCombinationGroupKindAndFlag) {
  const std::vector<ConvCase> cases = conv_sweep();
  std::set<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int>> combos;
  std::set<std::string> flags;
  for (const ConvCase& c : cases) {
    const auto& p = c.p;
    const int kind = p.groups == 1 ? 0 : p.groups == 2 ? 1 : 2;  // depthwise has C_in >= 3
    combos.insert(
        {c.spatial_dims, p.stride[1], p.padding[1], p.dilation[1], p.output_padding[1], kind});
    EXPECT_LT(p.output_padding[1], std::max(p.stride[1], p.dilation[1])) << c.str();
    EXPECT_LT(p.output_padding[0], std::max(p.stride[0], p.dilation[0])) << c.str();
    EXPECT_GE(p.out_extent(0), 1) << c.str();
    EXPECT_GE(p.out_extent(1), 1) << c.str();
    flags.insert(c.bias ? "bias" : "no bias");
    flags.insert(c.batched ? "batched" : "unbatched");
    if (p.groups == 1) flags.insert("groups 1");
    if (p.groups == 2) flags.insert("groups 2");
    if (p.groups == p.in_channels && p.groups > 2) flags.insert("depthwise");
    if (c.spatial_dims == 2 && p.kernel[0] != p.kernel[1]) flags.insert("non-square kernel");
    if (c.spatial_dims == 2 && p.in_size[0] != p.in_size[1]) flags.insert("non-square input");
  }
  // 25 (stride, dilation, output_padding) triples times 3 paddings, for each of 1-D and 2-D,
  // each with the three groups kinds.
  EXPECT_EQ(combos.size(), 2u * 75u * 3u);
  EXPECT_EQ(flags.size(), 9u);
  // Same seed, same sweep: the CUDA tests see exactly the cases the CPU tests see.
  EXPECT_EQ(conv_sweep().size(), cases.size());
  EXPECT_EQ(conv_sweep()[17].str(), cases[17].str());
}

// The geometry core builds must agree with the reference's own size formula.
TEST(ConvSweep, GeometryMatchesReferenceSizes) {
  for (const ConvCase& c : conv_sweep()) {
    const ConvGeometry g = make_conv_transpose_geometry(c.args());
    EXPECT_EQ(g.batch, c.p.batch) << g.str();
    EXPECT_EQ(g.in_channels, c.p.in_channels) << g.str();
    EXPECT_EQ(g.out_channels, c.p.out_channels) << g.str();
    EXPECT_EQ(g.groups, c.p.groups) << g.str();
    EXPECT_EQ(g.spatial_dims, c.spatial_dims) << g.str();
    for (int a = 0; a < 2; ++a) {
      EXPECT_EQ(g.in_size[a], c.p.in_size[a]) << "axis " << a << " " << g.str();
      EXPECT_EQ(g.out_size[a], c.p.out_extent(a)) << "axis " << a << " " << g.str();
      EXPECT_EQ(g.kernel[a], c.p.kernel[a]) << "axis " << a << " " << g.str();
      EXPECT_EQ(g.stride[a], c.p.stride[a]) << "axis " << a << " " << g.str();
      EXPECT_EQ(g.padding[a], c.p.padding[a]) << "axis " << a << " " << g.str();
      EXPECT_EQ(g.dilation[a], c.p.dilation[a]) << "axis " << a << " " << g.str();
      EXPECT_EQ(g.output_padding[a], c.p.output_padding[a]) << "axis " << a << " " << g.str();
    }
  }
}

TEST(ConvSweep, CpuBackendPassesMatchReferenceFloat64) {
  for_each_sweep_case(kDataSeed, [](const ConvCase& c, const ConvData& d) {
    const ConvOutputs actual = run_backend_passes(c, conv_tensors(c, d, kFloat64, Device(kCPU)));
    return passes_close(actual, run_reference_passes(c, d), kFloat64Tight, c.str());
  });
}

// float32 on the CPU against the float64 loops: the CPU backend is the yardstick of CUDA's
// float32 results too.
TEST(ConvSweep, CpuBackendPassesMatchReferenceFloat32) {
  for_each_sweep_case(kDataSeed, [](const ConvCase& c, const ConvData& d) {
    const ConvOutputs actual = run_backend_passes(c, conv_tensors(c, d, kFloat32, Device(kCPU)));
    EXPECT_EQ(actual.y.dtype(), kFloat32);
    return passes_close(actual, run_reference_passes(c, d), kFloat32L2, c.str());
  });
}

TEST(ConvSweep, CpuPublicForwardMatchesReference) {
  for_each_sweep_case(kDataSeed, [](const ConvCase& c, const ConvData& d) {
    const Tensor y = run_public_forward(c, conv_tensors(c, d, kFloat64, Device(kCPU)));
    const Tensor expected = run_reference_passes(c, d).y.reshape(c.y_shape());
    const ::testing::AssertionResult r = tensors_close(y, expected, kFloat64Tight, c.str());
    EXPECT_TRUE(r);
    return static_cast<bool>(r);
  });
}

// The public op's backward (the tape and core's derivatives table) on the user-facing shapes,
// batched or not: x, w and b get exactly the reference's dgrad, wgrad and bias grad.
bool public_backward_close(const ConvCase& c, const ConvData& d, Device device, DType dtype,
                           Tolerance tol, const ConvOutputs& expected) {
  const TensorOptions options = TensorOptions(dtype).device(device);
  const Tensor x = from_vector(d.x, c.x_shape(), options).requires_grad_(true);
  const Tensor w = from_vector(d.w, c.w_shape(), options).requires_grad_(true);
  const Tensor b = c.bias ? from_vector(d.b, c.b_shape(), options).requires_grad_(true) : Tensor();
  const Tensor y = c.spatial_dims == 1 ? conv_transpose1d(x, w, b, c.options1d())
                                       : conv_transpose2d(x, w, b, c.options2d());
  y.backward(from_vector(d.dy, c.y_shape(), options));
  const std::string config = "backward on " + device.str() + " " + c.str();
  ConvOutputs actual;
  actual.y = y.detach().reshape(c.y_shape4());
  actual.dx = x.grad().reshape(c.x_shape4());
  actual.dw = w.grad().reshape(c.w_shape4());
  if (c.bias) actual.db = b.grad();
  return passes_close(actual, expected, tol, config);
}

TEST(ConvSweep, CpuPublicBackwardMatchesReference) {
  for_each_sweep_case(kDataSeed, [](const ConvCase& c, const ConvData& d) {
    return public_backward_close(c, d, Device(kCPU), kFloat64, kFloat64Tight,
                                 run_reference_passes(c, d));
  });
}

TEST(ConvSweep, CudaPublicBackwardMatchesReference) {
  TGRAD_SKIP_WITHOUT_CUDA();
  for_each_sweep_case(kDataSeed, [](const ConvCase& c, const ConvData& d) {
    return public_backward_close(c, d, Device(kCUDA), kFloat64, kFloat64Tight,
                                 run_reference_passes(c, d));
  });
}

// CUDA against the CPU backend on the same cases and values. float64 must agree to rounding;
// float32 is judged against CPU float64 (the better yardstick) by relative L2.
void check_cuda_against_cpu(DType dtype, Tolerance tol) {
  for_each_sweep_case(kDataSeed, [&](const ConvCase& c, const ConvData& d) {
    const ConvTensors on_cuda = conv_tensors(c, d, dtype, Device(kCUDA));
    const ConvTensors on_cpu = conv_tensors(c, d, kFloat64, Device(kCPU));
    const ConvOutputs actual = run_backend_passes(c, on_cuda);
    EXPECT_TRUE(actual.y.is_cuda());
    EXPECT_EQ(actual.y.dtype(), dtype);
    const bool ok = passes_close(actual, run_backend_passes(c, on_cpu), tol, "cuda " + c.str());
    const ::testing::AssertionResult r = tensors_close(
        run_public_forward(c, on_cuda), run_public_forward(c, on_cpu), tol, "cuda op " + c.str());
    EXPECT_TRUE(r);
    return ok && r;
  });
}

TEST(ConvSweep, CudaBackendMatchesCpuFloat64) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_cuda_against_cpu(kFloat64, kFloat64Tight);
}

TEST(ConvSweep, CudaBackendMatchesCpuFloat32) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_cuda_against_cpu(kFloat32, kFloat32L2);
}

// The "high" precision (TF32 tensor cores, 10-bit mantissa) is held to TF32's rounding: a
// relative L2 of a few 1e-4 on these reductions; 5e-3 catches a wrong result, not rounding.
TEST(ConvSweep, CudaBackendMatchesCpuFloat32HighPrecision) {
  TGRAD_SKIP_WITHOUT_CUDA();
  struct PrecisionGuard {  // restores the setting even when a check throws
    std::string previous = get_float32_matmul_precision();
    ~PrecisionGuard() { set_float32_matmul_precision(previous); }
  } guard;
  set_float32_matmul_precision("high");
  check_cuda_against_cpu(kFloat32, Tolerance{0.0, 0.0, 5e-3});
}

}  // namespace
}  // namespace tgrad::testing
