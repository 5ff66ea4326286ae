// The shape and indexing ops: every one is a strided copy (strided_gather / strided_embed) or an
// index gather/add, or a view through reshape and dim-0 narrow where the result is contiguous in
// its input. Backward formulas are in core/derivatives_shape.cpp.
#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "core/derivatives.h"
#include "core/ops.h"
#include "core/ops_internal.h"
#include "core/ops_shape_internal.h"

namespace tgrad {

namespace detail {

int64_t wrap_dim(const char* fn, int64_t dim, int64_t rank) {
  TGRAD_CHECK(dim >= -rank && dim < rank, fn, ": dim ", dim, " is out of range for a ", rank,
              "-D tensor (expected in [", -rank, ", ", rank - 1, "])");
  return dim < 0 ? dim + rank : dim;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

StridedWindow full_window(const Shape& shape) {
  return {shape, contiguous_strides(shape), 0};
}

Tensor strided_gather(const Tensor& x, const StridedWindow& window) {
  Tensor y = new_like(x, window.shape);
  if (y.numel() > 0) backend(x.device()).strided_gather(x, window, y);
  return record("strided_gather", y, {x}, derivatives::strided_gather(x.shape(), window));
}

Tensor strided_embed(const Tensor& x, const Shape& shape, const StridedWindow& window) {
  Tensor y = new_like(x, shape);
  if (y.numel() > 0) backend(x.device()).fill(y, 0.0);
  if (x.numel() > 0) backend(x.device()).strided_scatter(x, y, window);
  return record("strided_embed", y, {x}, derivatives::strided_embed(window));
}

namespace {
// Sizes of x seen as (outer, x.size(dim), inner).
std::pair<int64_t, int64_t> outer_inner(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d)
    inner *= shape[d];
  return {outer, inner};
}
}  // namespace

Tensor index_select_unchecked(const Tensor& x, int64_t dim, const Tensor& index) {
  Shape shape = x.shape();
  shape[dim] = index.numel();
  Tensor y = new_like(x, shape);
  if (y.numel() > 0) {
    const auto [outer, inner] = outer_inner(x.shape(), dim);
    backend(x.device()).index_gather(x, outer, inner, index, y);
  }
  return record("index_select", y, {x}, derivatives::index_select(dim, index, x.size(dim)));
}

Tensor index_add_unchecked(const Tensor& source, int64_t dim, const Tensor& index, int64_t size) {
  Shape shape = source.shape();
  shape[dim] = size;
  Tensor y = new_like(source, shape);
  if (y.numel() > 0) {
    const auto [outer, inner] = outer_inner(shape, dim);
    if (source.numel() == 0) {
      backend(y.device()).fill(y, 0.0);
    } else {
      backend(y.device()).index_add(source, outer, inner, index, y);
    }
  }
  return record("index_add", y, {source}, derivatives::index_add(dim, index));
}

}  // namespace detail

namespace {

using detail::check_defined;
using detail::wrap_dim;

// The index as a flat int64 tensor after checking it: int64, 0-D or 1-D, on x's device, every
// value in [0, size).
Tensor checked_index(const char* fn, const Tensor& x, const Tensor& index, int64_t dim,
                     int64_t size) {
  check_defined(fn, "index", index);
  TGRAD_CHECK(index.dtype() == DType::int64, fn, ": index must be int64, got ", index.dtype());
  TGRAD_CHECK(index.dim() <= 1, fn, ": index must be 0-D or 1-D, got shape ", index.shape());
  TGRAD_CHECK(index.device() == x.device(), fn, ": index is on ", index.device(),
              " but the tensor is on ", x.device());
  const std::vector<int64_t> values = index.to_vector<int64_t>();
  for (size_t j = 0; j < values.size(); ++j) {
    TGRAD_CHECK(values[j] >= 0 && values[j] < size, fn, ": index[", j, "]=", values[j],
                " is out of range for dim ", dim, " of size ", size);
  }
  return index.reshape({index.numel()});
}

// Whether [start, start + length) along dim is contiguous in x: every earlier dim has size 1.
bool narrow_is_view(const Tensor& x, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d)
    if (x.size(d) != 1) return false;
  return true;
}

// x[..., start : start + step * size : step, ...] along dim, a view when contiguous.
Tensor slice_raw(const Tensor& x, int64_t dim, int64_t start, int64_t size, int64_t step) {
  if (step == 1 && narrow_is_view(x, dim)) {
    const int64_t n = x.size(dim);
    const Tensor rows = x.reshape({n, n == 0 ? 0 : x.numel() / n});
    Shape out = x.shape();
    out[dim] = size;
    return rows.narrow(0, start, size).reshape(out);
  }
  StridedWindow w = detail::full_window(x.shape());
  w.offset = start * w.strides[dim];
  w.shape[dim] = size;
  w.strides[dim] *= step;
  return detail::mark_copy_of_view(detail::strided_gather(x, w), "a slice along an inner dim");
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TGRAD_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    TGRAD_CHECK(tensors[i].defined(), "cat: tensors[", i, "] is undefined");
  const Tensor& first = tensors[0];
  TGRAD_CHECK(first.dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be joined");
  const int64_t d = wrap_dim("cat", dim, first.dim());
  std::vector<int64_t> offsets{0};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TGRAD_CHECK(t.dtype() == first.dtype(), "cat: tensors[", i, "] is ", t.dtype(),
                " but tensors[0] is ", first.dtype());
    TGRAD_CHECK(t.device() == first.device(), "cat: tensors[", i, "] is on ", t.device(),
                " but tensors[0] is on ", first.device());
    bool same = t.dim() == first.dim();
    for (int64_t k = 0; same && k < t.dim(); ++k)
      same = k == d || t.size(k) == first.size(k);
    TGRAD_CHECK(same, "cat: tensors[", i, "] has shape ", t.shape(), ", which does not match ",
                first.shape(), " except in dim ", d);
    offsets.push_back(offsets.back() + t.size(d));
  }
  Shape shape = first.shape();
  shape[d] = offsets.back();
  Tensor y = detail::new_like(first, shape);
  const StridedWindow all = detail::full_window(shape);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    StridedWindow w = all;
    w.shape[d] = tensors[i].size(d);
    w.offset = offsets[i] * all.strides[d];
    backend(first.device()).strided_scatter(tensors[i], y, w);
  }
  return record("cat", y, tensors, derivatives::cat(d, offsets));
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TGRAD_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TGRAD_CHECK(tensors[i].defined(), "stack: tensors[", i, "] is undefined");
    TGRAD_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensors[", i, "] has shape ",
                tensors[i].shape(), " but tensors[0] has ", tensors[0].shape());
    parts.push_back(unsqueeze(tensors[i], wrap_dim("stack", dim, tensors[0].dim() + 1)));
  }
  return cat(parts, dim < 0 ? dim + tensors[0].dim() + 1 : dim);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined("split", "input", x);
  TGRAD_CHECK(x.dim() > 0, "split: cannot split a 0-D tensor");
  const int64_t d = wrap_dim("split", dim, x.dim());
  TGRAD_CHECK(split_size >= 0, "split: split_size=", split_size, " must be non-negative");
  const int64_t n = x.size(d);
  TGRAD_CHECK(split_size > 0 || n == 0, "split: split_size=0 cannot split dim ", d, " of size ", n);
  std::vector<Tensor> out;
  if (n == 0) return {x};
  for (int64_t start = 0; start < n; start += split_size)
    out.push_back(narrow(x, d, start, std::min(split_size, n - start)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  check_defined("split", "input", x);
  TGRAD_CHECK(x.dim() > 0, "split: cannot split a 0-D tensor");
  const int64_t d = wrap_dim("split", dim, x.dim());
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    TGRAD_CHECK(s >= 0, "split: split_sizes ", split_sizes, " holds a negative size");
    total += s;
  }
  TGRAD_CHECK(total == x.size(d), "split: split_sizes ", split_sizes, " sum to ", total,
              " but dim ", d, " has size ", x.size(d));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(narrow(x, d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined("chunk", "input", x);
  TGRAD_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-D tensor");
  TGRAD_CHECK(chunks > 0, "chunk: chunks=", chunks, " must be positive");
  const int64_t d = wrap_dim("chunk", dim, x.dim());
  const int64_t n = x.size(d);
  return split(x, (n + chunks - 1) / chunks, d);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", "input", x);
  TGRAD_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-D tensor");
  const int64_t d = wrap_dim("narrow", dim, x.dim());
  const int64_t n = x.size(d);
  TGRAD_CHECK(start >= -n && start <= n, "narrow: start ", start, " is out of range for dim ", d,
              " of size ", n);
  if (start < 0) start += n;
  TGRAD_CHECK(length >= 0 && length <= n - start, "narrow: start (", start, ") + length (", length,
              ") exceeds dim ", d, " of size ", n);
  return slice_raw(x, d, start, length, 1);
}

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
             int64_t step) {
  check_defined("slice", "input", x);
  TGRAD_CHECK(x.dim() > 0, "slice: cannot slice a 0-D tensor");
  const int64_t d = wrap_dim("slice", dim, x.dim());
  TGRAD_CHECK(step > 0, "slice: step=", step, " must be positive");
  const int64_t n = x.size(d);
  // Python's clamping: negatives count from the end, then both are limited to [0, n].
  auto clamp_bound = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
  const int64_t s = clamp_bound(start.value_or(0));
  const int64_t e = std::max(s, clamp_bound(end.value_or(n)));
  return slice_raw(x, d, s, (e - s + step - 1) / step, step);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined("select", "input", x);
  TGRAD_CHECK(x.dim() > 0, "select: cannot select from a 0-D tensor");
  const int64_t d = wrap_dim("select", dim, x.dim());
  const int64_t n = x.size(d);
  TGRAD_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d,
              " of size ", n);
  Shape out = x.shape();
  out.erase(out.begin() + d);
  return slice_raw(x, d, index < 0 ? index + n : index, 1, 1).reshape(out);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("index_select", "input", x);
  const int64_t d = wrap_dim("index_select", dim, std::max<int64_t>(x.dim(), 1));
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  const Tensor idx = checked_index("index_select", x1, index, d, x1.size(d));
  Tensor y = detail::index_select_unchecked(x1, d, idx);
  return x.dim() == 0 ? y.reshape(index.shape()) : y;
}

