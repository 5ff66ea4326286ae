// The GEMM path of the transposed-conv passes. Per chunk of nb samples, with L = nb * H_in * W_in
// and the packed activations xp (C_in, L) (sample-major columns: N spans batch x positions, so
// small images still give long GEMMs):
//   forward: cols[g] (Cog*taps, L) = W[g]^T xp[g]; y = col2im(cols) + bias (gather kernel);
//   dgrad:   cols = im2col(dy) (Co*taps, L); dxp[g] (Cig, L) = W[g] cols[g]; dx = unpack(dxp);
//   wgrad:   cols = im2col(dy); dW[g] (Cig, Cog*taps) += xp[g] cols[g]^T, chunk after chunk.
// W[g] is the weight's (Cig, Cog*taps) block of group g; the groups are the GEMM batch.
// Deterministic: each kernel writes every element once from a fixed-order sum, cuBLAS GEMMs are
// run-to-run reproducible on one GPU model, and wgrad adds the chunks in batch order.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>

#include "cuda/conv_params.h"
#include "cuda/conv_transpose_gemm.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_util.h"
#include "cuda/kernel_stats.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

// (n, c, p) of an (N, C, P) tensor <-> (c, nl * P + p) of the packed (C, nb * P), nl = n - n0.
template <class T, bool kPack>
__global__ void pack_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n0, int64_t nb,
                            int64_t C, int64_t P) {
  const int64_t total = C * nb * P;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = idx % P;
    const int64_t t = idx / P;
    const int64_t nl = t % nb;
    const int64_t c = t / nb;
    const int64_t full = ((n0 + nl) * C + c) * P + p;
    if constexpr (kPack) {
      dst[idx] = src[full];
    } else {
      dst[full] = src[idx];
    }
  }
}

// cols[(co * taps + kh * kW + kw) * L + nl * Hi * Wi + ih * Wi + iw] = dy[n0 + nl, co, oh, ow]
// with oh = ih * sH - pH + kh * dH (likewise ow), 0 outside dy. Positions vary fastest, so the
// writes coalesce.
template <class T>
__global__ void im2col_kernel(const T* __restrict__ dy, T* __restrict__ cols, ConvParams p,
                              int64_t n0, int64_t nb) {
  const int64_t taps = p.kH * p.kW, positions = p.Hi * p.Wi, L = nb * positions;
  const int64_t total = p.Co * taps * L;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = idx % L;
    const int64_t row = idx / L;
    const int64_t nl = l / positions, pos = l % positions;
    const int64_t ih = pos / p.Wi, iw = pos % p.Wi;
    const int64_t tap = row % taps, co = row / taps;
    const int64_t oh = ih * p.sH - p.pH + (tap / p.kW) * p.dH;
    const int64_t ow = iw * p.sW - p.pW + (tap % p.kW) * p.dW;
    T v = T(0);
    if (oh >= 0 && oh < p.Ho && ow >= 0 && ow < p.Wo) {
      v = dy[(((n0 + nl) * p.Co + co) * p.Ho + oh) * p.Wo + ow];
    }
    cols[idx] = v;
  }
}

// The input index of a tap on one axis, or -1 when the tap does not land on an input element.
__device__ inline int64_t tap_source(int64_t o, int64_t k, int64_t pad, int64_t dil,
                                     int64_t stride, int64_t in_size) {
  const int64_t t = o + pad - k * dil;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < in_size ? i : -1;
}

// y[n0 + nl, co, oh, ow] = bias[co] + the cols entries of the taps that reach (oh, ow), summed
// in tap order (kh, then kw) and written once.
template <class T>
__global__ void col2im_kernel(const T* __restrict__ cols, const T* __restrict__ bias,
                              T* __restrict__ y, ConvParams p, int64_t n0, int64_t nb) {
  const int64_t taps = p.kH * p.kW, positions = p.Hi * p.Wi, L = nb * positions;
  const int64_t total = nb * p.Co * p.Ho * p.Wo;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    int64_t t = idx;
    const int64_t ow = t % p.Wo;
    t /= p.Wo;
    const int64_t oh = t % p.Ho;
    t /= p.Ho;
    const int64_t co = t % p.Co;
    const int64_t nl = t / p.Co;
    const T* base = cols + co * taps * L + nl * positions;
    T acc = T(0);
    for (int64_t kh = 0; kh < p.kH; ++kh) {
      const int64_t ih = tap_source(oh, kh, p.pH, p.dH, p.sH, p.Hi);
      if (ih < 0) continue;
      for (int64_t kw = 0; kw < p.kW; ++kw) {
        const int64_t iw = tap_source(ow, kw, p.pW, p.dW, p.sW, p.Wi);
        if (iw < 0) continue;
        acc += base[(kh * p.kW + kw) * L + ih * p.Wi + iw];
      }
    }
    y[((n0 + nl) * p.Co + co) * p.Ho * p.Wo + oh * p.Wo + ow] = bias ? acc + bias[co] : acc;
  }
}

