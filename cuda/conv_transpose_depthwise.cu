// The depthwise transposed-conv kernels (one input and one output channel per group), with the
// weight (C, 1, kH, kW):
//   forward: y[n, c, oh, ow] = b[c] + sum_{kh, kw} x[n, c, ih, iw] w[c, kh, kw] over the taps with
//            ih = (oh + pH - kh*dH) / sH exact and in range (likewise iw);
//   dgrad:   dx[n, c, ih, iw] = sum_{kh, kw} dy[n, c, ih*sH - pH + kh*dH, iw*sW - pW + kw*dW] w[c,
//            kh, kw];
//   wgrad:   dw[c, kh, kw] = sum_{n, ih, iw} x[n, c, ih, iw] dy[n, c, oh, ow].
// forward and dgrad: one thread per position of the plane they write, walking many (n, c)
// planes, so that its taps (which need divisions by the stride) are worked out once. Taps summed
// in (kh, kw) order: memory-bound, every element written once. wgrad: stage 1 gives each (channel,
// chunk of batch x positions) one block whose threads accumulate every tap in float64 registers,
// reduced by a fixed shuffle tree and then across warps in order; stage 2 sums the chunks of each
// weight in chunk order. The chunking depends on the shape only, so the bits are the same on every
// run and GPU.
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

// The taps of one axis that input index i of dgrad reads: every k in [k0, k0 + n) has output index
// i*stride - pad + k*dil inside [0, out), the first of them o0. They are a run with no gaps (the
// index moves by dil per tap and no division is exact or not), so the tap loops below need no
// bounds checks.
struct TapSpan {
  int k0, n, o0;
};
__device__ inline TapSpan dgrad_span(int i, int taps, int pad, int dil, int stride, int out) {
  // In 64 bits: i*stride can pass 2^31 when the padding takes most of it back.
  const int64_t a = int64_t{i} * stride - pad;
  if (a >= out) return {0, 0, 0};
  // Both quotients below are in 32 bits (64-bit divisions are long subroutines, and these run
  // once per thread): a >= -pad > -2^30 and out <= 2^30 (fits_plane32), so -a and out - 1 - a
  // are under 2^31. At dilation 1, the common case, no division at all.
  const int below = a >= 0 ? 0 : static_cast<int>(-a);           // output indices left of 0
  const int room = static_cast<int>(out - 1 - a);                // >= 0: a < out
  const int k0 = dil == 1 ? below : (below + dil - 1) / dil;     // first tap inside
  const int k1 = min(taps, (dil == 1 ? room : room / dil) + 1);  // past the last tap inside
  if (k1 <= k0) return {0, 0, 0};
  return {k0, k1 - k0, static_cast<int>(a + int64_t{k0} * dil)};
}

// A rectangle of taps (j_h, j_w) < (nh, nw) of one element: source element src[j_h * src_h + j_w *
// src_w] times weight wp[j_h * w_h + j_w * w_w], summed in (kh, kw) order from 0. KH, KW > 0: nh
// and nw are at most that, and the loops are unrolled with a guard per tap, so that a thread
// issues all of its loads before its first FMA waits on one (in a loop with a run-time trip count
// each row of taps waited for its loads in turn), and the weights can stay in registers while
// the thread walks planes of one channel. 0: run-time loops, weights read per plane.
template <int KH, int KW, class T>
struct TapRect {
  T v[KH > 0 ? KH : 1][KW > 0 ? KW : 1];
  const T* wp;
  int nh, nw, w_h, w_w;

  __device__ TapRect(int nh_, int nw_, int w_h_, int w_w_)
      : nh(nh_), nw(nw_), w_h(w_h_), w_w(w_w_) {}

  __device__ void load_weights(const T* __restrict__ w) {
    wp = w;
    if constexpr (KH > 0) {
#pragma unroll
      for (int jh = 0; jh < KH; ++jh) {
#pragma unroll
        for (int jw = 0; jw < KW; ++jw)
          v[jh][jw] = jh < nh && jw < nw ? w[jh * w_h + jw * w_w] : T(0);
      }
    }
  }

