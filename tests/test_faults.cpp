// Faults: running out of memory (through set_memory_limit) at every point of a backward pass and
// of an optimizer step changes nothing, and a checkpoint save that fails (a write error, or the
// process killed mid-write) leaves the previous checkpoint intact and loadable; write errors are
// made in a child process under a lowered resource limit (no descriptors, a file size cap).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/activation.h"
#include "layers/checkpoint.h"
#include "layers/container.h"
#include "layers/conv_transpose.h"
#include "layers/linear.h"
#include "layers/loss.h"
#include "layers/optimizer.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

namespace fs = std::filesystem;

// Sets a memory cap on a device for its scope and removes it after.
class MemoryLimitGuard {
 public:
  MemoryLimitGuard(Device device, int64_t bytes) : device_(device) {
    set_memory_limit(device, bytes);
  }
  ~MemoryLimitGuard() { set_memory_limit(device_, 0); }
  MemoryLimitGuard(const MemoryLimitGuard&) = delete;
  MemoryLimitGuard& operator=(const MemoryLimitGuard&) = delete;

 private:
  Device device_;
};

int64_t allocated(Device device) {
  return backend(device).memory_stats(device).allocated;
}

std::vector<Device> devices() {
  std::vector<Device> out = {Device(kCPU)};
  if (cuda_is_available()) out.emplace_back(kCUDA);
  return out;
}

std::shared_ptr<nn::SequentialImpl> make_net(uint64_t seed, Device device) {
  Generator gen(seed);
  auto net = std::make_shared<nn::SequentialImpl>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::LinearImpl>(3, 8, gen), std::make_shared<nn::TanhImpl>(),
      std::make_shared<nn::UnflattenImpl>(1, Shape{2, 4}),
      std::make_shared<nn::ConvTranspose1dImpl>(nn::ConvTranspose1dOptions(2, 3, 3).stride(2), gen)});
  net->to(device);
  return net;
}

Tensor loss_of(nn::Module& net, Device device, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = randn({5, 3}, gen).to(device);
  const Tensor target = randn({5, 3, 9}, gen).to(device);
  return nn::mse_loss(net.forward(x), target);
}

// Everything a step or a backward may change, copied (taken with no memory cap).
struct Snapshot {
  std::vector<Tensor> params, grads;
  std::vector<TensorImpl*> grad_impls;
  nn::NamedTensors optimizer_state;
};

Snapshot snapshot(const nn::Module& net, const optim::Optimizer* opt) {
  Snapshot s;
  for (const Tensor& p : net.parameters()) {
    s.params.push_back(p.detach().clone());
    s.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    s.grad_impls.push_back(p.grad().impl());
  }
  if (opt != nullptr) {
    for (const auto& [name, t] : opt->state_dict())
      s.optimizer_state.emplace_back(name, t.clone());
  }
  return s;
}

