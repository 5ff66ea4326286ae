// Activation modules: forwards to relu, leaky_relu, tanh, sigmoid.
#include "layers/activation.h"

#include <cmath>
#include <ostream>

#include "core/ops.h"

namespace tgrad::nn {

Tensor ReLU::forward(const Tensor& x) {
  return relu(x);
}

LeakyReLU::LeakyReLU(double negative_slope) : Module("LeakyReLU"), negative_slope_(negative_slope) {
  TGRAD_CHECK(std::isfinite(negative_slope), "LeakyReLU: negative_slope=", negative_slope,
              " must be finite");
}
Tensor LeakyReLU::forward(const Tensor& x) {
  return leaky_relu(x, negative_slope_);
}

Tensor Tanh::forward(const Tensor& x) {
  return tanh(x);
}

Tensor Sigmoid::forward(const Tensor& x) {
  return sigmoid(x);
}

void LeakyReLU::pretty_print(std::ostream& stream) const {
  stream << "LeakyReLU(negative_slope=" << negative_slope_ << ")";
}

}  // namespace tgrad::nn
