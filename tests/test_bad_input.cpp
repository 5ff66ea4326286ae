// Bad input that the other suites do not already cover (docs/testing.md lists them all): NaN
// and Inf through every op and conv, empty tensors, non-contiguous requests, mixed devices and
// dtypes, sizes that overflow int64 or could never fit in memory, and replays of fuzzer finds.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/loss.h"
#include "layers/safetensors.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using testing::error_of;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- NaN and Inf ----

struct NamedOp {
  const char* name;
  std::function<Tensor(const Tensor&)> f;
};

// Every elementwise op and reduction, as a function of one tensor.
std::vector<NamedOp> every_op() {
  return {
      {"neg", [](const Tensor& x) { return -x; }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"pow", [](const Tensor& x) { return pow(x, 3.0); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"add", [](const Tensor& x) { return x + x; }},
      {"sub", [](const Tensor& x) { return x - ones_like(x); }},
      {"mul", [](const Tensor& x) { return x * x; }},
      {"div", [](const Tensor& x) { return x / full(x.shape(), 2.0, x.dtype()); }},
      {"add_scalar", [](const Tensor& x) { return x + 1.0; }},
      {"mul_scalar", [](const Tensor& x) { return x * 3.0; }},
      {"rsub", [](const Tensor& x) { return 1.0 - x; }},
      {"rdiv", [](const Tensor& x) { return 1.0 / x; }},
      {"sum_dim", [](const Tensor& x) { return sum(x, {1}); }},
      {"mean_dim", [](const Tensor& x) { return mean(x, {1}); }},
      {"expand",
       [](const Tensor& x) {
         return expand(x.reshape({1, 6, 1}), {2, 6, 1});
       }},
      {"sum_to",
       [](const Tensor& x) {
         return sum_to(expand(x, {2, 3, 2}), {3, 2});
       }},
      {"matmul",
       [](const Tensor& x) {
         return matmul(x, ones({2, 2}, x.dtype()));
       }},
      {"linear",
       [](const Tensor& x) {
         return linear(x, ones({4, 2}, x.dtype()));
       }},
      {"mse_loss", [](const Tensor& x) { return nn::mse_loss(x, zeros_like(x)); }},
      {"bce_logits",
       [](const Tensor& x) { return nn::binary_cross_entropy_with_logits(x, zeros_like(x)); }},
  };
}

// Every op on a tensor holding NaN, +Inf and -Inf: no crash, no exception, NaN in stays NaN
// out (IEEE arithmetic; relu and leaky_relu propagate NaN as PyTorch's do), and backward runs.
TEST(BadInput, NaNAndInfPropagateThroughEveryOp) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector<double>({kNaN, 1.0, kInf, -2.0, -kInf, 0.5}, {3, 2},
                                         TensorOptions(dtype).requires_grad(true));
    for (const NamedOp& op : every_op()) {
      SCOPED_TRACE(std::string(op.name) + " " + dtype_name(dtype));
      Tensor y;
      ASSERT_NO_THROW(y = op.f(x));
      const std::vector<double> v = y.to_vector<double>();
      ASSERT_FALSE(v.empty());
      // x[0] = NaN reaches y[0] in every op above (row 0 for reductions along dim 1).
      EXPECT_TRUE(std::isnan(v[0])) << "got " << v[0];
      x.zero_grad();
      ASSERT_NO_THROW(sum(y).backward());
      ASSERT_TRUE(x.grad().defined());
    }
    // Whole-tensor reductions.
    EXPECT_TRUE(std::isnan(sum(x).item()));
    EXPECT_TRUE(std::isnan(mean(x).item()));
    EXPECT_EQ(sum(from_vector<double>({kInf, 1.0}, {2}, dtype)).item(), kInf);
    EXPECT_TRUE(std::isnan(sum(from_vector<double>({kInf, -kInf}, {2}, dtype)).item()));
  }
}

