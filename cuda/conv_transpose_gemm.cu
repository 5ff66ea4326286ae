// The GEMM path of the transposed-conv passes. Per chunk of nb samples, with L = nb * H_in * W_in
// and the packed activations xp (C_in, L) (sample-major columns: N spans batch x positions, so
// small images still give long GEMMs):
//   forward: cols[g] (Cog*taps, L) = W[g]^T xp[g]; y = col2im(cols) + bias (gather kernel);
//   dgrad:   cols = im2col(dy) (Co*taps, L); dxp[g] (Cig, L) = W[g] cols[g]; dx = unpack(dxp);
//   wgrad:   cols = im2col(dy); dW[g] (Cig, Cog*taps) += xp[g] cols[g]^T, chunk after chunk.
// W[g] is the weight's (Cig, Cog*taps) block of group g; the groups are the GEMM batch. With one
// group and large planes (gemm_per_sample) forward and dgrad skip the packed copy: the GEMM is
// batched over the chunk's samples instead, reading x and writing dx in place, the columns of
// sample nl at column offset nl * H_in * W_in of the same buffer.
// Deterministic: each kernel writes every element once from a fixed-order sum, cuBLAS GEMMs are
// run-to-run reproducible on one GPU model, and wgrad adds the chunks in batch order.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "cuda/conv_params.h"
#include "cuda/conv_transpose_depthwise.h"
#include "cuda/conv_transpose_direct.h"
#include "cuda/conv_transpose_gemm.cuh"
#include "cuda/conv_transpose_gemm.h"
#include "cuda/conv_transpose_thin.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_util.h"
#include "cuda/kernel_stats.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

std::atomic<int64_t> g_launches{0};

// (n, c, p) of an (N, C, P) tensor <-> (c, nl * P + p) of the packed (C, nb * P), nl = n - n0.
// I: the index type, 32-bit when the chunk is small enough (see kFlat32).
template <class T, class I, bool kPack>
__global__ void pack_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n0, I nb, I C,
                            I P) {
  const I total = C * nb * P;
  const I stride = static_cast<I>(gridDim.x * blockDim.x);
  for (I idx = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); idx < total; idx += stride) {
    const I row = idx / P, p = idx - row * P;
    const I c = row / nb, nl = row - c * nb;
    const int64_t full = ((n0 + nl) * C + c) * int64_t{P} + p;
    if constexpr (kPack) {
      dst[idx] = src[full];
    } else {
      dst[full] = src[idx];
    }
  }
}

// The same over a 2-D grid: x spans a plane's positions, y strides over the channels, and each
// thread walks the chunk's items: no division per element (the flat kernel divides twice for
// each). For planes of at least kThreads / 2 positions and channels x positions of at least
// kPackPlanesMinThreads, so that the threads still fill the GPU while each walks nb items.
constexpr int64_t kPackPlanesMinThreads = int64_t{1} << 17;
template <class T, bool kPack>
__global__ void pack_planes_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n0,
                                   int64_t nb, int64_t C, int P) {
  const int p = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (p >= P) return;
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    for (int64_t nl = 0; nl < nb; ++nl) {
      const int64_t packed = (c * nb + nl) * P + p, full = ((n0 + nl) * C + c) * P + p;
      if constexpr (kPack) {
        dst[packed] = src[full];
      } else {
        dst[full] = src[packed];
      }
    }
  }
}

