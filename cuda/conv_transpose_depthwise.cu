// The depthwise transposed-conv kernels (one input and one output channel per group), with the
// weight (C, 1, kH, kW):
//   forward: y[n, c, oh, ow] = b[c] + sum_{kh, kw} x[n, c, ih, iw] w[c, kh, kw] over the taps with
//            ih = (oh + pH - kh*dH) / sH exact and in range (likewise iw);
//   dgrad:   dx[n, c, ih, iw] = sum_{kh, kw} dy[n, c, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW] w[c,
//            kh, kw];
//   wgrad:   dw[c, kh, kw] = sum_{n, ih, iw} x[n, c, ih, iw] dy[n, c, oh, ow].
// forward and dgrad: one thread per output element, the innermost spatial index fastest, taps
// summed in (kh, kw) order: memory-bound, every element written once. wgrad: stage 1 gives each
// (channel, chunk of batch x positions) one block whose threads accumulate every tap in float64
// registers, reduced by a fixed shuffle tree and then across warps in order; stage 2 sums the
// chunks of each weight in chunk order. The chunking depends on the shape only, so the bits are
// the same on every run and GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>

#include "cuda/conv_params.h"
#include "cuda/conv_transpose_depthwise.h"
#include "cuda/cuda_util.h"
#include "cuda/kernel_stats.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

constexpr int kMaxTaps = static_cast<int>(kDepthwiseMaxTaps);
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMinChunk = 4096;   // positions per stage-1 block at least
constexpr int64_t kTargetBlocks = 2048;

__device__ inline int64_t tap_source(int64_t o, int64_t k, int64_t pad, int64_t dil,
                                     int64_t stride, int64_t in_size) {
  const int64_t t = o + pad - k * dil;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < in_size ? i : -1;
}

template <class T>
__global__ void dw_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ b, T* __restrict__ y, ConvParams p) {
  const int64_t total = p.N * p.Co * p.Ho * p.Wo, taps = p.kH * p.kW;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = idx % p.Wo;
    const int64_t oh = (idx / p.Wo) % p.Ho;
    const int64_t nc = idx / (p.Wo * p.Ho);  // n * C + c
    const int64_t c = nc % p.Co;
    const T* xc = x + nc * p.Hi * p.Wi;
    const T* wc = w + c * taps;
    T acc = T(0);
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      const int64_t ih = tap_source(oh, kh, p.pH, p.dH, p.sH, p.Hi);
      if (ih < 0) continue;
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t iw = tap_source(ow, kw, p.pW, p.dW, p.sW, p.Wi);
        if (iw < 0) continue;
        acc += xc[ih * p.Wi + iw] * wc[kh * p.kW + kw];
      }
    }
    y[idx] = b ? acc + b[c] : acc;
  }
}

template <class T>
__global__ void dw_dgrad_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                T* __restrict__ dx, ConvParams p) {
  const int64_t total = p.N * p.Ci * p.Hi * p.Wi, taps = p.kH * p.kW;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t iw = idx % p.Wi;
    const int64_t ih = (idx / p.Wi) % p.Hi;
    const int64_t nc = idx / (p.Wi * p.Hi);
    const int64_t c = nc % p.Ci;
    const T* dyc = dy + nc * p.Ho * p.Wo;
    const T* wc = w + c * taps;
    T acc = T(0);
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      const int64_t oh = ih * p.sH - p.pH + kh * p.dH;
      if (oh < 0 || oh >= p.Ho) continue;
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t ow = iw * p.sW - p.pW + kw * p.dW;
        if (ow < 0 || ow >= p.Wo) continue;
        acc += dyc[oh * p.Wo + ow] * wc[kh * p.kW + kw];
      }
    }
    dx[idx] = acc;
  }
}

