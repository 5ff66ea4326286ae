// make_conv_transpose_geometry: validation of every conv_transpose argument with messages that
// name the function, the argument and the values; and the shape formula, in one place.
#include "core/conv_geometry.h"

#include <sstream>

#include "core/error.h"

namespace tgrad {

namespace {

// The same formula step by step in checked arithmetic (the arguments come from users, and a
// fuzzer found that (in - 1) * stride overflows); false when any step leaves int64.
bool checked_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                      int64_t output_padding, int64_t& out) {
  int64_t scaled = 0, twice_padding = 0, span = 0;
  return !__builtin_mul_overflow(in - 1, stride, &scaled) &&
         !__builtin_mul_overflow(padding, 2, &twice_padding) &&
         !__builtin_mul_overflow(dilation, kernel - 1, &span) &&
         !__builtin_sub_overflow(scaled, twice_padding, &out) &&
         !__builtin_add_overflow(out, span, &out) &&
         !__builtin_add_overflow(out, output_padding, &out) &&
         !__builtin_add_overflow(out, 1, &out);
}

}  // namespace

int64_t conv_transpose_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                                int64_t dilation, int64_t output_padding) {
  int64_t out = 0;
  TGRAD_CHECK(checked_out_size(in, kernel, stride, padding, dilation, output_padding, out),
              "conv_transpose_out_size: (in - 1)*stride - 2*padding + dilation*(kernel - 1) + "
              "output_padding + 1 leaves int64 for in=",
              in, ", kernel=", kernel, ", stride=", stride, ", padding=", padding,
              ", dilation=", dilation, ", output_padding=", output_padding);
  return out;
}

double ConvGeometry::flops() const {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(in_channels) *
         static_cast<double>(out_channels_per_group()) * static_cast<double>(kernel[0]) *
         static_cast<double>(kernel[1]) * static_cast<double>(in_size[0]) *
         static_cast<double>(in_size[1]);
}

std::string ConvGeometry::str() const {
  std::ostringstream os;
  auto pair = [&](const std::array<int64_t, 2>& a) {
    if (spatial_dims == 1) {
      os << a[1];
    } else {
      os << '(' << a[0] << ',' << a[1] << ')';
    }
  };
  os << "conv_transpose" << spatial_dims << "d N=" << batch << " C_in=" << in_channels
     << " C_out=" << out_channels << " groups=" << groups << " in=";
  pair(in_size);
  os << " out=";
  pair(out_size);
  os << " kernel=";
  pair(kernel);
  os << " stride=";
  pair(stride);
  os << " padding=";
  pair(padding);
  os << " dilation=";
  pair(dilation);
  os << " output_padding=";
  pair(output_padding);
  if (precision == Precision::high) os << " precision=high";
  return os.str();
}

