// The batch-positions implicit GEMM of conv_transpose forward and dgrad (kernels in
// conv_transpose_batch_igemm.cu): the phase arithmetic, shared by the kernel and the planner, and
// the plan the planner fills. Plain C++ (the planner's tests run without a GPU); the axis helper
// is also compiled for the device. Private to cuda/.
//
// Per output phase (rh, rw) (forward: (oh + pH) mod sH, (ow + pW) mod sW; dgrad: one phase), one
// GEMM whose N spans batch x the phase's output positions (not one output row, so 4x4..32x32
// images still fill 128-wide tiles) and whose K runs over (tap of the phase, channel):
//   out[n, m, qy*os + oby, qx*os + obx] = bias[m]
//       + sum_{taps (kh, kw) of the phase} sum_c W[m, c, kh, kw] * src[n, c, qy*ss + sby(kh),
//                                                                    qx*ss + sbx(kw)]
// (src zero outside its plane). forward: src = x, m = co, c = ci, W[m, c] = w[c, m], os = s,
// ss = 1, and a phase holds only the taps with k*d = r (mod s): structurally zero taps are never
// multiplied; dgrad: src = dy, m = ci, c = co, W[m, c] = w[m, c], os = 1, ss = s, every tap.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TGRAD_BI_HD __host__ __device__
#else
#define TGRAD_BI_HD
#endif

