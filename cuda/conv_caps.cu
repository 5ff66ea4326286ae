// conv_device_caps (conv_caps.h): the attributes the planner reads, queried once per device;
// time_conv_plan, benchmark mode's timer; and conv_planned_kernel (kernel_stats.h) for tests.
#include "cuda/conv_caps.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "cuda/check.h"
#include "cuda/kernel_stats.h"

namespace tgrad::cuda {

const DeviceCaps& conv_device_caps(int device) {
  static std::mutex mutex;
  static std::map<int, DeviceCaps> cache;  // node-based: references stay valid
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(device);
  if (found != cache.end()) return found->second;
  DeviceCaps c;
  int v = 0;
  auto attribute = [&](cudaDeviceAttr a) {
    TGRAD_CUDA_CHECK(cudaDeviceGetAttribute(&v, a, device));
    return v;
  };
  c.sm_major = attribute(cudaDevAttrComputeCapabilityMajor);
  c.sm_minor = attribute(cudaDevAttrComputeCapabilityMinor);
  c.sm_count = attribute(cudaDevAttrMultiProcessorCount);
  c.smem_per_block_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  c.smem_per_sm = attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  c.regs_per_sm = attribute(cudaDevAttrMaxRegistersPerMultiprocessor);
  // cuda/CMakeLists.txt always builds conv_transpose_wgmma.cu for sm_90a; conv_wgmma_launch
  // checks that the code is really there before its first launch on a device.
  c.wgmma_compiled = true;
  wgrad_tc_registers(c);
  return cache.emplace(device, c).first->second;
}

namespace {

// A CUDA event, destroyed with its owner.
class Event {
 public:
  Event() { TGRAD_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace

double time_conv_plan(const ConvRunner& run, const ConvPlan& plan) {
  run(plan);
  const Event start, stop;
  TGRAD_CUDA_CHECK(cudaEventRecord(start.get(), nullptr));
  for (int i = 0; i < kConvBenchmarkRuns; ++i)
    run(plan);
  TGRAD_CUDA_CHECK(cudaEventRecord(stop.get(), nullptr));
  TGRAD_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  TGRAD_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) / kConvBenchmarkRuns;
}

std::string conv_planned_kernel(ConvPass pass, const ConvGeometry& g, DType dtype, int device) {
  return plan_conv(pass, g, dtype, conv_device_caps(device)).kernel;
}

}  // namespace tgrad::cuda
