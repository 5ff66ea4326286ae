// Identities every transposed convolution must satisfy, over the conv sweep: dgrad and wgrad are
// the adjoints of the forward pass; conv_transpose1d is conv_transpose2d with H = 1 bit for bit
// (values and gradients); a grouped convolution is the concatenation of its groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"
#include "tests/conv_cases.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

constexpr uint64_t kDataSeed = kConvSweepSeed + 5000;

// sum_i a_i b_i, and sum_i |a_i b_i| as the scale of its rounding error.
struct Dot {
  double value = 0.0;
  double scale = 0.0;
};
Dot dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  Dot d;
  for (size_t i = 0; i < va.size(); ++i) {
    d.value += va[i] * vb[i];
    d.scale += std::abs(va[i] * vb[i]);
  }
  return d;
}

// <conv_transpose(x, w), dy> = <x, dgrad(dy, w)> = <w, wgrad(x, dy)>: three float64 sums of the
// same products in different orders, so they agree to rounding relative to the sum of |terms|.
void check_adjoints(Device device) {
  for_each_sweep_case(kDataSeed, [&](const ConvCase& with_bias, const ConvData& d) {
    ConvCase c = with_bias;
    c.bias = false;  // the bias is not linear in x or w
    const ConvTensors t = conv_tensors(c, d, kFloat64, device);
    const ConvOutputs out = run_backend_passes(c, t);
    const Dot y_dy = dot(out.y, t.dy), x_dx = dot(t.x, out.dx), w_dw = dot(t.w, out.dw);
    const double scale = std::max({y_dy.scale, x_dx.scale, w_dw.scale, 1e-300});
    const double dgrad_err = std::abs(y_dy.value - x_dx.value) / scale;
    const double wgrad_err = std::abs(y_dy.value - w_dw.value) / scale;
    EXPECT_LE(dgrad_err, 1e-12) << "<y, dy> = " << y_dy.value << " but <x, dx> = " << x_dx.value
                                << " on " << device.str() << ": " << c.str();
    EXPECT_LE(wgrad_err, 1e-12) << "<y, dy> = " << y_dy.value << " but <w, dw> = " << w_dw.value
                                << " on " << device.str() << ": " << c.str();
    return dgrad_err <= 1e-12 && wgrad_err <= 1e-12;
  });
}

TEST(ConvIdentities, AdjointsCpu) {
  check_adjoints(Device(kCPU));
}

TEST(ConvIdentities, AdjointsCuda) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_adjoints(Device(kCUDA));
}

// Leaves x, w, b (b undefined without bias) of a case in its user shapes, requiring grad.
struct Leaves {
  Tensor x, w, b;
};
Leaves leaves(const ConvCase& c, const ConvData& d, DType dtype, Device device) {
  const TensorOptions options = TensorOptions(dtype).device(device).requires_grad(true);
  Leaves l;
  l.x = from_vector(d.x, c.x_shape(), options);
  l.w = from_vector(d.w, c.w_shape(), options);
  if (c.bias) l.b = from_vector(d.b, c.b_shape(), options);
  return l;
}

::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << what << ": undefined";
  if (equal(a, b)) return ::testing::AssertionSuccess();
  // Show how far apart they are (any nonzero difference fails).
  return ::testing::AssertionFailure()
         << what << " differ: " << compare(a, b, Tolerance{}, what).report;
}

// conv_transpose1d(x, w) and conv_transpose2d on the same data with H = 1 must give the same
// bits: values and all three gradients (one code path serves both: 1-D is 2-D with a height of 1).
void check_1d_equals_2d(Device device, DType dtype) {
  for_each_sweep_case(kDataSeed, [&](const ConvCase& c1, const ConvData& d) {
    if (c1.spatial_dims != 1) return true;
    ConvCase c2 = c1;
    c2.spatial_dims = 2;  // the same sizes, H = 1 made explicit
    const Leaves l1 = leaves(c1, d, dtype, device), l2 = leaves(c2, d, dtype, device);
    const Tensor y1 = conv_transpose1d(l1.x, l1.w, l1.b, c1.options1d());
    const Tensor y2 = conv_transpose2d(l2.x, l2.w, l2.b, c2.options2d());
    const std::string config = device.str() + " " + dtype_name(dtype) + " " + c1.str();
    EXPECT_EQ(y2.shape(), c2.y_shape()) << config;
    if (y2.shape() != c2.y_shape()) return false;
    const Tensor dy = from_vector(d.dy, c1.y_shape(), TensorOptions(dtype).device(device));
    y1.backward(dy);
    y2.backward(dy.reshape(c2.y_shape()));
    ::testing::AssertionResult ok = bit_equal(y1, y2.reshape(c1.y_shape()), "y " + config);
    if (ok) ok = bit_equal(l1.x.grad(), l2.x.grad().reshape(c1.x_shape()), "dx " + config);
    if (ok) ok = bit_equal(l1.w.grad(), l2.w.grad().reshape(c1.w_shape()), "dw " + config);
    if (ok && c1.bias) ok = bit_equal(l1.b.grad(), l2.b.grad(), "db " + config);
    EXPECT_TRUE(ok);
    return static_cast<bool>(ok);
  });
}

