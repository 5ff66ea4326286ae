// Transposed-convolution weight and bias gradients.
//   dw[ci, co, kh, kw] = sum_{n, ih, iw} x[n, ci, ih, iw] * dy[n, g*Cog+co, oh, ow],  g = ci / Cig,
//   with oh = ih*sH - pH + kh*dH in [0, Ho) (likewise ow);   db[co] = sum_{n, oh, ow} dy[n, co, oh,
//   ow].
// The sum over r = (n, ih, iw) is long, so it is split deterministically: stage 1 gives each
// (weight tile, chunk of r) one block, whose threads stride over the chunk and meet in a fixed
// shared-memory tree (float64 accumulation) -> partials[e, chunk]; stage 2 sums each e's chunks
// in order. A tile is kTileCo consecutive co of one (ci, kh, kw), so each x load feeds kTileCo
// products. The bias gradient is reduction.cu's deterministic sum of dy as (N, Co, Ho*Wo).
#include <cuda_runtime.h>

#include "cuda/conv_params.h"
#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

constexpr int kTileCo = 4;
// Chunking depends on the shape only, so the bits do not depend on the GPU model.
constexpr int64_t kMinChunk = 4096;  // r terms per block at least
constexpr int64_t kTargetBlocks = 8192;

// Writes out[e * chunks + c] for the tile's weight elements e (out = dw when chunks == 1).
template <class T, class Out>
__global__ void conv_transpose_wgrad_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                            Out* __restrict__ out, ConvParams p, int64_t chunks,
                                            int64_t chunk_len) {
  __shared__ double partial[kTileCo][kThreads];
  const int64_t co_tiles = ceil_div(p.Cog, kTileCo);
  const int64_t tiles = p.Ci * co_tiles * p.kH * p.kW;
  const int64_t r_total = p.N * p.Hi * p.Wi;
  const int64_t y_channel = p.Ho * p.Wo;
  for (int64_t blk = blockIdx.x; blk < tiles * chunks; blk += gridDim.x) {
    // Neighbouring blocks: neighbouring tiles of one chunk, so x's chunk is shared through L2.
    const int64_t c = blk / tiles;
    int64_t t = blk % tiles;
    const int64_t kw = t % p.kW;
    t /= p.kW;
    const int64_t kh = t % p.kH;
    t /= p.kH;
    const int64_t co0 = (t % co_tiles) * kTileCo;
    const int64_t ci = t / co_tiles;
    const int64_t g = ci / p.Cig;
    const int64_t n_co = min_i64(kTileCo, p.Cog - co0);

    double acc[kTileCo] = {};
    const int64_t r_end = min_i64(r_total, (c + 1) * chunk_len);
    int64_t r = c * chunk_len + threadIdx.x;
    // (n, ih, iw) of r, advanced incrementally: divisions only when a row wraps.
    int64_t iw = r % p.Wi, ih = (r / p.Wi) % p.Hi, n = r / (p.Wi * p.Hi);
    for (; r < r_end; r += blockDim.x) {
      const int64_t oh = ih * p.sH - p.pH + kh * p.dH;
      const int64_t ow = iw * p.sW - p.pW + kw * p.dW;
      if (oh >= 0 && oh < p.Ho && ow >= 0 && ow < p.Wo) {
        const double xv = static_cast<double>(x[(n * p.Ci + ci) * (p.Hi * p.Wi) + ih * p.Wi + iw]);
        const T* dyp = dy + ((n * p.Co + g * p.Cog + co0) * p.Ho + oh) * p.Wo + ow;
#pragma unroll
        for (int u = 0; u < kTileCo; ++u) {
          if (u < n_co) acc[u] += xv * static_cast<double>(dyp[u * y_channel]);
        }
      }
      iw += blockDim.x;
      if (iw >= p.Wi) {
        ih += iw / p.Wi;
        iw %= p.Wi;
        if (ih >= p.Hi) {
          n += ih / p.Hi;
          ih %= p.Hi;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kTileCo; ++u)
      partial[u][threadIdx.x] = acc[u];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) {
#pragma unroll
        for (int u = 0; u < kTileCo; ++u)
          partial[u][threadIdx.x] += partial[u][threadIdx.x + s];
      }
      __syncthreads();
    }
    if (threadIdx.x < n_co) {
      const int64_t e = (((ci * p.Cog + co0 + threadIdx.x) * p.kH + kh) * p.kW + kw);
      out[e * chunks + c] = static_cast<Out>(partial[threadIdx.x][0]);
    }
    __syncthreads();  // partial is rewritten by this block's next tile
  }
}