// cols[(co * taps + kh * kW + kw) * L + nl * Hi * Wi + ih * Wi + iw] = dy[n0 + nl, co, oh, ow]
// with oh = ih * sH - pH + kh * dH (likewise ow), 0 outside dy. x of the grid spans the L
// columns (coalesced writes), y strides over the output channels, and each thread writes every
// tap of its column for them: its column's (nl, ih, iw) is divided out once, where a thread per
// (row, column) divided four times for each element it copied and the copy was bound by that
// integer work, not by memory. L < 2^31 (the workspace budget).
template <class T>
__global__ void im2col_kernel(const T* __restrict__ dy, T* __restrict__ cols, Plane32 q, int64_t Co,
                              int64_t n0, int L) {
  const int l = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (l >= L) return;
  const int positions = q.Hi * q.Wi, taps = q.kH * q.kW, out_plane = q.Ho * q.Wo;
  const int nl = l / positions, pos = l - nl * positions;
  const int ih = pos / q.Wi, iw = pos - ih * q.Wi;
  const int oh0 = ih * q.sH - q.pH, ow0 = iw * q.sW - q.pW;
  const T* dyn = dy + (n0 + nl) * Co * out_plane;
  for (int64_t co = blockIdx.y; co < Co; co += gridDim.y) {
    const T* plane = dyn + co * out_plane;
    T* out = cols + co * taps * L + l;
    for (int kh = 0; kh < q.kH; ++kh) {
      const int oh = oh0 + kh * q.dH;
      const bool row_in = oh >= 0 && oh < q.Ho;
      for (int kw = 0; kw < q.kW; ++kw, out += L) {
        const int ow = ow0 + kw * q.dW;
        *out = row_in && ow >= 0 && ow < q.Wo ? plane[oh * q.Wo + ow] : T(0);
      }
    }
  }
}

// y[n0 + nl, co, oh, ow] = bias[co] + the cols entries of the taps that reach (oh, ow), summed
// in tap order (kh, then kw) and written once; idx runs over the chunk's (contiguous) part of y.
template <class T, class I>
__global__ void col2im_kernel(const T* __restrict__ cols, const T* __restrict__ bias,
                              T* __restrict__ y_chunk, Plane32 q, I Co, I nb) {
  const I out_plane = I{q.Ho} * q.Wo, total = nb * Co * out_plane;
  const int positions = q.Hi * q.Wi, taps = q.kH * q.kW;
  const int64_t L = int64_t{nb} * positions;
  const I stride = static_cast<I>(gridDim.x * blockDim.x);
  for (I idx = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); idx < total; idx += stride) {
    const I plane = idx / out_plane;
    const int pos = static_cast<int>(idx - plane * out_plane);
    const I nl = plane / Co, co = plane - nl * Co;
    const int oh = pos / q.Wo, ow = pos - oh * q.Wo;
    const T* base = cols + int64_t{co} * taps * L + int64_t{nl} * positions;
    T acc = T(0);
    for_each_gather_tap(oh, q.kH, q.pH, q.dH, q.sH, q.Hi, [&](int kh, int ih) {
      for_each_gather_tap(ow, q.kW, q.pW, q.dW, q.sW, q.Wi, [&](int kw, int iw) {
        acc += base[(kh * q.kW + kw) * L + ih * q.Wi + iw];
      });
    });
    y_chunk[idx] = bias ? acc + bias[co] : acc;
  }
}

// The same over a 3-D grid, for planes of at least kThreads / 2 positions: x spans y's plane,
// y strides over the output channels, z splits the chunk's items into slices. Each thread finds
// its position's runs of taps once (gather_run) and walks its slice's items, where the flat
// kernel divided out the element's item, channel and position and tested every tap against the
// stride for each element. Planes x channels under kPackPlanesMinThreads threads are
// sliced over the items up to kCol2imSlicedThreads, so that small planes need not fall back on
// the flat kernel (whose per-element divisions made small planes' col2im longer than their
// GEMM); larger grids keep one slice, which measured faster there than short slices. The same
// sums in the same order (docs/performance.md, "Runs 225-230").
constexpr int64_t kCol2imSlicedThreads = int64_t{1} << 20;
template <class T>
__global__ void col2im_planes_kernel(const T* __restrict__ cols, const T* __restrict__ bias,
                                     T* __restrict__ y_chunk, Plane32 q, RunSteps st, int64_t Co,
                                     int64_t nb) {
  const int out_plane = q.Ho * q.Wo;
  const int pos = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (pos >= out_plane) return;
  const int oh = pos / q.Wo, ow = pos - oh * q.Wo;
  const TapRun rh = gather_run(oh, q.kH, q.pH, q.dH, q.sH, q.Hi);
  const TapRun rw = gather_run(ow, q.kW, q.pW, q.dW, q.sW, q.Wi);
  const int positions = q.Hi * q.Wi, taps = q.kH * q.kW;
  const int64_t L = nb * positions;
  const int64_t slice = (nb + gridDim.z - 1) / gridDim.z;
  const int64_t n_begin = blockIdx.z * slice;
  const int64_t n_end = n_begin + slice < nb ? n_begin + slice : nb;
  for (int64_t co = blockIdx.y; co < Co; co += gridDim.y) {
    for (int64_t nl = n_begin; nl < n_end; ++nl) {
      const T* base = cols + co * taps * L + nl * positions;
      T acc = T(0);
      for (int jh = 0; jh < rh.n; ++jh) {
        const int kh = rh.k0 + jh * st.k_h, ih = rh.i0 - jh * st.i_h;
        for (int jw = 0; jw < rw.n; ++jw) {
          const int kw = rw.k0 + jw * st.k_w, iw = rw.i0 - jw * st.i_w;
          acc += base[(kh * q.kW + kw) * L + ih * q.Wi + iw];
        }
      }
      y_chunk[(nl * Co + co) * out_plane + pos] = bias ? acc + bias[co] : acc;
    }
  }
}

