// Normalization kernels (Backend::norm_forward, norm_backward, norm_running_stats). One block
// owns one key (a channel, or a (sample, group) pair; see NormShape): it sums the key's elements
// in float64 with a fixed thread-to-element assignment and a fixed tree, then writes the key's
// outputs itself, so a whole batch norm forward is one launch and its backward another, with
// the same bits on every run. A key's elements are `runs` runs of S contiguous elements, each run
// one (sample, channel) pair; their flat position is base + r * run_stride + j.
//
// When the keys are too few to fill the GPU (a batch norm of a few channels over a large batch,
// say), each key's elements are cut into `splits` chunks instead: a block per (key, chunk) sums
// its chunk into a float64 partial, a thread per key combines the partials in chunk order (the
// mean and variance with Chan's pairwise formula, so the variance stays a sum of squared
// deviations), and an elementwise kernel writes the outputs. The split depends on the shape only,
// so the bits do not depend on the GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>

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
  __device__ int64_t at(uint32_t i) const {
    const uint32_t r = i / s;
    return at(r, i - r * s);
  }
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

// A statistics key's mean and 1 / sqrt(var + eps) in float64, from the values norm_forward saved:
// every backward kernel normalizes x with these.
struct KeyStat {
  double mu, rstd;
  __device__ double x_hat(double x) const { return (x - mu) * rstd; }
};
template <class T>
__device__ inline KeyStat key_stat(const T* mean, const T* var, int64_t key, double eps) {
  return {static_cast<double>(mean[key]), 1.0 / sqrt(static_cast<double>(var[key]) + eps)};
}

// A key's statistics over elements [lo, hi) of its order, on one block: the mean of the range
// and the sum of squared deviations from it (two reads; every thread gets both).
template <class T>
__device__ void range_stats(const KeyRuns& kr, uint32_t lo, uint32_t hi, const T* x, double& mu,
                            double& sq) {
  double sum = 0.0, unused = 0.0;
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    sum += static_cast<double>(x[kr.at(i)]);
  block_sum2(sum, unused);
  mu = sum / static_cast<double>(hi - lo);
  sq = 0.0;
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const double dev = static_cast<double>(x[kr.at(i)]) - mu;
    sq += dev * dev;
  }
  block_sum2(sq, unused);
}

// Backward's sums over elements [lo, hi) of a block's order, on one block (every thread gets
// both): of dy and dy * x_hat in channel blocks (for dw, db), of g = dy * w[c] and g * x_hat in
// statistics-key blocks.
template <class T>
__device__ void range_grad_sums(const NormDims& d, const KeyRuns& kr, uint32_t lo, uint32_t hi,
                                const T* dy, const T* x, const T* mean, const T* var, double eps,
                                const T* w, double& s1, double& s2) {
  s1 = 0.0;
  s2 = 0.0;
  for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const uint32_t r = i / kr.s;
    const int64_t at = kr.at(r, i - r * kr.s), sk = kr.stat_key(d, r);
    const double xhat = key_stat(mean, var, sk, eps).x_hat(static_cast<double>(x[at]));
    double g = static_cast<double>(dy[at]);
    if (!kr.by_channel && w != nullptr) g *= static_cast<double>(w[kr.channel(d, r)]);
    s1 += g;
    s2 += g * xhat;
  }
  block_sum2(s1, s2);
}

template <class T>
__global__ void norm_forward_kernel(NormDims d, int64_t n, int64_t keys, const T* x, double eps,
                                    const T* w, const T* b, T* y, T* mean, T* var) {
  for (int64_t k = blockIdx.x; k < keys; k += gridDim.x) {
    const KeyRuns kr(d, n, k, d.per_channel);  // batch norm: its keys are channels
    const uint32_t total = kr.runs * kr.s;
    double mu = 0.0, sq = 0.0;
    range_stats(kr, 0, total, x, mu, sq);
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
    double s1 = 0.0, s2 = 0.0;
    range_grad_sums(d, kr, 0, total, dy, x, mean, var, eps, w, s1, s2);
    if (channel_blocks && threadIdx.x == 0) {
      if (dw != nullptr) dw[k] = static_cast<T>(s2);
      if (db != nullptr) db[k] = static_cast<T>(s1);
    }
    if (dx == nullptr) continue;
    // A batch norm channel block: its sums of dy become sums of g through the one w[k].
    const double wk = channel_blocks && w != nullptr ? static_cast<double>(w[k]) : 1.0;
    const double mg = s1 * wk / d.count, mgx = s2 * wk / d.count;
    const KeyStat st = key_stat(mean, var, k, eps);
    for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
      const uint32_t r = i / kr.s;
      const int64_t at = kr.at(r, i - r * kr.s);
      const double wc = w != nullptr ? static_cast<double>(w[kr.channel(d, r)]) : 1.0;
      const double xhat = st.x_hat(static_cast<double>(x[at]));
      dx[at] = static_cast<T>(st.rstd * (static_cast<double>(dy[at]) * wc - mg - xhat * mgx));
    }
  }
}

