// The CUDA backend against the CPU backend (elementwise, reductions, matmul), its allocator
// (statistics, cache, out of memory), device checks, conv determinism, int64 indexing past 2^31
// elements, and the five S1-S5 workloads (docs/performance.md) at full size in float32 against
// float64 on the GPU. Tests named CudaLarge.* are heavy (GBs, seconds): scripts/gpu-check keeps
// them out of the compute-sanitizer runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/tensor.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::tensors_close;
using testing::Tolerance;

// float32 elementwise results against the CPU's: both are float32 libm-quality functions, which
// may differ by an ulp or two.
constexpr Tolerance kFloat32Elementwise{1e-6, 4e-6, 0.0};
// float64 device math functions are within 1-2 ulp of glibc's.
constexpr Tolerance kFloat64Elementwise{1e-14, 1e-13, 0.0};
// Long float32 reductions (sums, GEMMs, convolutions) checked against float64 results.
constexpr Tolerance kFloat32Reduction{0.0, 0.0, 1e-5};
// float64 sums of a million terms in another order: relative L2 rather than elementwise, since
// a sum that is near zero by chance has a large relative error of its own.
constexpr Tolerance kFloat64Reduction{0.0, 0.0, 1e-12};

Backend& gpu() {
  return backend(Device(kCUDA));
}

std::string dtype_str(DType dtype) {
  return dtype_name(dtype);
}

Tensor gpu_randn(const Shape& shape, Generator& gen, DType dtype) {
  return randn(shape, gen, TensorOptions().dtype(dtype)).to(Device(kCUDA));
}

// A 4-D float32 tensor on the GPU, x[n,c,h,w] = a[n,c] * b[c,h,w] + d[n,h,w], built on the device
// from few random numbers, so that GB-sized operands cost no host-side generation.
Tensor gpu_random_4d(const Shape& shape, Generator& gen) {
  const Tensor a = gpu_randn({shape[0], shape[1], 1, 1}, gen, kFloat32);
  const Tensor b = gpu_randn({1, shape[1], shape[2], shape[3]}, gen, kFloat32);
  const Tensor d = gpu_randn({shape[0], 1, shape[2], shape[3]}, gen, kFloat32);
  return a * b + d;
}

ConvGeometry geometry_1d(int64_t n, int64_t c_in, int64_t c_out, int64_t groups, int64_t length,
                         int64_t k, int64_t stride, int64_t padding, int64_t dilation,
                         int64_t output_padding = 0) {
  ConvTransposeArgs args;
  args.fn = "conv_transpose1d";
  args.spatial_dims = 1;
  args.x_shape = {n, c_in, length};
  args.w_shape = {c_in, c_out / groups, k};
  args.stride = {stride, 1};
  args.padding = {padding, 0};
  args.dilation = {dilation, 1};
  args.output_padding = {output_padding, 0};
  args.groups = groups;
  return make_conv_transpose_geometry(args);
}

ConvGeometry geometry_2d(int64_t n, int64_t c_in, int64_t c_out, int64_t groups,
                         std::array<int64_t, 2> in, std::array<int64_t, 2> k,
                         std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                         std::array<int64_t, 2> dilation,
                         std::array<int64_t, 2> output_padding = {0, 0}) {
  ConvTransposeArgs args;
  args.spatial_dims = 2;
  args.x_shape = {n, c_in, in[0], in[1]};
  args.w_shape = {c_in, c_out / groups, k[0], k[1]};
  args.has_bias = true;
  args.b_shape = {c_out};
  args.stride = stride;
  args.padding = padding;
  args.dilation = dilation;
  args.output_padding = output_padding;
  args.groups = groups;
  return make_conv_transpose_geometry(args);
}

Shape x_shape4(const ConvGeometry& g) {
  return {g.batch, g.in_channels, g.in_size[0], g.in_size[1]};
}
Shape w_shape4(const ConvGeometry& g) {
  return {g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]};
}
Shape y_shape4(const ConvGeometry& g) {
  return {g.batch, g.out_channels, g.out_size[0], g.out_size[1]};
}

