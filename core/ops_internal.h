// Non-recording building blocks shared by core/ops.cpp, core/tensor.cpp and
// core/derivatives.cpp. Not part of the public API.
#pragma once

#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/tensor.h"

namespace tgrad::detail {

// A tensor sharing t's storage with another shape of the same element count; no autograd.
Tensor alias(const Tensor& t, const Shape& shape);
// y = op(a) op(b) for 2-D a, b (no autograd).
Tensor matmul_raw(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);
// The four conv passes on user-shaped tensors (no autograd); shapes come from g.
Tensor conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w,
                            const Shape& x_shape);
Tensor conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                            const Shape& w_shape);
Tensor conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy);

}  // namespace tgrad::detail
