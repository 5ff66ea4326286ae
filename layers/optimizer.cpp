// Optimizer state handling and the SGD / Adam / AdamW steps, written with core ops under
// NoGradGuard in the operation order of PyTorch 1.13's single-tensor implementations.
#include "layers/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

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

constexpr const char* kLrKey = "param_groups.0.lr";

}  // namespace

Optimizer::Optimizer(std::string type_name, std::vector<Tensor> params, double lr)
    : type_name_(std::move(type_name)), params_(std::move(params)), lr_(lr) {
  check_finite_non_negative(type_name_.c_str(), "lr", lr);
  TGRAD_CHECK(!params_.empty(), type_name_, ": got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    TGRAD_CHECK(params_[i].defined(), type_name_, ": parameter ", i, " is undefined");
    TGRAD_CHECK(params_[i].is_leaf(), type_name_, ": parameter ", i,
                " is not a leaf tensor; optimizers update leaves only");
    for (size_t j = 0; j < i; ++j) {
      TGRAD_CHECK(params_[i].impl() != params_[j].impl(), type_name_, ": parameter ", i,
                  " is the same tensor as parameter ", j);
    }
  }
  state_.resize(params_.size());
  steps_.assign(params_.size(), 0);
}

void Optimizer::zero_grad(bool set_to_none) {
  nn::zero_grads(params_, set_to_none);
}

void Optimizer::set_lr(double lr) {
  check_finite_non_negative(type_name_.c_str(), "lr", lr);
  lr_ = lr;
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
  out.emplace_back(kLrKey, scalar_tensor(lr_, TensorOptions(kFloat64)));
  return out;
}

void Optimizer::load_state_dict(const nn::NamedTensors& state) {
  const std::string fn = type_name_ + "::load_state_dict";
  const std::vector<std::string> names = state_names();
  std::vector<std::map<std::string, Tensor>> new_state(params_.size());
  std::vector<int64_t> new_steps(params_.size(), 0);
  double new_lr = -1.0;
  std::vector<std::string> unexpected;
  // Validate and convert everything first; commit only when nothing failed.
  for (const auto& [key, t] : state) {
    TGRAD_CHECK(t.defined(), fn, ": tensor '", key, "' is undefined");
    if (key == kLrKey) {
      TGRAD_CHECK(t.numel() == 1, fn, ": '", key, "' must hold one value, got shape ", t.shape());
      new_lr = t.item();
      check_finite_non_negative(fn.c_str(), key.c_str(), new_lr);
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
  TGRAD_CHECK(new_lr >= 0.0, fn, ": missing key '", kLrKey, "'");
  state_ = std::move(new_state);
  steps_ = std::move(new_steps);
  lr_ = new_lr;
}

// ---- SGD ----

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer("SGD", std::move(params), options.lr()), options_(options) {
  check_finite_non_negative("SGD", "momentum", options.momentum());
  check_finite_non_negative("SGD", "dampening", options.dampening());
  check_finite_non_negative("SGD", "weight_decay", options.weight_decay());
  TGRAD_CHECK(!options.nesterov() || (options.momentum() > 0.0 && options.dampening() == 0.0),
              "SGD: nesterov momentum requires momentum > 0 and dampening = 0 (got momentum=",
              options.momentum(), ", dampening=", options.dampening(), ")");
}

std::vector<std::string> SGD::state_names() const {
  return {"momentum_buffer"};
}

void SGD::step() {
  NoGradGuard no_grad;
  const double momentum = options_.momentum();
  // Compute every new value first (the part that can run out of memory), then commit.
  std::vector<std::map<std::string, Tensor>> new_state = state_snapshot();
  std::vector<std::pair<Tensor, Tensor>> new_params;
  for (size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor d = g;
    if (options_.weight_decay() != 0.0) d = d + p * options_.weight_decay();
    if (momentum != 0.0) {
      Tensor buf = state(i, "momentum_buffer");
      buf = buf.defined() ? buf * momentum + d * (1.0 - options_.dampening()) : d.clone();
      new_state[i]["momentum_buffer"] = buf;
      d = options_.nesterov() ? d + buf * momentum : buf;
    }
    new_params.emplace_back(p, p + d * -lr());
  }
  commit(new_params, std::move(new_state), steps_);
}

// ---- Adam / AdamW ----

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

Adam::Adam(const char* type_name, std::vector<Tensor> params, const AdamOptions& options,
           bool decoupled_weight_decay)
    : Optimizer(type_name, std::move(params), options.lr()),
      options_(options),
      decoupled_(decoupled_weight_decay) {
  uses_step_ = true;
  TGRAD_CHECK(options.beta1() >= 0.0 && options.beta1() < 1.0, type_name,
              ": beta1=", options.beta1(), " must be in [0, 1)");
  TGRAD_CHECK(options.beta2() >= 0.0 && options.beta2() < 1.0, type_name,
              ": beta2=", options.beta2(), " must be in [0, 1)");
  check_finite_non_negative(type_name, "eps", options.eps());
  check_finite_non_negative(type_name, "weight_decay", options.weight_decay());
}

std::vector<std::string> Adam::state_names() const {
  if (options_.amsgrad()) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

namespace {

// Elementwise max, exact (core has no maximum op, and b + relu(a - b) can round). Runs on the
// host; only AMSGrad needs it.
Tensor maximum(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to_vector<double>();
  const std::vector<double> vb = b.to_vector<double>();
  for (size_t k = 0; k < va.size(); ++k)
    va[k] = std::max(va[k], vb[k]);
  return from_vector(va, a.shape(), TensorOptions(a.dtype()).device(a.device()));
}

}  // namespace

void Adam::step() {
  NoGradGuard no_grad;
  const double b1 = options_.beta1(), b2 = options_.beta2(), wd = options_.weight_decay();
  // Compute every new value first (the part that can run out of memory), then commit.
  std::vector<std::map<std::string, Tensor>> new_state = state_snapshot();
  std::vector<int64_t> new_steps = steps_;
  std::vector<std::pair<Tensor, Tensor>> new_params;
  for (size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor m = state(i, "exp_avg");
    Tensor v = state(i, "exp_avg_sq");
    if (!m.defined()) m = zeros_like(p);
    if (!v.defined()) v = zeros_like(p);
    const int64_t t = ++new_steps[i];
    Tensor p0 = p;
    if (decoupled_) {
      if (wd != 0.0) p0 = p * (1.0 - lr() * wd);
    } else if (wd != 0.0) {
      g = g + p * wd;
    }
    m = m * b1 + g * (1.0 - b1);
    v = v * b2 + g * g * (1.0 - b2);
    new_state[i]["exp_avg"] = m;
    new_state[i]["exp_avg_sq"] = v;
    const double bias_correction1 = 1.0 - std::pow(b1, static_cast<double>(t));
    const double bias_correction2 = 1.0 - std::pow(b2, static_cast<double>(t));
    const double step_size = lr() / bias_correction1;
    const double bias_correction2_sqrt = std::sqrt(bias_correction2);
    Tensor second = v;
    if (options_.amsgrad()) {
      Tensor vmax = state(i, "max_exp_avg_sq");
      second = vmax.defined() ? maximum(vmax, v) : v.clone();
      new_state[i]["max_exp_avg_sq"] = second;
    }
    const Tensor denom = sqrt(second) / bias_correction2_sqrt + options_.eps();
    new_params.emplace_back(p, p0 + (m / denom) * -step_size);
  }
  commit(new_params, std::move(new_state), std::move(new_steps));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("AdamW", std::move(params), options, true) {}

}  // namespace tgrad::optim