// The geometry of `length` consecutive batch entries of g.
ConvGeometry batch_slice(ConvGeometry g, int64_t length) {
  g.batch = length;
  return g;
}

Tensor forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor* b) {
  Tensor y = empty(y_shape4(g), TensorOptions().dtype(x.dtype()).device(x.device()));
  backend(x.device()).conv_transpose_forward(g, x, w, b, y);
  return y;
}
Tensor dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w) {
  Tensor dx = empty(x_shape4(g), TensorOptions().dtype(dy.dtype()).device(dy.device()));
  backend(dy.device()).conv_transpose_dgrad(g, dy, w, dx);
  return dx;
}
Tensor wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy) {
  Tensor dw = empty(w_shape4(g), TensorOptions().dtype(x.dtype()).device(x.device()));
  backend(x.device()).conv_transpose_wgrad(g, x, dy, dw);
  return dw;
}
Tensor bias_grad(const ConvGeometry& g, const Tensor& dy) {
  Tensor db = empty({g.out_channels}, TensorOptions().dtype(dy.dtype()).device(dy.device()));
  backend(dy.device()).conv_transpose_bias_grad(g, dy, db);
  return db;
}

TEST(CudaBackend, RoundTripKeepsBitsAndCasts) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(1);
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor x = randn({3, 5, 7}, gen, TensorOptions().dtype(dtype));
    const Tensor y = x.to(Device(kCUDA));
    EXPECT_TRUE(y.is_cuda());
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_TRUE(equal(y.cpu(), x)) << dtype_str(dtype);
    EXPECT_TRUE(equal(y.clone().cpu(), x)) << dtype_str(dtype);
    const DType other = dtype == kFloat32 ? kFloat64 : kFloat32;
    EXPECT_TRUE(equal(y.to(other).cpu(), x.to(other))) << dtype_str(dtype) << " cast";
  }
  const Tensor empty_gpu = zeros({0, 4}, Device(kCUDA));
  EXPECT_EQ(empty_gpu.cpu().numel(), 0);
  EXPECT_TRUE(equal(full({2, 3}, 2.5, Device(kCUDA)).cpu(), full({2, 3}, 2.5)));
}

TEST(CudaBackend, EveryUnaryOpMatchesCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const std::vector<UnaryOp> ops = {UnaryOp::neg,         UnaryOp::exp,        UnaryOp::log,
                                    UnaryOp::abs,         UnaryOp::sign,       UnaryOp::sqrt,
                                    UnaryOp::relu,        UnaryOp::leaky_relu, UnaryOp::step,
                                    UnaryOp::leaky_step,  UnaryOp::sigmoid,    UnaryOp::tanh,
                                    UnaryOp::pow,         UnaryOp::add_scalar, UnaryOp::mul_scalar,
                                    UnaryOp::rsub_scalar, UnaryOp::rdiv_scalar};
  Generator gen(2);
  for (DType dtype : {kFloat32, kFloat64}) {
    // Wide values (sigmoid must not overflow at +-100), exact zeros for sign/step, and a
    // positive copy for log, sqrt, pow and division.
    Tensor x = randn({4, 33, 17}, gen, TensorOptions().dtype(dtype)) * 3.0;
    std::vector<double> v = x.to_vector<double>();
    v[0] = 0.0;
    v[1] = 100.0;
    v[2] = -100.0;
    v[3] = -0.0;
    x = from_vector(v, x.shape(), TensorOptions().dtype(dtype));
    const Tensor positive = abs(x) + 0.25;
    for (UnaryOp op : ops) {
      const bool needs_positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::pow ||
                                  op == UnaryOp::rdiv_scalar;
      const Tensor xc = needs_positive ? positive : x;
      const double p = op == UnaryOp::pow ? 2.5 : (op == UnaryOp::leaky_step ? 0.1 : -1.75);
      Tensor yc = empty_like(xc);
      cpu_backend().unary(op, p, xc, yc);
      const Tensor xg = xc.to(Device(kCUDA));
      Tensor yg = empty_like(xg);
      gpu().unary(op, p, xg, yg);
      EXPECT_TRUE(
          tensors_close(yg, yc, dtype == kFloat32 ? kFloat32Elementwise : kFloat64Elementwise,
                        std::string("unary ") + unary_op_name(op) + " " + dtype_str(dtype)));
    }
  }
}

