// tgrad::optim: Optimizer (the base: parameters, per-parameter state, zero_grad, state_dict)
// and SGD, Adam, AdamW with PyTorch 1.13's update rules (torch.optim, single-tensor path), with
// LibTorch's parameter groups: each group has its own options (lr, weight decay, betas...).
// Steps run under NoGradGuard and write parameters in place with copy_, so every handle stays
// valid; parameters whose .grad is undefined are skipped, as in PyTorch. A step is all or
// nothing: it computes every new parameter and state tensor first (holding one extra copy of
// the parameters), then commits, so an error (out of memory) leaves parameters and state as
// they were (docs/design.md, "Errors").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace tgrad::optim {

// The hyper-parameters of one parameter group, as LibTorch's OptimizerOptions: each optimizer's
// options type (SGDOptions, AdamOptions) derives from it, and a group's options are read back
// with a cast to that type, e.g. static_cast<AdamOptions&>(group.options()).lr(1e-4).
struct OptimizerOptions {
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;

 protected:
  OptimizerOptions() = default;
  OptimizerOptions(const OptimizerOptions&) = default;
  OptimizerOptions& operator=(const OptimizerOptions&) = default;
};

// A list of parameters with their own options (lr, weight decay, betas...), as LibTorch's
// OptimizerParamGroup. A group made without options takes the optimizer's defaults when added.
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params);  // NOLINT(google-explicit-constructor)
  OptimizerParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options);
  OptimizerParamGroup(const OptimizerParamGroup& other);
  OptimizerParamGroup& operator=(const OptimizerParamGroup& other);
  OptimizerParamGroup(OptimizerParamGroup&&) = default;
  OptimizerParamGroup& operator=(OptimizerParamGroup&&) = default;
  ~OptimizerParamGroup() = default;

  bool has_options() const { return options_ != nullptr; }
  // Throws when the group has no options (it was never added to an optimizer).
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }
  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

class Optimizer {
 public:
  Optimizer(std::string type_name, std::vector<OptimizerParamGroup> param_groups,
            std::unique_ptr<OptimizerOptions> defaults);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Checks every group's options, then updates every parameter that has a .grad. Options
  // edited through param_groups() are checked here, before anything changes.
  virtual void step() = 0;
  // Clears every parameter's .grad: sets it to none (LibTorch's default), or with
  // set_to_none=false fills it with zeros in place (keeping the tensor).
  void zero_grad(bool set_to_none = true);

  const std::string& type_name() const { return type_name_; }
  // Every parameter of every group, in group order: the numbering of state_dict's keys.
  const std::vector<Tensor>& params() const { return params_; }
  std::vector<OptimizerParamGroup>& param_groups() { return param_groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return param_groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  // Adds a group (options: its own, or a copy of the defaults). Its parameters must be leaves
  // that no other group holds; on error nothing is added.
  void add_param_group(const OptimizerParamGroup& group);

  // The lr of group 0, and a setter that gives every group the same lr (the single-group
  // shorthand; per-group rates go through param_groups() or set_lrs).
  double lr() const;
  void set_lr(double lr);
  // One lr per group, checked (finite, non-negative, one per group) before any is set.
  std::vector<double> lrs() const;
  void set_lrs(const std::vector<double>& lrs);

  // PyTorch's state_dict flattened to tensors: "state.<i>.<name>" for parameter i (its index
  // in params(), as in PyTorch) with the state names PyTorch uses ("momentum_buffer",
  // "step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"; "step" is a 0-d float64), and
  // "param_groups.<g>.lr" for each group g (0-d float64).
  nn::NamedTensors state_dict() const;
  // Restores a state_dict: every key is checked (name, parameter index, shape, one lr per
  // group) before anything is changed; unknown keys and a missing lr are errors. Tensors are
  // converted to each parameter's dtype and device.
  void load_state_dict(const nn::NamedTensors& state);

 protected:
  // Throws unless `options` is this optimizer's options type with valid values; `where` names
  // the group in messages ("defaults", "param group 1").
  virtual void check_options(const OptimizerOptions& options, const std::string& where) const = 0;
  // check_options on every group; step() implementations call it first.
  void check_groups() const;
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
  // Derived constructors call this once their check_options can run (it is virtual): checks the
  // defaults and adds the groups given to the constructor.
  void add_initial_groups();

 private:
  std::string type_name_;
  std::unique_ptr<OptimizerOptions> defaults_;
  std::vector<OptimizerParamGroup> pending_groups_;
  std::vector<OptimizerParamGroup> param_groups_;
  std::vector<Tensor> params_;
  std::vector<std::map<std::string, Tensor>> state_;
};

struct SGDOptions : OptimizerOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<SGDOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
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
  SGD(std::vector<Tensor> params, const SGDOptions& defaults);
  SGD(std::vector<OptimizerParamGroup> param_groups, const SGDOptions& defaults);
  void step() override;
  // The defaults (groups added without options of their own take a copy).
  const SGDOptions& options() const { return static_cast<const SGDOptions&>(defaults()); }

 protected:
  void check_options(const OptimizerOptions& options, const std::string& where) const override;
  std::vector<std::string> state_names() const override;
};

struct AdamOptions : OptimizerOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<AdamOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  TGRAD_ARG(double, lr);
  // (beta1, beta2), LibTorch's name and type; beta1() / beta2() read and set one of them.
  using Betas = std::tuple<double, double>;
  TGRAD_ARG(Betas, betas) = std::make_tuple(0.9, 0.999);

 public:
  double beta1() const { return std::get<0>(betas_); }
  double beta2() const { return std::get<1>(betas_); }
  AdamOptions& beta1(double b) {
    std::get<0>(betas_) = b;
    return *this;
  }
  AdamOptions& beta2(double b) {
    std::get<1>(betas_) = b;
    return *this;
  }
  TGRAD_ARG(double, eps) = 1e-8;
  TGRAD_ARG(double, weight_decay) = 0.0;
  TGRAD_ARG(bool, amsgrad) = false;
};

// t += 1; g += wd*p (Adam) or p *= 1 - lr*wd (AdamW); m = b1*m + (1-b1)*g;
// v = b2*v + (1-b2)*g*g; vmax = max(vmax, v) (amsgrad);
// p -= lr/(1-b1^t) * m / (sqrt(v or vmax)/sqrt(1-b2^t) + eps).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& defaults);
  Adam(std::vector<OptimizerParamGroup> param_groups, const AdamOptions& defaults);
  void step() override;
  // The defaults (groups added without options of their own take a copy).
  const AdamOptions& options() const { return static_cast<const AdamOptions&>(defaults()); }

 protected:
  Adam(const char* type_name, std::vector<OptimizerParamGroup> param_groups,
       const AdamOptions& defaults, bool decoupled_weight_decay);
  void check_options(const OptimizerOptions& options, const std::string& where) const override;
  std::vector<std::string> state_names() const override;

 private:
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
  AdamW(std::vector<Tensor> params, const AdamOptions& defaults);
  AdamW(std::vector<OptimizerParamGroup> param_groups, const AdamOptions& defaults);
};

}  // namespace tgrad::optim
