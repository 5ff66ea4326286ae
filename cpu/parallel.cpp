// The CPU backend's threads: one persistent pool (started once, reused by every call), or an
// OpenMP team in a TGRAD_OPENMP build, the thread-count setting, and run_workers, with exceptions
// carried back to the caller.
#include "cpu/parallel.h"

#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <queue>
#include <system_error>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace tgrad {

namespace cpu {
namespace {

// The CPUs this process may run on (its affinity mask), or the hardware's count.
int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// TGRAD_NUM_THREADS if set (a positive integer), else the CPUs of the affinity mask.
int default_thread_count() {
  if (const char* env = std::getenv("TGRAD_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    TGRAD_CHECK(*end == '\0' && n >= 1 && n <= 4096, "cpu backend: TGRAD_NUM_THREADS='", env,
                "' must be a positive integer");
    return static_cast<int>(n);
  }
  return affinity_cpu_count();
}

std::atomic<int>& thread_setting() {
  static std::atomic<int> threads{default_thread_count()};
  return threads;
}

// Set while one call owns the team: a call arriving meanwhile (from a user's own thread, or
// nested inside a kernel) runs on its own thread instead of adding a second team of threads
// on top of the first.
std::atomic<bool> g_team_busy{false};

}  // namespace

int max_threads() {
  return thread_setting().load(std::memory_order_relaxed);
}

std::chrono::microseconds spin_from_env(const char* value) {
  if (value == nullptr || *value == '\0') return std::chrono::microseconds(200);
  char* end = nullptr;
  const long us = std::strtol(value, &end, 10);
  TGRAD_CHECK(*end == '\0' && us >= 0 && us <= 100000, "cpu backend: TGRAD_CPU_SPIN_US='", value,
              "' must be an integer from 0 to 100000");
  return std::chrono::microseconds(us);
}

namespace {

#ifndef _OPENMP
// How long an idle pool thread (or a caller waiting for the pool) spins before it sleeps.
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds spin = spin_from_env(std::getenv("TGRAD_CPU_SPIN_US"));
  return spin;
}

// Tells the core that this thread is spinning (x86's pause), so a hyperthread sibling runs faster.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The team when the build has no OpenMP: threads started once (grown on demand, never shrunk)
// that wait for work, each job numbered by an epoch. A thread spins briefly after a job, since
// the next parallel loop usually follows within microseconds, and then sleeps on a futex
// (std::atomic::wait), so idle threads cost nothing: unlike an OpenMP runtime that spins for
// milliseconds after every region, it does not take CPU time for long from the one thread that
// runs the single-threaded stretches between parallel loops (docs/design.md, "Threads").
class ThreadPool {
 public:
  // Runs body(w) for w in [0, workers), body(0) on the calling thread; returns when all are done.
  void run(int workers, const std::function<void(int)>& body) {
    // Read (and checked) here, on the caller, before a pool thread could first need it: an
    // error then reaches the caller instead of ending a pool thread.
    (void)spin_time();
    workers = std::min(workers, grow(workers - 1) + 1);
    if (workers <= 1) {
      body(0);
      return;
    }
    body_ = &body;
    pending_.store(workers - 1);
    // The epoch carries the job's size, so a thread reads both in one load.
    const uint64_t job = ((epoch_.load() >> kWorkerBits) + 1) << kWorkerBits | unsigned(workers);
    epoch_.store(job);
    if (sleepers_.load() > 0) epoch_.notify_all();
    body(0);
    wait_until_done();
  }

  // Called in a forked child, where only the forking thread exists: forget the parent's threads.
  void forget_threads_after_fork() {
    // A std::thread that still names a thread must not be destroyed; the child never joins them.
    new std::vector<std::thread>(std::move(threads_));  // NOLINT: deliberately never freed
    threads_.clear();
    sleepers_.store(0);
    caller_sleeping_.store(false);
  }

 private:
  static constexpr int kWorkerBits = 16;  // workers <= 4096 (set_num_threads' bound)

  // Starts threads until there are `wanted`; returns how many there are (fewer when the system
  // refuses one: tasks are claimed dynamically, so fewer workers give the same results).
  int grow(int wanted) {
    while (static_cast<int>(threads_.size()) < wanted) {
      const int index = static_cast<int>(threads_.size()) + 1;
      try {
        threads_.emplace_back([this, index, seen = epoch_.load()] { loop(index, seen); });
      } catch (const std::system_error&) {
        break;
      }
    }
    return static_cast<int>(threads_.size());
  }

  // Spins on `cond` for up to spin_time(), then returns false. Every kYieldChecks reads of the
  // clock (1024 checks of `cond`) it also yields the CPU: the kernel often puts a woken pool
  // thread on its waker's CPU, and a spin that never yields holds the CPU the thread it waits
  // for needs, for up to the whole spin time in every parallel loop. On 2 CPUs one process in
  // two to six ran a pass that way at half the speed of one thread, and the demo's 1-D step took
  // 2.2 ms instead of 0.6-0.7 at 2 threads. With nothing else to run, the yield returns at once; a
  // yield every 64 checks cost the 2-D step a fifth of its time (docs/performance.md,
  // twenty-fifth session).
  template <class Cond>
  static bool spin_until(Cond cond) {
    constexpr int kYieldChecks = 16;
    const auto deadline = std::chrono::steady_clock::now() + spin_time();
    for (int i = 1;; ++i) {
      if (cond()) return true;
      cpu_relax();
      if (i % 64 == 0) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        if (i % (64 * kYieldChecks) == 0) sched_yield();
      }
    }
  }

