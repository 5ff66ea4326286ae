// nn::Module: registration, dotted names, train/eval, zero_grad, in-place device/dtype moves.
#include "layers/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

#include <ostream>
#include <unordered_set>

#include "core/autograd.h"
#include "layers/utf8.h"

namespace tgrad::nn {

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

std::string Module::type_name() const {
  if (!type_name_.empty()) return type_name_;
  // The dynamic type's demangled name without its namespaces ("DCGANGeneratorImpl").
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  const size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

Tensor Module::forward(const Tensor&) {
  TGRAD_FAIL(type_name(), ": this module has no single-input forward(const Tensor&)");
}

void Module::check_new_name(const std::string& what, const std::string& name) const {
  TGRAD_CHECK(!name.empty(), type_name(), ": ", what, " name must not be empty");
  TGRAD_CHECK(name.find('.') == std::string::npos, type_name(), ": ", what, " name '", name,
              "' must not contain '.'");
  // Names end up in state dicts and checkpoint headers, whose strings must be UTF-8.
  const size_t bad = detail::utf8_error_at(name);
  TGRAD_CHECK(bad == std::string::npos, type_name(), ": ", what, " name \"", detail::printable(name),
              "\" is not valid UTF-8 (at byte ", bad, ")");
  for (const auto& [n, p] : parameters_) {
    TGRAD_CHECK(n != name, type_name(), ": a parameter named '", name, "' is already registered");
  }
  for (const auto& [n, m] : children_) {
    TGRAD_CHECK(n != name, type_name(), ": a submodule named '", name, "' is already registered");
  }
  for (const auto& [n, b] : buffers_) {
    TGRAD_CHECK(n != name, type_name(), ": a buffer named '", name, "' is already registered");
  }
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name("parameter", name);
  TGRAD_CHECK(t.defined(), type_name(), ": parameter '", name, "' is an undefined tensor");
  TGRAD_CHECK(t.is_leaf(), type_name(), ": parameter '", name,
              "' must be a leaf tensor (detach() it first)");
  t.requires_grad_(requires_grad);
  parameters_.emplace_back(name, t);
  return t;
}

void Module::register_module_impl(const std::string& name, const ModulePtr& module) {
  check_new_name("submodule", name);
  TGRAD_CHECK(module != nullptr, type_name(), ": submodule '", name, "' is null");
  TGRAD_CHECK(module.get() != this, type_name(), ": cannot register a module as its own child");
  // A module that already contains this one would make the tree a cycle, and every walk over it
  // (parameters(), train(), to()) endless: refuse it now, walking the child's subtree without
  // recursion.
  std::vector<const Module*> stack{module.get()};
  std::unordered_set<const Module*> seen;
  while (!stack.empty()) {
    const Module* m = stack.back();
    stack.pop_back();
    if (!seen.insert(m).second) continue;
    TGRAD_CHECK(m != this, type_name(), ": submodule '", name, "' (a ", module->type_name(),
                ") already contains this module; registering it would make a cycle");
    for (const auto& [child_name, child] : m->children_)
      stack.push_back(child.get());
  }
  children_.emplace_back(name, module);
}

void Module::collect(const std::string& prefix, bool recurse, bool params, bool buffers,
                     NamedTensors& out, std::unordered_set<const TensorImpl*>& seen) const {
  if (params) {
    for (const auto& [name, p] : parameters_) {
      if (seen.insert(p.impl()).second) out.emplace_back(prefix + name, p);
    }
  }
  if (buffers) {
    for (const auto& [name, b] : buffers_) {
      if (seen.insert(b.impl()).second) out.emplace_back(prefix + name, b);
    }
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->collect(prefix + name + ".", true, params, buffers, out, seen);
}

NamedTensors Module::named_parameters(bool recurse) const {
  // A layer reused in several places (one Sequential listing it twice, a shared embedding)
  // contributes its parameters once, under the first name, as PyTorch's named_parameters().
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", recurse, true, false, out, seen);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", recurse, false, true, out, seen);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, b] : named_buffers(recurse))
    out.push_back(b);
  return out;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name("buffer", name);
  TGRAD_CHECK(t.defined(), type_name(), ": buffer '", name, "' is an undefined tensor");
  TGRAD_CHECK(!t.requires_grad(), type_name(), ": buffer '", name,
              "' requires grad; a buffer is state, not a parameter (register_parameter)");
  buffers_.emplace_back(name, t);
  return t;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters(recurse))
    out.push_back(p);
  return out;
}

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (const auto& [name, child] : children_)
    out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_modules() const {
  // Pre-order (a module before its children, children in registration order), through a stack;
  // a module reached twice is listed once, under its first name.
  std::vector<std::pair<std::string, ModulePtr>> out, stack;
  std::unordered_set<const Module*> seen{this};
  auto push_children = [&stack](const std::string& prefix, const Module& m) {
    for (auto it = m.children_.rbegin(); it != m.children_.rend(); ++it)
      stack.emplace_back(prefix.empty() ? it->first : prefix + "." + it->first, it->second);
  };
  push_children("", *this);
  while (!stack.empty()) {
    auto [name, m] = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(m.get()).second) continue;
    out.emplace_back(name, m);
    push_children(name, *m);
  }
  return out;
}

