// Depthwise ConvTranspose on the CPU (one input and one output channel per group): direct loops
// over each (n, c) plane, since a GEMM of one row per group would spend its time packing. The
// forward loops serve few input channels per group too (few_input_forward), any output channels.
//   forward: y[oh, ow] = b + sum over taps (kh, kw) of w[kh, kw] x[ih, iw]
//   dgrad:   dx[ih, iw] = sum over taps of w[kh, kw] dy[oh, ow]
//   wgrad:   dw[kh, kw] = sum over n, ih, iw of x[ih, iw] dy[oh, ow]
// with (oh, ow) = (ih*sh - ph + kh*dh, iw*sw - pw + kw*dw) inside y. Each sum runs in one fixed
// order (taps in order; wgrad's as wgrad_typed says), and tasks are runs of (n, c) planes, bands
// of a plane's rows (dgrad) or, for wgrad, channels: results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "cpu/conv_transpose_cols.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv {
namespace {

// Output planes are handled in a "phase" layout along W so that every inner loop is contiguous:
// with stride sw, output column ow = j*sw + r is element j of phase row r, and the outputs of
// one tap kw on one input row, ow = iw*sw + off_w, are the contiguous run iw + q of phase row
// r (off_w = q*sw + r, 0 <= r < sw). Phase plane layout: [r][oh][j], `len` columns per row.
struct Phases {
  int64_t sw, len, out_h, out_w;
  int64_t size() const { return sw * out_h * len; }
  int64_t row(int64_t r, int64_t oh) const { return (r * out_h + oh) * len; }
};

Phases phases_of(const Plan& pl) {
  return {pl.stride_w, ceil_div(pl.out_w, pl.stride_w), pl.out_h, pl.out_w};
}

// even[j] = row[2j] and odd[j] = row[2j + 1] for the n elements of a row: two vectors at a time
// through a shuffle, the rest one by one.
template <class T>
void deinterleave2(const T* row, int64_t n, T* even, T* odd) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  int64_t j = 0;
  for (; 2 * (j + L) <= n; j += L) {
    Vec a, b, e, o;
    std::memcpy(&a, row + 2 * j, sizeof(Vec));
    std::memcpy(&b, row + 2 * j + L, sizeof(Vec));
    deinterleave_vectors<L>(a, b, e, o);
    std::memcpy(even + j, &e, sizeof(Vec));
    std::memcpy(odd + j, &o, sizeof(Vec));
  }
  for (; 2 * j < n; ++j) {
    even[j] = row[2 * j];
    if (2 * j + 1 < n) odd[j] = row[2 * j + 1];
  }
}

// The rows of an output plane (oh) and the W phases (r) that some tap reaches: dgrad and wgrad
// read no other part of dy, and a stride past the kernel leaves most of it unread (a 1x1 kernel
// at strides 4 x 3 reads a twelfth of dy, where converting every plane whole was most of the
// pass).
struct Reached {
  std::vector<char> rows, phases;
};

Reached reached_of(const Plan& pl, const Phases& f) {
  Reached re{std::vector<char>(static_cast<size_t>(f.out_h), 0),
             std::vector<char>(static_cast<size_t>(f.sw), 0)};
  for (int64_t kh = 0; kh < pl.kernel_h; ++kh)
    for (int64_t ih = pl.h.lo[kh]; ih < pl.h.hi[kh]; ++ih)
      re.rows[static_cast<size_t>(ih * pl.stride_h - pl.pad_h + kh * pl.dil_h)] = 1;
  for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
    if (pl.w.lo[kw] >= pl.w.hi[kw]) continue;
    const int64_t off_w = kw * pl.dil_w - pl.pad_w;
    re.phases[static_cast<size_t>(off_w - floor_div(off_w, f.sw) * f.sw)] = 1;
  }
  return re;
}