TEST(ConvIdentities, OneDEqualsTwoDWithHeightOneCpu) {
  check_1d_equals_2d(Device(kCPU), kFloat64);
  check_1d_equals_2d(Device(kCPU), kFloat32);
}

TEST(ConvIdentities, OneDEqualsTwoDWithHeightOneCuda) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_1d_equals_2d(Device(kCUDA), kFloat64);
  check_1d_equals_2d(Device(kCUDA), kFloat32);
}

// Channels [c0, c0 + count) of a (N, C, plane) array.
std::vector<double> channels(const std::vector<double>& v, int64_t N, int64_t C, int64_t c0,
                             int64_t count) {
  const int64_t plane = static_cast<int64_t>(v.size()) / (N * C);
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    out.insert(out.end(), v.begin() + (n * C + c0) * plane,
               v.begin() + (n * C + c0 + count) * plane);
  return out;
}

// Writes `part` (N, count, plane) into channels [c0, c0 + count) of a (N, C, plane) array.
void put_channels(std::vector<double>& v, int64_t N, int64_t C, int64_t c0, int64_t count,
                  const std::vector<double>& part) {
  const int64_t plane = static_cast<int64_t>(v.size()) / (N * C);
  for (int64_t n = 0; n < N; ++n)
    std::copy(part.begin() + n * count * plane, part.begin() + (n + 1) * count * plane,
              v.begin() + (n * C + c0) * plane);
}

// Each group of a grouped convolution, run alone as an ungrouped one on its slice of channels
// (x and dx: C_in/g channels; y, dy and b: C_out/g; w and dw: C_in/g rows), rebuilds the
// grouped result. Per-group GEMMs may be blocked differently, hence rounding-level tolerance.
void check_groups_concatenate(Device device) {
  int checked = 0;
  for_each_sweep_case(kDataSeed, [&](const ConvCase& c, const ConvData& d) {
    const auto& p = c.p;
    if (p.groups == 1) return true;
    ++checked;
    const ConvOutputs whole = run_backend_passes(c, conv_tensors(c, d, kFloat64, device));

    ConvCase part = c;
    part.p.groups = 1;
    part.p.in_channels = p.in_channels / p.groups;
    part.p.out_channels = p.out_channels / p.groups;
    const int64_t Cig = part.p.in_channels, Cog = part.p.out_channels, N = p.batch;
    const int64_t w_rows = part.p.w_numel() / Cig;
    std::vector<double> y(p.y_numel()), dx(p.x_numel()), dw(p.w_numel()), db(p.out_channels);
    for (int64_t g = 0; g < p.groups; ++g) {
      ConvData dg;
      dg.x = channels(d.x, N, p.in_channels, g * Cig, Cig);
      dg.w.assign(d.w.begin() + g * Cig * w_rows, d.w.begin() + (g + 1) * Cig * w_rows);
      if (c.bias) dg.b.assign(d.b.begin() + g * Cog, d.b.begin() + (g + 1) * Cog);
      dg.dy = channels(d.dy, N, p.out_channels, g * Cog, Cog);
      const ConvOutputs o = run_backend_passes(part, conv_tensors(part, dg, kFloat64, device));
      put_channels(y, N, p.out_channels, g * Cog, Cog, o.y.to_vector<double>());
      put_channels(dx, N, p.in_channels, g * Cig, Cig, o.dx.to_vector<double>());
      const std::vector<double> dw_g = o.dw.to_vector<double>();
      std::copy(dw_g.begin(), dw_g.end(), dw.begin() + g * Cig * w_rows);
      if (c.bias) {
        const std::vector<double> db_g = o.db.to_vector<double>();
        std::copy(db_g.begin(), db_g.end(), db.begin() + g * Cog);
      }
    }
    const std::string config = device.str() + " " + c.str();
    bool ok = true;
    auto one = [&](const char* name, const Tensor& actual, const std::vector<double>& expected) {
      const ::testing::AssertionResult r =
          tensors_close(actual, host_tensor(expected, actual.shape()), kFloat64Tight,
                        std::string(name) + " grouped vs per-group " + config);
      EXPECT_TRUE(r);
      ok = ok && static_cast<bool>(r);
    };
    one("y", whole.y, y);
    one("dx", whole.dx, dx);
    one("dw", whole.dw, dw);
    if (c.bias) one("db", whole.db, db);
    return ok;
  });
  EXPECT_GT(checked, 50);
}

TEST(ConvIdentities, GroupedEqualsConcatenatedGroupsCpu) {
  check_groups_concatenate(Device(kCPU));
}

TEST(ConvIdentities, GroupedEqualsConcatenatedGroupsCuda) {
  TGRAD_SKIP_WITHOUT_CUDA();
  check_groups_concatenate(Device(kCUDA));
}

}  // namespace
}  // namespace tgrad::testing