// ---- The split path ----

// The (sample, channel, statistics key) of flat element idx of x (N, C, S).
struct ElementKeys {
  int64_t c, key;
};
__device__ inline ElementKeys element_keys(const NormDims& d, int64_t idx) {
  const int64_t ns = idx / d.s;  // n * C + c
  const int64_t c = ns % d.c;
  return {c, d.per_channel ? c : (ns / d.c) * d.groups + c / d.cg};
}

// Block b is chunk b % splits of key b / splits: elements [lo, hi) of the key's order.
struct Chunk {
  int64_t key;
  uint32_t lo, hi;
};
__device__ inline Chunk chunk_of(int64_t b, int64_t splits, uint32_t chunk, uint32_t total) {
  const int64_t sp = b % splits;
  const uint32_t lo = static_cast<uint32_t>(sp) * chunk;
  return {b / splits, lo, min(total, lo + chunk)};
}

// part[3b..3b+2] = the chunk's element count, mean and sum of squared deviations from it.
template <class T>
__global__ void norm_partial_stats_kernel(NormDims d, int64_t n, int64_t blocks, int64_t splits,
                                          uint32_t chunk, const T* x, double* part) {
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const Chunk ch = chunk_of(b, splits, chunk, static_cast<uint32_t>(d.count));
    const KeyRuns kr(d, n, ch.key, d.per_channel);
    double mu = 0.0, sq = 0.0;
    range_stats(kr, ch.lo, ch.hi, x, mu, sq);
    if (threadIdx.x == 0) {
      part[3 * b] = static_cast<double>(ch.hi - ch.lo);
      part[3 * b + 1] = mu;
      part[3 * b + 2] = sq;
    }
  }
}

// A thread per key merges its chunks in order; stat[2k], stat[2k+1] = the float64 mean, rstd.
template <class T>
__global__ void norm_combine_stats_kernel(int64_t keys, int64_t splits, const double* part,
                                          double eps, T* mean, T* var, double* stat) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= keys) return;
  double count = 0.0, mu = 0.0, m2 = 0.0;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const double* p = part + 3 * (k * splits + sp);
    const double nb = p[0], delta = p[1] - mu, total = count + nb;
    mu += delta * (nb / total);
    m2 += p[2] + delta * delta * (count * nb / total);
    count = total;
  }
  const double v = m2 / count;
  mean[k] = static_cast<T>(mu);
  var[k] = static_cast<T>(v);
  stat[2 * k] = mu;
  stat[2 * k + 1] = 1.0 / sqrt(v + eps);
}

template <class T>
__global__ void norm_apply_kernel(NormDims d, int64_t total, const T* x, const double* stat,
                                  const T* w, const T* b, T* y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const ElementKeys e = element_keys(d, idx);
    const double scale =
        w != nullptr ? stat[2 * e.key + 1] * static_cast<double>(w[e.c]) : stat[2 * e.key + 1];
    const double shift = b != nullptr ? static_cast<double>(b[e.c]) : 0.0;
    y[idx] = static_cast<T>((static_cast<double>(x[idx]) - stat[2 * e.key]) * scale + shift);
  }
}

