// The three conv passes by output stride phases with the products on the input channels' side,
// for layers with few input channels per group against many output channels x taps
// (phase_gemm_suits). The GEMM paths of conv_transpose.cpp and conv_transpose_wgrad.cpp move a
// column buffer of (co, kh, kw) rows, rows = cog x taps, per input position: forward's product
// writes it (a reduction over cig only) and col2im reads it; dgrad's and wgrad's im2col copies dy
// taps times into it and a product cig rows thin reads it. With 8 input channels against 64
// output channels x 64 taps that buffer is 16 products deep per element, and moving it bound the
// passes. Here the buffer holds (ci, tap) rows instead, cig x taps, cog / cig times fewer.
//
// Along one axis, output o = i*s + k*d - p. Writing k*d - p = q*s + r (0 <= r < s), o = (i + q)*s
// + r: tap k adds input i into phase r of the output (o = r, r + s, ...) at plane position m = i +
// q. Each phase pair (rh, rw) is a stride-1 problem between x and the phase's plane of y (or dy),
// over the taps of that phase T_r, with one shift per tap:
//   forward: Y_r[co, (n, m)] = sum over (ci, j in T_r) of w[ci, co, j] X_r[(ci, j), (n, m)],
//            X_r[(ci, j), (n, m)] = x[n, ci, m - q_j] (0 outside x), then y = bias + Y_r there;
//   dgrad:   Z_r[(ci, j), (n, m)] = sum over co of w[ci, co, j] dy_r[co, (n, m)], then
//            dx[n, ci, i] = sum over r, then j in T_r, of Z_r[(ci, j), (n, i + q_j)];
//   wgrad:   dw[ci, co, j] = sum over (n, m) of X_r[(ci, j), (n, m)] dy_r[co, (n, m)].
// X_r and Z_r have cig x |T_r| rows; the products (cpu/gemm.h) are cog, cig x |T_r| and the
// columns of a piece of planes: shapes its register tile fills, where the GEMM paths' were cig
// rows thin or cig deep. A plane position past every tap's reach costs a few columns (the planes'
// edges); phases no tap reaches hold the bias.
//
// Determinism (docs/design.md): each element of Y_r, Z_r sums its reduction in the GEMM's order,
// which depends on the sizes only, so the cut of the columns into tasks changes no bit; dx adds
// the phases and taps in a fixed order; wgrad's reduction over the columns is cut by the shape
// only, into slices added in order.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/conv_transpose_cols.h"
#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

// Strides up to this (one list of taps per phase); the layers past it keep the other paths.
constexpr int64_t kMaxPhaseStride = 16;
// A task's operands (the phase piece of X or dy, and the product's output) stay within about this
// many bytes: in L2 between the copy and the product.
constexpr int64_t kPieceBytes = int64_t{1} << 20;
// wgrad's reduction is cut into at most this many slices, of at least kMinSliceColumns columns.
constexpr int64_t kMaxSlices = 16;
constexpr int64_t kMinSliceColumns = 2048;
constexpr int64_t kMaxPartialBytes = int64_t{64} << 20;

// A tap of one axis: its index and its plane shift q.
struct AxisTap {
  int64_t k, q;
};

// One axis: per phase r in [0, s), its taps (k ascending) and its plane length (the outputs r, r
// + s, ... below out).
struct Axis {
  std::vector<std::vector<AxisTap>> taps;
  std::vector<int64_t> len;
};

Axis axis_of(int64_t out, int64_t kernel, int64_t stride, int64_t dil, int64_t pad) {
  Axis a;
  a.taps.resize(stride);
  a.len.resize(stride);
  for (int64_t k = 0; k < kernel; ++k) {
    const int64_t off = k * dil - pad;
    const int64_t q = floor_div(off, stride);
    a.taps[off - q * stride].push_back({k, q});
  }
  for (int64_t r = 0; r < stride; ++r)
    a.len[r] = r < out ? ceil_div(out - r, stride) : 0;
  return a;
}

