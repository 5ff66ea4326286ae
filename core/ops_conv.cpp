// The convolution family: conv_transpose1d/2d and conv1d/conv2d on top of one geometry and three
// recorded passes (forward, input gradient, weight gradient), each the others' gradient (see
// core/derivatives.h). A regular convolution is the transposed one's input-gradient pass
// (docs/design.md, "One formula per op, written with ops").
#include <variant>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/derivatives.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/ops_shape.h"

namespace tgrad {

namespace {

using detail::alias;
using detail::new_like;

Shape x4_shape(const ConvGeometry& g) {
  return {g.batch, g.in_channels, g.in_size[0], g.in_size[1]};
}
Shape y4_shape(const ConvGeometry& g) {
  return {g.batch, g.out_channels, g.out_size[0], g.out_size[1]};
}
Shape w4_shape(const ConvGeometry& g) {
  return {g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]};
}

// The geometry with the float32 precision in force now (float64 is always exact).
ConvGeometry at_current_precision(ConvGeometry g, DType dtype) {
  g.precision = dtype == DType::float32 ? float32_precision() : Precision::highest;
  return g;
}

// y (N, C, H, W) += b per channel, into a new tensor.
Tensor add_channel_bias(const Tensor& y, const Tensor& b) {
  Tensor out = new_like(y, y.shape());
  if (out.numel() > 0) {
    backend(y.device()).binary(BinaryOp::add, y, alias(b, {1, b.numel(), 1, 1}), out);
  }
  return out;
}

}  // namespace

namespace detail {

Tensor conv_transpose(const ConvGeometry& geometry, const Tensor& x4, const Tensor& w4,
                      const Tensor& b) {
  const ConvGeometry g = at_current_precision(geometry, x4.dtype());
  Tensor y = new_like(x4, y4_shape(g));
  if (y.numel() > 0) {
    if (g.x_numel() == 0 || g.in_channels == 0) {  // nothing to scatter: the bias, or zero
      backend(y.device()).fill(y, 0.0);
      if (b.defined()) y = add_channel_bias(y, b);
    } else {
      backend(x4.device()).conv_transpose_forward(g, x4, w4, b.defined() ? &b : nullptr, y);
    }
  }
  return record("conv_transpose", y, {x4, w4, b},
                derivatives::conv_transpose(geometry, x4, w4, b.defined()));
}

Tensor conv_transpose_dgrad(const ConvGeometry& geometry, const Tensor& dy4, const Tensor& w4,
                            const Tensor& b) {
  const ConvGeometry g = at_current_precision(geometry, dy4.dtype());
  Tensor dx = new_like(dy4, x4_shape(g));
  if (dx.numel() > 0) {
    if (g.out_channels == 0 || g.y_numel() == 0) {
      backend(dx.device()).fill(dx, 0.0);  // no output element depends on x
    } else {
      backend(dy4.device()).conv_transpose_dgrad(g, dy4, w4, dx);
    }
    if (b.defined()) dx = add_channel_bias(dx, b);
  }
  return record("conv_transpose_dgrad", dx, {dy4, w4, b},
                derivatives::conv_transpose_dgrad(geometry, dy4, w4, b.defined()));
}

Tensor conv_transpose_wgrad(const ConvGeometry& geometry, const Tensor& x4, const Tensor& dy4) {
  const ConvGeometry g = at_current_precision(geometry, x4.dtype());
  Tensor dw = new_like(x4, w4_shape(g));
  if (dw.numel() > 0) {
    if (g.x_numel() == 0 || g.y_numel() == 0) {
      backend(dw.device()).fill(dw, 0.0);
    } else {
      backend(x4.device()).conv_transpose_wgrad(g, x4, dy4, dw);
    }
  }
  return record("conv_transpose_wgrad", dw, {x4, dy4},
                derivatives::conv_transpose_wgrad(geometry, x4, dy4));
}

}  // namespace detail

