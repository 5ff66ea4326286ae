// Activation modules, each a thin wrapper over its core op: ReLU, LeakyReLU(negative_slope),
// Tanh, Sigmoid. They hold no parameters.
#pragma once

#include "layers/module.h"

namespace tgrad::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  double negative_slope() const { return negative_slope_; }

 private:
  double negative_slope_;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace tgrad::nn
