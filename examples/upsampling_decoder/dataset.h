// The demo's procedural data: 32x32 RGB pictures of one anti-aliased shape (disk, ring or
// square) described by a parameter vector, and 64-sample sine waveforms described by
// frequency, phase and amplitude. Every batch is drawn from a seeded Generator.
#pragma once

#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace decoder {

enum class Mode { image2d, wave1d };

struct Batch {
  tgrad::Tensor input;   // (N, input_features(mode))
  tgrad::Tensor target;  // (N, 3, 32, 32) in [0, 1], or (N, 1, 64) in [-1, 1]
};

int64_t input_features(Mode mode);
// N random examples, float32 on the CPU.
Batch make_batch(Mode mode, int64_t n, tgrad::Generator& gen);

inline constexpr int64_t kImageSize = 32;
inline constexpr int64_t kWaveLength = 64;

}  // namespace decoder
