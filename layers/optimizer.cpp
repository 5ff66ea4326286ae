// Optimizer state handling and the SGD / Adam / AdamW steps, in the operation order of PyTorch
// 1.13's single-tensor implementations: SGD with core ops under NoGradGuard, Adam and AdamW with
// one fused backend call per parameter (Backend::adam_step).
#include "layers/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/ops_internal.h"

namespace tgrad::optim {

namespace {

void check_finite_non_negative(const char* fn, const char* arg, double v) {
  TGRAD_CHECK(std::isfinite(v) && v >= 0.0, fn, ": ", arg, "=", v,
              " must be finite and non-negative");
}

// Parses "state.<i>.<name>"; returns false when `key` does not have that form.
bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  const std::string prefix = "state.";
  if (key.rfind(prefix, 0) != 0) return false;
  const size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return false;
  const std::string digits = key.substr(prefix.size(), dot - prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  if (digits.size() > 9) return false;
  index = std::stoul(digits);
  name = key.substr(dot + 1);
  return !name.empty();
}

// "param_groups.<g>.lr" -> g; false when `key` does not have that form.
bool parse_lr_key(const std::string& key, size_t& group) {
  const std::string prefix = "param_groups.", suffix = ".lr";
  if (key.size() <= prefix.size() + suffix.size() || key.rfind(prefix, 0) != 0 ||
      key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string digits =
      key.substr(prefix.size(), key.size() - prefix.size() - suffix.size());
  if (digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  group = std::stoul(digits);
  return true;
}

std::string lr_key(size_t group) {
  return "param_groups." + std::to_string(group) + ".lr";
}

}  // namespace

OptimizerParamGroup::OptimizerParamGroup(std::vector<Tensor> params)
    : params_(std::move(params)) {}

OptimizerParamGroup::OptimizerParamGroup(std::vector<Tensor> params,
                                         std::unique_ptr<OptimizerOptions> options)
    : params_(std::move(params)), options_(std::move(options)) {}

OptimizerParamGroup::OptimizerParamGroup(const OptimizerParamGroup& other)
    : params_(other.params_), options_(other.options_ ? other.options_->clone() : nullptr) {}

OptimizerParamGroup& OptimizerParamGroup::operator=(const OptimizerParamGroup& other) {
  if (this != &other) {
    auto options = other.options_ ? other.options_->clone() : nullptr;
    params_ = other.params_;
    options_ = std::move(options);
  }
  return *this;
}

OptimizerOptions& OptimizerParamGroup::options() {
  TGRAD_CHECK(options_ != nullptr,
              "OptimizerParamGroup::options: this group has no options (it takes the "
              "optimizer's defaults when added to one)");
  return *options_;
}

const OptimizerOptions& OptimizerParamGroup::options() const {
  return const_cast<OptimizerParamGroup*>(this)->options();
}

Optimizer::Optimizer(std::string type_name, std::vector<OptimizerParamGroup> param_groups,
                     std::unique_ptr<OptimizerOptions> defaults)
    : type_name_(std::move(type_name)),
      defaults_(std::move(defaults)),
      pending_groups_(std::move(param_groups)) {
  TGRAD_CHECK(!pending_groups_.empty(), type_name_, ": got an empty list of parameter groups");
}

void Optimizer::add_initial_groups() {
  check_options(*defaults_, "defaults");
  std::vector<OptimizerParamGroup> groups;
  groups.swap(pending_groups_);
  for (const OptimizerParamGroup& group : groups)
    add_param_group(group);
}

void Optimizer::add_param_group(const OptimizerParamGroup& group) {
  const std::string where = "param group " + std::to_string(param_groups_.size());
  TGRAD_CHECK(!group.params().empty(), type_name_, ": ", where, " has no parameters");
  // Check everything before anything is added.
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    TGRAD_CHECK(p.defined(), type_name_, ": ", where, ": parameter ", i, " is undefined");
    TGRAD_CHECK(p.is_leaf(), type_name_, ": ", where, ": parameter ", i,
                " is not a leaf tensor; optimizers update leaves only");
    for (size_t j = 0; j < i; ++j) {
      TGRAD_CHECK(p.impl() != group.params()[j].impl(), type_name_, ": ", where, ": parameter ",
                  i, " is the same tensor as parameter ", j);
    }
    for (size_t j = 0; j < params_.size(); ++j) {
      TGRAD_CHECK(p.impl() != params_[j].impl(), type_name_, ": ", where, ": parameter ", i,
                  " is already in the optimizer (parameter ", j,
                  "); a parameter may belong to one group only");
    }
  }
  OptimizerParamGroup added(group.params(),
                            group.has_options() ? group.options().clone() : defaults_->clone());
  check_options(added.options(), where);
  param_groups_.reserve(param_groups_.size() + 1);
  params_.reserve(params_.size() + group.params().size());
  state_.reserve(params_.size() + group.params().size());
  steps_.reserve(params_.size() + group.params().size());
  // Nothing below can throw (capacity is reserved), so the group is added whole or not at all.
  for (const Tensor& p : added.params()) {
    params_.push_back(p);
    state_.emplace_back();
    steps_.push_back(0);
  }
  param_groups_.push_back(std::move(added));
}

void Optimizer::check_groups() const {
  for (size_t g = 0; g < param_groups_.size(); ++g)
    check_options(param_groups_[g].options(), "param group " + std::to_string(g));
}

void Optimizer::zero_grad(bool set_to_none) {
  nn::zero_grads(params_, set_to_none);
}

double Optimizer::lr() const {
  return param_groups_.front().options().get_lr();
}

std::vector<double> Optimizer::lrs() const {
  std::vector<double> out;
  for (const OptimizerParamGroup& group : param_groups_)
    out.push_back(group.options().get_lr());
  return out;
}

void Optimizer::set_lr(double lr) {
  set_lrs(std::vector<double>(param_groups_.size(), lr));
}

void Optimizer::set_lrs(const std::vector<double>& lrs) {
  TGRAD_CHECK(lrs.size() == param_groups_.size(), type_name_, "::set_lrs: got ", lrs.size(),
              " learning rates for ", param_groups_.size(), " parameter groups");
  for (size_t g = 0; g < lrs.size(); ++g) {
    const std::string arg = "lr of param group " + std::to_string(g);
    check_finite_non_negative(type_name_.c_str(), arg.c_str(), lrs[g]);
  }
  for (size_t g = 0; g < lrs.size(); ++g)
    param_groups_[g].options().set_lr(lrs[g]);
}

Tensor Optimizer::state(size_t i, const std::string& name) {
  auto it = state_[i].find(name);
  if (it == state_[i].end()) return Tensor();
  const Tensor& p = params_[i];
  if (it->second.device() != p.device() || it->second.dtype() != p.dtype()) {
    it->second = it->second.to(p.device(), p.dtype());
  }
  return it->second;
}

std::vector<std::map<std::string, Tensor>> Optimizer::state_snapshot() const {
  return state_;
}

void Optimizer::commit(const std::vector<std::pair<Tensor, Tensor>>& new_params,
                       std::vector<std::map<std::string, Tensor>> new_state,
                       std::vector<int64_t> new_steps) {
  // Same shape, dtype and device: copy_ is a plain memory copy and allocates nothing, so it
  // cannot run out of memory; the swaps cannot throw.
  for (const auto& [p, value] : new_params)
    Tensor(p).copy_(value);
  state_.swap(new_state);
  steps_.swap(new_steps);
}

nn::NamedTensors Optimizer::state_dict() const {
  nn::NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    if (uses_step_ && steps_[i] > 0) {
      out.emplace_back(prefix + "step",
                       scalar_tensor(static_cast<double>(steps_[i]), TensorOptions(kFloat64)));
    }
    for (const auto& [name, t] : state_[i])
      out.emplace_back(prefix + name, t.detach());
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    out.emplace_back(lr_key(g), scalar_tensor(param_groups_[g].options().get_lr(),
                                              TensorOptions(kFloat64)));
  }
  return out;
}

void Optimizer::load_state_dict(const nn::NamedTensors& state) {
  const std::string fn = type_name_ + "::load_state_dict";
  const std::vector<std::string> names = state_names();
  std::vector<std::map<std::string, Tensor>> new_state(params_.size());
  std::vector<int64_t> new_steps(params_.size(), 0);
  std::vector<double> new_lrs(param_groups_.size(), -1.0);
  std::vector<std::string> unexpected;
  // Validate and convert everything first; commit only when nothing failed.
  for (const auto& [key, t] : state) {
    TGRAD_CHECK(t.defined(), fn, ": tensor '", key, "' is undefined");
    size_t group = 0;
    if (parse_lr_key(key, group)) {
      TGRAD_CHECK(group < param_groups_.size(), fn, ": '", key, "' names a parameter group, but ",
                  "this optimizer has ", param_groups_.size(), " group(s)");
      TGRAD_CHECK(t.numel() == 1, fn, ": '", key, "' must hold one value, got shape ", t.shape());
      new_lrs[group] = t.item();
      check_finite_non_negative(fn.c_str(), key.c_str(), new_lrs[group]);
      continue;
    }
    size_t i = 0;
    std::string name;
    if (!parse_state_key(key, i, name) || i >= params_.size()) {
      unexpected.push_back(key);
      continue;
    }
    if (name == "step" && uses_step_) {
      TGRAD_CHECK(t.numel() == 1, fn, ": '", key, "' must hold one value, got shape ", t.shape());
      const double s = t.item();
      TGRAD_CHECK(s >= 0 && s == std::floor(s) && s < 9.0e15, fn, ": '", key, "'=", s,
                  " is not a step count");
      new_steps[i] = static_cast<int64_t>(s);
      continue;
    }
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      unexpected.push_back(key);
      continue;
    }
    TGRAD_CHECK(t.shape() == params_[i].shape(), fn, ": '", key, "' has shape ", t.shape(),
                " but parameter ", i, " has shape ", params_[i].shape());
    new_state[i][name] = t.detach().to(params_[i].device(), params_[i].dtype()).clone();
  }
  TGRAD_CHECK(unexpected.empty(), fn, ": unexpected keys ", unexpected,
              " (parameters: ", params_.size(), ", state names: step, ", names, ")");
  for (size_t g = 0; g < new_lrs.size(); ++g)
    TGRAD_CHECK(new_lrs[g] >= 0.0, fn, ": missing key '", lr_key(g), "'");
  state_ = std::move(new_state);
  steps_ = std::move(new_steps);
  for (size_t g = 0; g < new_lrs.size(); ++g)
    param_groups_[g].options().set_lr(new_lrs[g]);
}

