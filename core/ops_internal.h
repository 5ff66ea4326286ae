// Building blocks shared by core/ops*.cpp, core/tensor.cpp and core/derivatives.cpp. Not part
// of the public API (not installed).
#pragma once

#include <mutex>

#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/tensor.h"

namespace tgrad::detail {

// Guards every read-modify-write of a leaf's .grad (backward's accumulation, set_grad,
// zero_grad), so that threads sharing parameters do not race.
std::mutex& leaf_grad_mutex();
// Refuses an in-place write into `t` that autograd could not see (see Tensor::copy_), then counts
// the write on t's version counter. Call before writing.
void begin_inplace_write(const char* fn, const Tensor& t);
// begin_inplace_write's checks alone (it counts nothing): for a caller that checks every target
// before writing any.
void check_inplace_write(const char* fn, const Tensor& t);

// Argument checks shared by the ops: defined; floating (float32/float64); two operands of one
// floating dtype and one device. Each names the op and the argument.
void check_defined(const char* fn, const char* arg, const Tensor& t);
void check_floating(const char* fn, const char* arg, const Tensor& t);
void check_compatible(const char* fn, const char* a_name, const Tensor& a, const char* b_name,
                      const Tensor& b);
// An uninitialised tensor of `shape` with like's dtype and device.
Tensor new_like(const Tensor& like, const Shape& shape);

// Marks t as the copy an op returned where PyTorch returns a strided view (see
// TensorImpl::copy_of_view), and returns it.
inline Tensor mark_copy_of_view(Tensor t, const char* op) {
  t.impl()->copy_of_view = op;
  return t;
}
// The same tensor (storage, history) through a handle without that mark: gradients handed to the
// user are tensors of their own.
Tensor unmark_copy_of_view(const Tensor& t);

// A tensor sharing t's storage (and version counter) with another shape of the same element
// count; no autograd.
Tensor alias(const Tensor& t, const Shape& shape);

// Recorded building blocks that backward formulas are written with (so that create_graph can
// record them too). mm: y = op(a) op(b) for 2-D a, b, op = transpose where the flag is set.
Tensor mm(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b);
// zeros of `shape` with dy's rows at [start, start + dy.size(0)) of dim 0: narrow's gradient.
Tensor narrow_backward(const Tensor& dy, const Shape& shape, int64_t start);

// The three passes of one transposed-convolution geometry as recorded ops on 4-D tensors
// (x (N, C_in, H, W), w (C_in, C_out/g, kH, kW), y (N, C_out, H_out, W_out)). b is an optional
// bias (C_out for conv_transpose; C_in, a regular convolution's bias, for conv_transpose_dgrad).
// Each reads the float32 precision in force when it is called, so a backward uses the precision
// set when it runs.
Tensor conv_transpose(const ConvGeometry& g, const Tensor& x4, const Tensor& w4, const Tensor& b);
Tensor conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy4, const Tensor& w4,
                            const Tensor& b);
Tensor conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x4, const Tensor& dy4);

// Normalization as one recorded op (core/ops_norm.cpp): x3 (N, C, S), per-channel weight and
// bias (C, each may be undefined), statistics per NormShape key, returned detached through
// mean_out / var_out (biased variance) when asked. `fn` names the op in errors and on the tape.
// fused_norm_supports says whether the kernels take the shape (else compose the norm from ops).
bool fused_norm_supports(const NormShape& ns);
Tensor fused_norm(const char* fn, const NormShape& ns, const Tensor& x3, const Tensor& w,
                  const Tensor& b, double eps, Tensor* mean_out = nullptr,
                  Tensor* var_out = nullptr);
// Batch norm's running statistics from a fused_norm's mean and var, in place on their device
// with num_batches_tracked += 1 (no host round trip). Returns false, changing nothing, when the
// buffers' dtype, device or shape differ from the statistics' (the caller then composes it).
bool fused_running_stats(const char* fn, const Tensor& mean, const Tensor& var, double momentum,
                         double unbias, Tensor& running_mean, Tensor& running_var,
                         Tensor& num_batches_tracked);

}  // namespace tgrad::detail
