// Dropout / Dropout2d: p checked at construction, the functional op while training.
#include "layers/dropout.h"

#include <ostream>
#include "core/ops.h"

namespace tgrad::nn {

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  TGRAD_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p=", p, " must be in [0, 1]");
}

Tensor DropoutImpl::forward(const Tensor& x) {
  return dropout(x, p_, is_training());
}

Dropout2dImpl::Dropout2dImpl(double p) : Module("Dropout2d"), p_(p) {
  TGRAD_CHECK(p >= 0.0 && p <= 1.0, "Dropout2d: p=", p, " must be in [0, 1]");
}

Tensor Dropout2dImpl::forward(const Tensor& x) {
  return dropout2d(x, p_, is_training());
}

void DropoutImpl::pretty_print(std::ostream& stream) const {
  stream << "Dropout(p=" << p_ << ", inplace=false)";
}

void Dropout2dImpl::pretty_print(std::ostream& stream) const {
  stream << "Dropout2d(p=" << p_ << ", inplace=false)";
}

}  // namespace tgrad::nn
