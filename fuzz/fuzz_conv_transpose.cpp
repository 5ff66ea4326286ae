// libFuzzer target: conv_transpose1d/2d argument validation and a tiny forward and backward.
// The bytes decode to shapes, stride, padding, dilation, output_padding, groups, bias and dtype
// (mostly small, sometimes any int64); every call must succeed with the output shape of the
// formula (computed here in 128-bit arithmetic) or throw tgrad::Error.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/random.h"

namespace {

using tgrad::Shape;
using tgrad::Tensor;

// A conv parameter: usually in [lo, hi], sometimes any int64 (to reach the overflow checks).
int64_t param(FuzzedDataProvider& in, int64_t lo, int64_t hi) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return in.ConsumeIntegral<int64_t>();
  return in.ConsumeIntegralInRange<int64_t>(lo, hi);
}

// The reference output size, exact in 128 bits (no step can overflow them).
__extension__ typedef __int128 Int128;
Int128 out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
  return (Int128{in} - 1) * s - 2 * Int128{p} + Int128{d} * (k - 1) + op + 1;
}

template <size_t D>
void run(FuzzedDataProvider& in) {
  const bool batched = in.ConsumeBool();
  const int64_t n = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t c_in = in.ConsumeIntegralInRange<int64_t>(0, 6);
  const int64_t groups = param(in, -1, 4);
  const int64_t c_out_per_group = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int64_t w_c_in = in.ConsumeBool() ? c_in : in.ConsumeIntegralInRange<int64_t>(0, 6);
  std::array<int64_t, D> size{}, kernel{}, stride{}, padding{}, dilation{}, output_padding{};
  for (size_t i = 0; i < D; ++i) {
    size[i] = in.ConsumeIntegralInRange<int64_t>(0, 8);
    kernel[i] = in.ConsumeIntegralInRange<int64_t>(0, 4);
    stride[i] = param(in, -1, 4);
    padding[i] = param(in, -1, 4);
    dilation[i] = param(in, -1, 3);
    output_padding[i] = param(in, -1, 3);
  }
  const int bias_kind = in.ConsumeIntegralInRange<int>(0, 2);  // none, right size, wrong size
  const auto dtype = in.ConsumeBool() ? tgrad::kFloat32 : tgrad::kFloat64;
  const bool backward = in.ConsumeBool();

  Shape x_shape;
  if (batched) x_shape.push_back(n);
  x_shape.push_back(c_in);
  Shape w_shape = {w_c_in, c_out_per_group};
  for (size_t i = 0; i < D; ++i) {
    x_shape.push_back(size[i]);
    w_shape.push_back(kernel[i]);
  }
  tgrad::Generator gen(in.ConsumeIntegral<uint32_t>());
  const auto options = tgrad::TensorOptions(dtype).requires_grad(backward);
  Tensor x = tgrad::randn(x_shape, gen, options);
  Tensor w = tgrad::randn(w_shape, gen, options);
  Tensor b;
  if (bias_kind > 0) {
    const int64_t c_out = c_out_per_group * (groups > 0 && groups < 100 ? groups : 1);
    b = tgrad::randn({bias_kind == 1 ? c_out : c_out + 1}, gen, options);
  }

  Tensor y;
  if constexpr (D == 1) {
    y = tgrad::conv_transpose1d(x, w, b,
                                tgrad::ConvTranspose1dFuncOptions()
                                    .stride(stride[0])
                                    .padding(padding[0])
                                    .dilation(dilation[0])
                                    .output_padding(output_padding[0])
                                    .groups(groups));
  } else {
    y = tgrad::conv_transpose2d(x, w, b,
                                tgrad::ConvTranspose2dFuncOptions()
                                    .stride({stride[0], stride[1]})
                                    .padding({padding[0], padding[1]})
                                    .dilation({dilation[0], dilation[1]})
                                    .output_padding({output_padding[0], output_padding[1]})
                                    .groups(groups));
  }
  // It succeeded: the arguments were valid and the shape must be the formula's.
  const size_t lead = batched ? 2 : 1;
  if (y.dim() != static_cast<int64_t>(lead + D)) std::abort();
  if (y.size(lead - 1) != c_out_per_group * groups) std::abort();
  for (size_t i = 0; i < D; ++i) {
    const Int128 want =
        out_size(size[i], kernel[i], stride[i], padding[i], dilation[i], output_padding[i]);
    if (want != y.size(static_cast<int64_t>(lead + i))) std::abort();
  }
  if (backward && y.numel() <= 4096) tgrad::sum(y * y).backward();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Outputs are bounded by this cap, not by the fuzzer's malloc limit: a valid geometry whose
  // output would pass it throws tgrad::Error, like a real out-of-memory.
  tgrad::set_memory_limit(tgrad::Device(tgrad::kCPU), int64_t{64} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  try {
    if (in.ConsumeBool()) {
      run<1>(in);
    } else {
      run<2>(in);
    }
  } catch (const tgrad::Error&) {
  }
  return 0;
}