// Stage 1: block (c, chunk) writes out[(c * taps + tap) * chunks + chunk] (out = dw when
// chunks == 1).
template <class T, class Out>
__global__ void dw_wgrad_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                Out* __restrict__ out, ConvParams p, int64_t chunks,
                                int64_t chunk_len) {
  __shared__ double warp_sums[kMaxTaps][kWarps];
  const int64_t c = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int taps = static_cast<int>(p.kH * p.kW);
  const int64_t positions = p.Hi * p.Wi, r_total = p.N * positions;
  const int64_t r_end = min_i64(r_total, (chunk + 1) * chunk_len);
  double acc[kMaxTaps];
#pragma unroll
  for (int t = 0; t < kMaxTaps; ++t)
    acc[t] = 0.0;
  for (int64_t r = chunk * chunk_len + threadIdx.x; r < r_end; r += blockDim.x) {
    const int64_t n = r / positions, pos = r % positions;
    const int64_t ih = pos / p.Wi, iw = pos % p.Wi;
    const double xv = static_cast<double>(x[(n * p.Ci + c) * positions + pos]);
    const T* dyc = dy + (n * p.Co + c) * p.Ho * p.Wo;
#pragma unroll
    for (int t = 0; t < kMaxTaps; ++t) {
      if (t < taps) {
        const int64_t oh = ih * p.sH - p.pH + (t / p.kW) * p.dH;
        const int64_t ow = iw * p.sW - p.pW + (t % p.kW) * p.dW;
        if (oh >= 0 && oh < p.Ho && ow >= 0 && ow < p.Wo) {
          acc[t] += xv * static_cast<double>(dyc[oh * p.Wo + ow]);
        }
      }
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

template <class T>
void run_typed(CachingAllocator& alloc, ConvPass pass, const ConvParams& p,
               const ConvOperands& t) {
  switch (pass) {
    case ConvPass::forward: {
      const int64_t total = p.N * p.Co * p.Ho * p.Wo;
      dw_forward_kernel<T><<<grid_for(total), kThreads>>>(
          t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.bias ? t.bias->data_ptr<T>() : nullptr,
          t.out.data_ptr<T>(), p);
      TGRAD_CUDA_CHECK_LAUNCH("dw_forward_kernel");
      break;
    }
    case ConvPass::dgrad: {
      const int64_t total = p.N * p.Ci * p.Hi * p.Wi;
      dw_dgrad_kernel<T><<<grid_for(total), kThreads>>>(t.a.data_ptr<T>(), t.b.data_ptr<T>(),
                                                        t.out.data_ptr<T>(), p);
      TGRAD_CUDA_CHECK_LAUNCH("dw_dgrad_kernel");
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
      if (chunks == 1) {
        dw_wgrad_kernel<T, T><<<blocks, kThreads>>>(t.a.data_ptr<T>(), t.b.data_ptr<T>(),
                                                    t.out.data_ptr<T>(), p, chunks, chunk_len);
        TGRAD_CUDA_CHECK_LAUNCH("dw_wgrad_kernel");
        break;
      }
      // The partials (at most kTargetBlocks * taps doubles past one chunk per channel) live until
      // this scope ends; the stream orders their reuse after stage 2.
      std::shared_ptr<void> storage = alloc.allocate(elements * chunks * int64_t{sizeof(double)},
                                                     t.out.device().index());
      double* partials = static_cast<double*>(storage.get());
      dw_wgrad_kernel<T, double><<<blocks, kThreads>>>(t.a.data_ptr<T>(), t.b.data_ptr<T>(),
                                                       partials, p, chunks, chunk_len);
      TGRAD_CUDA_CHECK_LAUNCH("dw_wgrad_kernel");
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
  const char* fn = pass == ConvPass::forward ? "CUDA conv_transpose_forward (depthwise path)"
                   : pass == ConvPass::dgrad ? "CUDA conv_transpose_dgrad (depthwise path)"
                                             : "CUDA conv_transpose_wgrad (depthwise path)";
  const ConvParams p = pass == ConvPass::forward ? make_conv_params(fn, g, t.a, t.b, t.out)
                       : pass == ConvPass::dgrad ? make_conv_params(fn, g, t.out, t.b, t.a)
                                                 : make_conv_params(fn, g, t.a, t.out, t.b);
  DeviceGuard guard(t.out.device());
  dispatch_float(t.out.dtype(), [&](auto tag) { run_typed<decltype(tag)>(alloc, pass, p, t); });
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

int64_t conv_depthwise_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tgrad::cuda
