// The CPU backend's threads: one persistent OpenMP team (created once, reused by every call, as
// PyTorch's and Eigen's pools are), the thread-count setting, and run_workers, with exceptions
// carried back to the caller.
#include "cpu/parallel.h"

#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
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

namespace {

// Workers 1..workers-1 on the team (or on threads started for this call, in a build without
// OpenMP), worker 0 on the calling thread; the first exception is kept.
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
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<size_t>(workers - 1));
    for (int w = 1; w < workers; ++w) {
      // A thread the system refuses is simply not used: tasks are claimed dynamically.
      try {
        threads.emplace_back(guarded, w);
      } catch (const std::system_error&) {
        break;
      }
    }
    guarded(0);
  }  // joins every thread
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
