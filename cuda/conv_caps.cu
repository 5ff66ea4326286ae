// conv_device_caps (conv_caps.h): the attributes the planner reads, queried once per device.
#include "cuda/conv_caps.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "cuda/check.h"

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

}  // namespace tgrad::cuda
