// The conv planner: one function decides, for (pass, geometry, dtype and precision, device),
// which kernel runs a transposed convolution and with which configuration, and records why each
// candidate above it was declined. The CUDA launchers run exactly what the plan says. Plain C++
// (compiled in every build, so the planner's tests run without a GPU). Private to the project.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/conv_geometry.h"
#include "core/dtype.h"
#include "cuda/conv_batch_igemm.h"
#include "cuda/conv_direct.h"
#include "cuda/conv_thin.h"
#include "cuda/conv_tiles.h"

namespace tgrad::cuda {

enum class ConvPass { forward, dgrad, wgrad };

// "fwd", "dgrad", "wgrad": the spelling of the trace and of TGRAD_CONV_KERNEL.
const char* conv_pass_name(ConvPass pass);

// What the planner needs to know of a device.
struct DeviceCaps {
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  int64_t smem_per_block_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
  int64_t smem_per_sm = 0;           // cudaDevAttrMaxSharedMemoryPerMultiprocessor, bytes
  int64_t regs_per_sm = 0;           // cudaDevAttrMaxRegistersPerMultiprocessor
  bool wgmma_compiled = false;       // the build holds the sm_90a code of the wgmma kernel
  // Registers per thread of the wgrad tensor-core instances as compiled (cudaFuncGetAttributes):
  // they decide the raw stages of wgrad (WgradDeviceLimits).
  int wgrad_regs_tf32 = 0, wgrad_regs_x3tf32 = 0, wgrad_regs_x3tf32_7warps = 0;

