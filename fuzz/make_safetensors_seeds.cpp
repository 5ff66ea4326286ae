// Writes the seed corpus of the safetensors fuzz target: small valid files from tgrad's own
// writer (both dtypes, every rank, empty and 0-d tensors, metadata, no tensors), and hand-made
// headers that must be refused: JSON nested at and past the depth limit, names and keys given
// twice. Usage: make_safetensors_seeds <directory>
#include <fstream>
#include <iostream>
#include <string>

#include "core/ops.h"
#include "core/random.h"
#include "layers/safetensors.h"

namespace {

// A file of `header` (length-prefixed as the format wants) followed by `data`.
void write_raw(const std::string& file, const std::string& header, const std::string& data) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i)
    out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  out << header << data;
}

std::string nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i)
    s += open;
  for (int i = 0; i < depth; ++i)
    s += close;
  return s;
}

// Headers that parse as JSON but break the format's rules on nesting and uniqueness. They stay
// under the 4096 bytes that fuzz/run lets an input grow to, so mutations keep them whole.
void write_hostile_seeds(const std::string& dir) {
  const std::string x = R"({"dtype":"F32","shape":[2],"data_offsets":)";
  // 128 containers are the most the loader accepts, 129 one too many, 1500 far past it.
  write_raw(dir + "/nested_128.safetensors", "{\"x\":" + nested("[", "]", 127) + "}", "");
  write_raw(dir + "/nested_129.safetensors", "{\"x\":" + nested("[", "]", 128) + "}", "");
  write_raw(dir + "/nested_objects.safetensors", nested("{\"a\":", "}", 300), "");
  write_raw(dir + "/nested_deep.safetensors", nested("[", "]", 1500), "");
  write_raw(dir + "/nested_metadata.safetensors",
            "{\"__metadata__\":{\"k\":" + nested("[", "]", 200) + "}}", "");
  write_raw(dir + "/duplicate_same_range.safetensors",
            "{\"x\":" + x + "[0,8]},\"x\":" + x + "[0,8]}}", "12345678");
  write_raw(dir + "/duplicate_other_range.safetensors",
            "{\"x\":" + x + "[0,8]},\"x\":" + x + "[8,16]}}", std::string(16, 'a'));
  write_raw(dir + "/duplicate_field.safetensors",
            R"({"x":{"dtype":"F32","dtype":"F64","shape":[2],"data_offsets":[0,8]}})", "12345678");
  write_raw(dir + "/duplicate_metadata.safetensors",
            R"({"__metadata__":{"a":"1","a":"2"},"__metadata__":{}})", "");
}

}  // namespace

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
  write_hostile_seeds(dir);
  return 0;
}
