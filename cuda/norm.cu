// Normalization kernels (Backend::norm_forward, norm_backward, norm_running_stats). One block
// owns one key (a channel, or a (sample, group) pair; see NormShape): it sums the key's elements
// in float64 with a fixed thread-to-element assignment and a fixed tree, then writes the key's
// outputs itself, so a whole batch norm forward is one launch and its backward another, with
// the same bits on every run. A key's elements are `runs` runs of S contiguous elements, each run
// one (sample, channel) pair; their flat position is base + r * run_stride + j.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

constexpr int kMaxNormThreads = 512;

struct NormDims {
  int64_t c = 0, s = 0, groups = 1, cg = 1;
  bool per_channel = true;
  double count = 1.0;  // elements per statistics key
};

// The runs of one block: over channel k's samples (by_channel) or over statistics key k's
// channels (group norm). Index math is 32-bit within a key: core keeps a key under 2^31 elements.
struct KeyRuns {
  int64_t base, run_stride;
  uint32_t runs, s;
  bool by_channel;
  int64_t key;
  __device__ KeyRuns(const NormDims& d, int64_t n, int64_t k, bool channel_blocks)
      : base(channel_blocks ? k * d.s : k * d.cg * d.s),
        run_stride(channel_blocks ? d.c * d.s : d.s),
        runs(static_cast<uint32_t>(channel_blocks ? n : d.cg)),
        s(static_cast<uint32_t>(d.s)),
        by_channel(channel_blocks),
        key(k) {}
  __device__ int64_t at(uint32_t r, uint32_t j) const { return base + r * run_stride + j; }
  __device__ int64_t channel(const NormDims& d, uint32_t r) const {
    return by_channel ? key : key % d.groups * d.cg + r;
  }
  __device__ int64_t stat_key(const NormDims& d, uint32_t r) const {
    if (!by_channel || d.per_channel) return key;
    return static_cast<int64_t>(r) * d.groups + key / d.cg;  // sample r's group of channel key
  }
};

// Sums a and b over the block in a fixed tree; every thread gets the totals.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kMaxNormThreads], sb[kMaxNormThreads];
  const unsigned t = threadIdx.x;
  sa[t] = a;
  sb[t] = b;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (t < h) {
      sa[t] += sa[t + h];
      sb[t] += sb[t + h];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();  // the arrays are reused by the next call
}

template <class T>
__global__ void norm_forward_kernel(NormDims d, int64_t n, int64_t keys, const T* x, double eps, const T* w,
                                    const T* b, T* y, T* mean, T* var) {
  for (int64_t k = blockIdx.x; k < keys; k += gridDim.x) {
    const KeyRuns kr(d, n, k, d.per_channel);  // batch norm: its keys are channels
    const uint32_t total = kr.runs * kr.s;
    double sum = 0.0, unused = 0.0;
    for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
      const uint32_t r = i / kr.s;
      sum += static_cast<double>(x[kr.at(r, i - r * kr.s)]);
    }
    block_sum2(sum, unused);
    const double mu = sum / d.count;
    double sq = 0.0;
    for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
      const uint32_t r = i / kr.s;
      const double dev = static_cast<double>(x[kr.at(r, i - r * kr.s)]) - mu;
      sq += dev * dev;
    }
    block_sum2(sq, unused);
    const double v = sq / d.count;
    if (threadIdx.x == 0) {
      mean[k] = static_cast<T>(mu);
      var[k] = static_cast<T>(v);
    }
    const double rstd = 1.0 / sqrt(v + eps);
    for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
      const uint32_t r = i / kr.s;
      const int64_t c = kr.channel(d, r), at = kr.at(r, i - r * kr.s);
      const double scale = w != nullptr ? rstd * static_cast<double>(w[c]) : rstd;
      const double shift = b != nullptr ? static_cast<double>(b[c]) : 0.0;
      y[at] = static_cast<T>((static_cast<double>(x[at]) - mu) * scale + shift);
    }
  }
}

// channel_blocks: block k is channel k over every sample; it writes dw[k], db[k] and, for batch
// norm (where a channel is a statistics key), dx. Otherwise block k is statistics key k and
// writes dx only. With g = dy * w[c]: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).
template <class T>
__global__ void norm_backward_kernel(NormDims d, int64_t n, int64_t keys, bool channel_blocks,
                                     const T* dy, const T* x, const T* mean, const T* var,
                                     double eps, const T* w, T* dx, T* dw, T* db) {
  for (int64_t k = blockIdx.x; k < keys; k += gridDim.x) {
    const KeyRuns kr(d, n, k, channel_blocks);
    const uint32_t total = kr.runs * kr.s;
    // In channel blocks the sums are of dy (for dw, db); in key blocks of g.
    double s1 = 0.0, s2 = 0.0;
    for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
      const uint32_t r = i / kr.s;
      const int64_t at = kr.at(r, i - r * kr.s), sk = kr.stat_key(d, r);
      const double rstd = 1.0 / sqrt(static_cast<double>(var[sk]) + eps);
      const double xhat = (static_cast<double>(x[at]) - static_cast<double>(mean[sk])) * rstd;
      double g = static_cast<double>(dy[at]);
      if (!channel_blocks && w != nullptr) g *= static_cast<double>(w[kr.channel(d, r)]);
      s1 += g;
      s2 += g * xhat;
    }
    block_sum2(s1, s2);
    if (channel_blocks && threadIdx.x == 0) {
      if (dw != nullptr) dw[k] = static_cast<T>(s2);
      if (db != nullptr) db[k] = static_cast<T>(s1);
    }
    if (dx == nullptr) continue;
    // A batch norm channel block: its sums of dy become sums of g through the one w[k].
    const double wk = channel_blocks && w != nullptr ? static_cast<double>(w[k]) : 1.0;
    const double mg = s1 * wk / d.count, mgx = s2 * wk / d.count;
    const double mu = static_cast<double>(mean[k]);
    const double rstd = 1.0 / sqrt(static_cast<double>(var[k]) + eps);
    for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
      const uint32_t r = i / kr.s;
      const int64_t at = kr.at(r, i - r * kr.s);
      const double wc = w != nullptr ? static_cast<double>(w[kr.channel(d, r)]) : 1.0;
      const double xhat = (static_cast<double>(x[at]) - mu) * rstd;
      dx[at] = static_cast<T>(rstd * (static_cast<double>(dy[at]) * wc - mg - xhat * mgx));
    }
  }
}