// Rows [oh0, oh1) of plane in phase layout, on the rows and phases `re` marks (nothing else is
// written): phase row (r, oh) at row_of(r, oh), however the caller lays its rows out.
template <class T, class RowOf>
void to_phases(const Phases& f, const Reached& re, const T* plane, int64_t oh0, int64_t oh1,
               RowOf&& row_of) {
  const auto reached = [&](int64_t oh) { return re.rows[static_cast<size_t>(oh)] != 0; };
  if (f.sw == 2 && re.phases[0] != 0 && re.phases[1] != 0) {  // one pass for both phases
    for (int64_t oh = oh0; oh < oh1; ++oh)
      if (reached(oh)) deinterleave2(plane + oh * f.out_w, f.out_w, row_of(0, oh), row_of(1, oh));
    return;
  }
  for (int64_t r = 0; r < std::min(f.sw, f.out_w); ++r) {
    if (re.phases[static_cast<size_t>(r)] == 0) continue;
    const int64_t n = ceil_div(f.out_w - r, f.sw);
    for (int64_t oh = oh0; oh < oh1; ++oh)
      if (reached(oh)) gather_strided(row_of(r, oh), plane + oh * f.out_w + r, n, f.sw);
  }
}

// row[2j] = even[j] and row[2j + 1] = odd[j] for the n elements of a row: the inverse of
// deinterleave2.
template <class T>
void interleave2(const T* even, const T* odd, int64_t n, T* row) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  int64_t j = 0;
  for (; 2 * (j + L) <= n; j += L) {
    Vec e, o, a, b;
    std::memcpy(&e, even + j, sizeof(Vec));
    std::memcpy(&o, odd + j, sizeof(Vec));
    interleave_vectors<L>(e, o, a, b);
    std::memcpy(row + 2 * j, &a, sizeof(Vec));
    std::memcpy(row + 2 * j + L, &b, sizeof(Vec));
  }
  for (; 2 * j < n; ++j) {
    row[2 * j] = even[j];
    if (2 * j + 1 < n) row[2 * j + 1] = odd[j];
  }
}

// Rows [oh0, oh1) of plane = ph back from phase layout.
template <class T>
void from_phases(const Phases& f, const T* ph, T* plane, int64_t oh0, int64_t oh1) {
  if (f.sw == 2) {
    for (int64_t oh = oh0; oh < oh1; ++oh)
      interleave2(ph + f.row(0, oh), ph + f.row(1, oh), f.out_w, plane + oh * f.out_w);
    return;
  }
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    for (int64_t r = 0; r < std::min(f.sw, f.out_w); ++r) {
      const T* src = ph + f.row(r, oh);
      T* dst = plane + oh * f.out_w + r;
      for (int64_t j = 0; j < ceil_div(f.out_w - r, f.sw); ++j)
        dst[j * f.sw] = src[j];
    }
  }
}

// For every tap (kh, kw) and input row ih whose outputs land in y (in its rows [oh0, oh1)):
// fn(k, ih, iw_begin, iw_end, out), out being the index, in phase layout, of the output of
// (ih, iw_begin) for tap k; the outputs of iw_begin .. iw_end - 1 follow it contiguously.
template <class Fn>
void for_each_tap_row(const Plan& pl, const Phases& f, Fn&& fn, int64_t oh0 = 0,
                      int64_t oh1 = std::numeric_limits<int64_t>::max()) {
  for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
    // Rows ih with oh = ih*sh - ph + kh*dh in [oh0, oh1).
    const int64_t base = kh * pl.dil_h - pl.pad_h;
    const int64_t ih_lo = std::max(pl.h.lo[kh], ceil_div(oh0 - base, pl.stride_h));
    const int64_t ih_hi = oh1 == std::numeric_limits<int64_t>::max()
                              ? pl.h.hi[kh]
                              : std::min(pl.h.hi[kh], ceil_div(oh1 - base, pl.stride_h));
    for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
      const int64_t iw0 = pl.w.lo[kw], iw1 = pl.w.hi[kw];
      if (iw0 >= iw1) continue;
      const int64_t off_w = kw * pl.dil_w - pl.pad_w;
      const int64_t q = floor_div(off_w, f.sw);
      const int64_t r = off_w - q * f.sw;
      for (int64_t ih = ih_lo; ih < ih_hi; ++ih) {
        const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
        fn(kh * pl.kernel_w + kw, ih, iw0, iw1, f.row(r, oh) + iw0 + q);
      }
    }
  }
}

