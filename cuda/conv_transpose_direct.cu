// The direct transposed-conv kernels: plain FMA on the CUDA cores, for calls with few channels
// per group (RGB or mono outputs, grouped layers). There a GEMM's tiles are mostly padding and
// the column buffer of the GEMM path costs more traffic than the multiplies, so these kernels
// read each operand from DRAM about once and hold a small register block of results instead.
// Weight (Ci, Cog, kH, kW); group g owns input channels g*Cig.. and output channels g*Cog...
//
//   forward: y[n, g*Cog + co, oh, ow] = b + sum_{ci, taps reaching (oh, ow)} x[n, g*Cig + ci, ih,
//   iw]
//            w[g*Cig + ci, co, kh, kw]. A thread owns `reg` output channels of one position. A
//            warp's 32 positions share one stride phase (oh mod sH, ow mod sW), so they share
//            their taps: the weights come from shared memory as one broadcast, and x is read at
//            consecutive columns. A block covers every phase of the same input columns, so the
//            x that one phase reads is in L1 for the others.
//   dgrad:   dx[n, g*Cig + ci, ih, iw] = sum_{co, kh, kw} dy[n, g*Cog + co, ih*sH - pH + kh*dH,
//            iw*sW - pW + kw*dW] w[g*Cig + ci, co, kh, kw]; a thread owns `reg` input channels of
//            one position.
//   wgrad:   dw[g*Cig + ci, co, kh, kw] = sum_{n, ih, iw} x[n, g*Cig + ci, ih, iw] dy[n, g*Cog +
//   co,
//            ...]; a block owns `reg` input channels x `cols` (co, tap) columns of one group and
//            one chunk of batch x positions; each thread sums its positions, the block reduces in a
//            fixed tree, and a second kernel adds the chunks in order (float64).
//
// Every sum has a fixed order, every output is written once: the bits do not depend on the run,
// and the chunking depends on the shape only. Both float32 precisions compute in full float32.
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "cuda/chunk_sum.cuh"
#include "cuda/conv_params.h"
#include "cuda/conv_transpose_direct.h"
#include "cuda/conv_transpose_gemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/kernel_stats.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

constexpr int kWarpsWgrad = static_cast<int>(kDirectWgradWarps), kWgradThreads = 32 * kWarpsWgrad;

// The sizes the three kernels share (beside Plane32's per-plane geometry).
struct DirectDims {
  int64_t N, Ci, Co, G, Cig, Cog;
  int64_t blocks;  // channel blocks per group: output (forward) or input (dgrad, wgrad)
  int64_t stage;   // channels per shared-memory stage of the weights (forward, dgrad)
  // forward: output positions per phase and axis, their product with the batch, and the runs of
  // 32 positions a block covers per phase.
  int64_t Qh, Qw, Q;
  int groups32;
};

// out[0..K) = p[0..K): one or two 16-byte shared-memory loads where the block allows (the
// weights of a tap are a warp-wide broadcast), else 8-byte or scalar ones.
template <class T, int K>
__device__ inline void load_block(const T* p, T (&out)[K]) {
  constexpr int kBytes = K * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      memcpy(reinterpret_cast<char*>(out) + 16 * i, &v, 16);
    }
  } else if constexpr (kBytes == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    memcpy(out, &v, 8);
  } else {
#pragma unroll
    for (int i = 0; i < K; ++i)
      out[i] = p[i];
  }
}

// n / d for n < 2^32 by a multiply and a shift (d >= 1, fixed per launch): the position walk of
// wgrad divides once per position, and a 64-bit division there cost as much as the FMAs.
struct FastDiv {
  uint32_t d, m, s;
};
FastDiv fast_div(uint32_t d) {
  uint32_t s = 0;
  while ((uint64_t{1} << s) < d)
    ++s;
  const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1;
  return {d, static_cast<uint32_t>(m), s};
}
__device__ inline uint32_t div_by(uint32_t n, const FastDiv& f) {
  const uint32_t t = __umulhi(n, f.m);
  return static_cast<uint32_t>((uint64_t{t} + n) >> f.s);
}

// ---- forward ---------------------------------------------------------------------------------

