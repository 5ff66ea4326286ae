// The backend interface: every kernel entry point a device must provide. core/ calls a backend
// only through this class, chosen by the tensor's device; cpu/ and cuda/ implement it.
// Contract for every method: outputs are already allocated by core with the right shape, dtype
// and device; every tensor is contiguous and on this backend's device; dtypes of all operands
// are equal (core checks); the method overwrites its output (never accumulates into it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/conv_geometry.h"
#include "core/device.h"
#include "core/tensor.h"

namespace tgrad {

// Elementwise y = f(x) with an optional scalar parameter p.
enum class UnaryOp {
  neg,          // -x
  exp,          // e^x
  log,          // ln x
  abs,          // |x|
  sign,         // -1, 0 or 1
  sqrt,         // sqrt(x)
  relu,         // max(x, 0)
  leaky_relu,   // x > 0 ? x : p*x
  step,         // x > 0 ? 1 : 0          (relu's derivative)
  leaky_step,   // x > 0 ? 1 : p          (leaky_relu's derivative)
  sigmoid,      // 1 / (1 + e^-x), computed without overflow for either sign
  tanh,         // tanh x
  pow,          // x^p
  add_scalar,   // x + p
  mul_scalar,   // x * p
  rsub_scalar,  // p - x
  rdiv_scalar,  // p / x
  sin,          // sin x
  cos,          // cos x
  clamp_min,    // x < p ? p : x          (NaN stays NaN, as torch.clamp)
  clamp_max,    // x > p ? p : x
  ge_step,      // x >= p ? 1 : 0         (clamp's derivative, with le_step)
  le_step,      // x <= p ? 1 : 0
};
const char* unary_op_name(UnaryOp op);

// Elementwise y = a (op) b, with a and b broadcast to y's shape (NumPy rules; core passes a and
// b with y's rank, each size equal to y's or 1).
enum class BinaryOp { add, sub, mul, div };
const char* binary_op_name(BinaryOp op);

// A strided window of a contiguous tensor t: the window's element (i_0, ..., i_{r-1}) is
// t[offset + sum_d i_d * strides[d]], strides in elements (0 or negative allowed). Rank <= 8.
// Shape ops (permute, slicing, flip, cat, pad, pixel_shuffle) are windows of their operands.
struct StridedWindow {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Reductions along one dim that return values and positions (max, min, argmax, argmin).
enum class ReduceOp { max, min };

// One Adam / AdamW update of one parameter, in a single pass over its elements (the optimizer
// would otherwise launch a dozen elementwise ops per parameter and step). With T the tensors'
// dtype and every coefficient rounded to T first, per element, in this order:
//   g  = coupled_weight_decay != 0 ? g + p * coupled_weight_decay : g
//   m' = m * beta1 + g * one_minus_beta1
//   v' = v * beta2 + (g * g) * one_minus_beta2
//   s  = amsgrad ? (vmax < v' ? v' : vmax) : v'      (vmax: the running maximum, or v' when absent)
//   p' = p * param_scale + (m' / (sqrt(s) * inv_bias_correction2_sqrt + eps)) * neg_step_size
// param_scale is AdamW's 1 - lr * weight_decay (1 for Adam). p_out may be p itself (the
// optimizer updates parameters in place; each element is read before it is written); the other
// outputs are distinct from every input.
struct AdamStep {
  double beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999, one_minus_beta2 = 0.001;
  double coupled_weight_decay = 0.0, param_scale = 1.0;
  double inv_bias_correction2_sqrt = 1.0, eps = 1e-8, neg_step_size = -1e-3;
  bool amsgrad = false;
};

// Checks adam_step's contract (one shape, dtype and device for every operand, vmax_out exactly
// when s.amsgrad, floating dtype); both backends call it first. Throws tgrad::Error naming the
// operand that differs.
void check_adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
                     const Tensor& v, const Tensor* vmax, const Tensor& p_out, const Tensor& m_out,
                     const Tensor& v_out, const Tensor* vmax_out);

// Normalization (batch, group, instance and layer norm) over an (N, C, S) view of a contiguous
// tensor. Its statistics have one key per channel (batch norm: key c over the N*S elements of
// channel c) or one per (sample, group) (per_channel false: key n*groups + c/(C/groups) over
// that group's C/groups*S elements, which lie contiguously). One fused pass per key replaces
// the dozen reductions and broadcasts a composed norm launches in forward and backward.
struct NormShape {
  int64_t n = 0, c = 0, s = 0;
  int64_t groups = 1;       // per_channel false: C % groups == 0
  bool per_channel = true;  // batch norm's keys; false: group norm's
  int64_t keys() const { return per_channel ? c : n * groups; }
  int64_t per_key() const { return per_channel ? n * s : c / groups * s; }
};

struct MemoryStats {
  int64_t allocated = 0;  // bytes in live tensors
  int64_t reserved = 0;   // bytes held from the device, live or cached
  int64_t peak_allocated = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int device_count() const = 0;

