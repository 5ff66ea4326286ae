// The conv sweep generator and the runners that evaluate one case on a backend, through the
// public ops, or through the naive reference loops.
#include "tests/conv_cases.h"

#include <algorithm>
#include <array>
#include <limits>
#include <random>
#include <sstream>

#include "core/backend.h"

namespace tgrad::testing {
namespace {

// A portable random source: raw 64-bit draws only (std distributions differ across libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int64_t integer(int64_t low, int64_t high) {  // inclusive
    return low + static_cast<int64_t>(engine_() % static_cast<uint64_t>(high - low + 1));
  }
  bool coin(int64_t one_in) { return integer(1, one_in) == 1; }
  double uniform(double low, double high) {
    const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    return low + (high - low) * u;
  }

 private:
  std::mt19937_64 engine_;
};

std::vector<double> random_values(Rng& rng, int64_t count) {
  std::vector<double> v(static_cast<size_t>(count));
  for (double& e : v)
    e = rng.uniform(-1.0, 1.0);
  return v;
}

// Channels for a groups kind: 0 = one group, 1 = two groups, 2 = depthwise (groups = C_in >= 3).
void draw_channels(Rng& rng, int kind, int64_t max_per_group, reference::ConvTransposeParams& p) {
  if (kind == 0) {
    p.groups = 1;
    p.in_channels = rng.integer(1, max_per_group);
    p.out_channels = rng.integer(1, max_per_group);
  } else if (kind == 1) {
    p.groups = 2;
    p.in_channels = 2 * rng.integer(1, max_per_group);
    p.out_channels = 2 * rng.integer(1, max_per_group);
  } else {
    p.in_channels = rng.integer(3, 2 + max_per_group);  // 2 would be the groups-2 kind
    p.groups = p.in_channels;
    p.out_channels = p.in_channels * rng.integer(1, 2);
  }
}

// Grows the input along each axis until the output has at least one element.
void make_output_nonempty(reference::ConvTransposeParams& p) {
  for (int a = 0; a < 2; ++a)
    while (p.out_extent(a) < 1)
      ++p.in_size[a];
}

struct AxisChoice {
  int64_t stride, padding, dilation, output_padding;
};

// Every valid (stride, padding, dilation, output_padding) of one axis: PyTorch allows an
// output_padding smaller than either the stride or the dilation.
std::vector<AxisChoice> all_axis_choices() {
  std::vector<AxisChoice> all;
  for (int64_t s : {1, 2, 3})
    for (int64_t pad : {0, 1, 2})
      for (int64_t d : {1, 2, 4})
        for (int64_t op = 0; op < std::max(s, d); ++op)
          all.push_back({s, pad, d, op});
  return all;
}

ConvCase small_case(Rng& rng, int spatial_dims, int kind, const AxisChoice& w_axis,
                    const AxisChoice& h_axis) {
  ConvCase c;
  c.spatial_dims = spatial_dims;
  c.bias = rng.coin(2);
  c.batched = !rng.coin(4);
  reference::ConvTransposeParams& p = c.p;
  p.batch = c.batched ? rng.integer(1, 2) : 1;
  draw_channels(rng, kind, 3, p);
  const std::array<AxisChoice, 2> axes{h_axis, w_axis};
  for (int a = 2 - spatial_dims; a < 2; ++a) {
    p.in_size[a] = rng.integer(1, 5);
    p.kernel[a] = rng.integer(1, 4);
    p.stride[a] = axes[a].stride;
    p.padding[a] = axes[a].padding;
    p.dilation[a] = axes[a].dilation;
    p.output_padding[a] = axes[a].output_padding;
  }
  make_output_nonempty(p);
  return c;
}

// Larger problems (more channels, longer axes) so that blocked or tiled kernels run more than
// one tile; still milliseconds through the naive loops.
ConvCase larger_case(Rng& rng, int spatial_dims, int kind) {
  ConvCase c;
  c.spatial_dims = spatial_dims;
  c.bias = true;
  reference::ConvTransposeParams& p = c.p;
  p.batch = rng.integer(2, 3);
  draw_channels(rng, kind, 12, p);
  for (int a = 2 - spatial_dims; a < 2; ++a) {
    p.in_size[a] = spatial_dims == 1 ? rng.integer(40, 70) : rng.integer(7, 13);
    p.kernel[a] = rng.integer(1, 5);
    p.stride[a] = rng.integer(1, 3);
    p.dilation[a] = rng.integer(1, 2);
    p.padding[a] = rng.integer(0, 2);
    p.output_padding[a] = rng.integer(0, std::max(p.stride[a], p.dilation[a]) - 1);
  }
  make_output_nonempty(p);
  return c;
}

