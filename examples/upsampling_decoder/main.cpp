// upsampling_decoder: trains a ConvTranspose decoder to render shapes (2-D) or waveforms (1-D)
// from their parameters, with a live progress line, and writes loss.csv, loss.png,
// samples_stepN.png and a resumable checkpoint (decoder.safetensors + decoder.optim.safetensors).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "dataset.h"
#include "layers/nn.h"
#include "model.h"
#include "plot.h"

namespace {

using decoder::LossRow;
using decoder::Mode;
using tgrad::Tensor;

struct Config {
  std::string mode = "2d";
  int64_t steps = 1500;
  int64_t batch = 32;
  double lr = 5e-3;
  uint64_t seed = 1;
  std::string device = "auto";
  std::string out = "decoder_out";
  bool resume = false;
};

constexpr int64_t kHeldOut = 256;

// The batch of step `step`: its own seed, so a resumed run sees the same data stream.
decoder::Batch train_batch(Mode mode, const Config& cfg, int64_t step) {
  tgrad::Generator gen(cfg.seed * 1000003ULL + static_cast<uint64_t>(step) + 1);
  return decoder::make_batch(mode, cfg.batch, gen);
}

double heldout_loss(tgrad::nn::Module& net, const decoder::Batch& data, tgrad::Device device) {
  tgrad::NoGradGuard no_grad;
  double total = 0.0;
  const int64_t n = data.input.size(0), chunk = 64;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t len = std::min(chunk, n - i);
    const Tensor y = net.forward(data.input.narrow(0, i, len).to(device));
    const Tensor loss =
        tgrad::nn::mse_loss(y, data.target.narrow(0, i, len).to(device), tgrad::nn::Reduction::sum);
    total += loss.item();
  }
  return total / static_cast<double>(data.target.numel());
}

void write_samples(tgrad::nn::Module& net, const decoder::Batch& data, tgrad::Device device,
                   const std::filesystem::path& path) {
  tgrad::NoGradGuard no_grad;
  const int64_t n = std::min<int64_t>(16, data.input.size(0));
  const Tensor pred = net.forward(data.input.narrow(0, 0, n).to(device)).cpu();
  decoder::plot_samples(data.target.narrow(0, 0, n), pred, path.string());
}

std::string format_duration(double seconds) {
  const int64_t s = std::lround(std::max(0.0, seconds));
  std::ostringstream os;
  if (s >= 60) os << s / 60 << "m";
  os << (s % 60 < 10 && s >= 60 ? "0" : "") << s % 60 << "s";
  return os.str();
}

std::vector<LossRow> read_loss_csv(const std::filesystem::path& path, int64_t up_to) {
  std::vector<LossRow> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    LossRow r{};
    if (std::sscanf(line.c_str(), "%ld,%lf,%lf", &r.step, &r.train, &r.heldout) == 3 &&
        r.step <= up_to) {
      rows.push_back(r);
    }
  }
  return rows;
}

void write_loss_csv(const std::filesystem::path& path, const std::vector<LossRow>& rows) {
  std::ofstream out(path, std::ios::trunc);
  TGRAD_CHECK(out.good(), "cannot write '", path.string(), "'");
  out << "step,train_loss,heldout_loss\n";
  out.precision(8);
  for (const LossRow& r : rows)
    out << r.step << ',' << r.train << ',' << r.heldout << '\n';
}