// Block (x: runs of positions, y: group x output-channel block). Each warp walks the items
// (phase, run of 32 positions) warp, warp + warps, ...; the positions q = (n, jh, jw) of a run
// are consecutive, with output (oh, ow) = (rh + sH*jh, rw + sW*jw) for phase (rh, rw).
template <class T, int kReg>
__global__ void __launch_bounds__(512)
    direct_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                      T* __restrict__ y, Plane32 q, RunSteps st, DirectDims d) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ws = reinterpret_cast<T*>(smem_raw);
  const int taps = q.kH * q.kW;
  const int64_t g = blockIdx.y / d.blocks, co0 = (blockIdx.y % d.blocks) * kReg;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  const int items = q.sH * q.sW * d.groups32;
  const int rounds = (items + warps - 1) / warps;
  const int64_t q_base = blockIdx.x * int64_t{32} * d.groups32;
  const int64_t in_plane = int64_t{q.Hi} * q.Wi;
  const int64_t stages = ceil_div(d.Cig, d.stage);
  // Stage the weights of input channels [ci0, ci0 + cn): ws[(ci * taps + tap) * kReg + u] =
  // w[g*Cig + ci0 + ci, co0 + u, tap], zero past Cog.
  const auto stage = [&](int64_t ci0, int cn) {
    const int total = cn * taps * kReg;
    for (int e = static_cast<int>(threadIdx.x); e < total; e += static_cast<int>(blockDim.x)) {
      const int u = e % kReg, rest = e / kReg, tap = rest % taps, ci = rest / taps;
      const int64_t co = co0 + u;
      ws[e] = co < d.Cog ? w[((g * d.Cig + ci0 + ci) * d.Cog + co) * taps + tap] : T(0);
    }
  };
  if (stages == 1) {
    stage(0, static_cast<int>(d.Cig));
    __syncthreads();
  }
  for (int round = 0; round < rounds; ++round) {
    const int item = warp + round * warps;
    const int phase = item / d.groups32, run = item - phase * d.groups32;
    const int rh = phase / q.sW, rw = phase - rh * q.sW;
    const int64_t qq = q_base + run * 32 + lane;
    bool valid = item < items && qq < d.Q;
    int64_t n = 0;
    int oh = 0, ow = 0;
    TapRun th{0, 0, 0}, tw{0, 0, 0};
    if (valid) {
      const int64_t plane_q = d.Qh * d.Qw;
      n = qq / plane_q;
      const int64_t rem = qq - n * plane_q;
      const int64_t jh = rem / d.Qw, jw = rem - jh * d.Qw;
      oh = rh + q.sH * static_cast<int>(jh);
      ow = rw + q.sW * static_cast<int>(jw);
      valid = oh < q.Ho && ow < q.Wo;
      if (valid) {
        th = gather_run(oh, q.kH, q.pH, q.dH, q.sH, q.Hi);
        tw = gather_run(ow, q.kW, q.pW, q.dW, q.sW, q.Wi);
      }
    }
    T acc[kReg];
#pragma unroll
    for (int u = 0; u < kReg; ++u)
      acc[u] = T(0);
    const T* xn = x + (n * d.Ci + g * d.Cig) * in_plane;
    for (int64_t s = 0; s < stages; ++s) {
      const int64_t ci0 = s * d.stage;
      const int cn = static_cast<int>(min_i64(d.stage, d.Cig - ci0));
      if (stages > 1) {
        __syncthreads();
        stage(ci0, cn);
        __syncthreads();
      }
      for (int a = 0; a < th.n; ++a) {
        const int ih = th.i0 - a * st.i_h, kh = th.k0 + a * st.k_h;
        for (int c = 0; c < tw.n; ++c) {
          const int iw = tw.i0 - c * st.i_w, kw = tw.k0 + c * st.k_w;
          const T* xp = xn + ci0 * in_plane + ih * q.Wi + iw;
          const T* wp = ws + (kh * q.kW + kw) * kReg;
#pragma unroll 4
          for (int ci = 0; ci < cn; ++ci) {
            const T xv = *xp;
            xp += in_plane;
            T wv[kReg];
            load_block<T, kReg>(wp + ci * taps * kReg, wv);
#pragma unroll
            for (int u = 0; u < kReg; ++u)
              acc[u] = fma(xv, wv[u], acc[u]);
          }
        }
      }
    }
    if (valid) {
      const int64_t out_plane = int64_t{q.Ho} * q.Wo;
#pragma unroll
      for (int u = 0; u < kReg; ++u) {
        const int64_t co = g * d.Cog + co0 + u;
        if (co0 + u < d.Cog)
          y[(n * d.Co + co) * out_plane + oh * q.Wo + ow] = b ? acc[u] + b[co] : acc[u];
      }
    }
  }
}