// A 2-D tap of a phase pair: its index kh * kernel_w + kw and its shifts.
struct Tap {
  int64_t tap, qh, qw;
};

// The phase pairs (rh, rw), r = rh * sw + rw: their taps in (kh, kw) order and plane sizes, and
// where each one's packed weight starts.
struct Phases {
  int64_t count = 0;
  std::vector<int64_t> rh, rw, mh, mw;  // per phase: residues, plane height and width
  std::vector<std::vector<Tap>> taps;
  std::vector<int64_t> w_at;  // per phase: offset of its (cig x |T_r|) x cog block in a group's
  int64_t max_taps = 0;       // the most taps of one phase
  int64_t rows(int64_t r, int64_t cig) const { return cig * static_cast<int64_t>(taps[r].size()); }
};

Phases phases_of(const Plan& pl) {
  const Axis ah = axis_of(pl.out_h, pl.kernel_h, pl.stride_h, pl.dil_h, pl.pad_h);
  const Axis aw = axis_of(pl.out_w, pl.kernel_w, pl.stride_w, pl.dil_w, pl.pad_w);
  Phases f;
  f.count = pl.stride_h * pl.stride_w;
  int64_t at = 0;
  for (int64_t rh = 0; rh < pl.stride_h; ++rh) {
    for (int64_t rw = 0; rw < pl.stride_w; ++rw) {
      std::vector<Tap> t;
      for (const AxisTap& th : ah.taps[rh])
        for (const AxisTap& tw : aw.taps[rw])
          t.push_back({th.k * pl.kernel_w + tw.k, th.q, tw.q});
      f.rh.push_back(rh);
      f.rw.push_back(rw);
      f.mh.push_back(ah.len[rh]);
      f.mw.push_back(aw.len[rw]);
      f.max_taps = std::max<int64_t>(f.max_taps, static_cast<int64_t>(t.size()));
      f.w_at.push_back(at);
      at += pl.cig * static_cast<int64_t>(t.size()) * pl.cog;
      f.taps.push_back(std::move(t));
    }
  }
  return f;
}

// The weight of group g rearranged per phase: rows (ci, j) of phase r, j its taps in order,
// columns co, at out + f.w_at[r]: w[g*cig + ci, co, tap_j].
template <class T>
void phase_weight(const Plan& pl, const Phases& f, const T* w, int64_t g, T* out) {
  for (int64_t r = 0; r < f.count; ++r) {
    const int64_t nt = static_cast<int64_t>(f.taps[r].size());
    for (int64_t ci = 0; ci < pl.cig; ++ci) {
      const T* w_ci = w + (g * pl.cig + ci) * pl.rows;
      for (int64_t j = 0; j < nt; ++j) {
        T* row = out + f.w_at[r] + (ci * nt + j) * pl.cog;
        const int64_t tap = f.taps[r][j].tap;
        for (int64_t co = 0; co < pl.cog; ++co)
          row[co] = w_ci[co * pl.taps + tap];
      }
    }
  }
}

