// Hopper's tensor memory accelerator (sm_90) for batch-wgmma: the mbarriers a copy completes on,
// and bulk tensor copies from global to shared memory in tile mode (a box of a tensor) and in
// im2col mode (consecutive output positions' channels at one filter offset, with the padding
// zero filled by the hardware). One thread issues a copy; every thread waits on its barrier.
// Device code only, built for sm_90a with the wgmma kernels (cuda/CMakeLists.txt). Private to
// cuda/.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// An mbarrier expecting `arrivals` arrivals a phase.
__device__ inline void mbarrier_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}

// Makes barriers just initialized visible to the async proxy that the copies complete through.
__device__ inline void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// This thread's arrival, announcing `bytes` of copies that will complete on the barrier's
// current phase.
__device__ inline void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Waits until the barrier's phase with parity `parity` has completed.
__device__ inline void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Box (x, y, z) of a 3-D tiled tensor map into dst, completing on bar.
__device__ inline void tma_load_tile_3d(void* dst, const CUtensorMap* map, int x, int y, int z,
                                        uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}

// The map's pixels-per-column positions from (w, h, n) on, channels c.. of each, each position
// read at (w + off_w, h + off_h) of its sample (zero outside the tensor), from a 4-D im2col
// tensor map (C, W, H, N) into dst, completing on bar.
__device__ inline void tma_load_im2col_4d(void* dst, const CUtensorMap* map, int c, int w, int h,
                                          int n, uint16_t off_w, uint16_t off_h, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(smem_addr(bar)),
      "h"(off_w), "h"(off_h)
      : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace tgrad::cuda
