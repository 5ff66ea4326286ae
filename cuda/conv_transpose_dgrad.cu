// Transposed-convolution input gradient (a regular convolution of dy with w): runs the kernel the
// planner (cuda/conv_plan.cpp) chose, the tensor-core implicit GEMM of conv_transpose_igemm.cuh
// (M = C_in, N = N*H_in*W_in, K = C_out*taps) or the general kernel below.
// General kernel: one thread owns
// kTileCi inputs of one group,
//   dx[n, g*Cig+ci, ih, iw] = sum_{co<Cog, kh, kw} dy[n, g*Cog+co, oh, ow] * w[g*Cig+ci, co, kh,
//   kw]
// with oh = ih*sH - pH + kh*dH in [0, Ho) (likewise ow), for ci = ci0 .. ci0+kTileCi-1.
// Fixed order: taps, then co.
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

constexpr int kTileCi = 4;

template <class T>
__global__ void conv_transpose_dgrad_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                            T* __restrict__ dx, ConvParams p) {
  const int64_t ci_tiles = ceil_div(p.Cig, kTileCi);
  const int64_t total = p.N * p.G * ci_tiles * p.Hi * p.Wi;
  const int64_t y_channel = p.Ho * p.Wo, taps = p.kH * p.kW, w_ci = p.Cog * taps;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    int64_t t = idx;
    const int64_t iw = t % p.Wi;
    t /= p.Wi;
    const int64_t ih = t % p.Hi;
    t /= p.Hi;
    const int64_t ci0 = (t % ci_tiles) * kTileCi;
    t /= ci_tiles;
    const int64_t g = t % p.G;
    const int64_t n = t / p.G;
    const int64_t n_ci = min_i64(kTileCi, p.Cig - ci0);

    T acc[kTileCi] = {};
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      const int64_t oh = ih * p.sH - p.pH + kh * p.dH;
      if (oh < 0 || oh >= p.Ho) continue;
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t ow = iw * p.sW - p.pW + kw * p.dW;
        if (ow < 0 || ow >= p.Wo) continue;
        const T* dyp = dy + ((n * p.Co + g * p.Cog) * p.Ho + oh) * p.Wo + ow;
        const T* wp = w + (g * p.Cig + ci0) * w_ci + kh * p.kW + kw;
        for (int64_t co = 0; co < p.Cog; ++co) {
          const T dv = dyp[co * y_channel];
          const T* wc = wp + co * taps;
#pragma unroll
          for (int u = 0; u < kTileCi; ++u) {
            if (u < n_ci) acc[u] += dv * wc[u * w_ci];
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kTileCi; ++u) {
      if (u >= n_ci) break;
      dx[((n * p.Ci + g * p.Cig + ci0 + u) * p.Hi + ih) * p.Wi + iw] = acc[u];
    }
  }
}

}  // namespace

void conv_transpose_dgrad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& dy,
                          const Tensor& w, Tensor& dx) {
  const ConvParams p = make_conv_params("CUDA conv_transpose_dgrad", g, dx, w, dy);
  const int64_t total = p.N * p.G * ceil_div(p.Cig, kTileCi) * p.Hi * p.Wi;
  if (total == 0) return;
  DeviceGuard guard(dx.device());
  const int device = dx.device().index();
  // One branch per kernel the planner may name for this pass (conv_candidates()).
  const auto run = [&](const ConvPlan& plan) {
    if (conv_operand_path_run(alloc, ConvPass::dgrad, plan, g, ConvOperands{dy, w, nullptr, dx}))
      return;
    if (plan.kernel == kKernelBatchIgemm || plan.kernel == kKernelBatchWgmma) {
      conv_batch_igemm(alloc, ConvPass::dgrad, plan.batch, g, dy.data_ptr<float>(),
                       w.data_ptr<float>(), nullptr, dx.data_ptr<float>(), device);
      return;
    }
    if (plan.kernel == kKernelWgmma || plan.kernel == kKernelMmaSync) {
      // The implicit GEMM (wgmma or mma.sync): src = dy, M = C_in, channels = C_out.
      IgemmProblem q = plan.igemm;
      q.src = dy.data_ptr<float>();
      q.bias = nullptr;
      q.out = dx.data_ptr<float>();
      conv_igemm(alloc, plan, q, w.data_ptr<float>(), device);
      return;
    }
    TGRAD_CHECK(plan.kernel == kKernelFma, "CUDA conv_transpose_dgrad: no launcher for kernel '",
                plan.kernel, "'");
    dispatch_float(dx.dtype(), [&](auto tag) {
      using T = decltype(tag);
      conv_transpose_dgrad_kernel<T>
          <<<grid_for(total), kThreads>>>(dy.data_ptr<T>(), w.data_ptr<T>(), dx.data_ptr<T>(), p);
      TGRAD_CUDA_CHECK_LAUNCH("conv_transpose_dgrad_kernel");
    });
  };
  run_conv_call(ConvPass::dgrad, g, dx.dtype(), conv_device_caps(device), run, time_conv_plan);
}

}  // namespace tgrad::cuda
