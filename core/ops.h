// The differentiable ops. Each validates its arguments (tgrad::Error naming the op, the argument
// and the values), runs the backend of its inputs' device and, when grad mode is on and an
// input requires grad, records a tape node whose formula lives in core/derivatives.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace tgrad {

// Arithmetic with NumPy/PyTorch broadcasting. Operands must share dtype and device.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor rdiv(const Tensor& a, double b);  // b / a
Tensor neg(const Tensor& x);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// Pointwise functions.
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

// Reductions. dims may be negative; keepdim keeps reduced axes as size 1.
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Sums x down to `shape` (the inverse of broadcasting): every axis x has beyond shape's rank,
// and every axis where shape has 1 and x does not, is summed.
Tensor sum_to(const Tensor& x, const Shape& shape);
// Broadcasts x to `shape` (a copy, differentiable).
Tensor expand(const Tensor& x, const Shape& shape);

// Products. matmul: 2-D (M,K) x (K,N). linear: x (..., in) with w (out, in) and optional b (out);
// with in == 0 the output is b broadcast (zeros without b), as in PyTorch.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

// A scalar or per-axis list of D sizes, like LibTorch's ExpandingArray: 2 or {2, 3}.
template <size_t D>
class ExpandingArray {
 public:
  ExpandingArray(int64_t v) { values_.fill(v); }  // NOLINT: implicit by design
  ExpandingArray(std::initializer_list<int64_t> list);
  ExpandingArray(const std::array<int64_t, D>& values) : values_(values) {}  // NOLINT
  int64_t operator[](size_t i) const { return values_[i]; }
  const std::array<int64_t, D>& values() const { return values_; }

 private:
  std::array<int64_t, D> values_{};
};

template <size_t D>
ExpandingArray<D>::ExpandingArray(std::initializer_list<int64_t> list) {
  TGRAD_CHECK(list.size() == D, "ExpandingArray: a list needs exactly ", D,
              " values (or pass one number for every axis), got ", list.size());
  size_t i = 0;
  for (int64_t v : list)
    values_[i++] = v;
}

#define TGRAD_ARG(T, name)          \
 public:                            \
  auto& name(const T& new_##name) { \
    this->name##_ = new_##name;     \
    return *this;                   \
  }                                 \
  const T& name() const {           \
    return name##_;                 \
  }                                 \
                                    \
 private:                           \
  T name##_

// The functional options of conv_transpose1d/2d, with LibTorch's names and defaults.
template <size_t D>
class ConvTransposeFuncOptions {
  TGRAD_ARG(ExpandingArray<D>, stride) = 1;
  TGRAD_ARG(ExpandingArray<D>, padding) = 0;
  TGRAD_ARG(ExpandingArray<D>, output_padding) = 0;
  TGRAD_ARG(int64_t, groups) = 1;
  TGRAD_ARG(ExpandingArray<D>, dilation) = 1;
};
using ConvTranspose1dFuncOptions = ConvTransposeFuncOptions<1>;
using ConvTranspose2dFuncOptions = ConvTransposeFuncOptions<2>;

// The output length of one axis of a transposed convolution:
// (in - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1; tgrad::Error when a step
// leaves int64.
int64_t conv_transpose_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                                int64_t dilation, int64_t output_padding);

// x (N, C_in, L) or (C_in, L); w (C_in, C_out/groups, k); b (C_out) or undefined.
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        const ConvTranspose1dFuncOptions& options = {});
// x (N, C_in, H, W) or (C_in, H, W); w (C_in, C_out/groups, kH, kW); b (C_out) or undefined.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        const ConvTranspose2dFuncOptions& options = {});

// The padding of conv1d/conv2d: per-axis numbers, or LibTorch's kValid (none) or kSame (the output
// has the input's size; stride must be 1, and an odd total padding puts the extra element after).
namespace enumtype {
struct kValid {};
struct kSame {};
struct kZeros {};  // a convolution module's padding_mode
}  // namespace enumtype
inline constexpr enumtype::kValid kValid{};
inline constexpr enumtype::kSame kSame{};
inline constexpr enumtype::kZeros kZeros{};
template <size_t D>
using ConvPaddingT = std::variant<ExpandingArray<D>, enumtype::kValid, enumtype::kSame>;

// The functional options of conv1d/conv2d, with LibTorch's names and defaults:
// Conv2dFuncOptions().stride(2).padding(1), .padding(kSame), .padding({1, 2}).
template <size_t D>
class ConvFuncOptions {
  TGRAD_ARG(ExpandingArray<D>, stride) = 1;
  TGRAD_ARG(ExpandingArray<D>, dilation) = 1;
  TGRAD_ARG(int64_t, groups) = 1;

 public:
  auto& padding(ExpandingArray<D> p) {
    padding_ = p;
    return *this;
  }
  auto& padding(enumtype::kValid p) {
    padding_ = p;
    return *this;
  }
  auto& padding(enumtype::kSame p) {
    padding_ = p;
    return *this;
  }
  const ConvPaddingT<D>& padding() const { return padding_; }

 private:
  ConvPaddingT<D> padding_ = ExpandingArray<D>(0);
};
using Conv1dFuncOptions = ConvFuncOptions<1>;
using Conv2dFuncOptions = ConvFuncOptions<2>;

// Regular (cross-correlation) convolutions, as torch.nn.functional.conv1d/conv2d.
// x (N, C_in, L) or (C_in, L); w (C_out, C_in/groups, k); b (C_out) or undefined.
// They run the transposed convolution's kernels with the passes swapped: a convolution's forward
// is a transposed convolution's input-gradient pass, so both families are exactly as fast.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              const Conv1dFuncOptions& options = {});
// x (N, C_in, H, W) or (C_in, H, W); w (C_out, C_in/groups, kH, kW); b (C_out) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
              const Conv2dFuncOptions& options = {});

}  // namespace tgrad

// The shape, indexing, math and resampling ops.
#include "core/ops_shape.h"  // IWYU pragma: export
