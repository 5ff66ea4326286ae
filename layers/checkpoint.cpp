// Module and optimizer checkpoints on top of the safetensors reader and writer.
#include "layers/checkpoint.h"

#include <map>
#include <vector>

#include "core/autograd.h"

namespace tgrad::nn {

namespace {

constexpr const char* kOptimizerPrefix = "optimizer.";

}  // namespace

void load_state_dict(Module& module, const NamedTensors& state) {
  const std::string fn = "load_state_dict(" + module.type_name() + ")";
  // Parameters and buffers alike: every key of the module's state dict.
  const NamedTensors params = module.state_dict();
  std::map<std::string, Tensor> given;
  for (const auto& [name, t] : state) {
    TGRAD_CHECK(given.emplace(name, t).second, fn, ": key '", name, "' appears twice");
  }
  std::vector<std::string> missing, unexpected;
  std::map<std::string, bool> known;
  for (const auto& [name, p] : params) {
    known[name] = true;
    if (!given.count(name)) missing.push_back(name);
  }
  for (const auto& [name, t] : given) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  TGRAD_CHECK(missing.empty() && unexpected.empty(), fn, ": missing keys ", missing,
              ", unexpected keys ", unexpected);
  for (const auto& [name, p] : params) {
    const Tensor& t = given[name];
    TGRAD_CHECK(t.defined(), fn, ": '", name, "' is undefined");
    TGRAD_CHECK(t.shape() == p.shape(), fn, ": '", name, "' has shape ", t.shape(),
                " in the checkpoint but ", p.shape(), " in the module");
    TGRAD_CHECK(t.dtype() == p.dtype(), fn, ": '", name, "' is ", t.dtype(),
                " in the checkpoint but ", p.dtype(), " in the module");
  }
  // Stage on each parameter's device first (the step that can fail), then copy.
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor, Tensor>> staged;
  for (const auto& [name, p] : params)
    staged.emplace_back(p, given[name].detach().to(p.device()));
  for (auto& [p, t] : staged)
    p.copy_(t);
}

void save_module(const Module& module, const std::string& path) {
  safetensors::save(path, module.state_dict(), {{"format", "pt"}});
}

void load_module(Module& module, const std::string& path) {
  const safetensors::File file = safetensors::load(path);
  try {
    load_state_dict(module, file.tensors);
  } catch (const Error& e) {
    TGRAD_FAIL("load_module: '", path, "': ", e.what());
  }
}

void save_optimizer(const optim::Optimizer& optimizer, const std::string& path,
                    const safetensors::Metadata& extra) {
  NamedTensors tensors;
  for (auto& [name, t] : optimizer.state_dict())
    tensors.emplace_back(kOptimizerPrefix + name, t);
  safetensors::Metadata metadata = extra;
  metadata["format"] = "pt";
  metadata["optimizer"] = optimizer.type_name();
  safetensors::save(path, tensors, metadata);
}

safetensors::Metadata load_optimizer(optim::Optimizer& optimizer, const std::string& path) {
  const std::string fn = "load_optimizer: '" + path + "'";
  safetensors::File file = safetensors::load(path);
  const auto it = file.metadata.find("optimizer");
  TGRAD_CHECK(it != file.metadata.end(), fn, ": no 'optimizer' entry in __metadata__");
  TGRAD_CHECK(it->second == optimizer.type_name(), fn, ": the file holds ", it->second,
              " state but the optimizer is ", optimizer.type_name());
  NamedTensors state;
  std::vector<std::string> unexpected;
  const std::string prefix = kOptimizerPrefix;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(prefix, 0) == 0) {
      state.emplace_back(name.substr(prefix.size()), t);
    } else {
      unexpected.push_back(name);
    }
  }
  TGRAD_CHECK(unexpected.empty(), fn, ": unexpected keys ", unexpected, " (expected '", prefix,
              "...')");
  try {
    optimizer.load_state_dict(state);
  } catch (const Error& e) {
    TGRAD_FAIL(fn, ": ", e.what());
  }
  return file.metadata;
}

}  // namespace tgrad::nn
