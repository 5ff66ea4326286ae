// Drawing the zoo's pictures (through the demo's dataset) and spectrum/waveform pairs.
#include "data.h"

#include <cmath>
#include <vector>

#include "../upsampling_decoder/dataset.h"
#include "core/ops.h"

namespace zoo {

tgrad::Tensor shape_images(int64_t n, tgrad::Generator& gen) {
  return decoder::make_batch(decoder::Mode::image2d, n, gen).target * 2.0 - 1.0;
}

WaveBatch spectrum_waves(int64_t n, tgrad::Generator& gen) {
  constexpr int kPartials = 3;
  // Frequencies in cycles per sample, below the Nyquist limit with room to spare.
  constexpr double kLowFreq = 1.0 / 64.0, kHighFreq = 1.0 / 5.0;
  const int64_t len = kWaveFrames * kHop;
  std::vector<float> spec(static_cast<size_t>(n * kSpecChannels * kWaveFrames), 0.0f);
  std::vector<float> wave(static_cast<size_t>(n * len), 0.0f);
  const double log_span = std::log(kHighFreq / kLowFreq);
  for (int64_t i = 0; i < n; ++i) {
    for (int p = 0; p < kPartials; ++p) {
      const double f = kLowFreq * std::exp(gen.uniform() * log_span);
      const double a0 = gen.uniform(0.0, 0.3), a1 = gen.uniform(0.0, 0.3);
      // Bin position of f on the log axis, for the Gaussian spread over bins.
      const double pos = std::log(f / kLowFreq) / log_span * static_cast<double>(kSpecBins - 1);
      double phase = 0.0;
      for (int64_t t = 0; t < len; ++t) {
        const double a = a0 + (a1 - a0) * static_cast<double>(t) / static_cast<double>(len - 1);
        wave[static_cast<size_t>(i * len + t)] += static_cast<float>(a * std::sin(phase));
        phase += 2.0 * M_PI * f;
      }
      for (int64_t fr = 0; fr < kWaveFrames; ++fr) {
        const double centre = (static_cast<double>(fr) + 0.5) * kHop;
        const double a = a0 + (a1 - a0) * centre / static_cast<double>(len - 1);
        const double phase_c = 2.0 * M_PI * f * centre;
        for (int64_t b = 0; b < kSpecBins; ++b) {
          const double d = static_cast<double>(b) - pos;
          const double m = a * std::exp(-d * d);
          spec[static_cast<size_t>((i * kSpecChannels + b) * kWaveFrames + fr)] +=
              static_cast<float>(m * std::cos(phase_c));
          spec[static_cast<size_t>((i * kSpecChannels + kSpecBins + b) * kWaveFrames + fr)] +=
              static_cast<float>(m * std::sin(phase_c));
        }
      }
    }
  }
  return {tgrad::from_vector(spec, {n, kSpecChannels, kWaveFrames}),
          tgrad::from_vector(wave, {n, 1, len})};
}

}  // namespace zoo