// ---- dgrad -----------------------------------------------------------------------------------

// Block (x: 256 positions of batch x input plane, y: group x input-channel block).
template <class T, int kReg>
__global__ void __launch_bounds__(kThreads)
    direct_dgrad_kernel(const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
                        Plane32 q, DirectDims d, FastDiv div_plane, FastDiv div_w) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ws = reinterpret_cast<T*>(smem_raw);
  const int taps = q.kH * q.kW;
  const int64_t g = blockIdx.y / d.blocks, ci0 = (blockIdx.y % d.blocks) * kReg;
  const int64_t in_plane = int64_t{q.Hi} * q.Wi, out_plane = int64_t{q.Ho} * q.Wo;
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t r_total = d.N * in_plane;
  const bool valid = r < r_total;
  int64_t n = 0;
  int pos = 0;
  if (valid && r_total <= int64_t{UINT32_MAX}) {  // multiply and shift, not a 64-bit division
    const auto nl = div_by(static_cast<uint32_t>(r), div_plane);
    n = nl;
    pos = static_cast<int>(static_cast<uint32_t>(r) - nl * static_cast<uint32_t>(in_plane));
  } else if (valid) {
    n = r / in_plane;
    pos = static_cast<int>(r - n * in_plane);
  }
  const int ih = static_cast<int>(div_by(static_cast<uint32_t>(pos), div_w));
  const int iw = pos - ih * q.Wi;
  // The taps that land in dy: kh in [kh0, kh1), kw in [kw0, kw1), so the loops test no bounds.
  const int bh = ih * q.sH - q.pH, bw = iw * q.sW - q.pW;
  const int kh0 = bh >= 0 ? 0 : (-bh + q.dH - 1) / q.dH;
  const int kh1 = q.Ho - bh <= 0 ? 0 : min(q.kH, (q.Ho - bh + q.dH - 1) / q.dH);
  const int kw0 = bw >= 0 ? 0 : (-bw + q.dW - 1) / q.dW;
  const int kw1 = q.Wo - bw <= 0 ? 0 : min(q.kW, (q.Wo - bw + q.dW - 1) / q.dW);
  const int64_t stages = ceil_div(d.Cog, d.stage);
  // ws[(co * taps + tap) * kReg + u] = w[g*Cig + ci0 + u, co0 + co, tap], zero past Cig.
  const auto stage = [&](int64_t co0, int cn) {
    const int total = cn * taps * kReg;
    for (int e = static_cast<int>(threadIdx.x); e < total; e += static_cast<int>(blockDim.x)) {
      const int u = e % kReg, rest = e / kReg, tap = rest % taps, co = rest / taps;
      const int64_t ci = ci0 + u;
      ws[e] = ci < d.Cig ? w[((g * d.Cig + ci) * d.Cog + co0 + co) * taps + tap] : T(0);
    }
  };
  T acc[kReg];
