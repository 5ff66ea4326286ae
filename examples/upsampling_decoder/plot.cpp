// Canvas drawing, the PNG writer (libpng, RAII around its structs) and the demo's two plots.
#include "plot.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "core/error.h"

namespace decoder {

namespace {

// 3x5 glyphs, one row per 3-bit number (bit 2 = left column).
struct Glyph {
  char c;
  uint8_t rows[5];
};
constexpr Glyph kFont[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 2, 2}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
    {'+', {0, 2, 7, 2, 0}}, {':', {0, 2, 0, 2, 0}}, {'e', {0, 3, 7, 4, 3}}, {'s', {0, 3, 6, 1, 6}},
    {'t', {2, 7, 2, 2, 3}}, {'p', {0, 7, 5, 7, 4}}, {'l', {6, 2, 2, 2, 7}}, {'o', {0, 7, 5, 5, 7}},
    {'r', {0, 5, 6, 4, 4}}, {'a', {0, 6, 3, 5, 7}}, {'i', {2, 0, 6, 2, 7}}, {'n', {0, 6, 5, 5, 5}},
    {'h', {4, 4, 7, 5, 5}}, {'d', {1, 1, 7, 5, 7}}, {'u', {0, 5, 5, 5, 7}}, {'g', {0, 7, 5, 3, 6}},
    {'m', {0, 7, 7, 5, 5}}, {'w', {0, 5, 5, 7, 7}}, {'v', {0, 5, 5, 5, 2}}, {'c', {0, 7, 4, 4, 7}},
    {'f', {3, 4, 6, 4, 4}}, {'y', {0, 5, 7, 1, 6}}, {'k', {4, 5, 6, 5, 5}}, {'b', {4, 4, 7, 5, 7}},
};

const uint8_t* glyph(char c) {
  for (const Glyph& g : kFont) {
    if (g.c == c) return g.rows;
  }
  return nullptr;
}

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kBlack{30, 30, 30};
constexpr Rgb kGrid{225, 225, 225};
constexpr Rgb kBlue{31, 119, 180};
constexpr Rgb kOrange{255, 127, 14};

std::string format_step(int64_t v) {
  if (v >= 10000 && v % 1000 == 0) return std::to_string(v / 1000) + "k";
  return std::to_string(v);
}

// A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `range`.
double nice_step(double range, int target) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10.0 * mag;
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb background)
    : width_(width), height_(height), pixels_(static_cast<size_t>(width) * height * 3) {
  fill_rect(0, 0, width, height, background);
}

void Canvas::set(int x, int y, Rgb c) {
  blend(x, y, c, 1.0);
}

void Canvas::blend(int x, int y, Rgb c, double alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || alpha <= 0.0) return;
  alpha = std::min(alpha, 1.0);
  uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
  const uint8_t src[3] = {c.r, c.g, c.b};
  for (int k = 0; k < 3; ++k) {
    p[k] = static_cast<uint8_t>(std::lround(p[k] * (1.0 - alpha) + src[k] * alpha));
  }
}

void Canvas::fill_rect(int x0, int y0, int w, int h, Rgb c) {
  for (int y = y0; y < y0 + h; ++y) {
    for (int x = x0; x < x0 + w; ++x)
      set(x, y, c);
  }
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c, double thickness) {
  // Coverage of each pixel near the segment from its distance to the segment.
  const double half = thickness / 2.0;
  const int xa = static_cast<int>(std::floor(std::min(x0, x1) - half - 1));
  const int xb = static_cast<int>(std::ceil(std::max(x0, x1) + half + 1));
  const int ya = static_cast<int>(std::floor(std::min(y0, y1) - half - 1));
  const int yb = static_cast<int>(std::ceil(std::max(y0, y1) + half + 1));
  const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  for (int y = std::max(ya, 0); y <= std::min(yb, height_ - 1); ++y) {
    for (int x = std::max(xa, 0); x <= std::min(xb, width_ - 1); ++x) {
      const double px = x + 0.5 - x0, py = y + 0.5 - y0;
      const double t = len2 > 0 ? std::clamp((px * dx + py * dy) / len2, 0.0, 1.0) : 0.0;
      const double ex = px - t * dx, ey = py - t * dy;
      const double d = std::sqrt(ex * ex + ey * ey);
      blend(x, y, c, std::clamp(half + 0.5 - d, 0.0, 1.0));
    }
  }
}