// X_r's rows for group g over the plane rows u in [u0, u1) (u = n * mh + m_h), each mw columns:
// out[(ci * |T_r| + j) * cols + (u - u0) * mw + m_w] = x[n, g*cig + ci, m_h - qh_j, m_w - qw_j].
template <class T>
void phase_x(const Plan& pl, const Phases& f, int64_t r, const T* x, int64_t g, int64_t u0,
             int64_t u1, T* out) {
  const int64_t mh = f.mh[r], mw = f.mw[r], cols = (u1 - u0) * mw;
  const int64_t nt = static_cast<int64_t>(f.taps[r].size());
  for (int64_t ci = 0; ci < pl.cig; ++ci) {
    for (int64_t j = 0; j < nt; ++j) {
      const Tap& t = f.taps[r][j];
      T* row = out + (ci * nt + j) * cols;
      // Columns m_w whose input column m_w - qw is inside x.
      const int64_t c0 = std::clamp<int64_t>(t.qw, 0, mw);
      const int64_t c1 = std::clamp<int64_t>(t.qw + pl.in_w, c0, mw);
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t n = u / mh, ih = u % mh - t.qh;
        T* dst = row + (u - u0) * mw;
        if (ih < 0 || ih >= pl.in_h || c0 == c1) {
          std::fill_n(dst, mw, T(0));
          continue;
        }
        const T* src = x + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih) * pl.in_w;
        std::fill_n(dst, c0, T(0));
        std::memcpy(dst + c0, src + (c0 - t.qw), (c1 - c0) * sizeof(T));
        std::fill_n(dst + c1, mw - c1, T(0));
      }
    }
  }
}

// dy's phase r plane of group g over the plane rows u in [u0, u1) of items, as phase_x's columns:
// out[co * cols + (u - u0) * mw + m_w] = dy[n, g*cog + co, m_h*sh + rh, m_w*sw + rw], where
// `item_rows` plane rows make an item and u = n * item_rows + (m_h - row0).
template <class T>
void phase_dy(const Plan& pl, const Phases& f, int64_t r, const T* dy, int64_t g, int64_t u0,
              int64_t u1, int64_t item_rows, int64_t row0, T* out) {
  const int64_t mw = f.mw[r], cols = (u1 - u0) * mw;
  for (int64_t co = 0; co < pl.cog; ++co) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t n = u / item_rows, oh = (u % item_rows + row0) * pl.stride_h + f.rh[r];
      const T* src =
          dy + ((n * pl.out_channels + g * pl.cog + co) * pl.out_h + oh) * pl.out_w + f.rw[r];
      T* dst = out + co * cols + (u - u0) * mw;
      if (pl.stride_w == 1) {
        std::memcpy(dst, src, mw * sizeof(T));
      } else {
        for (int64_t c = 0; c < mw; ++c)
          dst[c] = src[c * pl.stride_w];
      }
    }
  }
}

// Plane rows per piece: about kPieceBytes of `per_column` bytes a column, whole rows of mw
// columns, at least one.
int64_t piece_rows(int64_t mw, int64_t per_column) {
  return std::max<int64_t>(1, kPieceBytes / std::max<int64_t>(1, per_column * mw));
}

