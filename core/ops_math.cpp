// The math ops of the decoder toolbox: clamp, sin, cos, max/min (full and along a dim, with
// int64 positions), argmax/argmin, and numerically stable softmax/log_softmax. Backward formulas
// are in core/derivatives_shape.cpp.
#include <cmath>

#include "core/autograd.h"
#include "core/derivatives.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/ops_shape_internal.h"

namespace tgrad {

namespace {

using detail::check_defined;
using detail::check_floating;

Tensor unary_raw(UnaryOp op, double p, const Tensor& x) {
  Tensor y = detail::new_like(x, x.shape());
  if (y.numel() > 0) backend(x.device()).unary(op, p, x, y);
  return y;
}

struct DimReduction {
  Tensor values;   // (outer, inner), detached
  Tensor indices;  // (outer, inner), int64
  Shape out;       // the result's shape (keepdim or not)
};

// max/min of x along d, checked; no autograd.
DimReduction reduce_raw(const char* fn, ReduceOp op, const Tensor& x, int64_t d, bool keepdim) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  TGRAD_CHECK(n > 0, fn, ": cannot reduce dim ", d, " of size 0 (shape ", x.shape(),
              "): there is no identity");
  int64_t outer = 1, inner = 1;
  Shape out;
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k < d) outer *= x.size(k);
    if (k > d) inner *= x.size(k);
    if (k != d || keepdim) out.push_back(k == d ? 1 : x.size(k));
  }
  DimReduction r;
  r.values = detail::new_like(x, {outer, inner});
  r.indices = empty({outer, inner}, TensorOptions(DType::int64).device(x.device()));
  r.out = out;
  if (outer * inner > 0) backend(x.device()).reduce_dim(op, x, outer, inner, r.values, r.indices);
  return r;
}

// The flat positions in x of the selected elements (for the gradient), built on the host.
Tensor flat_positions(const Tensor& x, const Tensor& indices, int64_t d) {
  int64_t inner = 1;
  for (int64_t k = d + 1; k < x.dim(); ++k)
    inner *= x.size(k);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  std::vector<int64_t> pos = indices.to_vector<int64_t>();
  for (size_t t = 0; t < pos.size(); ++t) {
    const auto o = static_cast<int64_t>(t) / inner, i = static_cast<int64_t>(t) % inner;
    pos[t] = (o * n + pos[t]) * inner + i;
  }
  return from_vector(pos, {static_cast<int64_t>(pos.size())}).to(x.device());
}

std::tuple<Tensor, Tensor> reduce_dim(const char* fn, ReduceOp op, const Tensor& x, int64_t dim,
                                      bool keepdim) {
  check_defined(fn, "input", x);
  check_floating(fn, "input", x);
  const int64_t d = detail::wrap_dim(fn, dim, std::max<int64_t>(x.dim(), 1));
  DimReduction r = reduce_raw(fn, op, x, d, keepdim);
  Tensor values = detail::alias(r.values, r.out);
  if (grad_mode_enabled() && x.requires_grad()) {
    values = record(fn, values, {x},
                    derivatives::select_positions(x.shape(), flat_positions(x, r.indices, d)));
  }
  return {values, detail::alias(r.indices, r.out)};
}

Tensor reduce_all(const char* fn, ReduceOp op, const Tensor& x) {
  check_defined(fn, "input", x);
  check_floating(fn, "input", x);
  TGRAD_CHECK(x.numel() > 0, fn, ": the input is empty (shape ", x.shape(),
              "); give a dim to reduce over instead");
  const Tensor flat = x.reshape({-1});
  const double value = [&] {
    NoGradGuard no_grad;
    return std::get<0>(reduce_dim(fn, op, flat, 0, false)).item();
  }();
  // A NaN result takes the first NaN's position (through reduce_dim's record); otherwise the
  // gradient is spread over every position holding the extreme, as PyTorch does for ties.
  if (std::isnan(value)) return std::get<0>(reduce_dim(fn, op, flat, 0, false));
  Tensor y = full({}, value, TensorOptions(x.dtype()).device(x.device()));
  return record(fn, y, {x}, derivatives::extreme_all(x, value, op == ReduceOp::max));
}

