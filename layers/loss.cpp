// Losses: argument checks, the elementwise formula from core ops, then the reduction.
#include "layers/loss.h"

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops_shape.h"

namespace tgrad::nn {

namespace {

void check_args(const char* fn, const Tensor& input, const Tensor& target) {
  TGRAD_CHECK(input.defined(), fn, ": input is undefined");
  TGRAD_CHECK(target.defined(), fn, ": target is undefined");
  TGRAD_CHECK(input.shape() == target.shape(), fn, ": input shape ", input.shape(),
              " does not match target shape ", target.shape());
  TGRAD_CHECK(input.dtype() == target.dtype(), fn, ": input is ", input.dtype(), " but target is ",
              target.dtype());
  TGRAD_CHECK(input.device() == target.device(), fn, ": input is on ", input.device(),
              " but target is on ", target.device());
}

Tensor reduce(const char* fn, const Tensor& elementwise, Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return elementwise;
    case Reduction::sum:
      return sum(elementwise);
    case Reduction::mean:
      return mean(elementwise);  // NaN (0/0) for an empty input, as in PyTorch
  }
  TGRAD_FAIL(fn, ": unknown reduction");
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_args("mse_loss", input, target);
  const Tensor d = input - target;
  return reduce("mse_loss", d * d, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_args("l1_loss", input, target);
  return reduce("l1_loss", abs(input - target), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction) {
  const char* fn = "binary_cross_entropy";
  check_args(fn, input, target);
  if (input.numel() > 0) {
    NoGradGuard no_grad;
    const double lo = min(input).item(), hi = max(input).item();
    TGRAD_CHECK(lo >= 0.0 && hi <= 1.0, fn, ": every input element must be a probability in ",
                "[0, 1]; got values from ", lo, " to ", hi, " (for logits use ",
                "binary_cross_entropy_with_logits)");
  }
  // PyTorch clamps each log at -100 so that a saturated probability gives a finite loss.
  const Tensor log_x = clamp(log(input), -100.0);
  const Tensor log_1mx = clamp(log(1.0 - input), -100.0);
  return reduce(fn, -(target * log_x + (1.0 - target) * log_1mx), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction) {
  const char* fn = "binary_cross_entropy_with_logits";
  check_args(fn, input, target);
  // max(x, 0) is spelled (x + |x|)/2 (exact in floating point): with |x|' = sign(x) = 0 at
  // x = 0 it contributes 1/2 there and the log term 0, giving the true derivative
  // sigmoid(0) - t, where relu's step(0) = 0 would give -t.
  const Tensor a = abs(input);
  const Tensor max_x_0 = (input + a) * 0.5;
  return reduce(fn, max_x_0 - input * target + log(exp(-a) + 1.0), reduction);
}

}  // namespace tgrad::nn