// A NaN pixel through a 1x1 transposed conv poisons exactly the outputs it touches; Inf weights
// make Inf or NaN, never a crash; backward passes run and carry the NaN to dx and dw.
TEST(BadInput, NaNAndInfThroughConvTranspose) {
  for (DType dtype : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto opts = TensorOptions(dtype).requires_grad(true);
    std::vector<double> xv(2 * 3 * 4, 0.5);
    xv[1 * 4 + 2] = kNaN;  // x[0, 1, 0, 2] (N=1, C_in=2, H=3, W=4 below uses index c*12+h*4+w)
    Tensor x = from_vector(xv, {1, 2, 3, 4}, opts);
    Tensor w = full({2, 3, 1, 1}, 0.25, opts);
    Tensor b = zeros({3}, opts);
    Tensor y = conv_transpose2d(x, w, b);
    ASSERT_EQ(y.shape(), (Shape{1, 3, 3, 4}));
    const std::vector<double> yv = y.to_vector<double>();
    for (int64_t co = 0; co < 3; ++co) {
      for (int64_t p = 0; p < 12; ++p) {
        const double v = yv[static_cast<size_t>(co * 12 + p)];
        if (p == 1 * 4 + 2) {
          EXPECT_TRUE(std::isnan(v)) << "co=" << co << " p=" << p;
        } else {
          EXPECT_FALSE(std::isnan(v)) << "co=" << co << " p=" << p;
        }
      }
    }
    ASSERT_NO_THROW(sum(y).backward());
    // dw[ci, co] = sum_p x[ci, p]: NaN for ci holding the NaN pixel (x index 6 is in channel 0).
    const std::vector<double> dw = w.grad().to_vector<double>();
    EXPECT_TRUE(std::isnan(dw[0]));
    EXPECT_FALSE(std::isnan(dw[3]));
    EXPECT_FALSE(std::isnan(b.grad().to_vector<double>()[0]));

    // Inf and NaN everywhere, strided and dilated, 1-D and 2-D.
    const Tensor xi = full({2, 2, 5}, kInf, opts);
    const Tensor wi =
        from_vector<double>({1, -1, kNaN, 0, 1, 2, 3, 4, -kInf, 1, 1, 1}, {2, 2, 3}, opts);
    Tensor y1;
    ASSERT_NO_THROW(
        y1 = conv_transpose1d(xi, wi, Tensor(),
                              ConvTranspose1dFuncOptions().stride(2).dilation(2).padding(1)));
    // Odd positions get Inf or NaN; even ones receive no tap (stride 2, dilation 2) and stay 0.
    const std::vector<double> v1 = y1.to_vector<double>();
    for (size_t i = 0; i < v1.size(); ++i) {
      EXPECT_EQ(std::isfinite(v1[i]), (i % 11) % 2 == 0) << i << ": " << v1[i];  // L_out = 11
    }
    ASSERT_NO_THROW(sum(y1).backward());
    const Tensor x2 = full({1, 2, 3, 3}, kNaN, opts);
    const Tensor w2 = full({2, 2, 2, 3}, kInf, opts);
    Tensor y2;
    ASSERT_NO_THROW(y2 = conv_transpose2d(x2, w2, Tensor(),
                                          ConvTranspose2dFuncOptions().stride({2, 1}).groups(2)));
    for (double v : y2.to_vector<double>())
      EXPECT_TRUE(std::isnan(v));
    ASSERT_NO_THROW(sum(y2).backward());
  }
}

// ---- empty tensors ----

// Batch 0 gives an empty output (PyTorch's behaviour); backward gives zero dw and db and an
// empty dx.
TEST(BadInput, BatchZeroConvGivesEmptyOutputAndZeroWeightGradients) {
  const auto opts = TensorOptions(kFloat64).requires_grad(true);
  Tensor x = randn({0, 4, 3, 5}, opts);
  Tensor w = randn({4, 3, 2, 3}, opts);
  Tensor b = randn({6}, opts);
  Tensor y = conv_transpose2d(x, w, b, ConvTranspose2dFuncOptions().stride(2).groups(2));
  EXPECT_EQ(y.shape(), (Shape{0, 6, 6, 11}));
  sum(y * y).backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(w.grad().to_vector<double>(), std::vector<double>(static_cast<size_t>(w.numel()), 0));
  EXPECT_EQ(b.grad().to_vector<double>(), std::vector<double>(6, 0));

  Tensor x1 = randn({0, 2, 7}, opts);
  Tensor w1 = randn({2, 1, 3}, opts);
  Tensor y1 = conv_transpose1d(x1, w1);
  EXPECT_EQ(y1.shape(), (Shape{0, 1, 9}));
  sum(y1).backward();
  EXPECT_EQ(w1.grad().to_vector<double>(), std::vector<double>(6, 0));
}

