// The decoders. 2-D: Linear -> Unflatten (C,4,4) -> three stride-2 ConvTranspose2d
// (4 -> 8 -> 16 -> 32) with LeakyReLU between -> Sigmoid. 1-D: Linear -> Unflatten (C,8) ->
// three stride-2 ConvTranspose1d (8 -> 16 -> 32 -> 64) -> Tanh.
#pragma once

#include <memory>

#include "dataset.h"
#include "layers/container.h"

namespace decoder {

std::shared_ptr<tgrad::nn::SequentialImpl> make_decoder(Mode mode, tgrad::Generator& gen);

}  // namespace decoder