// Bit-identical parameters, .grad (same tensors, same values; unless check_grads is false) and
// optimizer state.
::testing::AssertionResult unchanged(const nn::Module& net, const optim::Optimizer* opt,
                                     const Snapshot& s, bool check_grads = true) {
  const auto params = net.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!equal(params[i], s.params[i])) return ::testing::AssertionFailure() << "param " << i;
    if (!check_grads) continue;
    if (params[i].grad().impl() != s.grad_impls[i]) {
      return ::testing::AssertionFailure() << ".grad of param " << i << " was replaced";
    }
    if (s.grads[i].defined() && !equal(params[i].grad(), s.grads[i])) {
      return ::testing::AssertionFailure() << ".grad of param " << i << " changed";
    }
  }
  if (opt != nullptr) {
    const nn::NamedTensors state = opt->state_dict();
    if (state.size() != s.optimizer_state.size()) {
      return ::testing::AssertionFailure() << "optimizer state has " << state.size()
                                           << " entries, had " << s.optimizer_state.size();
    }
    for (size_t i = 0; i < state.size(); ++i) {
      if (state[i].first != s.optimizer_state[i].first ||
          !equal(state[i].second.to(kCPU), s.optimizer_state[i].second.to(kCPU))) {
        return ::testing::AssertionFailure() << "optimizer state '" << state[i].first << "'";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Raises a memory cap from nothing, a few bytes at a time, until `attempt` succeeds; after every
// failure (which must be an out-of-memory tgrad::Error) `check` must pass. Returns the failures.
template <class Attempt, class Check>
int fail_at_every_point(Device device, Attempt attempt, Check check) {
  const int64_t increment = device.is_cpu() ? 16 : 512;  // CUDA blocks are 512-byte multiples
  int failures = 0;
  for (int64_t budget = 0;; budget += increment) {
    bool ok = false;
    {
      MemoryLimitGuard cap(device, allocated(device) + budget);
      try {
        attempt();
        ok = true;
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
        EXPECT_NE(what.find("limit"), std::string::npos) << what;
      }
    }
    if (ok) return failures;
    ++failures;
    check();
    if (::testing::Test::HasFailure() || budget > (int64_t{16} << 20)) return failures;
  }
}

TEST(Faults, MemoryLimitIsEnforcedAndReported) {
  for (Device device : devices()) {
    SCOPED_TRACE(device.str());
    const int64_t before = allocated(device);
    {
      MemoryLimitGuard cap(device, before + 4096);
      EXPECT_EQ(memory_limit(device), before + 4096);
      Tensor ok = zeros({256}, TensorOptions().device(device));  // 1 KiB
      try {
        zeros({4096}, TensorOptions().device(device));
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
        EXPECT_NE(what.find("16384 bytes"), std::string::npos) << what;
        EXPECT_NE(what.find("limit of " + std::to_string(before + 4096)), std::string::npos)
            << what;
      }
    }
    EXPECT_EQ(memory_limit(device), 0);
    EXPECT_EQ(allocated(device), before);
    Tensor big = zeros({4096}, TensorOptions().device(device));  // no cap: fine
  }
}

// Out of memory at any point of backward: every .grad stays as it was (here, holding the
// gradients of an earlier backward, so the accumulation path is covered too).
TEST(Faults, OutOfMemoryInBackwardChangesNoGradient) {
  for (Device device : devices()) {
    SCOPED_TRACE(device.str());
    auto net = make_net(1, device);
    auto reference = make_net(1, device);
    loss_of(*net, device, 10).backward();
    loss_of(*reference, device, 10).backward();
    const Tensor loss = loss_of(*net, device, 11);
    const Snapshot before = snapshot(*net, nullptr);
    const int failures = fail_at_every_point(
        device, [&] { loss.backward(Tensor(), /*retain_graph=*/true); },
        [&] { EXPECT_TRUE(unchanged(*net, nullptr, before)); });
    EXPECT_GT(failures, 3);
    loss_of(*reference, device, 11).backward();
    const auto got = net->parameters(), want = reference->parameters();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(equal(got[i].grad(), want[i].grad())) << i;
  }
}

// Out of memory at any point of an optimizer step (first step and a later one, where state
// exists): parameters, .grad and optimizer state are bit-identical to before; the step that
// finally succeeds equals an uncapped step.
TEST(Faults, OutOfMemoryInOptimizerStepChangesNothing) {
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(const nn::Module&)>;
  const std::vector<std::pair<std::string, Factory>> optimizers = {
      {"sgd_nesterov",
       [](const nn::Module& m) {
         return std::make_unique<optim::SGD>(
             m.parameters(),
             optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
       }},
      {"adam_amsgrad",
       [](const nn::Module& m) {
         return std::make_unique<optim::Adam>(
             m.parameters(), optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.1));
       }},
      {"adamw",
       [](const nn::Module& m) {
         return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions(0.01));
       }},
  };
  for (Device device : devices()) {
    for (const auto& [name, make] : optimizers) {
      SCOPED_TRACE(device.str() + " " + name);
      auto net = make_net(2, device);
      auto reference = make_net(2, device);
      auto opt = make(*net);
      auto ref_opt = make(*reference);
      for (uint64_t step = 0; step < 2; ++step) {
        opt->zero_grad();
        ref_opt->zero_grad();
        loss_of(*net, device, 20 + step).backward();
        loss_of(*reference, device, 20 + step).backward();
        const Snapshot before = snapshot(*net, opt.get());
        const int failures = fail_at_every_point(
            device, [&] { opt->step(); }, [&] { EXPECT_TRUE(unchanged(*net, opt.get(), before)); });
        EXPECT_GT(failures, 3);  // it failed at many points, including after some parameters
        ref_opt->step();
        const Snapshot want = snapshot(*reference, ref_opt.get());
        EXPECT_TRUE(unchanged(*net, opt.get(), want, /*check_grads=*/false));
      }
    }
  }
}

// ---- checkpoints ----

class CheckpointFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tgrad_faults_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

// Tensors whose every value is `value`, so that a loaded file shows which save it came from.
nn::NamedTensors uniform_tensors(double value, int64_t numel) {
  return {{"a", full({numel}, value)},
          {"b", full({3, 5}, value, kFloat64)},
          {"c", full({numel / 2}, value)}};
}

// The value a loaded file holds everywhere; fails the test if the file is mixed or malformed.
double uniform_value(const std::string& file) {
  const safetensors::File f = safetensors::load(file);
  EXPECT_EQ(f.tensors.size(), 3u);
  double value = f.tensors.at(0).second.to_vector<double>().at(0);
  for (const auto& [name, t] : f.tensors) {
    for (double v : t.to_vector<double>()) {
      if (v != value) {
        ADD_FAILURE() << "tensor '" << name << "' mixes " << v << " and " << value;
        return value;
      }
    }
  }
  return value;
}

// Runs `save` in a child process whose `resource` limit is lowered to `limit` (so that the save
// fails there and nowhere else) and returns the message of the tgrad::Error it threw, or what
// happened instead.
std::string error_in_child(int resource, rlim_t limit, const std::function<void()>& save) {
  int fds[2];
  if (::pipe(fds) != 0) return "<pipe failed>";
  const pid_t child = ::fork();
  if (child < 0) return "<fork failed>";
  if (child == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);  // a write past RLIMIT_FSIZE then fails with EFBIG
    rlimit rl{};
    ::getrlimit(resource, &rl);
    rl.rlim_cur = limit;
    std::string message = "<no tgrad::Error thrown>";
    if (::setrlimit(resource, &rl) != 0) {
      message = "<setrlimit failed>";
    } else {
      try {
        save();
      } catch (const Error& e) {
        message = e.what();
      } catch (...) {
        message = "<another exception>";
      }
    }
    const ssize_t written = ::write(fds[1], message.data(), message.size());
    ::_exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;)
    message.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "<child failed> " + message;
  return message;
}

// The temporary files left in the directory of `file`.
std::vector<std::string> temporaries(const std::string& file) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(file).parent_path())) {
    if (e.path().filename().string().find(".tmp") != std::string::npos)
      out.push_back(e.path().filename().string());
  }
  return out;
}