// ---- SGD ----

namespace {

std::vector<OptimizerParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::move(params));
  return groups;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults)
    : SGD(one_group(std::move(params)), defaults) {}

SGD::SGD(std::vector<OptimizerParamGroup> param_groups, const SGDOptions& defaults)
    : Optimizer("SGD", std::move(param_groups), defaults.clone()) {
  add_initial_groups();
}

void SGD::check_options(const OptimizerOptions& base, const std::string& where) const {
  const auto* options = dynamic_cast<const SGDOptions*>(&base);
  TGRAD_CHECK(options != nullptr, "SGD: ", where, " has options of another optimizer type; ",
              "SGD takes SGDOptions");
  const SGDOptions& o = *options;
  const std::string fn = "SGD (" + where + ")";
  check_finite_non_negative(fn.c_str(), "lr", o.lr());
  check_finite_non_negative(fn.c_str(), "momentum", o.momentum());
  check_finite_non_negative(fn.c_str(), "dampening", o.dampening());
  check_finite_non_negative(fn.c_str(), "weight_decay", o.weight_decay());
  TGRAD_CHECK(!o.nesterov() || (o.momentum() > 0.0 && o.dampening() == 0.0), fn,
              ": nesterov momentum requires momentum > 0 and dampening = 0 (got momentum=",
              o.momentum(), ", dampening=", o.dampening(), ")");
}

