// The shape, indexing, math and resampling ops of the decoder toolbox, with LibTorch's names:
// cat/stack/split/chunk/narrow/slice/select/index_select/permute/transpose/unsqueeze/squeeze/
// flip, clamp/sin/cos/max/min/argmax/argmin/softmax/log_softmax, pad/interpolate/pixel_shuffle.
// Storage stays contiguous: an op returns a view only where its result is contiguous in its
// input (docs/api.md lists which); the others return marked copies (docs/design.md,
// "Views and copies").
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <variant>
#include <vector>

#include "core/ops.h"
#include "core/random.h"
#include "core/tensor.h"

namespace tgrad {

// ---- shape and indexing (core/ops_shape.cpp) ----

// Joins tensors of equal shape except along `dim` (all of one dtype and device).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Joins tensors of equal shape along a new dim.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pieces of split_size along dim (the last may be smaller), or of the given sizes.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes,
                          int64_t dim = 0);
// `chunks` pieces of ceil(size / chunks) along dim (fewer when they run out, as in PyTorch).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// Elements [start, start + length) along dim; start may be negative (counted from the end).
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// x[..., start:end:step, ...] along dim, Python's clamping of start and end; step >= 1.
Tensor slice(const Tensor& x, int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);
// x[..., index, ...]: dim removed; index may be negative.
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// Rows `index` (an int64 tensor, 0-D or 1-D, values in [0, size)) of x along dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Zeros of x's shape with x's size along dim replaced by `size`, plus source's slices added at
// `index` along dim (deterministic); index_select's adjoint (torch's index_add on zeros).
Tensor index_add(const Tensor& source, int64_t dim, const Tensor& index, int64_t size);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);               // every size-1 dim
Tensor squeeze(const Tensor& x, int64_t dim);  // dim, if its size is 1
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);

// ---- math (core/ops_math.cpp) ----

// Limits to [min, max]; either may be absent (not both). NaN stays NaN. The gradient passes
// where min <= x <= max, as in PyTorch.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max = std::nullopt);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
// The largest (smallest) element (0-D); NaN if any. The gradient is spread evenly over the
// positions holding it, as in PyTorch.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// Along dim: (values, indices), indices int64, the first position on ties, as PyTorch.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// Positions (int64) of the max/min along dim, or in the flattened tensor without dim.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// torch.nn.functional.dropout: while training, each element is zeroed with probability p (drawn
// from gen) and the others scaled by 1/(1-p); not training, x itself. dropout2d zeroes whole
// channels of an (N, C, ...) or (C, ...) input. p must be in [0, 1].
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator& gen = default_generator());
Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true,
                 Generator& gen = default_generator());
// exp(x) / sum exp(x) along dim, computed from x - max(x) so it never overflows.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- padding and resampling (core/ops_resample.cpp) ----

namespace enumtype {
struct kConstant {};
struct kReflect {};
struct kReplicate {};
struct kNearest {};
struct kBilinear {};
}  // namespace enumtype
inline constexpr enumtype::kConstant kConstant{};
inline constexpr enumtype::kReflect kReflect{};
inline constexpr enumtype::kReplicate kReplicate{};
inline constexpr enumtype::kNearest kNearest{};
inline constexpr enumtype::kBilinear kBilinear{};

// F::pad's options: pad lists (left, right) pairs from the last dim backwards, as in PyTorch.
class PadFuncOptions {
 public:
  PadFuncOptions(std::vector<int64_t> pad) : pad_(std::move(pad)) {}  // NOLINT: as LibTorch
  using mode_t = std::variant<enumtype::kConstant, enumtype::kReflect, enumtype::kReplicate>;
  TGRAD_ARG(std::vector<int64_t>, pad);
  TGRAD_ARG(mode_t, mode) = kConstant;
  TGRAD_ARG(double, value) = 0.0;
};
// constant: negative pads crop. reflect: each pad < the dim's size. replicate: the dim nonempty.
Tensor pad(const Tensor& x, const PadFuncOptions& options);

// F::interpolate's options: exactly one of size and scale_factor; align_corners only with
// bilinear. nearest takes 3-D to 5-D inputs (N, C, spatial...), bilinear 4-D.
class InterpolateFuncOptions {
 public:
  using mode_t = std::variant<enumtype::kNearest, enumtype::kBilinear>;
  TGRAD_ARG(std::optional<std::vector<int64_t>>, size) = std::nullopt;
  TGRAD_ARG(std::optional<std::vector<double>>, scale_factor) = std::nullopt;
  TGRAD_ARG(mode_t, mode) = kNearest;
  TGRAD_ARG(std::optional<bool>, align_corners) = std::nullopt;
};
Tensor interpolate(const Tensor& x, const InterpolateFuncOptions& options = {});

// (*, C*r*r, H, W) -> (*, C, H*r, W*r) and back, as torch's pixel_shuffle/pixel_unshuffle.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

}  // namespace tgrad
