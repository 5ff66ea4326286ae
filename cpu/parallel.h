// Fixed-decomposition parallel loops for the CPU kernels: tasks [0, n) are claimed by up to
// `threads` threads of one persistent team, the caller being one of them. A kernel splits its work
// by the problem's shape only, never by the thread count, so its results are bit-identical for any
// thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

namespace tgrad::cpu {

// Runs body(worker) for worker in [0, workers) on the persistent team, the calling thread
// being worker 0, and waits for them all. The first exception any worker throws is rethrown
// here. A call made while the team is busy (from another user thread, or nested in a kernel)
// runs body(0) alone on its own thread: no oversubscription, and, since tasks are claimed
// dynamically, the same results (docs/design.md, "Determinism" and "Threads").
void run_workers(int workers, const std::function<void(int)>& body);

// The threads a kernel may use: set_num_threads() (core/device.h), by default TGRAD_NUM_THREADS
// or the CPUs of the process's affinity mask.
int max_threads();

// How long the pool's idle threads spin before they sleep, from TGRAD_CPU_SPIN_US's value:
// microseconds from 0 to 100000, 200 when unset or empty. The default bridges the small serial
// ops between a training step's parallel loops (a futex wake-up costs more than such a gap)
// without taking a core from the thread that runs them for long.
std::chrono::microseconds spin_from_env(const char* value);

// The thread count for a kernel doing `flops` of work: 1 when the work is too small to be worth
// starting a thread for, else max_threads.
inline int threads_for(double flops, int max_threads) {
  constexpr double kMinFlopsToThread = 2e6;
  return flops < kMinFlopsToThread ? 1 : std::max(1, max_threads);
}

// Calls fn(state, task) once for every task in [0, n_tasks). Each thread first builds its own
// state with make_state() (scratch buffers), so scratch is thread-private. Tasks must write
// disjoint outputs.
template <class MakeState, class Fn>
void parallel_for(int max_threads, int64_t n_tasks, MakeState&& make_state, Fn&& fn) {
  const int workers = static_cast<int>(std::min<int64_t>(std::max(1, max_threads), n_tasks));
  if (workers <= 1) {
    auto state = make_state();
    for (int64_t t = 0; t < n_tasks; ++t)
      fn(state, t);
    return;
  }
  std::atomic<int64_t> next{0};
  run_workers(workers, [&](int) {
    auto state = make_state();
    for (int64_t t = next.fetch_add(1); t < n_tasks; t = next.fetch_add(1))
      fn(state, t);
  });
}

// parallel_for without per-thread state.
template <class Fn>
void parallel_for(int max_threads, int64_t n_tasks, Fn&& fn) {
  parallel_for(
      max_threads, n_tasks, [] { return 0; }, [&](int, int64_t t) { fn(t); });
}

// Calls fn(begin, end) for the consecutive blocks of [0, n) of `grain` elements each (the last
// one shorter), on up to max_threads() threads when there are several blocks, else on the
// calling thread. The blocks depend on n and grain only, never on the thread count, so a loop
// whose blocks write disjoint outputs (an optimizer's update of a flat parameter, say) gives the
// same bits for any thread count.
template <class Fn>
void parallel_for_range(int64_t n, int64_t grain, Fn&& fn) {
  const int64_t g = std::max<int64_t>(1, grain);
  const int64_t blocks = n <= 0 ? 0 : (n - 1) / g + 1;
  parallel_for(blocks > 1 ? max_threads() : 1, blocks,
               [&](int64_t b) { fn(b * g, std::min(n, (b + 1) * g)); });
}

}  // namespace tgrad::cpu
