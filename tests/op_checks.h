// Checks shared by the tensor-op tests (test_ops_shape.cpp, test_ops_math.cpp,
// test_ops_resample.cpp): the tolerance for exact moves and short float64 sums, the base tensor
// the PyTorch generator (tests/python/gen_ops_shape.py) starts from, random float64 leaves,
// gradcheck plus gradgradcheck, and a CUDA-against-CPU comparison of value and gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/gradcheck.h"
#include "core/tensor.h"
#include "tests/test_util.h"

namespace tgrad::testing {

// Exact moves and short float64 sums against PyTorch's float64 values: a few ulps.
inline constexpr Tolerance kOpsTight{1e-12, 1e-12, 0.0};

// The (2, 3, 4) tensor tests/python/gen_ops_shape.py starts from: arange(24) * 0.5 - 3.
Tensor ops_base();

// A float64 leaf of `shape` drawn from Generator(seed), requiring grad.
Tensor ops_leaf(const Shape& shape, uint64_t seed);

// gradcheck and gradgradcheck of fn at inputs; both must pass.
void check_grads(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const char* name);

// fn's value and its gradient for upstream ones, on CUDA against the CPU's.
void check_cuda_matches_cpu(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x);

}  // namespace tgrad::testing
