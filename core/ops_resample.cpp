// Padding and resampling: pad (constant through a strided embed, reflect and replicate through
// index_select per dim), interpolate (nearest and bilinear as index_select along each spatial
// dim, bilinear blending two taps with weights) and pixel_shuffle/unshuffle (reshape to rank 6 +
// permute). Every piece is a differentiable op, so gradients and second derivatives follow.
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/ops_shape_internal.h"

namespace tgrad {

namespace {

Tensor index_tensor(const std::vector<int64_t>& values, Device device) {
  return from_vector(values, {static_cast<int64_t>(values.size())}).to(device);
}

// x padded by (before, after) along dim d, rows taken from x by `source(p)` for p in the padded
// range [-before, n + after).
template <class Source>
Tensor pad_by_index(const Tensor& x, int64_t d, int64_t before, int64_t after, Source source) {
  std::vector<int64_t> idx;
  for (int64_t p = -before; p < x.size(d) + after; ++p)
    idx.push_back(source(p));
  return detail::index_select_unchecked(x, d, index_tensor(idx, x.device()));
}

}  // namespace

Tensor pad(const Tensor& x, const PadFuncOptions& options) {
  detail::check_defined("pad", "input", x);
  const std::vector<int64_t>& p = options.pad();
  TGRAD_CHECK(p.size() % 2 == 0, "pad: the pad list ", p, " must have an even length");
  const int64_t dims = static_cast<int64_t>(p.size()) / 2;
  TGRAD_CHECK(dims <= x.dim(), "pad: the pad list ", p, " pads ", dims,
              " dims but the input is only ", x.dim(), "-D");
  const int64_t mode = static_cast<int64_t>(options.mode().index());
  if (mode == 0) {
    // Constant: crop the negative pads first, then embed into a tensor filled with the value.
    Tensor cropped = x;
    Shape shape = x.shape();
    std::vector<int64_t> before(x.dim(), 0);
    for (int64_t k = 0; k < dims; ++k) {
      const int64_t d = x.dim() - 1 - k, lo = p[2 * k], hi = p[2 * k + 1];
      const int64_t n = x.size(d) + std::min<int64_t>(lo, 0) + std::min<int64_t>(hi, 0);
      TGRAD_CHECK(n >= 0, "pad: the pads (", lo, ", ", hi, ") of dim ", d, " crop more than its ",
                  x.size(d), " elements");
      cropped = narrow(cropped, d, -std::min<int64_t>(lo, 0), n);
      before[d] = std::max<int64_t>(lo, 0);
      shape[d] = n + before[d] + std::max<int64_t>(hi, 0);
    }
    StridedWindow w = detail::full_window(shape);
    for (int64_t d = 0; d < x.dim(); ++d)
      w.offset += before[d] * w.strides[d];
    w.shape = cropped.shape();
    if (options.value() != 0.0 && !(grad_mode_enabled() && x.requires_grad())) {
      // Nothing to record: fill and copy in place (this also serves int64 inputs).
      Tensor y = full(shape, options.value(), TensorOptions(x.dtype()).device(x.device()));
      if (cropped.numel() > 0) backend(x.device()).strided_scatter(cropped, y, w);
      return y;
    }
    Tensor y = detail::strided_embed(cropped, shape, w);
    if (options.value() != 0.0) {
      // The fill outside the window does not depend on x: add it as a constant.
      Tensor fill = full(shape, options.value(), TensorOptions(x.dtype()).device(x.device()));
      StridedWindow inner = w;
      Tensor zeros_in = zeros(cropped.shape(), TensorOptions(x.dtype()).device(x.device()));
      if (zeros_in.numel() > 0) backend(x.device()).strided_scatter(zeros_in, fill, inner);
      y = y + fill;
    }
    return y;
  }
  detail::check_floating("pad", "input", x);
  const char* name = mode == 1 ? "reflect" : "replicate";
  Tensor y = x;
  for (int64_t k = 0; k < dims; ++k) {
    const int64_t d = x.dim() - 1 - k, lo = p[2 * k], hi = p[2 * k + 1], n = x.size(d);
    TGRAD_CHECK(lo >= 0 && hi >= 0, "pad: ", name, " padding needs non-negative pads, got (", lo,
                ", ", hi, ") for dim ", d);
    if (mode == 1) {
      TGRAD_CHECK(lo < n && hi < n, "pad: reflect padding (", lo, ", ", hi, ") of dim ", d,
                  " must be smaller than its size ", n);
      y = pad_by_index(y, d, lo, hi, [n](int64_t q) {
        if (q < 0) q = -q;
        if (q >= n) q = 2 * (n - 1) - q;
        return q;
      });
    } else {
      TGRAD_CHECK(n > 0 || (lo == 0 && hi == 0), "pad: replicate padding of dim ", d,
                  " needs a non-empty dim, got size 0");
      y = pad_by_index(y, d, lo, hi, [n](int64_t q) { return std::clamp<int64_t>(q, 0, n - 1); });
    }
  }
  return y;
}

namespace {

// Nearest's source index, PyTorch's legacy formula (float arithmetic, as its kernels).
int64_t nearest_source(int64_t dst, int64_t in, int64_t out, std::optional<double> scale) {
  const float s = scale && *scale > 0 ? static_cast<float>(1.0 / *scale)
                                      : static_cast<float>(in) / static_cast<float>(out);
  return std::min(static_cast<int64_t>(std::floor(static_cast<float>(dst) * s)), in - 1);
}

// Bilinear along dim d: y = x[i0] * w0 + x[i1] * w1 with PyTorch's source coordinates.
Tensor linear_along(const Tensor& x, int64_t d, int64_t out, bool align_corners,
                    std::optional<double> scale) {
  const int64_t in = x.size(d);
  double ratio;
  if (align_corners) {
    ratio = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  } else {
    ratio = scale && *scale > 0 ? 1.0 / *scale : static_cast<double>(in) / static_cast<double>(out);
  }
  std::vector<int64_t> i0(out), i1(out);
  std::vector<double> w0(out), w1(out);
  for (int64_t o = 0; o < out; ++o) {
    double src = align_corners ? ratio * static_cast<double>(o)
                               : ratio * (static_cast<double>(o) + 0.5) - 0.5;
    if (src < 0) src = 0;
    const auto lo = std::min(static_cast<int64_t>(src), in - 1);
    i0[o] = lo;
    i1[o] = lo + (lo < in - 1 ? 1 : 0);
    w1[o] = src - static_cast<double>(lo);
    w0[o] = 1.0 - w1[o];
  }
  Shape wshape(x.dim(), 1);
  wshape[d] = out;
  const TensorOptions opts = TensorOptions(x.dtype()).device(x.device());
  const Tensor a = from_vector(w0, wshape, opts), b = from_vector(w1, wshape, opts);
  return detail::index_select_unchecked(x, d, index_tensor(i0, x.device())) * a +
         detail::index_select_unchecked(x, d, index_tensor(i1, x.device())) * b;
}

}  // namespace

Tensor interpolate(const Tensor& x, const InterpolateFuncOptions& options) {
  detail::check_defined("interpolate", "input", x);
  detail::check_floating("interpolate", "input", x);
  const bool bilinear = options.mode().index() == 1;
  const char* mode = bilinear ? "bilinear" : "nearest";
  TGRAD_CHECK(x.dim() >= 3 && x.dim() <= 5,
              "interpolate: input must be 3-D to 5-D (N, C, ...), got shape ", x.shape());
  TGRAD_CHECK(!bilinear || x.dim() == 4,
              "interpolate: bilinear needs a 4-D input (N, C, H, W), got shape ", x.shape());
  TGRAD_CHECK(bilinear || !options.align_corners(),
              "interpolate: align_corners can only be set with mode bilinear, not ", mode);
  const bool has_size = options.size().has_value(), has_scale = options.scale_factor().has_value();
  TGRAD_CHECK(has_size != has_scale, "interpolate: give exactly one of size and scale_factor");
  const int64_t spatial = x.dim() - 2;
  std::vector<int64_t> out(spatial);
  std::vector<std::optional<double>> scales(spatial);
  if (has_size) {
    const std::vector<int64_t>& s = *options.size();
    TGRAD_CHECK(static_cast<int64_t>(s.size()) == spatial || s.size() == 1, "interpolate: size ", s,
                " must have ", spatial, " entries (or 1) for a ", x.dim(), "-D input");
    for (int64_t k = 0; k < spatial; ++k) {
      out[k] = s.size() == 1 ? s[0] : s[k];
      TGRAD_CHECK(out[k] > 0, "interpolate: size ", s, " must be positive");
    }
  } else {
    const std::vector<double>& f = *options.scale_factor();
    TGRAD_CHECK(static_cast<int64_t>(f.size()) == spatial || f.size() == 1,
                "interpolate: scale_factor ", f, " must have ", spatial, " entries (or 1) for a ",
                x.dim(), "-D input");
    for (int64_t k = 0; k < spatial; ++k) {
      const double sf = f.size() == 1 ? f[0] : f[k];
      TGRAD_CHECK(std::isfinite(sf) && sf > 0, "interpolate: scale_factor ", f,
                  " must be finite and positive");
      scales[k] = sf;
      out[k] = static_cast<int64_t>(std::floor(static_cast<double>(x.size(k + 2)) * sf));
      TGRAD_CHECK(out[k] > 0, "interpolate: scale_factor ", sf, " gives an empty output for dim ",
                  k + 2, " of size ", x.size(k + 2));
    }
  }
  Tensor y = x;
  for (int64_t k = 0; k < spatial; ++k) {
    const int64_t d = k + 2, in = x.size(d);
    TGRAD_CHECK(in > 0, "interpolate: input dim ", d, " is empty (shape ", x.shape(), ")");
    if (bilinear) {
      y = linear_along(y, d, out[k], options.align_corners().value_or(false), scales[k]);
    } else {
      std::vector<int64_t> idx(out[k]);
      for (int64_t o = 0; o < out[k]; ++o)
        idx[o] = nearest_source(o, in, out[k], scales[k]);
      y = detail::index_select_unchecked(y, d, index_tensor(idx, x.device()));
    }
  }
  return y;
}

Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor) {
  detail::check_defined("pixel_shuffle", "input", x);
  const int64_t r = upscale_factor;
  TGRAD_CHECK(r > 0, "pixel_shuffle: upscale_factor=", r, " must be positive");
  TGRAD_CHECK(x.dim() >= 3,
              "pixel_shuffle: input must have at least 3 dims (*, C, H, W), got shape ", x.shape());
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  TGRAD_CHECK(c % (r * r) == 0, "pixel_shuffle: channels ", c,
              " are not divisible by upscale_factor^2 = ", r * r);
  const int64_t batch = x.numel() == 0 ? 0 : x.numel() / (c * h * w);
  const Tensor six = x.reshape({batch, c / (r * r), r, r, h, w});
  Shape out(x.shape().begin(), x.shape().end() - 3);
  out.insert(out.end(), {c / (r * r), h * r, w * r});
  return permute(six, {0, 1, 4, 2, 5, 3}).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor) {
  detail::check_defined("pixel_unshuffle", "input", x);
  const int64_t r = downscale_factor;
  TGRAD_CHECK(r > 0, "pixel_unshuffle: downscale_factor=", r, " must be positive");
  TGRAD_CHECK(x.dim() >= 3,
              "pixel_unshuffle: input must have at least 3 dims (*, C, H, W), got shape ",
              x.shape());
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  TGRAD_CHECK(h % r == 0 && w % r == 0, "pixel_unshuffle: height ", h, " and width ", w,
              " must be divisible by downscale_factor=", r);
  const int64_t batch = x.numel() == 0 ? 0 : x.numel() / (c * h * w);
  const Tensor six = x.reshape({batch, c, h / r, r, w / r, r});
  Shape out(x.shape().begin(), x.shape().end() - 3);
  out.insert(out.end(), {c * r * r, h / r, w / r});
  return permute(six, {0, 1, 3, 5, 2, 4}).reshape(out);
}

}  // namespace tgrad
