// Transposed-convolution forward: runs the kernel the planner (cuda/conv_plan.cpp) chose, the
// tensor-core implicit GEMM of conv_transpose_igemm.cuh (M = C_out, N = N*positions, K =
// C_in*taps, per stride phase) or the general gather kernel below (float64, groups, shapes the
// GEMM does not tile).
// General kernel, gather form: one thread owns kTileCo outputs
//   y[n, g*Cog+co, oh, ow] = b[g*Cog+co] + sum_{ci<Cig, kh, kw} x[n, g*Cig+ci, ih, iw] *
//   w[g*Cig+ci, co, kh, kw]
// over the taps with ih = (oh + pH - kh*dH) / sH exact and in [0, Hi) (likewise iw), for
// co = co0 .. co0+kTileCo-1 (one x load feeds kTileCo products). Fixed order: taps, then ci.
#include <cuda_runtime.h>

#include "cuda/conv_caps.h"
#include "cuda/conv_params.h"
#include "cuda/conv_transpose_batch_igemm.cuh"
#include "cuda/conv_transpose_gemm.h"
#include "cuda/conv_transpose_igemm.cuh"
#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

constexpr int kTileCo = 4;

// The input index of a tap on one axis, or -1 when the tap does not land on an input element.
__device__ inline int64_t gather_index(int64_t o, int64_t k, int64_t pad, int64_t dil,
                                       int64_t stride, int64_t in_size) {
  const int64_t t = o + pad - k * dil;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < in_size ? i : -1;
}

template <class T>
__global__ void conv_transpose_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y,
                                          ConvParams p) {
  const int64_t co_tiles = ceil_div(p.Cog, kTileCo);
  const int64_t total = p.N * p.G * co_tiles * p.Ho * p.Wo;
  const int64_t x_channel = p.Hi * p.Wi, taps = p.kH * p.kW, w_ci = p.Cog * taps;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    int64_t t = idx;
    const int64_t ow = t % p.Wo;
    t /= p.Wo;
    const int64_t oh = t % p.Ho;
    t /= p.Ho;
    const int64_t co0 = (t % co_tiles) * kTileCo;
    t /= co_tiles;
    const int64_t g = t % p.G;
    const int64_t n = t / p.G;
    const int64_t n_co = min_i64(kTileCo, p.Cog - co0);

    T acc[kTileCo] = {};
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      const int64_t ih = gather_index(oh, kh, p.pH, p.dH, p.sH, p.Hi);
      if (ih < 0) continue;
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t iw = gather_index(ow, kw, p.pW, p.dW, p.sW, p.Wi);
        if (iw < 0) continue;
        const T* xp = x + ((n * p.Ci + g * p.Cig) * p.Hi + ih) * p.Wi + iw;
        const T* wp = w + (g * p.Cig * p.Cog + co0) * taps + kh * p.kW + kw;
        for (int64_t ci = 0; ci < p.Cig; ++ci) {
          const T xv = xp[ci * x_channel];
          const T* wc = wp + ci * w_ci;
#pragma unroll
          for (int u = 0; u < kTileCo; ++u) {
            if (u < n_co) acc[u] += xv * wc[u * taps];
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kTileCo; ++u) {
      if (u >= n_co) break;
      const int64_t co = g * p.Cog + co0 + u;
      y[((n * p.Co + co) * p.Ho + oh) * p.Wo + ow] = b ? acc[u] + b[co] : acc[u];
    }
  }
}

}  // namespace

void conv_transpose_forward(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& x,
                            const Tensor& w, const Tensor* b, Tensor& y) {
  const ConvParams p = make_conv_params("CUDA conv_transpose_forward", g, x, w, y);
  if (b != nullptr) {
    TGRAD_CHECK(b->numel() == p.Co && b->dtype() == y.dtype(), "CUDA conv_transpose_forward: bias ",
                b->shape(), " ", b->dtype(), " does not match C_out=", p.Co, " ", y.dtype());
  }
  const int64_t total = p.N * p.G * ceil_div(p.Cog, kTileCo) * p.Ho * p.Wo;
  if (total == 0) return;
  DeviceGuard guard(y.device());
  const int device = y.device().index();
  // One branch per kernel the planner may name for this pass (conv_candidates()).
  const auto run = [&](const ConvPlan& plan) {
    if (conv_operand_path_run(alloc, ConvPass::forward, plan, g, ConvOperands{x, w, b, y})) return;
    if (plan.kernel == kKernelBatchIgemm || plan.kernel == kKernelBatchWgmma) {
      conv_batch_igemm(alloc, ConvPass::forward, plan.batch, g, x.data_ptr<float>(),
                       w.data_ptr<float>(), b ? b->data_ptr<float>() : nullptr, y.data_ptr<float>(),
                       device);
      return;
    }
    if (plan.kernel == kKernelWgmma || plan.kernel == kKernelMmaSync) {
      // The implicit GEMM (wgmma or mma.sync): src = x, M = C_out, channels = C_in.
      IgemmProblem q = plan.igemm;
      q.src = x.data_ptr<float>();
      q.bias = b ? b->data_ptr<float>() : nullptr;
      q.out = y.data_ptr<float>();
      conv_igemm(alloc, plan, q, w.data_ptr<float>(), device);
      return;
    }
    TGRAD_CHECK(plan.kernel == kKernelFma, "CUDA conv_transpose_forward: no launcher for kernel '",
                plan.kernel, "'");
    dispatch_float(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      conv_transpose_fwd_kernel<T><<<grid_for(total), kThreads>>>(
          x.data_ptr<T>(), w.data_ptr<T>(), b ? b->data_ptr<T>() : nullptr, y.data_ptr<T>(), p);
      TGRAD_CUDA_CHECK_LAUNCH("conv_transpose_fwd_kernel");
    });
  };
  run_conv_call(ConvPass::forward, g, y.dtype(), conv_device_caps(device), run, time_conv_plan);
}

}  // namespace tgrad::cuda
