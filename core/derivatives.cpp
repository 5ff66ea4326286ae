// Every backward formula, one entry per op (see core/derivatives.h). Each returns the closure
// the op records and the tensors it captured; closures compute only masked gradients, and use
// differentiable ops only, so that backward with create_graph records them.
#include "core/derivatives.h"

#include "core/ops.h"
#include "core/ops_internal.h"

namespace tgrad::derivatives {

namespace {
using Grads = std::vector<Tensor>;

// A step function of x (relu's, leaky_relu's, abs's derivative): its own derivative is zero
// almost everywhere, so it is computed without history.
Tensor step_of(const Tensor& x, UnaryOp op, double p) {
  Tensor s = empty_like(x);
  if (x.numel() > 0) backend(x.device()).unary(op, p, x, s);
  return s;
}

// The op's output for a formula: the saved (detached) value, or, when backward is being
// recorded, the output recomputed from x with history so that the second derivative sees it.
template <class Recompute>
Tensor output_for_formula(const Tensor& y, const Tensor& x, Recompute recompute) {
  return grad_mode_enabled() ? recompute(x) : y;
}
}  // namespace

// ---- shape and type ----

Formula to_device(Device source) {
  return {[source](const Tensor& dy, const GradMask&) { return Grads{dy.to(source)}; }, {}};
}

Formula to_dtype(DType source) {
  return {[source](const Tensor& dy, const GradMask&) { return Grads{dy.to(source)}; }, {}};
}

Formula identity() {
  return {[](const Tensor& dy, const GradMask&) { return Grads{dy}; }, {}};
}

Formula reshape(const Shape& source) {
  return {[source](const Tensor& dy, const GradMask&) { return Grads{dy.reshape(source)}; }, {}};
}

// dx is zero outside the narrowed rows and dy inside them.
Formula narrow(const Shape& source, int64_t start) {
  return {[source, start](const Tensor& dy, const GradMask&) {
            return Grads{detail::narrow_backward(dy, source, start)};
          },
          {}};
}

// The embedding's gradient is the narrowed rows of the upstream gradient.
Formula narrow_backward(int64_t start, int64_t length) {
  return {[start, length](const Tensor& g, const GradMask&) {
            return Grads{g.narrow(0, start, length)};
          },
          {}};
}

Formula expand(const Shape& source) {
  return {[source](const Tensor& dy, const GradMask&) { return Grads{tgrad::sum_to(dy, source)}; },
          {}};
}

// sum and sum_to: dy, viewed with the summed axes as size 1 (`keep`), is broadcast back.
Formula sum(const Shape& source, const Shape& keep) {
  return {[source, keep](const Tensor& dy, const GradMask&) {
            return Grads{tgrad::expand(dy.reshape(keep), source)};
          },
          {}};
}

// ---- arithmetic ----

Formula add(const Shape& a, const Shape& b) {
  return {[a, b](const Tensor& dy, const GradMask& m) {
            return Grads{m[0] ? tgrad::sum_to(dy, a) : Tensor(),
                         m[1] ? tgrad::sum_to(dy, b) : Tensor()};
          },
          {}};
}

Formula sub(const Shape& a, const Shape& b) {
  return {[a, b](const Tensor& dy, const GradMask& m) {
            return Grads{m[0] ? tgrad::sum_to(dy, a) : Tensor(),
                         m[1] ? tgrad::sum_to(neg(dy), b) : Tensor()};
          },
          {}};
}

// d(a*b) = dy*b, dy*a
Formula mul(const Tensor& a, const Tensor& b) {
  return {[a, b](const Tensor& dy, const GradMask& m) {
            return Grads{m[0] ? tgrad::sum_to(dy * b, a.shape()) : Tensor(),
                         m[1] ? tgrad::sum_to(dy * a, b.shape()) : Tensor()};
          },
          {a, b}};
}

// d(a/b) = dy/b, -dy*a/b^2
Formula div(const Tensor& a, const Tensor& b) {
  return {[a, b](const Tensor& dy, const GradMask& m) {
            return Grads{m[0] ? tgrad::sum_to(dy / b, a.shape()) : Tensor(),
                         m[1] ? tgrad::sum_to(neg(dy * a / (b * b)), b.shape()) : Tensor()};
          },
          {a, b}};
}

Formula scale(double factor) {
  return {[factor](const Tensor& dy, const GradMask&) {
            return Grads{factor == 1.0 ? dy : dy * factor};
          },
          {}};
}

// d(c/x) = -c*dy/x^2
Formula rdiv(const Tensor& x, double numerator) {
  return {[x, numerator](const Tensor& dy, const GradMask&) {
            return Grads{dy * (-numerator) / (x * x)};
          },
          {x}};
}

// ---- pointwise functions ----

Formula exp(const Tensor& x, const Tensor& y) {
  return {
      [x, y](const Tensor& dy, const GradMask&) {
        return Grads{dy * output_for_formula(y, x, [](const Tensor& t) { return tgrad::exp(t); })};
      },
      {x, y}};
}

Formula log(const Tensor& x) {
  return {[x](const Tensor& dy, const GradMask&) { return Grads{dy / x}; }, {x}};
}

// d|x| = sign(x) (0 at 0, as PyTorch)
Formula abs(const Tensor& x) {
  return {
      [x](const Tensor& dy, const GradMask&) { return Grads{dy * step_of(x, UnaryOp::sign, 0.0)}; },
      {x}};
}

// d sqrt(x) = dy / (2 sqrt(x))
Formula sqrt(const Tensor& x, const Tensor& y) {
  return {[x, y](const Tensor& dy, const GradMask&) {
            const Tensor out =
                output_for_formula(y, x, [](const Tensor& t) { return tgrad::sqrt(t); });
            return Grads{dy / (out * 2.0)};
          },
          {x, y}};
}

// d x^p = dy * p * x^(p-1)
Formula pow(const Tensor& x, double exponent) {
  return {[x, exponent](const Tensor& dy, const GradMask&) {
            if (exponent == 0.0) return Grads{dy * 0.0};
            return Grads{dy * tgrad::pow(x, exponent - 1.0) * exponent};
          },
          {x}};
}

// d relu(x) = dy * (x > 0)
Formula relu(const Tensor& x) {
  return {
      [x](const Tensor& dy, const GradMask&) { return Grads{dy * step_of(x, UnaryOp::step, 0.0)}; },
      {x}};
}

// d leaky_relu(x) = dy * (x > 0 ? 1 : slope)
Formula leaky_relu(const Tensor& x, double negative_slope) {
  return {[x, negative_slope](const Tensor& dy, const GradMask&) {
            return Grads{dy * step_of(x, UnaryOp::leaky_step, negative_slope)};
          },
          {x}};
}

// d sigmoid = dy * y * (1 - y)
Formula sigmoid(const Tensor& x, const Tensor& y) {
  return {[x, y](const Tensor& dy, const GradMask&) {
            const Tensor out =
                output_for_formula(y, x, [](const Tensor& t) { return tgrad::sigmoid(t); });
            return Grads{dy * out * rsub(out, 1.0)};
          },
          {x, y}};
}

// d tanh = dy * (1 - y^2)
Formula tanh(const Tensor& x, const Tensor& y) {
  return {[x, y](const Tensor& dy, const GradMask&) {
            const Tensor out =
                output_for_formula(y, x, [](const Tensor& t) { return tgrad::tanh(t); });
            return Grads{dy * rsub(out * out, 1.0)};
          },
          {x, y}};
}

// ---- products ----

// y = A B with A = op(a), B = op(b): dA = dy B^T and dB = A^T dy, transposed back where a or b
// was transposed; each is again one mm with flags.
Formula mm(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return {[a, b, ta, tb](const Tensor& dy, const GradMask& m) {
            Tensor da, db;
            if (m[0]) da = ta ? detail::mm(b, dy, tb, true) : detail::mm(dy, b, false, !tb);
            if (m[1]) db = tb ? detail::mm(dy, a, true, ta) : detail::mm(a, dy, !ta, false);
            return Grads{da, db};
          },
          {a, b}};
}

// y = x w^T + b: dx = dy w, dw = dy^T x, db = sum of dy over rows
Formula linear(const Tensor& x, const Tensor& w, bool has_bias) {
  return {[x, w, has_bias](const Tensor& dy, const GradMask& m) {
            return Grads{m[0] ? detail::mm(dy, w, false, false) : Tensor(),
                         m[1] ? detail::mm(dy, x, true, false) : Tensor(),
                         has_bias && m[2] ? tgrad::sum(dy, {0}) : Tensor()};
          },
          {x, w}};
}

// ---- the convolution family ----

namespace {
Tensor channel_sum(const Tensor& t4) {
  return tgrad::sum(t4, {0, 2, 3});
}
}  // namespace

Formula conv_transpose(const ConvGeometry& g, const Tensor& x4, const Tensor& w4, bool has_bias) {
  return {[g, x4, w4, has_bias](const Tensor& dy, const GradMask& m) {
            return Grads{m[0] ? detail::conv_transpose_dgrad(g, dy, w4, Tensor()) : Tensor(),
                         m[1] ? detail::conv_transpose_wgrad(g, x4, dy) : Tensor(),
                         has_bias && m[2] ? channel_sum(dy) : Tensor()};
          },
          {x4, w4}};
}

Formula conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy4, const Tensor& w4,
                             bool has_bias) {
  return {[g, dy4, w4, has_bias](const Tensor& gx, const GradMask& m) {
            return Grads{m[0] ? detail::conv_transpose(g, gx, w4, Tensor()) : Tensor(),
                         m[1] ? detail::conv_transpose_wgrad(g, gx, dy4) : Tensor(),
                         has_bias && m[2] ? channel_sum(gx) : Tensor()};
          },
          {dy4, w4}};
}