// Zero input channels or zero spatial input: the output is the bias alone.
TEST(BadInput, ConvWithNothingToScatterIsTheBias) {
  const auto opts = TensorOptions(kFloat64).requires_grad(true);
  Tensor x = randn({2, 0, 3, 3}, opts);
  Tensor w = randn({0, 2, 2, 2}, opts);
  Tensor b = from_vector<double>({1.5, -2.0}, {2}, opts);
  Tensor y = conv_transpose2d(x, w, b);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 4, 4}));
  for (int64_t i = 0; i < y.numel(); ++i) {
    EXPECT_EQ(y.to_vector<double>()[static_cast<size_t>(i)], (i / 16) % 2 == 0 ? 1.5 : -2.0);
  }
  sum(y).backward();
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{32, 32}));
  // C_out = 0: an empty output, and empty gradients.
  Tensor w0 = randn({3, 0, 2}, opts);
  Tensor x0 = randn({1, 3, 4}, opts);
  Tensor y0 = conv_transpose1d(x0, w0);
  EXPECT_EQ(y0.shape(), (Shape{1, 0, 5}));
  sum(y0).backward();
  EXPECT_EQ(x0.grad().to_vector<double>(), std::vector<double>(12, 0));
}

// Zero-size elementwise ops, reductions and products, forward and backward.
TEST(BadInput, ZeroSizeElementwiseAndReductions) {
  const Tensor e = zeros({2, 0, 3}, TensorOptions(kFloat32).requires_grad(true));
  for (const NamedOp& op : every_op()) {
    const std::string name = op.name;
    if (name == "expand" || name == "sum_to" || name == "matmul" || name == "linear") {
      continue;  // fixed shapes; covered below
    }
    SCOPED_TRACE(op.name);
    if (name == "mse_loss" || name == "bce_logits") {
      // The mean of nothing is NaN (0/0), as in PyTorch; backward still gives an empty gradient.
      Tensor loss;
      ASSERT_NO_THROW(loss = op.f(e));
      EXPECT_TRUE(std::isnan(loss.item()));
      ASSERT_NO_THROW(loss.backward());
      EXPECT_EQ(e.grad().shape(), e.shape());
      e.zero_grad();
      continue;
    }
    Tensor y;
    ASSERT_NO_THROW(y = op.f(e));
    ASSERT_NO_THROW(sum(y).backward());
    EXPECT_EQ(e.grad().shape(), e.shape());
    e.zero_grad();
  }
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(sum(e, {1}).to_vector<double>(), std::vector<double>(6, 0));
  EXPECT_EQ(sum(e, {0, 2}).shape(), (Shape{0}));
  EXPECT_EQ(mean(e, {0}, true).shape(), (Shape{1, 0, 3}));
  EXPECT_TRUE(std::isnan(mean(e, {1}).to_vector<double>()[0]));  // 0/0, as PyTorch
  EXPECT_EQ(expand(zeros({0, 1}), {0, 4}).shape(), (Shape{0, 4}));
  EXPECT_EQ(linear(zeros({0, 3}), ones({2, 3})).shape(), (Shape{0, 2}));
  EXPECT_EQ(zeros({0}).reshape({0, 5}).shape(), (Shape{0, 5}));
  EXPECT_EQ(zeros({3, 0}).clone().shape(), (Shape{3, 0}));
  EXPECT_EQ(zeros({0, 2}).to(kFloat64).dtype(), kFloat64);
  Tensor dst = zeros({0, 2});
  EXPECT_NO_THROW(dst.copy_(zeros({0, 2}, kFloat64)));
  EXPECT_NE(error_of([] { zeros({0}).item(); }).find("0 elements"), std::string::npos);
}

// ---- views ----

