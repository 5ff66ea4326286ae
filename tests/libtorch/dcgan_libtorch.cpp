// A DCGAN trained with LibTorch's C++ API, written the way a LibTorch user writes one: holder
// members built in the constructor's initializer list, TORCH_MODULE, a Sequential
// discriminator, Adam with two parameter groups, a StepLR schedule, gradient clipping, a
// checkpoint and an inference pass under NoGradGuard. tgrad does not compile this file as it
// is: tests/libtorch/translate.cmake applies the renames in tests/libtorch/renames.txt (and
// nothing else) and builds the result, so the test fails if a LibTorch program of this kind
// needs more than renames to run on tgrad.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

constexpr int64_t kNoiseSize = 16;
constexpr int64_t kBatchSize = 16;
constexpr int64_t kImageSize = 16;
constexpr int64_t kSteps = 24;

struct DCGANGeneratorImpl : torch::nn::Module {
  explicit DCGANGeneratorImpl(int64_t noise_size)
      : conv1(torch::nn::ConvTranspose2dOptions(noise_size, 64, 4).bias(false)),
        batch_norm1(64),
        conv2(torch::nn::ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1).bias(false)),
        batch_norm2(32),
        conv3(torch::nn::ConvTranspose2dOptions(32, 1, 4).stride(2).padding(1).bias(false)) {
    register_module("conv1", conv1);
    register_module("batch_norm1", batch_norm1);
    register_module("conv2", conv2);
    register_module("batch_norm2", batch_norm2);
    register_module("conv3", conv3);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(batch_norm1(conv1(x)));  // 1x1 -> 4x4
    x = torch::relu(batch_norm2(conv2(x)));  // 4x4 -> 8x8
    x = torch::tanh(conv3(x));               // 8x8 -> 16x16
    return x;
  }

  torch::nn::ConvTranspose2d conv1, conv2, conv3;
  torch::nn::BatchNorm2d batch_norm1, batch_norm2;
};
TORCH_MODULE(DCGANGenerator);

// Discs of random centre and radius, in [-1, 1] like the generator's tanh.
torch::Tensor real_batch(int64_t n, torch::Device device) {
  torch::Tensor grid = (torch::arange(kImageSize, torch::TensorOptions().device(device)) + 0.5) /
                       static_cast<double>(kImageSize);
  torch::Tensor ys = grid.reshape({1, 1, kImageSize, 1});
  torch::Tensor xs = grid.reshape({1, 1, 1, kImageSize});
  torch::Tensor cy = torch::rand({n, 1, 1, 1}, device) * 0.5 + 0.25;
  torch::Tensor cx = torch::rand({n, 1, 1, 1}, device) * 0.5 + 0.25;
  torch::Tensor r = torch::rand({n, 1, 1, 1}, device) * 0.15 + 0.15;
  torch::Tensor d2 = (ys - cy) * (ys - cy) + (xs - cx) * (xs - cx);
  return torch::tanh((r * r - d2) * 40.0);
}