#pragma unroll
  for (int u = 0; u < kReg; ++u)
    acc[u] = T(0);
  // dy of the first tap of each row: (n, g*Cog + co, bh + kh*dH, bw), as an offset (the column
  // may be left of the row; only in-range taps are read).
  const int64_t dy_n = (n * d.Co + g * d.Cog) * out_plane + int64_t{bh} * q.Wo + bw;
  for (int64_t s = 0; s < stages; ++s) {
    const int64_t co0 = s * d.stage;
    const int cn = static_cast<int>(min_i64(d.stage, d.Cog - co0));
    if (s > 0) __syncthreads();
    stage(co0, cn);
    __syncthreads();
    if (!valid) continue;
    if (cn == 1) {
      // One output channel (mono outputs): the taps are the only loop, innermost.
      const int64_t dy_c = dy_n + co0 * out_plane;
      for (int kh = kh0; kh < kh1; ++kh) {
        // The row's first tap in dy and its weights; the taps step by dW in dy.
        const T* drow = dy + (dy_c + int64_t{kh} * q.dH * q.Wo + int64_t{kw0} * q.dW);
        const T* wrow = ws + (kh * q.kW + kw0) * kReg;
#pragma unroll 4
        for (int kw = 0; kw < kw1 - kw0; ++kw) {
          const T dv = drow[kw * q.dW];
          T wv[kReg];
          load_block<T, kReg>(wrow + kw * kReg, wv);
#pragma unroll
          for (int u = 0; u < kReg; ++u)
            acc[u] = fma(dv, wv[u], acc[u]);
        }
      }
      continue;
    }
    // Several output channels: taps outer, the stage's channels inner (measured faster for
    // RGB and grouped layers than the taps innermost, run 48).
    for (int kh = kh0; kh < kh1; ++kh) {
      for (int kw = kw0; kw < kw1; ++kw) {
        const T* dp = dy + (dy_n + co0 * out_plane + int64_t{kh} * q.dH * q.Wo + kw * q.dW);
        const T* wp = ws + (kh * q.kW + kw) * kReg;
#pragma unroll 4
        for (int co = 0; co < cn; ++co) {
          const T dv = *dp;
          dp += out_plane;
          T wv[kReg];
          load_block<T, kReg>(wp + co * taps * kReg, wv);
#pragma unroll
          for (int u = 0; u < kReg; ++u)
            acc[u] = fma(dv, wv[u], acc[u]);
        }
      }
    }
  }
  if (!valid) return;
#pragma unroll
  for (int u = 0; u < kReg; ++u) {
    if (ci0 + u < d.Cig) dx[(n * d.Ci + g * d.Cig + ci0 + u) * in_plane + pos] = acc[u];
  }
}

// ---- wgrad -----------------------------------------------------------------------------------

// One (co, tap) column of a wgrad block: its row and column offsets in dy, and the offset of its
// output channel's plane plus both, from a position's (ih*sH - pH, iw*sW - pW) corner.
struct WgradColumn {
  int dh, dw;
  long long off;
};

// Column c, read from shared memory at every position (one broadcast load): left to the compiler,
// the columns stayed in registers across the position loop, 32-64 registers a thread that held
// the kernel to three blocks an SM, and ncu found the warps short of work to hide their loads.
__device__ inline WgradColumn load_column(const WgradColumn* p) {
  int4 v;
  const auto a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(a));
  const auto off = (static_cast<unsigned long long>(static_cast<unsigned>(v.w)) << 32) |
                   static_cast<unsigned>(v.z);
  return {v.x, v.y, static_cast<long long>(off)};
}

