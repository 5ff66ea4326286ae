// The depthwise transposed-conv kernels (one input and one output channel per group), with the
// weight (C, 1, kH, kW):
//   forward: y[n, c, oh, ow] = b[c] + sum_{kh, kw} x[n, c, ih, iw] w[c, kh, kw] over the taps with
//            ih = (oh + pH - kh*dH) / sH exact and in range (likewise iw);
//   dgrad:   dx[n, c, ih, iw] = sum_{kh, kw} dy[n, c, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW] w[c,
//            kh, kw];
//   wgrad:   dw[c, kh, kw] = sum_{n, ih, iw} x[n, c, ih, iw] dy[n, c, oh, ow].
// forward: one thread per output position, walking many (n, c) planes, so that its taps (which
// need divisions by the stride) are worked out once; dgrad: one thread per input element (its
// taps need no division). Taps summed in (kh, kw) order: memory-bound, every element written
// once. wgrad: stage 1 gives each (channel, chunk of batch x positions) one block whose threads
// accumulate every tap in float64 registers, reduced by a fixed shuffle tree and then across
// warps in order; stage 2 sums the chunks of each weight in chunk order. The chunking depends on
// the shape only, so the bits are the same on every run and GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <type_traits>

#include "cuda/conv_params.h"
#include "cuda/conv_transpose_depthwise.h"
#include "cuda/conv_transpose_gemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/kernel_stats.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

constexpr int kWarps = kThreads / 32;
// Positions per stage-1 block at least. Small layers (few channels, few positions) are cut into
// blocks of 1024 positions, so that they still fill the GPU: FCN's 21-class x2 upsampling wgrad
// 0.038 -> 0.020 ms, 16 channels at 16x16 0.055 -> 0.024 ms, against 4096 (GPU run 101, H200);
// the layers whose channels alone give enough blocks are not cut further.
constexpr int64_t kMinChunk = 1024;
constexpr int64_t kTargetBlocks = 2048;

// Forward: thread (ow, oh) works out the taps that reach its output position once, then walks
// the (n, c) planes z, z + gridDim.z, ...: the index arithmetic, which bounds these memory-bound
// kernels, is paid once per position rather than once per element. Taps are summed in (kh, kw)
// order from 0, the bias added last.
template <class T>
__global__ void dw_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ b, T* __restrict__ y, Plane32 q,
                                  RunSteps st, int64_t C, int64_t planes) {
  const int in_plane = q.Hi * q.Wi, out_plane = q.Ho * q.Wo, taps = q.kH * q.kW;
  const int64_t c_step = gridDim.z % C;
  for (int oh = blockIdx.y * blockDim.y + threadIdx.y; oh < q.Ho; oh += gridDim.y * blockDim.y) {
    const TapRun rh = gather_run(oh, q.kH, q.pH, q.dH, q.sH, q.Hi);
    for (int ow = blockIdx.x * blockDim.x + threadIdx.x; ow < q.Wo; ow += gridDim.x * blockDim.x) {
      const TapRun rw = gather_run(ow, q.kW, q.pW, q.dW, q.sW, q.Wi);
      int64_t c = blockIdx.z % C;
      for (int64_t plane = blockIdx.z; plane < planes; plane += gridDim.z) {
        const T* xc = x + plane * in_plane;
        const T* wc = w + c * taps;
        T acc = T(0);
        for (int jh = 0; jh < rh.n; ++jh) {
          const T* x_row = xc + (rh.i0 - jh * st.i_h) * q.Wi + rw.i0;
          const T* w_row = wc + (rh.k0 + jh * st.k_h) * q.kW + rw.k0;
          for (int jw = 0; jw < rw.n; ++jw)
            acc += x_row[-jw * st.i_w] * w_row[jw * st.k_w];
        }
        y[plane * out_plane + oh * q.Wo + ow] = b ? acc + b[c] : acc;
        c += c_step;
        if (c >= C) c -= C;
      }
    }
  }
}

// dgrad, one thread per input element (idx over (n, c, ih, iw)).
template <class T, class I>
__global__ void dw_dgrad_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                T* __restrict__ dx, Plane32 q, I C, I total) {
  const I in_plane = I{q.Hi} * q.Wi;
  const int out_plane = q.Ho * q.Wo, taps = q.kH * q.kW;
  const I stride = static_cast<I>(gridDim.x * blockDim.x);
  for (I idx = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); idx < total; idx += stride) {
    const I plane = idx / in_plane;
    const int pos = static_cast<int>(idx - plane * in_plane);
    const int c = static_cast<int>(plane % C);
    const int ih = pos / q.Wi, iw = pos - ih * q.Wi;
    const T* dyc = dy + int64_t{plane} * out_plane;
    const T* wc = w + int64_t{c} * taps;
    T acc = T(0);
    for (int kh = 0; kh < q.kH; ++kh) {
      const int oh = ih * q.sH - q.pH + kh * q.dH;
      if (oh < 0 || oh >= q.Ho) continue;
      for (int kw = 0; kw < q.kW; ++kw) {
        const int ow = iw * q.sW - q.pW + kw * q.dW;
        if (ow < 0 || ow >= q.Wo) continue;
        acc += dyc[oh * q.Wo + ow] * wc[kh * q.kW + kw];
      }
    }
    dx[idx] = acc;
  }
}