int main() {
  torch::manual_seed(1);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  DCGANGenerator generator(kNoiseSize);
  torch::nn::Sequential discriminator(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 4).stride(2).padding(1).bias(false)),
      torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
      torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 4).stride(2).padding(1).bias(false)),
      torch::nn::BatchNorm2d(64),
      torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)),
      torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 1, 4).stride(1).padding(0).bias(false)),
      torch::nn::Sigmoid());
  generator->to(device);
  discriminator->to(device);

  // Two parameter groups: the transposed convolutions with a little weight decay, BatchNorm's
  // affine parameters without (they take the optimizer's defaults).
  std::vector<torch::Tensor> conv_params;
  for (const auto& p : generator->conv1->parameters()) conv_params.push_back(p);
  for (const auto& p : generator->conv2->parameters()) conv_params.push_back(p);
  for (const auto& p : generator->conv3->parameters()) conv_params.push_back(p);
  std::vector<torch::Tensor> norm_params = generator->batch_norm1->parameters();
  for (const auto& p : generator->batch_norm2->parameters()) norm_params.push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(conv_params,
                      std::make_unique<torch::optim::AdamOptions>(
                          torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.999)).weight_decay(1e-5)));
  groups.emplace_back(norm_params);
  torch::optim::Adam generator_optimizer(
      groups, torch::optim::AdamOptions(4e-4).betas(std::make_tuple(0.5, 0.999)));
  torch::optim::Adam discriminator_optimizer(
      discriminator->parameters(), torch::optim::AdamOptions(2e-4).betas(std::make_tuple(0.5, 0.999)));
  torch::optim::StepLR scheduler(generator_optimizer, /*step_size=*/10, /*gamma=*/0.5);

  bool finite = true;
  for (int64_t step = 1; step <= kSteps; ++step) {
    // Discriminator: real discs labelled ~1 (smoothed), generated images labelled 0.
    discriminator->zero_grad();
    torch::Tensor real_images = real_batch(kBatchSize, device);
    torch::Tensor real_labels = torch::rand({kBatchSize}, device) * 0.2 + 0.8;
    torch::Tensor real_output = discriminator->forward(real_images).reshape(real_labels.sizes());
    torch::Tensor d_loss_real = torch::binary_cross_entropy(real_output, real_labels);
    d_loss_real.backward();

    torch::Tensor noise = torch::randn({kBatchSize, kNoiseSize, 1, 1}, device);
    torch::Tensor fake_images = generator->forward(noise);
    torch::Tensor fake_labels = torch::zeros({kBatchSize}, device);
    torch::Tensor fake_output =
        discriminator->forward(fake_images.detach()).reshape(fake_labels.sizes());
    torch::Tensor d_loss_fake = torch::binary_cross_entropy(fake_output, fake_labels);
    d_loss_fake.backward();
    torch::Tensor d_loss = d_loss_real + d_loss_fake;
    discriminator_optimizer.step();

    // Generator: make the discriminator call its images real.
    generator->zero_grad();
    fake_labels.fill_(1);
    fake_output = discriminator->forward(fake_images).reshape(fake_labels.sizes());
    torch::Tensor g_loss = torch::binary_cross_entropy(fake_output, fake_labels);
    g_loss.backward();
    torch::nn::utils::clip_grad_norm_(generator->parameters(), /*max_norm=*/5.0);
    generator_optimizer.step();
    scheduler.step();

    finite = finite && std::isfinite(d_loss.item<float>()) && std::isfinite(g_loss.item<float>());
    if (step % 8 == 0) {
      const double lr0 = static_cast<torch::optim::AdamOptions&>(
                             generator_optimizer.param_groups()[0].options()).lr();
      std::printf("step %2lld  D loss %.4f  G loss %.4f  G lr %.2e\n",
                  static_cast<long long>(step), d_loss.item<float>(), g_loss.item<float>(), lr0);
    }
  }

  // Checkpoint, restore into a fresh generator, and sample from both in inference mode.
  const std::string path = "libtorch-dcgan-generator.pt";
  torch::save(generator, path);
  DCGANGenerator restored(kNoiseSize);
  torch::load(restored, path);
  restored->to(device);
  torch::NoGradGuard no_grad;
  generator->eval();
  restored->eval();
  torch::Tensor noise = torch::randn({4, kNoiseSize, 1, 1}, device);
  torch::Tensor samples = generator->forward(noise);
  torch::Tensor again = restored->forward(noise);
  const bool same = torch::allclose(samples, again);
  std::printf("samples %lldx%lldx%lld, restored generator %s\n",
              static_cast<long long>(samples.size(1)), static_cast<long long>(samples.size(2)),
              static_cast<long long>(samples.size(3)), same ? "agrees" : "DIFFERS");
  return finite && same && samples.size(2) == kImageSize && samples.size(3) == kImageSize ? 0 : 1;
}
