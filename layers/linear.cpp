// nn::Linear: validation, PyTorch initialisation, forward through tgrad::linear.
#include "layers/linear.h"

#include <cmath>

#include "layers/init.h"

namespace tgrad::nn {

Linear::Linear(const LinearOptions& options, Generator& gen) : Module("Linear"), options_(options) {
  TGRAD_CHECK(options_.in_features() >= 0, "Linear: in_features=", options_.in_features(),
              " must be non-negative");
  TGRAD_CHECK(options_.out_features() > 0, "Linear: out_features=", options_.out_features(),
              " must be positive");
  weight = register_parameter("weight", empty({options_.out_features(), options_.in_features()}));
  if (options_.bias()) bias = register_parameter("bias", empty({options_.out_features()}));
  reset_parameters(gen);
}

void Linear::reset_parameters(Generator& gen) {
  const int64_t fan_in = options_.in_features();
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  // kaiming_uniform_(a = sqrt(5)) is exactly +-1/sqrt(fan_in); spelled out so that in_features
  // = 0 (a zero fan) works as in PyTorch.
  if (fan_in > 0) {
    init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::fan_in,
                           init::Nonlinearity::leaky_relu, gen);
  }
  if (bias.defined()) init::uniform_(bias, -bound, bound, gen);
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

}  // namespace tgrad::nn