Tensor arg_reduce(const char* fn, ReduceOp op, const Tensor& x, std::optional<int64_t> dim,
                  bool keepdim) {
  check_defined(fn, "input", x);
  check_floating(fn, "input", x);
  if (dim) {
    const int64_t d = detail::wrap_dim(fn, *dim, std::max<int64_t>(x.dim(), 1));
    DimReduction r = reduce_raw(fn, op, x, d, keepdim);
    return detail::alias(r.indices, r.out);
  }
  TGRAD_CHECK(x.numel() > 0, fn, ": the input is empty (shape ", x.shape(),
              "); give a dim to reduce over instead");
  DimReduction r = reduce_raw(fn, op, detail::alias(x, {x.numel()}), 0, false);
  // keepdim without dim keeps every dim as size 1, as PyTorch.
  return detail::alias(r.indices, keepdim ? Shape(x.dim(), 1) : Shape{});
}

}  // namespace

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_defined("clamp", "input", x);
  check_floating("clamp", "input", x);
  TGRAD_CHECK(min || max, "clamp: at least one of min and max must be given");
  Tensor y = min ? unary_raw(UnaryOp::clamp_min, *min, x) : x;
  // With min > max every element becomes max, as torch.clamp.
  if (max) y = unary_raw(UnaryOp::clamp_max, *max, y);
  return record("clamp", y, {x}, derivatives::clamp(x, min, max));
}

Tensor sin(const Tensor& x) {
  check_defined("sin", "input", x);
  check_floating("sin", "input", x);
  return record("sin", unary_raw(UnaryOp::sin, 0.0, x), {x}, derivatives::sin(x));
}

Tensor cos(const Tensor& x) {
  check_defined("cos", "input", x);
  check_floating("cos", "input", x);
  return record("cos", unary_raw(UnaryOp::cos, 0.0, x), {x}, derivatives::cos(x));
}

Tensor max(const Tensor& x) {
  return reduce_all("max", ReduceOp::max, x);
}
Tensor min(const Tensor& x) {
  return reduce_all("min", ReduceOp::min, x);
}
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim("max", ReduceOp::max, x, dim, keepdim);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim("min", ReduceOp::min, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce("argmax", ReduceOp::max, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce("argmin", ReduceOp::min, x, dim, keepdim);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  check_defined("softmax", "input", x);
  check_floating("softmax", "input", x);
  const int64_t d = detail::wrap_dim("softmax", dim, std::max<int64_t>(x.dim(), 1));
  Tensor y;
  {
    NoGradGuard no_grad;
    if (x.numel() == 0) {
      y = x.clone();
    } else {
      const Tensor shifted = x - std::get<0>(tgrad::max(x, d, true));
      const Tensor e = tgrad::exp(shifted);
      y = e / tgrad::sum(e, {d}, true);
    }
  }
  return record("softmax", y, {x}, derivatives::softmax(x, y.detach(), d));
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_defined("log_softmax", "input", x);
  check_floating("log_softmax", "input", x);
  const int64_t d = detail::wrap_dim("log_softmax", dim, std::max<int64_t>(x.dim(), 1));
  Tensor y;
  {
    NoGradGuard no_grad;
    if (x.numel() == 0) {
      y = x.clone();
    } else {
      const Tensor shifted = x - std::get<0>(tgrad::max(x, d, true));
      y = shifted - tgrad::log(tgrad::sum(tgrad::exp(shifted), {d}, true));
    }
  }
  return record("log_softmax", y, {x}, derivatives::log_softmax(x, y.detach(), d));
}

// ---- dropout ----

namespace {

// x times a mask of `mask_shape` (broadcast over x): 0 with probability p, else 1/(1-p). The
// mask is a constant of the graph, so the gradient is the same mask times dy.
Tensor dropout_with_mask(const char* fn, const Tensor& x, double p, bool training, Generator& gen,
                         const Shape& mask_shape) {
  check_floating(fn, "input", x);
  TGRAD_CHECK(p >= 0.0 && p <= 1.0, fn, ": p=", p, " must be in [0, 1]");
  if (!training || p == 0.0) return x;
  const Tensor u = rand(mask_shape, gen, TensorOptions(x.dtype()).device(x.device()));
  Tensor mask = detail::new_like(u, mask_shape);
  if (mask.numel() > 0) {
    // kept = (u >= p), scaled by 1/(1-p); p == 1 keeps nothing (u < 1 always).
    backend(x.device()).unary(UnaryOp::ge_step, p, u, mask);
    if (p < 1.0) backend(x.device()).unary(UnaryOp::mul_scalar, 1.0 / (1.0 - p), mask, mask);
  }
  return x * mask;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  check_defined("dropout", "input", x);
  return dropout_with_mask("dropout", x, p, training, gen, x.shape());
}

Tensor dropout2d(const Tensor& x, double p, bool training, Generator& gen) {
  check_defined("dropout2d", "input", x);
  TGRAD_CHECK(x.dim() == 3 || x.dim() == 4,
              "dropout2d: input must be 3-D (C, H, W) or 4-D "
              "(N, C, H, W), got shape ",
              x.shape());
  Shape mask_shape = x.shape();
  for (size_t d = x.dim() == 4 ? 2 : 1; d < mask_shape.size(); ++d)
    mask_shape[d] = 1;
  return dropout_with_mask("dropout2d", x, p, training, gen, mask_shape);
}

}  // namespace tgrad
