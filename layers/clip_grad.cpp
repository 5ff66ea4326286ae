// clip_grad_norm_ and clip_grad_value_ over the parameters' gradients, with PyTorch's formulas.
#include "layers/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace tgrad::nn::utils {

namespace {
std::vector<Tensor> defined_grads(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}
}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  TGRAD_CHECK(std::isfinite(max_norm) && max_norm >= 0.0, "clip_grad_norm_: max_norm=", max_norm,
              " must be finite and non-negative");
  TGRAD_CHECK(norm_type > 0.0 && !std::isnan(norm_type), "clip_grad_norm_: norm_type=", norm_type,
              " must be positive (or infinity)");
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(parameters);
  if (grads.empty()) return 0.0;
  // Each gradient's norm, then the norm of those norms, as torch.nn.utils does.
  double total = 0.0;
  const bool inf_norm = std::isinf(norm_type);
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    if (inf_norm) {
      total = std::max(total, max(abs(g)).item());
    } else {
      const double n = std::pow(sum(pow(abs(g), norm_type)).item(), 1.0 / norm_type);
      total += std::pow(n, norm_type);
    }
  }
  if (!inf_norm) total = std::pow(total, 1.0 / norm_type);
  TGRAD_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm ",
              total, " of the gradients is not finite (error_if_nonfinite=true); nothing changed");
  const double coef = std::min(1.0, max_norm / (total + 1e-6));
  for (const Tensor& g : grads) {
    Tensor target = g;
    target.copy_(g * coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  TGRAD_CHECK(std::isfinite(clip_value) && clip_value >= 0.0,
              "clip_grad_value_: clip_value=", clip_value, " must be finite and non-negative");
  NoGradGuard no_grad;
  for (const Tensor& g : defined_grads(parameters)) {
    Tensor target = g;
    target.copy_(clamp(g, -clip_value, clip_value));
  }
}

}  // namespace tgrad::nn::utils
