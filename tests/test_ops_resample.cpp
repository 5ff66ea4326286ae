// Padding and resampling (pad constant/reflect/replicate, interpolate nearest/bilinear,
// pixel_shuffle/unshuffle): values against PyTorch's (float64, printed by
// tests/python/gen_ops_shape.py), gradcheck and gradgradcheck, CUDA against CPU, bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "core/device.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/op_checks.h"
#include "tests/test_util.h"

namespace tgrad {
namespace {

using testing::check_cuda_matches_cpu;
using testing::check_grads;
using testing::error_of;
using testing::tensors_close;
using testing::Tolerance;
constexpr Tolerance kTight = testing::kOpsTight;

Tensor base() {
  return testing::ops_base();
}
Tensor leaf(const Shape& shape, uint64_t seed) {
  return testing::ops_leaf(shape, seed);
}
TEST(OpsResample, ValuesMatchPyTorch) {
  const Tensor x = base(), x4 = base().reshape({1, 2, 3, 4});
  EXPECT_TRUE(tensors_close(
      pad(x, PadFuncOptions({2, 1, 1, 2}).mode(kReflect)),
      from_vector<double>(
          {0.0, -0.5, -1.0, -0.5, 0.0, 0.5, 0.0, -2.0, -2.5, -3.0, -2.5, -2.0, -1.5, -2.0,
           0.0, -0.5, -1.0, -0.5, 0.0, 0.5, 0.0, 2.0,  1.5,  1.0,  1.5,  2.0,  2.5,  2.0,
           0.0, -0.5, -1.0, -0.5, 0.0, 0.5, 0.0, -2.0, -2.5, -3.0, -2.5, -2.0, -1.5, -2.0,
           6.0, 5.5,  5.0,  5.5,  6.0, 6.5, 6.0, 4.0,  3.5,  3.0,  3.5,  4.0,  4.5,  4.0,
           6.0, 5.5,  5.0,  5.5,  6.0, 6.5, 6.0, 8.0,  7.5,  7.0,  7.5,  8.0,  8.5,  8.0,
           6.0, 5.5,  5.0,  5.5,  6.0, 6.5, 6.0, 4.0,  3.5,  3.0,  3.5,  4.0,  4.5,  4.0},
          {2, 6, 7}),
      kTight, "reflect"));
  EXPECT_TRUE(tensors_close(
      pad(x, PadFuncOptions({2, 1, 1, 2}).mode(kReplicate)),
      from_vector<double>(
          {-3.0, -3.0, -3.0, -2.5, -2.0, -1.5, -1.5, -3.0, -3.0, -3.0, -2.5, -2.0, -1.5, -1.5,
           -1.0, -1.0, -1.0, -0.5, 0.0,  0.5,  0.5,  1.0,  1.0,  1.0,  1.5,  2.0,  2.5,  2.5,
           1.0,  1.0,  1.0,  1.5,  2.0,  2.5,  2.5,  1.0,  1.0,  1.0,  1.5,  2.0,  2.5,  2.5,
           3.0,  3.0,  3.0,  3.5,  4.0,  4.5,  4.5,  3.0,  3.0,  3.0,  3.5,  4.0,  4.5,  4.5,
           5.0,  5.0,  5.0,  5.5,  6.0,  6.5,  6.5,  7.0,  7.0,  7.0,  7.5,  8.0,  8.5,  8.5,
           7.0,  7.0,  7.0,  7.5,  8.0,  8.5,  8.5,  7.0,  7.0,  7.0,  7.5,  8.0,  8.5,  8.5},
          {2, 6, 7}),
      kTight, "replicate"));
  EXPECT_TRUE(tensors_close(
      pad(x, PadFuncOptions({1, -1, 0, 1}).value(2.5)),
      from_vector<double>(
          {2.5, -3.0, -2.5, -2.0, 2.5, -1.0, -0.5, 0.0, 2.5, 1.0, 1.5, 2.0, 2.5, 2.5, 2.5, 2.5,
           2.5, 3.0,  3.5,  4.0,  2.5, 5.0,  5.5,  6.0, 2.5, 7.0, 7.5, 8.0, 2.5, 2.5, 2.5, 2.5},
          {2, 4, 4}),
      kTight, "constant"));
  EXPECT_TRUE(tensors_close(
      interpolate(x4, InterpolateFuncOptions().size(std::vector<int64_t>{5, 7})),
      from_vector<double>(
          {-3.0, -3.0, -2.5, -2.5, -2.0, -2.0, -1.5, -3.0, -3.0, -2.5, -2.5, -2.0, -2.0, -1.5,
           -1.0, -1.0, -0.5, -0.5, 0.0,  0.0,  0.5,  -1.0, -1.0, -0.5, -0.5, 0.0,  0.0,  0.5,
           1.0,  1.0,  1.5,  1.5,  2.0,  2.0,  2.5,  3.0,  3.0,  3.5,  3.5,  4.0,  4.0,  4.5,
           3.0,  3.0,  3.5,  3.5,  4.0,  4.0,  4.5,  5.0,  5.0,  5.5,  5.5,  6.0,  6.0,  6.5,
           5.0,  5.0,  5.5,  5.5,  6.0,  6.0,  6.5,  7.0,  7.0,  7.5,  7.5,  8.0,  8.0,  8.5},
          {1, 2, 5, 7}),
      kTight, "nearest size"));
  EXPECT_TRUE(tensors_close(
      interpolate(x4, InterpolateFuncOptions().scale_factor(std::vector<double>{1.7})),
      from_vector<double>(
          {-3.0, -3.0, -2.5, -2.5, -2.0, -2.0, -3.0, -3.0, -2.5, -2.5, -2.0, -2.0, -1.0, -1.0, -0.5,
           -0.5, 0.0,  0.0,  -1.0, -1.0, -0.5, -0.5, 0.0,  0.0,  1.0,  1.0,  1.5,  1.5,  2.0,  2.0,
           3.0,  3.0,  3.5,  3.5,  4.0,  4.0,  3.0,  3.0,  3.5,  3.5,  4.0,  4.0,  5.0,  5.0,  5.5,
           5.5,  6.0,  6.0,  5.0,  5.0,  5.5,  5.5,  6.0,  6.0,  7.0,  7.0,  7.5,  7.5,  8.0,  8.0},
          {1, 2, 5, 6}),
      kTight, "nearest scale"));
  const auto bil = InterpolateFuncOptions().size(std::vector<int64_t>{5, 7}).mode(kBilinear);
  EXPECT_TRUE(tensors_close(interpolate(x4, InterpolateFuncOptions(bil).align_corners(false)),
                            from_vector<double>({-3.0,
                                                 -2.8214285714285716,
                                                 -2.5357142857142856,
                                                 -2.25,
                                                 -1.9642857142857144,
                                                 -1.6785714285714286,
                                                 -1.5,
                                                 -2.2,
                                                 -2.021428571428572,
                                                 -1.735714285714286,
                                                 -1.4500000000000002,
                                                 -1.1642857142857146,
                                                 -0.8785714285714288,
                                                 -0.7000000000000002,
                                                 -1.0,
                                                 -0.8214285714285714,
                                                 -0.5357142857142858,
                                                 -0.25,
                                                 0.03571428571428559,
                                                 0.3214285714285714,
                                                 0.5,
                                                 0.19999999999999973,
                                                 0.37857142857142817,
                                                 0.664285714285714,
                                                 0.9499999999999997,
                                                 1.2357142857142853,
                                                 1.521428571428571,
                                                 1.6999999999999997,
                                                 1.0,
                                                 1.1785714285714284,
                                                 1.4642857142857144,
                                                 1.75,
                                                 2.0357142857142856,
                                                 2.321428571428571,
                                                 2.5,
                                                 3.0,
                                                 3.1785714285714284,
                                                 3.464285714285714,
                                                 3.75,
                                                 4.035714285714286,
                                                 4.321428571428571,
                                                 4.5,
                                                 3.8,
                                                 3.9785714285714286,
                                                 4.264285714285714,
                                                 4.55,
                                                 4.835714285714286,
                                                 5.121428571428572,
                                                 5.3,
                                                 5.0,
                                                 5.178571428571429,
                                                 5.464285714285714,
                                                 5.75,
                                                 6.035714285714286,
                                                 6.321428571428571,
                                                 6.5,
                                                 6.2,
                                                 6.378571428571428,
                                                 6.664285714285715,
                                                 6.949999999999999,
                                                 7.235714285714285,
                                                 7.521428571428571,
                                                 7.699999999999999,
                                                 7.0,
                                                 7.178571428571429,
                                                 7.464285714285714,
                                                 7.75,
                                                 8.035714285714285,
                                                 8.321428571428571,
                                                 8.5},
                                                {1, 2, 5, 7}),
                            kTight, "bilinear false"));
  EXPECT_TRUE(tensors_close(
      interpolate(x4, InterpolateFuncOptions(bil).align_corners(true)),
      from_vector<double>(
          {-3.0, -2.75, -2.5, -2.25, -2.0, -1.75, -1.5, -2.0, -1.75, -1.5, -1.25, -1.0, -0.75, -0.5,
           -1.0, -0.75, -0.5, -0.25, 0.0,  0.25,  0.5,  0.0,  0.25,  0.5,  0.75,  1.0,  1.25,  1.5,
           1.0,  1.25,  1.5,  1.75,  2.0,  2.25,  2.5,  3.0,  3.25,  3.5,  3.75,  4.0,  4.25,  4.5,
           4.0,  4.25,  4.5,  4.75,  5.0,  5.25,  5.5,  5.0,  5.25,  5.5,  5.75,  6.0,  6.25,  6.5,
           6.0,  6.25,  6.5,  6.75,  7.0,  7.25,  7.5,  7.0,  7.25,  7.5,  7.75,  8.0,  8.25,  8.5},
          {1, 2, 5, 7}),
      kTight, "bilinear true"));
  EXPECT_TRUE(tensors_close(
      interpolate(
          x4, InterpolateFuncOptions().scale_factor(std::vector<double>{1.5, 0.6}).mode(kBilinear)),
      from_vector<double>(
          {-2.8333333333333335, -2.0, -1.8333333333333333, -1.0, -0.5000000000000002,
           0.33333333333333304, 0.833333333333333, 1.6666666666666665, 3.1666666666666665, 4.0,
           4.166666666666666, 5.0, 5.5, 6.333333333333333, 6.833333333333334, 7.666666666666666},
          {1, 2, 4, 2}),
      kTight, "bilinear scale"));
  const Tensor ps = pixel_shuffle(arange(16.0, TensorOptions(kFloat64)).reshape({1, 4, 2, 2}), 2);
  EXPECT_TRUE(tensors_close(ps,
                            from_vector<double>({0.0, 4.0, 1.0, 5.0, 8.0, 12.0, 9.0, 13.0, 2.0, 6.0,
                                                 3.0, 7.0, 10.0, 14.0, 11.0, 15.0},
                                                {1, 1, 4, 4}),
                            kTight, "pixel_shuffle"));
  EXPECT_TRUE(tensors_close(pixel_unshuffle(ps, 2),
                            arange(16.0, TensorOptions(kFloat64)).reshape({1, 4, 2, 2}), kTight,
                            "pixel_unshuffle"));
}

TEST(OpsResample, NearestOneAndThreeSpatialDims) {
  const Tensor x = base();
  EXPECT_TRUE(tensors_close(
      interpolate(x, InterpolateFuncOptions().size(std::vector<int64_t>{7})),
      from_vector<double>(
          {-3.0, -3.0, -2.5, -2.5, -2.0, -2.0, -1.5, -1.0, -1.0, -0.5, -0.5, 0.0, 0.0, 0.5,
           1.0,  1.0,  1.5,  1.5,  2.0,  2.0,  2.5,  3.0,  3.0,  3.5,  3.5,  4.0, 4.0, 4.5,
           5.0,  5.0,  5.5,  5.5,  6.0,  6.0,  6.5,  7.0,  7.0,  7.5,  7.5,  8.0, 8.0, 8.5},
          {2, 3, 7}),
      kTight, "nearest 1-D"));
  EXPECT_TRUE(tensors_close(
      interpolate(x.reshape({1, 1, 2, 3, 4}),
                  InterpolateFuncOptions().scale_factor(std::vector<double>{1.0, 0.7, 1.5})),
      from_vector<double>({-3.0, -3.0, -2.5, -2.0, -2.0, -1.5, -1.0, -1.0, -0.5, 0.0, 0.0, 0.5,
                           3.0,  3.0,  3.5,  4.0,  4.0,  4.5,  5.0,  5.0,  5.5,  6.0, 6.0, 6.5},
                          {1, 1, 2, 2, 6}),
      kTight, "nearest 3-D"));
}

TEST(OpsResample, ConstantPadOfInt64) {
  const Tensor i = from_vector<int64_t>({1, 2}, {1, 2});
  EXPECT_EQ(pad(i, PadFuncOptions({1, 0}).value(7)).to_vector<int64_t>(),
            (std::vector<int64_t>{7, 1, 2}));
}

TEST(OpsResample, Gradients) {
  const Tensor x = leaf({1, 2, 3, 4}, 6);
  check_grads(
      [](const std::vector<Tensor>& in) {
        return pad(in[0], PadFuncOptions({1, 2, -1, 1}).value(0.5));
      },
      {x}, "pad constant");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return pad(in[0], PadFuncOptions({2, 3, 2, 1}).mode(kReflect));
      },
      {x}, "pad reflect");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return pad(in[0], PadFuncOptions({3, 1, 0, 2}).mode(kReplicate));
      },
      {x}, "pad replicate");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return interpolate(in[0], InterpolateFuncOptions().size(std::vector<int64_t>{5, 3}));
      },
      {x}, "nearest");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return interpolate(
            in[0], InterpolateFuncOptions().size(std::vector<int64_t>{5, 7}).mode(kBilinear));
      },
      {x}, "bilinear");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return interpolate(in[0], InterpolateFuncOptions()
                                      .scale_factor(std::vector<double>{2.0})
                                      .mode(kBilinear)
                                      .align_corners(true));
      },
      {x}, "bilinear align_corners");
  const Tensor y = leaf({1, 4, 2, 3}, 7);
  check_grads([](const std::vector<Tensor>& in) { return pixel_shuffle(in[0], 2); }, {y},
              "pixel_shuffle");
  check_grads([](const std::vector<Tensor>& in) { return pixel_unshuffle(in[0], 2); },
              {leaf({1, 1, 4, 2}, 8)}, "pixel_unshuffle");
}

