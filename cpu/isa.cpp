// Run-time choice among the levels the hot CPU kernels were compiled for (cpu/CMakeLists.txt):
// the CPU's features (__builtin_cpu_supports, which also checks that the OS saves the AVX and
// AVX-512 registers), capped by TGRAD_CPU_CAPABILITY; and the tgrad::cpu kernel entry points,
// each forwarding to the copy of the level in use.
#include "cpu/isa.h"

#include <atomic>
#include <cstdlib>

#include "core/device.h"
#include "cpu/kernels.h"

namespace tgrad {
namespace cpu {
namespace {

bool cpu_has_avx2_level() {
#if defined(TGRAD_CPU_MULTI_ISA) && (defined(__x86_64__) || defined(__i386__))
  // x86-64-v3, the flags the avx2 copy is compiled with: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE.
  __builtin_cpu_init();
  const bool core = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
#if defined(__clang__) && __clang_major__ < 16
  // Clang before 16 (the fuzz build's) has no "f16c", "lzcnt" or "movbe" for this builtin; every
  // CPU with AVX2, FMA and BMI2 has them (Haswell and Zen onwards).
  return core;
#else
  return core && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("lzcnt") &&
         __builtin_cpu_supports("movbe");
#endif
#else
  return false;
#endif
}

bool cpu_has_avx512_level() {
#if defined(TGRAD_CPU_MULTI_ISA) && (defined(__x86_64__) || defined(__i386__))
  // x86-64-v4: v3 plus AVX-512 F, BW, CD, DQ and VL.
  return cpu_has_avx2_level() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

// -1 until the first kernel call reads TGRAD_CPU_CAPABILITY (or set_capability sets it).
std::atomic<int> g_capability{-1};

}  // namespace

const char* capability_name(Capability c) {
  switch (c) {
    case Capability::default_:
      return "default";
    case Capability::avx2:
      return "avx2";
    case Capability::avx512:
      return "avx512";
  }
  return "unknown";
}

Capability best_capability() {
  static const Capability best = cpu_has_avx512_level() ? Capability::avx512
                                 : cpu_has_avx2_level() ? Capability::avx2
                                                        : Capability::default_;
  return best;
}

Capability capability_from_env(const std::string& value, Capability best) {
  if (value.empty()) return best;
  Capability asked = Capability::default_;
  if (value == "default") {
    asked = Capability::default_;
  } else if (value == "avx2") {
    asked = Capability::avx2;
  } else if (value == "avx512") {
    asked = Capability::avx512;
  } else {
    TGRAD_FAIL("cpu backend: TGRAD_CPU_CAPABILITY='", value,
               "' must be one of default, avx2, avx512");
  }
  TGRAD_CHECK(static_cast<int>(asked) <= static_cast<int>(best),
              "cpu backend: TGRAD_CPU_CAPABILITY='", value,
              "' is not available: this CPU and build ", "support at most '", capability_name(best),
              "'");
  return asked;
}

Capability capability() {
  int c = g_capability.load(std::memory_order_relaxed);
  if (c < 0) {
    const char* env = std::getenv("TGRAD_CPU_CAPABILITY");
    const Capability chosen = capability_from_env(env != nullptr ? env : "", best_capability());
    c = static_cast<int>(chosen);
    g_capability.store(c, std::memory_order_relaxed);
  }
  return static_cast<Capability>(c);
}

void set_capability(Capability c) {
  TGRAD_CHECK(
      static_cast<int>(c) >= 0 && static_cast<int>(c) <= static_cast<int>(best_capability()),
      "cpu backend: set_capability: level '", capability_name(c),
      "' is not available: this CPU and build support at most '",
      capability_name(best_capability()), "'");
  g_capability.store(static_cast<int>(c), std::memory_order_relaxed);
}

// Calls isa_<level>::fn(args...) for the level in use.
#ifdef TGRAD_CPU_MULTI_ISA
#define TGRAD_CPU_DISPATCH(fn, ...)       \
  switch (capability()) {                 \
    case Capability::avx512:              \
      return isa_avx512::fn(__VA_ARGS__); \
    case Capability::avx2:                \
      return isa_avx2::fn(__VA_ARGS__);   \
    case Capability::default_:            \
      break;                              \
  }                                       \
  return isa_default::fn(__VA_ARGS__)
#else
#define TGRAD_CPU_DISPATCH(fn, ...) \
  (void)capability();               \
  return isa_default::fn(__VA_ARGS__)
#endif

void fill(Tensor& y, double value) {
  TGRAD_CPU_DISPATCH(fill, y, value);
}
void cast(const Tensor& x, Tensor& y) {
  TGRAD_CPU_DISPATCH(cast, x, y);
}
void unary(UnaryOp op, double p, const Tensor& x, Tensor& y) {
  TGRAD_CPU_DISPATCH(unary, op, p, x, y);
}
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  TGRAD_CPU_DISPATCH(binary, op, a, b, y);
}
void sum_to(const Tensor& x, Tensor& y) {
  TGRAD_CPU_DISPATCH(sum_to, x, y);
}
void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
               const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out,
               Tensor* vmax_out) {
  TGRAD_CPU_DISPATCH(adam_step, s, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out);
}
void matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a, bool transpose_b,
            int threads) {
  TGRAD_CPU_DISPATCH(matmul, a, b, y, transpose_a, transpose_b, threads);
}
void conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                            const Tensor* b, Tensor& y, int threads) {
  TGRAD_CPU_DISPATCH(conv_transpose_forward, g, x, w, b, y, threads);
}
void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w, Tensor& dx,
                          int threads) {
  TGRAD_CPU_DISPATCH(conv_transpose_dgrad, g, dy, w, dx, threads);
}
void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                          int threads) {
  TGRAD_CPU_DISPATCH(conv_transpose_wgrad, g, x, dy, dw, threads);
}
void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db, int threads) {
  TGRAD_CPU_DISPATCH(conv_transpose_bias_grad, g, dy, db, threads);
}

}  // namespace cpu

std::string get_cpu_capability() {
  return cpu::capability_name(cpu::capability());
}

}  // namespace tgrad
