// The CPU kernels' instruction-set levels (cpu/isa.h): every level this CPU runs agrees with the
// baseline and is bit-identical for any thread count; TGRAD_CPU_CAPABILITY's values are checked.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/random.h"
#include "cpu/isa.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

using cpu::Capability;

// One result of every per-level kernel, each sized past its parallel grain: the three conv passes
// (batched, and at batch 1), float64 too, matmul (and its transposes, via backward), the
// elementwise ops with broadcasting, sum_to and full sums.
std::vector<Tensor> level_results() {
  Generator gen(7);
  const Tensor x = randn({3, 12, 40, 36}, gen).requires_grad_(true);
  const Tensor w = randn({12, 6, 3, 5}, gen).requires_grad_(true);
  const Tensor b = randn({6}, gen).requires_grad_(true);
  const Tensor y =
      conv_transpose2d(x, w, b, ConvTranspose2dFuncOptions().stride({2, 1}).padding(1));
  const Tensor x1 = randn({1, 24, 3000}, gen).requires_grad_(true);
  const Tensor w1 = randn({24, 16, 5}, gen).requires_grad_(true);
  const Tensor y1 = conv_transpose1d(x1, w1, Tensor(), ConvTranspose1dFuncOptions().stride(2));
  // 32 input channels, 9 taps, 640 positions: wgrad takes the direct kernel, and so do dgrad
  // and the forward at AVX-512 (below it, stride 1 goes through im2col and the GEMM).
  const Tensor x2 = randn({2, 32, 16, 20}, gen).requires_grad_(true);
  const Tensor w2 = randn({32, 8, 3, 3}, gen).requires_grad_(true);
  const Tensor y2 = conv_transpose2d(x2, w2, Tensor(), ConvTranspose2dFuncOptions().padding(1));
  // 2 items of 4 x 4 (32 columns), 192 input channels, 80 rows: dgrad and wgrad take the
  // few-columns products, wgrad's last panel half full.
  const Tensor x3 = randn({2, 192, 4, 4}, gen).requires_grad_(true);
  const Tensor w3 = randn({192, 5, 4, 4}, gen).requires_grad_(true);
  const Tensor y3 = conv_transpose2d(x3, w3, Tensor(), ConvTranspose2dFuncOptions().stride(2));
  // 16 rows (one output channel, k16) on 2 x 300 positions: the few-rows products.
  const Tensor x4 = randn({2, 20, 300}, gen).requires_grad_(true);
  const Tensor w4 = randn({20, 1, 16}, gen).requires_grad_(true);
  const Tensor y4 = conv_transpose1d(x4, w4, Tensor(), ConvTranspose1dFuncOptions().stride(8));
  // 1-D, 32 input channels, stride 4, 1200 positions: wgrad takes the direct 1-D kernel.
  const Tensor x5 = randn({2, 32, 600}, gen).requires_grad_(true);
  const Tensor w5 = randn({32, 8, 8}, gen).requires_grad_(true);
  const Tensor y5 = conv_transpose1d(x5, w5, Tensor(), ConvTranspose1dFuncOptions().stride(4));
  const Tensor xd = randn({2, 8, 30, 30}, gen).to(DType::float64).requires_grad_(true);
  const Tensor wd = randn({8, 4, 3, 3}, gen).to(DType::float64).requires_grad_(true);
  const Tensor yd = conv_transpose2d(xd, wd);
  const Tensor a = randn({130, 170}, gen).requires_grad_(true);
  const Tensor m = matmul(a, randn({170, 90}, gen));
  const Tensor e =
      sigmoid(randn({200, 300}, gen)) * randn({1, 300}, gen) + exp(randn({200, 1}, gen));
  const Tensor loss = sum(y * y) + sum(tanh(y1)) + sum(y2 * y2) + sum(y3 * y3) + sum(y4 * y4) +
                      sum(y5 * y5) + sum(m * m) + sum(e) + sum(yd * yd).to(DType::float32);
  loss.backward();
  return {y.detach(), y1.detach(), y2.detach(), yd.detach(), m.detach(), e.detach(), loss.detach(),
          x.grad(),   w.grad(),    b.grad(),    x1.grad(),   w1.grad(),  x2.grad(),  w2.grad(),
          x3.grad(),  w3.grad(),   x4.grad(),   w4.grad(),   xd.grad(),  wd.grad(),  a.grad()};
}