// tgrad has no strided views: narrow along an inner dim returns a copy, marked so that an
// in-place write into it (which in PyTorch would reach the base) is an error naming the op,
// never a silent no-op on the base.
TEST(BadInput, NarrowOnAnotherDimIsACopyThatRefusesInPlaceWrites) {
  const Tensor t = arange(24.0).reshape({4, 3, 2});
  for (int64_t dim : {1, 2, -1}) {
    Tensor piece = t.narrow(dim, 1, 1);
    EXPECT_EQ(piece.size(dim), 1);
    EXPECT_EQ(piece.to_vector<float>()[0], dim == 1 ? 2.0f : 1.0f);
    const std::string e = error_of([&] { piece.fill_(0.0); });
    EXPECT_TRUE(contains(e, "returned (tgrad returns a copy where PyTorch returns a strided view)"))
        << e;
    EXPECT_NO_THROW(piece.clone().fill_(0.0));  // a clone is a tensor of its own
  }
  Tensor perm = permute(t, {2, 0, 1});
  EXPECT_TRUE(contains(error_of([&] { perm.copy_(zeros(perm.shape())); }), "permute"));
  EXPECT_EQ(t.narrow(0, -1, 1).to_vector<float>()[0], 18.0f);  // negative start, as PyTorch
  EXPECT_TRUE(contains(error_of([] { scalar_tensor(1.0).narrow(0, 0, 1); }), "0-D"));
  EXPECT_TRUE(contains(error_of([&] { t.narrow(0, 2, -1); }), "do not fit"));
  EXPECT_TRUE(
      contains(error_of([&] { t.narrow(0, int64_t{1} << 62, int64_t{1} << 62); }), "do not fit"));
}

// ---- mixed dtypes and devices ----

TEST(BadInput, MixedDtypesAreErrorsNamingBoth) {
  const Tensor f = ones({2, 2});
  const Tensor d = ones({2, 2}, kFloat64);
  for (const auto& [name, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add", [&] { add(f, d); }},
           {"sub", [&] { sub(d, f); }},
           {"div", [&] { div(f, d); }},
           {"matmul", [&] { matmul(f, d); }},
           {"linear", [&] { linear(f, d); }},
           {"linear", [&] { linear(f, f, ones({2}, kFloat64)); }},
           {"conv_transpose1d",
            [&] {
              conv_transpose1d(f, ones({2, 1, 1}, kFloat64));
            }},
           {"conv_transpose2d",
            [&] {
              conv_transpose2d(ones({1, 2, 2, 2}), ones({2, 1, 1, 1}), ones({1}, kFloat64));
            }},
           {"mse_loss", [&] { nn::mse_loss(f, d); }},
       }) {
    const std::string e = error_of(call);
    EXPECT_TRUE(contains(e, name) && contains(e, "float32") && contains(e, "float64"))
        << name << ": " << e;
  }
  Tensor leaf = ones({2, 2}, TensorOptions(kFloat32).requires_grad(true));
  EXPECT_TRUE(contains(error_of([&] { leaf.set_grad(d); }), "does not match"));
  Tensor dst = zeros({2, 2});
  dst.copy_(d);  // copy_ converts, as PyTorch's does
  EXPECT_EQ(dst.dtype(), kFloat32);
}

TEST(BadInput, MixedDevicesAreErrors) {
  if (!cuda_is_available()) {
    // Without a device, every way to reach CUDA fails up front and clearly.
    for (const auto& call : std::vector<std::function<void()>>{
             [] { zeros({2}, Device(kCUDA)); },
             [] { ones({2}).to(kCUDA); },
             [] { ones({2}).cuda(); },
             [] { set_memory_limit(Device(kCUDA), 1); },
         }) {
      const std::string e = error_of(call);
      EXPECT_TRUE(contains(e, "without CUDA") || contains(e, "is not available")) << e;
    }
    return;
  }
  const Tensor c = ones({2, 2});
  const Tensor g = ones({2, 2}, Device(kCUDA));
  for (const auto& [name, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"add", [&] { add(c, g); }},
           {"mul", [&] { mul(g, c); }},
           {"matmul", [&] { matmul(c, g); }},
           {"linear", [&] { linear(g, c); }},
           {"conv_transpose1d",
            [&] {
              conv_transpose1d(c, ones({2, 1, 1}, Device(kCUDA)));
            }},
       }) {
    const std::string e = error_of(call);
    EXPECT_TRUE(contains(e, name) && contains(e, "device mismatch")) << name << ": " << e;
  }
  Tensor leaf = ones({2, 2}, TensorOptions().requires_grad(true));
  EXPECT_TRUE(contains(error_of([&] { leaf.set_grad(g); }), "does not match"));
}