// Block x = ((g * ci_blocks + ci_block) * col_blocks + col_block) + combos * chunk: the blocks
// that run together share a chunk of positions, so its x and dy come from DRAM about once. Each
// thread sums the chunk's positions r, r + 128, ...; the block reduces each accumulator in a
// fixed tree (shuffles, then the warps in order) and writes out = dw (chunks == 1) or the chunk's
// partials, [chunk][Ci * Cog * taps]. 128 threads with four blocks an SM leave 128 registers a
// thread, for the 64 accumulators.
template <class T, int kReg, int kCols>
__global__ void __launch_bounds__(kWgradThreads, 4)
    direct_wgrad_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ out,
                        Plane32 q, DirectDims d, int64_t col_blocks, int64_t chunk_len,
                        FastDiv div_plane, FastDiv div_w) {
  __shared__ __align__(16) WgradColumn columns[kCols];
  __shared__ T warp_sums[kReg * kCols][kWarpsWgrad];
  const int taps = q.kH * q.kW;
  const int64_t cog_taps = d.Cog * taps;
  const int64_t combos = d.G * d.blocks * col_blocks;
  const int64_t combo = blockIdx.x % combos, chunk = blockIdx.x / combos;
  const int64_t g = combo / (d.blocks * col_blocks), rest = combo % (d.blocks * col_blocks);
  const int64_t ci0 = (rest / col_blocks) * kReg, c0 = (rest % col_blocks) * kCols;
  const int64_t in_plane = int64_t{q.Hi} * q.Wi, out_plane = int64_t{q.Ho} * q.Wo;
  if (threadIdx.x < kCols) {
    const int64_t c = c0 + threadIdx.x;
    WgradColumn col{INT_MIN / 2, INT_MIN / 2, 0};  // a column past Cog*taps never lands in dy
    if (c < cog_taps) {
      const int64_t co = c / taps;
      const int tap = static_cast<int>(c - co * taps);
      const int kh = tap / q.kW, kw = tap - kh * q.kW;
      col.dh = kh * q.dH;
      col.dw = kw * q.dW;
      col.off = co * out_plane + int64_t{col.dh} * q.Wo + col.dw;
    }
    columns[threadIdx.x] = col;
  }
  __syncthreads();
  T acc[kReg][kCols];
#pragma unroll
  for (int u = 0; u < kReg; ++u)
#pragma unroll
    for (int c = 0; c < kCols; ++c)
      acc[u][c] = T(0);
  const int64_t r_total = d.N * in_plane;
  const int64_t r_begin = chunk * chunk_len, r_end = min_i64(r_total, r_begin + chunk_len);
  // Positions are (n_base + rl / in_plane, rl % in_plane) with rl < chunk_len + in_plane < 2^32.
  const int64_t n_base = r_begin / in_plane, r_base = n_base * in_plane;
  const T* xg = x + (g * d.Cig + ci0) * in_plane;
  const T* dyg = dy + g * d.Cog * out_plane;
  for (int64_t r = r_begin + threadIdx.x; r < r_end; r += kWgradThreads) {
    const auto rl = static_cast<uint32_t>(r - r_base);
    const uint32_t nl = div_by(rl, div_plane);
    const int64_t n = n_base + nl;
    const int pos = static_cast<int>(rl - nl * static_cast<uint32_t>(in_plane));
    const int ih = static_cast<int>(div_by(static_cast<uint32_t>(pos), div_w));
    const int iw = pos - ih * q.Wi;
    T xv[kReg];
    const T* xp = xg + n * d.Ci * in_plane + pos;
#pragma unroll
    for (int u = 0; u < kReg; ++u)
      xv[u] = ci0 + u < d.Cig ? xp[u * in_plane] : T(0);
    const int bh = ih * q.sH - q.pH, bw = iw * q.sW - q.pW;
    const int64_t base = n * d.Co * out_plane + int64_t{bh} * q.Wo + bw;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const WgradColumn col = load_column(&columns[c]);
      const int oh = bh + col.dh, ow = bw + col.dw;
      if (oh >= 0 && oh < q.Ho && ow >= 0 && ow < q.Wo) {
        const T dv = dyg[base + col.off];
#pragma unroll
        for (int u = 0; u < kReg; ++u)
          acc[u][c] = fma(xv[u], dv, acc[u][c]);
      }
    }
  }
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
#pragma unroll
  for (int u = 0; u < kReg; ++u) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      T v = acc[u][c];
      for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
      if (lane == 0) warp_sums[u * kCols + c][warp] = v;
    }
  }
  __syncthreads();
  const int64_t elements = d.Ci * cog_taps;
  for (int e = static_cast<int>(threadIdx.x); e < kReg * kCols; e += kWgradThreads) {
    const int u = e / kCols, c = e - u * kCols;
    if (ci0 + u >= d.Cig || c0 + c >= cog_taps) continue;
    T s = T(0);
    for (int k = 0; k < kWarpsWgrad; ++k)
      s += warp_sums[e][k];
    out[chunk * elements + (g * d.Cig + ci0 + u) * cog_taps + c0 + c] = s;
  }
}

// Calls f(std::integral_constant<int, R>{}) for the plan's register block R.
template <class F>
void with_reg(int reg, F&& f) {
  switch (reg) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return;
    case 2:
      f(std::integral_constant<int, 2>{});
      return;
    case 4:
      f(std::integral_constant<int, 4>{});
      return;
    case 8:
      f(std::integral_constant<int, 8>{});
      return;
    default:
      TGRAD_FAIL("CUDA conv_transpose (direct): no kernel for a register block of ", reg);
  }
}

