// Containers and shape modules: Sequential (children named "0", "1", ...; forward chains them),
// Unflatten(dim, sizes) and Flatten(start_dim, end_dim), as in PyTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "layers/module.h"

namespace tgrad::nn {

class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}
  SequentialImpl(std::initializer_list<ModulePtr> modules);
  // Sequential(nn::Conv2d(...), nn::LeakyReLU(...), ...): holders or shared pointers, as
  // LibTorch's variadic constructor.
  template <class First, class... Rest>
    requires(!std::is_same_v<std::decay_t<First>, std::initializer_list<ModulePtr>>)
  explicit SequentialImpl(First&& first, Rest&&... rest) : SequentialImpl() {
    push_back(std::forward<First>(first));
    (push_back(std::forward<Rest>(rest)), ...);
  }
  // Appends `module` as child str(size()). forward() calls the module's own forward as its
  // static type declares it, so a user module whose forward hides Module::forward (LibTorch
  // style, `Tensor forward(Tensor x)`) runs its own.
  void push_back(ModulePtr module);
  template <class M>
    requires(std::is_base_of_v<Module, M> && !std::is_same_v<M, Module>)
  void push_back(std::shared_ptr<M> module) {
    TGRAD_CHECK(module != nullptr, "Sequential::push_back: module ", size(), " is null");
    M* raw = module.get();
    append(std::move(module), [raw](const Tensor& x) { return raw->forward(x); });
  }
  template <class Holder>
    requires is_module_holder_v<Holder>
  void push_back(const Holder& holder) {
    push_back(holder.ptr());
  }
  size_t size() const { return named_children().size(); }
  const ModulePtr& operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;

 private:
  void append(ModulePtr module, std::function<Tensor(const Tensor&)> forward);
  std::vector<std::function<Tensor(const Tensor&)>> forwards_;
};
TGRAD_MODULE(Sequential);

// Expands dimension `dim` (negative counts from the end) into `sizes`; one size may be -1.
class UnflattenImpl : public Module {
 public:
  UnflattenImpl(int64_t dim, Shape sizes);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t dim_;
  Shape sizes_;
};
TGRAD_MODULE(Unflatten);

// Merges dimensions start_dim..end_dim (inclusive, negative counts from the end) into one.
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};
TGRAD_MODULE(Flatten);

}  // namespace tgrad::nn