TEST(CpuIsa, EveryLevelAgreesWithTheBaseline) {
  CpuLevelScope restore;
  cpu::set_capability(Capability::default_);
  const std::vector<Tensor> baseline = level_results();
  for (Capability c : cpu_levels_this_machine_runs()) {
    cpu::set_capability(c);
    EXPECT_EQ(get_cpu_capability(), cpu::capability_name(c));
    const std::vector<Tensor> got = level_results();
    ASSERT_EQ(got.size(), baseline.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // The levels differ only in rounding: FMA contracts a*b+c into one rounding, and wider
      // vectors change the order of the GEMMs' partial sums. Each float32 result then moves by
      // about sqrt(terms) * 6e-8 relative, some 1e-6 for the longest reductions here; 1e-5 of
      // the result's norm (relative L2) keeps a margin, while a wrong kernel (a lost tap, a
      // wrong transpose) is off by O(1). float64 rounds 2^29 times finer: 1e-12.
      const bool is_double = got[i].dtype() == DType::float64;
      const Tolerance tol = is_double ? Tolerance{0.0, 0.0, 1e-12} : Tolerance{0.0, 0.0, 1e-5};
      EXPECT_TRUE(tensors_close(
          got[i], baseline[i], tol,
          std::string("level ") + cpu::capability_name(c) + ", result " + std::to_string(i)));
    }
  }
}

TEST(CpuIsa, EveryLevelIsBitIdenticalForAnyThreadCount) {
  for_each_cpu_level([](Capability c) {
    set_num_threads(1);
    const std::vector<Tensor> one = level_results();
    for (int n : {2, 5, 16}) {
      set_num_threads(n);
      const std::vector<Tensor> many = level_results();
      for (size_t i = 0; i < one.size(); ++i)
        EXPECT_TRUE(equal(one[i], many[i]))
            << "level " << cpu::capability_name(c) << ", result " << i << " at " << n << " threads";
    }
  });
}

TEST(CpuIsa, TheEnvironmentVariableChoosesALowerLevel) {
  EXPECT_EQ(cpu::capability_from_env("", Capability::avx2), Capability::avx2);
  EXPECT_EQ(cpu::capability_from_env("default", Capability::avx512), Capability::default_);
  EXPECT_EQ(cpu::capability_from_env("avx2", Capability::avx512), Capability::avx2);
  EXPECT_EQ(cpu::capability_from_env("avx512", Capability::avx512), Capability::avx512);
}

TEST(CpuIsa, BadLevelsAreRefused) {
  EXPECT_NE(error_of([] {
              cpu::capability_from_env("sse4", Capability::avx512);
            }).find("TGRAD_CPU_CAPABILITY='sse4' must be one of default, avx2, avx512"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              cpu::capability_from_env("AVX2", Capability::avx512);
            }).find("TGRAD_CPU_CAPABILITY='AVX2'"),
            std::string::npos);
  EXPECT_NE(error_of([] { cpu::capability_from_env("avx512", Capability::avx2); })
                .find("TGRAD_CPU_CAPABILITY='avx512' is not available: this CPU and build support "
                      "at most 'avx2'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              cpu::capability_from_env("avx2", Capability::default_);
            }).find("at most 'default'"),
            std::string::npos);
  if (cpu::best_capability() != Capability::avx512) {
    CpuLevelScope restore;
    EXPECT_NE(error_of([] {
                cpu::set_capability(Capability::avx512);
              }).find("set_capability: level 'avx512' is not available"),
              std::string::npos);
  }
}

TEST(CpuIsa, TheLevelInUseIsReported) {
  const std::string name = get_cpu_capability();
  EXPECT_TRUE(name == "default" || name == "avx2" || name == "avx512") << name;
  EXPECT_EQ(name, cpu::capability_name(cpu::capability()));
}

}  // namespace
}  // namespace tgrad::testing