TEST_F(CheckpointFaults, WriteErrorKeepsThePreviousCheckpoint) {
  const std::string file = path("model.safetensors");
  safetensors::save(file, uniform_tensors(1.0, 1000), {});
  // The temporary file cannot be created: no file descriptor is left. Not under the sanitizers:
  // their runtimes open files of their own (UBSan's type checks read the process's memory map)
  // and abort the child when they cannot, before tgrad's error is seen.
#ifndef __SANITIZE_ADDRESS__
  const nn::NamedTensors second = uniform_tensors(2.0, 1000);
  const std::string no_fd =
      error_in_child(RLIMIT_NOFILE, 0, [&] { safetensors::save(file, second, {}); });
  EXPECT_NE(no_fd.find("cannot open a temporary file"), std::string::npos) << no_fd;
  EXPECT_EQ(uniform_value(file), 1.0);
  EXPECT_EQ(temporaries(file), std::vector<std::string>{});
#endif
  // A write fails part-way (the disk is full, here: the file size limit is reached).
  const nn::NamedTensors third = uniform_tensors(3.0, 100000);
  const std::string full =
      error_in_child(RLIMIT_FSIZE, 64 << 10, [&] { safetensors::save(file, third, {}); });
  EXPECT_NE(full.find("failed: File too large (disk full?)"), std::string::npos) << full;
  EXPECT_EQ(uniform_value(file), 1.0);
  EXPECT_EQ(temporaries(file), std::vector<std::string>{});
  // The rename fails (the final name is a non-empty directory): the old file is another path,
  // so check that nothing is left behind and a later save works.
  const std::string blocked = path("blocked.safetensors");
  fs::create_directories(blocked + "/x");
  EXPECT_THROW(safetensors::save(blocked, uniform_tensors(4.0, 10), {}), Error);
  EXPECT_EQ(temporaries(file), std::vector<std::string>{});
  safetensors::save(file, uniform_tensors(5.0, 1000), {});
  EXPECT_EQ(uniform_value(file), 5.0);
}

// A child process saves a large checkpoint in a loop, alternating two contents, and is killed
// at several moments: the file at the final path always loads whole, as one save or the other.
TEST_F(CheckpointFaults, KilledMidWriteLeavesAWholeCheckpoint) {
  const std::string file = path("model.safetensors");
  const nn::NamedTensors first = uniform_tensors(1.0, 1 << 20);  // ~6 MB per file
  const nn::NamedTensors second = uniform_tensors(2.0, 1 << 20);
  safetensors::save(file, first, {});
  for (int delay_ms : {3, 17, 40, 85, 150}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The child only writes files (no kernels, no threads) until it is killed.
      for (int i = 0;; ++i)
        safetensors::save(file, i % 2 == 0 ? second : first, {});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    const double v = uniform_value(file);
    EXPECT_TRUE(v == 1.0 || v == 2.0) << v;
  }
  // A killed save leaves its uniquely named temporary file (at most one per kill); the stale
  // files do not disturb the next save.
  EXPECT_LE(temporaries(file).size(), 5u);
  safetensors::save(file, first, {});
  EXPECT_EQ(uniform_value(file), 1.0);
}

}  // namespace
}  // namespace tgrad
