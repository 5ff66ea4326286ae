// zoo_parity: the C++ half of the PyTorch parity tests. It builds one zoo model, writes its
// initial weights and N batches as safetensors, trains N steps with train.h's step, and writes
// the per-step losses, the final parameters and buffers and the optimizers' state, for the
// PyTorch twin (tests/python/zoo_parity.py) to replay and compare. In float32 it also writes the
// input of every ReLU call, so the twin can take tgrad's side of kinks that rounding decides.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "data.h"
#include "layers/nn.h"
#include "train.h"

namespace {

using tgrad::Tensor;
using tgrad::nn::NamedTensors;

struct Config {
  std::string model = "dcgan";
  std::string dtype = "float64";
  int64_t steps = 4;
  int64_t batch = 8;
  uint64_t seed = 7;
  std::string out = "zoo_parity_out";
};

// Every module's state_dict under "<module>.", every optimizer's under "<optimizer>.".
NamedTensors snapshot(const zoo::Parts& parts) {
  NamedTensors all;
  for (const auto& [prefix, module] : parts.modules) {
    for (const auto& [name, t] : module->state_dict())
      all.emplace_back(prefix + "." + name, t.clone());
  }
  for (const auto& [prefix, opt] : parts.optimizers) {
    for (const auto& [name, t] : opt->state_dict())
      all.emplace_back(prefix + "." + name, t.clone());
  }
  return all;
}

void append(NamedTensors& out, const std::string& name, const Tensor& t) {
  out.emplace_back(name, t.clone());
}

template <class Model, class Step>
int run_model(const Config& cfg, const std::string& dir, Step&& step_fn) {
  const tgrad::DType dtype = cfg.dtype == "float64" ? tgrad::kFloat64 : tgrad::kFloat32;
  tgrad::Generator gen(cfg.seed);
  Model model(gen);
  const zoo::Parts parts = model.parts();
  zoo::to_dtype(parts, dtype);
  tgrad::safetensors::save(dir + "/init.safetensors", snapshot(parts), {});

  NamedTensors batches;
  std::vector<std::vector<double>> losses;
  for (int64_t s = 0; s < cfg.steps; ++s) {
    // In float32 the twin needs tgrad's ReLU inputs to follow the same side of each kink.
    zoo::ReluTap tap;
    if (dtype == tgrad::kFloat32) zoo::set_relu_tap(&tap);
    const std::vector<double> l = step_fn(model, gen, dtype, s, batches);
    zoo::set_relu_tap(nullptr);
    for (size_t i = 0; i < tap.inputs.size(); ++i)
      batches.emplace_back("relu." + std::to_string(s) + "." + std::to_string(i), tap.inputs[i]);
    if (losses.empty()) losses.resize(l.size());
    for (size_t i = 0; i < l.size(); ++i)
      losses[i].push_back(l[i]);
  }
  NamedTensors result = snapshot(parts);
  for (size_t i = 0; i < losses.size(); ++i)
    result.emplace_back("loss." + std::to_string(i),
                        tgrad::from_vector(losses[i], {cfg.steps}, tgrad::kFloat64));
  tgrad::safetensors::save(dir + "/batches.safetensors", batches, {});
  tgrad::safetensors::save(dir + "/result.safetensors", result,
                           {{"model", cfg.model},
                            {"dtype", cfg.dtype},
                            {"steps", std::to_string(cfg.steps)},
                            {"batch", std::to_string(cfg.batch)}});
  std::cout << "zoo_parity: " << cfg.model << " " << cfg.dtype << ", " << cfg.steps
            << " steps; first loss " << losses[0].front() << ", last " << losses[0].back()
            << "; wrote " << dir << "/{init,batches,result}.safetensors\n";
  return 0;
}

int run(const Config& cfg) {
  std::filesystem::create_directories(cfg.out);
  const int64_t n = cfg.batch;
  if (cfg.model == "dcgan") {
    return run_model<zoo::Dcgan>(
        cfg, cfg.out,
        [n](zoo::Dcgan& m, tgrad::Generator& gen, tgrad::DType dt, int64_t s, NamedTensors& b) {
          const Tensor real = zoo::shape_images(n, gen).to(dt);
          const Tensor z = tgrad::randn({n, zoo::Dcgan::kNz, 1, 1}, gen).to(dt);
          append(b, "real." + std::to_string(s), real);
          append(b, "z." + std::to_string(s), z);
          const zoo::Dcgan::Losses l = m.step(real, z);
          return std::vector<double>{l.d, l.g};
        });
  }
  if (cfg.model == "hifigan") {
    return run_model<zoo::Hifi>(
        cfg, cfg.out,
        [n](zoo::Hifi& m, tgrad::Generator& gen, tgrad::DType dt, int64_t s, NamedTensors& b) {
          const zoo::WaveBatch w = zoo::spectrum_waves(n, gen);
          append(b, "spec." + std::to_string(s), w.spec.to(dt));
          append(b, "wave." + std::to_string(s), w.wave.to(dt));
          return std::vector<double>{m.step(w.spec.to(dt), w.wave.to(dt))};
        });
  }
  return run_model<zoo::Denoiser>(
      cfg, cfg.out,
      [n](zoo::Denoiser& m, tgrad::Generator& gen, tgrad::DType dt, int64_t s, NamedTensors& b) {
        const Tensor clean = zoo::shape_images(n, gen).to(dt);
        const Tensor noisy =
            clean + tgrad::randn(clean.shape(), gen).to(dt) * zoo::Denoiser::kNoise;
        append(b, "clean." + std::to_string(s), clean);
        append(b, "noisy." + std::to_string(s), noisy);
        return std::vector<double>{m.step(noisy, clean)};
      });
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train a zoo model N steps and dump everything its PyTorch twin compares."};
  app.add_option("--model", cfg.model)
      ->check(CLI::IsMember({"dcgan", "hifigan", "unet"}))
      ->capture_default_str();
  app.add_option("--dtype", cfg.dtype)
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  app.add_option("--steps", cfg.steps)->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch", cfg.batch)->check(CLI::Range(2, 1024))->capture_default_str();
  app.add_option("--seed", cfg.seed)->capture_default_str();
  app.add_option("--out", cfg.out, "output directory")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::cerr << "zoo_parity: error: " << e.what() << "\n";
    return 1;
  }
}