// The forward's launch shape over an H x W plane and `planes` planes: 32 x 8 threads (256 x 1
// for one-row planes), and enough planes in z that about 2^20 threads run, each walking the rest
// of the planes. (Walking planes did not pay in dgrad, whose taps need no division: there one
// thread per element measured faster.)
struct PlaneGrid {
  dim3 grid, block;
};
PlaneGrid plane_grid(int64_t H, int64_t W, int64_t planes) {
  const dim3 block(H == 1 ? 256 : 32, H == 1 ? 1 : 8);
  const int64_t gx = std::clamp<int64_t>(ceil_div(W, block.x), 1, (int64_t{1} << 31) - 1);
  const int64_t gy = std::clamp<int64_t>(ceil_div(H, block.y), 1, 65535);
  const int64_t threads = gx * gy * block.x * block.y;
  const int64_t gz =
      std::clamp<int64_t>(ceil_div(int64_t{1} << 20, threads), 1, std::min<int64_t>(planes, 65535));
  return {dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)),
          block};
}

// Stage 1: block (c, chunk) writes out[(c * taps + tap) * chunks + chunk] (out = dw when
// chunks == 1); kMaxTaps >= taps accumulators (instances for 9, 16 and 32 taps keep the
// registers, and so the blocks per SM, of small kernels low). Each tap's row and column offsets
// (kh*dH, kw*dW) come from shared memory, so the unrolled tap loop has no division.
// Up to 16 taps the registers are capped for three blocks per SM (ncu: the uncapped kernel held
// two, and its warps waited on loads with nothing else to issue; a cap for four spills twice as
// much).
template <class T, class Out, int kMaxTaps>
__global__ void __launch_bounds__(kThreads, kMaxTaps <= 16 ? 3 : 1)
    dw_wgrad_kernel(const T* __restrict__ x, const T* __restrict__ dy, Out* __restrict__ out,
                    Plane32 q, int64_t N, int64_t C, int64_t chunks, int64_t chunk_len) {
  __shared__ double warp_sums[kMaxTaps][kWarps];
  __shared__ int tap_dh[kMaxTaps], tap_dw[kMaxTaps];
  const int64_t c = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int taps = q.kH * q.kW;
  if (static_cast<int>(threadIdx.x) < taps) {
    const int kh = static_cast<int>(threadIdx.x) / q.kW;
    tap_dh[threadIdx.x] = kh * q.dH;
    tap_dw[threadIdx.x] = (static_cast<int>(threadIdx.x) - kh * q.kW) * q.dW;
  }
  __syncthreads();
  const int in_plane = q.Hi * q.Wi, out_plane = q.Ho * q.Wo;
  const int64_t r_end = min_i64(N * in_plane, (chunk + 1) * chunk_len);
  double acc[kMaxTaps];
#pragma unroll
  for (int t = 0; t < kMaxTaps; ++t)
    acc[t] = 0.0;
  int64_t r = chunk * chunk_len + threadIdx.x;
  // (n, pos) of r, advanced without dividing in 64 bits.
  int64_t n = r / in_plane;
  int pos = static_cast<int>(r - n * in_plane);
  for (; r < r_end; r += blockDim.x) {
    const int ih = pos / q.Wi, iw = pos - ih * q.Wi;
    const int oh0 = ih * q.sH - q.pH, ow0 = iw * q.sW - q.pW;
    const int64_t plane = n * C + c;
    const double xv = static_cast<double>(x[plane * in_plane + pos]);
    const T* dyc = dy + plane * out_plane;
#pragma unroll
    for (int t = 0; t < kMaxTaps; ++t) {
      if (t < taps) {
        const int oh = oh0 + tap_dh[t], ow = ow0 + tap_dw[t];
        if (oh >= 0 && oh < q.Ho && ow >= 0 && ow < q.Wo) {
          acc[t] += xv * static_cast<double>(dyc[oh * q.Wo + ow]);
        }
      }
    }
    pos += static_cast<int>(blockDim.x);
    while (pos >= in_plane) {
      pos -= in_plane;
      ++n;
    }
  }
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
#pragma unroll
  for (int t = 0; t < kMaxTaps; ++t) {
    if (t < taps) {
      double v = acc[t];
      for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
      if (lane == 0) warp_sums[t][warp] = v;
    }
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < taps) {
    double s = 0.0;
    for (int k = 0; k < kWarps; ++k)
      s += warp_sums[threadIdx.x][k];
    out[(c * taps + threadIdx.x) * chunks + chunk] = static_cast<Out>(s);
  }
}

