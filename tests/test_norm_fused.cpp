// The fused normalization op (Backend::norm_forward / norm_backward) behind BatchNorm, GroupNorm,
// InstanceNorm2d and LayerNorm: outputs and gradients against the same norms composed from ops,
// finite differences (first and second order), bit-identical results for any CPU thread count
// and on repeated CUDA runs, CUDA against the CPU, and bad operands.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/nn.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

// One normalized layer: the module under test and the same norm composed from ops (mean, pow,
// broadcast arithmetic), given the module's weight and bias.
struct NormCase {
  std::string name;
  std::shared_ptr<nn::Module> module;
  Shape shape;
  std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)> composed;
};

Tensor normalize(const Tensor& x, const std::vector<int64_t>& dims, double eps) {
  const Tensor xc = x - mean(x, dims, true);
  return xc * pow(mean(xc * xc, dims, true) + eps, -0.5);
}

// w, b (C) applied along dim 1 of x (or dim 0 of an unbatched InstanceNorm2d input).
Tensor affine(const Tensor& y, const Tensor& w, const Tensor& b, int64_t channel_dim = 1) {
  if (!w.defined()) return y;
  Shape cs(static_cast<size_t>(y.dim()), 1);
  cs[static_cast<size_t>(channel_dim)] = w.numel();
  return y * w.reshape(cs) + b.reshape(cs);
}

std::vector<NormCase> cases() {
  const double eps = 1e-5;
  std::vector<NormCase> out;
  auto bn = [&](const std::string& name, Shape shape, bool with_affine, int dims) {
    std::vector<int64_t> reduce = {0};
    for (size_t d = 2; d < shape.size(); ++d)
      reduce.push_back(static_cast<int64_t>(d));
    std::shared_ptr<nn::Module> m;
    if (dims == 1) {
      m = std::make_shared<nn::BatchNorm1dImpl>(nn::BatchNorm1dOptions(shape[1]).affine(with_affine));
    } else {
      m = std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(shape[1]).affine(with_affine));
    }
    out.push_back({name, m, shape, [reduce, eps](const Tensor& x, const Tensor& w, const Tensor& b) {
                     return affine(normalize(x, reduce, eps), w, b);
                   }});
  };
  bn("BatchNorm2d", {3, 4, 5, 6}, true, 2);
  bn("BatchNorm2d no affine", {2, 3, 4, 4}, false, 2);
  bn("BatchNorm1d (N, C)", {7, 5}, true, 1);
  bn("BatchNorm1d (N, C, L)", {3, 4, 9}, true, 1);
  for (const int64_t groups : {1, 2, 6}) {
    const Shape shape = {3, 6, 4, 5};
    out.push_back({"GroupNorm groups=" + std::to_string(groups),
                   std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(groups, 6)), shape,
                   [groups, shape, eps](const Tensor& x, const Tensor& w, const Tensor& b) {
                     const Tensor y = normalize(x.reshape({shape[0], groups, -1}), {2}, eps);
                     return affine(y.reshape(x.shape()), w, b);
                   }});
  }
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{3, 4, 5}}) {
    const int64_t cdim = static_cast<int64_t>(shape.size()) - 3;
    out.push_back({"InstanceNorm2d rank " + std::to_string(shape.size()),
                   std::make_shared<nn::InstanceNorm2dImpl>(
                       nn::InstanceNormOptions(shape[static_cast<size_t>(cdim)]).affine(true)),
                   shape, [cdim, eps](const Tensor& x, const Tensor& w, const Tensor& b) {
                     return affine(normalize(x, {-2, -1}, eps), w, b, cdim);
                   }});
  }
  out.push_back({"LayerNorm", std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({3, 4})),
                 Shape{2, 5, 3, 4}, [eps](const Tensor& x, const Tensor& w, const Tensor& b) {
                   return normalize(x, {-2, -1}, eps) * w + b;
                 }});
  return out;
}

