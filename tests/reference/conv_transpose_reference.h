// Naive loops for transposed convolution (forward, dgrad, wgrad, bias grad) on float64 vectors,
// sharing no code with cpu/, cuda/ or ConvGeometry; the trust anchor of the conv tests:
//   y[n, g*Cog+co, ih*s-p+kh*d, iw*s-p+kw*d] += x[n, g*Cig+ci, ih, iw] * w[g*Cig+ci, co, kh, kw]
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tgrad::reference {

// Every size of one transposed convolution, [0] = H and [1] = W. 1-D is H = 1, kernel[0] = 1,
// stride[0] = dilation[0] = 1, padding[0] = output_padding[0] = 0.
struct ConvTransposeParams {
  int64_t batch = 1;
  int64_t in_channels = 1;
  int64_t out_channels = 1;
  int64_t groups = 1;
  std::array<int64_t, 2> in_size{1, 1};
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  std::array<int64_t, 2> output_padding{0, 0};

  // The output extent of axis a: the last tap lands at (in-1)*s - p + (k-1)*d, the output keeps
  // `output_padding` more positions, and `padding` is cropped from each end.
  int64_t out_extent(int a) const;
  int64_t x_numel() const;
  int64_t w_numel() const;
  int64_t y_numel() const;
  std::string str() const;
};

// A 1-D problem as the 2-D one with H = 1 (lengths, kernel, ... on the W axis).
ConvTransposeParams params_1d(int64_t batch, int64_t in_channels, int64_t out_channels,
                              int64_t groups, int64_t length, int64_t kernel, int64_t stride,
                              int64_t padding, int64_t dilation, int64_t output_padding);

// y (N, C_out, H_out, W_out) from x (N, C_in, H, W), w (C_in, C_out/g, kH, kW) and b (C_out, or
// empty for no bias).
std::vector<double> conv_transpose_forward(const ConvTransposeParams& p,
                                           const std::vector<double>& x,
                                           const std::vector<double>& w,
                                           const std::vector<double>& b);

// dx[n, g*Cig+ci, ih, iw] = sum_{co, kh, kw} dy[n, g*Cog+co, ih*s-p+kh*d, iw*s-p+kw*d] * w[...]
std::vector<double> conv_transpose_dgrad(const ConvTransposeParams& p,
                                         const std::vector<double>& dy,
                                         const std::vector<double>& w);

// dw[g*Cig+ci, co, kh, kw] = sum_{n, ih, iw} x[n, g*Cig+ci, ih, iw] * dy[n, g*Cog+co, oh, ow]
std::vector<double> conv_transpose_wgrad(const ConvTransposeParams& p, const std::vector<double>& x,
                                         const std::vector<double>& dy);

// db[co] = sum_{n, oh, ow} dy[n, co, oh, ow]
std::vector<double> conv_transpose_bias_grad(const ConvTransposeParams& p,
                                             const std::vector<double>& dy);

}  // namespace tgrad::reference
