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
// gliding linearly over the clip, phase 0 at the start); its coarse description: per frame of
// kHop samples, each partial's amplitude spread over kSpecBins log-spaced frequency bins.
struct WaveBatch {
  tgrad::Tensor spec;  // (N, kSpecBins, kWaveFrames)
  tgrad::Tensor wave;  // (N, 1, kWaveFrames * kHop), in about [-0.9, 0.9]
};
WaveBatch spectrum_waves(int64_t n, tgrad::Generator& gen);

inline constexpr int64_t kSpecBins = 16;
inline constexpr int64_t kWaveFrames = 8;
inline constexpr int64_t kHop = 16;  // the generator's upsampling rates multiply to this

}  // namespace zoo