// ---- sizes that overflow or cannot fit ----

TEST(BadInput, ShapesOverflowingInt64AreErrorsBeforeAllocation) {
  const int64_t big = int64_t{1} << 32;
  EXPECT_TRUE(contains(error_of([&] { zeros({big, big}); }), "more elements than int64"));
  // Elements fit in int64, bytes do not.
  EXPECT_TRUE(contains(error_of([] { zeros({int64_t{1} << 62}); }), "more bytes than int64"));
  EXPECT_TRUE(contains(error_of([&] { ones({4}).reshape({big, big, 0, -1}); }), "invalid"));
  EXPECT_TRUE(contains(error_of([&] { randn({big, big}); }), "int64"));
  // A conv whose output size overflows int64 on one axis, or whose element count does.
  const Tensor x = ones({1, 1, 3, 3});
  const Tensor w = ones({1, 1, 2, 2});
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
  for (const auto& o : std::vector<ConvTranspose2dFuncOptions>{
           ConvTranspose2dFuncOptions().stride({huge, 1}),
           ConvTranspose2dFuncOptions().dilation({1, huge}),
           ConvTranspose2dFuncOptions().stride(std::numeric_limits<int64_t>::max()),
           ConvTranspose2dFuncOptions().stride({int64_t{1} << 40, int64_t{1} << 40}),
       }) {
    const std::string e = error_of([&] { conv_transpose2d(x, w, Tensor(), o); });
    EXPECT_TRUE(contains(e, "conv_transpose2d") && contains(e, "int64")) << e;
  }
  const std::string e = error_of([&] {
    conv_transpose2d(x, w, Tensor(), ConvTranspose2dFuncOptions().padding({huge, 0}));
  });
  EXPECT_TRUE(contains(e, "conv_transpose2d") && contains(e, "padding")) << e;
}

