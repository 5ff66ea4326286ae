// Writes the seed corpus of the safetensors fuzz target with tgrad's own writer: small valid
// files covering both dtypes, every rank, empty and 0-d tensors, metadata, and no tensors.
// Usage: make_safetensors_seeds <directory>
#include <iostream>
#include <string>

#include "core/ops.h"
#include "core/random.h"
#include "layers/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_safetensors_seeds <directory>\n";
    return 2;
  }
  using namespace tgrad;
  const std::string dir = argv[1];
  Generator gen(7);
  const auto f32 = TensorOptions(kFloat32);
  const auto f64 = TensorOptions(kFloat64);
  safetensors::save(dir + "/empty.safetensors", {}, {});
  safetensors::save(dir + "/one_f32.safetensors", {{"w", randn({3}, gen, f32)}}, {});
  safetensors::save(dir + "/scalar_f64.safetensors", {{"step", scalar_tensor(3.0, f64)}},
                    {{"format", "pt"}});
  safetensors::save(dir + "/conv_module.safetensors",
                    {{"weight", randn({2, 3, 2, 2}, gen, f32)}, {"bias", randn({3}, gen, f32)}},
                    {{"format", "pt"}});
  safetensors::save(dir + "/mixed.safetensors",
                    {{"a", randn({1, 2, 1, 2, 1}, gen, f64)},
                     {"zero_size", zeros({0, 4}, f32)},
                     {"b", randn({2, 2}, gen, f32)}},
                    {{"format", "pt"}, {"optimizer", "Adam"}, {"step", "12"}});
  safetensors::save(dir + "/optimizer.safetensors",
                    {{"optimizer.state.0.exp_avg", randn({4}, gen, f32)},
                     {"optimizer.state.0.exp_avg_sq", rand({4}, gen, f32)},
                     {"optimizer.state.0.step", scalar_tensor(1.0, f64)},
                     {"optimizer.param_groups.0.lr", scalar_tensor(1e-3, f64)}},
                    {{"format", "pt"}, {"optimizer", "Adam"}});
  return 0;
}