template <class T>
void forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  const Phases f = phases_of(pl);
  const int64_t elem = sizeof(T);
  // The weight of every group and phase as the products' A (cog x cig|T_r|), packed once.
  std::vector<int64_t> a_at(pl.groups * f.count + 1, 0);
  for (int64_t i = 0; i < pl.groups * f.count; ++i)
    a_at[i + 1] = a_at[i] + gemm::packed_whole_a_elems<T>(pl.cog, f.rows(i % f.count, pl.cig));
  const Workspace<T> packed(a_at.back());
  parallel_for(threads, pl.groups, [&](int64_t g) {
    const Workspace<T> wg(pl.cig * pl.taps * pl.cog);
    phase_weight(pl, f, w, g, wg.data());
    for (int64_t r = 0; r < f.count; ++r) {
      const gemm::View<T> a{wg.data() + f.w_at[r], 1, pl.cog};  // (co, (ci, j)) of the rows
      gemm::pack_whole_a(a, pl.cog, f.rows(r, pl.cig), packed.data() + a_at[g * f.count + r]);
    }
  });
  // Tasks: (group, phase, piece of plane rows). Pieces hold about kPieceBytes of X_r and Y_r,
  // then are cut smaller until there are two tasks a thread (the cut changes no bit).
  const int64_t k_max = pl.cig * f.max_taps;
  std::vector<int64_t> rows_per(f.count);
  const auto count = [&] {
    int64_t c = 0;
    for (int64_t r = 0; r < f.count; ++r)
      c += f.mw[r] == 0 ? 0 : ceil_div(pl.batch * f.mh[r], rows_per[r]);
    return c * pl.groups;
  };
  for (int64_t r = 0; r < f.count; ++r)
    rows_per[r] = piece_rows(f.mw[r], (k_max + pl.cog) * elem);
  while (count() < 2 * int64_t{threads} &&
         std::any_of(rows_per.begin(), rows_per.end(), [](int64_t v) { return v > 1; })) {
    for (int64_t& v : rows_per)
      v = ceil_div(v, int64_t{2});
  }
  std::vector<int64_t> task_at(f.count + 1, 0);  // per group
  for (int64_t r = 0; r < f.count; ++r)
    task_at[r + 1] = task_at[r] + (f.mw[r] == 0 ? 0 : ceil_div(pl.batch * f.mh[r], rows_per[r]));
  const int64_t max_cols = *std::max_element(rows_per.begin(), rows_per.end()) *
                           std::max<int64_t>(1, *std::max_element(f.mw.begin(), f.mw.end()));
  const int64_t x_elems = k_max * max_cols, y_elems = pl.cog * max_cols;
  const int64_t scratch = gemm::scratch_elems<T>(pl.cog, max_cols, std::max<int64_t>(1, k_max));
  parallel_for(
      threads, pl.groups * task_at.back(),
      [&] { return Workspace<T>(x_elems + y_elems + scratch); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t g = t / task_at.back(), tr = t % task_at.back();
        const int64_t r =
            std::upper_bound(task_at.begin(), task_at.end(), tr) - task_at.begin() - 1;
        const int64_t mh = f.mh[r], mw = f.mw[r];
        const int64_t u0 = (tr - task_at[r]) * rows_per[r];
        const int64_t u1 = std::min(pl.batch * mh, u0 + rows_per[r]);
        const int64_t cols = (u1 - u0) * mw, k = f.rows(r, pl.cig);
        T* xs = ws.data();
        T* ys = xs + x_elems;
        phase_x(pl, f, r, x, g, u0, u1, xs);
        gemm::gemm_packed_a(pl.cog, cols, k, packed.data() + a_at[g * f.count + r], pl.cog, 0,
                            gemm::View<T>{xs, cols, 1}, ys, cols, false, ys + y_elems);
        for (int64_t co = 0; co < pl.cog; ++co) {
          const int64_t c = g * pl.cog + co;
          const T bias = b != nullptr ? b[c] : T(0);
          const T* src = ys + co * cols;
          for (int64_t u = u0; u < u1; ++u) {
            const int64_t n = u / mh, oh = u % mh * pl.stride_h + f.rh[r];
            T* dst = y + ((n * pl.out_channels + c) * pl.out_h + oh) * pl.out_w + f.rw[r];
            const T* s = src + (u - u0) * mw;
            for (int64_t m = 0; m < mw; ++m)
              dst[m * pl.stride_w] = s[m] + bias;
          }
        }
      });
}