// dw[e] = sum_{c < chunks} partials[e * chunks + c], in order of c.
template <class T>
__global__ void sum_chunks_kernel(const double* __restrict__ partials, T* __restrict__ dw,
                                  int64_t elements, int64_t chunks) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    double acc = 0.0;
    for (int64_t c = 0; c < chunks; ++c)
      acc += partials[e * chunks + c];
    dw[e] = static_cast<T>(acc);
  }
}

}  // namespace

void conv_transpose_wgrad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& x,
                          const Tensor& dy, Tensor& dw) {
  const ConvParams p = make_conv_params("CUDA conv_transpose_wgrad", g, x, dw, dy);
  const int64_t elements = dw.numel();
  if (elements == 0) return;
  DeviceGuard guard(dw.device());
  const int64_t r_total = p.N * p.Hi * p.Wi;
  if (r_total == 0) {
    fill(dw, 0.0);
    return;
  }
  const int64_t tiles = p.Ci * ceil_div(p.Cog, kTileCo) * p.kH * p.kW;
  int64_t chunks =
      std::max<int64_t>(1, min_i64(ceil_div(r_total, kMinChunk), ceil_div(kTargetBlocks, tiles)));
  const int64_t chunk_len = ceil_div(r_total, chunks);
  chunks = ceil_div(r_total, chunk_len);
  const unsigned blocks = static_cast<unsigned>(min_i64(tiles * chunks, kMaxBlocks));

  dispatch_float(dw.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (chunks == 1) {
      conv_transpose_wgrad_kernel<T, T><<<blocks, kThreads>>>(
          x.data_ptr<T>(), dy.data_ptr<T>(), dw.data_ptr<T>(), p, chunks, chunk_len);
      TGRAD_CUDA_CHECK_LAUNCH("conv_transpose_wgrad_kernel");
      return;
    }
    // The partials live until this scope ends; the stream orders their reuse after stage 2.
    std::shared_ptr<void> storage =
        alloc.allocate(elements * chunks * int64_t{sizeof(double)}, dw.device().index());
    double* partials = static_cast<double*>(storage.get());
    conv_transpose_wgrad_kernel<T, double>
        <<<blocks, kThreads>>>(x.data_ptr<T>(), dy.data_ptr<T>(), partials, p, chunks, chunk_len);
    TGRAD_CUDA_CHECK_LAUNCH("conv_transpose_wgrad_kernel");
    sum_chunks_kernel<T>
        <<<grid_for(elements), kThreads>>>(partials, dw.data_ptr<T>(), elements, chunks);
    TGRAD_CUDA_CHECK_LAUNCH("sum_chunks_kernel");
  });
}

void conv_transpose_bias_grad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& dy,
                              Tensor& db) {
  TGRAD_CHECK(dy.numel() == g.y_numel() && db.numel() == g.out_channels && dy.dtype() == db.dtype(),
              "CUDA conv_transpose_bias_grad: dy ", dy.shape(), " ", dy.dtype(), " and db ",
              db.shape(), " ", db.dtype(), " do not match the geometry ", g.str());
  sum_to_shape(alloc, dy, {g.batch, g.out_channels, g.out_size[0] * g.out_size[1]}, db,
               {1, g.out_channels, 1});
}

}  // namespace tgrad::cuda
