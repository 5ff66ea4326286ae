// The zoo's three models, laid out as their papers' reference code lays them out (so that the
// PyTorch twins in tests/python/zoo_parity.py mirror them name for name): the DCGAN generator and
// discriminator, a HiFi-GAN-style 1-D generator, and a small U-Net denoiser.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/random.h"
#include "layers/nn.h"

namespace zoo {

using tgrad::Tensor;
using tgrad::nn::Module;

// The input of every ReLU forward, in call order, while a tap is set (zoo_parity sets one). Where
// an input lies within float32 rounding of zero, tgrad and PyTorch may legitimately take different
// sides of the kink; the PyTorch twin replays tgrad's sides from these (see zoo_parity.py).
struct ReluTap {
  std::vector<Tensor> inputs;
};
void set_relu_tap(ReluTap* tap);  // nullptr: stop recording

// nn::ReLU that also reports its input to the tap; the zoo's models use it for every ReLU.
class TappedReLU : public tgrad::nn::ReLUImpl {
 public:
  Tensor forward(const Tensor& x) override;
};

// DCGAN (Radford et al. 2016) for 32x32 RGB: z (N, nz, 1, 1) -> 4 -> 8 -> 16 -> 32, each
// transposed conv without bias, then BatchNorm2d and ReLU; Tanh on the image.
class DcganGenerator : public Module {
 public:
  DcganGenerator(int64_t nz, int64_t ngf, tgrad::Generator& gen);
  Tensor forward(const Tensor& z) override;
  std::shared_ptr<tgrad::nn::SequentialImpl> main;
};

// Strided Conv2d without bias, BatchNorm2d from the second layer on, LeakyReLU(0.2); one logit
// per image (the sigmoid lives in the loss, binary_cross_entropy_with_logits).
class DcganDiscriminator : public Module {
 public:
  DcganDiscriminator(int64_t ndf, tgrad::Generator& gen);
  Tensor forward(const Tensor& x) override;  // (N, 3, 32, 32) -> (N)
  std::shared_ptr<tgrad::nn::SequentialImpl> main;
};

// The paper's initialisation: conv weights ~ N(0, 0.02), BatchNorm weight ~ N(1, 0.02), bias 0.
void dcgan_init(Module& net, tgrad::Generator& gen);

// HiFi-GAN's ResBlock1: for each dilation d, x += conv_1(lrelu(conv_d(lrelu(x)))), kernel k,
// "same" padding (k*d - d) / 2.
class ResBlock : public Module {
 public:
  ResBlock(int64_t channels, int64_t kernel_size, const std::vector<int64_t>& dilations,
           tgrad::Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<tgrad::nn::SequentialImpl> convs1, convs2;
};

// HiFi-GAN-style generator (Kong et al. 2020): conv_pre, then per upsampling rate s a
// LeakyReLU(0.1) and ConvTranspose1d(k = 2s, stride s, padding s/2) halving the channels, and a
// multi-receptive-field fusion (the mean of ResBlocks with kernels 3 and 7); conv_post and tanh.
class HifiGenerator : public Module {
 public:
  HifiGenerator(int64_t in_bins, int64_t channels, const std::vector<int64_t>& rates,
                tgrad::Generator& gen);
  Tensor forward(const Tensor& spec) override;  // (N, bins, frames) -> (N, 1, frames * prod(s))
  std::shared_ptr<tgrad::nn::Conv1dImpl> conv_pre, conv_post;
  std::shared_ptr<tgrad::nn::SequentialImpl> ups, resblocks;

 private:
  int64_t num_kernels_ = 0;
};

// U-Net (Ronneberger et al. 2015), small: two (Conv2d 3x3 -> GroupNorm -> ReLU) per level,
// strided Conv2d down, ConvTranspose2d up, skip connections joined with cat on channels.
class UNet : public Module {
 public:
  UNet(int64_t channels, int64_t base, tgrad::Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<tgrad::nn::SequentialImpl> enc1, down1, enc2, down2, mid, up2, dec2, up1, dec1;
  std::shared_ptr<tgrad::nn::Conv2dImpl> out;
};

}  // namespace zoo
