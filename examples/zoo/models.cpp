// The zoo's models: DCGAN, the HiFi-GAN-style generator and the U-Net (see models.h).
#include "models.h"

#include <initializer_list>

#include "core/autograd.h"
#include "core/ops_shape.h"

namespace zoo {

namespace nn = tgrad::nn;

namespace {

ReluTap* g_relu_tap = nullptr;

std::shared_ptr<nn::SequentialImpl> seq(std::initializer_list<nn::ModulePtr> modules) {
  return std::make_shared<nn::SequentialImpl>(modules);
}

// Two 3x3 convs, each followed by GroupNorm(groups, out) and ReLU. The convs carry no bias: the
// norm's own shift makes it redundant.
std::shared_ptr<nn::SequentialImpl> double_conv(int64_t in, int64_t out, tgrad::Generator& gen) {
  const int64_t groups = 4;
  return seq(
      {std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(in, out, 3).padding(1).bias(false), gen),
       std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(groups, out)),
       std::make_shared<TappedReLU>(),
       std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(out, out, 3).padding(1).bias(false), gen),
       std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(groups, out)),
       std::make_shared<TappedReLU>()});
}

}  // namespace

void set_relu_tap(ReluTap* tap) {
  g_relu_tap = tap;
}

Tensor TappedReLU::forward(const Tensor& x) {
  if (g_relu_tap != nullptr) g_relu_tap->inputs.push_back(x.detach().clone());
  return nn::ReLUImpl::forward(x);
}

DcganGenerator::DcganGenerator(int64_t nz, int64_t ngf, tgrad::Generator& gen)
    : Module("DcganGenerator") {
  using nn::ConvTranspose2dOptions;
  main = register_module(
      "main",
      seq({std::make_shared<nn::ConvTranspose2dImpl>(
               ConvTranspose2dOptions(nz, ngf * 4, 4).stride(1).padding(0).bias(false), gen),
           std::make_shared<nn::BatchNorm2dImpl>(ngf * 4), std::make_shared<TappedReLU>(),
           std::make_shared<nn::ConvTranspose2dImpl>(
               ConvTranspose2dOptions(ngf * 4, ngf * 2, 4).stride(2).padding(1).bias(false), gen),
           std::make_shared<nn::BatchNorm2dImpl>(ngf * 2), std::make_shared<TappedReLU>(),
           std::make_shared<nn::ConvTranspose2dImpl>(
               ConvTranspose2dOptions(ngf * 2, ngf, 4).stride(2).padding(1).bias(false), gen),
           std::make_shared<nn::BatchNorm2dImpl>(ngf), std::make_shared<TappedReLU>(),
           std::make_shared<nn::ConvTranspose2dImpl>(
               ConvTranspose2dOptions(ngf, 3, 4).stride(2).padding(1).bias(false), gen),
           std::make_shared<nn::TanhImpl>()}));
}

Tensor DcganGenerator::forward(const Tensor& z) {
  return main->forward(z);
}

DcganDiscriminator::DcganDiscriminator(int64_t ndf, tgrad::Generator& gen)
    : Module("DcganDiscriminator") {
  using nn::Conv2dOptions;
  main = register_module(
      "main", seq({std::make_shared<nn::Conv2dImpl>(
                       Conv2dOptions(3, ndf, 4).stride(2).padding(1).bias(false), gen),
                   std::make_shared<nn::LeakyReLUImpl>(0.2),
                   std::make_shared<nn::Conv2dImpl>(
                       Conv2dOptions(ndf, ndf * 2, 4).stride(2).padding(1).bias(false), gen),
                   std::make_shared<nn::BatchNorm2dImpl>(ndf * 2), std::make_shared<nn::LeakyReLUImpl>(0.2),
                   std::make_shared<nn::Conv2dImpl>(
                       Conv2dOptions(ndf * 2, ndf * 4, 4).stride(2).padding(1).bias(false), gen),
                   std::make_shared<nn::BatchNorm2dImpl>(ndf * 4), std::make_shared<nn::LeakyReLUImpl>(0.2),
                   std::make_shared<nn::Conv2dImpl>(
                       Conv2dOptions(ndf * 4, 1, 4).stride(1).padding(0).bias(false), gen)}));
}

Tensor DcganDiscriminator::forward(const Tensor& x) {
  const Tensor logits = main->forward(x);
  return logits.reshape({logits.size(0)});
}

void dcgan_init(Module& net, tgrad::Generator& gen) {
  tgrad::NoGradGuard no_grad;
  net.apply([&gen](Module& m) {
    auto normal = [&gen](Tensor t, double mean, double std) {
      t.copy_(tgrad::randn(t.shape(), gen) * std + mean);
    };
    if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(&m)) {
      normal(conv->weight, 0.0, 0.02);
    } else if (auto* convt = dynamic_cast<nn::ConvTranspose2dImpl*>(&m)) {
      normal(convt->weight, 0.0, 0.02);
    } else if (auto* bn = dynamic_cast<nn::BatchNorm2dImpl*>(&m)) {
      normal(bn->weight, 1.0, 0.02);
      bn->bias.fill_(0.0);
    }
  });
}

