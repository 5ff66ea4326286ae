// The backward formula of every differentiable op, one entry per op (like PyTorch's
// derivatives table). Each function takes what its op saves and returns the Formula the op
// records: the closure and the tensors it captured (whose versions backward checks). Every
// formula is written with differentiable ops, so create_graph records it and double backward
// works for every entry. core/derivatives.cpp holds these formulas together.
#pragma once

#include <optional>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/tensor.h"

namespace tgrad::derivatives {

// Shape and type changes.
Formula to_device(Device source);
Formula to_dtype(DType source);
Formula identity();  // clone
Formula reshape(const Shape& source);
Formula narrow(const Shape& source, int64_t start);      // dim 0
Formula narrow_backward(int64_t start, int64_t length);  // the embedding narrow's formula uses
Formula expand(const Shape& source);
Formula sum(const Shape& source, const Shape& keep);  // sum and sum_to

// Arithmetic (a and b may have been broadcast; gradients are summed back to their shapes).
Formula add(const Shape& a, const Shape& b);
Formula sub(const Shape& a, const Shape& b);
Formula mul(const Tensor& a, const Tensor& b);
Formula div(const Tensor& a, const Tensor& b);
Formula scale(double factor);                     // y = x * factor (and x + c, where factor = 1)
Formula rdiv(const Tensor& x, double numerator);  // y = numerator / x

// Pointwise functions. Those cheaper in their output y take it detached, with x to recompute it
// with history when backward records (create_graph).
Formula exp(const Tensor& x, const Tensor& y);
Formula log(const Tensor& x);
Formula abs(const Tensor& x);
Formula sqrt(const Tensor& x, const Tensor& y);
Formula pow(const Tensor& x, double exponent);
Formula relu(const Tensor& x);
Formula leaky_relu(const Tensor& x, double negative_slope);
Formula sigmoid(const Tensor& x, const Tensor& y);
Formula tanh(const Tensor& x, const Tensor& y);

// Products. mm: y = op(a) op(b), op = transpose where the flag is set (matmul is mm without
// flags). linear: y = x w^T + b with x 2-D.
Formula mm(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);
Formula linear(const Tensor& x, const Tensor& w, bool has_bias);

// The convolution family: one geometry, three passes, each pass's gradients the other two.
//   conv_transpose: y = T(x, w) (+ b): dx = D(dy, w), dw = W(x, dy), db = sum of dy per channel.
//   conv_transpose_dgrad: x' = D(dy, w) (a regular convolution of dy, plus b as conv's bias):
//     d(dy) = T(g, w), dw = W(g, dy), db = sum of g per channel, for upstream gradient g.
//   conv_transpose_wgrad: w' = W(x, dy): dx = D(dy, g), d(dy) = T(x, g).
// Tensors are 4-D (N, C, H, W) as the geometry sees them; ops reshape to the user's rank.
Formula conv_transpose(const ConvGeometry& g, const Tensor& x4, const Tensor& w4, bool has_bias);
Formula conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy4, const Tensor& w4,
                             bool has_bias);
Formula conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x4, const Tensor& dy4);

// Fused normalization of x3 (N, C, S) per NormShape key with optional per-channel weight w and
// bias: dx = rstd (g - mean(g) - x_hat mean(g x_hat)) with g = dy w, dw = sum of dy x_hat, db = sum
// of dy. Without create_graph the backend's fused kernel computes them from the forward's saved
// mean and var; with it, the same formula is written with ops, the statistics recomputed from x.
Formula norm(const NormShape& ns, const Tensor& x3, const Tensor& w, bool has_bias,
             const Tensor& mean, const Tensor& var, double eps);

// ---- Shape, indexing, math and resampling ops (core/derivatives_shape.cpp) ----
// Every shape op reduces to two strided copies that are each other's gradient, and index_select
// and index_add are each other's gradient too; the rest are written with those and arithmetic.
Formula strided_gather(const Shape& source, const StridedWindow& window);  // dx = embed(dy)
Formula strided_embed(const StridedWindow& window);                        // dx = dy[window]
// cat: dx_i = dy's slice [offsets[i], offsets[i+1]) along dim.
Formula cat(int64_t dim, const std::vector<int64_t>& offsets);
Formula index_select(int64_t dim, const Tensor& index, int64_t size);  // dx = index_add(dy)
Formula index_add(int64_t dim, const Tensor& index);                   // dx = index_select(dy)
Formula sin(const Tensor& x);
Formula cos(const Tensor& x);
// clamp: dy where min <= x <= max (each bound optional), 0 elsewhere.
Formula clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// max/min along a dim (and over all): dy goes to x's flat positions `flat_index`.
Formula select_positions(const Shape& source, const Tensor& flat_index);
// max/min over all elements equal to a number `value`: dy spread evenly over the positions that
// hold it (PyTorch's rule for ties); `is_max` picks the comparison.
Formula extreme_all(const Tensor& x, double value, bool is_max);
// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy). y detached, and
// recomputed from x when backward records.
Formula softmax(const Tensor& x, const Tensor& y, int64_t dim);
Formula log_softmax(const Tensor& x, const Tensor& y, int64_t dim);

}  // namespace tgrad::derivatives
