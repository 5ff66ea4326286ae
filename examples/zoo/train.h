// One training step of each zoo model, with the optimizer and loss of its paper's reference
// code. The example programs and the parity driver (zoo_parity.cpp) both train through these,
// so the PyTorch twins check the very steps the examples take.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models.h"

namespace zoo {

// The modules and optimizers of a model, named, for checkpoints and the parity dumps.
struct Parts {
  std::vector<std::pair<std::string, Module*>> modules;
  std::vector<std::pair<std::string, tgrad::optim::Optimizer*>> optimizers;
};

// DCGAN: Adam(lr 2e-4, betas (0.5, 0.999)) for both nets. A step updates D on a real batch and
// on G(z) detached (labels 1 and 0), then G through D with label 1, as the reference does.
struct Dcgan {
  static constexpr int64_t kNz = 32, kNgf = 16, kNdf = 16;
  static constexpr double kLr = 2e-4;
  explicit Dcgan(tgrad::Generator& gen);
  struct Losses {
    double d, g;
  };
  Losses step(const Tensor& real, const Tensor& z);
  Parts parts();

  std::shared_ptr<DcganGenerator> net_g;
  std::shared_ptr<DcganDiscriminator> net_d;
  std::unique_ptr<tgrad::optim::Adam> opt_g, opt_d;
};

// HiFi-GAN generator regressed on the waveform with an L1 loss, AdamW(lr, betas (0.8, 0.99),
// weight decay 0.01) as in the paper (whose lr is 2e-4; these small runs take a larger one).
struct Hifi {
  static constexpr int64_t kChannels = 64;
  static constexpr double kLr = 2e-3;
  explicit Hifi(tgrad::Generator& gen);
  double step(const Tensor& spec, const Tensor& wave);
  Parts parts();

  std::shared_ptr<HifiGenerator> net;
  std::unique_ptr<tgrad::optim::AdamW> opt;
};

// U-Net denoiser: MSE between U-Net(noisy) and the clean picture, Adam(lr 1e-3).
struct Denoiser {
  static constexpr int64_t kBase = 16;
  static constexpr double kLr = 1e-3, kNoise = 0.3;
  explicit Denoiser(tgrad::Generator& gen);
  double step(const Tensor& noisy, const Tensor& clean);
  Parts parts();

  std::shared_ptr<UNet> net;
  std::unique_ptr<tgrad::optim::Adam> opt;
};

// Moves every module of `parts` to `dtype` (the optimizers' state follows lazily).
void to_dtype(const Parts& parts, tgrad::DType dtype);

}  // namespace zoo
