// Tensor-core building blocks shared by the fast conv kernels (conv_transpose_igemm.cuh and
// conv_transpose_wgrad.cu): cp.async copies into shared memory with zero fill, the TF32 split
// of a float, and the m16n8k8 TF32 mma (1xTF32 for "high", error-compensated 3xTF32 for
// "highest": a*b ~= ah*bh + ah*bl + al*bh with ah = tf32(a), al = tf32(a - ah)). sm_80+ PTX.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tgrad::cuda {

// ---- cp.async: global -> shared without a register round trip --------------------------------

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies one float, or writes 0 when !valid (src is then not read, but must be a valid address).
__device__ inline void cp_async4(float* dst, const float* src, bool valid) {
  const int bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(bytes));
}

// Copies 8 bytes (both addresses 8-byte aligned).
__device__ inline void cp_async8(float* dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// Copies 16 bytes (both addresses 16-byte aligned).
__device__ inline void cp_async16(float* dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}

// Copies 16 bytes (both addresses 16-byte aligned), or writes 16 zero bytes when !valid (src is
// then not read, but must be a valid address).
__device__ inline void cp_async16_zfill(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}

// Copies base[first .. first+4) of a row of `limit` floats to dst (16-byte aligned), zero
// outside the row or when !row_ok: one 16-byte copy when all four are in range and aligned, two
// 8-byte ones when they start 8 bytes off (S2/S3's dy rows are 65538 floats long, so every other
// row does), else per float.
__device__ inline void load_vec4(float* dst, const float* base, int64_t first, int64_t limit,
                                 bool row_ok, const float* dummy) {
  if (row_ok && first >= 0 && first + 3 < limit) {
    const float* src = base + first;
    const auto addr = reinterpret_cast<uintptr_t>(src);
    if ((addr & 15) == 0) {
      cp_async16(dst, src);
      return;
    }
    if ((addr & 7) == 0) {
      cp_async8(dst, src);
      cp_async8(dst + 2, src + 2);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const bool ok = row_ok && first + e >= 0 && first + e < limit;
    cp_async4(dst + e, ok ? base + first + e : dummy, ok);
  }
}

__device__ inline void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// ---- TF32 ------------------------------------------------------------------------------------

// Round to nearest TF32 (10-bit mantissa), returned as the bits of a float.
__device__ inline uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// x = big + small with big = tf32(x) and small = tf32(x - big): 21 mantissa bits in all.
__device__ inline void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = to_tf32(x);
  small = to_tf32(x - __uint_as_float(big));
}

// Four values rounded to TF32 as one 16-byte store at dst (16-byte aligned); with kSplit
// (3xTF32) their TF32 residuals too, at small (unused otherwise).
template <bool kSplit>
__device__ inline void store_tf32x4(float* dst, float* small, float v0, float v1, float v2,
                                    float v3) {
  if constexpr (kSplit) {
    uint4 big, res;
    split_tf32(v0, big.x, res.x);
    split_tf32(v1, big.y, res.y);
    split_tf32(v2, big.z, res.z);
    split_tf32(v3, big.w, res.w);
    *reinterpret_cast<uint4*>(dst) = big;
    *reinterpret_cast<uint4*>(small) = res;
  } else {
    *reinterpret_cast<uint4*>(dst) = make_uint4(to_tf32(v0), to_tf32(v1), to_tf32(v2), to_tf32(v3));
  }
}

// d += a * b for one m16n8k8 tile (row-major A 16x8, column-major B 8x8, f32 accumulators).
// Fragments (g = lane/4, t = lane%4): a = {A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]},
// b = {B[t][g], B[t+4][g]}, d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}.
__device__ inline void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  // Not volatile: the outputs carry every dependency, so the compiler may schedule loads of the
  // next fragments between mmas.
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// An operand fragment in the form the chosen precision multiplies: kSplit (3xTF32) keeps the
// TF32 residual beside the TF32 value; otherwise only the rounded value. The kernels stage
// operands already converted, so fragments are filled with loaded words, not converted here.
template <int kRegs, bool kSplit>
struct Frag {
  uint32_t big[kRegs];
  uint32_t small[kSplit ? kRegs : 1];
};

// r = the four words of one 128-bit load (an A fragment's values or residuals).
__device__ inline void set_words(uint32_t (&r)[4], uint4 v) {
  r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
}

// d[m][n] += a[m] * b[n] over a warp's tile of m16n8 blocks: one mma per block for 1xTF32;
// three for 3xTF32, small products first so they are not absorbed by a large partial sum before
// the big product lands. The three products go in three passes over the tile, so consecutive
// mmas write different accumulators and none waits for the result of the one before.
template <bool kSplit, int kM, int kN>
__device__ inline void mma_tile(float (&d)[kM][kN][4], const Frag<4, kSplit> (&a)[kM],
                                const Frag<2, kSplit> (&b)[kN]) {
  if constexpr (kSplit) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        mma_tf32(d[m][n], a[m].small, b[n].big);
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
#pragma unroll
      for (int n = 0; n < kN; ++n)
        mma_tf32(d[m][n], a[m].big, b[n].small);
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int n = 0; n < kN; ++n)
      mma_tf32(d[m][n], a[m].big, b[n].big);
  }
}

// sum += acc; acc = 0. The tensor cores add in round-toward-zero, so a long chain of 3xTF32
// mmas drifts (error growing with K, ~3e-6 at K = 384); short chains flushed into a register
// sum with round-to-nearest FADDs keep "highest" at float32 accuracy.
template <int kM, int kN>
__device__ inline void flush_into(float (&sum)[kM][kN][4], float (&acc)[kM][kN][4]) {
#pragma unroll
  for (int i = 0; i < kM; ++i) {
#pragma unroll
    for (int j = 0; j < kN; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sum[i][j][e] += acc[i][j][e];
        acc[i][j][e] = 0.0f;
      }
    }
  }
}

}  // namespace tgrad::cuda