// An output that would need 10^15 bytes: a clear tgrad::Error naming the bytes, nothing
// allocated, and the process alive (no abort from the allocator, under ASan too).
TEST(BadInput, OutputTooLargeForMemoryIsAnErrorNamingTheBytes) {
  const Tensor x = ones({1, 1, 2, 2});
  const Tensor w = ones({1, 1, 1, 1});
  const int64_t before = cpu_backend().memory_stats(Device(kCPU)).allocated;
  // Output (1, 1, 2^24 + 1, 2^24 + 1) float32: 1.1e15 bytes.
  const int64_t s = int64_t{1} << 24;
  const std::string e =
      error_of([&] { conv_transpose2d(x, w, Tensor(), ConvTranspose2dFuncOptions().stride(s)); });
  const int64_t bytes = (s + 1) * (s + 1) * 4;
  EXPECT_TRUE(contains(e, "out of memory") && contains(e, std::to_string(bytes))) << e;
  EXPECT_EQ(cpu_backend().memory_stats(Device(kCPU)).allocated, before);

  // The backend's allocate itself.
  const std::string a =
      error_of([] { cpu_backend().allocate(int64_t{1'000'000'000'000'000}, Device(kCPU)); });
  EXPECT_TRUE(contains(a, "cpu backend: out of memory") && contains(a, "1000000000000000 bytes"))
      << a;
  EXPECT_TRUE(contains(error_of([] { cpu_backend().allocate(-8, Device(kCPU)); }), "nbytes=-8"));
  EXPECT_TRUE(contains(error_of([] { zeros({int64_t{1} << 50}); }), "out of memory"));
  EXPECT_TRUE(contains(error_of([] { set_memory_limit(Device(kCPU), -1); }), "bytes=-1"));
  EXPECT_EQ(cpu_backend().memory_stats(Device(kCPU)).allocated, before);
}

// A safetensors header whose shape needs more than 2^64 bytes: it used to wrap around to a
// small byte count that matched its data_offsets, and only the allocation refused it.
TEST(BadInput, SafetensorsShapeWhoseBytesOverflow) {
  const std::string header =
      R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  std::string bytes(8, '\0');
  for (size_t i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  const std::string e = error_of([&] { safetensors::parse(bytes + header, "overflow"); });
  EXPECT_TRUE(contains(e, "more elements than int64") || contains(e, "64 bits")) << e;
  const std::string header2 =
      R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})";
  for (size_t i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>((header2.size() >> (8 * i)) & 0xff);
  const std::string e2 = error_of([&] { safetensors::parse(bytes + header2, "overflow"); });
  EXPECT_TRUE(contains(e2, "64 bits")) << e2;
}

// ---- fuzzer finds (fuzz/regressions/ holds the inputs; fuzz/run replays them) ----

// fuzz_conv_transpose: stride * (in - 1) overflowed int64 inside the output-size formula
// (undefined behaviour, caught by UBSan) before any check ran.
TEST(BadInput, FuzzConvOutputSizeFormulaOverflow) {
  const Tensor x = ones({1, 1, 3});
  const Tensor w = ones({1, 1, 2});
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t min = std::numeric_limits<int64_t>::min();
  for (const auto& o : std::vector<ConvTranspose1dFuncOptions>{
           ConvTranspose1dFuncOptions().stride(max),
           ConvTranspose1dFuncOptions().padding(max),
           ConvTranspose1dFuncOptions().dilation(max),
           ConvTranspose1dFuncOptions().stride(max).output_padding(max - 1),
           ConvTranspose1dFuncOptions().dilation(max).output_padding(max - 1),
           ConvTranspose1dFuncOptions().padding(min),
           ConvTranspose1dFuncOptions().groups(min),
       }) {
    EXPECT_THROW(conv_transpose1d(x, w, Tensor(), o), Error);
  }
}

// fuzz_conv_transpose: a valid geometry with stride INT64_MAX (one input position, so the
// stride never multiplies anything) overflowed ceil_div(shift, stride) = floor((shift + stride
// - 1) / stride) in the CPU backend's tap ranges. Out = -2*2 + 2*(3-1) + 1 = 1 position, which
// only tap k = 1 reaches (o = 0*s - 2 + k*2), so y = x * w[1] + b.
TEST(BadInput, FuzzConvHugeStrideTapRanges) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const Tensor x = from_vector<double>({3.0, -1.0}, {2, 1, 1});
  const Tensor w = from_vector<double>({10.0, 2.0, 100.0}, {1, 1, 3});
  const Tensor b = from_vector<double>({0.5}, {1});
  const auto o = ConvTranspose1dFuncOptions().stride(max).padding(2).dilation(2);
  const Tensor y = conv_transpose1d(x, w, b, o);
  ASSERT_EQ(y.shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{3.0 * 2.0 + 0.5, -1.0 * 2.0 + 0.5}));
  // The same with an empty batch and a huge padding on a long input: nothing to compute, and
  // the tap ranges must not overflow either.
  const Tensor x0 = zeros({0, 1, max / 4}, TensorOptions(kFloat64));
  const auto o0 = ConvTranspose1dFuncOptions().stride(2).padding(max / 4 - 1);
  EXPECT_EQ(conv_transpose1d(x0, ones({1, 1, 1}, TensorOptions(kFloat64)), Tensor(), o0).numel(),
            0);
}

// y, dx and dw of two calls that must agree: float64 sums of at most ~10^5 O(1) products each
// (rounding ~1e-13 relative), so 1e-9 leaves a wide margin while a wrong tap is off by O(1).
void expect_same_passes(const std::vector<std::vector<double>>& got,
                        const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    for (size_t i = 0; i < got[r].size(); ++i) {
      EXPECT_NEAR(got[r][i], want[r][i], 1e-9 * (1.0 + std::abs(want[r][i])))
          << "result " << r << ", element " << i;
    }
  }
}

// y, dx and dw of sum(y^2), y = conv(x, w, stride) on fresh leaves of x0 and w0, with the stride
// `huge` and then 1: on inputs the stride never moves, every pass must agree (expect_same_passes).
template <class Conv>
void expect_huge_stride_passes_equal(const Tensor& x0, const Tensor& w0, int64_t huge, Conv conv) {
  std::vector<std::vector<double>> results[2];
  for (int k = 0; k < 2; ++k) {
    const Tensor x = x0.detach().requires_grad_(true);
    const Tensor w = w0.detach().requires_grad_(true);
    const Tensor y = conv(x, w, k == 0 ? huge : int64_t{1});
    sum(y * y).backward();
    results[k] = {y.to_vector<double>(), x.grad().to_vector<double>(),
                  w.grad().to_vector<double>()};
  }
  expect_same_passes(results[0], results[1]);
}

// fuzz_conv_transpose: the CPU's direct-kernel rules multiplied the strides (taps >= 4 x sh x
// sw) in 64 bits; a huge H stride on a one-row input is a valid geometry. With one input row
// the H stride never multiplies anything, so every pass must equal the same call with stride 1
// in H (within float64 rounding: the two may take different kernels).
TEST(BadInput, FuzzConvDirectRulesHugeStrideProduct) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 3;
  Generator gen(11);
  const Tensor x0 = randn({32, 32, 1, 8}, gen).to(kFloat64);
  const Tensor w0 = randn({32, 8, 3, 4}, gen).to(kFloat64);
  // Sums of at most 32 x 12 x 32 x 8 products of O(1) values, in float64.
  expect_huge_stride_passes_equal(x0, w0, huge, [](const Tensor& x, const Tensor& w, int64_t s) {
    return conv_transpose2d(x, w, Tensor(),
                            ConvTranspose2dFuncOptions().stride({s, 2}).padding({0, 1}));
  });
}

