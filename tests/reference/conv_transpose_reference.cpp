// The naive loops of conv_transpose_reference.h: one loop per index of the definition, every
// sum in float64 in plain index order. Slow on purpose; only for the small problems of tests.
#include "tests/reference/conv_transpose_reference.h"

#include <sstream>
#include <stdexcept>

namespace tgrad::reference {
namespace {

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("reference conv_transpose: ") + what);
}

void check_sizes(const ConvTransposeParams& p) {
  require(p.batch >= 1 && p.in_channels >= 1 && p.out_channels >= 1 && p.groups >= 1,
          "batch, channels and groups must be positive");
  require(p.in_channels % p.groups == 0 && p.out_channels % p.groups == 0,
          "channels must be divisible by groups");
  for (int a = 0; a < 2; ++a) {
    require(p.in_size[a] >= 1 && p.kernel[a] >= 1 && p.stride[a] >= 1 && p.dilation[a] >= 1,
            "sizes, kernel, stride and dilation must be positive");
    require(p.padding[a] >= 0 && p.output_padding[a] >= 0, "padding must be non-negative");
    require(p.out_extent(a) >= 1, "output size must be positive");
  }
}

}  // namespace

int64_t ConvTransposeParams::out_extent(int a) const {
  const int64_t last_tap = (in_size[a] - 1) * stride[a] + (kernel[a] - 1) * dilation[a];
  return last_tap + 1 + output_padding[a] - 2 * padding[a];
}

int64_t ConvTransposeParams::x_numel() const {
  return batch * in_channels * in_size[0] * in_size[1];
}

int64_t ConvTransposeParams::w_numel() const {
  return in_channels * (out_channels / groups) * kernel[0] * kernel[1];
}

int64_t ConvTransposeParams::y_numel() const {
  return batch * out_channels * out_extent(0) * out_extent(1);
}

std::string ConvTransposeParams::str() const {
  std::ostringstream os;
  auto pair = [&os](const char* name, const std::array<int64_t, 2>& v) {
    os << ' ' << name << "=(" << v[0] << ',' << v[1] << ')';
  };
  os << "N=" << batch << " C_in=" << in_channels << " C_out=" << out_channels
     << " groups=" << groups;
  pair("in", in_size);
  pair("kernel", kernel);
  pair("stride", stride);
  pair("padding", padding);
  pair("dilation", dilation);
  pair("output_padding", output_padding);
  return os.str();
}

ConvTransposeParams params_1d(int64_t batch, int64_t in_channels, int64_t out_channels,
                              int64_t groups, int64_t length, int64_t kernel, int64_t stride,
                              int64_t padding, int64_t dilation, int64_t output_padding) {
  ConvTransposeParams p;
  p.batch = batch;
  p.in_channels = in_channels;
  p.out_channels = out_channels;
  p.groups = groups;
  p.in_size = {1, length};
  p.kernel = {1, kernel};
  p.stride = {1, stride};
  p.padding = {0, padding};
  p.dilation = {1, dilation};
  p.output_padding = {0, output_padding};
  return p;
}

std::vector<double> conv_transpose_forward(const ConvTransposeParams& p,
                                           const std::vector<double>& x,
                                           const std::vector<double>& w,
                                           const std::vector<double>& b) {
  check_sizes(p);
  require(static_cast<int64_t>(x.size()) == p.x_numel(), "x has the wrong size");
  require(static_cast<int64_t>(w.size()) == p.w_numel(), "w has the wrong size");
  require(b.empty() || static_cast<int64_t>(b.size()) == p.out_channels, "b has the wrong size");
  const int64_t H = p.in_size[0], W = p.in_size[1], kH = p.kernel[0], kW = p.kernel[1];
  const int64_t Ho = p.out_extent(0), Wo = p.out_extent(1);
  const int64_t Cig = p.in_channels / p.groups, Cog = p.out_channels / p.groups;
  std::vector<double> y(static_cast<size_t>(p.y_numel()), 0.0);
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t g = 0; g < p.groups; ++g)
      for (int64_t ci = 0; ci < Cig; ++ci)
        for (int64_t ih = 0; ih < H; ++ih)
          for (int64_t iw = 0; iw < W; ++iw) {
            const double xv = x[(((n * p.in_channels) + g * Cig + ci) * H + ih) * W + iw];
            for (int64_t co = 0; co < Cog; ++co)
              for (int64_t kh = 0; kh < kH; ++kh)
                for (int64_t kw = 0; kw < kW; ++kw) {
                  const int64_t oh = ih * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                  const int64_t ow = iw * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                  if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                  const double wv = w[(((g * Cig + ci) * Cog + co) * kH + kh) * kW + kw];
                  y[(((n * p.out_channels) + g * Cog + co) * Ho + oh) * Wo + ow] += xv * wv;
                }
          }
  if (!b.empty())
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t c = 0; c < p.out_channels; ++c)
        for (int64_t i = 0; i < Ho * Wo; ++i)
          y[((n * p.out_channels) + c) * Ho * Wo + i] += b[c];
  return y;
}