template <class T>
void dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  const Phases f = phases_of(pl);
  const int64_t elem = sizeof(T);
  // The weight of every group and phase as the products' A (cig|T_r| x cog), packed once.
  std::vector<int64_t> a_at(pl.groups * f.count + 1, 0);
  for (int64_t i = 0; i < pl.groups * f.count; ++i) {
    const int64_t m = f.rows(i % f.count, pl.cig);
    a_at[i + 1] = a_at[i] + gemm::packed_whole_a_elems<T>(m, pl.cog);
  }
  const Workspace<T> packed(a_at.back());
  parallel_for(threads, pl.groups, [&](int64_t g) {
    const Workspace<T> wg(pl.cig * pl.taps * pl.cog);
    phase_weight(pl, f, w, g, wg.data());
    for (int64_t r = 0; r < f.count; ++r) {
      const gemm::View<T> a{wg.data() + f.w_at[r], pl.cog, 1};
      gemm::pack_whole_a(a, f.rows(r, pl.cig), pl.cog, packed.data() + a_at[g * f.count + r]);
    }
  });
  // The plane rows a band of input rows [ih0, ih1) reads in phase r: [ih0 + min q, ih1 + max q)
  // within the plane.
  std::vector<int64_t> qlo(f.count, 0), qhi(f.count, 0);
  for (int64_t r = 0; r < f.count; ++r) {
    for (size_t j = 0; j < f.taps[r].size(); ++j) {
      qlo[r] = j == 0 ? f.taps[r][j].qh : std::min(qlo[r], f.taps[r][j].qh);
      qhi[r] = j == 0 ? f.taps[r][j].qh : std::max(qhi[r], f.taps[r][j].qh);
    }
  }
  // Tasks: (group, run of items, band of input rows). Whole items while one item's largest phase
  // (dy's plane and Z_r) fits kPieceBytes, several a task; else one item in bands. Then cut
  // smaller until there are two tasks a thread; the cut changes no bit.
  const int64_t k_max = pl.cig * f.max_taps;
  int64_t item_cols = 0;
  for (int64_t r = 0; r < f.count; ++r)
    item_cols = std::max(item_cols, f.mh[r] * f.mw[r]);
  const int64_t per_col = (k_max + pl.cog) * elem;
  int64_t items = 1, band = pl.in_h;
  if (item_cols * per_col <= kPieceBytes) {
    items =
        std::clamp<int64_t>(kPieceBytes / std::max<int64_t>(1, item_cols * per_col), 1, pl.batch);
  } else {
    const int64_t mw_max = *std::max_element(f.mw.begin(), f.mw.end());
    band = std::clamp<int64_t>(
        kPieceBytes / (per_col * mw_max) - (pl.kernel_h - 1) * pl.dil_h / pl.stride_h, 1, pl.in_h);
  }
  const auto count = [&] {
    return pl.groups * ceil_div(pl.batch, items) * ceil_div(pl.in_h, band);
  };
  while (count() < 2 * int64_t{threads} && (items > 1 || band > 1)) {
    if (items > 1) {
      items = ceil_div(items, int64_t{2});
    } else {
      band = ceil_div(band, int64_t{2});
    }
  }
  const int64_t runs = ceil_div(pl.batch, items), bands = ceil_div(pl.in_h, band);
  // A phase's columns for a task: its items x the plane rows its band reads x mw.
  int64_t max_cols = 0;
  for (int64_t r = 0; r < f.count; ++r) {
    const int64_t rows = std::min(f.mh[r], band + qhi[r] - qlo[r]);
    max_cols = std::max(max_cols, items * rows * f.mw[r]);
  }
  const int64_t dy_elems = pl.cog * max_cols, z_elems = k_max * max_cols;
  const int64_t scratch = gemm::scratch_elems<T>(std::max<int64_t>(1, k_max), max_cols, pl.cog);
  parallel_for(
      threads, pl.groups * runs * bands, [&] { return Workspace<T>(dy_elems + z_elems + scratch); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t bi = t % bands, run = t / bands % runs, g = t / (bands * runs);
        const int64_t n0 = run * items, n1 = std::min(pl.batch, n0 + items);
        const int64_t ih0 = bi * band, ih1 = std::min(pl.in_h, ih0 + band);
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t ci = 0; ci < pl.cig; ++ci)
            std::fill_n(dx + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih0) * pl.in_w,
                        (ih1 - ih0) * pl.in_w, T(0));
        T* ds = ws.data();
        T* zs = ds + dy_elems;
        for (int64_t r = 0; r < f.count; ++r) {
          const int64_t nt = static_cast<int64_t>(f.taps[r].size()), mw = f.mw[r];
          if (nt == 0 || mw == 0) continue;
          const int64_t a0 = std::clamp<int64_t>(ih0 + qlo[r], 0, f.mh[r]);
          const int64_t a1 = std::clamp<int64_t>(ih1 + qhi[r], a0, f.mh[r]);
          if (a0 == a1) continue;
          const int64_t rows = a1 - a0, cols = (n1 - n0) * rows * mw;
          phase_dy(pl, f, r, dy + n0 * pl.out_channels * pl.out_h * pl.out_w, g, 0,
                   (n1 - n0) * rows, rows, a0, ds);
          gemm::gemm_packed_a(nt * pl.cig, cols, pl.cog, packed.data() + a_at[g * f.count + r],
                              nt * pl.cig, 0, gemm::View<T>{ds, cols, 1}, zs, cols, false,
                              zs + z_elems);
          for (int64_t ci = 0; ci < pl.cig; ++ci) {
            for (int64_t j = 0; j < nt; ++j) {
              const Tap& tp = f.taps[r][j];
              const int64_t i0 = std::max<int64_t>(0, -tp.qw);
              const int64_t i1 = std::min<int64_t>(pl.in_w, mw - tp.qw);
              if (i0 >= i1) continue;
              const T* zrow = zs + (ci * nt + j) * cols;
              for (int64_t n = n0; n < n1; ++n) {
                for (int64_t ih = ih0; ih < ih1; ++ih) {
                  const int64_t m = ih + tp.qh;
                  if (m < a0 || m >= a1) continue;
                  T* d = dx + ((n * pl.in_channels + g * pl.cig + ci) * pl.in_h + ih) * pl.in_w;
                  const T* z = zrow + ((n - n0) * rows + m - a0) * mw + tp.qw;
                  for (int64_t iw = i0; iw < i1; ++iw)
                    d[iw] += z[iw];
                }
              }
            }
          }
        }
      });
}