Tensor param(nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  return Tensor();
}

// Random affine parameters, so that a weight or bias applied to the wrong channel shows.
void randomize(nn::Module& m, Generator& gen) {
  NoGradGuard no_grad;
  for (const auto& [n, t] : m.named_parameters()) {
    Tensor p = t;
    p.copy_(randn(t.shape(), gen, t.dtype()).to(t.device()) * 0.7 + (n == "weight" ? 1.0 : 0.0));
  }
}

// Whether the graph behind y holds a node named `op` (the fused norm records under the layer's
// type name; a composed norm would record mean, sub, pow, ... instead).
bool graph_has(const Tensor& y, const std::string& op) {
  std::vector<std::shared_ptr<Node>> todo = {y.grad_fn()};
  while (!todo.empty()) {
    const std::shared_ptr<Node> node = todo.back();
    todo.pop_back();
    if (node == nullptr) continue;
    if (node->name == op) return true;
    for (const Edge& e : node->inputs)
      todo.push_back(e.node);
  }
  return false;
}

struct Result {
  Tensor y, dx, dw, db;
};

// y = m(x) and the gradients of sum(y * u).
Result run_module(nn::Module& m, const Tensor& x_value, const Tensor& u) {
  m.zero_grad();
  const Tensor x = x_value.detach().requires_grad_(true);
  const Tensor y = m.forward(x);
  sum(y * u).backward();
  const Tensor w = param(m, "weight"), b = param(m, "bias");
  return {y.detach(), x.grad(), w.defined() ? w.grad() : Tensor(),
          b.defined() ? b.grad() : Tensor()};
}

Result run_composed(const NormCase& c, const Tensor& x_value, const Tensor& u) {
  Tensor w = param(*c.module, "weight"), b = param(*c.module, "bias");
  if (w.defined()) w = w.detach().requires_grad_(true);
  if (b.defined()) b = b.detach().requires_grad_(true);
  const Tensor x = x_value.detach().requires_grad_(true);
  const Tensor y = c.composed(x, w, b);
  sum(y * u).backward();
  return {y.detach(), x.grad(), w.defined() ? w.grad() : Tensor(),
          b.defined() ? b.grad() : Tensor()};
}

void expect_close(const Result& got, const Result& want, Tolerance tol, const std::string& what) {
  EXPECT_TRUE(tensors_close(got.y, want.y, tol, what + " y"));
  EXPECT_TRUE(tensors_close(got.dx, want.dx, tol, what + " dx"));
  ASSERT_EQ(got.dw.defined(), want.dw.defined()) << what;
  if (want.dw.defined()) {
    EXPECT_TRUE(tensors_close(got.dw, want.dw, tol, what + " dw"));
  }
  if (want.db.defined()) {
    EXPECT_TRUE(tensors_close(got.db, want.db, tol, what + " db"));
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  const Tensor ha = a.cpu(), hb = b.cpu();
  return ha.shape() == hb.shape() && ha.dtype() == hb.dtype() &&
         std::memcmp(ha.raw_data(), hb.raw_data(), static_cast<size_t>(ha.nbytes())) == 0;
}

void expect_same_bits(const Result& a, const Result& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.y, b.y)) << what << " y";
  EXPECT_TRUE(same_bits(a.dx, b.dx)) << what << " dx";
  EXPECT_TRUE(same_bits(a.dw, b.dw)) << what << " dw";
  EXPECT_TRUE(same_bits(a.db, b.db)) << what << " db";
}