TEST(OpsResample, BadInput) {
  const Tensor x = base();
  EXPECT_NE(error_of([&] { pad(x, PadFuncOptions({1, 2, 3})); }).find("even"), std::string::npos);
  EXPECT_NE(error_of([&] {
              pad(x, PadFuncOptions({0, 0, 0, 0, 0, 0, 1, 1}));
            }).find("pads 4 dims"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              pad(x, PadFuncOptions({4, 0}).mode(kReflect));
            }).find("smaller than"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              pad(x, PadFuncOptions({-1, 0}).mode(kReplicate));
            }).find("non-negative"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pad(x, PadFuncOptions({-3, -2})); }).find("crop"), std::string::npos);
  EXPECT_NE(error_of([&] {
              pad(zeros({2, 0}, kFloat64), PadFuncOptions({1, 1}).mode(kReplicate));
            }).find("non-empty"),
            std::string::npos);
  const Tensor x4 = x.reshape({1, 2, 3, 4});
  EXPECT_NE(error_of([&] { interpolate(x4); }).find("exactly one"), std::string::npos);
  EXPECT_NE(error_of([&] {
              interpolate(
                  x4,
                  InterpolateFuncOptions().size(std::vector<int64_t>{2, 2}).align_corners(true));
            }).find("align_corners"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              interpolate(x,
                          InterpolateFuncOptions().size(std::vector<int64_t>{2}).mode(kBilinear));
            }).find("4-D"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              interpolate(x4, InterpolateFuncOptions().size(std::vector<int64_t>{2, 2, 2}));
            }).find("entries"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              interpolate(x4, InterpolateFuncOptions().scale_factor(std::vector<double>{-1.0}));
            }).find("positive"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pixel_shuffle(x4, 2); }).find("divisible"), std::string::npos);
  EXPECT_NE(error_of([&] { pixel_unshuffle(x4, 2); }).find("divisible"), std::string::npos);
  EXPECT_NE(error_of([&] { pixel_shuffle(x4, 0); }).find("positive"), std::string::npos);
}

TEST(OpsResampleCuda, MatchesCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const Tensor x = leaf({1, 4, 3, 4}, 9);
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return pad(t, PadFuncOptions({1, 2, 2, 1}).value(0.5));
      },
      x);
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return pad(t, PadFuncOptions({2, 1, 1, 2}).mode(kReflect));
      },
      x);
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return pad(t, PadFuncOptions({2, 1, 1, 2}).mode(kReplicate));
      },
      x);
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return interpolate(t, InterpolateFuncOptions().scale_factor(std::vector<double>{2.0}));
      },
      x);
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return interpolate(
            t, InterpolateFuncOptions().size(std::vector<int64_t>{5, 7}).mode(kBilinear));
      },
      x);
  check_cuda_matches_cpu([](const Tensor& t) { return pixel_shuffle(t, 2); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return pixel_unshuffle(t, 2); },
                         leaf({1, 1, 4, 4}, 10));
}

}  // namespace
}  // namespace tgrad