void Canvas::text(int x, int y, const std::string& s, Rgb c, int scale) {
  for (size_t i = 0; i < s.size(); ++i) {
    const uint8_t* rows = glyph(s[i]);
    if (rows == nullptr) continue;
    const int gx = x + static_cast<int>(i) * 4 * scale;
    for (int r = 0; r < 5; ++r) {
      for (int col = 0; col < 3; ++col) {
        if (rows[r] & (4 >> col)) fill_rect(gx + col * scale, y + r * scale, scale, scale, c);
      }
    }
  }
}

void Canvas::save_png(const std::string& path) const {
  struct FileCloser {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  TGRAD_CHECK(file != nullptr, "save_png: cannot open '", path, "' for writing");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  TGRAD_CHECK(png != nullptr, "save_png: png_create_write_struct failed");
  png_infop info = png_create_info_struct(png);
  struct PngGuard {
    png_structp* png;
    png_infop* info;
    ~PngGuard() { png_destroy_write_struct(png, info); }
  } guard{&png, &info};
  TGRAD_CHECK(info != nullptr, "save_png: png_create_info_struct failed");
  // libpng reports errors by longjmp; nothing with a destructor is created past this point.
  if (setjmp(png_jmpbuf(png))) TGRAD_FAIL("save_png: libpng failed writing '", path, "'");
  png_init_io(png, file.get());
  png_set_IHDR(png, info, static_cast<png_uint_32>(width_), static_cast<png_uint_32>(height_), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height_; ++y) {
    png_write_row(png, const_cast<png_bytep>(&pixels_[static_cast<size_t>(y) * width_ * 3]));
  }
  png_write_end(png, nullptr);
}

void plot_losses(const std::vector<LossRow>& rows, const std::string& path) {
  const int w = 720, h = 440, left = 70, right = 20, top = 40, bottom = 50;
  const int pw = w - left - right, ph = h - top - bottom;
  Canvas c(w, h, kWhite);
  double lo = 1e300, hi = 0.0;
  int64_t max_step = 1;
  for (const LossRow& r : rows) {
    for (double v : {r.train, r.heldout}) {
      if (v > 0 && std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    max_step = std::max(max_step, r.step);
  }
  if (hi <= 0.0) lo = 1e-3, hi = 1.0;
  const double d0 = std::floor(std::log10(lo)), d1 = std::max(std::ceil(std::log10(hi)), d0 + 1);
  auto sx = [&](double step) { return left + pw * step / static_cast<double>(max_step); };
  auto sy = [&](double v) { return top + ph * (d1 - std::log10(v)) / (d1 - d0); };
  // Grid and y labels: decades, with lighter lines at 2x and 5x.
  for (double d = d0; d <= d1; d += 1.0) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, d);
      if (std::log10(v) > d1 + 1e-9) continue;
      const int y = static_cast<int>(std::lround(sy(v)));
      c.fill_rect(left, y, pw, 1, m == 1.0 ? Rgb{200, 200, 200} : kGrid);
      if (m == 1.0) {
        std::ostringstream label;
        label << "1e" << static_cast<int>(d);
        c.text(left - 8 - static_cast<int>(label.str().size()) * 8, y - 5, label.str(), kBlack);
      }
    }
  }
  const double xs = nice_step(static_cast<double>(max_step), 6);
  for (double s = 0; s <= max_step + 1e-9; s += xs) {
    const int x = static_cast<int>(std::lround(sx(s)));
    c.fill_rect(x, top, 1, ph, kGrid);
    c.fill_rect(x, top + ph, 1, 5, kBlack);
    const std::string label = format_step(static_cast<int64_t>(s));
    c.text(x - static_cast<int>(label.size()) * 4, top + ph + 10, label, kBlack);
  }
  c.fill_rect(left, top, 1, ph + 1, kBlack);
  c.fill_rect(left, top + ph, pw + 1, 1, kBlack);
  c.text(left + pw / 2 - 16, h - 18, "step", kBlack);
  c.text(8, 12, "loss", kBlack);
  auto curve = [&](double LossRow::*field, Rgb color) {
    for (size_t i = 1; i < rows.size(); ++i) {
      const double a = rows[i - 1].*field, b = rows[i].*field;
      if (!(a > 0 && b > 0)) continue;
      c.line(sx(static_cast<double>(rows[i - 1].step)), sy(a),
             sx(static_cast<double>(rows[i].step)), sy(b), color, 2.0);
    }
  };
  curve(&LossRow::train, kBlue);
  curve(&LossRow::heldout, kOrange);
  c.fill_rect(w - 190, 12, 20, 3, kBlue);
  c.text(w - 164, 9, "train", kBlack);
  c.fill_rect(w - 110, 12, 20, 3, kOrange);
  c.text(w - 84, 9, "held-out", kBlack);
  c.save_png(path);
}

