// The public device-level settings and queries: CUDA availability and memory statistics, a cap
// on the bytes tensors may hold, and the float32 precision of CUDA convolutions and matmuls.
// (The backend interface behind them, core/backend.h, is internal and not installed.)
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tgrad {

// How CUDA conv kernels and cuBLAS matmuls may compute float32 work (like
// torch.set_float32_matmul_precision): highest = float32-accurate; high = TF32 tensor cores
// allowed. Each kernel reads the setting when it runs, so a backward uses the precision in force
// at backward time.
enum class Precision { highest, high };

// True when tgrad was built with CUDA and at least one device is present.
bool cuda_is_available();
int cuda_device_count();
namespace cuda {
// LibTorch's spellings: tgrad::cuda::is_available(), tgrad::cuda::device_count().
inline bool is_available() {
  return cuda_is_available();
}
inline int device_count() {
  return cuda_device_count();
}
}  // namespace cuda
// The caching allocator's statistics and cache release, as torch.cuda.memory_allocated() etc.
int64_t cuda_memory_allocated(int device = 0);
int64_t cuda_memory_reserved(int device = 0);
int64_t cuda_max_memory_allocated(int device = 0);
void cuda_empty_cache(int device = 0);
void cuda_synchronize(int device = 0);

// Caps the bytes that live tensors (and kernel workspaces) may hold on `device`; 0 removes the
// cap. Allocations past it throw tgrad::Error as a real out-of-memory would: a way to test
// that a computation fails cleanly when memory runs out, and to bound an embedding program.
void set_memory_limit(Device device, int64_t bytes);
int64_t memory_limit(Device device);

// The threads the CPU backend's kernels may use (as torch::set_num_threads): by default the
// TGRAD_NUM_THREADS environment variable, else the CPUs of the process's affinity mask. Results
// are bit-identical for any setting. The threads are one persistent team, started on first use;
// a call that arrives while the team is busy (from another thread of yours) runs on its own
// thread rather than oversubscribing the cores.
void set_num_threads(int threads);
int get_num_threads();

// The instruction-set level of the CPU kernels in use (as PyTorch's get_cpu_capability):
// "avx512", "avx2" or "default" (baseline x86-64, or any other CPU), the best this CPU and build
// support unless the TGRAD_CPU_CAPABILITY environment variable asks for a lower one.
std::string get_cpu_capability();

// The float32 precision: "highest" (default) or "high" (TF32 allowed).
void set_float32_matmul_precision(const std::string& precision);
std::string get_float32_matmul_precision();
Precision float32_precision();

// Which kernel runs each CUDA conv_transpose pass (docs/kernels.md, "How a kernel is chosen").
// set_conv_trace(true) prints one line per call to stderr: pass, geometry, precision, the kernel
// and its configuration, and why each candidate above it was declined (TGRAD_CONV_TRACE=1 in the
// environment turns it on at start). set_conv_kernel forces a kernel, for tests and benchmarks:
// "" lets the planner choose (default), a name ("wgmma", "mma.sync", "batch-igemm", "depthwise",
// "thin", "direct", "gemm", "fma")
// applies to every pass that has it, "fwd=wgmma,dgrad=mma.sync,wgrad=fma" (any subset) names it
// per pass; unknown
// names throw tgrad::Error, and a call the forced kernel cannot run throws tgrad::Error naming
// the kernel and the reason (TGRAD_CONV_KERNEL in the environment sets it at start).
void set_conv_trace(bool enabled);
bool get_conv_trace();
void set_conv_kernel(const std::string& spec);
std::string get_conv_kernel();

// Benchmark mode, as torch.backends.cudnn.benchmark (off by default; TGRAD_CONV_BENCHMARK=1 in
// the environment turns it on at start): the first CUDA conv_transpose call of each (pass,
// geometry, dtype and precision, device model) runs every kernel that can take it on the call's
// own tensors, times them, and keeps the fastest for the later calls of the same inputs (the
// trace line then lists each candidate's time). Every kernel is deterministic, so a geometry's
// results stay bit-identical from call to call; which kernel wins may differ between runs of a
// program, as with cuDNN's search. A kernel forced with set_conv_kernel takes precedence.
void set_conv_benchmark(bool enabled);
bool get_conv_benchmark();

}  // namespace tgrad
