// unet: trains a small U-Net to remove Gaussian noise from the drawn 32x32 shapes, writing
// noisy / denoised / clean grids of held-out pictures as it learns and a checkpoint
// (unet/optim .safetensors).
#include <filesystem>
#include <iostream>
#include <sstream>

#include "app.h"
#include "core/autograd.h"
#include "data.h"
#include "train.h"

namespace {

int run(const zoo::Flags& flags, int64_t batch) {
  const zoo::Setup setup = zoo::apply_flags(flags);
  const std::filesystem::path dir(flags.out);
  std::filesystem::create_directories(dir);
  tgrad::Generator gen(flags.seed);
  zoo::Denoiser model(gen);
  model.net->to(setup.dtype);
  model.net->to(setup.device);
  auto noisy_pair = [&setup](int64_t n, tgrad::Generator& g) {
    const tgrad::Tensor clean = zoo::shape_images(n, g);
    const tgrad::Tensor noisy = clean + tgrad::randn(clean.shape(), g) * zoo::Denoiser::kNoise;
    return std::make_pair(noisy.to(setup.device, setup.dtype), clean.to(setup.device, setup.dtype));
  };
  tgrad::Generator heldout_gen(flags.seed + 0x5eed);
  const auto [h_noisy, h_clean] = noisy_pair(8, heldout_gen);
  std::cout << "unet: " << flags.steps << " steps, batch " << batch << ", " << flags.precision
            << " on " << setup.device << "\n";

  auto evaluate = [&](int64_t step) {
    tgrad::NoGradGuard no_grad;
    const tgrad::Tensor y = model.net->forward(h_noisy);
    zoo::save_image_grid({h_noisy.cpu(), y.cpu(), h_clean.cpu()}, {"noisy", "unet", "clean"},
                         (dir / ("denoise_step" + std::to_string(step) + ".png")).string());
    return tgrad::nn::mse_loss(y, h_clean).item();
  };
  const double noisy_mse = tgrad::nn::mse_loss(h_noisy, h_clean).item();
  evaluate(0);
  zoo::Progress progress(flags.steps);
  const int64_t grid_every = std::max<int64_t>(1, flags.steps / 4);
  for (int64_t step = 1; step <= flags.steps; ++step) {
    const auto [noisy, clean] = noisy_pair(batch, gen);
    const double l = model.step(noisy, clean);
    TGRAD_CHECK(std::isfinite(l), "unet: training diverged at step ", step, " (loss ", l, ")");
    std::ostringstream os;
    os.precision(4);
    os << "MSE " << l;
    progress.update(step, os.str());
    if (step % grid_every == 0 && step != flags.steps) evaluate(step);
  }
  const double last = evaluate(flags.steps);
  tgrad::nn::save_module(*model.net, (dir / "unet.safetensors").string());
  tgrad::nn::save_optimizer(*model.opt, (dir / "optim.safetensors").string(),
                            {{"step", std::to_string(flags.steps)}});
  std::printf("held-out MSE: noisy input %.4f, denoised %.4f; wrote %s and the checkpoint %s\n",
              noisy_mse, last, (dir / "denoise_step*.png").string().c_str(),
              (dir / "{unet,optim}.safetensors").string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zoo::Flags flags;
  // Enough for the held-out MSE to fall about tenfold (80 steps only halve the visible noise).
  flags.steps = 240;
  flags.out = "unet_out";
  int64_t batch = 8;
  CLI::App app{"Train a U-Net to denoise procedurally drawn 32x32 shapes."};
  zoo::add_flags(app, flags);
  app.add_option("--batch", batch, "batch size")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags, batch);
  } catch (const std::exception& e) {
    std::cerr << "unet: error: " << e.what() << "\n";
    return 1;
  }
}
