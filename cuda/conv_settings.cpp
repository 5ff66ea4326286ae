// The conv trace, kernel override and benchmark mode (set_conv_trace / set_conv_kernel /
// set_conv_benchmark of core/device.h, and TGRAD_CONV_TRACE / TGRAD_CONV_KERNEL /
// TGRAD_CONV_BENCHMARK, read once), plan_conv_call, which applies them around plan_conv and
// caches its plans, run_conv_call (benchmark mode's timed choice), and the last plan of each
// pass. Plain C++, in every build.
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/device.h"
#include "core/error.h"
#include "cuda/conv_plan.h"

namespace tgrad {
namespace cuda {

namespace {

// Everything plan_conv's result depends on: its arguments, with the forced kernel and the
// preferences as plan_conv_call reads them. The settings are in the key rather than clearing the
// cache when they change, so a call that read a setting just before it changed still stores its
// plan under the inputs it was planned for.
struct PlanKey {
  ConvPass pass;
  ConvGeometry g;  // precision included
  DType dtype;
  DeviceCaps caps;
  std::string forced;
  bool prefer;
  bool operator==(const PlanKey&) const = default;
};

// Equality decides a hit; the hash mixes the fields that differ between a program's calls (the
// device's caps and the forced kernel rarely do).
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 0;
    const auto mix = [&h](uint64_t v) {
      // splitmix64's finalizer over the running value: every input bit reaches every output bit.
      h ^= v + 0x9e3779b97f4a7c15ULL;
      h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
      h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
      h ^= h >> 31;
    };
    const ConvGeometry& g = k.g;
    mix(static_cast<uint64_t>(k.pass) | static_cast<uint64_t>(k.dtype) << 8 |
        static_cast<uint64_t>(g.precision) << 16 | static_cast<uint64_t>(k.prefer) << 24 |
        static_cast<uint64_t>(g.spatial_dims) << 32);
    for (int64_t v : {g.batch, g.in_channels, g.out_channels, g.groups})
      mix(static_cast<uint64_t>(v));
    for (const auto* a : {&g.in_size, &g.out_size, &g.kernel, &g.stride, &g.padding, &g.dilation,
                          &g.output_padding}) {
      mix(static_cast<uint64_t>((*a)[0]));
      mix(static_cast<uint64_t>((*a)[1]));
    }
    return static_cast<size_t>(h);
  }
};

struct ConvSettings {
  bool trace = false;
  std::string spec;                   // as set, for get_conv_kernel
  std::array<std::string, 3> forced;  // per ConvPass; empty: the planner chooses
  std::string env_error;              // a bad TGRAD_CONV_KERNEL, reported at every conv call
  std::array<std::shared_ptr<const ConvPlan>, 3> last;  // null until a call of the pass
  std::unordered_map<PlanKey, std::shared_ptr<const ConvPlan>, PlanKeyHash> plans;
  // Benchmark mode's choices, keyed like plans (forced always empty: forcing bypasses the mode).
  std::unordered_map<PlanKey, std::shared_ptr<const ConvPlan>, PlanKeyHash> benchmarked;
};

bool kernel_of_pass(const std::string& name, ConvPass pass) {
  for (const Candidate& c : conv_candidates())
    if (c.pass == pass && name == c.kernel) return true;
  return false;
}

// Parses "", "name" (every pass that has a kernel of that name) or "fwd=a,dgrad=b,wgrad=c"
// (any subset); tgrad::Error naming `who` and the spec otherwise.
std::array<std::string, 3> parse_spec(const char* who, const std::string& spec) {
  std::array<std::string, 3> forced;
  if (spec.empty()) return forced;
  if (spec.find('=') == std::string::npos) {
    bool any = false;
    for (int i = 0; i < 3; ++i) {
      if (kernel_of_pass(spec, static_cast<ConvPass>(i))) forced[static_cast<size_t>(i)] = spec;
      any = any || !forced[static_cast<size_t>(i)].empty();
    }
    TGRAD_CHECK(any, who, ": unknown conv kernel '", spec, "' (kernels: ", kKernelWgmma, ", ",
                kKernelMmaSync, ", ", kKernelBatchWgmma, ", ", kKernelBatchIgemm, ", ",
                kKernelDepthwise, ", ", kKernelThin, ", ", kKernelDirect, ", ", kKernelGemm, ", ",
                kKernelFma, ")");
    return forced;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, comma - start);
    const size_t eq = item.find('=');
    TGRAD_CHECK(eq != std::string::npos, who, ": '", spec,
                "' is neither a kernel name nor pass=kernel items (fwd=wgmma,wgrad=fma)");
    const std::string pass_name = item.substr(0, eq), kernel = item.substr(eq + 1);
    int pass = -1;
    for (int i = 0; i < 3; ++i)
      if (pass_name == conv_pass_name(static_cast<ConvPass>(i))) pass = i;
    TGRAD_CHECK(pass >= 0, who, ": unknown pass '", pass_name, "' in '", spec,
                "' (passes: fwd, dgrad, wgrad)");
    TGRAD_CHECK(kernel_of_pass(kernel, static_cast<ConvPass>(pass)), who, ": no kernel '", kernel,
                "' for pass ", pass_name, " in '", spec, "'");
    forced[static_cast<size_t>(pass)] = kernel;
    start = comma + 1;
  }
  return forced;
}

