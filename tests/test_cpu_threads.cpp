// The CPU backend's threads: results bit-identical for any thread count, concurrent callers
// from user threads, and the setting's checks.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/random.h"
#include "cpu/parallel.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

class ThreadsScope {
 public:
  ThreadsScope() : saved_(get_num_threads()) {}
  ~ThreadsScope() { set_num_threads(saved_); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;

 private:
  int saved_;
};

// Every result of a small training-like computation: conv forward and backward (batched, batch 1,
// a wgrad whose reduction is cut into many slices, and the decompositions of small images that
// conv_transpose_cols.h describes), a regular conv, matmul, elementwise ops with broadcasting,
// and reductions (full sums, sum_to of a bias), sized past the parallel grain.
std::vector<Tensor> compute_everything() {
  Generator gen(21);
  const Tensor x = randn({2, 16, 48, 48}, gen).requires_grad_(true);
  const Tensor w = randn({16, 8, 4, 4}, gen).requires_grad_(true);
  const Tensor b = randn({8}, gen).requires_grad_(true);
  const Tensor y = conv_transpose2d(x, w, b, ConvTranspose2dFuncOptions().stride(2).padding(1));
  const Tensor z =
      conv2d(tanh(y), randn({4, 8, 3, 3}, gen), Tensor(), Conv2dFuncOptions().padding(1));
  const Tensor m = matmul(randn({300, 200}, gen), randn({200, 150}, gen));
  const Tensor e = exp(randn({70000}, gen) * 0.1) + randn({1, 70000}, gen);
  const Tensor x1 = randn({1, 32, 5000}, gen).requires_grad_(true);
  const Tensor w1 = randn({32, 32, 3}, gen).requires_grad_(true);
  const Tensor y1 = conv_transpose1d(x1, w1, Tensor(), ConvTranspose1dFuncOptions().stride(2));
  const Tensor x2 = randn({40, 4, 300}, gen).requires_grad_(true);
  const Tensor w2 = randn({4, 6, 5}, gen).requires_grad_(true);
  const Tensor y2 = conv_transpose1d(x2, w2);
  const Tensor bias = randn({300}, gen).requires_grad_(true);
  const Tensor h = tanh(randn({400, 300}, gen) + bias);
  // Small images (3x3) with many channels: several items per GEMM, forward's channel blocks
  // cut finer for more tasks, dgrad's reduction cut into parts, wgrad split over channel blocks;
  // in float64 too.
  const Tensor x3 = randn({13, 64, 3, 3}, gen).requires_grad_(true);
  const Tensor w3 = randn({64, 80, 4, 4}, gen).requires_grad_(true);
  const Tensor y3 = conv_transpose2d(x3, w3, Tensor(), ConvTranspose2dFuncOptions().stride(2));
  const Tensor x4 = randn({20, 48, 2, 2}, gen).to(kFloat64).requires_grad_(true);
  const Tensor w4 = randn({48, 96, 3, 3}, gen).to(kFloat64).requires_grad_(true);
  const Tensor y4 = conv_transpose2d(x4, w4, Tensor(), ConvTranspose2dFuncOptions().padding(1));
  // wgrad with both channel blocks and slices of its reduction; 1-D stride 4.
  const Tensor x5 = randn({4, 16, 20, 20}, gen).requires_grad_(true);
  const Tensor w5 = randn({16, 40, 4, 4}, gen).requires_grad_(true);
  const Tensor y5 = conv_transpose2d(x5, w5);
  const Tensor x6 = randn({3, 24, 700}, gen).requires_grad_(true);
  const Tensor w6 = randn({24, 16, 8}, gen).requires_grad_(true);
  const Tensor y6 = conv_transpose1d(x6, w6, Tensor(), ConvTranspose1dFuncOptions().stride(4));
  const Tensor s = sum(z * z, {0, 2, 3}) + sum(e) + mean(sum(m, {1})) + sum(y1 * y1) +
                   sum(y2 * y2) + sum(h) + sum(y3 * y3) + sum(y4 * y4).to(kFloat32) + sum(y5 * y5) +
                   sum(y6 * y6);
  sum(s).backward();
  return {y.detach(),  z.detach(),  m,           e,           s.detach(), x.grad(),  w.grad(),
          b.grad(),    y1.detach(), x1.grad(),   w1.grad(),   x2.grad(),  w2.grad(), bias.grad(),
          y3.detach(), x3.grad(),   w3.grad(),   y4.detach(), x4.grad(),  w4.grad(), y5.detach(),
          x5.grad(),   w5.grad(),   y6.detach(), x6.grad(),   w6.grad()};
}

TEST(CpuThreads, ResultsAreBitIdenticalForAnyThreadCount) {
  ThreadsScope restore;
  set_num_threads(1);
  const std::vector<Tensor> one = compute_everything();
  for (int n : {2, 3, 4, 7}) {
    set_num_threads(n);
    EXPECT_EQ(get_num_threads(), n);
    const std::vector<Tensor> many = compute_everything();
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(equal(one[i], many[i])) << "result " << i << " at " << n << " threads";
  }
}

TEST(CpuThreads, ConcurrentCallersFromUserThreadsGetTheSameBits) {
  ThreadsScope restore;
  set_num_threads(2);
  const std::vector<Tensor> expected = compute_everything();
  std::vector<std::vector<Tensor>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&got, t] { got[t] = compute_everything(); });
  for (auto& th : threads)
    th.join();
  for (const auto& g : got) {
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_TRUE(equal(g[i], expected[i])) << "result " << i;
  }
}

// The blocks parallel_for_range hands out depend on n and the grain only: every thread count
// sees the same blocks, which tile [0, n) exactly once.
TEST(CpuThreads, ParallelForRangeBlocksDependOnTheSizeOnly) {
  ThreadsScope restore;
  for (int n : {1, 3, 8}) {
    set_num_threads(n);
    std::vector<std::atomic<int>> hits(1000);
    std::vector<std::atomic<int64_t>> block_of(1000);
    cpu::parallel_for_range(1000, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        hits[static_cast<size_t>(i)].fetch_add(1);
        block_of[static_cast<size_t>(i)].store(begin);
      }
    });
    for (int64_t i = 0; i < 1000; ++i) {
      EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i << " at " << n << " threads";
      EXPECT_EQ(block_of[static_cast<size_t>(i)].load(), i / 64 * 64) << i;
    }
    int calls = 0;
    cpu::parallel_for_range(0, 64, [&](int64_t, int64_t) { ++calls; });
    EXPECT_EQ(calls, 0);
  }
}

TEST(CpuThreads, TheSettingIsChecked) {
  ThreadsScope restore;
  EXPECT_NE(error_of([] { set_num_threads(0); }).find("set_num_threads: threads=0"),
            std::string::npos);
  EXPECT_NE(error_of([] { set_num_threads(-3); }).find("must be between 1 and 4096"),
            std::string::npos);
  EXPECT_GE(get_num_threads(), 1);
}

}  // namespace
}  // namespace tgrad::testing
