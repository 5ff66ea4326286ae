// Device-side pieces shared by the two implicit-GEMM kernels of conv_transpose forward/dgrad
// (conv_transpose_igemm.cu: mma.sync, any sm_80+; conv_transpose_wgmma.cu: wgmma, sm_90a): a
// CTA's output tile, the table of taps that land on src for one output row and phase, the
// cp.async copy of one step's raw src window and the wait for it, and the fill-mode store.
// Index formula in conv_transpose_igemm.cuh. Private to cuda/.
#pragma once

#include <cstdint>

#include "cuda/conv_transpose_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/tf32_mma.cuh"

namespace tgrad::cuda {

// The taps of one (n, oh, phase) output row, in shared memory. A "plane" is one kh whose src row
// exists; a step is (channel chunk, active plane).
struct IgemmTaps {
  int tap_w[kIgemmMaxTaps];    // kh*kW + kw of each valid tap, grouped by kh
  int tap_col[kIgemmMaxTaps];  // its window column at position 0
  int plane_first[kIgemmMaxKh], plane_count[kIgemmMaxKh];
  int plane_row[kIgemmMaxKh];  // src row of each kh
  int active[kIgemmMaxKh];     // the kh with taps, in order
  int planes;
  int64_t col0;  // src column of window column 0
};
static_assert(sizeof(IgemmTaps) <= kIgemmStaticSmem, "the planner's count of static shared memory");

// The output tile of CTA blockIdx.x: phase r (from phase0), first GEMM row m0, first position
// q0, output row oh and image n. Phases fastest: the CTAs that write interleaved columns of one
// output row run together, so L2 sees whole sectors; then M tiles, which read the same src
// window.
struct IgemmBlock {
  int r;
  int64_t m0, q0;
  int oh;
  int64_t n;
};
__device__ inline IgemmBlock igemm_block(const IgemmProblem& p, int phase0, int bm, int bn) {
  int64_t b = blockIdx.x;
  const int r = phase0 + static_cast<int>(b % p.phases);
  b /= p.phases;
  const int64_t m0 = (b % p.m_tiles) * bm;
  b /= p.m_tiles;
  const int64_t q0 = (b % p.q_tiles) * bn;
  b /= p.q_tiles;
  return {r, m0, q0, static_cast<int>(b % p.Ho), b / p.Ho};
}

// Waits until this thread's copies of the oldest step in flight have landed, with `ahead`
// (1 to 3) steps' commit groups issued after it.
__device__ inline void igemm_wait_oldest(int ahead) {
  if (ahead == 3) {
    cp_async_wait<2>();
  } else if (ahead == 2) {
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
}

// Fills s for output row oh, phase r and first position q0. Run by one thread: the taps are few.
// 32-bit arithmetic: the planners bound every size used here.
__device__ inline void igemm_list_taps(const IgemmProblem& p, int oh, int r, int64_t q0,
                                       IgemmTaps& s) {
  const int kH = static_cast<int>(p.kH), kW = static_cast<int>(p.kW);
  const int sH = static_cast<int>(p.sH), sW = static_cast<int>(p.sW);
  int count = 0, planes = 0, min_off = INT32_MAX;
  int offs[kIgemmMaxTaps];
  for (int kh = 0; kh < kH; ++kh) {
    int row;
    if (p.gather) {
      const int t = oh + static_cast<int>(p.pH - kh * p.dH);
      row = (t >= 0 && t % sH == 0 && t / sH < p.Hs) ? t / sH : -1;
    } else {
      row = oh * sH + static_cast<int>(kh * p.dH - p.pH);
      if (row >= p.Hs) row = -1;
    }
    s.plane_row[kh] = row;
    s.plane_first[kh] = count;
    for (int kw = 0; row >= 0 && kw < kW; ++kw) {
      int off;  // src column read at position 0
      if (p.gather) {
        const int t = r + static_cast<int>(p.pW - kw * p.dW);
        if (((t % sW) + sW) % sW != 0) continue;
        off = t / sW;  // exact
      } else {
        off = static_cast<int>(kw * p.dW - p.pW);
      }
      s.tap_w[count] = kh * kW + kw;
      offs[count++] = off;
      min_off = off < min_off ? off : min_off;
    }
    s.plane_count[kh] = count - s.plane_first[kh];
    if (s.plane_count[kh] > 0) s.active[planes++] = kh;
  }
  for (int j = 0; j < count; ++j)
    s.tap_col[j] = (offs[j] - min_off) / p.win_step;  // exact
  s.planes = planes;
  s.col0 = q0 * p.s_in + (count > 0 ? min_off : 0);
}

// The window items of one thread: (k8 block kb, column j) for channels kb*8 + t and kb*8 + t + 4
// with t = threadIdx.x % 4 fixed and j advancing by kThreads / 4. The copy and the conversion
// visit them in the same order, so each thread converts exactly what it copied and needs only
// its own cp.async.wait, no barrier, between the two.
template <int kKb, int kThreads, class Body>
__device__ inline void igemm_for_each_item(int win_cols, Body&& body) {
  constexpr int kColsPerPass = kThreads / 4;
  int j = static_cast<int>(threadIdx.x) / 4, kb = 0;
  while (j >= win_cols)
    j -= win_cols, ++kb;
  for (; kb < kKb;) {
    body(kb, j);
    j += kColsPerPass;
    while (j >= win_cols)
      j -= win_cols, ++kb;
  }
}

// Copies step's raw src window (kChunk channels of one src row, win_cols columns, rows raw_pitch
// apart) of image n into raw, with zero fill outside src.
template <int kChunk, int kThreads>
__device__ inline void igemm_load_window(const IgemmProblem& p, const IgemmTaps& s, float* raw,
                                         int step, int64_t n) {
  const int64_t chunk = step / s.planes;
  const int row = s.plane_row[s.active[step % s.planes]];
  const int c_left = static_cast<int>(min_i64(p.C - chunk * kChunk, kChunk));
  const int64_t plane_stride = p.Hs * p.Ws;  // floats between channels of src
  const float* base = p.src + ((n * p.C + chunk * kChunk) * p.Hs + row) * p.Ws;
  const int t = static_cast<int>(threadIdx.x) % 4;
  igemm_for_each_item<kChunk / 8, kThreads>(p.win_cols, [&](int kb, int j) {
    const int64_t col = s.col0 + int64_t{j} * p.win_step;
    const bool col_ok = col >= 0 && col < p.Ws;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int cl = kb * 8 + t + 4 * h;
      const bool ok = col_ok && cl < c_left;
      cp_async4(raw + cl * p.raw_pitch + j, ok ? base + cl * plane_stride + col : p.src, ok);
    }
  });
}

// Fill mode (IgemmProblem::fill): stores v0, v1 (results with bias) at positions q, q + 1 of
// phase r of one output row and the bias at the other phases' columns of those positions, which
// have no taps, so a lane writes 2*s_out contiguous columns (one 16-byte store where aligned, for
// s_out = 2). Columns past the row are dropped.
__device__ inline void igemm_store_filled(const IgemmProblem& p, float* out_row, int r, int64_t q,
                                          float v0, float v1, float bias) {
  const int64_t s = p.s_out, wo = p.Wo;
  float* dst = out_row + q * s;
  if (s == 2 && q * s + 3 < wo) {
    const float4 v = r == 0 ? make_float4(v0, bias, v1, bias) : make_float4(bias, v0, bias, v1);
    const auto addr = reinterpret_cast<uintptr_t>(dst);
    if ((addr & 15) == 0) {
      *reinterpret_cast<float4*>(dst) = v;
    } else if ((addr & 7) == 0) {
      reinterpret_cast<float2*>(dst)[0] = make_float2(v.x, v.y);
      reinterpret_cast<float2*>(dst)[1] = make_float2(v.z, v.w);
    } else {
      dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
    }
    return;
  }
  for (int e = 0; e < 2; ++e) {
    for (int64_t rr = 0; rr < s; ++rr) {
      if ((q + e) * s + rr < wo) dst[e * s + rr] = rr == r ? (e == 0 ? v0 : v1) : bias;
    }
  }
}

}  // namespace tgrad::cuda