// The settings, initialised from the environment on first use; callers hold mutex().
std::mutex& mutex() {
  static std::mutex m;
  return m;
}
ConvSettings& settings() {
  static ConvSettings s = [] {
    ConvSettings init;
    const char* trace = std::getenv("TGRAD_CONV_TRACE");
    init.trace = trace != nullptr && std::string(trace) == "1";
    const char* kernel = std::getenv("TGRAD_CONV_KERNEL");
    if (kernel != nullptr) {
      try {
        init.forced = parse_spec("TGRAD_CONV_KERNEL", kernel);
        init.spec = kernel;
      } catch (const Error& e) {
        init.env_error = e.what();
      }
    }
    return init;
  }();
  return s;
}

// Benchmark mode, read without the lock by every conv call (run_conv_call), so that the mode off
// costs the launchers no lock; TGRAD_CONV_BENCHMARK sets it on first use.
std::atomic<bool>& benchmark_flag() {
  static std::atomic<bool> flag{[] {
    const char* v = std::getenv("TGRAD_CONV_BENCHMARK");
    return v != nullptr && std::string(v) == "1";
  }()};
  return flag;
}

}  // namespace

bool conv_trace_enabled() {
  std::lock_guard<std::mutex> lock(mutex());
  return settings().trace;
}

bool conv_benchmark_enabled() {
  return benchmark_flag().load();
}

std::string conv_kernel_forced(ConvPass pass) {
  std::lock_guard<std::mutex> lock(mutex());
  const ConvSettings& s = settings();
  TGRAD_CHECK(s.env_error.empty(), s.env_error);
  return s.forced[static_cast<size_t>(pass)];
}

namespace {
std::atomic<bool> g_preferences{true};
}  // namespace

void set_conv_preferences(bool on) {
  g_preferences.store(on);
}

bool conv_preferences() {
  return g_preferences.load();
}

namespace {
// A call's plan, hit or miss: its trace line and the pass's last plan. Callers hold mutex(), which
// also keeps trace lines of concurrent calls whole.
std::shared_ptr<const ConvPlan> record(ConvSettings& s, std::shared_ptr<const ConvPlan> plan) {
  if (s.trace) std::cerr << plan->describe() << std::endl;
  s.last[static_cast<size_t>(plan->pass)] = plan;
  return plan;
}
}  // namespace

std::shared_ptr<const ConvPlan> plan_conv_call(ConvPass pass, const ConvGeometry& g, DType dtype,
                                               const DeviceCaps& caps) {
  PlanKey key{pass, g, dtype, caps, {}, g_preferences.load()};
  {
    std::lock_guard<std::mutex> lock(mutex());
    ConvSettings& s = settings();
    TGRAD_CHECK(s.env_error.empty(), s.env_error);
    key.forced = s.forced[static_cast<size_t>(pass)];
    if (const auto hit = s.plans.find(key); hit != s.plans.end()) return record(s, hit->second);
  }
  // Planned outside the lock, so that other threads' hits do not wait for it. A throw (a forced
  // kernel that cannot run the call) stores nothing, so the next such call throws again.
  auto plan =
      std::make_shared<const ConvPlan>(plan_conv(pass, g, dtype, caps, key.forced, key.prefer));
  // A full cache is emptied into `dropped`, declared before the lock so that its plans are freed
  // after the lock is released, not while other threads' hits wait.
  decltype(ConvSettings::plans) dropped;
  std::lock_guard<std::mutex> lock(mutex());
  ConvSettings& s = settings();
  if (s.plans.size() >= kMaxCachedConvPlans) dropped.swap(s.plans);
  // A thread that missed on the same key meanwhile stored an equal plan: either serves.
  s.plans.emplace(std::move(key), plan);
  return record(s, std::move(plan));
}