std::vector<double> conv_transpose_dgrad(const ConvTransposeParams& p,
                                         const std::vector<double>& dy,
                                         const std::vector<double>& w) {
  check_sizes(p);
  require(static_cast<int64_t>(dy.size()) == p.y_numel(), "dy has the wrong size");
  require(static_cast<int64_t>(w.size()) == p.w_numel(), "w has the wrong size");
  const int64_t H = p.in_size[0], W = p.in_size[1], kH = p.kernel[0], kW = p.kernel[1];
  const int64_t Ho = p.out_extent(0), Wo = p.out_extent(1);
  const int64_t Cig = p.in_channels / p.groups, Cog = p.out_channels / p.groups;
  std::vector<double> dx(static_cast<size_t>(p.x_numel()), 0.0);
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t g = 0; g < p.groups; ++g)
      for (int64_t ci = 0; ci < Cig; ++ci)
        for (int64_t ih = 0; ih < H; ++ih)
          for (int64_t iw = 0; iw < W; ++iw) {
            double acc = 0.0;
            for (int64_t co = 0; co < Cog; ++co)
              for (int64_t kh = 0; kh < kH; ++kh)
                for (int64_t kw = 0; kw < kW; ++kw) {
                  const int64_t oh = ih * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                  const int64_t ow = iw * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                  if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                  acc += dy[(((n * p.out_channels) + g * Cog + co) * Ho + oh) * Wo + ow] *
                         w[(((g * Cig + ci) * Cog + co) * kH + kh) * kW + kw];
                }
            dx[(((n * p.in_channels) + g * Cig + ci) * H + ih) * W + iw] = acc;
          }
  return dx;
}

std::vector<double> conv_transpose_wgrad(const ConvTransposeParams& p, const std::vector<double>& x,
                                         const std::vector<double>& dy) {
  check_sizes(p);
  require(static_cast<int64_t>(x.size()) == p.x_numel(), "x has the wrong size");
  require(static_cast<int64_t>(dy.size()) == p.y_numel(), "dy has the wrong size");
  const int64_t H = p.in_size[0], W = p.in_size[1], kH = p.kernel[0], kW = p.kernel[1];
  const int64_t Ho = p.out_extent(0), Wo = p.out_extent(1);
  const int64_t Cig = p.in_channels / p.groups, Cog = p.out_channels / p.groups;
  std::vector<double> dw(static_cast<size_t>(p.w_numel()), 0.0);
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t ci = 0; ci < Cig; ++ci)
      for (int64_t co = 0; co < Cog; ++co)
        for (int64_t kh = 0; kh < kH; ++kh)
          for (int64_t kw = 0; kw < kW; ++kw) {
            double acc = 0.0;
            for (int64_t n = 0; n < p.batch; ++n)
              for (int64_t ih = 0; ih < H; ++ih)
                for (int64_t iw = 0; iw < W; ++iw) {
                  const int64_t oh = ih * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                  const int64_t ow = iw * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                  if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                  acc += x[(((n * p.in_channels) + g * Cig + ci) * H + ih) * W + iw] *
                         dy[(((n * p.out_channels) + g * Cog + co) * Ho + oh) * Wo + ow];
                }
            dw[(((g * Cig + ci) * Cog + co) * kH + kh) * kW + kw] = acc;
          }
  return dw;
}

std::vector<double> conv_transpose_bias_grad(const ConvTransposeParams& p,
                                             const std::vector<double>& dy) {
  check_sizes(p);
  require(static_cast<int64_t>(dy.size()) == p.y_numel(), "dy has the wrong size");
  const int64_t plane = p.out_extent(0) * p.out_extent(1);
  std::vector<double> db(static_cast<size_t>(p.out_channels), 0.0);
  for (int64_t c = 0; c < p.out_channels; ++c)
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t i = 0; i < plane; ++i)
        db[c] += dy[((n * p.out_channels) + c) * plane + i];
  return db;
}

}  // namespace tgrad::reference
