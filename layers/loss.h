// Loss functions composed from differentiable core ops (so autograd needs nothing new):
// mse_loss, l1_loss, binary_cross_entropy_with_logits, each with reduction none / mean / sum.
#pragma once

#include "core/tensor.h"

namespace tgrad::nn {

enum class Reduction { none, mean, sum };

// mean((input - target)^2)
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// mean(|input - target|)
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// mean(max(x, 0) - x*t + log(1 + exp(-|x|))): -[t log s(x) + (1-t) log(1-s(x))] without overflow.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

}  // namespace tgrad::nn
