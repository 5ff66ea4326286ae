// The shape and indexing ops (cat, stack, split, chunk, narrow, slice, select, index_select,
// permute, transpose, unsqueeze, squeeze, flip): values against PyTorch's (float64, printed by
// tests/python/gen_ops_shape.py), views, gradcheck and gradgradcheck, CUDA against CPU, bad input.
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
TEST(OpsShape, ValuesMatchPyTorch) {
  const Tensor x = base();
  EXPECT_TRUE(tensors_close(
      permute(x, {2, 0, 1}),
      from_vector<double>({-3.0, -1.0, 1.0, 3.0, 5.0, 7.0, -2.5, -0.5, 1.5, 3.5, 5.5, 7.5,
                           -2.0, 0.0,  2.0, 4.0, 6.0, 8.0, -1.5, 0.5,  2.5, 4.5, 6.5, 8.5},
                          {4, 2, 3}),
      kTight, "permute"));
  EXPECT_TRUE(tensors_close(
      flip(x, {0, 2}),
      from_vector<double>({4.5,  4.0,  3.5,  3.0,  6.5, 6.0, 5.5,  5.0,  8.5, 8.0, 7.5, 7.0,
                           -1.5, -2.0, -2.5, -3.0, 0.5, 0.0, -0.5, -1.0, 2.5, 2.0, 1.5, 1.0},
                          {2, 3, 4}),
      kTight, "flip"));
  EXPECT_TRUE(
      tensors_close(slice(x, 2, 1, 4, 2),
                    from_vector<double>(
                        {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5}, {2, 3, 2}),
                    kTight, "slice"));
  EXPECT_TRUE(tensors_close(
      cat({x, narrow(x, 1, 0, 1)}, 1),
      from_vector<double>(
          {-3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, -3.0, -2.5, -2.0, -1.5,
           3.0,  3.5,  4.0,  4.5,  5.0,  5.5,  6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 3.0,  3.5,  4.0,  4.5},
          {2, 4, 4}),
      kTight, "cat"));
  const Tensor idx = from_vector<int64_t>({3, 0, 3}, {3});
  EXPECT_TRUE(tensors_close(index_select(x, 2, idx),
                            from_vector<double>({-1.5, -3.0, -1.5, 0.5, -1.0, 0.5, 2.5, 1.0, 2.5,
                                                 4.5, 3.0, 4.5, 6.5, 5.0, 6.5, 8.5, 7.0, 8.5},
                                                {2, 3, 3}),
                            kTight, "index_select"));
}