ConvGeometry make_conv_transpose_geometry(const ConvTransposeArgs& a) {
  const char* fn = a.fn;
  const int d = a.spatial_dims;
  TGRAD_CHECK(d == 1 || d == 2, fn, ": spatial_dims=", d, " must be 1 or 2");
  const int64_t x_rank = static_cast<int64_t>(a.x_shape.size());
  TGRAD_CHECK(x_rank == d + 1 || x_rank == d + 2, fn, ": input must be ", d + 1,
              "-D (unbatched) or ", d + 2, "-D (batched), got ", x_rank, "-D input of shape ",
              a.x_shape);
  TGRAD_CHECK(static_cast<int>(a.w_shape.size()) == d + 2, fn, ": weight must be ", d + 2,
              "-D (C_in, C_out/groups, ", d == 1 ? "k" : "kH, kW", "), got ", a.w_shape.size(),
              "-D weight of shape ", a.w_shape);
  TGRAD_CHECK(a.groups > 0, fn, ": groups=", a.groups, " must be positive");
  for (int i = 0; i < d; ++i) {
    TGRAD_CHECK(a.stride[i] > 0, fn, ": stride[", i, "]=", a.stride[i], " must be positive");
    TGRAD_CHECK(a.padding[i] >= 0, fn, ": padding[", i, "]=", a.padding[i],
                " must be non-negative");
    TGRAD_CHECK(a.output_padding[i] >= 0, fn, ": output_padding[", i, "]=", a.output_padding[i],
                " must be non-negative");
    TGRAD_CHECK(a.dilation[i] > 0, fn, ": dilation[", i, "]=", a.dilation[i], " must be positive");
    TGRAD_CHECK(a.output_padding[i] < a.stride[i] || a.output_padding[i] < a.dilation[i], fn,
                ": output_padding[", i, "]=", a.output_padding[i], " must be smaller than stride[",
                i, "]=", a.stride[i], " or dilation[", i, "]=", a.dilation[i]);
    TGRAD_CHECK(a.w_shape[2 + i] > 0, fn, ": kernel size weight.size(", 2 + i,
                ")=", a.w_shape[2 + i], " must be positive (weight shape ", a.w_shape, ")");
  }
  const bool batched = x_rank == d + 2;
  const int64_t c_axis = batched ? 1 : 0;
  const int64_t c_in = a.x_shape[c_axis];
  TGRAD_CHECK(c_in == a.w_shape[0], fn, ": input channels ", c_in, " (input shape ", a.x_shape,
              ") must equal weight.size(0)=", a.w_shape[0]);
  TGRAD_CHECK(a.w_shape[0] % a.groups == 0, fn, ": weight.size(0)=", a.w_shape[0],
              " (input channels) must be divisible by groups=", a.groups);
  TGRAD_CHECK(a.w_shape[1] >= 0, fn, ": weight.size(1)=", a.w_shape[1], " must be non-negative");
  int64_t c_out = 0;
  TGRAD_CHECK(!__builtin_mul_overflow(a.w_shape[1], a.groups, &c_out), fn,
              ": output channels weight.size(1)*groups overflow int64");
  if (a.has_bias) {
    TGRAD_CHECK(a.b_shape.size() == 1 && a.b_shape[0] == c_out, fn,
                ": bias must be 1-D of size C_out=", c_out, " (weight.size(1)=", a.w_shape[1],
                " x groups=", a.groups, "), got shape ", a.b_shape);
  }

  ConvGeometry g;
  g.spatial_dims = d;
  g.batch = batched ? a.x_shape[0] : 1;
  g.in_channels = c_in;
  g.out_channels = c_out;
  g.groups = a.groups;
  for (int i = 0; i < d; ++i) {
    const int axis = d == 1 ? 1 : i;  // 1-D lives on the W axis
    const int64_t in = a.x_shape[c_axis + 1 + i];
    TGRAD_CHECK(in >= 0, fn, ": input size ", in, " must be non-negative");
    g.in_size[axis] = in;
    g.kernel[axis] = a.w_shape[2 + i];
    g.stride[axis] = a.stride[i];
    g.padding[axis] = a.padding[i];
    g.dilation[axis] = a.dilation[i];
    g.output_padding[axis] = a.output_padding[i];
    int64_t out = 0;
    TGRAD_CHECK(checked_out_size(in, g.kernel[axis], g.stride[axis], g.padding[axis],
                                 g.dilation[axis], g.output_padding[axis], out),
                fn, ": output size on axis ", i, " overflows int64: (in=", in,
                " - 1)*stride=", a.stride[i], " - 2*padding=", a.padding[i],
                " + dilation=", a.dilation[i], "*(kernel=", g.kernel[axis],
                " - 1) + output_padding=", a.output_padding[i], " + 1");
    TGRAD_CHECK(out >= 1, fn, ": output size ", out, " on axis ", i, " is too small: (in=", in,
                " - 1)*stride=", a.stride[i], " - 2*padding=", a.padding[i],
                " + dilation=", a.dilation[i], "*(kernel=", g.kernel[axis],
                " - 1) + output_padding=", a.output_padding[i], " + 1 must be at least 1");
    g.out_size[axis] = out;
  }
  // Every tensor's element count must fit in int64 (kernels index with int64).
  shape_numel({g.batch, g.out_channels, g.out_size[0], g.out_size[1]}, fn);
  shape_numel({g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]}, fn);
  return g;
}