  // An H100 SXM with this build's kernels (ptxas, CUDA 13, sm_90): for tests of the planner.
  static DeviceCaps h100();
  // Every field, so that one added later is compared too (plan_conv_call's cache keys on them).
  bool operator==(const DeviceCaps&) const = default;
};

// Kernel names, as the trace prints them and TGRAD_CONV_KERNEL / set_conv_kernel take them.
inline constexpr const char* kKernelWgmma = "wgmma";       // fwd, dgrad: sm_90a implicit GEMM
inline constexpr const char* kKernelMmaSync = "mma.sync";  // every pass: TF32 tensor cores
// fwd, dgrad: TF32 tensor cores, GEMM N over batch x positions per stride phase, no column buffer
inline constexpr const char* kKernelBatchIgemm = "batch-igemm";
// fwd, dgrad: the same GEMM on sm_90a's wgmma, both operands from shared memory ("high" only);
// wgrad: K over batch x positions, N over (C_out, tap), dy gathered (conv_batch_igemm.h)
inline constexpr const char* kKernelBatchWgmma = "batch-wgmma";
inline constexpr const char* kKernelDepthwise = "depthwise";  // every pass: depthwise direct
// every pass: float32/float64 FMA with a register block, few channels per group
inline constexpr const char* kKernelDirect = "direct";
// every pass: float32 FMA for at most four output channels per group (RGB / mono outputs)
inline constexpr const char* kKernelThin = "thin";
inline constexpr const char* kKernelGemm = "gemm";  // every pass: columns + cuBLAS GEMMs
inline constexpr const char* kKernelFma = "fma";    // every pass: the general kernels

struct Declined {
  std::string kernel;
  std::string reason;
};

struct ConvPlan {
  ConvPass pass = ConvPass::forward;
  std::string kernel;  // one of the kernel names above
  // wgmma and mma.sync (forward, dgrad): the problem with its tiling fields filled (pointers
  // null), the tile shape, and for wgmma the most taps a row may have with all their A fragments
  // loaded at once (0: any count, two taps' fragments in flight).
  IgemmProblem igemm{};
  IgemmTiling tile{};
  int wgmma_max_taps = 0;
  // batch-igemm and batch-wgmma (forward, dgrad): tile, phases and grid.
  BatchIgemmPlan batch{};
  // mma.sync (wgrad): the split-K GEMM's plan and instance.
  WgradLaunch wgrad{};
  // batch-wgmma (wgrad): tiles, K slices and shared memory.
  BatchWgradPlan batch_wgrad{};
  // direct (every pass): register block, stages, grid, wgrad chunks.
  DirectPlan direct{};
  // thin (every pass): register block, cells, channel splits or wgrad chunks, grid.
  ThinPlan thin{};
  // fma (wgrad): positions per chunk and chunks (their partials are summed in order).
  int64_t fma_chunks = 0, fma_chunk_len = 0;
  // The candidates above `kernel` in priority order, each with why it does not run this call.
  std::vector<Declined> declined;
  // What the trace prints: pass, geometry, dtype/precision, kernel and configuration, declined.
  std::string geometry;  // ConvGeometry::str() and the dtype/precision
  // Benchmark mode (run_conv_call): each timed candidate with its time, in table order, when
  // this plan is the fastest of them; empty otherwise.
  std::vector<std::pair<std::string, double>> timed;
  std::string describe() const;
  // The kernel with its mode, as docs/performance.md's "kernel" column writes it: "wgmma, fill",
  // "wgmma, 2 taps in flight, row fold", "mma.sync", "wgrad (mma.sync)", "fma", ...
  std::string label() const;
};

// One row of the candidate table: its kernel name and its rule, which fills the plan's
// configuration and returns "" when the kernel runs the call, else the reason it does not.
struct PlanInput {
  ConvPass pass;
  const ConvGeometry& g;
  DType dtype;
  const DeviceCaps& caps;
  // Whether rows may decline for speed alone (tiles mostly empty) rather than inability. Off for
  // a forced kernel, and in the tests of the tensor-core kernels on small edge-case shapes.
  bool prefer = true;
  // Whether a kernel was forced (set_conv_kernel): the direct row then runs calls it would
  // otherwise leave to the GEMM path.
  bool forced = false;
  // batch-igemm's verdict (empty: it takes the call) and plan, worked out once per plan_conv
  // call: the rows above it ask whether to give way to it, then its own row reads it.
  mutable std::optional<std::pair<std::string, BatchIgemmPlan>> batch_igemm;
  // The same for batch-wgmma (the instance on sm_90a's wgmma).
  mutable std::optional<std::pair<std::string, BatchIgemmPlan>> batch_wgmma;
};
struct Candidate {
  const char* kernel;
  ConvPass pass;
  std::string (*rule)(const PlanInput& in, ConvPlan& plan);
};
// The table, in priority order (all passes; the first eligible row of a pass wins).
const std::vector<Candidate>& conv_candidates();

// Plans one call: the first eligible candidate of `pass`, or, when `forced` names a kernel,
// that kernel (tgrad::Error naming it and the planner's reason when it cannot run the call, or
// when no candidate of the pass has that name). The geometry's precision is g.precision.
ConvPlan plan_conv(ConvPass pass, const ConvGeometry& g, DType dtype, const DeviceCaps& caps,
                   const std::string& forced = "", bool prefer = true);

// batch-wgmma's copies by the tensor memory accelerator (BatchIgemmPlan::tma), for a 1xTF32
// plan reading the channels-last copy: "" when they apply, with the im2col map's corners
// written to plan.tma_lower / tma_upper; else why not (a dgrad stride past 8, phases of unequal
// position counts, corners or filter offsets past the map's ranges). Reads the plan's phases
// and c_pad.
inline constexpr int kTmaMaxTraversalStride = 8;
inline constexpr int kTmaMinCorner = -128, kTmaMaxCorner = 127;  // a 4-D im2col map's corners
inline constexpr int kTmaMaxOffset = 65535;                      // 16-bit filter offsets
inline constexpr int64_t kTmaMaxCoordinate = 2147483647;
std::string batch_wgmma_tma_check(const ConvGeometry& g, bool forward, BatchIgemmPlan& plan);

// batch-wgmma's K slices (BatchIgemmPlan::k_slices) for a grid of `ctas` tiles, each `steps`
// K steps long, on `sm_count` SMs holding two CTAs each: the count whose waves of slices,
// each with a fixed cost per CTA and per partial, finish soonest; 1 unless that is clearly
// sooner than the unsliced grid.
inline constexpr int64_t kMaxKSlices = 16;
int64_t batch_wgmma_k_slices(int64_t ctas, int64_t steps, int64_t sm_count);

// Test hook: while false, plan_conv_call plans without the speed preferences (PlanInput::prefer),
// so tests can reach the tensor-core kernels on shapes too small to be worth them.
void set_conv_preferences(bool on);
bool conv_preferences();

// The launchers' entry: plan_conv with the kernel forced for this pass (set_conv_kernel or
// TGRAD_CONV_KERNEL) and the preferences hook, the trace line on stderr when tracing is on (every
// call), and the plan kept as the pass's last one. Plans are cached per input, since a training
// step repeats the same calls and planning builds strings: the key holds everything plan_conv
// reads (pass, the whole geometry with its precision, dtype, every DeviceCaps field, the forced
// kernel, the preferences), so a changed setting finds its own entry rather than a stale one.
// Failures are not cached: a forced kernel that cannot run the call throws on every call.
// Thread-safe; the plan is shared and immutable, and stays valid however long it is held.
std::shared_ptr<const ConvPlan> plan_conv_call(ConvPass pass, const ConvGeometry& g, DType dtype,
                                               const DeviceCaps& caps);

// Runs one call of a launcher: `run` executes a plan on the call's tensors (it may throw
// tgrad::Error). Without benchmark mode, or with a kernel forced for the pass, it runs
// plan_conv_call's plan. In benchmark mode it runs the plan this process found fastest for the
// same inputs (PlanKey), and on the first such call first times every plan that can run the call
// (the planner's, then each other kernel forced; `time` returns milliseconds of one run, and a
// candidate other than the planner's that throws is skipped), keeps the fastest (ties go to the
// earlier one, the planner's first), and then runs it, so the outputs hold its results.
// last_conv_plan and the trace see the plan that ran.
using ConvRunner = std::function<void(const ConvPlan&)>;
using ConvTimer = std::function<double(const ConvRunner&, const ConvPlan&)>;
void run_conv_call(ConvPass pass, const ConvGeometry& g, DType dtype, const DeviceCaps& caps,
                   const ConvRunner& run, const ConvTimer& time);

// Plans kept by benchmark mode now: for tests.
size_t conv_plans_benchmarked();

// The cache holds at most this many plans; a new one past it empties the cache first, so a
// program sweeping many geometries cannot grow it without bound.
inline constexpr size_t kMaxCachedConvPlans = 4096;
// Plans in the cache now: for tests.
size_t conv_plans_cached();

// The plan of the last CUDA call of `pass` in this process (kernel empty when none ran yet):
// for conv_bench and tests, which cannot tell two tensor-core kernels apart by their results.
ConvPlan last_conv_plan(ConvPass pass);

// The settings behind set_conv_trace / set_conv_kernel / set_conv_benchmark (core/device.h),
// environment included.
bool conv_trace_enabled();
std::string conv_kernel_forced(ConvPass pass);
bool conv_benchmark_enabled();

}  // namespace tgrad::cuda
