// nn::init: values are drawn on the host in float64 from the Generator, then copied (and
// converted) into the tensor on its device under NoGradGuard.
#include "layers/init.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/autograd.h"

namespace tgrad::nn::init {

namespace {

void check_defined(const char* fn, const Tensor& t) {
  TGRAD_CHECK(t.defined(), "nn::init::", fn, ": the tensor is undefined");
}

template <class Draw>
const Tensor& fill_with(const Tensor& t, Draw draw) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (double& v : values)
    v = draw();
  NoGradGuard no_grad;
  Tensor target = t;
  target.copy_(from_vector(values, t.shape(), TensorOptions(t.dtype())));
  return t;
}

// The largest finite value of the tensor's dtype: a bound or std past it would become inf.
double dtype_max(const Tensor& t) {
  return t.dtype() == DType::float32 ? static_cast<double>(std::numeric_limits<float>::max())
                                     : std::numeric_limits<double>::max();
}

// `value` must be finite and representable in the tensor's dtype.
void check_finite(const char* fn, const char* name, double value, const Tensor& t) {
  TGRAD_CHECK(std::isfinite(value), "nn::init::", fn, ": ", name, "=", value, " must be finite");
  TGRAD_CHECK(std::fabs(value) <= dtype_max(t), "nn::init::", fn, ": ", name, "=", value,
              " is out of range for a ", t.dtype(), " tensor");
}

double fan(const char* fn, const Tensor& t, FanMode mode) {
  check_defined(fn, t);
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const int64_t f = mode == FanMode::fan_in ? fan_in : fan_out;
  TGRAD_CHECK(f > 0, "nn::init::", fn, ": fan is 0 for a tensor of shape ", t.shape());
  return static_cast<double>(f);
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  TGRAD_CHECK(std::isfinite(param), "nn::init::calculate_gain: param=", param, " must be finite");
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv_transpose1d:
    case Nonlinearity::conv_transpose2d:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu:
      return std::sqrt(2.0 / (1.0 + param * param));
  }
  TGRAD_FAIL("nn::init::calculate_gain: unknown nonlinearity");
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  check_defined("calculate_fan_in_and_fan_out", t);
  TGRAD_CHECK(t.dim() >= 2,
              "nn::init::calculate_fan_in_and_fan_out: needs a tensor with at "
              "least 2 dimensions, got shape ",
              t.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d)
    receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

const Tensor& uniform_(const Tensor& t, double low, double high, Generator& gen) {
  check_defined("uniform_", t);
  check_finite("uniform_", "low", low, t);
  check_finite("uniform_", "high", high, t);
  TGRAD_CHECK(low <= high, "nn::init::uniform_: low=", low, " must not exceed high=", high);
  // As PyTorch: the draw low + (high - low) * u must not overflow on the way.
  TGRAD_CHECK(high - low <= dtype_max(t), "nn::init::uniform_: high - low (high=", high,
              ", low=", low, ") is out of range for a ", t.dtype(), " tensor");
  return fill_with(t, [&] { return gen.uniform(low, high); });
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator& gen) {
  check_defined("normal_", t);
  check_finite("normal_", "mean", mean, t);
  check_finite("normal_", "std", std, t);
  TGRAD_CHECK(std >= 0.0, "nn::init::normal_: std=", std, " must be non-negative");
  return fill_with(t, [&] { return mean + std * gen.normal(); });
}

const Tensor& constant_(const Tensor& t, double value) {
  check_defined("constant_", t);
  // inf and NaN are filled as asked (as in PyTorch); a finite value the dtype cannot hold is not
  // silently turned into inf.
  TGRAD_CHECK(!std::isfinite(value) || std::fabs(value) <= dtype_max(t),
              "nn::init::constant_: value=", value, " is out of range for a ", t.dtype(),
              " tensor");
  NoGradGuard no_grad;
  Tensor target = t;
  target.fill_(value);
  return t;
}

const Tensor& zeros_(const Tensor& t) {
  return constant_(t, 0.0);
}
const Tensor& ones_(const Tensor& t) {
  return constant_(t, 1.0);
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                               Generator& gen) {
  TGRAD_CHECK(std::isfinite(a), "nn::init::kaiming_uniform_: a=", a, " must be finite");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan("kaiming_uniform_", t, mode));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound, gen);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                              Generator& gen) {
  TGRAD_CHECK(std::isfinite(a), "nn::init::kaiming_normal_: a=", a, " must be finite");
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan("kaiming_normal_", t, mode));
  return normal_(t, 0.0, std, gen);
}

const Tensor& xavier_uniform_(const Tensor& t, double gain, Generator& gen) {
  check_defined("xavier_uniform_", t);
  TGRAD_CHECK(std::isfinite(gain) && gain >= 0.0, "nn::init::xavier_uniform_: gain=", gain,
              " must be finite and non-negative");
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  TGRAD_CHECK(fan_in + fan_out > 0, "nn::init::xavier_uniform_: fan_in + fan_out is 0 for shape ",
              t.shape());
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -bound, bound, gen);
}

void reset_layer_parameters_(const Tensor& weight, const Tensor& bias, Generator& gen) {
  const int64_t fan_in = calculate_fan_in_and_fan_out(weight).first;
  if (weight.numel() > 0) {
    kaiming_uniform_(weight, std::sqrt(5.0), FanMode::fan_in, Nonlinearity::leaky_relu, gen);
  }
  if (bias.defined()) {
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    uniform_(bias, -bound, bound, gen);
  }
}

}  // namespace tgrad::nn::init