void run_conv_call(ConvPass pass, const ConvGeometry& g, DType dtype, const DeviceCaps& caps,
                   const ConvRunner& run, const ConvTimer& time) {
  if (!conv_benchmark_enabled()) {
    run(*plan_conv_call(pass, g, dtype, caps));
    return;
  }
  PlanKey key{pass, g, dtype, caps, {}, g_preferences.load()};
  bool forced = false;
  std::shared_ptr<const ConvPlan> hit;
  {
    std::lock_guard<std::mutex> lock(mutex());
    ConvSettings& s = settings();
    TGRAD_CHECK(s.env_error.empty(), s.env_error);
    forced = !s.forced[static_cast<size_t>(pass)].empty();
    if (!forced) {
      if (const auto it = s.benchmarked.find(key); it != s.benchmarked.end())
        hit = record(s, it->second);
    }
  }
  if (forced) {
    run(*plan_conv_call(pass, g, dtype, caps));
    return;
  }
  if (hit) {
    run(*hit);  // outside the lock: other threads' calls do not wait for this one's kernels
    return;
  }
  // The planner's plan first, so that a tie keeps it, then every other kernel of the pass that
  // can run the call when forced. Timed outside the lock: the runs take milliseconds.
  std::vector<ConvPlan> plans{plan_conv(pass, g, dtype, caps, "", key.prefer)};
  for (const Candidate& c : conv_candidates()) {
    if (c.pass != pass || plans.front().kernel == c.kernel) continue;
    try {
      plans.push_back(plan_conv(pass, g, dtype, caps, c.kernel));
    } catch (const Error&) {
      // This kernel cannot run the call.
    }
  }
  std::vector<std::pair<std::string, double>> timed;
  size_t best = 0;
  double best_ms = 0.0;
  for (size_t i = 0; i < plans.size(); ++i) {
    double ms = 0.0;
    if (i == 0) {
      ms = time(run, plans[i]);  // the planner's own plan must run: its error is the call's
    } else {
      try {
        ms = time(run, plans[i]);
      } catch (const Error&) {
        continue;  // e.g. its workspace did not fit next to the caller's tensors
      }
    }
    timed.emplace_back(plans[i].label(), ms);
    if (i == 0 || ms < best_ms) best = i, best_ms = ms;
  }
  auto chosen = std::make_shared<ConvPlan>(std::move(plans[best]));
  chosen->timed = std::move(timed);
  std::shared_ptr<const ConvPlan> plan;
  {
    decltype(ConvSettings::benchmarked) dropped;  // freed after the lock, as in plan_conv_call
    std::lock_guard<std::mutex> lock(mutex());
    ConvSettings& s = settings();
    if (s.benchmarked.size() >= kMaxCachedConvPlans) dropped.swap(s.benchmarked);
    // A thread that benchmarked the same key meanwhile keeps its choice: one plan per key.
    plan = record(s, s.benchmarked.emplace(std::move(key), std::move(chosen)).first->second);
  }
  run(*plan);
}

size_t conv_plans_benchmarked() {
  std::lock_guard<std::mutex> lock(mutex());
  return settings().benchmarked.size();
}

size_t conv_plans_cached() {
  std::lock_guard<std::mutex> lock(mutex());
  return settings().plans.size();
}

ConvPlan last_conv_plan(ConvPass pass) {
  std::shared_ptr<const ConvPlan> last;
  {
    std::lock_guard<std::mutex> lock(mutex());
    last = settings().last[static_cast<size_t>(pass)];
  }
  return last ? *last : ConvPlan{};
}

}  // namespace cuda

void set_conv_trace(bool enabled) {
  std::lock_guard<std::mutex> lock(cuda::mutex());
  cuda::settings().trace = enabled;
}

bool get_conv_trace() {
  return cuda::conv_trace_enabled();
}

void set_conv_benchmark(bool enabled) {
  cuda::benchmark_flag().store(enabled);
}

bool get_conv_benchmark() {
  return cuda::conv_benchmark_enabled();
}

void set_conv_kernel(const std::string& spec) {
  std::array<std::string, 3> forced = cuda::parse_spec("set_conv_kernel", spec);
  std::lock_guard<std::mutex> lock(cuda::mutex());
  cuda::ConvSettings& s = cuda::settings();
  s.forced = std::move(forced);
  s.spec = spec;
  s.env_error.clear();
}

std::string get_conv_kernel() {
  std::lock_guard<std::mutex> lock(cuda::mutex());
  return cuda::settings().spec;
}

}  // namespace tgrad
