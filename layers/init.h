// nn::init: in-place initialisers with PyTorch's formulas (uniform_, normal_, constant_,
// zeros_, ones_, kaiming_uniform_, kaiming_normal_, xavier_uniform_), drawing from a Generator
// (the thread's default_generator() unless one is passed). They write without autograd.
#pragma once

#include <cstdint>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace tgrad::nn::init {

enum class Nonlinearity {
  linear,
  conv_transpose1d,
  conv_transpose2d,
  sigmoid,
  tanh,
  relu,
  leaky_relu
};
enum class FanMode { fan_in, fan_out };

// PyTorch's calculate_gain; `param` is leaky_relu's negative slope, used as given (a negative
// slope too, as kaiming_*'s `a`), with LibTorch's default 0.01.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// PyTorch's _calculate_fan_in_and_fan_out: fan_in = size(1) * receptive field, fan_out =
// size(0) * receptive field, receptive field = product of sizes past dim 1. Needs dim >= 2.
// For a ConvTranspose weight (C_in, C_out/groups, k...) fan_in is C_out/groups * prod(k).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

// Bounds, mean, std, gain and `a` must be finite and fit the tensor's dtype, bounds in order
// (with high - low in range too), std and gain non-negative; otherwise tgrad::Error, and the
// tensor is unchanged. constant_ fills inf and NaN as asked but refuses a finite value the
// dtype cannot hold.
const Tensor& uniform_(const Tensor& t, double low = 0.0, double high = 1.0,
                       Generator& gen = default_generator());
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0,
                      Generator& gen = default_generator());
const Tensor& constant_(const Tensor& t, double value);
const Tensor& zeros_(const Tensor& t);
const Tensor& ones_(const Tensor& t);
// Uniform in +-gain * sqrt(3 / fan); with a = sqrt(5) and leaky_relu that is +-1/sqrt(fan_in),
// the default of PyTorch's Linear and Conv layers.
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                               Nonlinearity nonlinearity = Nonlinearity::leaky_relu,
                               Generator& gen = default_generator());
// PyTorch's reset_parameters() of Linear and of every convolution: weight from
// kaiming_uniform_(a = sqrt(5)), i.e. U(+-1/sqrt(fan_in)), and bias (when defined) from
// U(+-1/sqrt(fan_in)), zeros when fan_in is 0 (an empty weight is left as it is).
void reset_layer_parameters_(const Tensor& weight, const Tensor& bias,
                             Generator& gen = default_generator());
const Tensor& kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                              Nonlinearity nonlinearity = Nonlinearity::leaky_relu,
                              Generator& gen = default_generator());
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1.0,
                              Generator& gen = default_generator());

}  // namespace tgrad::nn::init
