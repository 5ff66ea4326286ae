// Dropout modules over tgrad::dropout / dropout2d, with LibTorch's defaults.
#pragma once

#include "layers/module.h"

namespace tgrad::nn {

// Dropout(p) / Dropout2d(p): tgrad::dropout / dropout2d while training, the identity in eval.
// Draws from the default generator.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  double p_;
};
TGRAD_MODULE(Dropout);

class Dropout2dImpl : public Module {
 public:
  explicit Dropout2dImpl(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  double p_;
};
TGRAD_MODULE(Dropout2d);

}  // namespace tgrad::nn
