// The demo's pictures, drawn by hand and written with libpng: an RGB canvas with lines, boxes
// and a tiny 3x5 pixel font, the loss curve (log-scale y, both losses), and sample grids
// (targets beside predictions; waveforms as line plots).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace decoder {

struct Rgb {
  uint8_t r, g, b;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  void set(int x, int y, Rgb c);
  // Mixes `c` into pixel (x, y) with weight alpha in [0, 1].
  void blend(int x, int y, Rgb c, double alpha);
  void fill_rect(int x0, int y0, int w, int h, Rgb c);
  // Anti-aliased line of about `thickness` pixels.
  void line(double x0, double y0, double x1, double y1, Rgb c, double thickness = 1.0);
  // Text in the 3x5 font, scaled; unknown characters draw as blanks.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2);
  // Writes an 8-bit RGB PNG; throws tgrad::Error on failure.
  void save_png(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;
};

struct LossRow {
  int64_t step;
  double train;
  double heldout;
};

void plot_losses(const std::vector<LossRow>& rows, const std::string& path);
// targets/predictions: (N, 3, 32, 32) images in [0, 1] or (N, 1, L) waveforms in [-1, 1].
void plot_samples(const tgrad::Tensor& targets, const tgrad::Tensor& predictions,
                  const std::string& path);

}  // namespace decoder
