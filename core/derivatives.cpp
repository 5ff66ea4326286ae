// Every backward formula, one entry per op (see core/derivatives.h). Each returns the closure
// the op records; it captures only what the formula needs and computes only masked gradients.
#include "core/derivatives.h"

#include "core/ops.h"
#include "core/ops_internal.h"

namespace tgrad::derivatives {

namespace {
using Grads = std::vector<Tensor>;
}  // namespace

// ---- shape and type ----

BackwardFn to_device(Device source) {
  return [source](const Tensor& dy, const GradMask&) { return Grads{dy.to(source)}; };
}

BackwardFn to_dtype(DType source) {
  return [source](const Tensor& dy, const GradMask&) { return Grads{dy.to(source)}; };
}

BackwardFn identity() {
  return [](const Tensor& dy, const GradMask&) { return Grads{dy}; };
}

BackwardFn reshape(const Shape& source) {
  return [source](const Tensor& dy, const GradMask&) { return Grads{dy.reshape(source)}; };
}

// dx is zero outside the narrowed rows and dy inside them.
BackwardFn narrow(const Shape& source, int64_t start) {
  return [source, start](const Tensor& dy, const GradMask&) {
    Tensor dx = zeros(source, TensorOptions(dy.dtype()).device(dy.device()));
    dx.narrow(0, start, dy.size(0)).copy_(dy);
    return Grads{dx};
  };
}

BackwardFn expand(const Shape& source) {
  return [source](const Tensor& dy, const GradMask&) { return Grads{tgrad::sum_to(dy, source)}; };
}

// sum and sum_to: dy, viewed with the summed axes as size 1 (`keep`), is broadcast back.
BackwardFn sum(const Shape& source, const Shape& keep) {
  return [source, keep](const Tensor& dy, const GradMask&) {
    return Grads{tgrad::expand(dy.reshape(keep), source)};
  };
}

// ---- arithmetic ----

BackwardFn add(const Shape& a, const Shape& b) {
  return [a, b](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? tgrad::sum_to(dy, a) : Tensor(), m[1] ? tgrad::sum_to(dy, b) : Tensor()};
  };
}

BackwardFn sub(const Shape& a, const Shape& b) {
  return [a, b](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? tgrad::sum_to(dy, a) : Tensor(),
                 m[1] ? tgrad::sum_to(neg(dy), b) : Tensor()};
  };
}

// d(a*b) = dy*b, dy*a
BackwardFn mul(const Tensor& a, const Tensor& b) {
  return [a, b](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? tgrad::sum_to(dy * b, a.shape()) : Tensor(),
                 m[1] ? tgrad::sum_to(dy * a, b.shape()) : Tensor()};
  };
}

// d(a/b) = dy/b, -dy*a/b^2
BackwardFn div(const Tensor& a, const Tensor& b) {
  return [a, b](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? tgrad::sum_to(dy / b, a.shape()) : Tensor(),
                 m[1] ? tgrad::sum_to(neg(dy * a / (b * b)), b.shape()) : Tensor()};
  };
}

BackwardFn scale(double factor) {
  return [factor](const Tensor& dy, const GradMask&) {
    return Grads{factor == 1.0 ? dy : dy * factor};
  };
}

// d(c/x) = -c*dy/x^2
BackwardFn rdiv(const Tensor& x, double numerator) {
  return [x, numerator](const Tensor& dy, const GradMask&) {
    return Grads{dy * (-numerator) / (x * x)};
  };
}

// ---- pointwise functions ----

BackwardFn exp(const Tensor& y) {
  return [y](const Tensor& dy, const GradMask&) { return Grads{dy * y}; };
}

BackwardFn log(const Tensor& x) {
  return [x](const Tensor& dy, const GradMask&) { return Grads{dy / x}; };
}

// d|x| = sign(x) (0 at 0, as PyTorch)
BackwardFn abs(const Tensor& x) {
  return [x](const Tensor& dy, const GradMask&) {
    Tensor sign = empty_like(x);
    if (x.numel() > 0) backend(x.device()).unary(UnaryOp::sign, 0.0, x, sign);
    return Grads{dy * sign};
  };
}

// d sqrt(x) = dy / (2 sqrt(x))
BackwardFn sqrt(const Tensor& y) {
  return [y](const Tensor& dy, const GradMask&) { return Grads{dy / (y * 2.0)}; };
}

// d x^p = dy * p * x^(p-1)
BackwardFn pow(const Tensor& x, double exponent) {
  return [x, exponent](const Tensor& dy, const GradMask&) {
    if (exponent == 0.0) return Grads{zeros_like(dy)};
    return Grads{dy * tgrad::pow(x, exponent - 1.0) * exponent};
  };
}

namespace {
Tensor step_of(const Tensor& x, UnaryOp op, double p) {
  Tensor s = empty_like(x);
  if (x.numel() > 0) backend(x.device()).unary(op, p, x, s);
  return s;
}
}  // namespace

// d relu(x) = dy * (x > 0)
BackwardFn relu(const Tensor& x) {
  return
      [x](const Tensor& dy, const GradMask&) { return Grads{dy * step_of(x, UnaryOp::step, 0.0)}; };
}

// d leaky_relu(x) = dy * (x > 0 ? 1 : slope)
BackwardFn leaky_relu(const Tensor& x, double negative_slope) {
  return [x, negative_slope](const Tensor& dy, const GradMask&) {
    return Grads{dy * step_of(x, UnaryOp::leaky_step, negative_slope)};
  };
}

// d sigmoid = dy * y * (1 - y)
BackwardFn sigmoid(const Tensor& y) {
  return [y](const Tensor& dy, const GradMask&) { return Grads{dy * y * rsub(y, 1.0)}; };
}

// d tanh = dy * (1 - y^2)
BackwardFn tanh(const Tensor& y) {
  return [y](const Tensor& dy, const GradMask&) { return Grads{dy * rsub(y * y, 1.0)}; };
}

// ---- products ----

// y = a b: da = dy b^T, db = a^T dy
BackwardFn matmul(const Tensor& a, const Tensor& b) {
  return [a, b](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? detail::matmul_raw(dy, b, false, true) : Tensor(),
                 m[1] ? detail::matmul_raw(a, dy, true, false) : Tensor()};
  };
}

// y = x w^T + b: dx = dy w, dw = dy^T x, db = sum of dy over rows
BackwardFn linear(const Tensor& x, const Tensor& w, bool has_bias) {
  return [x, w, has_bias](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? detail::matmul_raw(dy, w, false, false) : Tensor(),
                 m[1] ? detail::matmul_raw(dy, x, true, false) : Tensor(),
                 has_bias && m[2] ? tgrad::sum(dy, {0}) : Tensor()};
  };
}

// ---- transposed convolution ----

// dx = dgrad(dy, w) (a regular convolution of dy), dw = wgrad(x, dy), db = sum of dy per channel
BackwardFn conv_transpose(const ConvGeometry& g, const Tensor& x, const Tensor& w) {
  return [g, x, w](const Tensor& dy, const GradMask& m) {
    return Grads{m[0] ? detail::conv_transpose_dgrad(g, dy, w, x.shape()) : Tensor(),
                 m[1] ? detail::conv_transpose_wgrad(g, x, dy, w.shape()) : Tensor(),
                 m[2] ? detail::conv_transpose_bias_grad(g, dy) : Tensor()};
  };
}

}  // namespace tgrad::derivatives
