// Dropout modules over tgrad::dropout / dropout2d, with LibTorch's defaults.
#pragma once

#include "layers/module.h"

namespace tgrad::nn {

// Dropout(p) / Dropout2d(p): tgrad::dropout / dropout2d while training, the identity in eval.
// Draws from the default generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  double p_;
};

class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  double p_;
};

}  // namespace tgrad::nn
