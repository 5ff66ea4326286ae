// The differentiable ops: argument checks, the backend call, and the tape record. Backward
// formulas live in core/derivatives.cpp.
#include "core/ops.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/derivatives.h"
#include "core/ops_internal.h"

namespace tgrad {

namespace detail {

void check_defined(const char* fn, const char* arg, const Tensor& t) {
  TGRAD_CHECK(t.defined(), fn, ": argument '", arg, "' is an undefined tensor");
}

void check_floating(const char* fn, const char* arg, const Tensor& t) {
  check_defined(fn, arg, t);
  TGRAD_CHECK(t.is_floating_point(), fn, ": argument '", arg, "' is ", t.dtype(),
              "; this op takes float32 or float64 tensors");
}

void check_compatible(const char* fn, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b) {
  check_floating(fn, a_name, a);
  check_floating(fn, b_name, b);
  TGRAD_CHECK(a.dtype() == b.dtype(), fn, ": dtype mismatch: ", a_name, " is ", a.dtype(), " but ",
              b_name, " is ", b.dtype());
  TGRAD_CHECK(a.device() == b.device(), fn, ": device mismatch: ", a_name, " is on ", a.device(),
              " but ", b_name, " is on ", b.device());
}

Tensor new_like(const Tensor& like, const Shape& shape) {
  return empty(shape, TensorOptions(like.dtype()).device(like.device()));
}

}  // namespace detail

namespace {

using detail::check_compatible;
using detail::check_defined;
using detail::check_floating;
using detail::new_like;

Shape broadcast_shapes(const char* fn, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    TGRAD_CHECK(da == db || da == 1 || db == 1, fn, ": shapes ", a, " and ", b,
                " do not broadcast (size ", da, " vs ", db, " at dim ", i, " of the result)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// t with leading size-1 axes so that its rank is `rank` (a view, no autograd).
Tensor left_pad(const Tensor& t, size_t rank) {
  Shape s(rank - t.shape().size(), 1);
  s.insert(s.end(), t.shape().begin(), t.shape().end());
  return detail::alias(t, s);
}

Tensor unary(const char* fn, UnaryOp op, double p, const Tensor& x) {
  check_floating(fn, "input", x);
  Tensor y = new_like(x, x.shape());
  if (y.numel() > 0) backend(x.device()).unary(op, p, x, y);
  return y;
}

Tensor binary(const char* fn, BinaryOp op, const Tensor& a, const Tensor& b) {
  check_compatible(fn, "self", a, "other", b);
  const Shape shape = broadcast_shapes(fn, a.shape(), b.shape());
  Tensor y = new_like(a, shape);
  if (y.numel() > 0) {
    backend(a.device()).binary(op, left_pad(a, shape.size()), left_pad(b, shape.size()), y);
  }
  return y;
}

// Normalised, sorted, duplicate-free reduction axes; all axes when dims is empty.
std::vector<int64_t> reduction_dims(const char* fn, const Tensor& x,
                                    const std::vector<int64_t>& dims) {
  const int64_t rank = x.dim();
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i)
      out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    TGRAD_CHECK(d >= -rank && d < std::max<int64_t>(rank, 1), fn, ": dim ", d,
                " is out of range for a ", rank, "-D tensor");
    const int64_t n = d < 0 ? d + rank : d;
    TGRAD_CHECK(std::find(out.begin(), out.end(), n) == out.end(), fn, ": dim ", n,
                " appears more than once in ", dims);
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  if (rank == 0) out.clear();
  return out;
}

// Sums x over `dims` into a tensor of shape `keep` (x's rank, reduced axes 1); no autograd.
Tensor sum_raw(const Tensor& x, const Shape& keep) {
  Tensor y = new_like(x, keep);
  if (y.numel() == 0) return y;
  if (x.numel() == 0) {
    backend(x.device()).fill(y, 0.0);
  } else {
    backend(x.device()).sum_to(x, y);
  }
  return y;
}

}  // namespace

// ---- arithmetic ----

Tensor add(const Tensor& a, const Tensor& b) {
  return record("add", binary("add", BinaryOp::add, a, b), {a, b},
                derivatives::add(a.shape(), b.shape()));
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return record("sub", binary("sub", BinaryOp::sub, a, b), {a, b},
                derivatives::sub(a.shape(), b.shape()));
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return record("mul", binary("mul", BinaryOp::mul, a, b), {a, b}, derivatives::mul(a, b));
}
Tensor div(const Tensor& a, const Tensor& b) {
  return record("div", binary("div", BinaryOp::div, a, b), {a, b}, derivatives::div(a, b));
}
Tensor add(const Tensor& a, double b) {
  return record("add", unary("add", UnaryOp::add_scalar, b, a), {a}, derivatives::scale(1.0));
}
Tensor sub(const Tensor& a, double b) {
  return record("sub", unary("sub", UnaryOp::add_scalar, -b, a), {a}, derivatives::scale(1.0));
}
Tensor mul(const Tensor& a, double b) {
  return record("mul", unary("mul", UnaryOp::mul_scalar, b, a), {a}, derivatives::scale(b));
}
Tensor div(const Tensor& a, double b) {
  return record("div", unary("div", UnaryOp::mul_scalar, 1.0 / b, a), {a},
                derivatives::scale(1.0 / b));
}
Tensor rsub(const Tensor& a, double b) {
  return record("rsub", unary("rsub", UnaryOp::rsub_scalar, b, a), {a}, derivatives::scale(-1.0));
}
Tensor rdiv(const Tensor& a, double b) {
  return record("rdiv", unary("rdiv", UnaryOp::rdiv_scalar, b, a), {a}, derivatives::rdiv(a, b));
}
Tensor neg(const Tensor& x) {
  return record("neg", unary("neg", UnaryOp::neg, 0.0, x), {x}, derivatives::scale(-1.0));
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
Tensor operator+(double a, const Tensor& b) {
  return add(b, a);
}
Tensor operator-(double a, const Tensor& b) {
  return rsub(b, a);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator/(double a, const Tensor& b) {
  return rdiv(b, a);
}
Tensor operator-(const Tensor& x) {
  return neg(x);
}

// ---- pointwise functions ----

Tensor exp(const Tensor& x) {
  Tensor y = unary("exp", UnaryOp::exp, 0.0, x);
  return record("exp", y, {x}, derivatives::exp(x, y.detach()));
}
Tensor log(const Tensor& x) {
  return record("log", unary("log", UnaryOp::log, 0.0, x), {x}, derivatives::log(x));
}
Tensor abs(const Tensor& x) {
  return record("abs", unary("abs", UnaryOp::abs, 0.0, x), {x}, derivatives::abs(x));
}
Tensor sqrt(const Tensor& x) {
  Tensor y = unary("sqrt", UnaryOp::sqrt, 0.0, x);
  return record("sqrt", y, {x}, derivatives::sqrt(x, y.detach()));
}
Tensor pow(const Tensor& x, double exponent) {
  return record("pow", unary("pow", UnaryOp::pow, exponent, x), {x}, derivatives::pow(x, exponent));
}
Tensor relu(const Tensor& x) {
  return record("relu", unary("relu", UnaryOp::relu, 0.0, x), {x}, derivatives::relu(x));
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return record("leaky_relu", unary("leaky_relu", UnaryOp::leaky_relu, negative_slope, x), {x},
                derivatives::leaky_relu(x, negative_slope));
}
Tensor sigmoid(const Tensor& x) {
  Tensor y = unary("sigmoid", UnaryOp::sigmoid, 0.0, x);
  return record("sigmoid", y, {x}, derivatives::sigmoid(x, y.detach()));
}
Tensor tanh(const Tensor& x) {
  Tensor y = unary("tanh", UnaryOp::tanh, 0.0, x);
  return record("tanh", y, {x}, derivatives::tanh(x, y.detach()));
}

// ---- reductions and broadcasting ----

Tensor sum(const Tensor& x) {
  return sum(x, {}, false);
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating("sum", "input", x);
  const std::vector<int64_t> axes = reduction_dims("sum", x, dims);
  Shape keep = x.shape(), out;
  for (int64_t a : axes)
    keep[a] = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    const bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced || keepdim) out.push_back(keep[i]);
  }
  Tensor y = detail::alias(sum_raw(x, keep), out);
  return record("sum", y, {x}, derivatives::sum(x.shape(), keep));
}

Tensor mean(const Tensor& x) {
  return mean(x, {}, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating("mean", "input", x);
  double count = 1.0;  // a double: the reduced sizes' product cannot overflow it
  for (int64_t a : reduction_dims("mean", x, dims))
    count *= static_cast<double>(x.size(a));
  // Like PyTorch, the mean of nothing is NaN (0/0).
  return div(sum(x, dims, keepdim), count);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_floating("sum_to", "input", x);
  TGRAD_CHECK(shape.size() <= x.shape().size(), "sum_to: shape ", shape,
              " has more dims than the input shape ", x.shape());
  const size_t lead = x.shape().size() - shape.size();
  Shape keep = x.shape();
  bool changes = false;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (i < lead) {
      keep[i] = 1;
    } else {
      const int64_t want = shape[i - lead];
      TGRAD_CHECK(want == keep[i] || want == 1, "sum_to: input shape ", x.shape(),
                  " cannot be summed to ", shape);
      keep[i] = want;
    }
    changes |= keep[i] != x.shape()[i];
  }
  if (!changes) return x.reshape(shape);
  return record("sum_to", detail::alias(sum_raw(x, keep), shape), {x},
                derivatives::sum(x.shape(), keep));
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_floating("expand", "input", x);
  const Shape result = broadcast_shapes("expand", x.shape(), shape);
  TGRAD_CHECK(result == shape, "expand: input shape ", x.shape(), " cannot be expanded to ", shape);
  if (x.shape() == shape) return x;
  Tensor y = new_like(x, shape);
  if (y.numel() > 0) {
    // A window of x with stride 0 on the broadcast axes: one gather, no zero tensor to add, and
    // values pass bit for bit (adding +0 turned -0.0 into +0.0; PyTorch's expand keeps it).
    StridedWindow window;
    window.shape = shape;
    window.strides.assign(shape.size(), 0);
    const size_t lead = shape.size() - static_cast<size_t>(x.dim());
    int64_t stride = 1;
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      if (x.size(d) != 1) window.strides[lead + static_cast<size_t>(d)] = stride;
      stride *= x.size(d);
    }
    backend(x.device()).strided_gather(x, window, y);
  }
  return record("expand", y, {x}, derivatives::expand(x.shape()));
}

// ---- products ----

namespace detail {

Tensor mm(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  const int64_t m = transpose_a ? a.size(1) : a.size(0);
  const int64_t n = transpose_b ? b.size(0) : b.size(1);
  const int64_t k = transpose_a ? a.size(0) : a.size(1);
  Tensor y = new_like(a, {m, n});
  if (y.numel() > 0) {
    if (k == 0) {
      backend(a.device()).fill(y, 0.0);
    } else {
      backend(a.device()).matmul(a, b, y, transpose_a, transpose_b);
    }
  }
  return record("mm", y, {a, b}, derivatives::mm(a, b, transpose_a, transpose_b));
}

Tensor narrow_backward(const Tensor& dy, const Shape& shape, int64_t start) {
  Tensor dx = zeros(shape, TensorOptions(dy.dtype()).device(dy.device()));
  if (dy.numel() > 0) {
    const Tensor rows = dx.narrow(0, start, dy.size(0));
    backend(dy.device()).copy(rows.raw_data(), dy.raw_data(), dy.nbytes(), dy.device());
  }
  return record("narrow_backward", dx, {dy}, derivatives::narrow_backward(start, dy.size(0)));
}

}  // namespace detail

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_compatible("matmul", "self", a, "other", b);
  TGRAD_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: both operands must be 2-D, got shapes ",
              a.shape(), " and ", b.shape());
  TGRAD_CHECK(a.size(1) == b.size(0), "matmul: shapes ", a.shape(), " and ", b.shape(),
              " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  return detail::mm(a, b, false, false);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_compatible("linear", "input", x, "weight", w);
  TGRAD_CHECK(w.dim() == 2, "linear: weight must be 2-D (out_features, in_features), got shape ",
              w.shape());
  TGRAD_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "linear: input shape ", x.shape(),
              " does not end in in_features=", w.size(1));
  if (b.defined()) {
    check_compatible("linear", "input", x, "bias", b);
    TGRAD_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "linear: bias must be 1-D of size ",
                w.size(0), ", got shape ", b.shape());
  }
  // Rows counted directly (not reshape's -1), so that in_features == 0 works as in PyTorch: the
  // product of 0 features is 0 and the output is the bias broadcast.
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d)
    rows *= x.size(d);  // fits: shape_numel bounds every product of a shape's sizes
  const Tensor x2 = x.reshape({rows, w.size(1)});
  Tensor y2;
  {
    NoGradGuard raw;  // the product is recorded once, as "linear", below
    y2 = detail::mm(x2, w, false, true);
  }
  if (b.defined() && y2.numel() > 0) {
    Tensor with_bias = new_like(y2, y2.shape());
    backend(x.device()).binary(BinaryOp::add, y2, detail::alias(b, {1, w.size(0)}), with_bias);
    y2 = with_bias;
  }
  y2 = record("linear", y2, {x2, w, b}, derivatives::linear(x2, w, b.defined()));
  Shape out = x.shape();
  out.back() = w.size(0);
  return y2.reshape(out);
}

}  // namespace tgrad