// fuzz_conv_transpose in CI: both strides near INT64_MAX on a one-position input (a valid
// geometry: the stride never moves an output). The CPU planner's rules compared a constant times
// both strides (up to 2^129) in int128: signed overflow, caught by UBSan in few_input_channels.
// They compare through mul_le now; every pass must equal the same call with stride 1.
TEST(BadInput, FuzzConvRulesBothStridesHuge) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  Generator gen(13);
  const Tensor x0 = randn({2, 3, 1, 1}, gen).to(kFloat64);
  const Tensor w0 = randn({3, 16, 3, 3}, gen).to(kFloat64);
  // Sums of at most 3 x 9 x 16 products of O(1) values, in float64.
  expect_huge_stride_passes_equal(x0, w0, huge, [](const Tensor& x, const Tensor& w, int64_t s) {
    return conv_transpose2d(x, w, Tensor(), ConvTranspose2dFuncOptions().stride({s, s}));
  });
}

// The direct 1-D wgrad's buffer holds the window of dy a segment of positions reads, about
// segment x stride elements per channel: a huge W stride on one-position inputs is a valid
// geometry (the stride never moves an output) whose window would overflow. Its rule bounds the
// window in 128 bits; every pass must equal the same call with stride 1.
TEST(BadInput, FuzzConvDirect1dHugeStrideWindow) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 3;
  Generator gen(12);
  const Tensor x0 = randn({512, 32, 1}, gen).to(kFloat64);
  const Tensor w0 = randn({32, 8, 4}, gen).to(kFloat64);
  // Sums of at most 512 x 32 products of O(1) values, in float64.
  expect_huge_stride_passes_equal(x0, w0, huge, [](const Tensor& x, const Tensor& w, int64_t s) {
    return conv_transpose1d(x, w, Tensor(), ConvTranspose1dFuncOptions().stride(s));
  });
}

// fuzz_conv_transpose in CI: a depthwise layer whose two taps lie a huge dilation apart, padded
// by half of it, so the output is the input's size and both taps fall outside it (a valid
// geometry). The depthwise dgrad sizes its phase rows by the taps' reach, here past 2^63 bytes:
// the count overflowed (UB). It is a tgrad::Error now; the forward reads nothing and is zero.
TEST(BadInput, FuzzDepthwiseDgradHugeDilationReach) {
  const int64_t dil = int64_t{1} << 62;
  Generator gen(14);
  const Tensor x = randn({1, 2, 1, 4}, gen).to(kFloat64).requires_grad_(true);
  const Tensor w = randn({2, 1, 1, 2}, gen).to(kFloat64).requires_grad_(true);
  const Tensor y = conv_transpose2d(
      x, w, Tensor(),
      ConvTranspose2dFuncOptions().groups(2).dilation({1, dil}).padding({0, dil / 2}));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 2, 1, 4}));
  for (double v : y.to_vector<double>())
    EXPECT_EQ(v, 0.0);
  try {
    sum(y * y).backward();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scratch"), std::string::npos) << e.what();
    return;
  }
  for (double v : x.grad().to_vector<double>())
    EXPECT_EQ(v, 0.0);
}

