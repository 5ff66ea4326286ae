// Hopper's wgmma (sm_90a) for the TF32 conv kernels: shared-memory matrix descriptors, the
// fences and commit groups, and m64nNk8 multiplies with A from registers or from shared memory.
// Device code only; include it from files built for sm_90a alone (cuda/CMakeLists.txt,
// tgrad_wgmma). Private to cuda/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tgrad::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Shared-memory matrix descriptor, no swizzle: start address, LBO (bytes between core matrices
// along K) and SBO (along M/N), each in 16-byte units. A K-major TF32 core matrix is 8 rows of
// 16 bytes (4 channels), 128 contiguous bytes.
__device__ inline uint64_t wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t{(addr & 0x3FFFF) >> 4} | (uint64_t{lbo >> 4} << 16) | (uint64_t{sbo >> 4} << 32);
}

// K-major operand rows of 128 bytes with the 128-byte swizzle (16-byte group c of row r stored
// at group c ^ (r % 8), from a 1024-byte aligned base): 8-row groups 1024 bytes apart (SBO); LBO
// is unused when a row holds the whole K of a step. Layout type 1 in bits 62-63.
__device__ inline uint64_t wgmma_desc_sw128(uint32_t addr) {
  return uint64_t{(addr & 0x3FFFF) >> 4} | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ inline void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ inline void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Waits until at most one committed group of this warpgroup is still running.
__device__ inline void wgmma_wait_one() {
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}
// Makes this thread's st.shared visible to the async proxy that wgmma reads through.
__device__ inline void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulator operands of m64n64 (32 floats a thread) and m64n128 (64).
#define TGRAD_WGMMA_D32(d)                                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define TGRAD_WGMMA_D64(d)                                                                       \
  TGRAD_WGMMA_D32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),           \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (m64 x n64) = A * B + (scale_d ? d : 0), A: 4 TF32 words (the m16n8k8 A fragment of this
// warp's 16 rows), B: k8 x n64 in shared memory (desc).
__device__ inline void wgmma_tf32_n64(float (&d)[32], const uint4& a, uint64_t desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : TGRAD_WGMMA_D32(d)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(scale_d));
}

// d (m64 x n128) = A * B + (scale_d ? d : 0), A from registers as above.
__device__ inline void wgmma_tf32_n128(float (&d)[64], const uint4& a, uint64_t desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : TGRAD_WGMMA_D64(d)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(scale_d));
}

// d (m64 x n64) = A * B + (scale_d ? d : 0), A: k8 x m64 and B: k8 x n64, both K-major in
// shared memory (descriptors).
__device__ inline void wgmma_tf32_ss_n64(float (&d)[32], uint64_t a_desc, uint64_t b_desc,
                                         int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1;\n}\n"
      : TGRAD_WGMMA_D32(d)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

// d (m64 x n128) = A * B + (scale_d ? d : 0), both from shared memory as above.
__device__ inline void wgmma_tf32_ss_n128(float (&d)[64], uint64_t a_desc, uint64_t b_desc,
                                          int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : TGRAD_WGMMA_D64(d)
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

#undef TGRAD_WGMMA_D64
#undef TGRAD_WGMMA_D32

template <int kN>
__device__ inline void wgmma_tf32(float (&d)[kN / 2], const uint4& a, uint64_t desc,
                                  int scale_d = 1) {
  if constexpr (kN == 64) {
    wgmma_tf32_n64(d, a, desc, scale_d);
  } else {
    static_assert(kN == 128, "add an m64nNk8 wrapper for another N");
    wgmma_tf32_n128(d, a, desc, scale_d);
  }
}

template <int kN>
__device__ inline void wgmma_tf32_ss(float (&d)[kN / 2], uint64_t a_desc, uint64_t b_desc,
                                     int scale_d = 1) {
  if constexpr (kN == 64) {
    wgmma_tf32_ss_n64(d, a_desc, b_desc, scale_d);
  } else {
    static_assert(kN == 128, "add an m64nNk8 wrapper for another N");
    wgmma_tf32_ss_n128(d, a_desc, b_desc, scale_d);
  }
}

// 3xTF32 (kSplit): a step's chain, once its wgmmas are waited for, added into the float32 sum
// (a one-element placeholder at 1xTF32, where the accumulator is the result).
template <bool kSplit, int kAcc, int kSum>
__device__ inline void add_step_chain(float (&sum)[kSum], const float (&acc)[kAcc]) {
  if constexpr (kSplit) {
    static_assert(kSum == kAcc, "the sum matches the accumulator");
#pragma unroll
    for (int i = 0; i < kAcc; ++i)
      sum[i] += acc[i];
  }
}

// One pipeline step's wgmmas over kBlocks k8 blocks of operands in shared memory: big x big at
// 1xTF32, accumulating; at 3xTF32 (kSplit) small x big, big x small, then big x big, the chain
// starting from zero, so that the caller adds it into a float32 sum once the step is waited for
// and the tensor cores never accumulate more than one step. a_desc(kb, plane) and
// b_desc(kb, plane) give the descriptors, plane 1 the residuals.
template <int kN, bool kSplit, int kBlocks, class ADesc, class BDesc>
__device__ inline void wgmma_tf32_step(float (&acc)[kN / 2], const ADesc& a_desc,
                                       const BDesc& b_desc) {
  if constexpr (kSplit) {
#pragma unroll
    for (int kb = 0; kb < kBlocks; ++kb)
      wgmma_tf32_ss<kN>(acc, a_desc(kb, 1), b_desc(kb, 0), kb > 0);
#pragma unroll
    for (int kb = 0; kb < kBlocks; ++kb)
      wgmma_tf32_ss<kN>(acc, a_desc(kb, 0), b_desc(kb, 1));
  }
#pragma unroll
  for (int kb = 0; kb < kBlocks; ++kb)
    wgmma_tf32_ss<kN>(acc, a_desc(kb, 0), b_desc(kb, 0));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace tgrad::cuda