TEST(CudaBackend, BinaryOpsBroadcastLikeCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {1, 3, 1}}, {{2, 1, 4}, {1, 3, 1}}, {{5, 1}, {1, 6}},
      {{4, 3}, {}},           {{}, {2, 2, 3, 1, 5}},  {{1000, 257}, {257}}};
  Generator gen(3);
  for (DType dtype : {kFloat32, kFloat64}) {
    for (const auto& [sa, sb] : shapes) {
      const Tensor a = randn(sa, gen, TensorOptions().dtype(dtype));
      const Tensor b = abs(randn(sb, gen, TensorOptions().dtype(dtype))) + 0.5;
      const Tensor ag = a.to(Device(kCUDA)), bg = b.to(Device(kCUDA));
      const std::string config = detail::cat(sa, " (op) ", sb, " ", dtype_str(dtype));
      // +, -, * are correctly rounded single operations in both backends: the same bits.
      EXPECT_TRUE(equal((ag + bg).cpu(), a + b)) << config << " add";
      EXPECT_TRUE(equal((ag - bg).cpu(), a - b)) << config << " sub";
      EXPECT_TRUE(equal((bg - ag).cpu(), b - a)) << config << " sub swapped";
      EXPECT_TRUE(equal((ag * bg).cpu(), a * b)) << config << " mul";
      // A vectorised CPU division may go through a reciprocal: compare within an ulp or two.
      EXPECT_TRUE(tensors_close(ag / bg, a / b,
                                dtype == kFloat32 ? kFloat32Elementwise : kFloat64Elementwise,
                                config + " div"));
    }
  }
}

TEST(CudaBackend, SumsMatchFloat64CpuSums) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(4);
  struct Case {
    Shape x;
    std::vector<int64_t> dims;
  };
  // Inner, outer, middle and mixed axes; short and very long reductions; few and many outputs.
  const std::vector<Case> cases = {
      {{4, 5, 6, 7}, {1, 3}},   {{4, 5, 6, 7}, {0}},          {{4, 5, 6, 7}, {0, 2}},
      {{4, 5, 6, 7}, {3}},      {{3, 1000003}, {1}},          {{1000003, 3}, {0}},
      {{64, 97, 1031}, {0, 2}}, {{2, 3, 4, 5, 6}, {0, 2, 4}}, {{7}, {0}}};
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tolerance tol = dtype == kFloat32 ? kFloat32Reduction : kFloat64Reduction;
    for (const Case& c : cases) {
      const Tensor x = randn(c.x, gen, TensorOptions().dtype(dtype));
      const Tensor x64 = x.to(kFloat64);
      const Tensor xg = x.to(Device(kCUDA));
      const std::string config = detail::cat("x ", c.x, " dims ", c.dims, " ", dtype_str(dtype));
      EXPECT_TRUE(tensors_close(sum(xg, c.dims, true), sum(x64, c.dims, true), tol, config));
      EXPECT_TRUE(tensors_close(sum(xg, c.dims), sum(x64, c.dims), tol, config));
      EXPECT_TRUE(tensors_close(mean(xg, c.dims), mean(x64, c.dims), tol, config + " mean"));
      EXPECT_TRUE(tensors_close(sum(xg), sum(x64), tol, config + " full sum"));
      EXPECT_TRUE(tensors_close(mean(xg), mean(x64), tol, config + " full mean"));
      // Backend level: y has x's rank with 1 on the summed axes.
      Shape y_shape = c.x;
      for (int64_t d : c.dims)
        y_shape[static_cast<size_t>(d)] = 1;
      Tensor yg = empty(y_shape, TensorOptions().dtype(dtype).device(kCUDA));
      gpu().sum_to(xg, yg);
      EXPECT_TRUE(tensors_close(yg, sum_to(x64, y_shape), tol, config + " sum_to"));
      Tensor again = empty_like(yg);
      gpu().sum_to(xg, again);
      EXPECT_TRUE(equal(yg, again)) << config << ": sum_to is not deterministic";
    }
  }
}