Tensor index_add(const Tensor& source, int64_t dim, const Tensor& index, int64_t size) {
  check_defined("index_add", "source", source);
  detail::check_floating("index_add", "source", source);
  TGRAD_CHECK(source.dim() > 0, "index_add: source must have at least 1 dim");
  const int64_t d = wrap_dim("index_add", dim, source.dim());
  TGRAD_CHECK(size >= 0, "index_add: size=", size, " must be non-negative");
  const Tensor idx = checked_index("index_add", source, index, d, size);
  TGRAD_CHECK(idx.numel() == source.size(d), "index_add: index has ", idx.numel(),
              " values but source has size ", source.size(d), " in dim ", d);
  return detail::index_add_unchecked(source, d, idx, size);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("permute", "input", x);
  const int64_t rank = x.dim();
  TGRAD_CHECK(static_cast<int64_t>(dims.size()) == rank, "permute: dims ", dims, " has ",
              dims.size(), " entries but the input is ", rank, "-D");
  const std::vector<int64_t> strides = detail::contiguous_strides(x.shape());
  StridedWindow w{Shape(rank), std::vector<int64_t>(rank), 0};
  std::vector<bool> seen(rank, false);
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t d = wrap_dim("permute", dims[i], rank);
    TGRAD_CHECK(!seen[d], "permute: dim ", d, " appears more than once in ", dims);
    seen[d] = true;
    w.shape[i] = x.size(d);
    w.strides[i] = strides[d];
  }
  bool identity = true;
  for (int64_t i = 0; i < rank; ++i)
    identity &= wrap_dim("permute", dims[i], rank) == i;
  if (identity) return x.reshape(x.shape());
  return detail::mark_copy_of_view(detail::strided_gather(x, w), "permute");
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined("transpose", "input", x);
  const int64_t rank = std::max<int64_t>(x.dim(), 1);
  const int64_t a = wrap_dim("transpose", dim0, rank), b = wrap_dim("transpose", dim1, rank);
  if (x.dim() == 0) return x.reshape({});
  std::vector<int64_t> dims(x.dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[a], dims[b]);
  return permute(x, dims);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined("unsqueeze", "input", x);
  const int64_t d = wrap_dim("unsqueeze", dim, x.dim() + 1);
  Shape out = x.shape();
  out.insert(out.begin() + d, 1);
  TGRAD_CHECK(static_cast<int64_t>(out.size()) <= kMaxRank, "unsqueeze: the result would have ",
              out.size(), " dims, more than the limit of ", kMaxRank);
  return x.reshape(out);
}

Tensor squeeze(const Tensor& x) {
  check_defined("squeeze", "input", x);
  Shape out;
  for (int64_t s : x.shape())
    if (s != 1) out.push_back(s);
  return x.reshape(out);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined("squeeze", "input", x);
  if (x.dim() == 0) {
    wrap_dim("squeeze", dim, 1);
    return x.reshape({});
  }
  const int64_t d = wrap_dim("squeeze", dim, x.dim());
  Shape out = x.shape();
  if (out[d] == 1) out.erase(out.begin() + d);
  return x.reshape(out);
}

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("flip", "input", x);
  StridedWindow w = detail::full_window(x.shape());
  std::vector<bool> seen(x.dim(), false);
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim("flip", dim, x.dim());
    TGRAD_CHECK(!seen[d], "flip: dim ", d, " appears more than once in ", dims);
    seen[d] = true;
    if (x.size(d) > 0) w.offset += (x.size(d) - 1) * w.strides[d];
    w.strides[d] = -w.strides[d];
  }
  return detail::strided_gather(x, w);
}

}  // namespace tgrad