  [[noreturn]] void loop(int index, uint64_t seen) {
    for (;;) {
      if (!spin_until([&] { return epoch_.load(std::memory_order_acquire) != seen; })) {
        // seq_cst increment then load (inside wait), against run()'s seq_cst store then load of
        // sleepers_: either this thread sees the new epoch or run() sees it asleep and wakes it.
        sleepers_.fetch_add(1);
        epoch_.wait(seen);
        sleepers_.fetch_sub(1);
      }
      const uint64_t job = epoch_.load(std::memory_order_acquire);
      if (job == seen) continue;  // a spurious wake-up
      seen = job;
      if (index >= static_cast<int>(job & ((uint64_t{1} << kWorkerBits) - 1))) continue;
      (*body_)(index);  // run_team's body catches every exception
      if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) pending_.notify_one();
    }
  }

  void wait_until_done() {
    if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) return;
    caller_sleeping_.store(true);
    for (int left = pending_.load(); left != 0; left = pending_.load())
      pending_.wait(left);
    caller_sleeping_.store(false);
  }

  std::vector<std::thread> threads_;
  const std::function<void(int)>* body_ = nullptr;
  std::atomic<uint64_t> epoch_{0};  // job number << kWorkerBits | workers
  std::atomic<int> pending_{0};     // pool threads still running the current job
  std::atomic<int> sleepers_{0};    // pool threads blocked in epoch_.wait
  std::atomic<bool> caller_sleeping_{false};
};

ThreadPool& pool() {
  // Never destroyed: its threads wait for work until the process ends, and a tgrad call made
  // from a static destructor still finds it.
  static ThreadPool* const instance = [] {
    pthread_atfork(nullptr, nullptr, [] { pool().forget_threads_after_fork(); });
    return new ThreadPool;  // NOLINT: deliberately never freed
  }();
  return *instance;
}
#endif

// Workers 1..workers-1 on the team, worker 0 on the calling thread; the first exception is kept.
void run_team(int workers, const std::function<void(int)>& body) {
  std::mutex mutex;
  std::exception_ptr first_error;
  auto guarded = [&](int worker) {
    try {
      body(worker);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!first_error) first_error = std::current_exception();
    }
  };
#ifdef _OPENMP
#pragma omp parallel num_threads(workers)
  guarded(omp_get_thread_num());
#else
  pool().run(workers, guarded);
#endif
  if (first_error) std::rethrow_exception(first_error);
}

bool inside_team() {
#ifdef _OPENMP
  return omp_in_parallel() != 0;
#else
  return false;
#endif
}

}  // namespace

void run_workers(int workers, const std::function<void(int)>& body) {
  bool expected = false;
  if (workers <= 1 || inside_team() || !g_team_busy.compare_exchange_strong(expected, true)) {
    // One worker does every task: results do not depend on how many workers run, since tasks
    // are claimed dynamically and each writes only its own outputs.
    body(0);
    return;
  }
  struct Release {
    ~Release() { g_team_busy.store(false); }
  } release;
  run_team(workers, body);
}

namespace {
std::atomic<TaskModel*> g_task_model{nullptr};
thread_local bool t_in_modeled_task = false;
}  // namespace

void set_task_model(TaskModel* model) {
  g_task_model.store(model);
}

TaskModel* task_model() {
  return t_in_modeled_task ? nullptr : g_task_model.load(std::memory_order_relaxed);
}

void run_modeled(TaskModel& model, int workers, int64_t n_tasks,
                 const std::function<void(int64_t)>& task) {
  // Each task goes to the worker that is free first, as the team's workers claim them in order.
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int w = 0; w < workers; ++w)
    free_at.push(0.0);
  double makespan = 0, sum = 0, longest = 0;
  t_in_modeled_task = true;
  struct Reset {
    ~Reset() { t_in_modeled_task = false; }
  } reset;
  for (int64_t t = 0; t < n_tasks; ++t) {
    const auto start = std::chrono::steady_clock::now();
    task(t);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double done = free_at.top() + seconds;
    free_at.pop();
    free_at.push(done);
    makespan = std::max(makespan, done);
    sum += seconds;
    longest = std::max(longest, seconds);
  }
  model.task_seconds += sum;
  model.makespan_seconds += makespan;
  model.regions.push_back({n_tasks, sum, longest, makespan});
}

}  // namespace cpu

void set_num_threads(int threads) {
  TGRAD_CHECK(threads >= 1 && threads <= 4096, "set_num_threads: threads=", threads,
              " must be between 1 and 4096");
  cpu::thread_setting().store(threads);
}

int get_num_threads() {
  return cpu::max_threads();
}

}  // namespace tgrad
