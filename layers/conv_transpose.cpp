// nn::ConvTranspose1d / ConvTranspose2d: option validation, PyTorch initialisation, forward
// through tgrad::conv_transpose1d/2d.
#include "layers/conv_transpose.h"

#include <algorithm>
#include <array>
#include <ostream>

#include "layers/init.h"

namespace tgrad::nn {

namespace {

template <size_t D>
const char* module_name() {
  return D == 1 ? "ConvTranspose1d" : "ConvTranspose2d";
}

template <size_t D>
void validate(const ConvTransposeOptions<D>& o) {
  const char* m = module_name<D>();
  TGRAD_CHECK(o.in_channels() > 0, m, ": in_channels=", o.in_channels(), " must be positive");
  TGRAD_CHECK(o.out_channels() > 0, m, ": out_channels=", o.out_channels(), " must be positive");
  TGRAD_CHECK(o.groups() > 0, m, ": groups=", o.groups(), " must be positive");
  TGRAD_CHECK(o.in_channels() % o.groups() == 0, m, ": in_channels=", o.in_channels(),
              " must be divisible by groups=", o.groups());
  TGRAD_CHECK(o.out_channels() % o.groups() == 0, m, ": out_channels=", o.out_channels(),
              " must be divisible by groups=", o.groups());
  for (size_t i = 0; i < D; ++i) {
    TGRAD_CHECK(o.kernel_size()[i] > 0, m, ": kernel_size[", i, "]=", o.kernel_size()[i],
                " must be positive");
    TGRAD_CHECK(o.stride()[i] > 0, m, ": stride[", i, "]=", o.stride()[i], " must be positive");
    TGRAD_CHECK(o.padding()[i] >= 0, m, ": padding[", i, "]=", o.padding()[i],
                " must be non-negative");
    TGRAD_CHECK(o.dilation()[i] > 0, m, ": dilation[", i, "]=", o.dilation()[i],
                " must be positive");
    TGRAD_CHECK(o.output_padding()[i] >= 0, m, ": output_padding[", i, "]=", o.output_padding()[i],
                " must be non-negative");
    TGRAD_CHECK(o.output_padding()[i] < std::max(o.stride()[i], o.dilation()[i]), m,
                ": output_padding[", i, "]=", o.output_padding()[i],
                " must be smaller than stride[", i, "]=", o.stride()[i], " or dilation[", i,
                "]=", o.dilation()[i]);
  }
}

}  // namespace

template <size_t D>
ConvTransposeNd<D>::ConvTransposeNd(const ConvTransposeOptions<D>& options, Generator& gen)
    : Module(module_name<D>()), options_(options) {
  validate(options_);
  Shape w_shape = {options_.in_channels(), options_.out_channels() / options_.groups()};
  for (size_t i = 0; i < D; ++i)
    w_shape.push_back(options_.kernel_size()[i]);
  weight = register_parameter("weight", empty(w_shape));
  if (options_.bias()) bias = register_parameter("bias", empty({options_.out_channels()}));
  reset_parameters(gen);
}

template <size_t D>
void ConvTransposeNd<D>::reset_parameters(Generator& gen) {
  init::reset_layer_parameters_(weight, bias, gen);
}

template <size_t D>
Tensor ConvTransposeNd<D>::forward(const Tensor& x) {
  return forward(x, std::vector<int64_t>{});
}

template <size_t D>
Tensor ConvTransposeNd<D>::forward(const Tensor& x, const std::vector<int64_t>& output_size) {
  const char* m = module_name<D>();
  std::array<int64_t, D> output_padding{};
  for (size_t i = 0; i < D; ++i)
    output_padding[i] = options_.output_padding()[i];
  if (!output_size.empty()) {
    TGRAD_CHECK(x.defined() && x.dim() >= static_cast<int64_t>(D), m,
                ": the input is undefined "
                "or has fewer than ",
                D, " dims");
    TGRAD_CHECK(output_size.size() == D || output_size.size() == D + 2, m, ": output_size ",
                output_size, " must list ", D, " spatial sizes or ", D + 2, " sizes");
    const size_t skip = output_size.size() - D;
    for (size_t i = 0; i < D; ++i) {
      const int64_t in = x.size(x.dim() - static_cast<int64_t>(D) + static_cast<int64_t>(i));
      const int64_t min_size =
          conv_transpose_out_size(in, options_.kernel_size()[i], options_.stride()[i],
                                  options_.padding()[i], options_.dilation()[i], 0);
      const int64_t max_size = min_size + options_.stride()[i] - 1;
      const int64_t want = output_size[skip + i];
      TGRAD_CHECK(want >= min_size && want <= max_size, m, ": requested an output size of ",
                  output_size, ", but valid sizes of dim ", i, " range from ", min_size, " to ",
                  max_size, " (for an input of shape ", x.shape(), ")");
      output_padding[i] = want - min_size;
    }
  }
  ConvTransposeFuncOptions<D> f;
  f.stride(options_.stride())
      .padding(options_.padding())
      .output_padding(output_padding)
      .groups(options_.groups())
      .dilation(options_.dilation());
  if constexpr (D == 1) {
    return conv_transpose1d(x, weight, bias, f);
  } else {
    return conv_transpose2d(x, weight, bias, f);
  }
}

template <size_t D>
void ConvTransposeNd<D>::pretty_print(std::ostream& stream) const {
  const auto list = [&](const ExpandingArray<D>& a) {
    detail::print_int_list(stream, a.values().data(), D);
  };
  const auto differs = [](const ExpandingArray<D>& a, int64_t v) {
    return a.values() != ExpandingArray<D>(v).values();
  };
  stream << "ConvTranspose" << D << "d(" << options_.in_channels() << ", "
         << options_.out_channels() << ", kernel_size=";
  list(options_.kernel_size());
  stream << ", stride=";
  list(options_.stride());
  if (differs(options_.padding(), 0)) {
    stream << ", padding=";
    list(options_.padding());
  }
  if (differs(options_.dilation(), 1)) {
    stream << ", dilation=";
    list(options_.dilation());
  }
  if (differs(options_.output_padding(), 0)) {
    stream << ", output_padding=";
    list(options_.output_padding());
  }
  if (options_.groups() != 1) stream << ", groups=" << options_.groups();
  if (!options_.bias()) stream << ", bias=false";
  stream << ")";
}

template class ConvTransposeNd<1>;
template class ConvTransposeNd<2>;

}  // namespace tgrad::nn