  __device__ T sum(const T* __restrict__ src, int src_h, int src_w) const {
    T acc = T(0);
    if constexpr (KH > 0) {
      T d[KH][KW];
#pragma unroll
      for (int jh = 0; jh < KH; ++jh) {
#pragma unroll
        for (int jw = 0; jw < KW; ++jw)
          d[jh][jw] = jh < nh && jw < nw ? src[jh * src_h + jw * src_w] : T(0);
      }
#pragma unroll
      for (int jh = 0; jh < KH; ++jh) {
#pragma unroll
        for (int jw = 0; jw < KW; ++jw) {
          if (jh < nh && jw < nw) acc += d[jh][jw] * v[jh][jw];
        }
      }
    } else {
      const T* w = wp;
      for (int jh = 0; jh < nh; ++jh, src += src_h, w += w_h) {
        for (int jw = 0; jw < nw; ++jw)
          acc += src[jw * src_w] * w[jw * w_w];
      }
    }
    return acc;
  }
};

// Forward: a thread per position of the y plane (a flat index, so that narrow planes leave no
// lane idle) works out the taps that reach it once (gather_run: divisions by the stride), then
// walks the (n, c) planes y, y + gridDim.y, ...: the index arithmetic, which bounds these
// memory-bound kernels, is paid once per position rather than once per element. Taps are summed
// in (kh, kw) order from 0, the bias added last.
template <int KH, int KW, class T>
__global__ void dw_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ b, T* __restrict__ y, Plane32 q,
                                  RunSteps st, int64_t C, int64_t planes) {
  const int in_plane = q.Hi * q.Wi, out_plane = q.Ho * q.Wo, taps = q.kH * q.kW;
  const int64_t c_step = gridDim.y % C;
  // Every plane a thread walks is of one channel when the grid's planes are a multiple of C
  // (plane_walk_grid makes them so where it can): the weights then load once.
  const bool one_channel = c_step == 0;
  for (int pos = blockIdx.x * blockDim.x + threadIdx.x; pos < out_plane;
       pos += gridDim.x * blockDim.x) {
    const int oh = pos / q.Wo, ow = pos - oh * q.Wo;
    const TapRun rh = gather_run(oh, q.kH, q.pH, q.dH, q.sH, q.Hi);
    const TapRun rw = gather_run(ow, q.kW, q.pW, q.dW, q.sW, q.Wi);
    const int first = rh.i0 * q.Wi + rw.i0, first_tap = rh.k0 * q.kW + rw.k0;
    TapRect<KH, KW, T> rect(rh.n, rw.n, st.k_h * q.kW, st.k_w);
    int64_t c = blockIdx.y % C;
    rect.load_weights(w + c * taps + first_tap);
    for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
      if (!one_channel && plane != blockIdx.y) rect.load_weights(w + c * taps + first_tap);
      const T acc = rect.sum(x + plane * in_plane + first, -st.i_h * q.Wi, -st.i_w);
      y[plane * out_plane + pos] = b ? acc + b[c] : acc;
      c += c_step;
      if (c >= C) c -= C;
    }
  }
}

// dgrad: a thread per position of the dx plane (a flat index, so that narrow planes leave no
// lane idle) works out the rectangle of taps that reach dy once, then walks the (n, c) planes y,
// y + gridDim.y, ... as the forward does. A thread an element spends most of its issue slots on
// dividing its flat index into (plane, c, ih, iw) and on a bounds check per tap; here both are
// paid once per position. Each element sums its taps in (kh, kw) order from 0.
template <int KH, int KW, class T>
__global__ void dw_dgrad_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                T* __restrict__ dx, Plane32 q, int64_t C, int64_t planes) {
  const int in_plane = q.Hi * q.Wi, out_plane = q.Ho * q.Wo, taps = q.kH * q.kW;
  const int row_step = q.dH * q.Wo;
  const int64_t c_step = gridDim.y % C;
  // Every plane a thread walks is of one channel when the grid's planes are a multiple of C
  // (plane_walk_grid makes them so where it can): the weights then load once.
  const bool one_channel = c_step == 0;
  for (int pos = blockIdx.x * blockDim.x + threadIdx.x; pos < in_plane;
       pos += gridDim.x * blockDim.x) {
    const int ih = pos / q.Wi, iw = pos - ih * q.Wi;
    const TapSpan sh = dgrad_span(ih, q.kH, q.pH, q.dH, q.sH, q.Ho);
    const TapSpan sw = dgrad_span(iw, q.kW, q.pW, q.dW, q.sW, q.Wo);
    const int first = sh.o0 * q.Wo + sw.o0, first_tap = sh.k0 * q.kW + sw.k0;
    TapRect<KH, KW, T> rect(sh.n, sw.n, q.kW, 1);
    int64_t c = blockIdx.y % C;
    rect.load_weights(w + c * taps + first_tap);
    for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
      if (!one_channel && plane != blockIdx.y) rect.load_weights(w + c * taps + first_tap);
      dx[plane * in_plane + pos] = rect.sum(dy + plane * out_plane + first, row_step, q.dW);
      c += c_step;
      if (c >= C) c -= C;
    }
  }
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