// wgrad's cut of each phase's reduction: columns of the whole batch's plane rows, in pieces of
// `rows_per` plane rows (one product each, added in order) and `slices` slices (partial sums added
// in slice order). Both follow the shape only.
struct WgradCut {
  std::vector<int64_t> rows_per;  // per phase
  int64_t slices = 1;
};

WgradCut wgrad_cut(const Plan& pl, const Phases& f, int64_t elem) {
  WgradCut c;
  const int64_t per_col = (pl.cig * f.max_taps + pl.cog) * elem;
  int64_t columns = 0, reached = 0;
  for (int64_t r = 0; r < f.count; ++r) {
    c.rows_per.push_back(piece_rows(f.mw[r], per_col));
    if (!f.taps[r].empty()) {
      columns = std::max(columns, pl.batch * f.mh[r] * f.mw[r]);
      ++reached;
    }
  }
  // Enough tasks for 16 threads where the columns allow, within the partials' budget.
  const int64_t wanted = ceil_div(32, std::max<int64_t>(1, pl.groups * reached));
  const int64_t w_bytes = pl.in_channels * pl.rows * elem;
  c.slices = std::clamp<int64_t>(std::min(wanted, columns / kMinSliceColumns), 1, kMaxSlices);
  c.slices =
      std::max<int64_t>(1, std::min(c.slices, kMaxPartialBytes / std::max<int64_t>(1, w_bytes)));
  return c;
}

