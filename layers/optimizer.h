// tgrad::optim: Optimizer (the base: parameters, per-parameter state, zero_grad, state_dict)
// and SGD, Adam, AdamW with PyTorch 1.13's update rules (torch.optim, single-tensor path).
// Steps run under NoGradGuard and write parameters in place with copy_, so every handle stays
// valid; parameters whose .grad is undefined are skipped, as in PyTorch. A step is all or
// nothing: it computes every new parameter and state tensor first (holding one extra copy of
// the parameters), then commits, so an error (out of memory) leaves parameters and state as
// they were.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace tgrad::optim {

class Optimizer {
 public:
  Optimizer(std::string type_name, std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // Clears every parameter's .grad: sets it to none (LibTorch's default), or with
  // set_to_none=false fills it with zeros in place (keeping the tensor).
  void zero_grad(bool set_to_none = true);

  const std::string& type_name() const { return type_name_; }
  const std::vector<Tensor>& params() const { return params_; }
  double lr() const { return lr_; }
  void set_lr(double lr);

  // PyTorch's state_dict flattened to tensors: "state.<i>.<name>" for parameter i (its index
  // in params(), as in PyTorch) with the state names PyTorch uses ("momentum_buffer",
  // "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"; "step" is a 0-d float64), and
  // "param_groups.0.lr" (0-d float64).
  nn::NamedTensors state_dict() const;
  // Restores a state_dict: every key is checked (name, parameter index, shape) before anything
  // is changed; unknown keys and a missing lr are errors. Tensors are converted to each
  // parameter's dtype and device.
  void load_state_dict(const nn::NamedTensors& state);

 protected:
  // State names this optimizer keeps for each parameter (besides "step").
  virtual std::vector<std::string> state_names() const = 0;
  // The state tensor `name` of parameter i, or undefined. Converted lazily to the parameter's
  // device and dtype, so that state follows a Module::to() made after it was created.
  Tensor state(size_t i, const std::string& name);
  // A copy of every parameter's state map (handles, not data), for a step to build on.
  std::vector<std::map<std::string, Tensor>> state_snapshot() const;
  // Ends a step: copies each (parameter, new value) pair in place, then swaps in the new state
  // and step counts. Allocates nothing, so it cannot fail for lack of memory.
  void commit(const std::vector<std::pair<Tensor, Tensor>>& new_params,
              std::vector<std::map<std::string, Tensor>> new_state, std::vector<int64_t> new_steps);
  // Adam-style step counts (PyTorch keeps one per parameter).
  std::vector<int64_t> steps_;
  bool uses_step_ = false;

 private:
  std::string type_name_;
  std::vector<Tensor> params_;
  double lr_;
  std::vector<std::map<std::string, Tensor>> state_;
};

struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  TGRAD_ARG(double, lr);
  TGRAD_ARG(double, momentum) = 0.0;
  TGRAD_ARG(double, dampening) = 0.0;
  TGRAD_ARG(double, weight_decay) = 0.0;
  TGRAD_ARG(bool, nesterov) = false;
};

// d = g + wd*p; buf = d (first step) or momentum*buf + (1-dampening)*d;
// d = nesterov ? d + momentum*buf : buf; p -= lr*d.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  void step() override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> state_names() const override;

 private:
  SGDOptions options_;
};

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  TGRAD_ARG(double, lr);
  TGRAD_ARG(double, beta1) = 0.9;
  TGRAD_ARG(double, beta2) = 0.999;
  TGRAD_ARG(double, eps) = 1e-8;
  TGRAD_ARG(double, weight_decay) = 0.0;
  TGRAD_ARG(bool, amsgrad) = false;
};

// t += 1; g += wd*p (Adam) or p *= 1 - lr*wd (AdamW); m = b1*m + (1-b1)*g;
// v = b2*v + (1-b2)*g*g; vmax = max(vmax, v) (amsgrad);
// p -= lr/(1-b1^t) * m / (sqrt(v or vmax)/sqrt(1-b2^t) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  void step() override;
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(const char* type_name, std::vector<Tensor> params, const AdamOptions& options,
       bool decoupled_weight_decay);
  std::vector<std::string> state_names() const override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

// AdamOptions with PyTorch's AdamW default weight_decay of 1e-2 (chained setters return
// AdamOptions&, which AdamW takes).
struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay(1e-2); }
};

// Adam with decoupled weight decay (PyTorch's AdamW).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamOptions& options);
};

}  // namespace tgrad::optim
