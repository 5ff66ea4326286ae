// norm_bench: times the normalization layers (BatchNorm, GroupNorm, InstanceNorm2d, LayerNorm)
// forward + backward on layer shapes taken from common models, one JSON line per layer with the
// layer's spec, so that bench/norm_bench_compare.py can build and time the same layers in
// PyTorch and print the ratio.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "core/random.h"
#include "layers/nn.h"

namespace {

using tgrad::Shape;
using tgrad::Tensor;

struct NormLayer {
  const char* name;
  const char* source;  // where the shape comes from
  const char* type;    // BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm2d, LayerNorm
  int64_t groups;      // GroupNorm only
  Shape shape;         // the input
};

// Channels are dim 1; LayerNorm normalizes the last dim.
const std::vector<NormLayer>& layers() {
  static const std::vector<NormLayer> all = {
      {"dcgan64_bn1", "DCGAN 64x64 generator, batch 128", "BatchNorm2d", 0, {128, 512, 4, 4}},
      {"dcgan64_bn2", "DCGAN 64x64 generator, batch 128", "BatchNorm2d", 0, {128, 256, 8, 8}},
      {"dcgan64_bn3", "DCGAN 64x64 generator, batch 128", "BatchNorm2d", 0, {128, 128, 16, 16}},
      {"dcgan64_bn4", "DCGAN 64x64 generator, batch 128", "BatchNorm2d", 0, {128, 64, 32, 32}},
      {"bn_rgb_256", "a batch norm on 3 channels at 256x256, batch 16", "BatchNorm2d", 0,
       {16, 3, 256, 256}},
      {"bn1d_audio", "a 1-D decoder's batch norm, batch 64", "BatchNorm1d", 0, {64, 256, 1024}},
      {"unet_gn_64", "U-Net decoder block, GroupNorm(8, 64), batch 16", "GroupNorm", 8,
       {16, 64, 64, 64}},
      {"unet_gn_256", "diffusion U-Net block, GroupNorm(32, 256), batch 8", "GroupNorm", 32,
       {8, 256, 32, 32}},
      {"cyclegan_in", "CycleGAN generator, InstanceNorm2d(64), batch 4", "InstanceNorm2d", 0,
       {4, 64, 128, 128}},
      {"layernorm_512", "transformer block, LayerNorm(512), 8192 tokens", "LayerNorm", 0,
       {8192, 512}},
  };
  return all;
}

std::shared_ptr<tgrad::nn::Module> make(const NormLayer& l) {
  namespace nn = tgrad::nn;
  const std::string type = l.type;
  if (type == "BatchNorm1d") return std::make_shared<nn::BatchNorm1dImpl>(l.shape[1]);
  if (type == "BatchNorm2d") return std::make_shared<nn::BatchNorm2dImpl>(l.shape[1]);
  if (type == "GroupNorm")
    return std::make_shared<nn::GroupNormImpl>(nn::GroupNormOptions(l.groups, l.shape[1]));
  if (type == "InstanceNorm2d")
    return std::make_shared<nn::InstanceNorm2dImpl>(nn::InstanceNormOptions(l.shape[1]).affine(true));
  return std::make_shared<nn::LayerNormImpl>(nn::LayerNormOptions({l.shape.back()}));
}

std::string shape_json(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int warmup = 5, iters = 30;
  CLI::App app{"Times normalization layers forward + backward (tgrad), one JSON line each."};
  app.add_option("--device", device_name, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed iterations first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--iters", iters, "timed iterations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (device_name == "cuda")
      TGRAD_CHECK(tgrad::cuda_is_available(),
                  "norm_bench: --device cuda: no CUDA device is available (none found, or tgrad "
                  "was built without CUDA)");
    const tgrad::Device device =
        device_name == "cuda" ? tgrad::Device(tgrad::kCUDA) : tgrad::Device(tgrad::kCPU);
    for (const NormLayer& l : layers()) {
      tgrad::Generator gen(3);
      auto m = make(l);
      m->to(device);
      const Tensor x = tgrad::randn(l.shape, gen).to(device).requires_grad_(true);
      const Tensor dy = tgrad::randn(l.shape, gen).to(device);
      std::vector<double> ms;
      for (int i = 0; i < warmup + iters; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        m->zero_grad();
        x.zero_grad();
        m->forward(x).backward(dy);
        if (device.is_cuda()) tgrad::cuda_synchronize(device.index());
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf(
          "{\"framework\": \"tgrad\", \"layer\": \"%s\", \"source\": \"%s\", \"type\": \"%s\", "
          "\"groups\": %ld, \"shape\": %s, \"device\": \"%s\", \"median_ms\": %.4f}\n",
          l.name, l.source, l.type, static_cast<long>(l.groups), shape_json(l.shape).c_str(),
          device_name.c_str(), ms[ms.size() / 2]);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "norm_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