// A 2-D grid: x covers `inner` items in blocks of kThreads, y strides over `outer`.
dim3 grid_2d(int64_t inner, int64_t outer) {
  return dim3(static_cast<unsigned>(ceil_div(inner, kThreads)),
              static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
}

// dw[e] = (accumulate ? dw[e] : 0) + sum_{s < splits} partials[s * elements + e], in order of s.
template <class T>
__global__ void sum_splits_kernel(const T* __restrict__ partials, T* __restrict__ dw,
                                  int64_t elements, int64_t splits, bool accumulate) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    T acc = accumulate ? dw[e] : T(0);
    for (int64_t s = 0; s < splits; ++s)
      acc += partials[s * elements + e];
    dw[e] = acc;
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
    TGRAD_CUBLAS_CHECK(cublasDgemmStridedBatched(h, op_b, op_a, i(N), i(M), i(K), &alpha, B, i(ldb),
                                                 sb, A, i(lda), sa, &beta, C, i(ldc), sc,
                                                 i(batch)));
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
void run_typed(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g, const ConvParams& p,
               const ConvOperands& t) {
  const int device = t.out.device().index();
  cublasHandle_t handle = static_cast<CudaBackend*>(cuda_backend())->cublas(device);
  const Plane32 q = plane32(p);
  const int64_t taps = p.kH * p.kW, positions = p.Hi * p.Wi, out_plane = p.Ho * p.Wo;
  const int64_t cogk = p.Cog * taps;
  const bool per_item = pass != ConvPass::wgrad && gemm_per_sample(g);
  // Without the packed operand a sample needs only its columns.
  const int64_t per_sample = per_item ? p.Co * taps * positions : gemm_workspace_per_sample(g);
  const int64_t nb_max =
      std::clamp<int64_t>(kGemmWorkspaceBytes / (per_sample * int64_t{sizeof(T)}), 1, p.N);
  std::shared_ptr<void> storage = alloc.allocate(nb_max * per_sample * int64_t{sizeof(T)}, device);
  T* cols = static_cast<T*>(storage.get());
  T* packed = cols + nb_max * p.Co * taps * positions;
  const int64_t dw_elements = p.Ci * cogk;
  std::shared_ptr<void> split_storage;
  const int64_t max_splits =
      pass == ConvPass::wgrad ? gemm_wgrad_splits(g, dtype_of<T>(), nb_max * positions) : 1;
  if (max_splits > 1) {
    split_storage = alloc.allocate(max_splits * dw_elements * int64_t{sizeof(T)}, device);
  }
  const T* w = t.b.data_ptr<T>();
  for (int64_t n0 = 0; n0 < p.N; n0 += nb_max) {
    const int64_t nb = std::min(nb_max, p.N - n0);
    const int64_t L = nb * positions;
    const int64_t packed_n = p.Ci * L;
    const auto pack = [&](const T* src, T* dst, bool to_packed) {
      if (positions >= kThreads / 2 && p.Ci * positions >= kPackPlanesMinThreads) {
        const dim3 grid = grid_2d(positions, p.Ci);
        if (to_packed) {
          pack_planes_kernel<T, true>
              <<<grid, kThreads>>>(src, dst, n0, nb, p.Ci, static_cast<int>(positions));
        } else {
          pack_planes_kernel<T, false>
              <<<grid, kThreads>>>(src, dst, n0, nb, p.Ci, static_cast<int>(positions));
        }
        TGRAD_CUDA_CHECK_LAUNCH("pack_planes_kernel");
        return;
      }
      with_index_type(packed_n, [&](auto tag) {
        using I = decltype(tag);
        if (to_packed) {
          pack_kernel<T, I, true>
              <<<grid_for(packed_n), kThreads>>>(src, dst, n0, I(nb), I(p.Ci), I(positions));
        } else {
          pack_kernel<T, I, false>
              <<<grid_for(packed_n), kThreads>>>(src, dst, n0, I(nb), I(p.Ci), I(positions));
        }
        TGRAD_CUDA_CHECK_LAUNCH("pack_kernel");
      });
    };
    const auto im2col = [&](const T* dy) {
      im2col_kernel<T><<<grid_2d(L, p.Co), kThreads>>>(dy, cols, q, p.Co, n0, static_cast<int>(L));
      TGRAD_CUDA_CHECK_LAUNCH("im2col_kernel");
    };
    switch (pass) {
      case ConvPass::forward: {
        if (per_item) {
          gemm<T>(handle, g.precision, true, false, cogk, positions, p.Ci, w, cogk, 0,
                  t.a.data_ptr<T>() + n0 * p.Ci * positions, positions, p.Ci * positions, T(0),
                  cols, L, positions, nb);
        } else {
          pack(t.a.data_ptr<T>(), packed, true);
          gemm<T>(handle, g.precision, true, false, cogk, L, p.Cig, w, cogk, p.Cig * cogk, packed,
                  L, p.Cig * L, T(0), cols, L, cogk * L, p.G);
        }
        T* y_chunk = t.out.data_ptr<T>() + n0 * p.Co * out_plane;
        const T* bias = t.bias ? t.bias->data_ptr<T>() : nullptr;
        if (out_plane >= kThreads / 2) {
          dim3 grid = grid_2d(out_plane, p.Co);
          const int64_t threads = int64_t{grid.x} * kThreads * grid.y;
          const int64_t slices = p.Co * out_plane >= kPackPlanesMinThreads
                                     ? 1
                                     : ceil_div(kCol2imSlicedThreads, threads);
          grid.z =
              static_cast<unsigned>(std::clamp<int64_t>(slices, 1, std::min<int64_t>(nb, 65535)));
          col2im_planes_kernel<T>
              <<<grid, kThreads>>>(cols, bias, y_chunk, q, run_steps(q), p.Co, nb);
          TGRAD_CUDA_CHECK_LAUNCH("col2im_planes_kernel");
          break;
        }
        const int64_t total = nb * p.Co * out_plane;
        with_index_type(total, [&](auto tag) {
          using I = decltype(tag);
          col2im_kernel<T, I>
              <<<grid_for(total), kThreads>>>(cols, bias, y_chunk, q, I(p.Co), I(nb));
          TGRAD_CUDA_CHECK_LAUNCH("col2im_kernel");
        });
        break;
      }
      case ConvPass::dgrad:
        im2col(t.a.data_ptr<T>());
        if (per_item) {
          gemm<T>(handle, g.precision, false, false, p.Ci, positions, cogk, w, cogk, 0, cols, L,
                  positions, T(0), t.out.data_ptr<T>() + n0 * p.Ci * positions, positions,
                  p.Ci * positions, nb);
          break;
        }
        gemm<T>(handle, g.precision, false, false, p.Cig, L, cogk, w, cogk, p.Cig * cogk, cols, L,
                cogk * L, T(0), packed, L, p.Cig * L, p.G);
        pack(packed, t.out.data_ptr<T>(), false);
        break;
      case ConvPass::wgrad: {
        pack(t.a.data_ptr<T>(), packed, true);
        im2col(t.b.data_ptr<T>());
        // The first chunk overwrites dW, the later ones add to it in batch order.
        const bool accumulate = n0 > 0;
        T* dw = t.out.data_ptr<T>();
        const int64_t splits = gemm_wgrad_splits(g, dtype_of<T>(), L);
        if (splits == 1) {
          gemm<T>(handle, g.precision, false, true, p.Cig, cogk, L, packed, L, p.Cig * L, cols, L,
                  cogk * L, accumulate ? T(1) : T(0), dw, cogk, p.Cig * cogk, p.G);
          break;
        }
        // Slices of ls columns (the last one shorter), batched per group.
        T* partials = static_cast<T*>(split_storage.get());
        const int64_t ls = ceil_div(L, splits), full = L / ls, rem = L - full * ls;
        for (int64_t gi = 0; gi < p.G; ++gi) {
          const T* a = packed + gi * p.Cig * L;
          const T* b = cols + gi * cogk * L;
          T* c = partials + gi * p.Cig * cogk;
          gemm<T>(handle, g.precision, false, true, p.Cig, cogk, ls, a, L, ls, b, L, ls, T(0), c,
                  cogk, dw_elements, full);
          if (rem > 0) {
            gemm<T>(handle, g.precision, false, true, p.Cig, cogk, rem, a + full * ls, L, 0,
                    b + full * ls, L, 0, T(0), c + full * dw_elements, cogk, 0, 1);
          }
        }
        const int64_t used = full + (rem > 0 ? 1 : 0);
        sum_splits_kernel<T>
            <<<grid_for(dw_elements), kThreads>>>(partials, dw, dw_elements, used, accumulate);
        TGRAD_CUDA_CHECK_LAUNCH("sum_splits_kernel");
        break;
      }
    }
  }
  g_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

ConvParams conv_operand_params(ConvPass pass, const ConvGeometry& g, const ConvOperands& t,
                               bool depthwise) {
  // Literals, per path and pass: the name is for error messages, so a launch builds no string.
  static constexpr const char* kNames[2][3] = {
      {"CUDA conv_transpose_forward (GEMM path)", "CUDA conv_transpose_dgrad (GEMM path)",
       "CUDA conv_transpose_wgrad (GEMM path)"},
      {"CUDA conv_transpose_forward (depthwise path)", "CUDA conv_transpose_dgrad (depthwise path)",
       "CUDA conv_transpose_wgrad (depthwise path)"}};
  const char* fn = kNames[depthwise ? 1 : 0][static_cast<size_t>(pass)];
  return pass == ConvPass::forward ? make_conv_params(fn, g, t.a, t.b, t.out)
         : pass == ConvPass::dgrad ? make_conv_params(fn, g, t.out, t.b, t.a)
                                   : make_conv_params(fn, g, t.a, t.out, t.b);
}

void conv_gemm_run(CachingAllocator& alloc, ConvPass pass, const ConvGeometry& g,
                   const ConvOperands& t) {
  const ConvParams p = conv_operand_params(pass, g, t, /*depthwise=*/false);
  DeviceGuard guard(t.out.device());
  dispatch_float(t.out.dtype(), [&](auto tag) { run_typed<decltype(tag)>(alloc, pass, g, p, t); });
}

bool conv_operand_path_run(CachingAllocator& alloc, ConvPass pass, const ConvPlan& plan,
                           const ConvGeometry& g, const ConvOperands& t) {
  if (plan.kernel == kKernelDepthwise) {
    conv_depthwise_run(alloc, pass, g, t);
  } else if (plan.kernel == kKernelDirect) {
    conv_direct_run(alloc, pass, plan.direct, g, t);
  } else if (plan.kernel == kKernelThin) {
    conv_thin_run(alloc, pass, plan.thin, g, t);
  } else if (plan.kernel == kKernelGemm) {
    conv_gemm_run(alloc, pass, g, t);
  } else {
    return false;
  }
  return true;
}

int64_t conv_gemm_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

}  // namespace tgrad::cuda