template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  const Phases f = phases_of(pl);
  const int64_t elem = sizeof(T);
  const WgradCut cut = wgrad_cut(pl, f, elem);
  const int64_t slices = cut.slices;
  // Partial sums per slice, group and phase: (cig|T_r| x cog) at part + s * group_elems * groups +
  // g * group_elems + w_at[r]; one slice writes them as the final sums' source too.
  const int64_t group_elems = pl.cig * pl.taps * pl.cog;
  const Workspace<T> parts(slices * pl.groups * group_elems);
  const int64_t k_max = pl.cig * f.max_taps;
  int64_t max_cols = 0;
  for (int64_t r = 0; r < f.count; ++r)
    max_cols = std::max(max_cols, cut.rows_per[r] * f.mw[r]);
  const int64_t x_elems = k_max * max_cols, dy_elems = pl.cog * max_cols;
  const int64_t scratch =
      gemm::scratch_elems<T>(std::max<int64_t>(1, k_max), pl.cog, std::max<int64_t>(1, max_cols));
  parallel_for(
      threads, slices * pl.groups * f.count,
      [&] { return Workspace<T>(x_elems + dy_elems + scratch); },
      [&](Workspace<T>& ws, int64_t t) {
        const int64_t r = t % f.count, g = t / f.count % pl.groups, s = t / (f.count * pl.groups);
        const int64_t nt = static_cast<int64_t>(f.taps[r].size()), mh = f.mh[r], mw = f.mw[r];
        if (nt == 0) return;
        T* acc = parts.data() + (s * pl.groups + g) * group_elems + f.w_at[r];
        const int64_t k = nt * pl.cig, total = pl.batch * mh;
        const int64_t u_begin = total * s / slices, u_end = total * (s + 1) / slices;
        if (u_begin == u_end || mw == 0) {
          std::fill_n(acc, k * pl.cog, T(0));
          return;
        }
        T* xs = ws.data();
        T* ds = xs + x_elems;
        for (int64_t u0 = u_begin; u0 < u_end; u0 += cut.rows_per[r]) {
          const int64_t u1 = std::min(u_end, u0 + cut.rows_per[r]), cols = (u1 - u0) * mw;
          phase_x(pl, f, r, x, g, u0, u1, xs);
          phase_dy(pl, f, r, dy, g, u0, u1, mh, 0, ds);
          gemm::gemm(k, pl.cog, cols, gemm::View<T>{xs, cols, 1}, gemm::View<T>{ds, 1, cols}, acc,
                     pl.cog, u0 != u_begin, ds + dy_elems);
        }
      });
  // dw[g*cig + ci, co, tap_j] = the slices' partials in slice order.
  std::vector<int64_t> phase_of(pl.taps), index_of(pl.taps);
  for (int64_t r = 0; r < f.count; ++r) {
    for (size_t j = 0; j < f.taps[r].size(); ++j) {
      phase_of[f.taps[r][j].tap] = r;
      index_of[f.taps[r][j].tap] = static_cast<int64_t>(j);
    }
  }
  parallel_for(threads, pl.in_channels, [&](int64_t c) {
    const int64_t g = c / pl.cig, ci = c % pl.cig;
    T* out = dw + c * pl.rows;
    for (int64_t tap = 0; tap < pl.taps; ++tap) {
      const int64_t r = phase_of[tap], nt = static_cast<int64_t>(f.taps[r].size());
      const T* p = parts.data() + g * group_elems + f.w_at[r] + (ci * nt + index_of[tap]) * pl.cog;
      for (int64_t co = 0; co < pl.cog; ++co) {
        T v = p[co];
        for (int64_t s = 1; s < slices; ++s)
          v += p[s * pl.groups * group_elems + co];
        out[co * pl.taps + tap] = v;
      }
    }
  });
}

}  // namespace

namespace {

// What every pass needs: strides within kMaxPhaseStride, sizes in bounds, and a column buffer of
// (ci, tap) rows at least 4x thinner than the (co, tap) one (X_r and Z_r hold cig x taps rows over
// about x's positions, dy's phase planes cog x stride rows): at 64 -> 192 k8x7 s2, 2.5x thinner,
// the planes' edges cost more than the buffer saved (0.7x-0.8x).
bool phase_gemm_common(const Plan& pl, int64_t elem_bytes) {
  if (pl.stride_h > kMaxPhaseStride || pl.stride_w > kMaxPhaseStride) return false;
  if (pl.batch < 1 || pl.in_h < 1 || pl.in_w < 1 || pl.out_h < 1 || pl.out_w < 1) return false;
  // (In 128 bits: the geometry accepts sizes whose products overflow.)
  const int128 per_col = (int128{pl.cig} * pl.taps + pl.cog) * elem_bytes;
  if (per_col * pl.out_w > kPieceBytes * int128{16}) return false;
  if (int128{pl.in_channels} * pl.rows * elem_bytes * 2 > kMaxPartialBytes) return false;
  const int128 phase_rows = int128{pl.cig} * pl.taps + int128{pl.cog} * pl.stride_h * pl.stride_w;
  return 4 * phase_rows <= int128{pl.cog} * pl.taps;
}

}  // namespace

