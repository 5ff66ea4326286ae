// nn::Module: the base of every layer. It owns named parameters and named child modules (in
// registration order, like LibTorch's OrderedDict), and gives PyTorch's dotted names
// ("decoder.2.bias"), train/eval, zero_grad and in-place device/dtype moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "layers/module_holder.h"

namespace tgrad::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Clears the .grad of each tensor: to none, or filled with zeros in place (under NoGradGuard).
void zero_grads(const std::vector<Tensor>& params, bool set_to_none);

class Module {
 public:
  // `type_name` names the module in messages ("ConvTranspose2d: ...") and when printed. A
  // module made with the default constructor (LibTorch style, `struct NetImpl : nn::Module`)
  // is named by its C++ class, as LibTorch names it.
  Module() = default;
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::string type_name() const;

  // Writes this module's one-line description with its options, as LibTorch's pretty_print
  // ("Linear(in_features=4, out_features=2, bias=true)"); the base writes the type name.
  // `std::cout << module` adds the children beneath it (see operator<< below).
  virtual void pretty_print(std::ostream& stream) const;

  // Single-input modules override this; the base throws naming the module type.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Parameters of this module and (with recurse) of every descendant, depth first in
  // registration order; names are dotted paths as in PyTorch's named_parameters(). A parameter
  // reachable twice (a layer reused) is listed once, under its first name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  // Buffers: tensors that are state but not parameters (BatchNorm's running statistics), in
  // state_dict() and checkpoints under PyTorch's names, moved by to(), never trained. Listed
  // like parameters: depth first, registration order, each once.
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<ModulePtr> children() const;
  const std::vector<std::pair<std::string, ModulePtr>>& named_children() const { return children_; }
  // Every descendant (each once), a module before its children, with dotted names as PyTorch's
  // named_modules(), except that the module itself (PyTorch's first entry, named "") is not
  // listed: these are shared handles, and a Module holds none to itself.
  std::vector<ModulePtr> modules() const;
  std::vector<std::pair<std::string, ModulePtr>> named_modules() const;
  // Calls fn on this module and every descendant (children first, then the module, as PyTorch's
  // apply), e.g. to re-initialise every Conv2d.
  void apply(const std::function<void(Module&)>& fn);

  // Training mode, propagated to every descendant (no module here behaves differently yet,
  // but user modules may).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter in place: each parameter's TensorImpl gets the new storage, so
  // handles held elsewhere (an optimizer, user code) see the moved tensor. An existing .grad
  // moves with it. Optimizer state follows lazily (see optim::Optimizer).
  void to(Device device);
  void to(DType dtype);

  // Clears the .grad of every parameter: sets it to none (LibTorch's default), or with
  // set_to_none=false fills it with zeros in place.
  void zero_grad(bool set_to_none = true);

  // Parameters and buffers as a state dict, in PyTorch's order (each module's parameters, then
  // its buffers, then its children's) and names: detached tensors sharing storage.
  NamedTensors state_dict() const;

 protected:
  // Registers `t` as parameter `name` (requires_grad set as asked) and returns the handle.
  // Names must be non-empty, valid UTF-8, contain no '.', and be unique among parameters and
  // children; a child that already contains this module (a cycle) is refused.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // Registers `t` as buffer `name` (same naming rules) and returns the handle.
  Tensor register_buffer(const std::string& name, Tensor t);
  // Registers a child module, given as a shared pointer or a holder (TGRAD_MODULE), and
  // returns it in the form it was given.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    register_module_impl(name, module);
    return module;
  }
  template <class Holder>
    requires is_module_holder_v<Holder>
  Holder register_module(const std::string& name, Holder holder) {
    register_module_impl(name, holder.ptr());
    return holder;
  }

 private:
  void register_module_impl(const std::string& name, const ModulePtr& module);
  void check_new_name(const std::string& what, const std::string& name) const;
  // Appends this module's (and, with recurse, its descendants') parameters and/or buffers.
  void collect(const std::string& prefix, bool recurse, bool params, bool buffers,
               NamedTensors& out, std::unordered_set<const TensorImpl*>& seen) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
};

// Prints the module tree as LibTorch does: the module's pretty_print, then (when it has
// children) one indented line "(name): ..." per child, recursively, closed by ")".
std::ostream& operator<<(std::ostream& stream, const Module& module);
template <class Impl>
std::ostream& operator<<(std::ostream& stream, const ModuleHolder<Impl>& module) {
  return stream << *module;
}

}  // namespace tgrad::nn

namespace tgrad::detail {
// Writes "[v0, v1, ...]", the form LibTorch prints an ExpandingArray in.
void print_int_list(std::ostream& stream, const int64_t* values, size_t n);
}  // namespace tgrad::detail
