// Tensor: factories, views, conversions, host access, printing, devices and their errors.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/backend.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::error_of;
using testing::tensors_close;
using testing::Tolerance;

TEST(Tensor, FactoriesHaveShapeDtypeAndValues) {
  const Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.device(), Device(kCPU));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_EQ(ones({4}, kFloat64).to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_EQ(full({2}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(arange(4).to_vector<double>(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(arange(1, 2, 0.25, kFloat64).to_vector<double>(),
            (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
  EXPECT_EQ(scalar_tensor(3.0).item(), 3.0);
}

TEST(Tensor, FromVectorTakesItsDtypeFromTheValuesUnlessTold) {
  EXPECT_EQ(from_vector(std::vector<double>{1, 2}, {2}).dtype(), kFloat64);
  EXPECT_EQ(from_vector(std::vector<float>{1, 2}, {2}).dtype(), kFloat32);
  const Tensor t = from_vector(std::vector<double>{0.1, 2}, {2}, kFloat32);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_EQ(t.to_vector<float>()[0], 0.1f);
  EXPECT_NE(error_of([] {
              from_vector(std::vector<float>{1, 2, 3}, {2, 2});
            }).find("4 elements"),
            std::string::npos);
}

TEST(Tensor, RandomFactoriesAreSeededAndDistributed) {
  Generator a(7), b(7), c(8);
  EXPECT_TRUE(equal(randn({100}, a), randn({100}, b)));
  EXPECT_FALSE(equal(rand({100}, a), rand({100}, c)));
  manual_seed(3);
  const Tensor r1 = rand({1000}, kFloat64);
  manual_seed(3);
  EXPECT_TRUE(equal(r1, rand({1000}, kFloat64)));
  for (double v : r1.to_vector<double>()) {
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 1.0);
  }
  // 20000 standard normals: the sample mean has standard error 0.007 and the variance 0.01,
  // so 5-sigma bounds are 0.035 and 0.05.
  const std::vector<double> n = randn({20000}, c, kFloat64).to_vector<double>();
  double mean = 0, var = 0;
  for (double v : n)
    mean += v;
  mean /= static_cast<double>(n.size());
  for (double v : n)
    var += (v - mean) * (v - mean);
  var /= static_cast<double>(n.size());
  EXPECT_NEAR(mean, 0.0, 0.035);
  EXPECT_NEAR(var, 1.0, 0.05);
}

TEST(Tensor, BadShapesAreErrors) {
  EXPECT_NE(error_of([] {
              zeros({1, 1, 1, 1, 1, 1, 1, 1, 1});
            }).find("maximum rank 8"),
            std::string::npos);
  EXPECT_NE(error_of([] { zeros({2, -1}); }).find("size[1]=-1"), std::string::npos);
  EXPECT_NE(error_of([] {
              zeros({int64_t{1} << 40, int64_t{1} << 40});
            }).find("int64"),
            std::string::npos);
  EXPECT_NE(error_of([] { arange(0, 1, 0); }).find("step=0"), std::string::npos);
}

TEST(Tensor, ReshapeSharesStorageAndInfersOneSize) {
  Tensor t = arange(6);
  Tensor v = t.reshape({2, -1});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_EQ(v.raw_data(), t.raw_data());
  v.fill_(1.0);
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(6, 1.0));
  EXPECT_NE(error_of([&] {
              t.reshape({4, -1});
            }).find("invalid for input of size 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              t.reshape({-1, -1});
            }).find("only one size may be -1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.reshape({7}); }).find("invalid"), std::string::npos);
}

TEST(Tensor, NarrowIsAViewOfRows) {
  Tensor t = arange(12, kFloat64).reshape({4, 3});
  Tensor rows = t.narrow(0, 1, 2);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.to_vector<double>(), (std::vector<double>{3, 4, 5, 6, 7, 8}));
  rows.fill_(-1.0);
  EXPECT_EQ(t.to_vector<double>()[3], -1.0);
  EXPECT_EQ(t.to_vector<double>()[9], 9.0);
  EXPECT_NE(error_of([&] { t.narrow(0, 3, 2); }).find("do not fit"), std::string::npos);
  // Along dim 1 the rows are not contiguous: a copy, whose in-place writes are refused.
  EXPECT_EQ(t.narrow(1, 2, 1).to_vector<double>(), (std::vector<double>{2, -1, -1, 11}));
  EXPECT_NE(error_of([&] { t.narrow(1, 0, 1).fill_(0.0); }).find("strided view"),
            std::string::npos);
}

TEST(Tensor, ConversionsCopy) {
  const Tensor d = from_vector(std::vector<double>{1.0 / 3.0, -2.0}, {2});
  const Tensor f = d.to(kFloat32);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(f.to_vector<float>()[0], static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(d.to(kFloat64).raw_data(), d.raw_data());  // no-op conversion returns itself
  Tensor c = d.clone();
  c.fill_(0.0);
  EXPECT_EQ(d.to_vector<double>()[1], -2.0);
  Tensor dst = zeros({2}, kFloat32);
  dst.copy_(d);
  EXPECT_TRUE(tensors_close(dst, d, Tolerance{0, 1e-7, 0}, "copy_ converts"));
  EXPECT_NE(error_of([&] { dst.copy_(zeros({3})); }).find("shape"), std::string::npos);
}

TEST(Tensor, ItemNeedsExactlyOneElement) {
  EXPECT_EQ(full({1, 1}, 4.0).item(), 4.0);
  EXPECT_NE(error_of([] { zeros({2}).item(); }).find("2 elements"), std::string::npos);
  EXPECT_NE(error_of([] { zeros({2}).data_ptr<double>(); }).find("float32"), std::string::npos);
}

TEST(Tensor, PrintsShapeDtypeDeviceAndValues) {
  std::ostringstream os;
  os << from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const std::string s = os.str();
  EXPECT_NE(s.find("shape=[2, 2]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  EXPECT_NE(s.find("4.0000"), std::string::npos) << s;
  std::ostringstream longer;
  longer << arange(5000);
  EXPECT_NE(longer.str().find("..."), std::string::npos);
  EXPECT_EQ(longer.str().find("2500.0000"), std::string::npos);  // the middle is left out
  EXPECT_NE(longer.str().find("4999.0000"), std::string::npos);
  std::ostringstream undefined;
  undefined << Tensor();
  EXPECT_EQ(undefined.str(), "tensor(undefined)");
}

TEST(Tensor, DevicesParseAndPrint) {
  EXPECT_EQ(Device("cuda:1"), Device(kCUDA, 1));
  EXPECT_EQ(Device("cuda"), Device(kCUDA, 0));
  EXPECT_EQ(Device("cpu").str(), "cpu");
  EXPECT_EQ(Device(kCUDA, 2).str(), "cuda:2");
  EXPECT_NE(error_of([] { Device("gpu"); }).find("'gpu' is not a device"), std::string::npos);
  EXPECT_NE(error_of([] { Device("cuda:x"); }).find("not a device"), std::string::npos);
}

TEST(Tensor, UnusableCudaDeviceIsAClearError) {
  if (cuda_is_available()) {
    const std::string e = error_of([] { zeros({1}).to(Device(kCUDA, 99)); });
    EXPECT_NE(e.find("cuda:99 is not available"), std::string::npos) << e;
    return;
  }
  const std::string e = error_of([] { zeros({1}).to(kCUDA); });
  EXPECT_TRUE(e.find("without CUDA") != std::string::npos ||
              e.find("is not available") != std::string::npos)
      << e;
}

TEST(Tensor, EqualComparesBits) {
  const Tensor a = arange(3);
  EXPECT_TRUE(equal(a, a.clone()));
  EXPECT_FALSE(equal(a, a.to(kFloat64)));
  EXPECT_FALSE(equal(a, arange(3).reshape({3, 1})));
  EXPECT_FALSE(equal(a, add(a, 1e-3)));
}

}  // namespace
}  // namespace tgrad