TEST(OpsShape, TransposeSelectStackSqueeze) {
  const Tensor x = base();
  EXPECT_TRUE(tensors_close(transpose(x, 0, 2), permute(x, {2, 1, 0}), kTight, "transpose"));
  EXPECT_EQ(select(x, 1, -1).shape(), (Shape{2, 4}));
  EXPECT_EQ(select(x, 1, -1).to_vector<double>()[0], 1.0);  // x[0, 2, 0] = 8 * 0.5 - 3
  const Tensor st = stack({x, x}, -1);
  EXPECT_EQ(st.shape(), (Shape{2, 3, 4, 2}));
  EXPECT_TRUE(tensors_close(select(st, 3, 1), x, kTight, "stack"));
  EXPECT_EQ(unsqueeze(x, -1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(squeeze(unsqueeze(unsqueeze(x, 0), 2)).shape(), x.shape());
  EXPECT_EQ(squeeze(x, 0).shape(), x.shape());  // size 2: unchanged, as PyTorch
  EXPECT_EQ(slice(x, 2, -3, std::nullopt, 1).shape(), (Shape{2, 3, 3}));
  EXPECT_EQ(slice(x, 2, 10, 20, 1).shape(), (Shape{2, 3, 0}));
}

TEST(OpsShape, SplitAndChunkSizesFollowPyTorch) {
  const Tensor x = base();
  const std::vector<Tensor> a = split(x, 3, 2);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[1].shape(), (Shape{2, 3, 1}));
  EXPECT_TRUE(tensors_close(cat(a, 2), x, kTight, "split+cat"));
  const std::vector<Tensor> b = split(x, std::vector<int64_t>{1, 2}, 1);
  EXPECT_EQ(b[1].shape(), (Shape{2, 2, 4}));
  // torch.chunk(6 rows, 4) gives 3 pieces of 2.
  EXPECT_EQ(chunk(zeros({6}), 4).size(), 3u);
}

TEST(OpsShape, ViewsShareStorageWhereContiguous) {
  const Tensor x = base();
  EXPECT_EQ(narrow(x, 0, 1, 1).raw_data(), select(x, 0, 1).raw_data());
  EXPECT_EQ(static_cast<const double*>(select(x, 0, 1).raw_data()),
            static_cast<const double*>(x.raw_data()) + 12);
  EXPECT_EQ(unsqueeze(x, 1).raw_data(), x.raw_data());
  const Tensor one = unsqueeze(x, 0);  // dims before 1 have size 1: still a view
  EXPECT_EQ(narrow(one, 1, 1, 1).raw_data(), select(x, 0, 1).raw_data());
  EXPECT_NE(narrow(x, 1, 0, 1).raw_data(), x.raw_data());  // a copy
}

TEST(OpsShape, Int64AndEmptyTensors) {
  // Shape ops move elements bit for bit, so int64 tensors go through them unchanged.
  const Tensor i = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(permute(i, {1, 0}).to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(cat({i, i}, 1).size(1), 6);
  EXPECT_EQ(flip(i, {1}).to_vector<int64_t>()[0], 3);
  EXPECT_EQ(index_select(i, 1, from_vector<int64_t>({2}, {1})).to_vector<int64_t>(),
            (std::vector<int64_t>{3, 6}));
  const Tensor e = zeros({2, 0, 3}, kFloat64);
  EXPECT_EQ(cat({e, e}, 1).shape(), (Shape{2, 0, 3}));
  EXPECT_EQ(cat({e, zeros({2, 1, 3}, kFloat64)}, 1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(permute(e, {2, 1, 0}).shape(), (Shape{3, 0, 2}));
  EXPECT_EQ(flip(e, {1}).shape(), e.shape());
  EXPECT_EQ(split(e, 2, 1).size(), 1u);
  EXPECT_EQ(index_select(e, 2, from_vector<int64_t>({0, 0}, {2})).shape(), (Shape{2, 0, 2}));
}

TEST(OpsShape, Gradients) {
  const Tensor x = leaf({2, 3, 4}, 1), y = leaf({2, 2, 4}, 2);
  const Tensor idx = from_vector<int64_t>({3, 0, 3, 1}, {4});
  check_grads([](const std::vector<Tensor>& in) { return cat(in, 1); }, {x, y}, "cat");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return stack({in[0], in[0] * 2.0}, 1);
      },
      {x}, "stack");
  check_grads([](const std::vector<Tensor>& in) { return split(in[0], 3, 2)[1]; }, {x}, "split");
  check_grads([](const std::vector<Tensor>& in) { return chunk(in[0], 2, 1)[0]; }, {x}, "chunk");
  check_grads([](const std::vector<Tensor>& in) { return narrow(in[0], 2, 1, 2); }, {x}, "narrow");
  check_grads([](const std::vector<Tensor>& in) { return slice(in[0], 2, 0, 4, 3); }, {x}, "slice");
  check_grads([](const std::vector<Tensor>& in) { return select(in[0], 1, 2); }, {x}, "select");
  // The view paths (dim 0, or every earlier dim of size 1) record reshape and dim-0 narrow.
  check_grads([](const std::vector<Tensor>& in) { return select(in[0], 0, 1); }, {x}, "select 0");
  check_grads([](const std::vector<Tensor>& in) { return narrow(unsqueeze(in[0], 0), 1, 1, 1); },
              {x}, "narrow view");
  check_grads([idx](const std::vector<Tensor>& in) { return index_select(in[0], 2, idx); }, {x},
              "index_select");
  check_grads([idx](const std::vector<Tensor>& in) { return index_add(in[0], 2, idx, 5); }, {x},
              "index_add");
  check_grads(
      [](const std::vector<Tensor>& in) {
        return permute(in[0], {1, 2, 0});
      },
      {x}, "permute");
  check_grads([](const std::vector<Tensor>& in) { return transpose(in[0], 0, 1); }, {x},
              "transpose");
  check_grads([](const std::vector<Tensor>& in) { return squeeze(unsqueeze(in[0], 1)); }, {x},
              "unsqueeze");
  check_grads([](const std::vector<Tensor>& in) { return flip(in[0], {0, -1}); }, {x}, "flip");
}

TEST(OpsShape, BadInput) {
  const Tensor x = base();
  EXPECT_NE(error_of([&] {
              cat({x, zeros({2, 2, 3}, kFloat64)}, 1);
            }).find("does not match"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cat({x, zeros({2, 3, 4})}, 0); }).find("float32"), std::string::npos);
  EXPECT_NE(error_of([&] { cat({}); }).find("non-empty"), std::string::npos);
  EXPECT_NE(error_of([&] { narrow(x, 3, 0, 1); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { narrow(x, 2, 2, 3); }).find("exceeds"), std::string::npos);
  EXPECT_NE(error_of([&] { slice(x, 0, 0, 1, 0); }).find("step"), std::string::npos);
  EXPECT_NE(error_of([&] { select(x, 1, 3); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] {
              index_select(x, 0, from_vector<int64_t>({2}, {1}));
            }).find("index[0]=2 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { index_select(x, 0, zeros({1})); }).find("int64"), std::string::npos);
  EXPECT_NE(error_of([&] { permute(x, {0, 0, 1}); }).find("more than once"), std::string::npos);
  EXPECT_NE(error_of([&] { permute(x, {0, 1}); }).find("entries"), std::string::npos);
  EXPECT_NE(error_of([&] { flip(x, {1, 1}); }).find("more than once"), std::string::npos);
  EXPECT_NE(error_of([&] {
              split(x, std::vector<int64_t>{1, 1}, 1);
            }).find("sum to"),
            std::string::npos);
  EXPECT_NE(error_of([&] { chunk(x, 0); }).find("chunks"), std::string::npos);
  EXPECT_NE(error_of([&] {
              stack({x, zeros({2, 3}, kFloat64)});
            }).find("shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { unsqueeze(zeros(Shape(8, 1)), 0); }).find("limit"), std::string::npos);
}

TEST(OpsShapeCuda, MatchesCpu) {
  TGRAD_SKIP_WITHOUT_CUDA();
  const Tensor x = leaf({2, 3, 4}, 3);
  check_cuda_matches_cpu([](const Tensor& t) { return cat({t, narrow(t, 1, 1, 2)}, 1); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return stack({t, t}, 2); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return split(t, 3, 2)[1] * 1.0; }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return slice(t, 2, 1, 4, 2); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return select(t, 1, 1); }, x);
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return index_select(t, 2, from_vector<int64_t>({3, 0, 3}, {3}).to(t.device()));
      },
      x);
  check_cuda_matches_cpu([](const Tensor& t) { return permute(t, {2, 0, 1}); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return transpose(t, 0, 2); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return squeeze(unsqueeze(t, 0)); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return flip(t, {1, 2}); }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return chunk(t, 2, 2)[1]; }, x);
  check_cuda_matches_cpu([](const Tensor& t) { return narrow(t, 0, 1, 1); }, x);  // a view
  check_cuda_matches_cpu(
      [](const Tensor& t) {
        return index_add(t, 1, from_vector<int64_t>({1, 1, 0}, {3}).to(t.device()), 2);
      },
      x);
  const Tensor i = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(
      tensors_close(permute(i.cuda(), {1, 0}), permute(i, {1, 0}), kTight, "int64 permute"));
  EXPECT_TRUE(tensors_close(cat({i.cuda(), i.cuda()}, 1), cat({i, i}, 1), kTight, "int64 cat"));
}

}  // namespace
}  // namespace tgrad