// The forward's and dgrad's grid over `positions` positions of a plane and `planes` planes of C
// channels: 256 positions a block in x, and enough planes in y that about 2^20 threads run, each
// walking the rest of the planes (dgrad: 2^19 and 2^18 threads were slower on every layer timed,
// 2^22 too, and one plane a thread slowest). Where C is at most that many planes, they are
// rounded to a multiple of C, so that each thread's planes are all of one channel. Then the
// planes are spread evenly: with 1.5 planes a thread on average, half the threads walked two and
// the pass took two planes' time, so the grid takes the fewest rows that give the same walks.
dim3 plane_walk_grid(int64_t positions, int64_t planes, int64_t C) {
  const int64_t gx = std::min<int64_t>(ceil_div(positions, kThreads), (int64_t{1} << 31) - 1);
  const int64_t most = std::min<int64_t>(planes, 65535);
  int64_t gy = std::clamp<int64_t>(ceil_div(int64_t{1} << 20, gx * kThreads), 1, most);
  if (C <= gy) {  // planes = N * C: rows of whole items of C planes
    const int64_t items = planes / C, per_row = (gy + C / 2) / C;
    gy = std::min(ceil_div(items, ceil_div(items, per_row)), most / C) * C;
  } else {
    gy = ceil_div(planes, ceil_div(planes, gy));
  }
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
}

// Calls f(KH, KW) (integral constants) with the unrolled rectangle that holds nh x nw taps (1-D:
// 1 x nw) up to 4 x 4, the k2 to k4 upsamplers; more taps get the run-time loops (0, 0): dgrad
// unrolled 5 x 5 was slower than those on both k5 layers timed.
template <class F>
void with_tap_rect(int64_t kH, int64_t kW, F&& f) {
  using std::integral_constant;
  const int64_t k = std::max(kH, kW);
  if (kH == 1 && kW <= 2) return f(integral_constant<int, 1>{}, integral_constant<int, 2>{});
  if (kH == 1 && kW <= 4) return f(integral_constant<int, 1>{}, integral_constant<int, 4>{});
  if (k <= 2) return f(integral_constant<int, 2>{}, integral_constant<int, 2>{});
  if (k <= 3) return f(integral_constant<int, 3>{}, integral_constant<int, 3>{});
  if (k <= 4) return f(integral_constant<int, 4>{}, integral_constant<int, 4>{});
  f(integral_constant<int, 0>{}, integral_constant<int, 0>{});
}

template <class T>
void run_typed(CachingAllocator& alloc, ConvPass pass, const ConvParams& p, const ConvOperands& t) {
  const Plane32 q = plane32(p);
  switch (pass) {
    case ConvPass::forward: {
      const int64_t planes = p.N * p.Co;
      if (planes == 0 || p.Ho * p.Wo == 0) break;
      // A run of taps along an axis steps by k_step taps (run_steps), so it holds at most
      // ceil(k / k_step) of them: k4 s2 2 x 2, stride-1 k3 3 x 3, k3 s3 d2 1 x 1.
      const RunSteps st = run_steps(q);
      with_tap_rect(
          ceil_div(p.kH, int64_t{st.k_h}), ceil_div(p.kW, int64_t{st.k_w}), [&](auto kh, auto kw) {
            dw_forward_kernel<decltype(kh)::value, decltype(kw)::value, T>
                <<<plane_walk_grid(p.Ho * p.Wo, planes, p.Co), kThreads>>>(
                    t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.bias ? t.bias->data_ptr<T>() : nullptr,
                    t.out.data_ptr<T>(), q, st, p.Co, planes);
          });
      TGRAD_CUDA_CHECK_LAUNCH("dw_forward_kernel");
      break;
    }
    case ConvPass::dgrad: {
      const int64_t planes = p.N * p.Ci;
      if (planes == 0 || p.Hi * p.Wi == 0) break;
      with_tap_rect(p.kH, p.kW, [&](auto kh, auto kw) {
        dw_dgrad_kernel<decltype(kh)::value, decltype(kw)::value, T>
            <<<plane_walk_grid(p.Hi * p.Wi, planes, p.Ci), kThreads>>>(
                t.a.data_ptr<T>(), t.b.data_ptr<T>(), t.out.data_ptr<T>(), q, p.Ci, planes);
      });
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