// A long reduction over (n, ih, iw) for wgrad and the bias gradient: several thousand terms, so
// that reductions split into chunks (CUDA) or threads (CPU) run their combining step.
ConvCase long_reduction_case(Rng& rng, int spatial_dims) {
  ConvCase c;
  c.spatial_dims = spatial_dims;
  c.bias = true;
  reference::ConvTransposeParams& p = c.p;
  p.batch = 2;
  draw_channels(rng, 0, 3, p);
  if (spatial_dims == 1) {
    p.in_size[1] = 3000 + rng.integer(0, 500);
    p.kernel[1] = 3;
    p.stride[1] = 2;
    p.padding[1] = 1;
    p.output_padding[1] = 1;
  } else {
    p.in_size = {45 + rng.integer(0, 10), 70 + rng.integer(0, 10)};
    p.kernel = {3, 2};
    p.dilation = {2, 1};
    p.padding = {1, 0};
  }
  return c;
}

}  // namespace

std::string ConvCase::str() const {
  std::ostringstream os;
  os << fn() << (batched ? "" : " unbatched") << (bias ? " bias" : " no-bias") << ": " << p.str();
  return os.str();
}

Shape ConvCase::x_shape() const {
  Shape s;
  if (batched) s.push_back(p.batch);
  s.push_back(p.in_channels);
  if (spatial_dims == 2) s.push_back(p.in_size[0]);
  s.push_back(p.in_size[1]);
  return s;
}

Shape ConvCase::w_shape() const {
  Shape s{p.in_channels, p.out_channels / p.groups};
  if (spatial_dims == 2) s.push_back(p.kernel[0]);
  s.push_back(p.kernel[1]);
  return s;
}

Shape ConvCase::y_shape() const {
  Shape s;
  if (batched) s.push_back(p.batch);
  s.push_back(p.out_channels);
  if (spatial_dims == 2) s.push_back(p.out_extent(0));
  s.push_back(p.out_extent(1));
  return s;
}

Shape ConvCase::w_shape4() const {
  return {p.in_channels, p.out_channels / p.groups, p.kernel[0], p.kernel[1]};
}

Shape ConvCase::y_shape4() const {
  return {p.batch, p.out_channels, p.out_extent(0), p.out_extent(1)};
}

ConvTransposeArgs ConvCase::args() const {
  ConvTransposeArgs a;
  a.fn = fn();
  a.spatial_dims = spatial_dims;
  a.x_shape = x_shape();
  a.w_shape = w_shape();
  a.has_bias = bias;
  if (bias) a.b_shape = b_shape();
  a.groups = p.groups;
  // The user's axis order: 1-D has its one axis in entry 0, 2-D has (H, W).
  const int first = 2 - spatial_dims;
  for (int i = 0; i < spatial_dims; ++i) {
    a.stride[i] = p.stride[first + i];
    a.padding[i] = p.padding[first + i];
    a.output_padding[i] = p.output_padding[first + i];
    a.dilation[i] = p.dilation[first + i];
  }
  return a;
}

ConvTranspose1dFuncOptions ConvCase::options1d() const {
  return ConvTranspose1dFuncOptions()
      .stride(std::array<int64_t, 1>{p.stride[1]})
      .padding(std::array<int64_t, 1>{p.padding[1]})
      .output_padding(std::array<int64_t, 1>{p.output_padding[1]})
      .dilation(std::array<int64_t, 1>{p.dilation[1]})
      .groups(p.groups);
}

ConvTranspose2dFuncOptions ConvCase::options2d() const {
  return ConvTranspose2dFuncOptions()
      .stride(p.stride)
      .padding(p.padding)
      .output_padding(p.output_padding)
      .dilation(p.dilation)
      .groups(p.groups);
}

ConvCase conv_case_from_shapes(int spatial_dims, const Shape& x_shape, const Shape& w_shape,
                               bool bias, const std::vector<int64_t>& stride,
                               const std::vector<int64_t>& padding,
                               const std::vector<int64_t>& output_padding,
                               const std::vector<int64_t>& dilation, int64_t groups) {
  ConvCase c;
  c.spatial_dims = spatial_dims;
  c.bias = bias;
  c.batched = static_cast<int>(x_shape.size()) == spatial_dims + 2;
  reference::ConvTransposeParams& p = c.p;
  p.batch = c.batched ? x_shape[0] : 1;
  p.in_channels = w_shape[0];
  p.groups = groups;
  p.out_channels = w_shape[1] * groups;
  const int first = 2 - spatial_dims;  // the axis of p that the user's axis 0 maps onto
  for (int i = 0; i < spatial_dims; ++i) {
    const int a = first + i;
    p.in_size[a] = x_shape[x_shape.size() - spatial_dims + i];
    p.kernel[a] = w_shape[2 + i];
    p.stride[a] = stride[i];
    p.padding[a] = padding[i];
    p.output_padding[a] = output_padding[i];
    p.dilation[a] = dilation[i];
  }
  return c;
}