// Stage 2: dw[e] = sum_{k < chunks} partials[e * chunks + k], in order of k.
template <class T>
__global__ void dw_sum_chunks_kernel(const double* __restrict__ partials, T* __restrict__ dw,
                                     int64_t elements, int64_t chunks) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    double acc = 0.0;
    for (int64_t k = 0; k < chunks; ++k)
      acc += partials[e * chunks + k];
    dw[e] = static_cast<T>(acc);
  }
}

// Calls f(I{}) with I = int when a flat loop over `total` items cannot overflow 32 bits (the
// grid stride included), else with I = int64_t.
constexpr int64_t kFlat32 = (int64_t{1} << 31) - (int64_t{1} << 25);
template <class F>
void with_index_type(int64_t total, F&& f) {
  if (total <= kFlat32) {
    f(int{});
  } else {
    f(int64_t{});
  }
}

template <class T>
void run_typed(CachingAllocator& alloc, ConvPass pass, const ConvParams& p, const ConvOperands& t) {
  const Plane32 q = plane32(p);
  switch (pass) {
    case ConvPass::forward: {
      const int64_t planes = p.N * p.Co;
      if (planes == 0 || p.Ho * p.Wo == 0) break;
      const PlaneGrid lg = plane_grid(p.Ho, p.Wo, planes);
      dw_forward_kernel<T><<<lg.grid, lg.block>>>(
          t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.bias ? t.bias->data_ptr<T>() : nullptr,
          t.out.data_ptr<T>(), q, run_steps(q), p.Co, planes);
      TGRAD_CUDA_CHECK_LAUNCH("dw_forward_kernel");
      break;
    }
    case ConvPass::dgrad: {
      const int64_t total = p.N * p.Ci * p.Hi * p.Wi;
      with_index_type(total, [&](auto tag) {
        using I = decltype(tag);
        dw_dgrad_kernel<T, I><<<grid_for(total), kThreads>>>(
            t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.out.data_ptr<T>(), q, I(p.Ci), I(total));
        TGRAD_CUDA_CHECK_LAUNCH("dw_dgrad_kernel");
      });
      break;
    }
    case ConvPass::wgrad: {
      const int64_t r_total = p.N * p.Hi * p.Wi;
      const int64_t elements = t.out.numel();
      int64_t chunks = std::clamp<int64_t>(ceil_div(kTargetBlocks, p.Ci), 1,
                                           std::max<int64_t>(1, ceil_div(r_total, kMinChunk)));
      const int64_t chunk_len = ceil_div(r_total, chunks);
      chunks = ceil_div(r_total, chunk_len);
      const auto blocks = static_cast<unsigned>(p.Ci * chunks);
      // The partials (Ci * chunks * taps doubles, chunks <= kTargetBlocks / Ci + 1) live until
      // this scope ends; the stream orders their reuse after stage 2.
      std::shared_ptr<void> storage;
      double* partials = nullptr;
      if (chunks > 1) {
        storage =
            alloc.allocate(elements * chunks * int64_t{sizeof(double)}, t.out.device().index());
        partials = static_cast<double*>(storage.get());
      }
      const auto stage1 = [&](auto max_taps) {
        constexpr int kTaps = decltype(max_taps)::value;
        if (chunks == 1) {
          dw_wgrad_kernel<T, T, kTaps><<<blocks, kThreads>>>(t.a.data_ptr<T>(), t.b.data_ptr<T>(),
                                                             t.out.data_ptr<T>(), q, p.N, p.Ci,
                                                             chunks, chunk_len);
        } else {
          dw_wgrad_kernel<T, double, kTaps><<<blocks, kThreads>>>(
              t.a.data_ptr<T>(), t.b.data_ptr<T>(), partials, q, p.N, p.Ci, chunks, chunk_len);
        }
        TGRAD_CUDA_CHECK_LAUNCH("dw_wgrad_kernel");
      };
      const int64_t taps = p.kH * p.kW;
      if (taps <= 9) {
        stage1(std::integral_constant<int, 9>{});
      } else if (taps <= 16) {
        stage1(std::integral_constant<int, 16>{});
      } else {
        stage1(std::integral_constant<int, static_cast<int>(kDepthwiseMaxTaps)>{});
      }
      if (chunks == 1) break;
      dw_sum_chunks_kernel<T>
          <<<grid_for(elements), kThreads>>>(partials, t.out.data_ptr<T>(), elements, chunks);
      TGRAD_CUDA_CHECK_LAUNCH("dw_sum_chunks_kernel");
      break;
    }
  }
}

}  // namespace

void conv_depthwise_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                        const ConvOperands& t) {
  const ConvParams p = conv_operand_params(pass, g, t, /*depthwise=*/true);
  DeviceGuard guard(t.out.device());
  dispatch_float(t.out.dtype(), [&](auto tag) { run_typed<decltype(tag)>(alloc, pass, p, t); });
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t conv_depthwise_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tgrad::cuda
