// nn::Linear: y = x w^T + b with w (out, in), initialised as PyTorch does (kaiming_uniform_ with
// a = sqrt(5), i.e. uniform in +-1/sqrt(in), and bias uniform in +-1/sqrt(in)).
#pragma once

#include <cstdint>

#include "core/ops.h"
#include "core/random.h"
#include "layers/module.h"

namespace tgrad::nn {

class LinearOptions {
 public:
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TGRAD_ARG(int64_t, in_features);
  TGRAD_ARG(int64_t, out_features);
  TGRAD_ARG(bool, bias) = true;
};

class LinearImpl : public Module {
 public:
  explicit LinearImpl(const LinearOptions& options, Generator& gen = default_generator());
  LinearImpl(int64_t in_features, int64_t out_features, Generator& gen = default_generator())
      : LinearImpl(LinearOptions(in_features, out_features), gen) {}
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  void reset_parameters(Generator& gen = default_generator());

  const LinearOptions& options() const { return options_; }
  Tensor weight;
  Tensor bias;  // undefined when options.bias() is false

 private:
  LinearOptions options_;
};
TGRAD_MODULE(Linear);

}  // namespace tgrad::nn
