// train_step_bench: times one training step of the upsampling_decoder demo (forward, MSE loss,
// backward, Adam step) on the CPU and, when available, CUDA; prints the median over timed steps
// after warm-up (--json: one JSON object per device). bench/train_step_torch.py times the same
// model in PyTorch; bench/cpu_vs_torch.py runs both side by side.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "dataset.h"
#include "layers/nn.h"
#include "model.h"

namespace {

struct Timing {
  double median_ms, p10_ms, p90_ms;
};

Timing time_steps(decoder::Mode mode, int64_t batch, int warmup, int steps, tgrad::Device device) {
  tgrad::Generator gen(1);
  auto net = decoder::make_decoder(mode, gen);
  net->to(device);
  tgrad::optim::Adam adam(net->parameters(), tgrad::optim::AdamOptions(5e-3));
  const decoder::Batch data = decoder::make_batch(mode, batch, gen);
  const tgrad::Tensor x = data.input.to(device), target = data.target.to(device);
  std::vector<double> ms;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    adam.zero_grad();
    const tgrad::Tensor loss = tgrad::nn::mse_loss(net->forward(x), target);
    loss.backward();
    adam.step();
    if (device.is_cuda()) tgrad::cuda_synchronize(device.index());
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[static_cast<size_t>(q * static_cast<double>(ms.size() - 1))];
  };
  return {at(0.5), at(0.1), at(0.9)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode_name = "2d", device_name = "all";
  int64_t batch = 32;
  int warmup = 5, steps = 50;
  CLI::App app{"Times the upsampling_decoder training step (forward, loss, backward, Adam)."};
  app.add_option("--mode", mode_name, "2d or 1d")
      ->check(CLI::IsMember({"2d", "1d"}))
      ->capture_default_str();
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--steps", steps, "timed steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--device", device_name, "cpu, cuda or all (cuda when available)")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}))
      ->capture_default_str();
  bool json = false;
  int threads = 0;
  app.add_flag("--json", json, "print one JSON object per device instead of the table");
  app.add_option("--threads", threads, "CPU threads (set_num_threads); default: every CPU")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) tgrad::set_num_threads(threads);
  const decoder::Mode mode = mode_name == "2d" ? decoder::Mode::image2d : decoder::Mode::wave1d;

  std::vector<tgrad::Device> devices;
  if (device_name != "cuda") devices.emplace_back(tgrad::kCPU);
  if (device_name != "cpu" && tgrad::cuda_is_available()) devices.emplace_back(tgrad::kCUDA);
  if (device_name == "cuda" && devices.empty()) {
    std::fprintf(stderr, "train_step_bench: --device cuda: no CUDA device available\n");
    return 1;
  }
  if (!json) {
    std::printf(
        "# upsampling_decoder train step, mode %s, batch %ld, median of %d steps after %d "
        "warm-up, %d CPU thread(s), CPU level %s\n",
        mode_name.c_str(), batch, steps, warmup, tgrad::get_num_threads(),
        tgrad::get_cpu_capability().c_str());
    std::printf("%-8s %12s %10s %10s %10s\n", "device", "median_ms", "p10_ms", "p90_ms", "steps/s");
  }
  try {
    for (const tgrad::Device& d : devices) {
      const Timing t = time_steps(mode, batch, warmup, steps, d);
      if (json) {
        std::printf(
            "{\"device\": \"%s\", \"mode\": \"%s\", \"batch\": %ld, \"threads\": %d, "
            "\"cpu_capability\": \"%s\", \"median_ms\": %.6f, \"p10_ms\": %.6f, "
            "\"p90_ms\": %.6f}\n",
            d.str().c_str(), mode_name.c_str(), batch, tgrad::get_num_threads(),
            tgrad::get_cpu_capability().c_str(), t.median_ms, t.p10_ms, t.p90_ms);
      } else {
        std::printf("%-8s %12.3f %10.3f %10.3f %10.1f\n", d.str().c_str(), t.median_ms, t.p10_ms,
                    t.p90_ms, 1000.0 / t.median_ms);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
