// Building blocks of the shape ops shared by core/ops_shape.cpp, ops_math.cpp, ops_resample.cpp
// and derivatives_shape.cpp: dim normalisation, contiguous strides, and the two recorded
// strided copies every shape op reduces to. Not part of the public API (not installed).
#pragma once

#include <vector>

#include "core/backend.h"
#include "core/tensor.h"

namespace tgrad::detail {

// dim in [-rank, rank) as a non-negative dim; tgrad::Error naming fn otherwise.
int64_t wrap_dim(const char* fn, int64_t dim, int64_t rank);
// Row-major strides of a contiguous tensor of `shape`, in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);
// The window covering all of a contiguous tensor of `shape`.
StridedWindow full_window(const Shape& shape);

// y = x[window] (a copy), recorded: its gradient is strided_embed of dy into x's shape. The
// window must not reach an element twice.
Tensor strided_gather(const Tensor& x, const StridedWindow& window);
// zeros of `shape` with y[window] = x, recorded: its gradient is strided_gather of dy.
Tensor strided_embed(const Tensor& x, const Shape& shape, const StridedWindow& window);
// index_select without the index checks (the index is known to be in range), recorded.
Tensor index_select_unchecked(const Tensor& x, int64_t dim, const Tensor& index);
// index_add without the index checks, recorded.
Tensor index_add_unchecked(const Tensor& source, int64_t dim, const Tensor& index, int64_t size);

}  // namespace tgrad::detail
