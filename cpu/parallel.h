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
#include <vector>

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

// A developer's view of how a kernel's tasks would spread over more cores than the machine has
// (cpu_conv_bench --model-threads). While one is installed, each parallel_for that would run on
// several workers runs its tasks one by one on the calling thread instead, times each, and adds
// to the model the time its workers would take claiming them in order: the longest of their sums
// when each task goes to the first free worker. It leaves out what cores share (memory
// bandwidth, L3) and the team's start-up, so it is an estimate of the cut, not of a machine.
struct TaskModel {
  struct Region {
    int64_t tasks;
    double task_seconds, longest_task_seconds, makespan_seconds;
  };
  double task_seconds = 0;      // every modeled task's time, summed
  double makespan_seconds = 0;  // the modeled regions' times, summed
  std::vector<Region> regions;  // each region, in order
};
// Installs `model` (nullptr: none); not for use while kernels run on other threads.
void set_task_model(TaskModel* model);
// The installed model, or nullptr (also inside a modeled task: nested loops run as they would
// in a busy team, on one thread).
TaskModel* task_model();
// Runs task(t) for t in [0, n_tasks) on this thread and charges `workers` workers' time to the
// model.
void run_modeled(TaskModel& model, int workers, int64_t n_tasks,
                 const std::function<void(int64_t)>& task);

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
  if (TaskModel* model = task_model(); model != nullptr) {
    auto state = make_state();
    run_modeled(*model, workers, n_tasks, [&](int64_t t) { fn(state, t); });
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