// out[i] += sum over c of wk[c] x_row[c][i] for i < n, a vector at a time, the last partial one
// masked (load_first, store_first): the compiler's scalar loop for a row's last elements cost
// as much as its vectors on rows of 90.
template <int CI, class T>
void add_rows(const T* wk, const T* const* x_row, int64_t n, T* out) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  const auto sum = [&](auto load, int64_t i) {
    Vec s = wk[0] * load(x_row[0] + i);
    for (int c = 1; c < CI; ++c)
      s += wk[c] * load(x_row[c] + i);
    return s;
  };
  int64_t i = 0;
  const auto whole = [](const T* p) {
    Vec v;
    std::memcpy(&v, p, sizeof(Vec));
    return v;
  };
  for (; i + 4 * L <= n; i += 4 * L) {  // four vectors' loads in flight
    Vec v[4];
    for (int u = 0; u < 4; ++u)
      v[u] = whole(out + i + u * L) + sum(whole, i + u * L);
    std::memcpy(out + i, v, sizeof(v));
  }
  for (; i + L <= n; i += L) {
    const Vec v = whole(out + i) + sum(whole, i);
    std::memcpy(out + i, &v, sizeof(Vec));
  }
  if (i < n) {
    const int64_t m = n - i;
    const auto part = [m](const T* p) { return load_first<Vec>(p, m); };
    store_first(out + i, load_first<Vec>(out + i, m) + sum(part, i), m);
  }
}

// Tasks over the (n, co) planes of y. Each tap row adds the CI input channels' rows of x, each
// times its weight, into the plane's outputs: one pass over the outputs for the CI channels. CI
// is the group's input channels (1 when depthwise; few_input_forward_suits bounds it).
template <int CI, class T>
void forward_planes(const Plan& pl, const T* x, const T* w, const T* b, T* y, int threads) {
  if (pl.batch == 0) return;  // nothing to write; a phase plane could be huge (empty tensors)
  const Phases f = phases_of(pl);
  // Runs of planes a task: about kMinTaskOutputs outputs, while that leaves two tasks a thread
  // (small planes one a task: 16 x 16 inputs at k4 s2 ran 0.8x the GEMM path at 2 threads); with
  // fewer planes than that, bands of a plane's rows (one 512 x 512 channel ran on one thread).
  // The cut cannot change a bit: an output's taps come in the same order in any band.
  constexpr int64_t kMinTaskOutputs = 16384;
  const int64_t planes = pl.batch * pl.out_channels;
  const int64_t runs = std::clamp<int64_t>(std::min(planes * pl.out_hw / kMinTaskOutputs, planes),
                                           std::min<int64_t>(planes, 2 * int64_t{threads}), planes);
  const int64_t bands = std::clamp<int64_t>(ceil_div(2 * int64_t{threads}, planes), 1, pl.out_h);
  const int64_t band_h = ceil_div(pl.out_h, bands);
  parallel_for(
      threads, runs * bands, [&] { return Workspace<T>(f.sw > 1 ? f.size() : 0); },
      [&](Workspace<T>& ws, int64_t task) {
        const int64_t run = task / bands;
        const int64_t oh0 = task % bands * band_h, oh1 = std::min(pl.out_h, oh0 + band_h);
        if (oh0 >= oh1) return;
        for (int64_t t = planes * run / runs; t < planes * (run + 1) / runs; ++t) {
          const int64_t co = t % pl.out_channels, n = t / pl.out_channels;
          const int64_t g = co / pl.cog;
          const T* x_g = x + (n * pl.in_channels + g * CI) * pl.in_hw;
          const T* w_co = w + g * CI * pl.rows + (co % pl.cog) * pl.taps;  // input channel 0's
          T* y_p = y + t * pl.out_hw;
          const T init = b != nullptr ? b[co] : T(0);
          T* acc = f.sw > 1 ? ws.data() : y_p;  // stride 1: the phase layout is y's own
          for (int64_t r = 0; r < f.sw; ++r)    // the band's rows of each phase
            std::fill_n(acc + f.row(r, oh0), (oh1 - oh0) * f.len, init);
          for_each_tap_row(
              pl, f,
              [&](int64_t k, int64_t ih, int64_t iw0, int64_t iw1, int64_t o) {
                T wk[CI];
                const T* x_row[CI];
                for (int c = 0; c < CI; ++c) {
                  wk[c] = w_co[c * pl.rows + k];
                  x_row[c] = x_g + c * pl.in_hw + ih * pl.in_w + iw0;
                }
                add_rows<CI>(wk, x_row, iw1 - iw0, acc + o);
              },
              oh0, oh1);
          if (f.sw > 1) from_phases(f, acc, y_p, oh0, oh1);
        }
      });
}

