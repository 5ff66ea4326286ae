// nn::ConvTranspose1d / ConvTranspose2d with LibTorch's options and defaults. Weight
// (C_in, C_out/groups, k...) and bias (C_out) are initialised as PyTorch does: uniform in
// +-1/sqrt(fan_in) with fan_in = C_out/groups * prod(k) (kaiming_uniform_ with a = sqrt(5)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "core/random.h"
#include "layers/module.h"

namespace tgrad::nn {

// ConvTranspose2dOptions(in, out, k).stride(2).padding(1).output_padding(1).groups(1)
//   .bias(true).dilation(1); every spatial argument is a scalar or a per-axis list.
template <size_t D>
class ConvTransposeOptions {
 public:
  ConvTransposeOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<D> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}

  TGRAD_ARG(int64_t, in_channels);
  TGRAD_ARG(int64_t, out_channels);
  TGRAD_ARG(ExpandingArray<D>, kernel_size);
  TGRAD_ARG(ExpandingArray<D>, stride) = 1;
  TGRAD_ARG(ExpandingArray<D>, padding) = 0;
  TGRAD_ARG(ExpandingArray<D>, output_padding) = 0;
  TGRAD_ARG(int64_t, groups) = 1;
  TGRAD_ARG(bool, bias) = true;
  TGRAD_ARG(ExpandingArray<D>, dilation) = 1;
};
using ConvTranspose1dOptions = ConvTransposeOptions<1>;
using ConvTranspose2dOptions = ConvTransposeOptions<2>;

template <size_t D>
class ConvTransposeNd : public Module {
 public:
  // Validates the options (tgrad::Error naming the module, the argument and its value) and
  // initialises weight and bias from `gen`.
  explicit ConvTransposeNd(const ConvTransposeOptions<D>& options,
                           Generator& gen = default_generator());
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;
  // LibTorch's forward(input, output_size): the output_padding that gives the requested spatial
  // size (output_size lists the D spatial sizes, or all D + 2 dims), each between the formula's
  // size with output_padding 0 and that plus stride - 1.
  Tensor forward(const Tensor& x, const std::vector<int64_t>& output_size);
  using Module::operator();
  Tensor operator()(const Tensor& x, const std::vector<int64_t>& output_size) {
    return forward(x, output_size);
  }
  // Draws weight and bias again, as PyTorch's reset_parameters().
  void reset_parameters(Generator& gen = default_generator());

  const ConvTransposeOptions<D>& options() const { return options_; }
  Tensor weight;
  Tensor bias;  // undefined when options.bias() is false

 private:
  ConvTransposeOptions<D> options_;
};

using ConvTranspose1dImpl = ConvTransposeNd<1>;
TGRAD_MODULE(ConvTranspose1d);
using ConvTranspose2dImpl = ConvTransposeNd<2>;
TGRAD_MODULE(ConvTranspose2d);

extern template class ConvTransposeNd<1>;
extern template class ConvTransposeNd<2>;

}  // namespace tgrad::nn
