// The CPU backend's threads: results bit-identical for any thread count, concurrent callers
// from user threads, the pool's behaviour (errors, changing team sizes, idle threads asleep,
// fork), the setting's checks, and the task model that cpu_conv_bench --model-threads uses.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
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

// The task model (cpu_conv_bench --model-threads): while installed, a loop's tasks all run once, on
// the calling thread, in order; its region is charged what its workers would take, which lies
// between the longest task (and the even share of the sum) and list scheduling's bound; a loop
// inside a task runs unmodeled; a loop of one worker is not modeled.
TEST(CpuThreads, TheTaskModelRunsTasksInOrderAndChargesTheirMakespan) {
  cpu::TaskModel model;
  cpu::set_task_model(&model);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int64_t> order;
  bool on_caller = true;
  cpu::parallel_for(4, 10, [&](int64_t t) {
    order.push_back(t);
    on_caller = on_caller && std::this_thread::get_id() == caller;
    // A nested loop: not a region of its own.
    cpu::parallel_for(4, 3, [&](int64_t) {});
    // Uneven tasks, the last the longest: spin for (t + 1) * 50 microseconds.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50 * (t + 1));
    while (std::chrono::steady_clock::now() < until) {
    }
  });
  cpu::parallel_for(1, 5, [](int64_t) {});
  cpu::set_task_model(nullptr);
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_TRUE(on_caller);
  ASSERT_EQ(model.regions.size(), 1U);
  const cpu::TaskModel::Region& r = model.regions[0];
  EXPECT_EQ(r.tasks, 10);
  EXPECT_DOUBLE_EQ(model.task_seconds, r.task_seconds);
  EXPECT_DOUBLE_EQ(model.makespan_seconds, r.makespan_seconds);
  EXPECT_GE(r.longest_task_seconds, 500e-6);
  EXPECT_GE(r.makespan_seconds, r.longest_task_seconds);
  EXPECT_GE(r.makespan_seconds, r.task_seconds / 4);
  // Greedy list scheduling's bound, which holds for any measured times (a preempted task is just
  // a longer one): at most the even share plus (1 - 1/4) of the longest. Charging the tasks'
  // sum, as one worker would take, breaks it for these ten tasks.
  EXPECT_LE(r.makespan_seconds, r.task_seconds / 4 + 0.75 * r.longest_task_seconds + 1e-12);
  EXPECT_EQ(cpu::task_model(), nullptr);
}