TEST(CudaBackend, MatmulMatchesFloat64Cpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(5);
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tolerance tol = dtype == kFloat32 ? kFloat32Reduction : kFloat64Reduction;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int64_t m = 37, k = 53, n = 29;
        const Tensor a = randn(ta ? Shape{k, m} : Shape{m, k}, gen, TensorOptions().dtype(dtype));
        const Tensor b = randn(tb ? Shape{n, k} : Shape{k, n}, gen, TensorOptions().dtype(dtype));
        Tensor y64 = empty({m, n}, kFloat64);
        cpu_backend().matmul(a.to(kFloat64), b.to(kFloat64), y64, ta, tb);
        Tensor yg = empty({m, n}, TensorOptions().dtype(dtype).device(kCUDA));
        gpu().matmul(a.to(Device(kCUDA)), b.to(Device(kCUDA)), yg, ta, tb);
        EXPECT_TRUE(tensors_close(
            yg, y64, tol, detail::cat("matmul ta=", ta, " tb=", tb, " ", dtype_str(dtype))));
      }
    }
    const Tensor a = randn({16, 300}, gen, TensorOptions().dtype(dtype));
    const Tensor b = randn({300, 24}, gen, TensorOptions().dtype(dtype));
    EXPECT_TRUE(tensors_close(matmul(a.to(Device(kCUDA)), b.to(Device(kCUDA))),
                              matmul(a.to(kFloat64), b.to(kFloat64)), tol, "public matmul"));
  }
}

TEST(CudaBackend, AllocatorStatsTrackLiveAndCachedBlocks) {
  TGRAD_SKIP_WITHOUT_CUDA();
  // scripts/gpu-check runs memcheck with the cache off; then blocks go straight back.
  const char* no_caching = std::getenv("TGRAD_CUDA_NO_CACHING");
  const bool caching =
      no_caching == nullptr || std::string(no_caching).empty() || std::string(no_caching) == "0";
  cuda_synchronize();
  const int64_t bytes = int64_t{4} << 20;
  const int64_t allocated_before = cuda_memory_allocated();
  const int64_t reserved_before = cuda_memory_reserved();
  int64_t reserved_with_tensor = 0;
  {
    const Tensor t = empty({bytes / 4}, Device(kCUDA));
    EXPECT_GE(cuda_memory_allocated(), allocated_before + bytes);
    EXPECT_GE(cuda_max_memory_allocated(), allocated_before + bytes);
    reserved_with_tensor = cuda_memory_reserved();
    EXPECT_GE(reserved_with_tensor, cuda_memory_allocated());
  }
  EXPECT_EQ(cuda_memory_allocated(), allocated_before);
  if (caching) {
    // The block went back to the cache, not to the driver.
    EXPECT_EQ(cuda_memory_reserved(), reserved_with_tensor);
    {
      // The same size again is served from the cache.
      const Tensor t = empty({bytes / 4}, Device(kCUDA));
      EXPECT_EQ(cuda_memory_reserved(), reserved_with_tensor);
    }
    cuda_empty_cache();
    EXPECT_LE(cuda_memory_reserved(), reserved_with_tensor - bytes);
  } else {
    EXPECT_EQ(cuda_memory_reserved(), reserved_before);
  }
  EXPECT_EQ(cuda_memory_allocated(), allocated_before);
  EXPECT_GE(cuda_memory_reserved(), cuda_memory_allocated());
}

