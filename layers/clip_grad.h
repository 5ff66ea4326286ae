// Gradient clipping, as torch.nn.utils: clip_grad_norm_ scales every gradient by one factor so
// that their joint norm is at most max_norm; clip_grad_value_ clamps each element. Both write the
// parameters' .grad in place (each leaf's .grad is its own storage) and skip parameters without
// one.
#pragma once

#include <limits>
#include <vector>

#include "core/tensor.h"

namespace tgrad::nn::utils {

// The joint norm of every .grad (norm_type p > 0, or infinity for the largest |element|) before
// clipping; each .grad is multiplied by min(1, max_norm / (norm + 1e-6)), as PyTorch. A
// non-finite norm is an error when error_if_nonfinite (nothing is changed then).
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// Clamps every .grad element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace tgrad::nn::utils
