// Normalization modules with LibTorch's options, defaults and buffer names: BatchNorm1d/2d,
// GroupNorm, LayerNorm, InstanceNorm2d. Each is composed from differentiable ops (means over
// dims, a rsqrt by pow), so it trains on every device and differentiates twice without kernels
// of its own.
#pragma once

#include <cstdint>
#include <optional>

#include "core/ops.h"
#include "layers/module.h"

namespace tgrad::nn {

// BatchNorm1dOptions(num_features).eps(1e-5).momentum(0.1).affine(true)
//   .track_running_stats(true); momentum(std::nullopt) is the cumulative average.
class BatchNormOptions {
 public:
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT: as LibTorch
  TGRAD_ARG(int64_t, num_features);
  TGRAD_ARG(double, eps) = 1e-5;
  TGRAD_ARG(std::optional<double>, momentum) = 0.1;
  TGRAD_ARG(bool, affine) = true;
  TGRAD_ARG(bool, track_running_stats) = true;
};
using BatchNorm1dOptions = BatchNormOptions;
using BatchNorm2dOptions = BatchNormOptions;

// InstanceNormOptions(num_features).eps(1e-5).momentum(0.1).affine(false)
//   .track_running_stats(false): LibTorch's defaults, which differ from BatchNorm's.
class InstanceNormOptions {
 public:
  InstanceNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT
  TGRAD_ARG(int64_t, num_features);
  TGRAD_ARG(double, eps) = 1e-5;
  TGRAD_ARG(double, momentum) = 0.1;
  TGRAD_ARG(bool, affine) = false;
  TGRAD_ARG(bool, track_running_stats) = false;
};
using InstanceNorm2dOptions = InstanceNormOptions;

// Batch normalization over every dim but the channels (dim 1): training uses the batch's mean
// and biased variance and updates running_mean / running_var (unbiased) / num_batches_tracked;
// eval (and track_running_stats=false never) uses the running statistics. `D` is the number of
// spatial dims: 1 takes (N, C) or (N, C, L), 2 takes (N, C, H, W).
template <int D>
class BatchNormNd : public Module {
 public:
  explicit BatchNormNd(const BatchNormOptions& options);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  void reset_running_stats();
  const BatchNormOptions& options() const { return options_; }

  Tensor weight, bias;                                    // (C), when affine
  Tensor running_mean, running_var, num_batches_tracked;  // when track_running_stats

 private:
  // Updates the running statistics from a training batch's mean and biased variance (C).
  void update_running_stats(const Tensor& mean, const Tensor& var, int64_t per_channel);
  BatchNormOptions options_;
};
using BatchNorm1dImpl = BatchNormNd<1>;
TGRAD_MODULE(BatchNorm1d);
using BatchNorm2dImpl = BatchNormNd<2>;
TGRAD_MODULE(BatchNorm2d);
extern template class BatchNormNd<1>;
extern template class BatchNormNd<2>;

// InstanceNorm2d: each (sample, channel) of an (N, C, H, W) or (C, H, W) input normalized over
// its own H x W. LibTorch's defaults: affine false, track_running_stats false (true is refused
// for now: tgrad does not keep instance-norm running statistics).
class InstanceNorm2dImpl : public Module {
 public:
  explicit InstanceNorm2dImpl(const InstanceNormOptions& options);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  Tensor weight, bias;  // (C), when affine

 private:
  InstanceNormOptions options_;
};
TGRAD_MODULE(InstanceNorm2d);

// GroupNormOptions(num_groups, num_channels).eps(1e-5).affine(true).
class GroupNormOptions {
 public:
  GroupNormOptions(int64_t num_groups, int64_t num_channels)
      : num_groups_(num_groups), num_channels_(num_channels) {}
  TGRAD_ARG(int64_t, num_groups);
  TGRAD_ARG(int64_t, num_channels);
  TGRAD_ARG(double, eps) = 1e-5;
  TGRAD_ARG(bool, affine) = true;
};

// The channels of an (N, C, ...) input split into num_groups groups, each normalized over its
// channels and positions; then a per-channel affine.
class GroupNormImpl : public Module {
 public:
  explicit GroupNormImpl(const GroupNormOptions& options);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  const GroupNormOptions& options() const { return options_; }
  Tensor weight, bias;  // (C), when affine

 private:
  GroupNormOptions options_;
};
TGRAD_MODULE(GroupNorm);

// LayerNormOptions(normalized_shape).eps(1e-5).elementwise_affine(true).
class LayerNormOptions {
 public:
  LayerNormOptions(Shape normalized_shape)  // NOLINT: as LibTorch
      : normalized_shape_(std::move(normalized_shape)) {}
  TGRAD_ARG(Shape, normalized_shape);
  TGRAD_ARG(double, eps) = 1e-5;
  TGRAD_ARG(bool, elementwise_affine) = true;
};

// The last normalized_shape.size() dims normalized together; weight and bias of that shape.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  Tensor weight, bias;  // normalized_shape, when elementwise_affine

 private:
  LayerNormOptions options_;
};
TGRAD_MODULE(LayerNorm);

}  // namespace tgrad::nn