namespace {

// The caller's rank for a 4-D result: (N, C, [H,] W), without N when the input had none.
template <size_t D>
Shape user_shape(const Tensor& x, int64_t n, int64_t c, int64_t h, int64_t w) {
  Shape out;
  if (x.dim() == static_cast<int64_t>(D) + 2) out.push_back(n);
  out.push_back(c);
  if (D == 2) out.push_back(h);
  out.push_back(w);
  return out;
}

template <size_t D>
Tensor conv_transpose_nd(const char* fn, const Tensor& x, const Tensor& w, const Tensor& b,
                         const ConvTransposeFuncOptions<D>& o) {
  detail::check_compatible(fn, "input", x, "weight", w);
  if (b.defined()) detail::check_compatible(fn, "input", x, "bias", b);
  ConvTransposeArgs args;
  args.fn = fn;
  args.spatial_dims = static_cast<int>(D);
  args.x_shape = x.shape();
  args.w_shape = w.shape();
  args.has_bias = b.defined();
  if (b.defined()) args.b_shape = b.shape();
  for (size_t i = 0; i < D; ++i) {
    args.stride[i] = o.stride()[i];
    args.padding[i] = o.padding()[i];
    args.output_padding[i] = o.output_padding()[i];
    args.dilation[i] = o.dilation()[i];
  }
  args.groups = o.groups();
  const ConvGeometry g = make_conv_transpose_geometry(args);
  const Tensor y4 = detail::conv_transpose(g, x.reshape(x4_shape(g)), w.reshape(w4_shape(g)), b);
  return y4.reshape(user_shape<D>(x, g.batch, g.out_channels, g.out_size[0], g.out_size[1]));
}

template <size_t D>
Tensor conv_nd(const char* fn, const Tensor& x, const Tensor& w, const Tensor& b,
               const ConvFuncOptions<D>& o) {
  detail::check_compatible(fn, "input", x, "weight", w);
  if (b.defined()) detail::check_compatible(fn, "input", x, "bias", b);
  ConvArgs args;
  args.fn = fn;
  args.spatial_dims = static_cast<int>(D);
  args.x_shape = x.shape();
  args.w_shape = w.shape();
  args.has_bias = b.defined();
  if (b.defined()) args.b_shape = b.shape();
  args.groups = o.groups();
  for (size_t i = 0; i < D; ++i) {
    args.stride[i] = o.stride()[i];
    args.dilation[i] = o.dilation()[i];
  }
  if (const auto* numbers = std::get_if<ExpandingArray<D>>(&o.padding())) {
    for (size_t i = 0; i < D; ++i)
      args.padding[i] = (*numbers)[i];
  } else if (std::holds_alternative<enumtype::kSame>(o.padding())) {
    TGRAD_CHECK(w.dim() == static_cast<int64_t>(D) + 2, fn, ": weight must be ", D + 2,
                "-D, got shape ", w.shape());
    // PyTorch's rule: half the kernel's extent on each side, the odd element after.
    std::vector<int64_t> extra_pads;  // F::pad's list: last dim first
    bool asymmetric = false;
    for (size_t i = 0; i < D; ++i) {
      TGRAD_CHECK(o.stride()[i] == 1, fn, ": padding=kSame needs stride 1, got stride[", i,
                  "]=", o.stride()[i], " (as in PyTorch)");
      const int64_t k = w.size(2 + static_cast<int64_t>(i));
      int64_t total = 0;
      TGRAD_CHECK(
          o.dilation()[i] > 0 && k > 0 && !__builtin_mul_overflow(o.dilation()[i], k - 1, &total),
          fn, ": padding=kSame: dilation[", i, "]=", o.dilation()[i], " and kernel size ", k,
          " must be positive and their span fit int64");
      args.padding[i] = total / 2;
      asymmetric |= total % 2 != 0;
    }
    if (asymmetric) {
      for (size_t i = D; i-- > 0;) {
        const int64_t total = o.dilation()[i] * (w.size(2 + static_cast<int64_t>(i)) - 1);
        extra_pads.push_back(0);
        extra_pads.push_back(total % 2);
      }
      TGRAD_CHECK(x.dim() == static_cast<int64_t>(D) + 1 || x.dim() == static_cast<int64_t>(D) + 2,
                  fn, ": input must be ", D + 1, "-D (unbatched) or ", D + 2, "-D (batched), got ",
                  x.dim(), "-D input of shape ", x.shape());
      const Tensor xp = pad(x, PadFuncOptions(extra_pads));
      args.x_shape = xp.shape();
      const ConvGeometry g = make_conv_geometry(args);
      const Tensor y4 =
          detail::conv_transpose_dgrad(g, xp.reshape(y4_shape(g)), w.reshape(w4_shape(g)), b);
      return y4.reshape(user_shape<D>(x, g.batch, g.in_channels, g.in_size[0], g.in_size[1]));
    }
  }  // kValid: no padding
  const ConvGeometry g = make_conv_geometry(args);
  // Our input is the transposed geometry's y, our output its x.
  const Tensor y4 =
      detail::conv_transpose_dgrad(g, x.reshape(y4_shape(g)), w.reshape(w4_shape(g)), b);
  return y4.reshape(user_shape<D>(x, g.batch, g.in_channels, g.in_size[0], g.in_size[1]));
}

}  // namespace

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b,
                        const ConvTranspose1dFuncOptions& options) {
  return conv_transpose_nd<1>("conv_transpose1d", x, w, b, options);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b,
                        const ConvTranspose2dFuncOptions& options) {
  return conv_transpose_nd<2>("conv_transpose2d", x, w, b, options);
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dFuncOptions& options) {
  return conv_nd<1>("conv1d", x, w, b, options);
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dFuncOptions& options) {
  return conv_nd<2>("conv2d", x, w, b, options);
}

}  // namespace tgrad