template <class T>
void run_typed(CachingAllocator& alloc, ConvPass pass, const DirectPlan& plan, const ConvParams& p,
               const ConvOperands& t) {
  const Plane32 q = plane32(p);
  DirectDims d{p.N, p.Ci, p.Co, p.G, p.Cig, p.Cog, 0, plan.stage, 0, 0, 0, plan.groups32};
  const dim3 grid(static_cast<unsigned>(plan.grid_x), static_cast<unsigned>(plan.grid_y));
  const auto smem = static_cast<size_t>(plan.smem_bytes);
  switch (pass) {
    case ConvPass::forward:
      d.blocks = ceil_div(p.Cog, plan.reg);
      d.Qh = ceil_div(p.Ho, p.sH);
      d.Qw = ceil_div(p.Wo, p.sW);
      d.Q = p.N * d.Qh * d.Qw;
      with_reg(plan.reg, [&](auto reg) {
        direct_fwd_kernel<T, decltype(reg)::value><<<grid, plan.warps * 32, smem>>>(
            t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.bias ? t.bias->data_ptr<T>() : nullptr,
            t.out.data_ptr<T>(), q, run_steps(q), d);
        TGRAD_CUDA_CHECK_LAUNCH("direct_fwd_kernel");
      });
      break;
    case ConvPass::dgrad:
      d.blocks = ceil_div(p.Cig, plan.reg);
      with_reg(plan.reg, [&](auto reg) {
        direct_dgrad_kernel<T, decltype(reg)::value><<<grid, kThreads, smem>>>(
            t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.out.data_ptr<T>(), q, d,
            fast_div(static_cast<uint32_t>(p.Hi * p.Wi)), fast_div(static_cast<uint32_t>(p.Wi)));
        TGRAD_CUDA_CHECK_LAUNCH("direct_dgrad_kernel");
      });
      break;
    case ConvPass::wgrad: {
      d.blocks = ceil_div(p.Cig, plan.reg);
      const int64_t col_blocks = ceil_div(p.Cog * p.kH * p.kW, plan.cols);
      const int64_t elements = t.out.numel();
      // The partials live until this scope ends; the stream orders their reuse after stage 2.
      std::shared_ptr<void> storage;
      T* dst = t.out.data_ptr<T>();
      if (plan.chunks > 1) {
        storage =
            alloc.allocate(plan.chunks * elements * int64_t{sizeof(T)}, t.out.device().index());
        dst = static_cast<T*>(storage.get());
      }
      const FastDiv div_plane = fast_div(static_cast<uint32_t>(p.Hi * p.Wi));
      const FastDiv div_w = fast_div(static_cast<uint32_t>(p.Wi));
      with_reg(plan.reg, [&](auto reg) {
        constexpr int kReg = decltype(reg)::value;
        direct_wgrad_kernel<T, kReg, kDirectWgradCols(kReg)>
            <<<grid.x, kWgradThreads>>>(t.a.data_ptr<T>(), t.b.data_ptr<T>(), dst, q, d, col_blocks,
                                        plan.chunk_len, div_plane, div_w);
        TGRAD_CUDA_CHECK_LAUNCH("direct_wgrad_kernel");
      });
      if (plan.chunks > 1) {
        sum_chunks_in_order<T>
            <<<grid_for(elements), kThreads>>>(dst, t.out.data_ptr<T>(), elements, plan.chunks);
        TGRAD_CUDA_CHECK_LAUNCH("sum_chunks_in_order");
      }
      break;
    }
  }
}

}  // namespace

void conv_direct_run(CachingAllocator& alloc, ConvPass pass, const DirectPlan& plan,
                     const ConvGeometry& g, const ConvOperands& t) {
  static constexpr const char* kNames[3] = {"CUDA conv_transpose_forward (direct)",
                                            "CUDA conv_transpose_dgrad (direct)",
                                            "CUDA conv_transpose_wgrad (direct)"};
  const char* fn = kNames[static_cast<size_t>(pass)];
  const ConvParams p = pass == ConvPass::forward ? make_conv_params(fn, g, t.a, t.b, t.out)
                       : pass == ConvPass::dgrad ? make_conv_params(fn, g, t.out, t.b, t.a)
                                                 : make_conv_params(fn, g, t.a, t.out, t.b);
  if (t.out.numel() == 0) return;
  DeviceGuard guard(t.out.device());
  dispatch_float(t.out.dtype(),
                 [&](auto tag) { run_typed<decltype(tag)>(alloc, pass, plan, p, t); });
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t conv_direct_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tgrad::cuda
