// The x86-64 level whose copy of the hot CPU kernels runs (cpu/kernels.h): the best one this CPU
// and this build support, lowered by TGRAD_CPU_CAPABILITY=default|avx2|avx512 (as PyTorch's
// ATEN_CPU_CAPABILITY). Internal to cpu/ and the tests; get_cpu_capability() is the public view.
#pragma once

#include <string>

namespace tgrad::cpu {

enum class Capability { default_, avx2, avx512 };

// "default", "avx2" or "avx512".
const char* capability_name(Capability c);

// The best level this CPU can run and this build compiled (default_ without the multi-level
// build or off x86-64).
Capability best_capability();

// The level a TGRAD_CPU_CAPABILITY value asks for, checked against `best`: an unknown name or a
// level above `best` throws tgrad::Error naming the variable and the value. Empty: `best`.
Capability capability_from_env(const std::string& value, Capability best);

// The level in use: set by set_capability, else from TGRAD_CPU_CAPABILITY on first use.
Capability capability();

// Switches the level for every later kernel call (tests run each level in one process); a level
// above best_capability() throws tgrad::Error.
void set_capability(Capability c);

}  // namespace tgrad::cpu
