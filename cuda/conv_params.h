// ConvParams: the sizes of one transposed convolution as the conv kernels read them (int64, by
// value in kernel arguments), made from core's ConvGeometry after checking the tensors against
// it. Shared by conv_transpose_{fwd,dgrad,wgrad}.cu. Private to cuda/.
#pragma once

#include <cstdint>

#include "core/backend.h"

namespace tgrad::cuda {

struct ConvParams {
  int64_t N, Ci, Co, G, Cig, Cog;
  int64_t Hi, Wi, Ho, Wo;
  int64_t kH, kW, sH, sW, pH, pW, dH, dW;
};

// Checks that x-, w- and y-shaped tensors hold the geometry's element counts and dtypes agree.
inline ConvParams make_conv_params(const char* fn, const ConvGeometry& g, const Tensor& x_like,
                                   const Tensor& w, const Tensor& y_like) {
  TGRAD_CHECK(g.groups > 0 && g.in_channels % g.groups == 0 && g.out_channels % g.groups == 0, fn,
              ": bad geometry ", g.str());
  TGRAD_CHECK(
      x_like.numel() == g.x_numel() && w.numel() == g.w_numel() && y_like.numel() == g.y_numel(),
      fn, ": tensors of shapes ", x_like.shape(), ", ", w.shape(), ", ", y_like.shape(),
      " do not match the geometry ", g.str());
  TGRAD_CHECK(x_like.dtype() == w.dtype() && w.dtype() == y_like.dtype(), fn, ": dtypes differ (",
              x_like.dtype(), ", ", w.dtype(), ", ", y_like.dtype(), ")");
  ConvParams p{};
  p.N = g.batch;
  p.Ci = g.in_channels;
  p.Co = g.out_channels;
  p.G = g.groups;
  p.Cig = g.in_channels_per_group();
  p.Cog = g.out_channels_per_group();
  p.Hi = g.in_size[0];
  p.Wi = g.in_size[1];
  p.Ho = g.out_size[0];
  p.Wo = g.out_size[1];
  p.kH = g.kernel[0];
  p.kW = g.kernel[1];
  p.sH = g.stride[0];
  p.sW = g.stride[1];
  p.pH = g.padding[0];
  p.pW = g.padding[1];
  p.dH = g.dilation[0];
  p.dW = g.dilation[1];
  TGRAD_CHECK(p.sH > 0 && p.sW > 0 && p.dH > 0 && p.dW > 0 && p.kH > 0 && p.kW > 0, fn,
              ": bad geometry ", g.str());
  // "high" allows TF32 but does not require it: these kernels compute in full float32 for both.
  return p;
}

}  // namespace tgrad::cuda