ConvGeometry make_conv_geometry(const ConvArgs& a) {
  const char* fn = a.fn;
  const int d = a.spatial_dims;
  TGRAD_CHECK(d == 1 || d == 2, fn, ": spatial_dims=", d, " must be 1 or 2");
  const int64_t x_rank = static_cast<int64_t>(a.x_shape.size());
  TGRAD_CHECK(x_rank == d + 1 || x_rank == d + 2, fn, ": input must be ", d + 1,
              "-D (unbatched) or ", d + 2, "-D (batched), got ", x_rank, "-D input of shape ",
              a.x_shape);
  TGRAD_CHECK(static_cast<int>(a.w_shape.size()) == d + 2, fn, ": weight must be ", d + 2,
              "-D (C_out, C_in/groups, ", d == 1 ? "k" : "kH, kW", "), got ", a.w_shape.size(),
              "-D weight of shape ", a.w_shape);
  TGRAD_CHECK(a.groups > 0, fn, ": groups=", a.groups, " must be positive");
  for (int i = 0; i < d; ++i) {
    TGRAD_CHECK(a.stride[i] > 0, fn, ": stride[", i, "]=", a.stride[i], " must be positive");
    TGRAD_CHECK(a.padding[i] >= 0, fn, ": padding[", i, "]=", a.padding[i],
                " must be non-negative");
    TGRAD_CHECK(a.dilation[i] > 0, fn, ": dilation[", i, "]=", a.dilation[i], " must be positive");
    TGRAD_CHECK(a.w_shape[2 + i] > 0, fn, ": kernel size weight.size(", 2 + i,
                ")=", a.w_shape[2 + i], " must be positive (weight shape ", a.w_shape, ")");
  }
  const bool batched = x_rank == d + 2;
  const int64_t c_axis = batched ? 1 : 0;
  const int64_t c_in = a.x_shape[c_axis];
  const int64_t c_out = a.w_shape[0];
  TGRAD_CHECK(c_out % a.groups == 0, fn, ": weight.size(0)=", c_out,
              " (output channels) must be divisible by groups=", a.groups);
  int64_t expected_c_in = 0;
  TGRAD_CHECK(
      !__builtin_mul_overflow(a.w_shape[1], a.groups, &expected_c_in) && c_in == expected_c_in, fn,
      ": input channels ", c_in, " (input shape ", a.x_shape,
      ") must equal weight.size(1)=", a.w_shape[1], " x groups=", a.groups);
  if (a.has_bias) {
    TGRAD_CHECK(a.b_shape.size() == 1 && a.b_shape[0] == c_out, fn,
                ": bias must be 1-D of size C_out=", c_out, " (weight.size(0)), got shape ",
                a.b_shape);
  }

  // The transposed convolution whose input-gradient pass is this convolution: its "x" is our
  // output (C_out channels), its "y" our input (C_in channels), its weight ours as it is.
  ConvGeometry g;
  g.spatial_dims = d;
  g.batch = batched ? a.x_shape[0] : 1;
  g.in_channels = c_out;
  g.out_channels = c_in;
  g.groups = a.groups;
  for (int i = 0; i < d; ++i) {
    const int axis = d == 1 ? 1 : i;
    const int64_t in = a.x_shape[c_axis + 1 + i];
    const int64_t k = a.w_shape[2 + i];
    int64_t padded = 0, extent = 0;
    TGRAD_CHECK(!__builtin_mul_overflow(a.padding[i], 2, &padded) &&
                    !__builtin_add_overflow(padded, in, &padded) &&
                    !__builtin_mul_overflow(a.dilation[i], k - 1, &extent) &&
                    !__builtin_add_overflow(extent, 1, &extent),
                fn, ": sizes on axis ", i, " overflow int64 (input ", in, ", padding ",
                a.padding[i], ", dilation ", a.dilation[i], ", kernel ", k, ")");
    TGRAD_CHECK(padded >= extent, fn, ": input size ", in, " plus padding 2*", a.padding[i],
                " on axis ", i, " is smaller than the kernel's extent dilation*(k-1)+1 = ", extent,
                " (input shape ", a.x_shape, ", weight shape ", a.w_shape, ")");
    const int64_t out = (padded - extent) / a.stride[i] + 1;
    g.in_size[axis] = out;
    g.out_size[axis] = in;
    g.kernel[axis] = k;
    g.stride[axis] = a.stride[i];
    g.padding[axis] = a.padding[i];
    g.dilation[axis] = a.dilation[i];
    // The rows the last stride step leaves over: the transposed convolution's output_padding.
    g.output_padding[axis] = (padded - extent) % a.stride[i];
  }
  shape_numel({g.batch, g.in_channels, g.in_size[0], g.in_size[1]}, fn);
  shape_numel({g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]}, fn);
  return g;
}

}  // namespace tgrad
