// Shapes are rendered from a signed distance d (pixels, negative inside) with coverage
// clamp(0.5 - d, 0, 1), which anti-aliases every edge by about one pixel.
#include "dataset.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace decoder {

namespace {

constexpr int kShapeKinds = 3;  // disk, ring, square

// Signed distance in pixels from pixel centre (x, y) to shape `kind` centred at (cx, cy).
double signed_distance(int kind, double x, double y, double cx, double cy, double r) {
  const double dx = x - cx, dy = y - cy;
  const double dist = std::sqrt(dx * dx + dy * dy);
  switch (kind) {
    case 0:
      return dist - r;
    case 1:
      return std::abs(dist - 0.7 * r) - 0.3 * r;
    default:
      return std::max(std::abs(dx), std::abs(dy)) - 0.85 * r;
  }
}

void make_images(int64_t n, tgrad::Generator& gen, std::vector<float>& in,
                 std::vector<float>& out) {
  const int64_t s = kImageSize;
  for (int64_t i = 0; i < n; ++i) {
    const int kind = static_cast<int>(gen.uniform() * kShapeKinds) % kShapeKinds;
    const double u = gen.uniform(0.3, 0.7), v = gen.uniform(0.3, 0.7);
    const double size = gen.uniform(0.12, 0.28);
    const double rgb[3] = {gen.uniform(0.25, 1.0), gen.uniform(0.25, 1.0), gen.uniform(0.25, 1.0)};
    float* p = &in[static_cast<size_t>(i * 9)];
    for (int k = 0; k < kShapeKinds; ++k)
      p[k] = k == kind ? 1.0f : 0.0f;
    // Continuous inputs scaled to about [-1, 1].
    p[3] = static_cast<float>((u - 0.5) * 5.0);
    p[4] = static_cast<float>((v - 0.5) * 5.0);
    p[5] = static_cast<float>((size - 0.2) * 12.5);
    for (int c = 0; c < 3; ++c)
      p[6 + c] = static_cast<float>((rgb[c] - 0.625) * 2.67);
    const double cx = u * s, cy = v * s, r = size * s;
    float* img = &out[static_cast<size_t>(i * 3 * s * s)];
    for (int64_t y = 0; y < s; ++y) {
      for (int64_t x = 0; x < s; ++x) {
        const double d = signed_distance(kind, x + 0.5, y + 0.5, cx, cy, r);
        const double a = std::clamp(0.5 - d, 0.0, 1.0);
        for (int c = 0; c < 3; ++c) {
          img[(c * s + y) * s + x] = static_cast<float>(0.08 + a * (rgb[c] - 0.08));
        }
      }
    }
  }
}

void make_waves(int64_t n, tgrad::Generator& gen, std::vector<float>& in, std::vector<float>& out) {
  const int64_t len = kWaveLength;
  for (int64_t i = 0; i < n; ++i) {
    const double freq = gen.uniform(1.0, 4.0);  // cycles per window
    const double phase = gen.uniform(0.0, 2.0 * M_PI);
    const double amp = gen.uniform(0.3, 0.9);
    float* p = &in[static_cast<size_t>(i * 4)];
    p[0] = static_cast<float>((freq - 2.5) / 1.5);
    p[1] = static_cast<float>(std::cos(phase));
    p[2] = static_cast<float>(std::sin(phase));
    p[3] = static_cast<float>((amp - 0.6) / 0.3);
    for (int64_t t = 0; t < len; ++t) {
      const double x = 2.0 * M_PI * freq * static_cast<double>(t) / static_cast<double>(len);
      out[static_cast<size_t>(i * len + t)] = static_cast<float>(amp * std::sin(x + phase));
    }
  }
}

}  // namespace

int64_t input_features(Mode mode) {
  return mode == Mode::image2d ? 9 : 4;
}

Batch make_batch(Mode mode, int64_t n, tgrad::Generator& gen) {
  const int64_t f = input_features(mode);
  std::vector<float> in(static_cast<size_t>(n * f));
  if (mode == Mode::image2d) {
    std::vector<float> out(static_cast<size_t>(n * 3 * kImageSize * kImageSize));
    make_images(n, gen, in, out);
    return {tgrad::from_vector(in, {n, f}),
            tgrad::from_vector(out, {n, 3, kImageSize, kImageSize})};
  }
  std::vector<float> out(static_cast<size_t>(n * kWaveLength));
  make_waves(n, gen, in, out);
  return {tgrad::from_vector(in, {n, f}), tgrad::from_vector(out, {n, 1, kWaveLength})};
}

}  // namespace decoder
