// The device side of the conv planner: a CUDA device's DeviceCaps, asked once per device, and
// benchmark mode's timer, for the launchers of conv_transpose_{fwd,dgrad,wgrad}.cu. Private to
// cuda/.
#pragma once

#include "cuda/conv_plan.h"

namespace tgrad::cuda {

// The caps of `device` (its compute capability, shared memory and registers, and the registers
// of this build's wgrad instances); cached after the first call.
const DeviceCaps& conv_device_caps(int device);

// Benchmark mode's ConvTimer (run_conv_call): one untimed run of the plan (its first-use costs,
// such as workspace allocation, stay out), then the mean of kConvBenchmarkRuns runs between two
// events on the current device's default stream, in milliseconds.
inline constexpr int kConvBenchmarkRuns = 3;
double time_conv_plan(const ConvRunner& run, const ConvPlan& plan);

// Fills caps' wgrad_regs_* from the compiled wgrad instances (conv_transpose_wgrad.cu).
void wgrad_tc_registers(DeviceCaps& caps);

}  // namespace tgrad::cuda