// Bands of a plane's input rows whose phase rows of dy (row_len elements each, the W phases its
// taps reach for each of stride_h output rows an input row spans) stay within kBandBytes, so
// that a band's conversion and its reads of it stay in cache: on a one-channel 2048 x 2060 dy
// the whole plane's phase rows were converted, and for dgrad zeroed by every thread, before
// any was read (0.15x-0.47x PyTorch's dgrad, 0.14x-0.62x its wgrad). The shape alone decides.
constexpr int64_t kBandBytes = int64_t{512} << 10;
int64_t cache_bands(const Plan& pl, int64_t phases, int64_t row_len, int64_t elem_bytes) {
  // (Each factor bounded first: the geometry accepts strides whose products with a row
  // overflow.)
  if (phases > kBandBytes || pl.stride_h > kBandBytes || row_len > kBandBytes) return pl.in_h;
  const int128 ih_bytes = int128{phases} * pl.stride_h * row_len * elem_bytes;
  if (ih_bytes >= kBandBytes) return pl.in_h;
  return ceil_div(pl.in_h, static_cast<int64_t>(int128{kBandBytes} / ih_bytes));
}

// NV vectors from column i (`left` elements, the last vector perhaps partial) of R rows of dx
// from row r0 on, rows that the same taps reach, their dy rows `row_step` apart in the phase
// planes: every element's taps in the order of `e`, each vector its own chain. A row's whole
// blocks go V vectors at a time, one row each; its last vectors go for several rows together:
// one row at a time, a narrow plane's row was one or two chains of every tap (64 taps: a chain
// of 64 dependent multiply-adds), and the pass waited on their latency (k8 s2 on 19 x 19: 8
// GFLOP/s).
template <int R, int NV, class T, class Entry>
void dgrad_row_vectors(const Entry* e, int64_t count, int64_t row_step, int64_t r0, int64_t i,
                       int64_t left, T* dx_row, int64_t dx_step) {
  typedef T Vec __attribute__((vector_size(gemm::kVecBytes)));
  constexpr int L = gemm::kLanes<T>;
  Vec acc[R][NV] = {};
  for (int64_t k = 0; k < count; ++k) {
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < NV; ++v) {
        Vec d;
        std::memcpy(&d, e[k].p + (r0 + r) * row_step + i + v * L, sizeof(Vec));
        acc[r][v] += e[k].w * d;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    T* out = dx_row + (r0 + r) * dx_step + i;
    for (int v = 0; v < NV; ++v) {
      if ((v + 1) * L <= left) {
        std::memcpy(out + v * L, &acc[r][v], sizeof(Vec));
      } else {
        store_first(out + v * L, acc[r][v], left - v * L);
      }
    }
  }
}

