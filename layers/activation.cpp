// Activation modules: forwards to relu, leaky_relu, tanh, sigmoid.
#include "layers/activation.h"

#include <cmath>
#include <ostream>

#include "core/ops.h"

namespace tgrad::nn {

Tensor ReLUImpl::forward(const Tensor& x) {
  return relu(x);
}

LeakyReLUImpl::LeakyReLUImpl(double negative_slope) : Module("LeakyReLU"), negative_slope_(negative_slope) {
  TGRAD_CHECK(std::isfinite(negative_slope), "LeakyReLU: negative_slope=", negative_slope,
              " must be finite");
}
Tensor LeakyReLUImpl::forward(const Tensor& x) {
  return leaky_relu(x, negative_slope_);
}

Tensor TanhImpl::forward(const Tensor& x) {
  return tanh(x);
}

Tensor SigmoidImpl::forward(const Tensor& x) {
  return sigmoid(x);
}

void LeakyReLUImpl::pretty_print(std::ostream& stream) const {
  stream << "LeakyReLU(negative_slope=" << negative_slope_ << ")";
}

}  // namespace tgrad::nn
