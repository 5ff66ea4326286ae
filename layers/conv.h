// nn::Conv1d / Conv2d with LibTorch's options and defaults, over tgrad::conv1d/conv2d (which run
// the transposed-convolution kernels with the passes swapped). Weight (C_out, C_in/groups, k...)
// and bias (C_out) are initialised as PyTorch does: uniform in +-1/sqrt(fan_in), fan_in =
// C_in/groups * prod(k).
#pragma once

#include <cstddef>
#include <cstdint>
#include <variant>

#include "core/ops.h"
#include "core/random.h"
#include "layers/module.h"

namespace tgrad::nn {

// How a convolution pads its input: with zeros (inside the kernel call), or by reflecting or
// replicating the border (through tgrad::pad first), as LibTorch's padding_mode.
using ConvPaddingMode = std::variant<enumtype::kZeros, enumtype::kReflect, enumtype::kReplicate>;

// Conv2dOptions(in, out, k).stride(2).padding(1) / .padding(kSame) .dilation(1).groups(1)
//   .bias(true).padding_mode(kZeros).
template <size_t D>
class ConvOptions {
 public:
  ConvOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  TGRAD_ARG(int64_t, in_channels);
  TGRAD_ARG(int64_t, out_channels);
  TGRAD_ARG(ExpandingArray<D>, kernel_size);
  TGRAD_ARG(ExpandingArray<D>, stride) = 1;
  TGRAD_ARG(ExpandingArray<D>, dilation) = 1;
  TGRAD_ARG(int64_t, groups) = 1;
  TGRAD_ARG(bool, bias) = true;
  TGRAD_ARG(ConvPaddingMode, padding_mode) = kZeros;

 public:
  auto& padding(ExpandingArray<D> p) {
    padding_ = p;
    return *this;
  }
  auto& padding(enumtype::kValid p) {
    padding_ = p;
    return *this;
  }
  auto& padding(enumtype::kSame p) {
    padding_ = p;
    return *this;
  }
  const ConvPaddingT<D>& padding() const { return padding_; }

 private:
  ConvPaddingT<D> padding_ = ExpandingArray<D>(0);
};
using Conv1dOptions = ConvOptions<1>;
using Conv2dOptions = ConvOptions<2>;

template <size_t D>
class ConvNd : public Module {
 public:
  explicit ConvNd(const ConvOptions<D>& options, Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  void reset_parameters(Generator& gen = default_generator());
  const ConvOptions<D>& options() const { return options_; }

  Tensor weight;
  Tensor bias;  // undefined when options.bias() is false

 private:
  ConvOptions<D> options_;
};

using Conv1dImpl = ConvNd<1>;
TGRAD_MODULE(Conv1d);
using Conv2dImpl = ConvNd<2>;
TGRAD_MODULE(Conv2d);

extern template class ConvNd<1>;
extern template class ConvNd<2>;

}  // namespace tgrad::nn