  // Memory. allocate returns storage whose deleter gives it back (to the cache, for CUDA).
  // Out of memory throws tgrad::Error naming the bytes asked for.
  virtual std::shared_ptr<void> allocate(int64_t nbytes, Device device) = 0;
  virtual void copy_from_host(void* dst, const void* src, int64_t nbytes, Device device) = 0;
  virtual void copy_to_host(void* dst, const void* src, int64_t nbytes, Device device) = 0;
  virtual void copy(void* dst, const void* src, int64_t nbytes, Device device) = 0;
  virtual void synchronize(Device device) = 0;
  virtual MemoryStats memory_stats(Device device) = 0;
  virtual void empty_cache(Device device) = 0;  // frees cached, unused blocks
  // A cap on the bytes live tensors may hold on `device` (0: none, the default). An allocation
  // that would pass it throws tgrad::Error "out of memory: ... limit ..." and changes nothing.
  virtual void set_memory_limit(Device device, int64_t bytes) = 0;
  virtual int64_t memory_limit(Device device) = 0;

  // Elementwise, reductions, products.
  virtual void fill(Tensor& y, double value) = 0;
  virtual void cast(const Tensor& x, Tensor& y) = 0;  // same shape, y.dtype() may differ
  virtual void unary(UnaryOp op, double p, const Tensor& x, Tensor& y) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) = 0;
  // y has x's rank; each of y's sizes equals x's or is 1; y = sum of x over the size-1 axes.
  // Deterministic: a fixed summation order, no float atomics.
  virtual void sum_to(const Tensor& x, Tensor& y) = 0;
  // y(M,N) = op(a) op(b), op = transpose when the flag is set; a, b, y 2-D.
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a,
                      bool transpose_b) = 0;
  // Floating. p, g, m, v, p_out, m_out, v_out have one shape; vmax (may be null: the first
  // amsgrad step) and vmax_out (null unless s.amsgrad) too. See AdamStep.
  virtual void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
                         const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out,
                         Tensor& v_out, Tensor* vmax_out) = 0;

  // Normalization (see NormShape). Floating; x, y, dy, dx (N, C, S); mean, var (keys); w, b,
  // dw, db (C); each pointer may be null. Statistics are accumulated in float64 in a fixed order
  // (the mean, then the mean of squared deviations: the biased variance).
  // norm_forward: mean, var of x per key; y = (x - mean) / sqrt(var + eps) * w[c] + b[c].
  virtual void norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                            const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) = 0;
  // The gradients of norm_forward's y (with its statistics recomputed from x, as they depend on
  // it) given dy and the mean and var norm_forward returned: dx, dw = sum of dy * x_hat per
  // channel, db = sum of dy per channel; each computed when its pointer is set.
  virtual void norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x,
                             const Tensor& mean, const Tensor& var, double eps, const Tensor* w,
                             Tensor* dx, Tensor* dw, Tensor* db) = 0;
  // Batch norm's running statistics, in place, on the device (no host round trip):
  // running_mean = running_mean * (1 - momentum) + mean * momentum, running_var likewise with
  // var * unbias; num_batches_tracked (an int64 scalar, may be null) += 1.
  virtual void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum,
                                  double unbias, Tensor& running_mean, Tensor& running_var,
                                  Tensor* num_batches_tracked) = 0;

  // Indexing (cpu/indexing.cpp, cuda/indexing.cu). Any dtype unless said: elements are moved
  // bit for bit. core checks windows and indices against the tensors' sizes before calling.
  // y (the window's shape) = x[window].
  virtual void strided_gather(const Tensor& x, const StridedWindow& window, Tensor& y) = 0;
  // y[window] = x (x has the window's shape). y's elements outside the window are kept: the one
  // exception to "overwrites its output". The window must not reach an element twice.
  virtual void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& window) = 0;
  // x seen as (outer, n_x, inner), y as (outer, n_y, inner), index int64 with n_y values in
  // [0, n_x): y[o, j, i] = x[o, index[j], i].
  virtual void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                            Tensor& y) = 0;
  // Floating. x seen as (outer, n_x, inner), y as (outer, n_y, inner), index int64 with n_x
  // values in [0, n_y): y = 0, then y[o, index[j], i] += x[o, j, i] in increasing j.
  // Deterministic: every element is summed in that fixed order, without float atomics.
  virtual void index_add(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                         Tensor& y) = 0;
  // Floating. x seen as (outer, n, inner), n >= 1; values and indices (int64) as (outer, inner):
  // the max (min) over n and its first position; a NaN wins over any number (as PyTorch).
  virtual void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner,
                          Tensor& values, Tensor& indices) = 0;

  // Transposed convolution. Tensors are contiguous with the 4-D layouts x (N, C_in, H, W),
  // w (C_in, C_out/g, kH, kW), y (N, C_out, H_out, W_out) whatever rank the user passed.
  // b may be null (no bias).
  virtual void conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                      const Tensor* b, Tensor& y) = 0;
  // dx = d(loss)/dx from dy: a regular convolution of dy with w.
  virtual void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w,
                                    Tensor& dx) = 0;
  // dw[ci, co, kh, kw] = sum_{n, ih, iw} x[n, ci, ih, iw] * dy[n, g*Cog+co, oh, ow].
  virtual void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                                    Tensor& dw) = 0;
  // db[co] = sum_{n, oh, ow} dy[n, co, oh, ow].
  virtual void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db) = 0;
};

// The backend for a device. Throws tgrad::Error when the device's backend is not built in
// ("tgrad was built without CUDA") or has no such device.
Backend& backend(Device device);

// Provided by cpu/ (always) and by cuda/ (or core/no_cuda.cpp, which returns null, in a build
// without CUDA). Never call these directly; use backend(device).
Backend& cpu_backend();
Backend* cuda_backend();

}  // namespace tgrad