// dgrad a row of dx at a time: each of its vectors sums every tap that reaches it in registers,
// reading the W phase rows of dy, zero-padded so that every tap covers the whole row, and is
// stored once. Adding each tap's row into dx in turn loaded and stored dx once per tap: 1.15x-1.45x
// slower on the suite's depthwise layers, 1.3x-1.4x on k5 and k8x4 layers at stride 2. The taps
// of an element go in (kh, kw) order.
template <class T>
void dgrad_typed(const Plan& pl, const T* dy, const T* w, T* dx, int threads) {
  constexpr int L = gemm::kLanes<T>;
  constexpr int V = 4;  // vectors of a row summed together
  if (pl.batch == 0) return;
  const Phases f = phases_of(pl);
  const Reached re = reached_of(pl, f);
  // Tap kw reads column iw + q of W phase r for column iw of dx.
  std::vector<int64_t> r_of(static_cast<size_t>(pl.kernel_w)), q_of(r_of);
  int64_t q_lo = 0, q_hi = 0;
  for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
    const int64_t off_w = kw * pl.dil_w - pl.pad_w;
    const int64_t q = floor_div(off_w, f.sw);
    r_of[static_cast<size_t>(kw)] = off_w - q * f.sw;
    q_of[static_cast<size_t>(kw)] = q;
    q_lo = std::min(q_lo, q);
    q_hi = std::max(q_hi, q);
  }
  // Phase row (r, oh): column j at pad + j, zero outside the row's columns; L past the last
  // column any tap reads, for the last vector's lanes past the row. Rows start on a vector: the
  // conversion's stores then split no cache line (with a pad of 1 the pass ran 0.9x).
  const int64_t pad = gemm::round_up(-q_lo, L);
  const int64_t row_len = gemm::round_up(pad + std::max(f.len, pl.in_w + q_hi) + L, L);
  const int64_t phases = std::min(f.sw, pl.out_w);
  struct Entry {
    T w;
    const T* p;
  };
  // Tasks over (plane, band of rows of dx): bands where planes are fewer than twice the threads
  // (one 512 x 512 channel ran on one thread), and cache_bands. A band converts the rows of dy
  // its taps read into a buffer of its own rows. The cut cannot change a bit.
  const int64_t planes = pl.batch * pl.groups;
  const int64_t bands = std::clamp<int64_t>(
      std::max(ceil_div(2 * int64_t{threads}, planes),
               cache_bands(pl, phases, row_len, static_cast<int64_t>(sizeof(T)))),
      1, pl.in_h);
  const int64_t band_h = ceil_div(pl.in_h, bands);
  // A band's rows of dy: at most those of band_h input rows' taps, and at most out_h.
  const int64_t band_out_h = static_cast<int64_t>(std::min<int128>(
      f.out_h, int128{band_h - 1} * pl.stride_h + int128{pl.kernel_h - 1} * pl.dil_h + 1));
  const int64_t rows = phases * band_out_h;
  parallel_for(
      threads, planes * bands,
      [&] {
        const int64_t elems = workspace_elems(rows, row_len);
        Workspace<T> ws(elems);
        std::fill_n(ws.data(), elems, T(0));
        return ws;
      },
      [&](Workspace<T>& ws, int64_t task) {
        const int64_t t = task / bands, c = t % pl.groups;
        const int64_t ih0 = task % bands * band_h, ih1 = std::min(pl.in_h, ih0 + band_h);
        if (ih0 >= ih1) return;
        const int64_t oh0 = std::max<int64_t>(0, ih0 * pl.stride_h - pl.pad_h);
        const int64_t oh1 = std::min(
            pl.out_h, (ih1 - 1) * pl.stride_h - pl.pad_h + (pl.kernel_h - 1) * pl.dil_h + 1);
        const T* dy_p = dy + t * pl.out_hw;
        const auto phase_row = [&](int64_t r, int64_t oh) {
          return ws.data() + (r * band_out_h + (oh - oh0)) * row_len + pad;
        };
        // Only the rows and phases a tap reads; the columns each writes are the same in every
        // task, so the padding stays zero.
        to_phases(f, re, dy_p, oh0, oh1, phase_row);
        T* dx_p = dx + t * pl.in_hw;
        std::vector<Entry> entries(static_cast<size_t>(pl.taps));
        // Whether row ih + d is reached by the taps of row ih (all but the plane's edge rows):
        // its dy rows are then ih's, d stride steps further down.
        const auto same_taps = [&](int64_t ih, int64_t d) {
          for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
            const bool a = ih >= pl.h.lo[kh] && ih < pl.h.hi[kh];
            if (a != (ih + d >= pl.h.lo[kh] && ih + d < pl.h.hi[kh])) return false;
          }
          return true;
        };
        constexpr int kTailRows = 4;
        // Rows go together only where their dy rows are a representable distance apart (the
        // geometry accepts a stride near 2^63 when one input row makes the output's height).
        int64_t row_step = 0;
        const bool rows_together = !__builtin_mul_overflow(pl.stride_h, row_len, &row_step);
        const int64_t whole = pl.in_w / (V * L) * (V * L), left = pl.in_w - whole;
        const int nv = static_cast<int>(ceil_div(left, int64_t{L}));
        for (int64_t ih = ih0; ih < ih1;) {
          int64_t count = 0;
          for (int64_t kh = 0; kh < pl.kernel_h; ++kh) {
            if (ih < pl.h.lo[kh] || ih >= pl.h.hi[kh]) continue;
            const int64_t oh = ih * pl.stride_h - pl.pad_h + kh * pl.dil_h;
            for (int64_t kw = 0; kw < pl.kernel_w; ++kw) {
              if (pl.w.lo[kw] >= pl.w.hi[kw]) continue;
              entries[static_cast<size_t>(count++)] = {
                  w[c * pl.taps + kh * pl.kernel_w + kw],
                  phase_row(r_of[static_cast<size_t>(kw)], oh) + q_of[static_cast<size_t>(kw)]};
            }
          }
          // The rows after ih that share its taps, up to kTailRows (as many as leave at most 8
          // chains a tile).
          const int most = rows_together && nv > 0 ? std::min(kTailRows, 8 / nv) : 1;
          int n_rows = 1;
          while (n_rows < most && ih + n_rows < ih1 && same_taps(ih, n_rows))
            ++n_rows;
          T* dx_row = dx_p + ih * pl.in_w;
          for (int64_t r = 0; r < n_rows; ++r) {
            for (int64_t i = 0; i < whole; i += V * L)
              dgrad_row_vectors<1, V>(entries.data(), count, row_step, r, i, V * L, dx_row,
                                      pl.in_w);
          }
          if (left > 0) {
            gemm::with_count<kTailRows>(n_rows, [&]<int R>() {
              gemm::with_count<V>(nv, [&]<int NV>() {
                dgrad_row_vectors<R, NV>(entries.data(), count, row_step, 0, whole, left, dx_row,
                                         pl.in_w);
              });
            });
          }
          ih += n_rows;
        }
      });
}

