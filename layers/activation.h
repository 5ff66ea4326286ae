// Activation modules, each a thin wrapper over its core op: ReLU, LeakyReLU(negative_slope),
// Tanh, Sigmoid. They hold no parameters.
#pragma once

#include "core/ops.h"
#include "layers/module.h"

namespace tgrad::nn {

class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};
TGRAD_MODULE(ReLU);

// LeakyReLUOptions().negative_slope(0.2), LibTorch's name and default.
struct LeakyReLUOptions {
  TGRAD_ARG(double, negative_slope) = 0.01;
};

class LeakyReLUImpl : public Module {
 public:
  explicit LeakyReLUImpl(double negative_slope = 0.01);
  explicit LeakyReLUImpl(const LeakyReLUOptions& options)
      : LeakyReLUImpl(options.negative_slope()) {}
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  double negative_slope() const { return negative_slope_; }

 private:
  double negative_slope_;
};
TGRAD_MODULE(LeakyReLU);

class TanhImpl : public Module {
 public:
  TanhImpl() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};
TGRAD_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  SigmoidImpl() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};
TGRAD_MODULE(Sigmoid);

}  // namespace tgrad::nn
