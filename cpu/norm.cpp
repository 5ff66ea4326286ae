// Normalization kernels (Backend::norm_forward, norm_backward, norm_running_stats). Each key's
// statistics and outputs are one task on one thread, summed in float64 in a fixed order (Lanes
// below), so the result does not depend on the thread count. A key's elements are `runs` runs of S
// contiguous elements, each run one (sample, channel) pair: batch norm's key c has a run per
// sample, group norm's key (n, g) a run per channel of the group.
#include <algorithm>
#include <cmath>

#include "cpu/kernels.h"
#include "cpu/parallel.h"

namespace tgrad::cpu {

namespace {

// Where run r of a key lies: its sample, its channel and its first element.
struct Run {
  int64_t n, c, start;
};

struct KeyLayout {
  NormShape ns;
  int64_t cg;    // channels per group
  int64_t runs;  // runs per key
  explicit KeyLayout(const NormShape& s)
      : ns(s), cg(s.per_channel ? 1 : s.c / s.groups), runs(s.per_channel ? s.n : cg) {}
  Run run(int64_t key, int64_t r) const {
    const int64_t n = ns.per_channel ? r : key / ns.groups;
    const int64_t c = ns.per_channel ? key : key % ns.groups * cg + r;
    return {n, c, (n * ns.c + c) * ns.s};
  }
};

// A float64 sum in kLanes interleaved partial sums: element i of a run goes to lane i % kLanes, and
// the lanes are added pairwise at the end, a fixed order whatever the threads. One running sum
// was a chain of dependent adds, a fifth of the model zoo U-Net's training step on one core;
// independent lanes let the adds overlap and vectorise.
constexpr int kLanes = 8;
struct Lanes {
  double v[kLanes] = {};
  // v[i % kLanes] += f(i) for i < n.
  template <class F>
  void add(int64_t n, F&& f) {
    const int64_t whole = n / kLanes * kLanes;
    for (int64_t i = 0; i < whole; i += kLanes)
      for (int j = 0; j < kLanes; ++j)
        v[j] += f(i + j);
    for (int64_t i = whole; i < n; ++i)
      v[i - whole] += f(i);
  }
  static_assert(kLanes == 8, "total() adds eight lanes");
  double total() const { return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); }
};

// Runs fn(key) for every key on the pool; a key is worth a thread when its elements are many.
template <class Fn>
void for_keys(const NormShape& ns, Fn&& fn) {
  const int threads = threads_for(static_cast<double>(ns.n * ns.c * ns.s) * 4.0, max_threads());
  parallel_for(threads, ns.keys(), fn);
}

}  // namespace

void norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                  const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) {
  dispatch_floating(x.dtype(), [&]<class T>() {
    const KeyLayout lay(ns);
    const T* xp = data<T>(x);
    const T* wp = w != nullptr ? data<T>(*w) : nullptr;
    const T* bp = b != nullptr ? data<T>(*b) : nullptr;
    T *yp = data<T>(y), *mp = data<T>(mean), *vp = data<T>(var);
    const double count = static_cast<double>(ns.per_key());
    for_keys(ns, [&](int64_t k) {
      Lanes sum;
      for (int64_t r = 0; r < lay.runs; ++r) {
        const T* row = xp + lay.run(k, r).start;
        sum.add(ns.s, [&](int64_t i) { return static_cast<double>(row[i]); });
      }
      const double mu = sum.total() / count;
      Lanes sq;
      for (int64_t r = 0; r < lay.runs; ++r) {
        const T* row = xp + lay.run(k, r).start;
        sq.add(ns.s, [&](int64_t i) {
          const double d = static_cast<double>(row[i]) - mu;
          return d * d;
        });
      }
      const double v = sq.total() / count;
      mp[k] = static_cast<T>(mu);
      vp[k] = static_cast<T>(v);
      const double rstd = 1.0 / std::sqrt(v + eps);
      for (int64_t r = 0; r < lay.runs; ++r) {
        const Run run = lay.run(k, r);
        const double scale = wp != nullptr ? rstd * static_cast<double>(wp[run.c]) : rstd;
        const double shift = bp != nullptr ? static_cast<double>(bp[run.c]) : 0.0;
        const T* row = xp + run.start;
        T* out = yp + run.start;
        for (int64_t i = 0; i < ns.s; ++i)
          out[i] = static_cast<T>((static_cast<double>(row[i]) - mu) * scale + shift);
      }
    });
  });
}

void norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x, const Tensor& mean,
                   const Tensor& var, double eps, const Tensor* w, Tensor* dx, Tensor* dw,
                   Tensor* db) {
  dispatch_floating(x.dtype(), [&]<class T>() {
    const KeyLayout lay(ns);
    const T *dyp = data<T>(dy), *xp = data<T>(x), *mp = data<T>(mean), *vp = data<T>(var);
    const T* wp = w != nullptr ? data<T>(*w) : nullptr;
    auto stat = [&](int64_t n, int64_t c) {
      return ns.per_channel ? c : n * ns.groups + c / lay.cg;
    };
    auto rstd_of = [&](int64_t key) { return 1.0 / std::sqrt(static_cast<double>(vp[key]) + eps); };
    // dx per statistics key: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dy * w[c].
    if (dx != nullptr) {
      T* dxp = data<T>(*dx);
      const double count = static_cast<double>(ns.per_key());
      for_keys(ns, [&](int64_t k) {
        const double mu = static_cast<double>(mp[k]), rstd = rstd_of(k);
        Lanes sg, sgx;
        for (int64_t r = 0; r < lay.runs; ++r) {
          const Run run = lay.run(k, r);
          const double wc = wp != nullptr ? static_cast<double>(wp[run.c]) : 1.0;
          const T* dyr = dyp + run.start;
          const T* xr = xp + run.start;
          sg.add(ns.s, [&](int64_t i) { return static_cast<double>(dyr[i]) * wc; });
          sgx.add(ns.s, [&](int64_t i) {
            return static_cast<double>(dyr[i]) * wc * ((static_cast<double>(xr[i]) - mu) * rstd);
          });
        }
        const double mg = sg.total() / count, mgx = sgx.total() / count;
        for (int64_t r = 0; r < lay.runs; ++r) {
          const Run run = lay.run(k, r);
          const double wc = wp != nullptr ? static_cast<double>(wp[run.c]) : 1.0;
          for (int64_t i = 0; i < ns.s; ++i) {
            const double xhat = (static_cast<double>(xp[run.start + i]) - mu) * rstd;
            const double g = static_cast<double>(dyp[run.start + i]) * wc;
            dxp[run.start + i] = static_cast<T>(rstd * (g - mg - xhat * mgx));
          }
        }
      });
    }
    // dw, db per channel, summed over samples in order. A task takes a block of channels and
    // walks the samples, so that a channel of few elements per sample (LayerNorm's, (N, C)
    // batch norm's) still reads memory in order.
    if (dw != nullptr || db != nullptr) {
      T* dwp = dw != nullptr ? data<T>(*dw) : nullptr;
      T* dbp = db != nullptr ? data<T>(*db) : nullptr;
      constexpr int64_t kChannelBlock = 64;
      const int64_t blocks = (ns.c + kChannelBlock - 1) / kChannelBlock;
      const int threads = threads_for(static_cast<double>(ns.n * ns.c * ns.s) * 3.0, max_threads());
      parallel_for(threads, blocks, [&](int64_t blk) {
        const int64_t c0 = blk * kChannelBlock, c1 = std::min(ns.c, c0 + kChannelBlock);
        Lanes sdy[kChannelBlock], sdyx[kChannelBlock];
        for (int64_t n = 0; n < ns.n; ++n) {
          for (int64_t c = c0; c < c1; ++c) {
            const int64_t key = stat(n, c);
            const double mu = static_cast<double>(mp[key]), rstd = rstd_of(key);
            const T* dyr = dyp + (n * ns.c + c) * ns.s;
            const T* xr = xp + (n * ns.c + c) * ns.s;
            sdy[c - c0].add(ns.s, [&](int64_t i) { return static_cast<double>(dyr[i]); });
            sdyx[c - c0].add(ns.s, [&](int64_t i) {
              return static_cast<double>(dyr[i]) * ((static_cast<double>(xr[i]) - mu) * rstd);
            });
          }
        }
        for (int64_t c = c0; c < c1; ++c) {
          if (dwp != nullptr) dwp[c] = static_cast<T>(sdyx[c - c0].total());
          if (dbp != nullptr) dbp[c] = static_cast<T>(sdy[c - c0].total());
        }
      });
    }
  });
}

void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum, double unbias,
                        Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked) {
  dispatch_floating(mean.dtype(), [&]<class T>() {
    const T *mp = data<T>(mean), *vp = data<T>(var);
    T *rm = data<T>(running_mean), *rv = data<T>(running_var);
    const T keep = static_cast<T>(1.0 - momentum), take = static_cast<T>(momentum);
    const T take_var = static_cast<T>(unbias * momentum);
    for (int64_t i = 0; i < mean.numel(); ++i) {
      rm[i] = rm[i] * keep + mp[i] * take;
      rv[i] = rv[i] * keep + vp[i] * take_var;
    }
  });
  if (num_batches_tracked != nullptr) ++*data<int64_t>(*num_batches_tracked);
}

}  // namespace tgrad::cpu
