// The plan of the direct kernels (cuda/conv_transpose_direct.cu, planner row "direct"): float32 /
// float64 FMA kernels for calls with few channels per group (RGB or mono outputs, grouped layers),
// where a GEMM's tiles would be mostly padding and the pass is bound by memory rather than by
// multiplies. Plain C++ (the planner and its tests include it). Private to the project.
#pragma once

#include <cstdint>

namespace tgrad::cuda {

// Register blocks the kernels are instantiated for: output channels per thread (forward), input
// channels per thread (dgrad, wgrad); wgrad pairs each with (co, tap) columns per thread: at most
// 64 accumulators, and at most 16 columns, whose offsets the compiler keeps in registers too.
inline constexpr int kDirectRegBlocks[] = {1, 2, 4, 8};
inline constexpr int kDirectWgradCols(int reg) {
  return reg == 8 ? 8 : 16;
}
// The weights of one stage live in shared memory, at most this many bytes (no opt-in needed).
inline constexpr int64_t kDirectSmemBytes = 48 * 1024;
// wgrad: a block sums at most this many positions, so one thread's float32 chain stays short
// (chunk / 128 terms); the chunks' partial sums are added in chunk order in float64.
inline constexpr int64_t kDirectWgradMaxChunk = 16384;
inline constexpr int64_t kDirectWgradMinChunk = 1024;
// wgrad: chunks are added until the grid has about this many blocks (a shape-only rule, so the
// bits do not depend on the GPU). A block has kDirectWgradWarps warps.
inline constexpr int64_t kDirectWgradTargetBlocks = 1024;
inline constexpr int64_t kDirectWgradWarps = 4;
// forward: input channels per stage at most, so that the warps of a block (one stride phase
// each) walk the channels together and find the x rows the others read in L1.
inline constexpr int64_t kDirectFwdChunk = 32;

struct DirectPlan {
  // Forward: output channels per thread; dgrad and wgrad: input channels per thread.
  int reg = 0;
  // wgrad: (co, tap) columns per thread (kDirectWgradCols(reg)).
  int cols = 0;
  // Forward: each warp of a block computes 32 consecutive (n, jh, jw) of one stride phase; a block
  // covers every phase of `groups32` such runs, `warps` warps walking those items.
  int groups32 = 0, warps = 0;
  // Channels summed per shared-memory stage of the weights: input channels (forward), output
  // channels (dgrad); 0 in wgrad.
  int64_t stage = 0;
  int64_t smem_bytes = 0;
  // The grid: x over positions (forward, dgrad) or (blocks of channels and column groups) x
  // chunks (wgrad), y over groups x channel blocks (forward, dgrad).
  int64_t grid_x = 0, grid_y = 0;
  // wgrad: positions (batch x input positions) per chunk, and the chunks.
  int64_t chunks = 0, chunk_len = 0;
};

}  // namespace tgrad::cuda
