// The zoo's synthetic data, drawn by the programs themselves from a seeded Generator: 32x32 RGB
// shape pictures (the upsampling demo's discs, rings and squares), and pairs of a coarse
// spectrum-like frame sequence and the waveform it describes.
#pragma once

#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace zoo {

// (N, 3, 32, 32) float32 pictures scaled to [-1, 1] (DCGAN's Tanh range).
tgrad::Tensor shape_images(int64_t n, tgrad::Generator& gen);

// A waveform of kWaveFrames * kHop samples: a sum of a few partials (frequency, amplitude
// gliding linearly over the clip, phase 0 at the start); its coarse description, a complex
// spectrum-like frame sequence: per frame of kHop samples, each partial's amplitude spread over
// kSpecBins log-spaced frequency bins, times the cosine (first kSpecBins channels) and the sine
// (last kSpecBins) of its phase at the frame's centre. Without that phase, a partial's phase
// late in the clip would be fixed only by its exact frequency, which coarse bins cannot give,
// and no loss on the waveform could be learnt past the first frames.
struct WaveBatch {
  tgrad::Tensor spec;  // (N, kSpecChannels, kWaveFrames)
  tgrad::Tensor wave;  // (N, 1, kWaveFrames * kHop), in about [-0.9, 0.9]
};
WaveBatch spectrum_waves(int64_t n, tgrad::Generator& gen);

inline constexpr int64_t kSpecBins = 16;
inline constexpr int64_t kSpecChannels = 2 * kSpecBins;
inline constexpr int64_t kWaveFrames = 8;
inline constexpr int64_t kHop = 16;  // the generator's upsampling rates multiply to this

}  // namespace zoo