// norm_backward_kernel's sums over one chunk: part[2b], part[2b+1] (see that kernel for which).
template <class T>
__global__ void norm_partial_grad_kernel(NormDims d, int64_t n, int64_t blocks, int64_t splits,
                                         uint32_t chunk, uint32_t per_key, bool channel_blocks,
                                         const T* dy, const T* x, const T* mean, const T* var,
                                         double eps, const T* w, double* part) {
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const Chunk ch = chunk_of(b, splits, chunk, per_key);
    const KeyRuns kr(d, n, ch.key, channel_blocks);
    double s1 = 0.0, s2 = 0.0;
    range_grad_sums(d, kr, ch.lo, ch.hi, dy, x, mean, var, eps, w, s1, s2);
    if (threadIdx.x == 0) {
      part[2 * b] = s1;
      part[2 * b + 1] = s2;
    }
  }
}

// A thread per key sums its chunks in order into sums[2k], sums[2k+1] (and dw, db for channels).
template <class T>
__global__ void norm_combine_grad_kernel(int64_t keys, int64_t splits, const double* part, T* dw,
                                         T* db, double* sums) {
  const int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= keys) return;
  double s1 = 0.0, s2 = 0.0;
  for (int64_t sp = 0; sp < splits; ++sp) {
    s1 += part[2 * (k * splits + sp)];
    s2 += part[2 * (k * splits + sp) + 1];
  }
  if (dw != nullptr) dw[k] = static_cast<T>(s2);
  if (db != nullptr) db[k] = static_cast<T>(s1);
  sums[2 * k] = s1;
  sums[2 * k + 1] = s2;
}

// dx from per-key sums: of g (group norm's key sums) or of dy (batch norm's channel sums, which
// become sums of g through the channel's weight).
template <class T>
__global__ void norm_dx_kernel(NormDims d, int64_t total, const T* dy, const T* x, const T* mean,
                               const T* var, double eps, const T* w, const double* sums,
                               bool sums_of_dy, T* dx) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const ElementKeys e = element_keys(d, idx);
    const double wc = w != nullptr ? static_cast<double>(w[e.c]) : 1.0;
    const double to_g = sums_of_dy ? wc : 1.0;
    const double mg = sums[2 * e.key] * to_g / d.count;
    const double mgx = sums[2 * e.key + 1] * to_g / d.count;
    const KeyStat st = key_stat(mean, var, e.key, eps);
    const double xhat = st.x_hat(static_cast<double>(x[idx]));
    dx[idx] = static_cast<T>(st.rstd * (static_cast<double>(dy[idx]) * wc - mg - xhat * mgx));
  }
}

// Channel sums when a channel's run in a sample is short (S < kShortRun, e.g. LayerNorm's
// per-element affine or a batch norm of (N, C)): block threads take consecutive columns j of
// the samples' rows (j = c * S + position) and blockIdx.y a chunk of samples, so that reads are
// coalesced; part[(chunk * width + j) * 2 + {0, 1}] = the chunk's sums of dy and dy * x_hat.
template <class T>
__global__ void norm_column_grad_kernel(NormDims d, int64_t n, int64_t width,
                                        int64_t rows_per_chunk, const T* dy, const T* x,
                                        const T* mean, const T* var, double eps, double* part) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= width) return;
  const int64_t chunk = blockIdx.y, c = j / d.s;
  const int64_t n0 = chunk * rows_per_chunk, n1 = min_i64(n, n0 + rows_per_chunk);
  double s1 = 0.0, s2 = 0.0;
  for (int64_t r = n0; r < n1; ++r) {
    const int64_t at = r * width + j;
    const int64_t sk = d.per_channel ? c : r * d.groups + c / d.cg;
    const double xhat = key_stat(mean, var, sk, eps).x_hat(static_cast<double>(x[at]));
    const double g = static_cast<double>(dy[at]);
    s1 += g;
    s2 += g * xhat;
  }
  part[2 * (chunk * width + j)] = s1;
  part[2 * (chunk * width + j) + 1] = s2;
}

// A thread per channel sums its columns' partials, chunk by chunk, position by position.
template <class T>
__global__ void norm_column_combine_kernel(int64_t channels, int64_t s, int64_t chunks,
                                           const double* part, T* dw, T* db, double* sums) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const int64_t width = channels * s;
  double s1 = 0.0, s2 = 0.0;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    for (int64_t p = 0; p < s; ++p) {
      const int64_t at = ch * width + c * s + p;
      s1 += part[2 * at];
      s2 += part[2 * at + 1];
    }
  }
  if (dw != nullptr) dw[c] = static_cast<T>(s2);
  if (db != nullptr) db[c] = static_cast<T>(s1);
  sums[2 * c] = s1;
  sums[2 * c + 1] = s2;
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