TEST(NormFused, MatchesTheNormComposedFromOpsInFloat64) {
  Generator gen(41);
  for (NormCase& c : cases()) {
    c.module->to(kFloat64);
    randomize(*c.module, gen);
    // A mean away from zero and a spread away from one, so that centering and scaling both act.
    const Tensor x = randn(c.shape, gen, kFloat64) * 2.5 + 0.75;
    const Tensor u = randn(c.shape, gen, kFloat64);
    expect_close(run_module(*c.module, x, u), run_composed(c, x, u), kFloat64Tight, c.name);
    EXPECT_TRUE(graph_has(c.module->forward(x.detach().requires_grad_(true)),
                          c.module->type_name()))
        << c.name << ": the fused op did not run";
  }
}

// float32 in, float64 statistics and arithmetic inside, one rounding out: the results sit
// within a few float32 ulps of the float64 composition (the saved mean and variance are rounded
// to float32 once more for backward). 1e-6 is about 8 ulps at the unit scale of these values;
// statistics summed in float32 would miss it by far on keys of hundreds of elements.
TEST(NormFused, Float32StaysWithinAFewUlpsOfFloat64) {
  Generator gen(42);
  const Tolerance tol{1e-6, 1e-6, 0.0};
  for (NormCase& c : cases()) {
    c.module->to(kFloat64);
    randomize(*c.module, gen);
    const Tensor x = (randn(c.shape, gen, kFloat64) * 2.5 + 0.75).to(kFloat32).to(kFloat64);
    const Tensor u = randn(c.shape, gen, kFloat32).to(kFloat64);
    const Result want = run_composed(c, x, u);
    c.module->to(kFloat32);
    expect_close(run_module(*c.module, x.to(kFloat32), u.to(kFloat32)), want, tol, c.name);
  }
}

TEST(NormFused, GradientsPassFiniteDifferencesTwice) {
  Generator gen(43);
  for (NormCase& c : cases()) {
    c.module->to(kFloat64);
    randomize(*c.module, gen);
    nn::Module* m = c.module.get();
    GradcheckFn f = [m](const std::vector<Tensor>& in) { return m->forward(in[0]); };
    const std::vector<Tensor> in = {randn(c.shape, gen, kFloat64).requires_grad_(true)};
    GradcheckOptions o;
    o.config = c.name;
    const GradcheckResult r1 = gradcheck(f, in, o);
    EXPECT_TRUE(r1.ok) << r1.report;
    o.fast_mode = true;
    const GradcheckResult r2 = gradgradcheck(f, in, o);
    EXPECT_TRUE(r2.ok) << r2.report;
  }
}

// Keys large enough for the CPU backend to use several threads; each key's sums keep one order.
TEST(NormFused, CpuResultsAreBitIdenticalForAnyThreadCount) {
  Generator gen(44);
  const int before = get_num_threads();
  const Shape shape = {4, 16, 96, 96};
  const Tensor x = randn(shape, gen, kFloat32) * 3.0 + 1.0;
  const Tensor u = randn(shape, gen, kFloat32);
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(16));
  nn::GroupNorm gn(nn::GroupNormOptions(4, 16));
  for (nn::Module* m : std::vector<nn::Module*>{bn.get(), gn.get()}) {
    randomize(*m, gen);
    set_num_threads(1);
    const Result one = run_module(*m, x, u);
    set_num_threads(3);
    const Result three = run_module(*m, x, u);
    expect_same_bits(one, three, m->type_name());
  }
  set_num_threads(before);
}

TEST(NormFused, BadOperandsAreErrorsNamingTheLayer) {
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(3));
  bn->to(kFloat64);
  const std::string e1 = error_of([&] { bn(zeros({2, 3, 4, 4}, kFloat32)); });
  EXPECT_NE(e1.find("BatchNorm2d: dtype mismatch: input is float32 but weight is float64"),
            std::string::npos)
      << e1;
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4));
  const std::string e2 = error_of([&] { gn(zeros({2, 4, 3}, kInt64)); });
  EXPECT_NE(e2.find("GroupNorm: argument 'input' is int64"), std::string::npos) << e2;
  // A failed forward leaves the running statistics as they were.
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
}

