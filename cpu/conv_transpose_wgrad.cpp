// ConvTranspose weight and bias gradients on the CPU (conv_transpose.cpp has the other passes;
// conv_transpose_direct.cpp the direct wgrad that the shapes it suits take instead of this):
//   wgrad: dw_g[ci, r] = sum over the (n, p) columns of x_g[ci, (n, p)] cols[r, (n, p)], with
//          cols = im2col(dy) as in dgrad;  db = sum of dy.
// Tasks own blocks of dw (a group, a block of output channels) and run their reduction in one
// fixed order; only when that gives too few tasks is the reduction also cut into slices, summed
// in slice order. Both cuts depend on the shape only, so results are bit-identical for any
// thread count.
#include <Eigen/Core>
#include <algorithm>

#include "cpu/conv_transpose_cols.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS {
namespace {

using namespace conv;  // NOLINT(google-build-using-namespace): the column machinery

constexpr int64_t kMaxWgradSlices = 32;  // the reduction is cut into at most this many parts
constexpr int64_t kMaxWgradPartialBytes = int64_t{64} << 20;

// The reduction over column blocks r (item block-major, conv_transpose_cols.h) is cut into
// `slices` contiguous ranges; tasks (slice, g, channel block) sum their range in order into
// their block of their own partial dw, and the partials are added in slice order. With one slice
// the tasks write dw directly.
template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int64_t w_numel, int threads) {
  if (depthwise(pl)) {
    depthwise_wgrad(pl, x, dy, dw, threads);
    return;
  }
  if (direct_wgrad_suits(pl, sizeof(T))) {
    direct_wgrad(pl, x, dy, dw, threads);
    return;
  }
  const ChannelBlocks chb = channel_blocks(pl, pl.groups);
  const int64_t max_rows = chb.per_block * pl.taps;
  const ColBlocks cb = col_blocks(pl, max_rows, sizeof(T), /*for_tasks=*/true);
  const int64_t reduce = cb.count();
  const int64_t owners = pl.groups * chb.count;
  const int64_t max_slices_by_memory =
      kMaxWgradPartialBytes / std::max<int64_t>(1, w_numel * static_cast<int64_t>(sizeof(T)));
  const int64_t slices = std::max<int64_t>(
      1, std::min({reduce, kMaxWgradSlices, max_slices_by_memory, ceil_div(kMinTasks, owners)}));
  const Workspace<T> partial(slices > 1 ? slices * w_numel : 0);
  parallel_for(
      threads, slices * owners,
      [&] { return Workspace<T>(pl.cig * max_rows + (max_rows + pl.cig) * cb.max_cols()); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t s = t / owners, g = (t / chb.count) % pl.groups;
        const int64_t co0 = (t % chb.count) * chb.per_block;
        const int64_t co1 = std::min(pl.cog, co0 + chb.per_block);
        const int64_t rows = (co1 - co0) * pl.taps;
        // The sum runs in a buffer of its own: dw's rows are pl.rows apart, often a multiple of
        // 4 KiB, and a block of them would all fall in the same few cache sets.
        MutMap<T> acc(ws.data(), pl.cig, rows);
        acc.setZero();
        T* cols = ws.data() + pl.cig * max_rows;
        T* x_buf = cols + max_rows * cb.max_cols();
        const int64_t r_begin = reduce * s / slices, r_end = reduce * (s + 1) / slices;
        for (int64_t r = r_begin; r < r_end; ++r) {
          const ColBlock blk = cb.block(pl, r / cb.chunks_per_item, r % cb.chunks_per_item);
          im2col_block(pl, dy, g, blk, co0, co1, cols, blk.cols());
          const ConstMap<T> c(cols, rows, blk.cols());
          acc.noalias() += x_block(pl, x, g, blk, x_buf) * c.transpose();
        }
        T* out = (slices > 1 ? partial.data() + s * w_numel : dw) + g * pl.cig * pl.rows;
        StridedMap<T>(out + co0 * pl.taps, pl.cig, rows, Eigen::OuterStride<>(pl.rows)) = acc;
      });
  if (slices > 1) sum_parts_in_order(partial.data(), slices, w_numel, dw, threads);
}

}  // namespace

void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                          int threads) {
  const char* fn = "conv_transpose_wgrad";
  const Plan pl = make_plan(g, fn);
  check_numel(x, g.x_numel(), fn, "x", g);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(dw, g.w_numel(), fn, "dw", g);
  dispatch_floating(dw.dtype(), [&]<class T>() {
    if (x.numel() == 0 || dy.numel() == 0) {  // an empty batch, image or output: dw is 0
      std::fill_n(data<T>(dw), g.w_numel(), T(0));
      return;
    }
    wgrad_typed<T>(pl, data<T>(x), data<T>(dy), data<T>(dw), g.w_numel(),
                   threads_for(g.flops(), threads));
  });
}

// db[co] = sum over n, then oh and ow, of dy[n, co, oh, ow], accumulated in double.
void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db, int threads) {
  const char* fn = "conv_transpose_bias_grad";
  const Plan pl = make_plan(g, fn);
  check_numel(dy, g.y_numel(), fn, "dy", g);
  check_numel(db, g.out_channels, fn, "db", g);
  dispatch_floating(db.dtype(), [&]<class T>() {
    const T* dyp = data<T>(dy);
    T* dbp = data<T>(db);
    parallel_for(threads_for(static_cast<double>(g.y_numel()), threads), pl.out_channels,
                 [&](int64_t co) {
                   double sum = 0.0;
                   for (int64_t n = 0; n < pl.batch; ++n) {
                     const T* dy_c = dyp + (n * pl.out_channels + co) * pl.out_hw;
                     for (int64_t i = 0; i < pl.out_hw; ++i)
                       sum += static_cast<double>(dy_c[i]);
                   }
                   dbp[co] = static_cast<T>(sum);
                 });
  });
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS
