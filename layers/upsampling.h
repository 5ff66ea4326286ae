// Upsampling modules over the functional ops, as LibTorch's: Upsample (nearest or bilinear, by
// size or scale factor) and PixelShuffle / PixelUnshuffle, the usual cures for the checkerboard
// artefacts of strided transposed convolutions.
#pragma once

#include <cstdint>

#include "core/ops.h"
#include "layers/module.h"

namespace tgrad::nn {

// UpsampleOptions().scale_factor({2, 2}).mode(kBilinear).align_corners(false), or .size({h, w}).
using UpsampleOptions = InterpolateFuncOptions;

class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(const UpsampleOptions& options);
  Tensor forward(const Tensor& x) override;

 private:
  UpsampleOptions options_;
};
TGRAD_MODULE(Upsample);

class PixelShuffleImpl : public Module {
 public:
  explicit PixelShuffleImpl(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  int64_t factor_;
};
TGRAD_MODULE(PixelShuffle);

class PixelUnshuffleImpl : public Module {
 public:
  explicit PixelUnshuffleImpl(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  int64_t factor_;
};
TGRAD_MODULE(PixelUnshuffle);

}  // namespace tgrad::nn
