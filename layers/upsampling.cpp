// Upsample, PixelShuffle, PixelUnshuffle: options checked at construction, the functional ops in
// forward.
#include "layers/upsampling.h"

#include <ostream>

namespace tgrad::nn {

UpsampleImpl::UpsampleImpl(const UpsampleOptions& options) : Module("Upsample"), options_(options) {
  TGRAD_CHECK(options_.size().has_value() != options_.scale_factor().has_value(),
              "Upsample: give exactly one of size and scale_factor");
}

Tensor UpsampleImpl::forward(const Tensor& x) {
  return interpolate(x, options_);
}

PixelShuffleImpl::PixelShuffleImpl(int64_t upscale_factor)
    : Module("PixelShuffle"), factor_(upscale_factor) {
  TGRAD_CHECK(upscale_factor > 0, "PixelShuffle: upscale_factor=", upscale_factor,
              " must be positive");
}

Tensor PixelShuffleImpl::forward(const Tensor& x) {
  return pixel_shuffle(x, factor_);
}

PixelUnshuffleImpl::PixelUnshuffleImpl(int64_t downscale_factor)
    : Module("PixelUnshuffle"), factor_(downscale_factor) {
  TGRAD_CHECK(downscale_factor > 0, "PixelUnshuffle: downscale_factor=", downscale_factor,
              " must be positive");
}

Tensor PixelUnshuffleImpl::forward(const Tensor& x) {
  return pixel_unshuffle(x, factor_);
}

void PixelShuffleImpl::pretty_print(std::ostream& stream) const {
  stream << "PixelShuffle(upscale_factor=" << factor_ << ")";
}

void PixelUnshuffleImpl::pretty_print(std::ostream& stream) const {
  stream << "PixelUnshuffle(downscale_factor=" << factor_ << ")";
}

}  // namespace tgrad::nn