// A channel's run in a sample shorter than this is summed by columns (norm_column_grad_kernel);
// the column sums aim at kColumnTargetBlocks blocks. Shape-only, like split_for.
constexpr int64_t kShortRun = 32;
constexpr int64_t kColumnTargetBlocks = 512;

// Chunks per key: 1 (a block per key) unless the keys are fewer than half kTargetBlocks; then
// enough chunks of at least kMinChunk elements to approach kTargetBlocks blocks. Fixed numbers,
// not the GPU's SM count, so that the summation order is the same on every GPU.
struct Split {
  int64_t splits = 1;
  uint32_t chunk = 0;
};
Split split_for(int64_t keys, int64_t per_key) {
  constexpr int64_t kTargetBlocks = 512, kMinChunk = 8192;
  Split sp;
  if (keys >= kTargetBlocks / 2) return sp;
  const int64_t want = std::clamp<int64_t>(per_key / kMinChunk, 1, ceil_div(kTargetBlocks, keys));
  if (want == 1) return sp;
  const int64_t chunk = ceil_div(per_key, want);
  sp.chunk = static_cast<uint32_t>(chunk);
  sp.splits = ceil_div(per_key, chunk);  // every chunk non-empty
  return sp;
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

void norm_forward(CachingAllocator& alloc, const NormShape& ns, const Tensor& x, double eps,
                  const Tensor* w, const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) {
  const int64_t keys = ns.keys();
  if (keys == 0 || ns.per_key() == 0) return;
  DeviceGuard guard(x.device());
  const NormDims d = dims_of(ns);
  const Split sp = split_for(keys, ns.per_key());
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (sp.splits == 1) {
      norm_forward_kernel<T><<<blocks_for(keys), threads_for_key(ns.per_key())>>>(
          d, ns.n, keys, x.data_ptr<T>(), eps, ptr<T>(w), ptr<T>(b), y.data_ptr<T>(),
          mean.data_ptr<T>(), var.data_ptr<T>());
      TGRAD_CUDA_CHECK_LAUNCH("norm_forward_kernel");
      return;
    }
    const int64_t blocks = keys * sp.splits;
    const std::shared_ptr<void> ws =
        alloc.allocate((3 * blocks + 2 * keys) * int64_t{sizeof(double)}, x.device().index());
    double* part = static_cast<double*>(ws.get());
    double* stat = part + 3 * blocks;
    norm_partial_stats_kernel<T><<<blocks_for(blocks), kMaxNormThreads>>>(
        d, ns.n, blocks, sp.splits, sp.chunk, x.data_ptr<T>(), part);
    TGRAD_CUDA_CHECK_LAUNCH("norm_partial_stats_kernel");
    norm_combine_stats_kernel<T><<<grid_for(keys), kThreads>>>(
        keys, sp.splits, part, eps, mean.data_ptr<T>(), var.data_ptr<T>(), stat);
    TGRAD_CUDA_CHECK_LAUNCH("norm_combine_stats_kernel");
    const int64_t total = x.numel();
    norm_apply_kernel<T><<<grid_for(total), kThreads>>>(d, total, x.data_ptr<T>(), stat, ptr<T>(w),
                                                        ptr<T>(b), y.data_ptr<T>());
    TGRAD_CUDA_CHECK_LAUNCH("norm_apply_kernel");
  });
}