TEST(NormFusedCuda, MatchesTheCpuAndRepeatsBitForBit) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(45);
  // The CPU sums each key in element order, CUDA in a block's tree: float64 rounding apart.
  const Tolerance tol64 = kFloat64Tight;
  // float32: both round one float64 value at the end, except where that value sits near a
  // rounding boundary; one ulp at the unit scale.
  const Tolerance tol32{2.5e-7, 2.5e-7, 0.0};
  std::vector<NormCase> all = cases();
  // Few keys of many elements take the split path (chunks, uneven here, then a combine and an
  // elementwise kernel): batch norm's keys, and group norm's channel sums for dw and db.
  all.push_back({"BatchNorm2d split keys",
                 std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(2)),
                 Shape{13, 2, 61, 67}, nullptr});
  all.push_back({"BatchNorm2d two chunks",
                 std::make_shared<nn::BatchNorm2dImpl>(nn::BatchNorm2dOptions(3)),
                 Shape{8, 3, 48, 48}, nullptr});
  all.push_back({"GroupNorm split channel sums",
                 std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(2, 4)),
                 Shape{16, 4, 64, 64}, nullptr});
  // Channels of one element per sample (LayerNorm's per-element affine, batch norm of (N, C)):
  // the channel sums go by columns of the samples' rows, in chunks of samples.
  all.push_back({"LayerNorm long rows",
                 std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({384})),
                 Shape{2048, 384}, nullptr});
  all.push_back({"BatchNorm1d (N, C) many samples",
                 std::make_shared<nn::BatchNorm1dImpl>(nn::BatchNorm1dOptions(96)),
                 Shape{4096, 96}, nullptr});
  // Many keys of more than 16384 elements: a block per key, the wider blocks.
  all.push_back({"GroupNorm wide keys",
                 std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(4, 8)),
                 Shape{64, 8, 64, 128}, nullptr});
  for (NormCase& c : all) {
    for (const DType dtype : {kFloat64, kFloat32}) {
      c.module->to(Device(kCPU));
      c.module->to(dtype);
      randomize(*c.module, gen);
      const Tensor x = randn(c.shape, gen, dtype) * 2.0 + 0.5;
      const Tensor u = randn(c.shape, gen, dtype);
      const Result cpu = run_module(*c.module, x, u);
      c.module->to(Device(kCUDA));
      const Result gpu = run_module(*c.module, x.cuda(), u.cuda());
      const std::string what = c.name + (dtype == kFloat64 ? " float64" : " float32");
      expect_close(gpu, cpu, dtype == kFloat64 ? tol64 : tol32, what);
      expect_same_bits(run_module(*c.module, x.cuda(), u.cuda()), gpu, what + " repeated");
    }
  }
}

// Batch norm's running statistics are updated on the device; the counter too.
TEST(NormFusedCuda, RunningStatisticsMatchTheCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  Generator gen(46);
  for (const std::optional<double> momentum : {std::optional<double>(0.3), std::optional<double>()}) {
    nn::BatchNorm2d cpu(nn::BatchNorm2dOptions(5).momentum(momentum));
    nn::BatchNorm2d gpu(nn::BatchNorm2dOptions(5).momentum(momentum));
    cpu->to(kFloat64);
    gpu->to(kFloat64);
    gpu->to(Device(kCUDA));
    for (int step = 0; step < 3; ++step) {
      const Tensor x = randn({4, 5, 3, 3}, gen, kFloat64) * (1.0 + step) + step;
      cpu(x);
      gpu(x.cuda());
    }
    EXPECT_TRUE(tensors_close(gpu->running_mean, cpu->running_mean, kFloat64Tight, "mean"));
    EXPECT_TRUE(tensors_close(gpu->running_var, cpu->running_var, kFloat64Tight, "var"));
    EXPECT_EQ(gpu->num_batches_tracked.item<int64_t>(), 3);
  }
}

}  // namespace
}  // namespace tgrad::testing
