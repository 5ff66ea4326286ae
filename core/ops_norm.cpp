// Fused normalization: batch, group, instance and layer norm as one recorded op over an
// (N, C, S) view, with the backend's one-pass kernels (Backend::norm_forward / norm_backward),
// and batch norm's running statistics updated on the device. A composed norm (mean, subtract,
// square, mean, pow, multiply, then the affine) costs a dozen launches forward and twice that
// backward; a training step of a normalized model is mostly those launches.
#include <limits>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/derivatives.h"
#include "core/ops_internal.h"

namespace tgrad::detail {

bool fused_norm_supports(const NormShape& ns) {
  // The kernels index a key's elements with 32 bits.
  return ns.n > 0 && ns.c > 0 && ns.s > 0 &&
         ns.per_key() <= std::numeric_limits<int32_t>::max() / 2;
}

Tensor fused_norm(const char* fn, const NormShape& ns, const Tensor& x3, const Tensor& w,
                  const Tensor& b, double eps, Tensor* mean_out, Tensor* var_out) {
  check_floating(fn, "input", x3);
  if (w.defined()) check_compatible(fn, "input", x3, "weight", w);
  if (b.defined()) check_compatible(fn, "input", x3, "bias", b);
  TGRAD_CHECK(x3.shape() == Shape({ns.n, ns.c, ns.s}), fn, ": internal: input ", x3.shape(),
              " is not (", ns.n, ", ", ns.c, ", ", ns.s, ")");
  TGRAD_CHECK(!w.defined() || w.shape() == Shape({ns.c}), fn, ": weight has shape ", w.shape(),
              ", expected (", ns.c, ")");
  TGRAD_CHECK(!b.defined() || b.shape() == Shape({ns.c}), fn, ": bias has shape ", b.shape(),
              ", expected (", ns.c, ")");
  Tensor y = new_like(x3, x3.shape());
  Tensor mean = new_like(x3, {ns.keys()});
  Tensor var = new_like(x3, {ns.keys()});
  backend(x3.device())
      .norm_forward(ns, x3, eps, w.defined() ? &w : nullptr, b.defined() ? &b : nullptr, y, mean,
                    var);
  if (mean_out != nullptr) *mean_out = mean;
  if (var_out != nullptr) *var_out = var;
  return record(fn, y, {x3, w, b}, derivatives::norm(ns, x3, w, b.defined(), mean, var, eps));
}

bool fused_running_stats(const char* fn, const Tensor& mean, const Tensor& var, double momentum,
                         double unbias, Tensor& running_mean, Tensor& running_var,
                         Tensor& num_batches_tracked) {
  const auto same = [&](const Tensor& t) {
    return t.dtype() == mean.dtype() && t.device() == mean.device() && t.shape() == mean.shape();
  };
  if (!same(running_mean) || !same(running_var) || !same(var) ||
      num_batches_tracked.dtype() != DType::int64 || num_batches_tracked.numel() != 1 ||
      num_batches_tracked.device() != mean.device()) {
    return false;
  }
  begin_inplace_write(fn, running_mean);
  begin_inplace_write(fn, running_var);
  begin_inplace_write(fn, num_batches_tracked);
  backend(mean.device())
      .norm_running_stats(mean, var, momentum, unbias, running_mean, running_var,
                          &num_batches_tracked);
  return true;
}

}  // namespace tgrad::detail
