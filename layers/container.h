// Containers and shape modules: Sequential (children named "0", "1", ...; forward chains them),
// Unflatten(dim, sizes) and Flatten(start_dim, end_dim), as in PyTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>

#include "layers/module.h"

namespace tgrad::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  // Appends `module` as child str(size()).
  void push_back(ModulePtr module);
  size_t size() const { return named_children().size(); }
  const ModulePtr& operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;
};

// Expands dimension `dim` (negative counts from the end) into `sizes`; one size may be -1.
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape sizes);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t dim_;
  Shape sizes_;
};

// Merges dimensions start_dim..end_dim (inclusive, negative counts from the end) into one.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& stream) const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

}  // namespace tgrad::nn
