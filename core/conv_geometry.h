// ConvGeometry: every size of one transposed convolution, built and validated once per call and
// handed to each backend kernel. 1-D is 2-D with a height of 1, so kernels see two axes only.
//   y[n, g*Cog+co, oh, ow] += x[n, g*Cig+ci, ih, iw] * w[g*Cig+ci, co, kh, kw]
//   with oh = ih*stride[0] - padding[0] + kh*dilation[0] (likewise ow), weight (C_in, C_out/g, kH,
//   kW) out = (in - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1 per axis.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/dtype.h"

namespace tgrad {

struct ConvGeometry {
  int64_t batch = 0;         // N
  int64_t in_channels = 0;   // C_in (channels of x)
  int64_t out_channels = 0;  // C_out (channels of y)
  int64_t groups = 1;
  int spatial_dims = 2;  // 1 or 2: how the user called it (messages only)
  // Per axis, [0] = H, [1] = W. For 1-D: in_size {1, L}, kernel {1, k}, stride {1, s}, ...
  std::array<int64_t, 2> in_size{1, 1};
  std::array<int64_t, 2> out_size{1, 1};
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  std::array<int64_t, 2> output_padding{0, 0};
  Precision precision = Precision::highest;  // float32 only; float64 is always exact

  int64_t in_channels_per_group() const { return in_channels / groups; }
  int64_t out_channels_per_group() const { return out_channels / groups; }
  int64_t x_numel() const { return batch * in_channels * in_size[0] * in_size[1]; }
  int64_t y_numel() const { return batch * out_channels * out_size[0] * out_size[1]; }
  int64_t w_numel() const { return in_channels * out_channels_per_group() * kernel[0] * kernel[1]; }
  // 2 * N * C_in * (C_out/g) * kH * kW * H_in * W_in: the multiply-adds of each pass, times two.
  double flops() const;
  std::string str() const;  // one line naming every field, for messages and failing tests
  // Every field, so that a field added later is compared too (the conv planner's plan cache
  // keys on the whole geometry).
  bool operator==(const ConvGeometry&) const = default;
};

// Everything a conv_transpose call is given, before validation. Spatial arrays hold
// `spatial_dims` meaningful entries, axis order as the user wrote them (1-D: entry 0 only).
struct ConvTransposeArgs {
  const char* fn = "conv_transpose2d";  // names the public function in every message
  int spatial_dims = 2;
  Shape x_shape;  // (N, C_in, spatial...) or unbatched (C_in, spatial...)
  Shape w_shape;  // (C_in, C_out/groups, k...)
  bool has_bias = false;
  Shape b_shape;  // (C_out)
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> output_padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// Validates every argument (throwing tgrad::Error that names args.fn, the argument and the
// values) and returns the geometry, 1-D mapped onto the W axis with H = 1.
ConvGeometry make_conv_transpose_geometry(const ConvTransposeArgs& args);

// Everything a regular conv1d/conv2d call is given: x (N, C_in, spatial...) or unbatched, w
// (C_out, C_in/groups, k...), b (C_out); padding symmetric per axis ("same" is resolved by the
// caller).
struct ConvArgs {
  const char* fn = "conv2d";
  int spatial_dims = 2;
  Shape x_shape;
  Shape w_shape;
  bool has_bias = false;
  Shape b_shape;
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

// A regular convolution is the input-gradient pass of a transposed one: this validates args
// (messages name args.fn) and returns that transposed geometry, whose in_size is the
// convolution's output size, out_size its input size, in_channels its C_out and out_channels its
// C_in; output_padding takes the rows a stride leaves over, so the sizes match exactly.
ConvGeometry make_conv_geometry(const ConvArgs& args);

}  // namespace tgrad
