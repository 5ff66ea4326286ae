// The zoo programs' shared flags, progress line and picture grids (see app.h).
#include "app.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../upsampling_decoder/plot.h"
#include "core/device.h"
#include "core/error.h"

namespace zoo {

void add_flags(CLI::App& app, Flags& flags) {
  app.add_option("--device", flags.device, "auto (cuda when available), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--steps", flags.steps, "training steps")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))
      ->capture_default_str();
  app.add_option("--precision", flags.precision,
                 "float32, tf32 (float32 with TF32 matmuls on CUDA) or float64")
      ->check(CLI::IsMember({"float32", "tf32", "float64"}))
      ->capture_default_str();
  app.add_option("--out", flags.out, "output directory")->capture_default_str();
  app.add_option("--seed", flags.seed, "seed for initialisation and data")->capture_default_str();
}

Setup apply_flags(const Flags& flags) {
  Setup s{tgrad::Device(tgrad::kCPU), tgrad::kFloat32};
  if (flags.device == "cuda" || (flags.device == "auto" && tgrad::cuda_is_available())) {
    TGRAD_CHECK(tgrad::cuda_is_available(),
                "--device cuda: no CUDA device is available (none found, or tgrad was built "
                "without CUDA); use --device cpu");
    s.device = tgrad::Device(tgrad::kCUDA);
  }
  tgrad::set_float32_matmul_precision(flags.precision == "tf32" ? "high" : "highest");
  if (flags.precision == "float64") s.dtype = tgrad::kFloat64;
  return s;
}

Progress::Progress(int64_t total)
    : total_(total),
      tty_(isatty(STDOUT_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::update(int64_t step, const std::string& losses) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = static_cast<double>(step) / std::max(elapsed, 1e-9);
  const double eta = static_cast<double>(total_ - step) / rate;
  const bool last = step == total_;
  if (tty_) {
    if (std::chrono::duration<double>(now - last_draw_).count() < 0.1 && !last) return;
    last_draw_ = now;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / total_);
    std::printf("\r[%s%s] %ld/%ld  %s  %.1f steps/s  ETA %.0fs   ",
                std::string(static_cast<size_t>(filled), '#').c_str(),
                std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), step, total_,
                losses.c_str(), rate, eta);
    if (last) std::printf("\n");
  } else if (step % std::max<int64_t>(1, total_ / 10) == 0 || last) {
    std::printf("step %ld/%ld  %s  %.1f steps/s  ETA %.0fs\n", step, total_, losses.c_str(), rate,
                eta);
  }
  std::fflush(stdout);
}

void save_image_grid(const std::vector<tgrad::Tensor>& rows, const std::vector<std::string>& labels,
                     const std::string& path) {
  TGRAD_CHECK(!rows.empty() && rows.size() == labels.size(),
              "save_image_grid: expected one label per row, got ", rows.size(), " rows and ",
              labels.size(), " labels");
  constexpr int kScale = 2, kGap = 4, kLabel = 70;
  const tgrad::Tensor first = rows[0];
  const int n = static_cast<int>(first.size(0)), h = static_cast<int>(first.size(2)),
            w = static_cast<int>(first.size(3));
  const int cell_w = w * kScale + kGap, cell_h = h * kScale + kGap;
  decoder::Canvas canvas(kLabel + n * cell_w + kGap, static_cast<int>(rows.size()) * cell_h + kGap,
                         {255, 255, 255});
  for (size_t r = 0; r < rows.size(); ++r) {
    const tgrad::Tensor img = rows[r].cpu().to(tgrad::kFloat32);
    const float* p = img.data_ptr<float>();
    const int y0 = kGap + static_cast<int>(r) * cell_h;
    canvas.text(4, y0 + cell_h / 2 - 5, labels[r], {40, 40, 40}, 2);
    for (int i = 0; i < std::min(n, static_cast<int>(img.size(0))); ++i) {
      const int x0 = kLabel + i * cell_w;
      for (int y = 0; y < h * kScale; ++y) {
        for (int x = 0; x < w * kScale; ++x) {
          uint8_t c[3];
          for (int ch = 0; ch < 3; ++ch) {
            const double v = p[((i * 3 + ch) * h + y / kScale) * w + x / kScale];
            c[ch] = static_cast<uint8_t>(std::lround(std::clamp((v + 1.0) * 0.5, 0.0, 1.0) * 255));
          }
          canvas.set(x0 + x, y0 + y, {c[0], c[1], c[2]});
        }
      }
    }
  }
  canvas.save_png(path);
}

}  // namespace zoo