// Each pass's product must be one the GEMM's tile fills, measured on random layers at AVX-512
// (docs/performance.md): forward's reduction cig x |T_r|, at least kMinDepth on average over the
// phases, and cog rows; and its planes' positions past x's reach (out_hw against stride x in_hw)
// at most twice what the thinner buffer saves (48 -> 256 k8 on 4 x 7 at 3.25x the positions:
// 0.55x). dgrad's reduction is cog, and with fewer than 8 input channels the phase and few-rows
// loops won (0.1x-0.8x here). wgrad's rows are cig x |T_r| and its columns cog.
constexpr int64_t kMinDepth = 16;
bool phase_gemm_forward_suits(const Plan& pl, int64_t elem_bytes) {
  // Rows of 4 or more: on 3 x 3 images the copies of runs of 3 cost more than the thinner buffer
  // saved (grouped 8 -> 64 k8 s2: 0.8x-0.9x).
  if (!phase_gemm_common(pl, elem_bytes) || pl.cog < 16 || pl.in_w < 4) return false;
  const int128 phases = int128{pl.stride_h} * pl.stride_w;
  if (int128{pl.cig} * pl.taps < kMinDepth * phases) return false;
  // positions / (phases x in_hw) <= (cog x taps) / (2 x phase rows), cross-multiplied.
  const int128 phase_rows = int128{pl.cig} * pl.taps + int128{pl.cog} * phases;
  return int128{pl.out_hw} * 2 * phase_rows <= phases * pl.in_hw * pl.cog * pl.taps;
}
bool phase_gemm_dgrad_suits(const Plan& pl, int64_t elem_bytes) {
  return phase_gemm_common(pl, elem_bytes) && pl.cog >= 48 && pl.cig >= 8;
}
bool phase_gemm_wgrad_suits(const Plan& pl, int64_t elem_bytes) {
  return phase_gemm_common(pl, elem_bytes) && pl.cog >= 32 &&
         int128{pl.cig} * pl.taps >= int128{12} * pl.stride_h * pl.stride_w;
}
bool phase_gemm_dgrad_first(const Plan& pl, int64_t elem_bytes) {
  // The planes' positions past x's reach at most a quarter more than x's: 8 -> 64 k8x7 on 26 x 26
  // at 1.37x lost to the phase loops (0.7x).
  return gemm::kVecRegisters >= 32 && 2 * pl.cig * elem_bytes >= gemm::kVecBytes &&
         pl.cig * elem_bytes < gemm::kVecBytes &&
         4 * int128{pl.out_hw} <= 5 * int128{pl.stride_h} * pl.stride_w * pl.in_hw;
}

void phase_gemm_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                        int threads) {
  forward_typed(pl, x, w, b, y, threads);
}
void phase_gemm_forward(const Plan& pl, const double* x, const double* w, const double* b,
                        double* y, int threads) {
  forward_typed(pl, x, w, b, y, threads);
}
void phase_gemm_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  dgrad_typed(pl, dy, w, dx, threads);
}
void phase_gemm_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads) {
  dgrad_typed(pl, dy, w, dx, threads);
}
void phase_gemm_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads) {
  wgrad_typed(pl, x, dy, dw, threads);
}
void phase_gemm_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads) {
  wgrad_typed(pl, x, dy, dw, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