// Tasks over channels; each sums its items in order, every tap's products in kLanes interleaved
// partial sums (a vectorisable reduction) added in lane order at the end. On planes cache_bands
// cuts, tasks over (channel, item, band) instead: each band's partial sums, in the same order
// over its rows, are added in (item, band) order, and each task converts its band's rows of dy
// only. The bands follow the shape, so the sums' order does not depend on the thread count.
template <class T>
void wgrad_typed(const Plan& pl, const T* x, const T* dy, T* dw, int threads) {
  constexpr int64_t kLanes = 16;
  if (pl.batch == 0) {
    std::fill_n(dw, pl.groups * pl.taps, T(0));
    return;
  }
  const Phases f = phases_of(pl);
  const Reached re = reached_of(pl, f);
  const int64_t bands = f.sw > 1
                            ? std::clamp<int64_t>(cache_bands(pl, std::min(f.sw, f.out_w), f.len,
                                                              static_cast<int64_t>(sizeof(T))),
                                                  1, pl.in_h)
                            : 1;
  const int64_t band_h = ceil_div(pl.in_h, bands);
  // Item n's rows [ih0, ih1) of channel c: every tap's products added into acc[k * kLanes + lane],
  // its rows of dy converted first (all of them when bands is 1).
  const auto sum_rows = [&](T* acc, T* ph, int64_t c, int64_t n, int64_t ih0, int64_t ih1) {
    if (ih0 >= ih1) return;
    const int64_t t = n * pl.groups + c;
    const T* x_p = x + t * pl.in_hw;
    const T* dy_p = dy + t * pl.out_hw;
    int64_t oh0 = 0, oh1 = f.out_h;
    if (bands > 1) {
      oh0 = std::max<int64_t>(0, ih0 * pl.stride_h - pl.pad_h);
      oh1 =
          std::min(f.out_h, (ih1 - 1) * pl.stride_h - pl.pad_h + (pl.kernel_h - 1) * pl.dil_h + 1);
    }
    if (f.sw > 1)
      to_phases(f, re, dy_p, oh0, oh1, [&](int64_t r, int64_t oh) { return ph + f.row(r, oh); });
    const T* src = f.sw > 1 ? ph : dy_p;
    const auto row = [&](int64_t k, int64_t ih, int64_t iw0, int64_t iw1, int64_t o) {
      if (ih < ih0 || ih >= ih1) return;  // a neighbouring band's row
      T lanes[kLanes] = {};
      const T* x_row = x_p + ih * pl.in_w + iw0;
      const T* in = src + o;
      const int64_t n_iw = iw1 - iw0;
      int64_t i = 0;
      for (; i + kLanes <= n_iw; i += kLanes) {
        for (int64_t l = 0; l < kLanes; ++l)
          lanes[l] += x_row[i + l] * in[i + l];
      }
      for (int64_t l = 0; i < n_iw; ++i, ++l)
        lanes[l] += x_row[i] * in[i];
      T* a = acc + k * kLanes;
      for (int64_t l = 0; l < kLanes; ++l)
        a[l] += lanes[l];
    };
    if (bands > 1) {
      for_each_tap_row(pl, f, row, oh0, oh1);
    } else {
      for_each_tap_row(pl, f, row);
    }
  };
  const auto finish = [&](const T* acc, int64_t c) {
    for (int64_t k = 0; k < pl.taps; ++k) {
      T sum = T(0);
      for (int64_t l = 0; l < kLanes; ++l)
        sum += acc[k * kLanes + l];
      dw[c * pl.taps + k] = sum;
    }
  };
  const int64_t acc_elems = pl.taps * kLanes;
  if (bands == 1) {
    parallel_for(
        threads, pl.groups, [&] { return Workspace<T>((f.sw > 1 ? f.size() : 0) + acc_elems); },
        [&](Workspace<T>& ws, int64_t c) {
          T* acc = ws.data();
          std::fill_n(acc, acc_elems, T(0));
          for (int64_t n = 0; n < pl.batch; ++n)
            sum_rows(acc, ws.data() + acc_elems, c, n, 0, pl.in_h);
          finish(acc, c);
        });
    return;
  }
  // A plane's phase layout (f.row) per thread, of which a task writes and reads its band's rows.
  const int64_t slices = pl.batch * bands;
  Workspace<T> partial(pl.groups * slices * acc_elems);
  parallel_for(
      threads, pl.groups * slices, [&] { return Workspace<T>(f.size()); },
      [&](Workspace<T>& ws, int64_t task) {
        const int64_t c = task / slices, n = task % slices / bands, b = task % bands;
        T* acc = partial.data() + task * acc_elems;
        std::fill_n(acc, acc_elems, T(0));
        sum_rows(acc, ws.data(), c, n, b * band_h, std::min(pl.in_h, (b + 1) * band_h));
      });
  parallel_for(threads, pl.groups, [&](int64_t c) {
    T* acc = partial.data() + c * slices * acc_elems;
    for (int64_t s = 1; s < slices; ++s)
      for (int64_t e = 0; e < acc_elems; ++e)
        acc[e] += acc[s * acc_elems + e];
    finish(acc, c);
  });
}

}  // namespace

