// gradcheck: compares the vector-Jacobian products of backward with central finite differences
// in float64, for any function of tensors. Exhaustive mode builds the full Jacobian (small
// inputs); fast mode compares random projections v^T J u both ways. Both also check that
// backward is reproducible bit for bit, that a zero upstream gradient gives zero gradients, and
// that every gradient has its input's shape.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tgrad {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  bool fast_mode = false;  // random projections instead of the full Jacobian
  int projections = 2;     // fast mode: random (u, v) pairs per input
  uint64_t seed = 0;       // fast mode: the projections' generator
  std::string name;        // the op, for the report; empty: the op that made the output
  std::string config;      // its configuration, for the report
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  std::string report;  // empty when ok; else names op, config, worst element, both values
  explicit operator bool() const { return ok; }
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks d fn / d inputs for the inputs that require grad. Inputs must be float64 (tgrad::Error
// otherwise) and may live on any device. The function must be deterministic.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// Second derivatives (like torch.autograd.gradgradcheck): for a fixed random upstream gradient v
// and random directions u_i drawn from options.seed, checks the gradient of
// H(x) = sum_i <d<v, fn(x)>/dx_i, u_i>, which backward computes by differentiating the recorded
// backward (create_graph), against finite differences of the first backward. Same options and
// report as gradcheck; the report's config starts with "gradgradcheck".
GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace tgrad