// Row-major C (M x N, ldc) = alpha op(A) op(B) + beta C, batched with the given strides.
// cuBLAS is column-major, so it computes C^T = op(B)^T op(A)^T (operands swapped, flags kept).
// float32: strict float32 (CUBLAS_COMPUTE_32F on a default-math handle) at "highest", TF32
// tensor cores at "high"; float64: DGEMM.
template <class T>
void gemm(cublasHandle_t h, Precision precision, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
          const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta, T* C,
          int64_t ldc, int64_t sc, int64_t batch) {
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T alpha = T(1);
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  if constexpr (std::is_same_v<T, float>) {
    const cublasComputeType_t compute =
        precision == Precision::high ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    TGRAD_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, op_b, op_a, i(N), i(M), i(K), &alpha, B, CUDA_R_32F, i(ldb), sb, A, CUDA_R_32F, i(lda),
        sa, &beta, C, CUDA_R_32F, i(ldc), sc, i(batch), compute, CUBLAS_GEMM_DEFAULT));
  } else {
    TGRAD_CUBLAS_CHECK(cublasDgemmStridedBatched(h, op_b, op_a, i(N), i(M), i(K), &alpha, B,
                                                 i(ldb), sb, A, i(lda), sa, &beta, C, i(ldc), sc,
                                                 i(batch)));
  }
}

template <class T>
void run_typed(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g, const ConvParams& p,
               const ConvOperands& t) {
  const int device = t.out.device().index();
  cublasHandle_t handle = static_cast<CudaBackend*>(cuda_backend())->cublas(device);
  const int64_t taps = p.kH * p.kW, positions = p.Hi * p.Wi;
  const int64_t cogk = p.Cog * taps;
  const int64_t per_sample = gemm_workspace_per_sample(g);
  const int64_t nb_max =
      std::clamp<int64_t>(kGemmWorkspaceBytes / (per_sample * int64_t{sizeof(T)}), 1, p.N);
  std::shared_ptr<void> storage =
      alloc.allocate(nb_max * per_sample * int64_t{sizeof(T)}, device);
  T* cols = static_cast<T*>(storage.get());
  T* packed = cols + nb_max * p.Co * taps * positions;
  const T* w = t.b.data_ptr<T>();
  for (int64_t n0 = 0; n0 < p.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, p.N - n0);
    const int64_t L = nb * positions;
    const int64_t cols_n = p.Co * taps * L, packed_n = p.Ci * L;
    switch (pass) {
      case ConvPass::forward:
        pack_kernel<T, true><<<grid_for(packed_n), kThreads>>>(t.a.data_ptr<T>(), packed, n0, nb,
                                                               p.Ci, positions);
        TGRAD_CUDA_CHECK_LAUNCH("pack_kernel");
        gemm<T>(handle, g.precision, true, false, cogk, L, p.Cig, w, cogk, p.Cig * cogk, packed, L,
                p.Cig * L, T(0), cols, L, cogk * L, p.G);
        col2im_kernel<T><<<grid_for(nb * p.Co * p.Ho * p.Wo), kThreads>>>(
            cols, t.bias ? t.bias->data_ptr<T>() : nullptr, t.out.data_ptr<T>(), p, n0, nb);
        TGRAD_CUDA_CHECK_LAUNCH("col2im_kernel");
        break;
      case ConvPass::dgrad:
        im2col_kernel<T><<<grid_for(cols_n), kThreads>>>(t.a.data_ptr<T>(), cols, p, n0, nb);
        TGRAD_CUDA_CHECK_LAUNCH("im2col_kernel");
        gemm<T>(handle, g.precision, false, false, p.Cig, L, cogk, w, cogk, p.Cig * cogk, cols, L,
                cogk * L, T(0), packed, L, p.Cig * L, p.G);
        pack_kernel<T, false><<<grid_for(packed_n), kThreads>>>(packed, t.out.data_ptr<T>(), n0,
                                                                nb, p.Ci, positions);
        TGRAD_CUDA_CHECK_LAUNCH("pack_kernel");
        break;
      case ConvPass::wgrad:
        pack_kernel<T, true><<<grid_for(packed_n), kThreads>>>(t.a.data_ptr<T>(), packed, n0, nb,
                                                               p.Ci, positions);
        TGRAD_CUDA_CHECK_LAUNCH("pack_kernel");
        im2col_kernel<T><<<grid_for(cols_n), kThreads>>>(t.b.data_ptr<T>(), cols, p, n0, nb);
        TGRAD_CUDA_CHECK_LAUNCH("im2col_kernel");
        // The first chunk overwrites dW, the later ones add to it in batch order.
        gemm<T>(handle, g.precision, false, true, p.Cig, cogk, L, packed, L, p.Cig * L, cols, L,
                cogk * L, n0 == 0 ? T(0) : T(1), t.out.data_ptr<T>(), cogk, p.Cig * cogk, p.G);
        break;
    }
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace


void conv_gemm_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                   const ConvOperands& t) {
  const char* fn = pass == ConvPass::forward ? "CUDA conv_transpose_forward (GEMM path)"
                   : pass == ConvPass::dgrad ? "CUDA conv_transpose_dgrad (GEMM path)"
                                             : "CUDA conv_transpose_wgrad (GEMM path)";
  const ConvParams p = pass == ConvPass::forward ? make_conv_params(fn, g, t.a, t.b, t.out)
                       : pass == ConvPass::dgrad ? make_conv_params(fn, g, t.out, t.b, t.a)
                                                 : make_conv_params(fn, g, t.a, t.out, t.b);
  DeviceGuard guard(t.out.device());
  dispatch_float(t.out.dtype(), [&](auto tag) { run_typed<decltype(tag)>(alloc, pass, g, p, t); });
}

int64_t conv_gemm_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tgrad::cuda