int run(const Config& cfg) {
  const Mode mode = cfg.mode == "2d" ? Mode::image2d : Mode::wave1d;
  tgrad::Device device(tgrad::kCPU);
  if (cfg.device == "cuda" || (cfg.device == "auto" && tgrad::cuda_is_available())) {
    TGRAD_CHECK(tgrad::cuda_is_available(),
                "--device cuda: no CUDA device is available (none found, or tgrad was built "
                "without CUDA); use --device cpu");
    device = tgrad::Device(tgrad::kCUDA);
  }
  const std::filesystem::path dir(cfg.out);
  std::filesystem::create_directories(dir);
  const auto model_path = dir / "decoder.safetensors";
  const auto optim_path = dir / "decoder.optim.safetensors";
  const auto csv_path = dir / "loss.csv";

  tgrad::Generator init_gen(cfg.seed);
  auto net = decoder::make_decoder(mode, init_gen);
  net->to(device);
  tgrad::optim::Adam adam(net->parameters(), tgrad::optim::AdamOptions(cfg.lr));
  tgrad::optim::CosineAnnealingLR schedule(adam, cfg.steps, cfg.lr * 0.02);

  int64_t start = 0;
  std::vector<LossRow> rows;
  if (cfg.resume) {
    // The optimizer file's metadata says which run it belongs to; check it before loading.
    const auto meta = tgrad::safetensors::load(optim_path.string()).metadata;
    TGRAD_CHECK(meta.count("mode") && meta.at("mode") == cfg.mode, "--resume: the checkpoint in '",
                cfg.out, "' was trained with --mode ", meta.count("mode") ? meta.at("mode") : "?",
                ", not --mode ", cfg.mode);
    TGRAD_CHECK(meta.count("step"), "--resume: '", optim_path.string(), "' has no step");
    tgrad::nn::load_module(*net, model_path.string());
    tgrad::nn::load_optimizer(adam, optim_path.string());
    start = std::stoll(meta.at("step"));
    TGRAD_CHECK(start <= cfg.steps, "--resume: the checkpoint is at step ", start,
                ", beyond --steps ", cfg.steps);
    schedule.set_last_epoch(start);
    rows = read_loss_csv(csv_path, start);
    std::cout << "resuming from step " << start << " of " << cfg.steps << "\n";
  }

  tgrad::Generator heldout_gen(cfg.seed + 0x5eed);
  const decoder::Batch heldout = decoder::make_batch(mode, kHeldOut, heldout_gen);
  const int64_t eval_every = std::max<int64_t>(1, cfg.steps / 30);
  const int64_t sample_every = std::max<int64_t>(1, cfg.steps / 4);
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::cout << "upsampling_decoder: mode " << cfg.mode << ", " << cfg.steps << " steps, batch "
            << cfg.batch << ", lr " << cfg.lr << ", device " << device << ", "
            << net->parameters().size() << " parameter tensors\n";

  if (start == 0) {
    const double h0 = heldout_loss(*net, heldout, device);
    rows.push_back({0, h0, h0});
    write_samples(*net, heldout, device, dir / "samples_step0.png");
  }
  const double first_heldout = rows.empty() ? 0.0 : rows.front().heldout;
  double interval_sum = 0.0;
  int64_t interval_n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_draw = t0;
  for (int64_t step = start + 1; step <= cfg.steps; ++step) {
    const decoder::Batch batch = train_batch(mode, cfg, step);
    adam.zero_grad();
    const Tensor y = net->forward(batch.input.to(device));
    const Tensor loss = tgrad::nn::mse_loss(y, batch.target.to(device));
    loss.backward();
    adam.step();
    schedule.step();
    const double l = loss.item();
    TGRAD_CHECK(std::isfinite(l), "training diverged at step ", step, " (loss ", l,
                "); try a smaller --lr");
    interval_sum += l;
    ++interval_n;

    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - t0).count();
    const double rate = static_cast<double>(step - start) / std::max(elapsed, 1e-9);
    const double eta = static_cast<double>(cfg.steps - step) / rate;
    if (step % eval_every == 0 || step == cfg.steps) {
      const double h = heldout_loss(*net, heldout, device);
      rows.push_back({step, interval_sum / static_cast<double>(interval_n), h});
      interval_sum = 0.0;
      interval_n = 0;
      if (!tty) {
        std::printf("step %6ld/%ld  loss %.5f  held-out %.5f  %.1f steps/s  ETA %s\n", step,
                    cfg.steps, rows.back().train, h, rate, format_duration(eta).c_str());
        std::fflush(stdout);
      }
    }
    if (tty &&
        (std::chrono::duration<double>(now - last_draw).count() > 0.1 || step == cfg.steps)) {
      last_draw = now;
      const int width = 24;
      const int filled = static_cast<int>(width * step / cfg.steps);
      std::printf("\r[%s%s] step %ld/%ld  loss %.5f  %.1f steps/s  ETA %s   ",
                  std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(width - filled), '.').c_str(), step, cfg.steps, l,
                  rate, format_duration(eta).c_str());
      std::fflush(stdout);
    }
    if (step % sample_every == 0 || step == cfg.steps) {
      write_samples(*net, heldout, device, dir / ("samples_step" + std::to_string(step) + ".png"));
    }
  }
  if (tty) std::printf("\n");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  tgrad::nn::save_module(*net, model_path.string());
  tgrad::nn::save_optimizer(adam, optim_path.string(),
                            {{"step", std::to_string(cfg.steps)}, {"mode", cfg.mode}});
  write_loss_csv(csv_path, rows);
  decoder::plot_losses(rows, (dir / "loss.png").string());

  const double final_heldout = rows.back().heldout;
  std::printf("trained %ld steps in %.1f s; held-out loss %.5f -> %.5f (%.1fx lower)\n",
              cfg.steps - start, seconds, first_heldout, final_heldout,
              first_heldout / final_heldout);
  std::cout << "wrote " << csv_path.string() << ", " << (dir / "loss.png").string() << ", "
            << (dir / "samples_step*.png").string() << ",\n      " << model_path.string() << " and "
            << optim_path.string() << " (--resume continues from them)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train a transposed-convolution decoder to draw shapes (2d) or waveforms (1d)."};
  app.add_option("--mode", cfg.mode, "2d: 32x32 RGB shapes; 1d: 64-sample waveforms")
      ->check(CLI::IsMember({"2d", "1d"}))
      ->capture_default_str();
  app.add_option("--steps", cfg.steps, "training steps")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))
      ->capture_default_str();
  app.add_option("--batch", cfg.batch, "batch size")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}))
      ->capture_default_str();
  app.add_option("--lr", cfg.lr, "Adam learning rate (cosine-annealed to 2% of it)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "seed for initialisation and data")->capture_default_str();
  app.add_option("--device", cfg.device, "auto (cuda when available), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--out", cfg.out, "output directory")->capture_default_str();
  app.add_flag("--resume", cfg.resume, "continue from the checkpoint in --out");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(cfg);
  } catch (const std::exception& e) {
    std::cerr << "upsampling_decoder: error: " << e.what() << "\n";
    return 1;
  }
}