namespace {

void plot_image_samples(const tgrad::Tensor& targets, const tgrad::Tensor& predictions,
                        const std::string& path) {
  const int64_t n = std::min<int64_t>(targets.size(0), 16);
  const int s = static_cast<int>(targets.size(2)), scale = 3, cell = s * scale, gap = 8;
  const int cols = 4, rows = static_cast<int>((n + cols - 1) / cols);
  const int pair_w = 2 * cell + 2;
  Canvas c(cols * (pair_w + gap) + gap, rows * (cell + gap) + gap + 16, Rgb{255, 255, 255});
  c.text(gap, 4, "target : prediction", kBlack);
  const std::vector<float> t = targets.to_vector<float>(), p = predictions.to_vector<float>();
  const size_t per = size_t{3} * static_cast<size_t>(s) * static_cast<size_t>(s);
  for (int64_t i = 0; i < n; ++i) {
    const int ox = gap + static_cast<int>(i % cols) * (pair_w + gap);
    const int oy = 16 + gap + static_cast<int>(i / cols) * (cell + gap);
    for (int which = 0; which < 2; ++which) {
      const float* img = (which == 0 ? t.data() : p.data()) + static_cast<size_t>(i) * per;
      for (int y = 0; y < s; ++y) {
        for (int x = 0; x < s; ++x) {
          uint8_t rgb[3];
          for (int k = 0; k < 3; ++k) {
            const float v = std::clamp(img[(k * s + y) * s + x], 0.0f, 1.0f);
            rgb[k] = static_cast<uint8_t>(std::lround(v * 255.0f));
          }
          c.fill_rect(ox + which * (cell + 2) + x * scale, oy + y * scale, scale, scale,
                      Rgb{rgb[0], rgb[1], rgb[2]});
        }
      }
    }
  }
  c.save_png(path);
}

void plot_wave_samples(const tgrad::Tensor& targets, const tgrad::Tensor& predictions,
                       const std::string& path) {
  const int64_t n = std::min<int64_t>(targets.size(0), 8);
  const int64_t len = targets.size(-1);
  const int pw = 300, ph = 80, gap = 10;
  Canvas c(2 * pw + 3 * gap, static_cast<int>(n) * (ph + gap) + gap + 16, kWhite);
  c.text(gap, 4, "target", kBlue);
  c.text(pw + 2 * gap, 4, "prediction", kOrange);
  const std::vector<float> t = targets.to_vector<float>(), p = predictions.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int oy = 16 + gap + static_cast<int>(i) * (ph + gap);
    for (int panel = 0; panel < 2; ++panel) {
      const int ox = gap + panel * (pw + gap);
      c.fill_rect(ox, oy, pw, ph, Rgb{248, 248, 248});
      c.fill_rect(ox, oy + ph / 2, pw, 1, kGrid);
      auto px = [&](int64_t k) { return ox + pw * (k + 0.5) / static_cast<double>(len); };
      auto py = [&](float v) {
        return oy + ph / 2.0 - (ph / 2.0 - 4) * std::clamp(v, -1.0f, 1.0f);
      };
      auto draw = [&](const std::vector<float>& v, Rgb color, double thick) {
        for (int64_t k = 1; k < len; ++k) {
          c.line(px(k - 1), py(v[static_cast<size_t>(i * len + k - 1)]), px(k),
                 py(v[static_cast<size_t>(i * len + k)]), color, thick);
        }
      };
      if (panel == 0) {
        draw(t, kBlue, 2.0);
      } else {
        draw(t, Rgb{200, 200, 200}, 2.0);  // the target, faintly, for comparison
        draw(p, kOrange, 2.0);
      }
    }
  }
  c.save_png(path);
}

}  // namespace

void plot_samples(const tgrad::Tensor& targets, const tgrad::Tensor& predictions,
                  const std::string& path) {
  if (targets.dim() == 4) {
    plot_image_samples(targets, predictions, path);
  } else {
    plot_wave_samples(targets, predictions, path);
  }
}

}  // namespace decoder