// The fuzzer's: a W padding and dilation of about 3.6e16 that cancel in the output's size (16
// columns at stride 2) and leave one of the three W taps inside it. The stride-2 col2im formed
// the pointer of a tap row's first output (-pad away from the plane) before adding the positions
// that land inside: an out-of-bounds pointer, undefined (the ASan + UBSan build stopped there).
// The forward must equal the same layer with that tap alone and no padding or dilation on W.
TEST(BadInput, FuzzCol2imHugePaddingCancelledByDilation) {
  const int64_t huge = 36170086419038336;
  Generator gen(15);
  const Tensor x = randn({3, 6, 7, 8}, gen).to(kFloat64);
  const Tensor w = randn({6, 1, 2, 3}, gen).to(kFloat64);
  const Tensor b = randn({1}, gen).to(kFloat64);
  const Tensor y = conv_transpose2d(x, w, b,
                                    ConvTranspose2dFuncOptions()
                                        .stride({4, 2})
                                        .padding({2, huge})
                                        .dilation({2, huge})
                                        .output_padding({2, 1}));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 1, 25, 16}));
  // Tap kw = 1 lands at iw * 2 + (huge - huge); taps 0 and 2 at -huge and +huge, outside.
  const Tensor w_mid = w.narrow(3, 1, 1);
  const Tensor want = conv_transpose2d(
      x, w_mid, b,
      ConvTranspose2dFuncOptions().stride({4, 2}).padding({2, 0}).dilation({2, 1}).output_padding(
          {2, 1}));
  ASSERT_EQ(want.sizes(), y.sizes());
  // Both sum the same products; their order may differ between the two layers' kernels.
  EXPECT_TRUE(allclose(y, want, 1e-12, 1e-12));
}

// Fuzz finding: a depthwise layer of one input row with a stride near 2^63 along H (the output's
// height does not depend on it). The CPU depthwise dgrad's distance between the dy rows of two
// input rows, stride x row length, overflowed (UBSan aborts there); with one input row there is
// nothing to go together, and dx must be that of the same layer at stride 1.
TEST(BadInput, FuzzDepthwiseDgradHugeRowStride) {
  const int64_t huge = int64_t{1} << 62;
  Generator gen(16);
  const Tensor x = randn({2, 3, 1, 5}, gen).requires_grad_(true);
  const Tensor x1 = x.detach().requires_grad_(true);
  const Tensor w = randn({3, 1, 2, 2}, gen);
  const auto opts = [](int64_t stride_h) {
    return ConvTranspose2dFuncOptions().stride({stride_h, 2}).groups(3);
  };
  const Tensor y = conv_transpose2d(x, w, {}, opts(huge));
  const Tensor y1 = conv_transpose2d(x1, w, {}, opts(1));
  ASSERT_EQ(y.sizes(), y1.sizes());
  const Tensor g = randn(y.sizes(), gen);
  y.backward(g);
  y1.backward(g);
  // The same products in the same order: the stride changes no tap's place.
  EXPECT_TRUE(allclose(x.grad(), x1.grad(), 0.0, 0.0));
}

// fuzz_conv_transpose in CI: a depthwise layer of one input row at an H stride near 2^63, on
// enough channels for the CPU's blocks of channels. Their wgrad's step between dy's rows for
// two input rows, stride x padded row, overflowed (UBSan aborts there) though one row never
// takes it. Every pass must equal the same call with stride 1.
TEST(BadInput, FuzzDepthwiseBlockedWgradHugeRowStride) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 3;
  Generator gen(17);
  // 16 channels fill the blocks at every vector width; 5 columns and 3 x 3 taps are rows the
  // blocks take in all three passes.
  const Tensor x0 = randn({2, 16, 1, 5}, gen).to(kFloat64);
  const Tensor w0 = randn({16, 1, 3, 3}, gen).to(kFloat64);
  // Sums of at most 2 x 5 x 9 products of O(1) values, in float64.
  expect_huge_stride_passes_equal(x0, w0, huge, [](const Tensor& x, const Tensor& w, int64_t s) {
    return conv_transpose2d(x, w, Tensor(),
                            ConvTranspose2dFuncOptions().stride({s, 1}).padding({1, 1}).groups(16));
  });
}

}  // namespace
}  // namespace tgrad
