// The backward formulas of the shape, indexing, math and resampling ops (declared in
// core/derivatives.h's marked section). Each uses differentiable ops only, so that backward with
// create_graph records them and double backward works.
#include <optional>

#include "core/derivatives.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/ops_shape_internal.h"

namespace tgrad::derivatives {

namespace {
using Grads = std::vector<Tensor>;

Tensor step_of(const Tensor& x, UnaryOp op, double p) {
  Tensor s = empty_like(x);
  if (x.numel() > 0) backend(x.device()).unary(op, p, x, s);
  return s;
}
}  // namespace

Formula strided_gather(const Shape& source, const StridedWindow& window) {
  return {[source, window](const Tensor& dy, const GradMask&) {
            return Grads{detail::strided_embed(dy, source, window)};
          },
          {}};
}

Formula strided_embed(const StridedWindow& window) {
  return {[window](const Tensor& dy, const GradMask&) {
            return Grads{detail::strided_gather(dy, window)};
          },
          {}};
}

Formula cat(int64_t dim, const std::vector<int64_t>& offsets) {
  return {[dim, offsets](const Tensor& dy, const GradMask& m) {
            Grads g(offsets.size() - 1);
            for (size_t i = 0; i + 1 < offsets.size(); ++i) {
              if (m[i]) g[i] = tgrad::narrow(dy, dim, offsets[i], offsets[i + 1] - offsets[i]);
            }
            return g;
          },
          {}};
}

Formula index_select(int64_t dim, const Tensor& index, int64_t size) {
  return {[dim, index, size](const Tensor& dy, const GradMask&) {
            return Grads{detail::index_add_unchecked(dy, dim, index, size)};
          },
          {index}};
}

Formula index_add(int64_t dim, const Tensor& index) {
  return {[dim, index](const Tensor& dy, const GradMask&) {
            return Grads{detail::index_select_unchecked(dy, dim, index)};
          },
          {index}};
}

// d sin = dy cos x; d cos = -dy sin x
Formula sin(const Tensor& x) {
  return {[x](const Tensor& dy, const GradMask&) { return Grads{dy * tgrad::cos(x)}; }, {x}};
}

Formula cos(const Tensor& x) {
  return {[x](const Tensor& dy, const GradMask&) { return Grads{neg(dy * tgrad::sin(x))}; }, {x}};
}

// The mask is a step function of x: zero derivative almost everywhere, computed without history.
Formula clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  return {[x, min, max](const Tensor& dy, const GradMask&) {
            Tensor g = dy;
            if (min) g = g * step_of(x.detach(), UnaryOp::ge_step, *min);
            if (max) g = g * step_of(x.detach(), UnaryOp::le_step, *max);
            return Grads{g};
          },
          {x}};
}

Formula select_positions(const Shape& source, const Tensor& flat_index) {
  return {[source, flat_index](const Tensor& dy, const GradMask&) {
            const int64_t n = shape_numel(source);
            return Grads{
                detail::index_add_unchecked(dy.reshape({-1}), 0, flat_index, n).reshape(source)};
          },
          {flat_index}};
}

// x == value is x >= value for a max (x <= value for a min); the mask has zero derivative.
Formula extreme_all(const Tensor& x, double value, bool is_max) {
  return {[x, value, is_max](const Tensor& dy, const GradMask&) {
            const Tensor mask =
                step_of(x.detach(), is_max ? UnaryOp::ge_step : UnaryOp::le_step, value);
            double count = 0.0;
            {
              NoGradGuard no_grad;
              count = tgrad::sum(mask).item();
            }
            return Grads{dy * mask * (1.0 / count)};
          },
          {x}};
}

Formula softmax(const Tensor& x, const Tensor& y, int64_t dim) {
  return {[x, y, dim](const Tensor& dy, const GradMask&) {
            const Tensor s = grad_mode_enabled() ? tgrad::softmax(x, dim) : y;
            return Grads{s * (dy - tgrad::sum(dy * s, {dim}, true))};
          },
          {x}};
}

Formula log_softmax(const Tensor& x, const Tensor& y, int64_t dim) {
  return {[x, y, dim](const Tensor& dy, const GradMask&) {
            const Tensor s = grad_mode_enabled() ? tgrad::log_softmax(x, dim) : y;
            return Grads{dy - tgrad::exp(s) * tgrad::sum(dy, {dim}, true)};
          },
          {x}};
}

}  // namespace tgrad::derivatives
