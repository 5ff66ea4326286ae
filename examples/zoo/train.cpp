// The zoo's training steps (see train.h).
#include "train.h"

#include "core/autograd.h"
#include "data.h"

namespace zoo {

namespace nn = tgrad::nn;
namespace optim = tgrad::optim;

Dcgan::Dcgan(tgrad::Generator& gen)
    : net_g(std::make_shared<DcganGenerator>(kNz, kNgf, gen)),
      net_d(std::make_shared<DcganDiscriminator>(kNdf, gen)) {
  dcgan_init(*net_g, gen);
  dcgan_init(*net_d, gen);
  opt_g = std::make_unique<optim::Adam>(net_g->parameters(),
                                        optim::AdamOptions(kLr).beta1(0.5).beta2(0.999));
  opt_d = std::make_unique<optim::Adam>(net_d->parameters(),
                                        optim::AdamOptions(kLr).beta1(0.5).beta2(0.999));
}

Dcgan::Losses Dcgan::step(const Tensor& real, const Tensor& z) {
  const int64_t n = real.size(0);
  const tgrad::TensorOptions like =
      tgrad::TensorOptions().dtype(real.dtype()).device(real.device());
  const Tensor ones = tgrad::ones({n}, like), zeros = tgrad::zeros({n}, like);

  opt_d->zero_grad();
  const Tensor err_real = nn::binary_cross_entropy_with_logits(net_d->forward(real), ones);
  const Tensor fake = net_g->forward(z);
  const Tensor err_fake =
      nn::binary_cross_entropy_with_logits(net_d->forward(fake.detach()), zeros);
  const Tensor err_d = err_real + err_fake;
  err_d.backward();
  opt_d->step();

  opt_g->zero_grad();
  const Tensor err_g = nn::binary_cross_entropy_with_logits(net_d->forward(fake), ones);
  err_g.backward();
  opt_g->step();
  return {err_d.item(), err_g.item()};
}

Parts Dcgan::parts() {
  return {{{"netG", net_g.get()}, {"netD", net_d.get()}},
          {{"optG", opt_g.get()}, {"optD", opt_d.get()}}};
}

Hifi::Hifi(tgrad::Generator& gen)
    : net(std::make_shared<HifiGenerator>(kSpecChannels, kChannels, std::vector<int64_t>{4, 4},
                                          gen)) {
  opt = std::make_unique<optim::AdamW>(
      net->parameters(), optim::AdamWOptions(kLr).beta1(0.8).beta2(0.99).weight_decay(0.01));
}

double Hifi::step(const Tensor& spec, const Tensor& wave) {
  opt->zero_grad();
  const Tensor loss = nn::l1_loss(net->forward(spec), wave);
  loss.backward();
  opt->step();
  return loss.item();
}

Parts Hifi::parts() {
  return {{{"generator", net.get()}}, {{"optim_g", opt.get()}}};
}

Denoiser::Denoiser(tgrad::Generator& gen) : net(std::make_shared<UNet>(3, kBase, gen)) {
  opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions(kLr));
}

double Denoiser::step(const Tensor& noisy, const Tensor& clean) {
  opt->zero_grad();
  const Tensor loss = nn::mse_loss(net->forward(noisy), clean);
  loss.backward();
  opt->step();
  return loss.item();
}

Parts Denoiser::parts() {
  return {{{"unet", net.get()}}, {{"optim", opt.get()}}};
}

void to_dtype(const Parts& parts, tgrad::DType dtype) {
  for (const auto& [name, module] : parts.modules)
    module->to(dtype);
}

}  // namespace zoo
