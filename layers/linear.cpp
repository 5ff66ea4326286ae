// nn::Linear: validation, PyTorch initialisation, forward through tgrad::linear.
#include "layers/linear.h"

#include <ostream>
#include "layers/init.h"

namespace tgrad::nn {

LinearImpl::LinearImpl(const LinearOptions& options, Generator& gen) : Module("Linear"), options_(options) {
  TGRAD_CHECK(options_.in_features() >= 0, "Linear: in_features=", options_.in_features(),
              " must be non-negative");
  TGRAD_CHECK(options_.out_features() > 0, "Linear: out_features=", options_.out_features(),
              " must be positive");
  weight = register_parameter("weight", empty({options_.out_features(), options_.in_features()}));
  if (options_.bias()) bias = register_parameter("bias", empty({options_.out_features()}));
  reset_parameters(gen);
}

void LinearImpl::reset_parameters(Generator& gen) {
  init::reset_layer_parameters_(weight, bias, gen);
}

Tensor LinearImpl::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "Linear(in_features=" << options_.in_features()
         << ", out_features=" << options_.out_features() << ", bias=" << std::boolalpha
         << options_.bias() << std::noboolalpha << ")";
}

}  // namespace tgrad::nn
