// nn::ModuleHolder and TGRAD_MODULE: LibTorch's module handles. Each layer is a class
// `XImpl` (the Module) and a holder `X`, a shared pointer to one XImpl: copies share the module,
// `x->member` reaches it and `x(input)` calls its forward, so LibTorch code such as
//   struct GeneratorImpl : nn::Module { nn::ConvTranspose2d up{nullptr}; ... };
//   TGRAD_MODULE(Generator);
// reads the same in tgrad (docs/design.md, "LibTorch's names and habits").
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace tgrad::nn {

class Module;

template <class Impl>
class ModuleHolder;

namespace holder_detail {
template <class T>
struct is_module_holder_impl {
  template <class Impl>
  static std::true_type test(const ModuleHolder<Impl>*);
  static std::false_type test(...);
  static constexpr bool value = decltype(test(std::declval<const T*>()))::value;
};
}  // namespace holder_detail

// True for ModuleHolder<Impl> and the classes TGRAD_MODULE defines.
template <class T>
inline constexpr bool is_module_holder_v = holder_detail::is_module_holder_impl<std::decay_t<T>>::value;

template <class Impl>
class ModuleHolder {
 public:
  using ContainedType = Impl;

  // An empty holder, to be assigned later (LibTorch's `nn::Linear fc{nullptr};`).
  ModuleHolder(std::nullptr_t) {}  // NOLINT(google-explicit-constructor)
  // A new Impl built from no arguments, when Impl has such a constructor.
  ModuleHolder()
    requires std::is_default_constructible_v<Impl>
      : impl_(std::make_shared<Impl>()) {}
  // Shares an existing module.
  ModuleHolder(std::shared_ptr<Impl> module)  // NOLINT(google-explicit-constructor)
      : impl_(std::move(module)) {}
  // A new Impl built from the arguments: `nn::Conv2d conv(nn::Conv2dOptions(3, 8, 3));`.
  template <class Arg, class... Args>
    requires(!(std::is_base_of_v<ModuleHolder, std::decay_t<Arg>> && sizeof...(Args) == 0) &&
             !std::is_same_v<std::decay_t<Arg>, std::nullptr_t> &&
             !std::is_same_v<std::decay_t<Arg>, std::shared_ptr<Impl>> &&
             std::is_constructible_v<Impl, Arg &&, Args && ...>)
  explicit ModuleHolder(Arg&& arg, Args&&... args)
      : impl_(std::make_shared<Impl>(std::forward<Arg>(arg), std::forward<Args>(args)...)) {}

  // Containers: `nn::Sequential seq{a, b, c};` with modules as shared pointers.
  template <class T = Impl>
    requires std::is_constructible_v<T, std::initializer_list<std::shared_ptr<Module>>>
  ModuleHolder(std::initializer_list<std::shared_ptr<Module>> modules)
      : impl_(std::make_shared<Impl>(modules)) {}

  Impl* operator->() { return get(); }
  const Impl* operator->() const { return get(); }
  Impl& operator*() { return *get(); }
  const Impl& operator*() const { return *get(); }
  Impl* get() {
    check_not_empty();
    return impl_.get();
  }
  const Impl* get() const {
    check_not_empty();
    return impl_.get();
  }
  const std::shared_ptr<Impl>& ptr() const {
    check_not_empty();
    return impl_;
  }
  bool is_empty() const { return impl_ == nullptr; }

  // Calls the module's forward with the arguments (whatever forward the Impl declares).
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return get()->forward(std::forward<Args>(args)...);
  }

 private:
  void check_not_empty() const {
    TGRAD_CHECK(impl_ != nullptr,
                "ModuleHolder: the holder is empty (it was made from nullptr and never "
                "assigned a module)");
  }
  std::shared_ptr<Impl> impl_;
};

}  // namespace tgrad::nn

// Defines the holder `Name` for the module class `Name##Impl`, as LibTorch's TORCH_MODULE.
#define TGRAD_MODULE(Name)                                               \
  class Name : public ::tgrad::nn::ModuleHolder<Name##Impl> { /* NOLINT */ \
   public:                                                               \
    using ::tgrad::nn::ModuleHolder<Name##Impl>::ModuleHolder;           \
    using Impl = Name##Impl;                                             \
  }