Formula conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x4, const Tensor& dy4) {
  return {[g, x4, dy4](const Tensor& gw, const GradMask& m) {
            return Grads{m[0] ? detail::conv_transpose_dgrad(g, dy4, gw, Tensor()) : Tensor(),
                         m[1] ? detail::conv_transpose(g, x4, gw, Tensor()) : Tensor()};
          },
          {x4, dy4}};
}

// ---- normalization ----

namespace {
// t (N, C, S) seen with each statistics key one slice over key_dims: (N, C, S) over {0, 2} for
// batch norm, (N, groups, C/groups*S) over {2} for the others.
Tensor key_view(const NormShape& ns, const Tensor& t) {
  return ns.per_channel ? t : t.reshape({ns.n, ns.groups, ns.c / ns.groups * ns.s});
}
std::vector<int64_t> key_dims(const NormShape& ns) {
  return ns.per_channel ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{2};
}
}  // namespace

Formula norm(const NormShape& ns, const Tensor& x3, const Tensor& w, bool has_bias,
             const Tensor& mean, const Tensor& var, double eps) {
  std::vector<Tensor> saved{x3};
  if (w.defined()) saved.push_back(w);
  return {[ns, x3, w, has_bias, mean, var, eps](const Tensor& dy, const GradMask& m) {
            const bool want_x = m[0], want_w = w.defined() && m[1], want_b = has_bias && m[2];
            Tensor dx, dw, db;
            if (!grad_mode_enabled()) {
              if (want_x) dx = empty_like(x3);
              if (want_w) dw = empty_like(w);
              if (want_b) db = detail::new_like(x3, {ns.c});
              backend(x3.device())
                  .norm_backward(ns, dy, x3, mean, var, eps, w.defined() ? &w : nullptr,
                                 want_x ? &dx : nullptr, want_w ? &dw : nullptr,
                                 want_b ? &db : nullptr);
              return Grads{dx, dw, db};
            }
            const std::vector<int64_t> dims = key_dims(ns);
            const Tensor xs = key_view(ns, x3);
            const Tensor xc = xs - tgrad::mean(xs, dims, true);
            const Tensor rstd = tgrad::pow(tgrad::mean(xc * xc, dims, true) + eps, -0.5);
            const Tensor xhat = xc * rstd;
            if (want_x) {
              const Tensor g = key_view(ns, w.defined() ? dy * w.reshape({1, ns.c, 1}) : dy);
              dx = (rstd * (g - tgrad::mean(g, dims, true) -
                            xhat * tgrad::mean(g * xhat, dims, true)))
                       .reshape(x3.shape());
            }
            if (want_w) dw = tgrad::sum(dy * xhat.reshape(x3.shape()), {0, 2});
            if (want_b) db = tgrad::sum(dy, {0, 2});
            return Grads{dx, dw, db};
          },
          saved};
}

}  // namespace tgrad::derivatives
