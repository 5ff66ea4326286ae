// Checkpoints: a module's parameters as a safetensors file with PyTorch state_dict names and
// shapes and __metadata__ {"format": "pt"} (loadable by torch.nn's load_state_dict), and an
// optimizer's state in a second file ("optimizer.state.<i>.exp_avg", ...) so a run can resume.
// Every load validates the whole file against the target and then changes all or nothing.
#pragma once

#include <string>

#include "layers/module.h"
#include "layers/optimizer.h"
#include "layers/safetensors.h"

namespace tgrad::nn {

// Copies `state` into `module`'s parameters. Names, shapes and dtypes must match exactly; a
// mismatch throws tgrad::Error listing the missing and unexpected keys (or the bad shape) and
// leaves every parameter untouched.
void load_state_dict(Module& module, const NamedTensors& state);

void save_module(const Module& module, const std::string& path);
void load_module(Module& module, const std::string& path);
// The same for a module given by its holder (nn::Linear, a TGRAD_MODULE class).
template <class Holder>
  requires is_module_holder_v<Holder>
void load_state_dict(const Holder& module, const NamedTensors& state) {
  load_state_dict(*module.ptr(), state);
}
template <class Holder>
  requires is_module_holder_v<Holder>
void save_module(const Holder& module, const std::string& path) {
  save_module(*module.ptr(), path);
}
template <class Holder>
  requires is_module_holder_v<Holder>
void load_module(const Holder& module, const std::string& path) {
  load_module(*module.ptr(), path);
}

// Saves optimizer.state_dict() with keys prefixed "optimizer." and metadata {"format": "pt",
// "optimizer": type name} plus `extra` (e.g. the training step to resume from).
void save_optimizer(const optim::Optimizer& optimizer, const std::string& path,
                    const safetensors::Metadata& extra = {});
// Restores an optimizer saved by save_optimizer (same optimizer type) and returns the file's
// metadata.
safetensors::Metadata load_optimizer(optim::Optimizer& optimizer, const std::string& path);

}  // namespace tgrad::nn

namespace tgrad {
// LibTorch's torch::save / torch::load spellings for a module (its holder or the module
// itself) and an optimizer. The file is safetensors whatever its name, as save_module writes.
inline void save(const nn::Module& module, const std::string& path) {
  nn::save_module(module, path);
}
inline void load(nn::Module& module, const std::string& path) { nn::load_module(module, path); }
template <class Holder>
  requires nn::is_module_holder_v<Holder>
void save(const Holder& module, const std::string& path) {
  nn::save_module(*module.ptr(), path);
}
template <class Holder>
  requires nn::is_module_holder_v<Holder>
void load(const Holder& module, const std::string& path) {
  nn::load_module(*module.ptr(), path);
}
inline void save(const optim::Optimizer& optimizer, const std::string& path) {
  nn::save_optimizer(optimizer, path);
}
inline void load(optim::Optimizer& optimizer, const std::string& path) {
  nn::load_optimizer(optimizer, path);
}
}  // namespace tgrad
