// The plan of the thin-output kernels (cuda/conv_transpose_thin.cu, planner row "thin"): float32
// forward, dgrad and wgrad of layers with at most kThinMaxCog output channels per group (RGB and
// mono outputs: the last layer of an image or audio decoder). Plain C++ (the planner and its tests
// include it). Private to the project.
//
// Such a layer is bound by reading or writing its wide side (x in the forward and wgrad, dx in
// dgrad), so each kernel reads or writes that side about once and keeps the narrow side close:
//   forward: a thread owns one "cell", the sH x sW outputs (of every output channel of its group)
//            that share their inputs; per input channel it reads the cell's TH x TW inputs and
//            adds each into all its outputs.
//   dgrad:   a thread owns one input position and holds the Cog x kH x kW values of dy that
//            position reads (its window) in registers; per input channel it forms one dot product
//            of the window with the weights and writes one dx.
//   wgrad:   dw[ci][window slot] = sum over positions of x[ci] times the window: a GEMM of
//            C_in/groups x window whose K is the positions. A block stages tiles of positions'
//            x and windows in shared memory (cp.async, the next tile while it multiplies this
//            one), each thread sums a 4 x 8 tile over the block's chunk of positions, and a
//            second kernel adds the chunks' partials in order.
#pragma once

#include <cstdint>

namespace tgrad::cuda {

inline constexpr int64_t kThinMaxCog = 4;
// Register blocks the kernels are instantiated for: the forward's accumulators (a cell's outputs,
// sH * sW * Cog, padded up) and dgrad's window (Cog * kH * kW, padded up).
inline constexpr int kThinFwdBlocks[] = {1, 2, 4, 8, 12, 16, 24, 32};
inline constexpr int kThinDgradBlocks[] = {4, 8, 16, 32, 48, 64};
// One block's weights (one channel split) live in shared memory, at most this many bytes.
inline constexpr int64_t kThinSmemBytes = 48 * 1024;
inline constexpr int kThinThreads = 256;
// Channel splits are added (each at least kThinMinSplit channels) until the items (forward
// cells, dgrad positions) x splits reach the pass's target: a Conv-TasNet-sized forward (32K
// cells) otherwise leaves most of the GPU's memory parallelism idle. Measured on the suite's RGB
// and mono layers (GPU run 84): the forward was fastest at 2^18, dgrad, whose splits each reload
// the dy windows, at 2^15 (1.07x-1.14x faster than at 2^18). Shape-only, so the bits do not
// depend on the GPU.
inline constexpr int64_t kThinFwdTarget = int64_t{1} << 18;
inline constexpr int64_t kThinDgradTarget = int64_t{1} << 15;
inline constexpr int64_t kThinMinSplit = 32;
// A block loops over tiles of kThinThreads x (items a thread) cells or positions, at most this
// many blocks per (split, group): the weights are staged once a block, not once a tile.
inline constexpr int64_t kThinMaxBlocks = 1024;

// dgrad: positions a thread owns, 32 apart so that each load and store of a warp stays
// coalesced. Each weight a thread reads from shared memory then feeds that many FMAs: with one
// position the 48-value windows of RGB layers were bound by those loads (GPU run 82: DCGAN's and
// pix2pix's last layers 1.2x faster with two). Smaller windows keep one (Conv-TasNet's 16 values:
// 1.26x slower with four, 1.04x with two, run 83), the largest (64) one for the registers.
constexpr int thin_dgrad_items(int block) {
  return block == 32 || block == 48 ? 2 : 1;
}

// wgrad: the register blocks (the window padded to a multiple of 8: a warp's 8 slots), positions
// a shared-memory tile, input channels a block at most (32 lanes x 4), chunk lengths (a thread's
// float32 chain has a term a position of its chunk), and the blocks the chunks are added for
// (shape-only, so the bits do not depend on the GPU).
inline constexpr int kThinWgradBlocks[] = {8, 16, 32, 48, 64};
inline constexpr int kThinWgradTile = 16;
inline constexpr int kThinWgradChannels = 128, kThinWgradMinChannels = 64;
inline constexpr int64_t kThinWgradMaxChunk = 16384, kThinWgradMinChunk = 256;
inline constexpr int64_t kThinWgradTargetBlocks = 2048;
// Channels a wgrad block: kThinWgradMinChannels (two a lane) up to that many input channels per
// group, else kThinWgradChannels (four a lane). With 64 channels in a 128-channel block half of
// each thread's tile was empty: DCGAN's 64 -> 3 took 0.146 ms, 0.114 ms with two a lane (the direct
// kernel: 0.127; GPU run 96).
constexpr int64_t thin_wgrad_channels(int64_t cig) {
  return cig <= kThinWgradMinChannels ? kThinWgradMinChannels : kThinWgradChannels;
}

struct ThinPlan {
  // The register block (one of kThinFwdBlocks, kThinDgradBlocks or kThinWgradBlocks) and the
  // slots of it in use.
  int block = 0, used = 0;
  // forward: inputs a cell reads per axis (taps per stride phase, dilation included), the
  // cells per axis and the first cell's index (pad / stride).
  int64_t th = 0, tw = 0;
  int64_t cells_h = 0, cells_w = 0, cell0_h = 0, cell0_w = 0;
  // Input channels per split and the splits; forward partial outputs are summed in split order
  // (when splits > 1), dgrad's splits write disjoint channels. wgrad: positions per chunk and the
  // chunks, whose partial weights are summed in chunk order.
  int64_t split_len = 0, splits = 0;
  int64_t smem_bytes = 0;
  // Threads' items (cells or positions), tiles of kThinThreads, and the grid: x over tiles
  // (blocks loop), y over splits x groups; wgrad: x over chunks, y over channel blocks x groups.
  int64_t items = 0, grid_x = 0, grid_y = 0;
};

}  // namespace tgrad::cuda