template <class T>
__global__ void norm_running_stats_kernel(const T* mean, const T* var, int64_t c, T keep, T take,
                                          T take_var, T* running_mean, T* running_var,
                                          int64_t* tracked) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < c) {
    running_mean[i] = running_mean[i] * keep + mean[i] * take;
    running_var[i] = running_var[i] * keep + var[i] * take_var;
  }
  if (i == 0 && tracked != nullptr) *tracked += 1;
}

NormDims dims_of(const NormShape& ns) {
  NormDims d;
  d.c = ns.c;
  d.s = ns.s;
  d.groups = ns.per_channel ? 1 : ns.groups;
  d.cg = ns.per_channel ? 1 : ns.c / ns.groups;
  d.per_channel = ns.per_channel;
  d.count = static_cast<double>(ns.per_key());
  return d;
}

// Threads per block: more for keys with many elements (a power of two, for the tree).
int threads_for_key(int64_t per_key) {
  return per_key >= 16384 ? kMaxNormThreads : kThreads;
}

unsigned blocks_for(int64_t keys) {
  return static_cast<unsigned>(min_i64(keys, kMaxBlocks));
}

template <class T>
const T* ptr(const Tensor* t) {
  return t != nullptr ? t->data_ptr<T>() : nullptr;
}
template <class T>
T* mut_ptr(Tensor* t) {
  return t != nullptr ? t->data_ptr<T>() : nullptr;
}

}  // namespace

void norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                  const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) {
  const int64_t keys = ns.keys();
  if (keys == 0 || ns.per_key() == 0) return;
  DeviceGuard guard(x.device());
  const NormDims d = dims_of(ns);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    norm_forward_kernel<T><<<blocks_for(keys), threads_for_key(ns.per_key())>>>(
        d, ns.n, keys, x.data_ptr<T>(), eps, ptr<T>(w), ptr<T>(b), y.data_ptr<T>(), mean.data_ptr<T>(),
        var.data_ptr<T>());
    TGRAD_CUDA_CHECK_LAUNCH("norm_forward_kernel");
  });
}

void norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x, const Tensor& mean,
                   const Tensor& var, double eps, const Tensor* w, Tensor* dx, Tensor* dw,
                   Tensor* db) {
  if (ns.keys() == 0 || ns.per_key() == 0) return;
  DeviceGuard guard(x.device());
  const NormDims d = dims_of(ns);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = dy.data_ptr<T>(), *xp = x.data_ptr<T>();
    const T *mp = mean.data_ptr<T>(), *vp = var.data_ptr<T>(), *wp = ptr<T>(w);
    const bool want_wb = dw != nullptr || db != nullptr;
    // Batch norm: one launch, a block per channel. Group norm: key blocks for dx, then channel
    // blocks for dw and db.
    if (!ns.per_channel && dx != nullptr) {
      norm_backward_kernel<T><<<blocks_for(ns.keys()), threads_for_key(ns.per_key())>>>(
          d, ns.n, ns.keys(), false, dyp, xp, mp, vp, eps, wp, mut_ptr<T>(dx), nullptr, nullptr);
      TGRAD_CUDA_CHECK_LAUNCH("norm_backward_kernel");
    }
    if (ns.per_channel ? (dx != nullptr || want_wb) : want_wb) {
      norm_backward_kernel<T><<<blocks_for(ns.c), threads_for_key(ns.n * ns.s)>>>(
          d, ns.n, ns.c, true, dyp, xp, mp, vp, eps, wp, ns.per_channel ? mut_ptr<T>(dx) : nullptr,
          mut_ptr<T>(dw), mut_ptr<T>(db));
      TGRAD_CUDA_CHECK_LAUNCH("norm_backward_kernel");
    }
  });
}

void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum, double unbias,
                        Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked) {
  const int64_t c = mean.numel();
  DeviceGuard guard(mean.device());
  dispatch_float(mean.dtype(), [&](auto tag) {
    using T = decltype(tag);
    norm_running_stats_kernel<T><<<grid_for(std::max<int64_t>(c, 1)), kThreads>>>(
        mean.data_ptr<T>(), var.data_ptr<T>(), c, static_cast<T>(1.0 - momentum),
        static_cast<T>(momentum), static_cast<T>(unbias * momentum), running_mean.data_ptr<T>(),
        running_var.data_ptr<T>(),
        num_batches_tracked != nullptr ? num_batches_tracked->data_ptr<int64_t>() : nullptr);
    TGRAD_CUDA_CHECK_LAUNCH("norm_running_stats_kernel");
  });
}

}  // namespace tgrad::cuda