void norm_backward(CachingAllocator& alloc, const NormShape& ns, const Tensor& dy, const Tensor& x,
                   const Tensor& mean, const Tensor& var, double eps, const Tensor* w, Tensor* dx,
                   Tensor* dw, Tensor* db) {
  if (ns.keys() == 0 || ns.per_key() == 0) return;
  DeviceGuard guard(x.device());
  const NormDims d = dims_of(ns);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = dy.data_ptr<T>(), *xp = x.data_ptr<T>();
    const T *mp = mean.data_ptr<T>(), *vp = var.data_ptr<T>(), *wp = ptr<T>(w);
    // dx from per-key sums (norm_dx_kernel), after a pass that wrote them to `sums`.
    const auto launch_dx = [&](const double* sums, bool sums_of_dy, T* dx_out) {
      const int64_t total = x.numel();
      norm_dx_kernel<T><<<grid_for(total), kThreads>>>(d, total, dyp, xp, mp, vp, eps, wp, sums,
                                                       sums_of_dy, dx_out);
      TGRAD_CUDA_CHECK_LAUNCH("norm_dx_kernel");
    };
    // The channel sums by columns (see norm_column_grad_kernel), then batch norm's dx.
    const auto column_pass = [&](T* dx_out, T* dw_out, T* db_out) {
      const int64_t width = ns.c * ns.s;
      const int64_t col_blocks = ceil_div(width, kThreads);
      const int64_t want = std::clamp<int64_t>(ceil_div(kColumnTargetBlocks, col_blocks), 1, ns.n);
      const int64_t rows_per_chunk = ceil_div(ns.n, want);
      const int64_t chunks = ceil_div(ns.n, rows_per_chunk);
      const std::shared_ptr<void> ws = alloc.allocate(
          (2 * chunks * width + 2 * ns.c) * int64_t{sizeof(double)}, x.device().index());
      double* part = static_cast<double*>(ws.get());
      double* sums = part + 2 * chunks * width;
      norm_column_grad_kernel<T>
          <<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)), kThreads>>>(
              d, ns.n, width, rows_per_chunk, dyp, xp, mp, vp, eps, part);
      TGRAD_CUDA_CHECK_LAUNCH("norm_column_grad_kernel");
      norm_column_combine_kernel<T>
          <<<grid_for(ns.c), kThreads>>>(ns.c, ns.s, chunks, part, dw_out, db_out, sums);
      TGRAD_CUDA_CHECK_LAUNCH("norm_column_combine_kernel");
      if (dx_out != nullptr) launch_dx(sums, true, dx_out);
    };
    // One pass of blocks over `keys` keys of `per_key` elements: channel blocks (dw, db, and
    // batch norm's dx) or group norm's key blocks (dx).
    const auto pass = [&](bool channel_blocks, int64_t keys, int64_t per_key, T* dx_out, T* dw_out,
                          T* db_out) {
      if (channel_blocks && ns.s < kShortRun) {
        column_pass(dx_out, dw_out, db_out);
        return;
      }
      const Split sp = split_for(keys, per_key);
      if (sp.splits == 1) {
        norm_backward_kernel<T><<<blocks_for(keys), threads_for_key(per_key)>>>(
            d, ns.n, keys, channel_blocks, dyp, xp, mp, vp, eps, wp, dx_out, dw_out, db_out);
        TGRAD_CUDA_CHECK_LAUNCH("norm_backward_kernel");
        return;
      }
      const int64_t blocks = keys * sp.splits;
      const std::shared_ptr<void> ws =
          alloc.allocate((2 * blocks + 2 * keys) * int64_t{sizeof(double)}, x.device().index());
      double* part = static_cast<double*>(ws.get());
      double* sums = part + 2 * blocks;
      norm_partial_grad_kernel<T><<<blocks_for(blocks), kMaxNormThreads>>>(
          d, ns.n, blocks, sp.splits, sp.chunk, static_cast<uint32_t>(per_key), channel_blocks, dyp,
          xp, mp, vp, eps, wp, part);
      TGRAD_CUDA_CHECK_LAUNCH("norm_partial_grad_kernel");
      norm_combine_grad_kernel<T>
          <<<grid_for(keys), kThreads>>>(keys, sp.splits, part, dw_out, db_out, sums);
      TGRAD_CUDA_CHECK_LAUNCH("norm_combine_grad_kernel");
      if (dx_out != nullptr) launch_dx(sums, channel_blocks, dx_out);
    };
    const bool want_wb = dw != nullptr || db != nullptr;
    // Batch norm: channel blocks do everything. Group norm: key blocks for dx, then channel
    // blocks for dw and db.
    if (!ns.per_channel && dx != nullptr) {
      pass(false, ns.keys(), ns.per_key(), mut_ptr<T>(dx), nullptr, nullptr);
    }
    if (ns.per_channel ? (dx != nullptr || want_wb) : want_wb) {
      pass(true, ns.c, ns.n * ns.s, ns.per_channel ? mut_ptr<T>(dx) : nullptr, mut_ptr<T>(dw),
           mut_ptr<T>(db));
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