std::vector<ModulePtr> Module::modules() const {
  std::vector<ModulePtr> out;
  for (auto& [name, m] : named_modules())
    out.push_back(m);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  // Children before their parent, each module once, as PyTorch's apply.
  std::unordered_set<const Module*> seen;
  std::function<void(Module&)> visit = [&](Module& m) {
    if (!seen.insert(&m).second) return;
    for (auto& [name, child] : m.children_)
      visit(*child);
    fn(m);
  };
  visit(*this);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_)
    child->train(on);
}

namespace {

// Converts every parameter (and its grad) with `convert`, staging all results first so that a
// failure (no such device, out of memory) leaves every parameter as it was.
template <class Convert>
void move_parameters(const std::vector<Tensor>& params, const std::vector<Tensor>& buffers,
                     Convert convert) {
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> staged;  // (target, converted) for params and grads
  for (const Tensor& p : params) {
    staged.emplace_back(p, convert(p.detach()));
    const Tensor g = p.grad();
    if (g.defined()) staged.emplace_back(g, convert(g.detach()));
  }
  for (const Tensor& b : buffers)
    staged.emplace_back(b, convert(b.detach()));
  // set_data keeps every handle valid and counts as a write, so a graph that saved a parameter
  // before the move refuses to run backward instead of mixing old and new data.
  for (auto& [target, converted] : staged)
    target.set_data(converted);
}

}  // namespace

void Module::to(Device device) {
  move_parameters(parameters(), buffers(), [&](const Tensor& t) { return t.to(device); });
}

void Module::to(DType dtype) {
  // As PyTorch's Module.to(dtype): floating tensors convert, integer buffers (counters) keep
  // their dtype.
  move_parameters(parameters(), buffers(),
                  [&](const Tensor& t) { return t.is_floating_point() ? t.to(dtype) : t; });
}

void zero_grads(const std::vector<Tensor>& params, bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (set_to_none) {
      p.zero_grad();
    } else if (p.grad().defined()) {
      Tensor g = p.grad();
      g.zero_();
    }
  }
}

void Module::zero_grad(bool set_to_none) {
  zero_grads(parameters(), set_to_none);
}

NamedTensors Module::state_dict() const {
  NamedTensors all, out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", true, true, true, all, seen);
  for (auto& [name, p] : all)
    out.emplace_back(name, p.detach());
  return out;
}

void Module::pretty_print(std::ostream& stream) const {
  // A leaf without options prints as PyTorch's "ReLU()"; a container's parentheses hold its
  // children and come from operator<<.
  stream << type_name();
  if (children_.empty()) stream << "()";
}

namespace {

// Registration refuses cycles, so this recursion ends; its depth is the tree's.
void print_tree(std::ostream& stream, const Module& module, const std::string& indent) {
  module.pretty_print(stream);
  if (module.named_children().empty()) return;
  stream << "(\n";
  const std::string inner = indent + "  ";
  for (const auto& [name, child] : module.named_children()) {
    stream << inner << "(" << name << "): ";
    print_tree(stream, *child, inner);
    stream << "\n";
  }
  stream << indent << ")";
}

}  // namespace

std::ostream& operator<<(std::ostream& stream, const Module& module) {
  print_tree(stream, module, "");
  return stream;
}

}  // namespace tgrad::nn

namespace tgrad::detail {

void print_int_list(std::ostream& stream, const int64_t* values, size_t n) {
  stream << "[";
  for (size_t i = 0; i < n; ++i)
    stream << (i ? ", " : "") << values[i];
  stream << "]";
}

}  // namespace tgrad::detail