std::vector<std::string> SGD::state_names() const {
  return {"momentum_buffer"};
}

void SGD::step() {
  NoGradGuard no_grad;
  check_groups();
  // Compute every new value first (the part that can run out of memory), then commit.
  std::vector<std::map<std::string, Tensor>> new_state = state_snapshot();
  std::vector<std::pair<Tensor, Tensor>> new_params;
  size_t i = 0;  // index in params(), across groups
  for (const OptimizerParamGroup& group : param_groups()) {
    const auto& o = static_cast<const SGDOptions&>(group.options());
    const double momentum = o.momentum();
    for (size_t k = 0; k < group.params().size(); ++k, ++i) {
      const Tensor& p = group.params()[k];
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      Tensor d = g;
      if (o.weight_decay() != 0.0) d = d + p * o.weight_decay();
      if (momentum != 0.0) {
        Tensor buf = state(i, "momentum_buffer");
        buf = buf.defined() ? buf * momentum + d * (1.0 - o.dampening()) : d.clone();
        new_state[i]["momentum_buffer"] = buf;
        d = o.nesterov() ? d + buf * momentum : buf;
      }
      new_params.emplace_back(p, p + d * -o.lr());
    }
  }
  commit(new_params, std::move(new_state), steps_);
}

// ---- Adam / AdamW ----

