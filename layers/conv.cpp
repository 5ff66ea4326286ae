// nn::Conv1d / Conv2d: option validation, PyTorch initialisation, padding modes, forward through
// tgrad::conv1d/conv2d.
#include "layers/conv.h"

#include <ostream>
#include "layers/init.h"

namespace tgrad::nn {

namespace {

template <size_t D>
const char* module_name() {
  return D == 1 ? "Conv1d" : "Conv2d";
}

template <size_t D>
void validate(const ConvOptions<D>& o) {
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
    TGRAD_CHECK(o.dilation()[i] > 0, m, ": dilation[", i, "]=", o.dilation()[i],
                " must be positive");
    if (const auto* p = std::get_if<ExpandingArray<D>>(&o.padding())) {
      TGRAD_CHECK((*p)[i] >= 0, m, ": padding[", i, "]=", (*p)[i], " must be non-negative");
    } else if (std::holds_alternative<enumtype::kSame>(o.padding())) {
      TGRAD_CHECK(o.stride()[i] == 1, m, ": padding=kSame needs stride 1, got stride[", i,
                  "]=", o.stride()[i], " (as in PyTorch)");
    }
  }
}

}  // namespace

template <size_t D>
ConvNd<D>::ConvNd(const ConvOptions<D>& options, Generator& gen)
    : Module(module_name<D>()), options_(options) {
  validate(options_);
  Shape w_shape = {options_.out_channels(), options_.in_channels() / options_.groups()};
  for (size_t i = 0; i < D; ++i)
    w_shape.push_back(options_.kernel_size()[i]);
  weight = register_parameter("weight", empty(w_shape));
  if (options_.bias()) bias = register_parameter("bias", empty({options_.out_channels()}));
  reset_parameters(gen);
}

template <size_t D>
void ConvNd<D>::reset_parameters(Generator& gen) {
  init::reset_layer_parameters_(weight, bias, gen);
}

template <size_t D>
Tensor ConvNd<D>::forward(const Tensor& x) {
  ConvFuncOptions<D> f;
  f.stride(options_.stride()).dilation(options_.dilation()).groups(options_.groups());
  if (std::holds_alternative<enumtype::kZeros>(options_.padding_mode())) {
    std::visit([&](const auto& p) { f.padding(p); }, options_.padding());
    if constexpr (D == 1) {
      return conv1d(x, weight, bias, f);
    } else {
      return conv2d(x, weight, bias, f);
    }
  }
  // Reflect or replicate: pad the input first (F::pad's list, last dim first), then convolve
  // without padding, as PyTorch's _conv_forward does.
  std::vector<int64_t> pads;
  for (size_t i = D; i-- > 0;) {
    int64_t before = 0, after = 0;
    if (const auto* p = std::get_if<ExpandingArray<D>>(&options_.padding())) {
      before = after = (*p)[i];
    } else if (std::holds_alternative<enumtype::kSame>(options_.padding())) {
      const int64_t total = options_.dilation()[i] * (options_.kernel_size()[i] - 1);
      before = total / 2;
      after = total - before;
    }
    pads.push_back(before);
    pads.push_back(after);
  }
  PadFuncOptions pad_options(pads);
  if (std::holds_alternative<enumtype::kReflect>(options_.padding_mode())) {
    pad_options.mode(kReflect);
  } else {
    pad_options.mode(kReplicate);
  }
  const Tensor padded = pad(x, pad_options);
  f.padding(ExpandingArray<D>(0));
  if constexpr (D == 1) {
    return conv1d(padded, weight, bias, f);
  } else {
    return conv2d(padded, weight, bias, f);
  }
}

template <size_t D>
void ConvNd<D>::pretty_print(std::ostream& stream) const {
  const auto list = [&](const ExpandingArray<D>& a) {
    detail::print_int_list(stream, a.values().data(), D);
  };
  stream << "Conv" << D << "d(" << options_.in_channels() << ", " << options_.out_channels()
         << ", kernel_size=";
  list(options_.kernel_size());
  stream << ", stride=";
  list(options_.stride());
  const ConvPaddingT<D>& padding = options_.padding();
  if (std::holds_alternative<enumtype::kSame>(padding)) {
    stream << ", padding='same'";
  } else if (std::holds_alternative<enumtype::kValid>(padding)) {
    stream << ", padding='valid'";
  } else if (std::get<ExpandingArray<D>>(padding).values() != ExpandingArray<D>(0).values()) {
    stream << ", padding=";
    list(std::get<ExpandingArray<D>>(padding));
  }
  if (options_.dilation().values() != ExpandingArray<D>(1).values()) {
    stream << ", dilation=";
    list(options_.dilation());
  }
  if (options_.groups() != 1) stream << ", groups=" << options_.groups();
  if (!options_.bias()) stream << ", bias=false";
  if (std::holds_alternative<enumtype::kReflect>(options_.padding_mode())) {
    stream << ", padding_mode=kReflect";
  } else if (std::holds_alternative<enumtype::kReplicate>(options_.padding_mode())) {
    stream << ", padding_mode=kReplicate";
  }
  stream << ")";
}

template class ConvNd<1>;
template class ConvNd<2>;

}  // namespace tgrad::nn
