// hifigan: trains a HiFi-GAN-style generator to turn coarse spectrum-like frames into the
// waveform they describe, plotting target against output on held-out clips as it learns, and
// saving a checkpoint (generator/optim_g .safetensors).
#include <filesystem>
#include <iostream>
#include <sstream>

#include "../upsampling_decoder/plot.h"
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
  zoo::Hifi model(gen);
  model.net->to(setup.dtype);
  model.net->to(setup.device);
  tgrad::Generator heldout_gen(flags.seed + 0x5eed);
  const zoo::WaveBatch heldout = zoo::spectrum_waves(8, heldout_gen);
  std::cout << "hifigan: " << flags.steps << " steps, batch " << batch << ", " << flags.precision
            << " on " << setup.device << "\n";

  auto evaluate = [&](int64_t step) {
    tgrad::NoGradGuard no_grad;
    const tgrad::Tensor y = model.net->forward(heldout.spec.to(setup.device, setup.dtype));
    decoder::plot_samples(heldout.wave, y.cpu().to(tgrad::kFloat32),
                          (dir / ("waves_step" + std::to_string(step) + ".png")).string());
    return tgrad::nn::l1_loss(y.cpu().to(tgrad::kFloat32), heldout.wave).item();
  };
  const double first = evaluate(0);
  zoo::Progress progress(flags.steps);
  const int64_t plot_every = std::max<int64_t>(1, flags.steps / 4);
  for (int64_t step = 1; step <= flags.steps; ++step) {
    const zoo::WaveBatch b = zoo::spectrum_waves(batch, gen);
    const double l =
        model.step(b.spec.to(setup.device, setup.dtype), b.wave.to(setup.device, setup.dtype));
    TGRAD_CHECK(std::isfinite(l), "hifigan: training diverged at step ", step, " (loss ", l, ")");
    std::ostringstream os;
    os.precision(4);
    os << "L1 " << l;
    progress.update(step, os.str());
    if (step % plot_every == 0 && step != flags.steps) evaluate(step);
  }
  const double last = evaluate(flags.steps);
  tgrad::nn::save_module(*model.net, (dir / "generator.safetensors").string());
  tgrad::nn::save_optimizer(*model.opt, (dir / "optim_g.safetensors").string(),
                            {{"step", std::to_string(flags.steps)}});
  std::printf("held-out L1 %.4f -> %.4f; wrote %s and the checkpoint %s\n", first, last,
              (dir / "waves_step*.png").string().c_str(),
              (dir / "{generator,optim_g}.safetensors").string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  zoo::Flags flags;
  flags.steps = 200;
  flags.out = "hifigan_out";
  int64_t batch = 16;
  CLI::App app{"Train a HiFi-GAN-style generator from coarse spectra to waveforms."};
  zoo::add_flags(app, flags);
  app.add_option("--batch", batch, "batch size")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags, batch);
  } catch (const std::exception& e) {
    std::cerr << "hifigan: error: " << e.what() << "\n";
    return 1;
  }
}
