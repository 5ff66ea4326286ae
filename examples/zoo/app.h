// What the three zoo programs share: the --device/--steps/--precision/--out flags, a progress
// line, and image grids drawn on the demo's PNG canvas.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace zoo {

struct Flags {
  std::string device = "auto";
  int64_t steps = 0;
  std::string precision = "float32";
  std::string out;
  uint64_t seed = 1;
};

// Adds the shared flags to `app`, with `steps` and `out` as the program's defaults.
void add_flags(CLI::App& app, Flags& flags);

// The device and dtype the flags ask for; "--precision tf32" sets float32 matmul precision
// "high" (TF32 on CUDA), "float64" trains in double.
struct Setup {
  tgrad::Device device;
  tgrad::DType dtype;
};
Setup apply_flags(const Flags& flags);

// A one-line progress bar, redrawn in place on a terminal and printed every tenth otherwise.
class Progress {
 public:
  explicit Progress(int64_t total);
  void update(int64_t step, const std::string& losses);

 private:
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// Writes rows of (N, 3, H, W) pictures in [-1, 1] as one PNG grid, `labels` beside the rows.
void save_image_grid(const std::vector<tgrad::Tensor>& rows, const std::vector<std::string>& labels,
                     const std::string& path);

}  // namespace zoo