TEST(CudaBackend, OutOfMemoryIsAnErrorNamingTheBytes) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const int64_t allocated_before = cuda_memory_allocated();
  const int64_t elements = int64_t{1} << 48;  // float32: 2^50 bytes, far beyond any GPU
  try {
    const Tensor t = empty({elements}, Device(kCUDA));
    FAIL() << "allocating 2^50 bytes did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("CUDA out of memory"), std::string::npos) << message;
    EXPECT_NE(message.find("tried to allocate 1125899906842624 bytes"), std::string::npos)
        << message;
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  }
  EXPECT_EQ(cuda_memory_allocated(), allocated_before);
  // The device is still usable afterwards.
  EXPECT_EQ(sum(ones({1000}, Device(kCUDA))).item(), 1000.0);
}

TEST(CudaBackend, ConvTransposeRejectsMixedDevices) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const Tensor x = ones({1, 2, 3, 3}), w = ones({2, 3, 2, 2}), b = ones({3});
  const Tensor xg = x.cuda(), wg = w.cuda(), bg = b.cuda();
  EXPECT_THROW(conv_transpose2d(xg, w, bg), Error);
  EXPECT_THROW(conv_transpose2d(x, wg, b), Error);
  EXPECT_THROW(conv_transpose2d(xg, wg, b), Error);
  EXPECT_THROW(conv_transpose1d(ones({1, 2, 3}).cuda(), ones({2, 3, 2})), Error);
  EXPECT_NO_THROW(conv_transpose2d(xg, wg, bg));
}

TEST(CudaBackend, ConvPassesAreDeterministic) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(6);
  const ConvGeometry g =
      geometry_2d(4, 32, 48, 2, {37, 129}, {3, 5}, {2, 1}, {1, 2}, {2, 1}, {1, 0});
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor x = gpu_randn(x_shape4(g), gen, dtype);
    const Tensor w = gpu_randn(w_shape4(g), gen, dtype);
    const Tensor b = gpu_randn({g.out_channels}, gen, dtype);
    const Tensor dy = gpu_randn(y_shape4(g), gen, dtype);
    const std::string config = g.str() + " " + dtype_str(dtype);
    EXPECT_TRUE(equal(forward(g, x, w, &b), forward(g, x, w, &b))) << config << " forward";
    EXPECT_TRUE(equal(dgrad(g, dy, w), dgrad(g, dy, w))) << config << " dgrad";
    EXPECT_TRUE(equal(wgrad(g, x, dy), wgrad(g, x, dy))) << config << " wgrad";
    EXPECT_TRUE(equal(bias_grad(g, dy), bias_grad(g, dy))) << config << " bias grad";
  }
}

