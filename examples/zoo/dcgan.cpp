// dcgan: trains a DCGAN adversarially on 32x32 pictures of discs, rings and squares the program
// draws itself, writing a grid of samples from fixed noise as it learns and a checkpoint
// (netG/netD/optG/optD .safetensors) at the end.
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
  zoo::Dcgan gan(gen);
  const zoo::Parts parts = gan.parts();
  for (const auto& [name, m] : parts.modules) {
    m->to(setup.dtype);
    m->to(setup.device);
  }
  const tgrad::Tensor fixed_noise =
      tgrad::randn({16, zoo::Dcgan::kNz, 1, 1}, gen).to(setup.device, setup.dtype);
  const tgrad::Tensor real_row = zoo::shape_images(8, gen);
  std::cout << "dcgan: " << flags.steps << " steps, batch " << batch << ", " << flags.precision
            << " on " << setup.device << "\n";

  // Samples are drawn in training mode under no_grad, as the paper's reference code does: the
  // BatchNorm layers normalise the fixed batch by its own statistics.
  auto write_grid = [&](int64_t step) {
    tgrad::NoGradGuard no_grad;
    const tgrad::Tensor fake = gan.net_g->forward(fixed_noise).cpu();
    zoo::save_image_grid({real_row, fake.narrow(0, 0, 8), fake.narrow(0, 8, 8)},
                         {"real", "fake", "fake"},
                         (dir / ("samples_step" + std::to_string(step) + ".png")).string());
  };
  write_grid(0);
  zoo::Progress progress(flags.steps);
  const int64_t grid_every = std::max<int64_t>(1, flags.steps / 4);
  for (int64_t step = 1; step <= flags.steps; ++step) {
    const tgrad::Tensor real = zoo::shape_images(batch, gen).to(setup.device, setup.dtype);
    const tgrad::Tensor z =
        tgrad::randn({batch, zoo::Dcgan::kNz, 1, 1}, gen).to(setup.device, setup.dtype);
    const zoo::Dcgan::Losses l = gan.step(real, z);
    TGRAD_CHECK(std::isfinite(l.d) && std::isfinite(l.g), "dcgan: training diverged at step ", step,
                " (loss_D ", l.d, ", loss_G ", l.g, ")");
    std::ostringstream os;
    os.precision(4);
    os << "loss_D " << l.d << "  loss_G " << l.g;
    progress.update(step, os.str());
    if (step % grid_every == 0 || step == flags.steps) write_grid(step);
  }
  for (const auto& [name, m] : parts.modules)
    tgrad::nn::save_module(*m, (dir / (name + ".safetensors")).string());
  for (const auto& [name, o] : parts.optimizers)
    tgrad::nn::save_optimizer(*o, (dir / (name + ".safetensors")).string(),
                              {{"step", std::to_string(flags.steps)}});
  std::cout << "wrote " << (dir / "samples_step*.png").string() << " and the checkpoint "
            << (dir / "{netG,netD,optG,optD}.safetensors").string() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zoo::Flags flags;
  // The adversarial game needs on the order of a thousand steps before the samples show the
  // drawn shapes (coloured blobs of the right size on the dark ground by ~1000).
  flags.steps = 1500;
  flags.out = "dcgan_out";
  int64_t batch = 16;
  CLI::App app{"Train a DCGAN on procedurally drawn 32x32 shapes."};
  zoo::add_flags(app, flags);
  app.add_option("--batch", batch, "batch size")
      ->check(CLI::Range(int64_t{2}, int64_t{65536}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags, batch);
  } catch (const std::exception& e) {
    std::cerr << "dcgan: error: " << e.what() << "\n";
    return 1;
  }
}