Adam::Adam(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam("Adam", one_group(std::move(params)), defaults, false) {}

Adam::Adam(std::vector<OptimizerParamGroup> param_groups, const AdamOptions& defaults)
    : Adam("Adam", std::move(param_groups), defaults, false) {}

Adam::Adam(const char* type_name, std::vector<OptimizerParamGroup> param_groups,
           const AdamOptions& defaults, bool decoupled_weight_decay)
    : Optimizer(type_name, std::move(param_groups), defaults.clone()),
      decoupled_(decoupled_weight_decay) {
  uses_step_ = true;
  add_initial_groups();
}

void Adam::check_options(const OptimizerOptions& base, const std::string& where) const {
  const auto* options = dynamic_cast<const AdamOptions*>(&base);
  TGRAD_CHECK(options != nullptr, type_name(), ": ", where,
              " has options of another optimizer type; ", type_name(), " takes AdamOptions");
  const AdamOptions& o = *options;
  const std::string fn = type_name() + " (" + where + ")";
  check_finite_non_negative(fn.c_str(), "lr", o.lr());
  TGRAD_CHECK(o.beta1() >= 0.0 && o.beta1() < 1.0, fn, ": beta1=", o.beta1(),
              " must be in [0, 1)");
  TGRAD_CHECK(o.beta2() >= 0.0 && o.beta2() < 1.0, fn, ": beta2=", o.beta2(),
              " must be in [0, 1)");
  check_finite_non_negative(fn.c_str(), "eps", o.eps());
  check_finite_non_negative(fn.c_str(), "weight_decay", o.weight_decay());
}

std::vector<std::string> Adam::state_names() const {
  for (const OptimizerParamGroup& group : param_groups()) {
    if (static_cast<const AdamOptions&>(group.options()).amsgrad())
      return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::step() {
  NoGradGuard no_grad;
  check_groups();
  // First everything that can fail (checks, allocating the new moments), then the updates,
  // which cannot: a failed step changes nothing. Each parameter's update is one fused backend
  // call (Backend::adam_step, the formula below in the order of PyTorch's single-tensor Adam)
  // that writes the parameter in place, as PyTorch's does; the moments go to fresh tensors,
  // since state_dict() hands out the current ones.
  struct Update {
    Tensor p, g, m, v, vmax, m_new, v_new, vmax_new;
    AdamStep s;
  };
  std::vector<Update> updates;
  std::vector<std::map<std::string, Tensor>> new_state = state_snapshot();
  std::vector<int64_t> new_steps = steps_;
  size_t i = 0;  // index in params(), across groups
  for (const OptimizerParamGroup& group : param_groups()) {
    const auto& o = static_cast<const AdamOptions&>(group.options());
    const double b1 = o.beta1(), b2 = o.beta2(), wd = o.weight_decay(), lr = o.lr();
    for (size_t k = 0; k < group.params().size(); ++k, ++i) {
      const Tensor& p = group.params()[k];
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      Update u;
      u.p = p;
      u.g = g;
      u.m = state(i, "exp_avg");
      u.v = state(i, "exp_avg_sq");
      if (!u.m.defined()) u.m = zeros_like(p);
      if (!u.v.defined()) u.v = zeros_like(p);
      const int64_t t = ++new_steps[i];
      AdamStep& s = u.s;
      s.beta1 = b1;
      s.one_minus_beta1 = 1.0 - b1;
      s.beta2 = b2;
      s.one_minus_beta2 = 1.0 - b2;
      // Adam adds weight_decay * p to the gradient; AdamW scales p by 1 - lr * weight_decay.
      s.coupled_weight_decay = decoupled_ ? 0.0 : wd;
      s.param_scale = decoupled_ ? 1.0 - lr * wd : 1.0;
      const double bias_correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
      const double bias_correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
      s.inv_bias_correction2_sqrt = 1.0 / std::sqrt(bias_correction2);
      s.eps = o.eps();
      s.neg_step_size = -(lr / bias_correction1);
      s.amsgrad = o.amsgrad();
      if (o.amsgrad()) u.vmax = state(i, "max_exp_avg_sq");
      u.m_new = empty_like(p);
      u.v_new = empty_like(p);
      if (o.amsgrad()) u.vmax_new = empty_like(p);
      check_adam_step(s, p, g, u.m, u.v, u.vmax.defined() ? &u.vmax : nullptr, p, u.m_new,
                      u.v_new, o.amsgrad() ? &u.vmax_new : nullptr);
      new_state[i]["exp_avg"] = u.m_new;
      new_state[i]["exp_avg_sq"] = u.v_new;
      if (o.amsgrad()) new_state[i]["max_exp_avg_sq"] = u.vmax_new;
      updates.push_back(std::move(u));
    }
  }
  for (const Update& u : updates)
    detail::check_inplace_write("Adam.step", u.p);
  for (Update& u : updates) {
    detail::begin_inplace_write("Adam.step", u.p);
    backend(u.p.device())
        .adam_step(u.s, u.p, u.g, u.m, u.v, u.vmax.defined() ? &u.vmax : nullptr, u.p, u.m_new,
                   u.v_new, u.s.amsgrad ? &u.vmax_new : nullptr);
  }
  commit({}, std::move(new_state), std::move(new_steps));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam("AdamW", one_group(std::move(params)), defaults, true) {}

AdamW::AdamW(std::vector<OptimizerParamGroup> param_groups, const AdamOptions& defaults)
    : Adam("AdamW", std::move(param_groups), defaults, true) {}

}  // namespace tgrad::optim
