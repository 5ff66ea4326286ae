// run_workers: the one place the CPU backend starts threads (std::jthread, joined before
// returning), with exceptions carried back to the caller.
#include "cpu/parallel.h"

#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace tgrad::cpu {

void run_workers(int workers, const std::function<void(int)>& body) {
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
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<size_t>(std::max(0, workers - 1)));
    for (int w = 1; w < workers; ++w) {
      // Tasks are claimed dynamically, so fewer threads than asked for changes only the speed,
      // never the result: a thread the system refuses is simply not used.
      try {
        threads.emplace_back(guarded, w);
      } catch (const std::system_error&) {
        break;
      }
    }
    guarded(0);
  }  // joins every thread
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tgrad::cpu