// A task that throws on a pool thread: the caller gets that exception, and the pool still runs
// the next loop whole.
TEST(CpuThreads, AnExceptionOnAPoolThreadReachesTheCallerAndThePoolGoesOn) {
  ThreadsScope restore;
  set_num_threads(4);
  EXPECT_THROW(cpu::parallel_for(4, 64,
                                 [](int64_t t) {
                                   // Slow tasks, so every worker takes some and the throw is on
                                   // whichever thread claims task 37.
                                   std::this_thread::sleep_for(std::chrono::microseconds(200));
                                   if (t == 37) throw std::runtime_error("task 37");
                                 }),
               std::runtime_error);
  std::vector<std::atomic<int>> hits(256);
  cpu::parallel_for(4, 256, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
  for (size_t t = 0; t < hits.size(); ++t)
    EXPECT_EQ(hits[t].load(), 1) << t;
}

// Thousands of back-to-back loops whose team size changes every time, some short enough that
// threads are still spinning and some after a pause long enough that they sleep: a lost wake-up
// would hang here (ctest's timeout), a thread running a stale job would double-count.
TEST(CpuThreads, LoopsOfChangingTeamSizesEachRunEveryTaskOnce) {
  ThreadsScope restore;
  set_num_threads(8);
  std::vector<std::atomic<int>> hits(64);
  int64_t expected = 0;
  for (int round = 0; round < 3000; ++round) {
    const int workers = 1 + round % 8;
    const int64_t tasks = 1 + (round * 7) % 64;
    cpu::parallel_for(workers, tasks,
                      [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
    expected += tasks;
    if (round % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int64_t total = 0;
  for (const auto& h : hits)
    total += h.load();
  EXPECT_EQ(total, expected);
}

// Idle pool threads go to sleep instead of spinning on, so they leave the CPU to the thread that
// runs the serial work between parallel loops. Read from /proc: after a loop and a pause far
// longer than the pool's spin (200 us by default), no other thread of this process is running. (The
// pause is generous so that a loaded machine cannot delay a spinning thread past it.) A thread
// caught runnable once is not proof of spinning: the ThreadSanitizer runtime's own background
// thread wakes now and then, and on a loaded machine a thread may wait its turn in that state
// (one sample, under ThreadSanitizer beside another test, saw 1 of 4). So /proc is read up to
// kSamples times, kGap apart: a pool thread that spins is running in every one.
TEST(CpuThreads, IdlePoolThreadsSleep) {
#ifdef TGRAD_TEST_OPENMP_TEAM
  GTEST_SKIP() << "built with TGRAD_OPENMP: the OpenMP runtime decides how its threads wait";
#endif
  ThreadsScope restore;
  set_num_threads(4);
  std::atomic<int64_t> sum{0};
  cpu::parallel_for(4, 64, [&](int64_t t) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    sum.fetch_add(t);
  });
  ASSERT_EQ(sum.load(), 64 * 63 / 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string self = std::to_string(gettid());
  // The other threads of this process, and how many of them are running.
  const auto sample = [&](int& others, int& running) {
    others = running = 0;
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) return false;
    while (const dirent* e = readdir(dir)) {
      const std::string tid = e->d_name;
      if (tid == "." || tid == ".." || tid == self) continue;
      std::ifstream stat("/proc/self/task/" + tid + "/stat");
      std::string line;
      std::getline(stat, line);
      // The state is the field after the parenthesised command name.
      const size_t close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size()) continue;
      ++others;
      if (line[close + 2] == 'R') ++running;
    }
    closedir(dir);
    return true;
  };
  constexpr int kSamples = 10;
  constexpr auto kGap = std::chrono::milliseconds(30);
  int others = 0, running = 0;
  for (int i = 0; i < kSamples; ++i) {
    if (!sample(others, running)) GTEST_SKIP() << "no /proc/self/task on this system";
    if (running == 0) break;
    std::this_thread::sleep_for(kGap);
  }
  EXPECT_GE(others, 3) << "the pool should have started 3 threads besides this one";
  EXPECT_EQ(running, 0) << running << " of " << others << " other threads running in each of "
                        << kSamples << " samples";
}

#if !defined(__SANITIZE_THREAD__)
// A child forked after the pool started has none of its threads: its loops must still run, on
// threads of its own (DataLoader-style code and subprocess helpers fork).
TEST(CpuThreads, AForkedChildRunsParallelLoops) {
#if defined(TGRAD_TEST_OPENMP_TEAM)
  // libgomp keeps its team across fork() and the child's first parallel region waits on threads
  // that do not exist; only tgrad's own pool (the default) re-creates its threads in a child.
  GTEST_SKIP() << "built with TGRAD_OPENMP=ON: an OpenMP team does not survive fork()";
#endif
  ThreadsScope restore;
  set_num_threads(4);
  cpu::parallel_for(4, 16, [](int64_t) {});  // the pool's threads exist now
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<std::atomic<int>> hits(100);
    cpu::parallel_for(4, 100, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
    int ok = 1;
    for (const auto& h : hits)
      ok &= static_cast<int>(h.load() == 1);
    _exit(ok == 1 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif

TEST(CpuThreads, TheSpinTimeComesFromTheEnvironmentAndIsChecked) {
  EXPECT_EQ(cpu::spin_from_env(nullptr).count(), 200);
  EXPECT_EQ(cpu::spin_from_env("").count(), 200);
  EXPECT_EQ(cpu::spin_from_env("0").count(), 0);
  EXPECT_EQ(cpu::spin_from_env("1000").count(), 1000);
  for (const char* bad : {"-1", "100001", "20us", "fast"}) {
    EXPECT_NE(
        error_of([&] {
          cpu::spin_from_env(bad);
        }).find("TGRAD_CPU_SPIN_US='" + std::string(bad) + "' must be an integer from 0 to 100000"),
        std::string::npos)
        << bad;
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
