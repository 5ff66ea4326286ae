// Loss functions composed from differentiable core ops (so autograd needs nothing new):
// mse_loss, l1_loss, binary_cross_entropy, binary_cross_entropy_with_logits, each with reduction
// none / mean / sum. As in LibTorch they are also reachable as tgrad::mse_loss and so on.
#pragma once

#include "core/tensor.h"

namespace tgrad::nn {

enum class Reduction { none, mean, sum };

// mean((input - target)^2)
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// mean(|input - target|)
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// mean(-[t log(x) + (1-t) log(1-x)]) for probabilities x in [0, 1] (checked), each log clamped
// at -100 as PyTorch does, so x = 0 or 1 gives a finite loss.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                            Reduction reduction = Reduction::mean);
// mean(max(x, 0) - x*t + log(1 + exp(-|x|))): -[t log s(x) + (1-t) log(1-s(x))] without overflow.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

}  // namespace tgrad::nn

namespace tgrad {
using nn::binary_cross_entropy;
using nn::binary_cross_entropy_with_logits;
using nn::l1_loss;
using nn::mse_loss;
}  // namespace tgrad
