// zoo_bench: times one training step of each model zoo model (examples/zoo: DCGAN's D and G
// updates, the HiFi-GAN generator's L1 step, the U-Net denoiser's MSE step) on one device and
// float32 matmul precision; prints the median after warm-up, as a table or as JSON lines.
// bench/zoo_bench_torch.py times the same steps in PyTorch; bench/zoo_bench_compare.py joins them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "data.h"
#include "layers/nn.h"
#include "train.h"

namespace {

using tgrad::Tensor;

struct Timing {
  double median_ms, p10_ms, p90_ms;
};

// `step` `warmup` times untimed, then `iters` times timed one by one (each step ends with the
// loss read back to the host, so it has finished on the device).
Timing time_steps(const std::function<void()>& step, int warmup, int iters, tgrad::Device device) {
  std::vector<double> ms;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
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

// The model's training step on one fixed batch drawn the way its program draws them.
std::function<void()> make_step(const std::string& model, int64_t batch, tgrad::Device device,
                                tgrad::Generator& gen) {
  const auto to = [device](const Tensor& t) { return t.to(device); };
  if (model == "dcgan") {
    auto gan = std::make_shared<zoo::Dcgan>(gen);
    gan->net_g->to(device);
    gan->net_d->to(device);
    const Tensor real = to(zoo::shape_images(batch, gen));
    const Tensor z = to(tgrad::randn({batch, zoo::Dcgan::kNz, 1, 1}, gen));
    return [gan, real, z] { gan->step(real, z); };
  }
  if (model == "hifigan") {
    auto hifi = std::make_shared<zoo::Hifi>(gen);
    hifi->net->to(device);
    const zoo::WaveBatch w = zoo::spectrum_waves(batch, gen);
    const Tensor spec = to(w.spec), wave = to(w.wave);
    return [hifi, spec, wave] { hifi->step(spec, wave); };
  }
  auto unet = std::make_shared<zoo::Denoiser>(gen);
  unet->net->to(device);
  const Tensor clean = to(zoo::shape_images(batch, gen));
  const Tensor noisy = clean + to(tgrad::randn(clean.shape(), gen)) * zoo::Denoiser::kNoise;
  return [unet, noisy, clean] { unet->step(noisy, clean); };
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu", precision = "highest";
  std::vector<std::string> models = {"dcgan", "hifigan", "unet"};
  int64_t batch = 32;
  int warmup = 5, iters = 30;
  bool json = false;
  CLI::App app{"Times one training step of each model zoo model (tgrad)."};
  app.add_option("--device", device_name, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--precision", precision,
                 "float32 matmul precision: highest (full float32) or high (TF32 on CUDA)")
      ->check(CLI::IsMember({"highest", "high"}))
      ->capture_default_str();
  app.add_option("--models", models, "any of dcgan, hifigan, unet")
      ->check(CLI::IsMember({"dcgan", "hifigan", "unet"}))
      ->capture_default_str();
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--iters", iters, "timed steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--json", json, "one JSON object per model instead of the table");
  CLI11_PARSE(app, argc, argv);
  try {
    if (device_name == "cuda")
      TGRAD_CHECK(tgrad::cuda_is_available(),
                  "zoo_bench: --device cuda: no CUDA device is available (none found, or tgrad "
                  "was built without CUDA)");
    const tgrad::Device device =
        device_name == "cuda" ? tgrad::Device(tgrad::kCUDA) : tgrad::Device(tgrad::kCPU);
    tgrad::set_float32_matmul_precision(precision);
    if (!json)
      std::printf(
          "# tgrad zoo train step, %s, precision %s, batch %ld, median of %d after %d\n"
          "%-8s %10s %10s %10s\n",
          device_name.c_str(), precision.c_str(), static_cast<long>(batch), iters, warmup, "model",
          "median_ms", "p10_ms", "p90_ms");
    for (const std::string& model : models) {
      tgrad::Generator gen(1);
      const Timing t = time_steps(make_step(model, batch, device, gen), warmup, iters, device);
      if (json) {
        std::printf(
            "{\"framework\": \"tgrad\", \"model\": \"%s\", \"device\": \"%s\", \"precision\": "
            "\"%s\", \"batch\": %ld, \"median_ms\": %.4f, \"p10_ms\": %.4f, \"p90_ms\": %.4f}\n",
            model.c_str(), device_name.c_str(), precision.c_str(), static_cast<long>(batch),
            t.median_ms, t.p10_ms, t.p90_ms);
      } else {
        std::printf("%-8s %10.3f %10.3f %10.3f\n", model.c_str(), t.median_ms, t.p10_ms, t.p90_ms);
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zoo_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