void depthwise_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                       int threads) {
  if (depthwise_blocked_forward_suits(pl, sizeof(float)))
    return depthwise_blocked_forward(pl, x, w, b, y, threads);
  forward_planes<1>(pl, x, w, b, y, threads);
}
void depthwise_forward(const Plan& pl, const double* x, const double* w, const double* b, double* y,
                       int threads) {
  if (depthwise_blocked_forward_suits(pl, sizeof(double)))
    return depthwise_blocked_forward(pl, x, w, b, y, threads);
  forward_planes<1>(pl, x, w, b, y, threads);
}

// Few input channels: the GEMM path's product reduces over cig only and writes a column buffer
// of taps copies of y for col2im to add (3 -> 32 k8x3 s2: 2.1x here at 1 thread, 1 -> 64
// k4x3 s2 3.7x, 4 -> 64 k4 s2 1.5x). Up to 4: with 8 the GEMM path or the direct forward won
// (0.3x-0.8x). Rows of at least a vector: on 8 x 8 inputs at k4 s2 the loops over tap rows cost
// more than the product (0.45x). Shapes the direct forward takes keep it (stride 1, k5 on
// 32 x 32 with 3 input channels: 2.5x the loops).
bool few_input_forward_suits(const Plan& pl) {
  return pl.cig <= kFewInputForwardChannels && pl.stride_w <= kMaxPhases &&
         pl.in_w >= gemm::kLanes<float>;
}
template <class T>
void few_input_forward_typed(const Plan& pl, const T* x, const T* w, const T* b, T* y,
                             int threads) {
  gemm::with_count<kFewInputForwardChannels>(
      static_cast<int>(pl.cig), [&]<int CI>() { forward_planes<CI>(pl, x, w, b, y, threads); });
}
void few_input_forward(const Plan& pl, const float* x, const float* w, const float* b, float* y,
                       int threads) {
  few_input_forward_typed(pl, x, w, b, y, threads);
}
void few_input_forward(const Plan& pl, const double* x, const double* w, const double* b, double* y,
                       int threads) {
  few_input_forward_typed(pl, x, w, b, y, threads);
}
void depthwise_dgrad(const Plan& pl, const float* dy, const float* w, float* dx, int threads) {
  if (depthwise_blocked_dgrad_suits(pl, sizeof(float)))
    return depthwise_blocked_dgrad(pl, dy, w, dx, threads);
  dgrad_typed(pl, dy, w, dx, threads);
}
void depthwise_dgrad(const Plan& pl, const double* dy, const double* w, double* dx, int threads) {
  if (depthwise_blocked_dgrad_suits(pl, sizeof(double)))
    return depthwise_blocked_dgrad(pl, dy, w, dx, threads);
  dgrad_typed(pl, dy, w, dx, threads);
}
void depthwise_wgrad(const Plan& pl, const float* x, const float* dy, float* dw, int threads) {
  if (depthwise_blocked_wgrad_suits(pl, sizeof(float)))
    return depthwise_blocked_wgrad(pl, x, dy, dw, threads);
  wgrad_typed(pl, x, dy, dw, threads);
}
void depthwise_wgrad(const Plan& pl, const double* x, const double* dy, double* dw, int threads) {
  if (depthwise_blocked_wgrad_suits(pl, sizeof(double)))
    return depthwise_blocked_wgrad(pl, x, dy, dw, threads);
  wgrad_typed(pl, x, dy, dw, threads);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::conv