namespace tgrad::cuda {

inline constexpr int kBatchIgemmMaxTaps = 64;  // taps of one phase (both axes together)
inline constexpr int kBatchIgemmChunk = 32;    // channels per K step (c_pad is a multiple)
inline constexpr int kBatchIgemmStages = 3;    // cp.async stages in flight
inline constexpr int kBatchIgemmThreads = 256;

// One axis of one phase: output index q*os + ob for q in [0, q), src index q*ss + sb[i] for the
// phase's i-th tap k[i] (ascending).
struct BatchIgemmAxis {
  int q, os, ob, ss, taps;
};

// Fills the axis of phase r (forward: gather; dgrad: r = 0) and writes the first `cap` taps'
// kernel index and src offset to tap_k / tap_sb (either may be null: the planner only counts).
// The planner's rule keeps every size here under 2^30 (fits_plane32), so int arithmetic holds.
//   forward: o = q*s + r - p for the q with 0 <= o < out; tap k lands when k*d - r = j*s, j >= 0,
//            and reads src q + q0 - j (o + p - k*d = (q + q0 - j)*s), q0 the first q of the phase;
//   dgrad:   o = q in [0, out); tap k reads src q*s - p + k*d.
TGRAD_BI_HD inline BatchIgemmAxis batch_igemm_axis(bool gather, int out, int k_size, int s, int p,
                                                   int d, int r, int* tap_k, int* tap_sb, int cap) {
  BatchIgemmAxis a{};
  if (!gather) {
    a.q = out, a.os = 1, a.ob = 0, a.ss = s, a.taps = k_size;
    for (int k = 0; k < k_size && k < cap; ++k) {
      if (tap_k) tap_k[k] = k;
      if (tap_sb) tap_sb[k] = k * d - p;
    }
    return a;
  }
  const int q0 = p > r ? (p - r + s - 1) / s : 0;
  const int last = out - 1 + p - r;  // the phase's q satisfy q*s <= last
  a.os = s, a.ss = 1, a.ob = q0 * s + r - p;
  a.q = last < 0 || last / s < q0 ? 0 : last / s - q0 + 1;
  for (int k = 0; k < k_size; ++k) {
    const int t = k * d - r;
    if (t < 0 || t % s != 0) continue;
    if (a.taps < cap) {
      if (tap_k) tap_k[a.taps] = k;
      if (tap_sb) tap_sb[a.taps] = q0 - t / s;
    }
    ++a.taps;
  }
  return a;
}

// batch-wgmma's K slices: the K steps of a CTA's slice, `count` steps from step `first` of its
// phase's `steps` (taps x channel chunks), the steps cut into k_slices runs of equal length (the
// last ones shorter or empty: a phase may have fewer steps than the longest one).
struct BiSteps {
  int first, count;
};
TGRAD_BI_HD inline BiSteps batch_igemm_slice_steps(int steps, int k_slices, int slice) {
  if (k_slices <= 1) return {0, steps};
  const int per = (steps + k_slices - 1) / k_slices;
  const int first = slice * per < steps ? slice * per : steps;
  return {first, per < steps - first ? per : steps - first};
}

// A step of the K loop: tap (th, tw) of the phase's tap tables, channels from c0; steps run
// channels fastest, then tw, then th. batch_igemm_cursor gives step `s`'s, with `chunks` channel
// chunks of `chunk` channels a tap and `tw_taps` taps along W.
struct BiCursor {
  int th, tw, c0;
};
TGRAD_BI_HD inline BiCursor batch_igemm_cursor(int s, int chunks, int chunk, int tw_taps) {
  const int t = s / chunks;
  return tw_taps > 0 ? BiCursor{t / tw_taps, t % tw_taps, (s - t * chunks) * chunk}
                     : BiCursor{0, 0, 0};
}

// Dynamic shared memory of the instance with a bm x bn tile: kBatchIgemmStages stages of a
// kBatchIgemmChunk x (bm + 8) A tile (twice for 3xTF32's residuals) and a chunk x (bn + 8) B tile.
constexpr int batch_igemm_smem_bytes(int bm, int bn, bool split) {
  return kBatchIgemmStages *
         (kBatchIgemmChunk * (bm + 8) * (split ? 2 : 1) + kBatchIgemmChunk * (bn + 8)) * 4;
}

// The wgmma instance (conv_transpose_batch_wgmma.cu, sm_90a): kBatchWgmmaStages stages of a
// kBatchIgemmChunk x bm A tile and a chunk x bn B tile, both unpadded in wgmma's K-major core
// matrices. 3xTF32 (split) holds each tile twice (values and residuals) in two stages, so that
// two CTAs still share an SM.
inline constexpr int kBatchWgmmaStages = 3;
inline constexpr int kBatchWgmmaSplitStages = 2;
// channels_last: B is copied from a channels-last copy of src into 128-byte swizzled rows, whose
// descriptors want 1024-byte aligned stages: 1024 bytes more to align the first.
constexpr int batch_wgmma_smem_bytes(int bm, int bn, bool channels_last = false,
                                     bool split = false) {
  return (split ? 2 * kBatchWgmmaSplitStages : kBatchWgmmaStages) * kBatchIgemmChunk * (bm + bn) *
             4 +
         (channels_last ? 1024 : 0);
}

// What the planner hands the launcher (conv_plan.h's ConvPlan::batch): the tile and the grid.
struct BatchIgemmPlan {
  int bm = 0, bn = 0;  // CTA tile: bm rows m x bn columns (batch, position) of one phase
  bool split = false;  // 3xTF32 ("highest"), else 1xTF32
  bool wgmma = false;  // the sm_90a wgmma instance (batch-wgmma), else mma.sync
  // batch-wgmma: B from a channels-last copy of src (made per call), one 16-byte cp.async per
  // 4 channels of a column, instead of gathered through registers from src.
  bool channels_last = false;
  // batch-wgmma at 1xTF32 with channels-last B: both tiles copied by the tensor memory
  // accelerator (A as a box of the packed weights, B in im2col mode), one thread issuing them,
  // instead of every thread's cp.async (batch_wgmma_tma_check says when). tma_lower and
  // tma_upper (H, W) are the im2col map's bounding-box corners: position q of a phase is
  // traversal coordinate q*ss + tma_lower, and the traversal wraps after the phase's q positions.
  bool tma = false;
  int tma_lower[2] = {0, 0}, tma_upper[2] = {0, 0};
  int phases_h = 1, phases_w = 1;
  int64_t groups = 1;  // one GEMM per group and phase (the grid's z: groups)
  int64_t max_q = 0;   // most output positions of one phase, times the batch (the grid's x)
  int max_taps = 0;    // most taps of one phase
  double tap_use = 1;  // share of the GEMMs' (position, tap) pairs that land inside src
  int64_t n_tiles = 0, m_tiles = 0, c_pad = 0, m_pad = 0;
  int smem_bytes = 0;
  // batch-wgmma: K cut into k_slices slices of a tile's steps, each slice a CTA (the grid's y is
  // k_slices x m_tiles). Each slice writes its partial tile to a workspace; the tile's last slice
  // to finish sums the partials in slice order (deterministic) and writes the output.
  int64_t k_slices = 1;
  // Output tiles of the whole grid (every phase, row tile and group), each one CTA unsliced and
  // k_slices CTAs sliced; the launcher's workspace holds a counter for each.
  int64_t tiles() const { return n_tiles * phases_h * phases_w * m_tiles * groups; }
};

// batch-wgmma's wgrad instances (conv_transpose_wgrad_wgmma.cu, sm_90a). Per group, the GEMM
//   dw[m, j] = sum_k x[n, m, ih, iw] * dy[n, co, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW]
// rows m: the group's input channels; columns j = (co*kH + kh)*kW + kw: dw's own layout, so a
// tile is written in place; K: k = (n*Hi + ih)*Wi + iw over the whole batch (dy zero outside its
// plane). K is cut into `splits` slices of steps_per_split steps of kBatchWgradBK positions; each
// slice writes its own partial tile and the partials are summed in slice order (deterministic).
// Tiles: 128 x 128 at 1xTF32 ("high"); 3xTF32 ("highest") holds each tile twice (values and
// residuals) and keeps a float32 sum beside the accumulator, so its tiles are 128 x 64 or 64 x 128
// (64 columns a warpgroup) and still fit two CTAs per SM.
inline constexpr int kBatchWgradBM = 128, kBatchWgradBN = 128, kBatchWgradBK = 32;
inline constexpr int kBatchWgradStages = 2, kBatchWgradThreads = 256;
constexpr int batch_wgrad_smem_bytes(int bm = kBatchWgradBM, int bn = kBatchWgradBN,
                                     bool split = false) {
  return (split ? 2 : 1) * kBatchWgradStages * kBatchWgradBK * (bm + bn) * 4;
}

struct BatchWgradPlan {
  int bm = kBatchWgradBM, bn = kBatchWgradBN;    // CTA tile: rows (C_in/groups) x columns
  bool split = false;                            // 3xTF32 ("highest"), else 1xTF32
  int64_t m_tiles = 0, n_tiles = 0, groups = 1;  // row and column tiles of one group's GEMM
  int64_t steps = 0;                             // K steps of the whole batch
  int64_t splits = 0, steps_per_split = 0;       // K slices (the partials) and their length
  int smem_bytes = 0;
};

}  // namespace tgrad::cuda
