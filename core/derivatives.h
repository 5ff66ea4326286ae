// The backward formula of every differentiable op, one entry per op (like PyTorch's
// derivatives table). Each function takes what its op saved and returns the BackwardFn that
// the op records; core/derivatives.cpp holds every formula together.
#pragma once

#include "core/autograd.h"
#include "core/conv_geometry.h"
#include "core/tensor.h"

namespace tgrad::derivatives {

// Shape and type changes.
BackwardFn to_device(Device source);
BackwardFn to_dtype(DType source);
BackwardFn identity();  // clone
BackwardFn reshape(const Shape& source);
BackwardFn narrow(const Shape& source, int64_t start);  // dim 0
BackwardFn expand(const Shape& source);
BackwardFn sum(const Shape& source, const Shape& keep);  // sum and sum_to

// Arithmetic (a and b may have been broadcast; gradients are summed back to their shapes).
BackwardFn add(const Shape& a, const Shape& b);
BackwardFn sub(const Shape& a, const Shape& b);
BackwardFn mul(const Tensor& a, const Tensor& b);
BackwardFn div(const Tensor& a, const Tensor& b);
BackwardFn scale(double factor);                     // y = x * factor (and x + c, where factor = 1)
BackwardFn rdiv(const Tensor& x, double numerator);  // y = numerator / x

// Pointwise functions; y is the op's output where the formula is cheaper in it.
BackwardFn exp(const Tensor& y);
BackwardFn log(const Tensor& x);
BackwardFn abs(const Tensor& x);
BackwardFn sqrt(const Tensor& y);
BackwardFn pow(const Tensor& x, double exponent);
BackwardFn relu(const Tensor& x);
BackwardFn leaky_relu(const Tensor& x, double negative_slope);
BackwardFn sigmoid(const Tensor& y);
BackwardFn tanh(const Tensor& y);

// Products. matmul: y = a b. linear: y = x w^T + b with x 2-D.
BackwardFn matmul(const Tensor& a, const Tensor& b);
BackwardFn linear(const Tensor& x, const Tensor& w, bool has_bias);

// conv_transpose1d/2d: (dx, dw, db) = (dgrad(dy, w), wgrad(x, dy), sum of dy), each under the mask.
BackwardFn conv_transpose(const ConvGeometry& g, const Tensor& x, const Tensor& w);

}  // namespace tgrad::derivatives
