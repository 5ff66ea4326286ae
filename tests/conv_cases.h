// The conv test sweep: seeded random transposed-convolution configurations covering every
// stride/padding/dilation/output_padding combination, groups, bias and 1-D/2-D, plus helpers
// that run one case on a device (backend passes or public ops) or through the naive loops.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/conv_geometry.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/reference/conv_transpose_reference.h"
#include "tests/test_util.h"

namespace tgrad::testing {

// One configuration. `p` holds the sizes (1-D: the W axis, H = 1); `batched` false means the
// public op is given x without its batch axis (then p.batch is 1).
struct ConvCase {
  int spatial_dims = 2;
  bool batched = true;
  bool bias = true;
  reference::ConvTransposeParams p;

  const char* fn() const { return spatial_dims == 1 ? "conv_transpose1d" : "conv_transpose2d"; }
  std::string str() const;
  // Shapes as a user of conv_transpose1d/2d sees them.
  Shape x_shape() const;
  Shape w_shape() const;
  Shape b_shape() const { return {p.out_channels}; }
  Shape y_shape() const;
  // The 4-D layouts every backend entry point takes.
  Shape x_shape4() const { return {p.batch, p.in_channels, p.in_size[0], p.in_size[1]}; }
  Shape w_shape4() const;
  Shape y_shape4() const;
  // The arguments as the public op hands them to make_conv_transpose_geometry.
  ConvTransposeArgs args() const;
  ConvTranspose1dFuncOptions options1d() const;
  ConvTranspose2dFuncOptions options2d() const;
};

// A case from the user-facing shapes x (N, C_in, spatial...) or (C_in, spatial...) and
// w (C_in, C_out/groups, k...), with `spatial_dims` entries in each per-axis list.
ConvCase conv_case_from_shapes(int spatial_dims, const Shape& x_shape, const Shape& w_shape,
                               bool bias, const std::vector<int64_t>& stride,
                               const std::vector<int64_t>& padding,
                               const std::vector<int64_t>& output_padding,
                               const std::vector<int64_t>& dilation, int64_t groups);

inline constexpr uint64_t kConvSweepSeed = 20240611;

// The sweep: for each of 1-D and 2-D, every (stride {1,2,3}, padding {0,1,2}, dilation {1,2,4},
// valid output_padding < max(stride, dilation)) on the W axis (the H axis of 2-D cases is drawn
// at random), once with each groups kind {1, 2, depthwise}, with random channels, sizes in 1..5,
// kernels in 1..4 (non-square), bias and batching; then a few larger cases that cross the
// backends' tile sizes, and two whose wgrad/bias reductions run over several thousand terms. Same
// seed, same cases, on every machine.
std::vector<ConvCase> conv_sweep(uint64_t seed = kConvSweepSeed);

struct ConvData;
// Runs `check` on every case of the sweep with its operands (make_conv_data seeded with
// data_seed + the case's index). `check` returns false when the case failed; after a few failing
// cases the loop stops, since one broken pass would otherwise report every case.
void for_each_sweep_case(uint64_t data_seed,
                         const std::function<bool(const ConvCase&, const ConvData&)>& check);

// Float64 host operands of one case in the 4-D layouts; b is empty without bias. Values are
// uniform in [-1, 1), from a generator independent of tgrad's.
struct ConvData {
  std::vector<double> x, w, b, dy;
};
ConvData make_conv_data(const ConvCase& c, uint64_t seed);

// The operands as tensors of `dtype` on `device`, 4-D layouts; b undefined without bias.
struct ConvTensors {
  Tensor x, w, b, dy;
};
ConvTensors conv_tensors(const ConvCase& c, const ConvData& d, DType dtype, Device device);

// The results of the four passes (y from x, w, b; dx and dw from dy; db from dy), 4-D layouts.
struct ConvOutputs {
  Tensor y, dx, dw, db;  // db undefined for a case without bias
};
// Calls backend(device).conv_transpose_forward/_dgrad/_wgrad/_bias_grad directly, with the
// geometry from make_conv_transpose_geometry (precision: the current float32 setting) and outputs
// pre-filled with NaN (a kernel must overwrite every element).
ConvOutputs run_backend_passes(const ConvCase& c, const ConvTensors& t);
// The naive loops, as float64 CPU tensors.
ConvOutputs run_reference_passes(const ConvCase& c, const ConvData& d);
// Compares the four passes with tensors_close, each failure a gtest failure naming the pass and
// `config`; false when any differs.
bool passes_close(const ConvOutputs& actual, const ConvOutputs& expected, Tolerance tol,
                  const std::string& config);
// The public op (conv_transpose1d/2d) on the user-facing shapes; returns y in the user shape.
Tensor run_public_forward(const ConvCase& c, const ConvTensors& t);

// Host values as a float64 CPU tensor.
Tensor host_tensor(const std::vector<double>& values, const Shape& shape);

}  // namespace tgrad::testing