ResBlock::ResBlock(int64_t channels, int64_t kernel_size, const std::vector<int64_t>& dilations,
                   tgrad::Generator& gen)
    : Module("ResBlock") {
  using nn::Conv1dOptions;
  convs1 = register_module("convs1", std::make_shared<nn::SequentialImpl>());
  convs2 = register_module("convs2", std::make_shared<nn::SequentialImpl>());
  for (const int64_t d : dilations) {
    convs1->push_back(std::make_shared<nn::Conv1dImpl>(Conv1dOptions(channels, channels, kernel_size)
                                                       .dilation(d)
                                                       .padding((kernel_size * d - d) / 2),
                                                   gen));
    convs2->push_back(std::make_shared<nn::Conv1dImpl>(
        Conv1dOptions(channels, channels, kernel_size).padding((kernel_size - 1) / 2), gen));
  }
}

Tensor ResBlock::forward(const Tensor& x) {
  constexpr double kSlope = 0.1;  // HiFi-GAN's LRELU_SLOPE
  Tensor h = x;
  for (size_t i = 0; i < convs1->size(); ++i) {
    Tensor t = (*convs1)[i]->forward(tgrad::leaky_relu(h, kSlope));
    t = (*convs2)[i]->forward(tgrad::leaky_relu(t, kSlope));
    h = t + h;
  }
  return h;
}

HifiGenerator::HifiGenerator(int64_t in_bins, int64_t channels, const std::vector<int64_t>& rates,
                             tgrad::Generator& gen)
    : Module("HifiGenerator") {
  using nn::Conv1dOptions;
  const std::vector<int64_t> kernels = {3, 7};
  const std::vector<int64_t> dilations = {1, 3, 5};
  num_kernels_ = static_cast<int64_t>(kernels.size());
  conv_pre = register_module("conv_pre", std::make_shared<nn::Conv1dImpl>(
                                             Conv1dOptions(in_bins, channels, 7).padding(3), gen));
  ups = register_module("ups", std::make_shared<nn::SequentialImpl>());
  resblocks = register_module("resblocks", std::make_shared<nn::SequentialImpl>());
  int64_t ch = channels;
  for (const int64_t s : rates) {
    ups->push_back(std::make_shared<nn::ConvTranspose1dImpl>(
        nn::ConvTranspose1dOptions(ch, ch / 2, 2 * s).stride(s).padding(s / 2), gen));
    ch /= 2;
    for (const int64_t k : kernels)
      resblocks->push_back(std::make_shared<ResBlock>(ch, k, dilations, gen));
  }
  conv_post = register_module(
      "conv_post", std::make_shared<nn::Conv1dImpl>(Conv1dOptions(ch, 1, 7).padding(3), gen));
}

Tensor HifiGenerator::forward(const Tensor& spec) {
  constexpr double kSlope = 0.1;
  Tensor x = conv_pre->forward(spec);
  for (size_t i = 0; i < ups->size(); ++i) {
    x = (*ups)[i]->forward(tgrad::leaky_relu(x, kSlope));
    Tensor xs;
    for (int64_t j = 0; j < num_kernels_; ++j) {
      const Tensor r =
          (*resblocks)[i * static_cast<size_t>(num_kernels_) + static_cast<size_t>(j)]->forward(x);
      xs = xs.defined() ? xs + r : r;
    }
    x = xs / static_cast<double>(num_kernels_);
  }
  // The reference's final leaky_relu uses PyTorch's default slope, 0.01.
  return tgrad::tanh(conv_post->forward(tgrad::leaky_relu(x)));
}

UNet::UNet(int64_t channels, int64_t base, tgrad::Generator& gen) : Module("UNet") {
  using nn::Conv2dOptions;
  using nn::ConvTranspose2dOptions;
  const int64_t b = base;
  auto down = [&gen](int64_t c) {
    return seq({std::make_shared<nn::Conv2dImpl>(Conv2dOptions(c, 2 * c, 4).stride(2).padding(1), gen),
                std::make_shared<TappedReLU>()});
  };
  auto up = [&gen](int64_t c) {
    return seq({std::make_shared<nn::ConvTranspose2dImpl>(
        ConvTranspose2dOptions(c, c / 2, 4).stride(2).padding(1), gen)});
  };
  enc1 = register_module("enc1", double_conv(channels, b, gen));
  down1 = register_module("down1", down(b));
  enc2 = register_module("enc2", double_conv(2 * b, 2 * b, gen));
  down2 = register_module("down2", down(2 * b));
  mid = register_module("mid", double_conv(4 * b, 4 * b, gen));
  up2 = register_module("up2", up(4 * b));
  dec2 = register_module("dec2", double_conv(4 * b, 2 * b, gen));
  up1 = register_module("up1", up(2 * b));
  dec1 = register_module("dec1", double_conv(2 * b, b, gen));
  out = register_module("out", std::make_shared<nn::Conv2dImpl>(Conv2dOptions(b, channels, 1), gen));
}

Tensor UNet::forward(const Tensor& x) {
  const Tensor e1 = enc1->forward(x);                   // (N, b, 32, 32)
  const Tensor e2 = enc2->forward(down1->forward(e1));  // (N, 2b, 16, 16)
  const Tensor m = mid->forward(down2->forward(e2));    // (N, 4b, 8, 8)
  const Tensor d2 = dec2->forward(tgrad::cat({up2->forward(m), e2}, 1));
  const Tensor d1 = dec1->forward(tgrad::cat({up1->forward(d2), e1}, 1));
  // The network predicts the noise-free image as the input plus a correction.
  return x + out->forward(d1);
}

}  // namespace zoo
