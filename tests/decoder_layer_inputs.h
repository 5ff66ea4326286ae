// What the GPU conv tests over decoder-suite layers share (test_cuda_batch_igemm.cpp,
// test_cuda_direct.cpp; test_cuda_decoder_layers.cpp the first): the layer's transposed
// convolution with its options, random operands of the layer at a batch, and a guard that
// restores the forced kernels and the float32 precision. Header-only.
#pragma once

#include <cstdint>
#include <string>

#include "bench/decoder_layers.h"
#include "core/autograd.h"
#include "core/conv_geometry.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/tensor.h"

namespace tgrad::testing {

// conv_transpose1d / 2d of x with w and b under the layer's stride, padding, output padding,
// groups and dilation.
inline Tensor layer_conv(const bench::ConvLayerSpec& l, const Tensor& x, const Tensor& w,
                         const Tensor& b) {
  if (l.dims == 1) {
    return conv_transpose1d(x, w, b,
                            ConvTranspose1dFuncOptions()
                                .stride(l.stride[0])
                                .padding(l.padding[0])
                                .output_padding(l.output_padding[0])
                                .groups(l.groups)
                                .dilation(l.dilation[0]));
  }
  return conv_transpose2d(x, w, b,
                          ConvTranspose2dFuncOptions()
                              .stride(l.stride)
                              .padding(l.padding)
                              .output_padding(l.output_padding)
                              .groups(l.groups)
                              .dilation(l.dilation));
}

// The forward's output and dgrad's dx of one layer: backward of sum(y * dy) with x requiring
// grad and w not, so no wgrad runs.
struct ForwardDgrad {
  Tensor y, dx;
};

inline ForwardDgrad forward_dgrad(const bench::ConvLayerSpec& l, const Tensor& x, const Tensor& w,
                                  const Tensor& b, const Tensor& dy) {
  const Tensor xr = x.detach().requires_grad_();
  const Tensor y = layer_conv(l, xr, w, b);
  sum(y * dy).backward();
  return {y.detach(), xr.grad()};
}

// The three passes: backward of sum(y * dy) with x and w requiring grad.
struct AllPasses {
  Tensor y, dx, dw;
};

inline AllPasses all_passes(const bench::ConvLayerSpec& l, const Tensor& x, const Tensor& w,
                            const Tensor& b, const Tensor& dy) {
  const Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
  const Tensor y = layer_conv(l, xr, wr, b);
  sum(y * dy).backward();
  return {y.detach(), xr.grad(), wr.grad()};
}

// Random operands of l at this batch (drawn x, w, b, dy in that order; w scaled so that y stays
// near unit size), with the layer's taps and the positions of x over the batch (wgrad's sum
// length).
struct LayerOperands {
  Tensor x, w, b, dy;
  int64_t taps = 1, positions = 1;
};
inline LayerOperands layer_operands(const bench::ConvLayerSpec& l, int64_t batch, DType dtype,
                                    uint64_t seed) {
  const ConvGeometry g = make_conv_transpose_geometry(bench::conv_args(l, batch));
  Generator gen(seed);
  Shape x_shape = {batch, l.in_channels}, w_shape = {l.in_channels, l.out_channels / l.groups};
  Shape y_shape = {batch, l.out_channels};
  LayerOperands o;
  o.positions = batch;
  for (int a = 0; a < l.dims; ++a) {
    const auto u = static_cast<size_t>(a);
    x_shape.push_back(l.in_size[u]);
    w_shape.push_back(l.kernel[u]);
    y_shape.push_back(g.out_size[static_cast<size_t>(2 - l.dims + a)]);
    o.taps *= l.kernel[u];
    o.positions *= l.in_size[u];
  }
  o.x = randn(x_shape, gen, TensorOptions(dtype));
  o.w = randn(w_shape, gen, TensorOptions(dtype)) * 0.05;
  o.b = randn({l.out_channels}, gen, TensorOptions(dtype));
  o.dy = randn(y_shape, gen, TensorOptions(dtype));
  return o;
}

// Restores the forced conv kernels and the float32 precision when a check ends.
struct ConvSettingsGuard {
  std::string kernel = get_conv_kernel();
  std::string precision = get_float32_matmul_precision();
  ~ConvSettingsGuard() {
    set_conv_kernel(kernel);
    set_float32_matmul_precision(precision);
  }
};

}  // namespace tgrad::testing