// Each y element is computed the same way whatever the batch, so a batch slice run alone gives
// the same bits as the slice of the full run; wgrad's split differs, so halves are summed.
TEST(CudaLarge, ConvTransposeIndexesPast2To31Elements) {
  TGRAD_SKIP_WITHOUT_CUDA();
  NoGradGuard no_grad;
  Generator gen(7);
  // y: (4097, 1, 512, 1024) float32 = 2^31 + 2^19 elements (8.6 GB).
  const ConvGeometry g = geometry_2d(4097, 1, 1, 1, {256, 512}, {2, 2}, {2, 2}, {0, 0}, {1, 1});
  ASSERT_GT(g.y_numel(), (int64_t{1} << 31));
  const Tensor x = gpu_random_4d(x_shape4(g), gen);
  const Tensor w = gpu_randn(w_shape4(g), gen, kFloat32);
  const Tensor b = gpu_randn({1}, gen, kFloat32);
  const Tensor y = forward(g, x, w, &b);
  const std::vector<int64_t> starts = {0, 2047, 4095, 4096};
  for (int64_t start : starts) {
    const int64_t len = std::min<int64_t>(2, g.batch - start);
    const ConvGeometry gs = batch_slice(g, len);
    EXPECT_TRUE(equal(y.narrow(0, start, len), forward(gs, x.narrow(0, start, len), w, &b)))
        << "forward, batch " << start;
  }
  const Tensor& dy = y;
  const Tensor dx = dgrad(g, dy, w);
  for (int64_t start : starts) {
    const int64_t len = std::min<int64_t>(2, g.batch - start);
    EXPECT_TRUE(
        equal(dx.narrow(0, start, len), dgrad(batch_slice(g, len), dy.narrow(0, start, len), w)))
        << "dgrad, batch " << start;
  }
  const int64_t half = 2048;
  const ConvGeometry g0 = batch_slice(g, half), g1 = batch_slice(g, g.batch - half);
  const Tensor dw_halves =
      wgrad(g0, x.narrow(0, 0, half), dy.narrow(0, 0, half)) +
      wgrad(g1, x.narrow(0, half, g.batch - half), dy.narrow(0, half, g.batch - half));
  EXPECT_TRUE(tensors_close(wgrad(g, x, dy), dw_halves, kFloat32Reduction, "wgrad " + g.str()));
  const Tensor db_halves =
      bias_grad(g0, dy.narrow(0, 0, half)) + bias_grad(g1, dy.narrow(0, half, g.batch - half));
  EXPECT_TRUE(tensors_close(bias_grad(g, dy), db_halves, kFloat32Reduction, "db " + g.str()));
}

// The S1-S5 workloads (docs/performance.md) at full size: float32 kernels against the same kernels
// in float64.
struct Workload {
  const char* id;
  ConvGeometry g;
};

std::vector<Workload> design_workloads() {
  return {
      {"S1", geometry_1d(16, 32, 64, 1, 131072, 3, 2, 1, 2)},
      {"S2", geometry_1d(64, 64, 128, 1, 65536, 3, 1, 0, 1)},
      {"S3", geometry_1d(64, 128, 128, 1, 65536, 3, 1, 0, 1)},
      {"S4", geometry_1d(32, 32, 64, 1, 131072, 5, 1, 0, 3)},
      {"S5", geometry_2d(8, 32, 32, 1, {512, 1024}, {3, 7}, {1, 1}, {1, 3}, {1, 1})},
  };
}

TEST(CudaLarge, DesignWorkloadsFloat32MatchFloat64) {
  TGRAD_SKIP_WITHOUT_CUDA();
  NoGradGuard no_grad;
  Generator gen(8);
  for (const Workload& wl : design_workloads()) {
    const ConvGeometry& g = wl.g;
    const std::string config = std::string(wl.id) + " " + g.str();
    const Tensor x = gpu_random_4d(x_shape4(g), gen);
    const Tensor w = gpu_randn(w_shape4(g), gen, kFloat32);
    const Tensor b = gpu_randn({g.out_channels}, gen, kFloat32);
    const Tensor x64 = x.to(kFloat64), w64 = w.to(kFloat64), b64 = b.to(kFloat64);
    EXPECT_TRUE(tensors_close(forward(g, x, w, &b), forward(g, x64, w64, &b64), kFloat32Reduction,
                              config + " forward"));
    const Tensor dy = gpu_random_4d(y_shape4(g), gen);
    const Tensor dy64 = dy.to(kFloat64);
    EXPECT_TRUE(
        tensors_close(dgrad(g, dy, w), dgrad(g, dy64, w64), kFloat32Reduction, config + " dgrad"));
    EXPECT_TRUE(
        tensors_close(wgrad(g, x, dy), wgrad(g, x64, dy64), kFloat32Reduction, config + " wgrad"));
    EXPECT_TRUE(tensors_close(bias_grad(g, dy), bias_grad(g, dy64), kFloat32Reduction,
                              config + " bias grad"));
  }
}

}  // namespace
}  // namespace tgrad