std::vector<ConvCase> conv_sweep(uint64_t seed) {
  Rng rng(seed);
  const std::vector<AxisChoice> choices = all_axis_choices();
  std::vector<ConvCase> cases;
  // Three rounds, the groups kind shifted each round: every axis choice meets every kind.
  for (int round = 0; round < 3; ++round)
    for (int dims : {1, 2})
      for (size_t i = 0; i < choices.size(); ++i) {
        const int kind = static_cast<int>((i + round) % 3);
        const int64_t h = rng.integer(0, static_cast<int64_t>(choices.size()) - 1);
        cases.push_back(small_case(rng, dims, kind, choices[i], choices[h]));
      }
  for (int dims : {1, 2})
    for (int kind = 0; kind < 3; ++kind)
      cases.push_back(larger_case(rng, dims, kind));
  for (int dims : {1, 2})
    cases.push_back(long_reduction_case(rng, dims));
  return cases;
}

void for_each_sweep_case(uint64_t data_seed,
                         const std::function<bool(const ConvCase&, const ConvData&)>& check) {
  constexpr int kMaxFailingCases = 5;
  const std::vector<ConvCase> cases = conv_sweep();
  int failing = 0;
  for (size_t i = 0; i < cases.size() && failing < kMaxFailingCases; ++i)
    if (!check(cases[i], make_conv_data(cases[i], data_seed + i))) ++failing;
}

ConvData make_conv_data(const ConvCase& c, uint64_t seed) {
  Rng rng(seed);
  ConvData d;
  d.x = random_values(rng, c.p.x_numel());
  d.w = random_values(rng, c.p.w_numel());
  if (c.bias) d.b = random_values(rng, c.p.out_channels);
  d.dy = random_values(rng, c.p.y_numel());
  return d;
}

ConvTensors conv_tensors(const ConvCase& c, const ConvData& d, DType dtype, Device device) {
  const TensorOptions options = TensorOptions(dtype).device(device);
  ConvTensors t;
  t.x = from_vector(d.x, c.x_shape4(), options);
  t.w = from_vector(d.w, c.w_shape4(), options);
  if (c.bias) t.b = from_vector(d.b, c.b_shape(), options);
  t.dy = from_vector(d.dy, c.y_shape4(), options);
  return t;
}

ConvOutputs run_backend_passes(const ConvCase& c, const ConvTensors& t) {
  ConvGeometry g = make_conv_transpose_geometry(c.args());
  if (t.x.dtype() == kFloat32) g.precision = float32_precision();  // as the public ops do
  const TensorOptions options = TensorOptions(t.x.dtype()).device(t.x.device());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Backend& be = backend(t.x.device());
  ConvOutputs out;
  out.y = full(c.y_shape4(), nan, options);
  be.conv_transpose_forward(g, t.x, t.w, c.bias ? &t.b : nullptr, out.y);
  out.dx = full(c.x_shape4(), nan, options);
  be.conv_transpose_dgrad(g, t.dy, t.w, out.dx);
  out.dw = full(c.w_shape4(), nan, options);
  be.conv_transpose_wgrad(g, t.x, t.dy, out.dw);
  if (c.bias) {
    out.db = full(c.b_shape(), nan, options);
    be.conv_transpose_bias_grad(g, t.dy, out.db);
  }
  return out;
}

ConvOutputs run_reference_passes(const ConvCase& c, const ConvData& d) {
  ConvOutputs out;
  out.y = host_tensor(reference::conv_transpose_forward(c.p, d.x, d.w, d.b), c.y_shape4());
  out.dx = host_tensor(reference::conv_transpose_dgrad(c.p, d.dy, d.w), c.x_shape4());
  out.dw = host_tensor(reference::conv_transpose_wgrad(c.p, d.x, d.dy), c.w_shape4());
  if (c.bias) out.db = host_tensor(reference::conv_transpose_bias_grad(c.p, d.dy), c.b_shape());
  return out;
}

Tensor run_public_forward(const ConvCase& c, const ConvTensors& t) {
  const Tensor x = t.x.reshape(c.x_shape());
  const Tensor w = t.w.reshape(c.w_shape());
  if (c.spatial_dims == 1) return conv_transpose1d(x, w, t.b, c.options1d());
  return conv_transpose2d(x, w, t.b, c.options2d());
}

Tensor host_tensor(const std::vector<double>& values, const Shape& shape) {
  return from_vector(values, shape, TensorOptions(kFloat64));
}

bool passes_close(const ConvOutputs& actual, const ConvOutputs& expected, Tolerance tol,
                  const std::string& config) {
  bool ok = true;
  auto one = [&](const char* name, const Tensor& a, const Tensor& e) {
    const ::testing::AssertionResult r = tensors_close(a, e, tol, std::string(name) + " " + config);
    EXPECT_TRUE(r);
    ok = ok && static_cast<bool>(r);
  };
  one("forward y", actual.y, expected.y);
  one("dgrad dx", actual.dx, expected.dx);
  one("wgrad dw", actual.dw, expected.dw);
  if (expected.db.defined()) one("bias grad db", actual.db, expected.db);
  return ok;
}

}  // namespace tgrad::testing
