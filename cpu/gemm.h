// The CPU backend's own GEMM: C (+)= A B for strided row/column views, single-threaded, in the
// classic packed form (A cut into MR-row panels, B into NR-column panels, both copied into
// scratch in the order the micro-kernel reads them; an MR x NR block of C kept in registers over
// a run of the reduction). The conv passes call it from inside their own tasks, so it never
// starts threads, and its summation order depends on the sizes only: bit-identical results for
// any thread count (docs/design.md, "Determinism").
//
// Why not Eigen's product: Eigen 3.4's kernel keeps a 48 x 4 block of C (12 of AVX-512's 32
// registers) and packs the weight again for every GEMM; this one keeps 12 x 32 (24 registers)
// and lets a pass pack its weight once per call where many tasks share it (pack_whole_a,
// gemm_packed_a). The forward pass uses it (its GEMMs are a weight times wide blocks of x), and
// so does dgrad's GEMM path where its blocks fill the tiles: since its sums do not depend on how
// a product is cut, those passes may cut their products for the threads. wgrad's GEMM path,
// both operands transposed, stays on Eigen's (docs/performance.md, "CPU backend against PyTorch"
// and the nineteenth session).
//
// Included by each per-level copy of the kernels inside its namespace TGRAD_CPU_ISA_NS, like
// conv_transpose_cols.h: the vector width follows the level's compiler flags (__AVX512F__,
// __AVX__), through GCC/Clang vector types rather than intrinsics, so one source serves all three.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#ifndef TGRAD_CPU_ISA_NS
#error "compiled once per level with TGRAD_CPU_ISA_NS set (cpu/CMakeLists.txt)"
#endif

namespace tgrad::cpu::TGRAD_CPU_ISA_NS::gemm {

// The register tile: kRows (MR) rows of C by kVecsPerRow vectors (NR = kVecsPerRow * lanes). A
// panel with fewer rows or columns left (the last of a product) runs a smaller tile of the same
// packed layout (micro_kernel's template arguments), so a 32-row product does not compute 36.
// kVecRegisters: the level's vector registers, which every register tile of the CPU kernels is
// sized by.
#if defined(__AVX512F__)
inline constexpr int kVecBytes = 64;
inline constexpr int kVecRegisters = 32;
inline constexpr int kRows = 12;  // 12 rows x 2 vectors = 24 accumulators of 32 registers
#elif defined(__AVX__)
inline constexpr int kVecBytes = 32;
inline constexpr int kVecRegisters = 16;
inline constexpr int kRows = 6;  // 12 accumulators of 16 registers
#else
inline constexpr int kVecBytes = 16;
inline constexpr int kVecRegisters = 16;
inline constexpr int kRows = 6;
#endif
inline constexpr int kVecsPerRow = 2;

// Cache blocking: a KC x NR panel of B (32 KiB for float on AVX-512) stays in L1 while the
// micro-kernel sweeps the MC x KC block of A (96 KiB) held in L2; a KC x NC block of B is packed
// once per (jc, pc) step.
inline constexpr int64_t kKc = 256;
inline constexpr int64_t kMc = 96;  // a multiple of every level's kRows
inline constexpr int64_t kNc = 512;

template <class T>
inline constexpr int kLanes = kVecBytes / static_cast<int>(sizeof(T));
template <class T>
inline constexpr int kCols = kVecsPerRow* kLanes<T>;  // NR
static_assert(kMc % kRows == 0 && kNc % kCols<float> == 0 && kNc % kCols<double> == 0,
              "a cache block holds whole register tiles");

// A strided matrix view: element (i, j) at p[i * rs + j * cs].
template <class T>
struct View {
  const T* p;
  int64_t rs, cs;
};

inline int64_t round_up(int64_t v, int64_t to) {
  return (v + to - 1) / to * to;
}

// Scratch elements gemm() needs for an m x n x k product: the packed block of A, then the packed
// block of B.
template <class T>
int64_t packed_a_elems(int64_t m, int64_t k) {
  return std::min(kMc, round_up(m, kRows)) * std::min(kKc, k);
}
template <class T>
int64_t scratch_elems(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return packed_a_elems<T>(m, k) + std::min(kKc, k) * std::min(kNc, round_up(n, kCols<T>));
}

// c[i*ldc + j] (+)= sum over k of the packed panels (MR and ldb apart per k: ldb is NR for a
// packed B, more for rows of a wider matrix read in place), for the mr x nr corner of an R x
// V-vector tile (R <= MR, V <= kVecsPerRow).
template <class T, int R, int V>
inline void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* c,
                         int64_t ldc, bool accumulate, int mr, int nr, int64_t ldb) {
  typedef T Vec __attribute__((vector_size(kVecBytes)));
  constexpr int L = kLanes<T>, MR = kRows;
  Vec acc[R][V];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < V; ++j)
      acc[i][j] = Vec{};
  // The tile of C is touched only after the kc steps, a row or two of cache lines apart from
  // the next: fetched now, its misses overlap the arithmetic instead of stalling the stores.
  for (int i = 0; i < mr; ++i) {
    __builtin_prefetch(c + i * ldc, 1);
    __builtin_prefetch(c + i * ldc + nr - 1, 1);
  }
  for (int64_t k = 0; k < kc; ++k) {
    // The panels' lines 8 steps ahead (A's panel comes from L2 for every tile, B's for each new
    // panel): the GEMM alone on 512 x 512 x 512 and 256 x 512 x 625 ran 1%-3% faster. A B read
    // in place (ldb past NR: one row of B a step, each its own stream, which the prefetchers do
    // not follow) comes from L3 or memory, further away than 8 steps cover: there the next
    // tile's part of this row is fetched instead, a whole tile's steps ahead (a grouped 96 -> 3
    // k8 s4 forward, 24 rows over 1541 steps, ran 2x faster).
    __builtin_prefetch(a + 8 * MR);
    if (ldb == kCols<T>) {
      __builtin_prefetch(b + 8 * ldb);
    } else {
      __builtin_prefetch(b + V * L);
      if constexpr (V * L * sizeof(T) > 64) __builtin_prefetch(b + V * L + 64 / sizeof(T));
    }
    Vec bv[V];
    for (int j = 0; j < V; ++j)
      std::memcpy(&bv[j], b + j * L, kVecBytes);
    for (int i = 0; i < R; ++i) {
      const T ai = a[i];
      for (int j = 0; j < V; ++j)
        acc[i][j] += ai * bv[j];
    }
    a += MR;
    b += ldb;
  }
  if (mr == R && nr == V * L) {
    for (int i = 0; i < R; ++i) {
      for (int j = 0; j < V; ++j) {
        T* out = c + i * ldc + j * L;
        Vec v = acc[i][j];
        if (accumulate) {
          Vec old;
          std::memcpy(&old, out, kVecBytes);
          v = old + v;
        }
        std::memcpy(out, &v, kVecBytes);
      }
    }
    return;
  }
  T tile[R][V * L];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < V; ++j)
      std::memcpy(&tile[i][j * L], &acc[i][j], kVecBytes);
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < nr; ++j) {
      T& out = c[i * ldc + j];
      out = accumulate ? out + tile[i][j] : tile[i][j];
    }
  }
}

// The tile for an mr x nr corner: the smallest of MR/3, 2MR/3 (when MR divides by 3), MR rows and
// 1 or 2 vectors that covers it. B's rows are ldb apart: a packed panel's by default.
template <class T>
inline void run_tile(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, bool accumulate, int mr,
                     int nr, int64_t ldb = kCols<T>) {
  constexpr int MR = kRows, L = kLanes<T>;
  constexpr int R1 = MR % 3 == 0 ? MR / 3 : MR, R2 = MR % 3 == 0 ? 2 * MR / 3 : MR;
  static_assert(kVecsPerRow == 2, "run_tile picks 1 or 2 vectors");
  const bool one = nr <= L;
  if (mr <= R1) {
    one ? micro_kernel<T, R1, 1>(kc, a, b, c, ldc, accumulate, mr, nr, ldb)
        : micro_kernel<T, R1, 2>(kc, a, b, c, ldc, accumulate, mr, nr, ldb);
  } else if (mr <= R2) {
    one ? micro_kernel<T, R2, 1>(kc, a, b, c, ldc, accumulate, mr, nr, ldb)
        : micro_kernel<T, R2, 2>(kc, a, b, c, ldc, accumulate, mr, nr, ldb);
  } else {
    one ? micro_kernel<T, MR, 1>(kc, a, b, c, ldc, accumulate, mr, nr, ldb)
        : micro_kernel<T, MR, 2>(kc, a, b, c, ldc, accumulate, mr, nr, ldb);
  }
}

// An L x L block transposed in registers, L = kLanes<T>: log2(L) rounds, round B swapping the
// off-diagonal B x B blocks of each 2B x 2B block (two-source shuffles with constant masks).
template <class Vec, int L, int B, std::size_t... I>
inline Vec swap_low(Vec x, Vec y, std::index_sequence<I...>) {
  return __builtin_shufflevector(x, y, ((I & B) != 0 ? L + I - B : I)...);
}
template <class Vec, int L, int B, std::size_t... I>
inline Vec swap_high(Vec x, Vec y, std::index_sequence<I...>) {
  return __builtin_shufflevector(x, y, ((I & B) != 0 ? L + I : I + B)...);
}
template <class Vec, int L, int B = 1>
inline void transpose_square(Vec* v) {
  if constexpr (B < L) {
    for (int i = 0; i < L; ++i) {
      if ((i & B) != 0) continue;
      const Vec lo = swap_low<Vec, L, B>(v[i], v[i + B], std::make_index_sequence<L>{});
      const Vec hi = swap_high<Vec, L, B>(v[i], v[i + B], std::make_index_sequence<L>{});
      v[i] = lo;
      v[i + B] = hi;
    }
    transpose_square<Vec, L, B * 2>(v);
  }
}

// f.template operator()<N>() for the N in [1, Max] equal to n, nothing for other n: a count known
// only at run time (a tile's positions or channels, a short copy's elements) picked from
// instances compiled for each, whose register arrays and copies then have fixed sizes.
template <int Max, class F>
inline void with_count(int n, F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((n == I + 1 ? f.template operator()<I + 1>() : void()), ...);
  }
  (std::make_integer_sequence<int, Max>{});
}

// c[i * ldc + j] += sum over t < k of a[i * lda + t] b[j * ldb + t], for i < m and j < n: a product
// whose two operands run along the reduction (rows of x and of dy's columns in wgrad), for few
// rows m. A blocked GEMM packs both operands and tiles C in register blocks of many rows (Eigen's
// 48 at AVX-512), which m of 1 to 4 leave mostly empty: a 3 x 3 wgrad over 3.2 M positions ran at
// 1.6 GFLOP/s. Here each tile of up to 4 x 4 outputs keeps one vector accumulator per output
// along the reduction, a vector of a and b at a time, and adds its lanes in a fixed order at the
// end; the sums' order depends on k and the tile only.
template <class T, int TM, int TN>
inline void dot_tile(int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                     int64_t ldc) {
  typedef T Vec __attribute__((vector_size(kVecBytes)));
  constexpr int L = kLanes<T>;
  Vec acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j)
      acc[i][j] = Vec{};
  int64_t t = 0;
  for (; t + L <= k; t += L) {
    Vec av[TM], bv[TN];
    for (int i = 0; i < TM; ++i)
      std::memcpy(&av[i], a + i * lda + t, kVecBytes);
    for (int j = 0; j < TN; ++j)
      std::memcpy(&bv[j], b + j * ldb + t, kVecBytes);
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j)
        acc[i][j] += av[i] * bv[j];
  }
  for (int i = 0; i < TM; ++i) {
    for (int j = 0; j < TN; ++j) {
      T lanes[L];
      std::memcpy(lanes, &acc[i][j], kVecBytes);
      T sum = T(0);
      for (int l = 0; l < L; ++l)
        sum += lanes[l];
      for (int64_t r = t; r < k; ++r)
        sum += a[i * lda + r] * b[j * ldb + r];
      c[i * ldc + j] += sum;
    }
  }
}

inline constexpr int kDotRows = 4;  // dot_products' largest tile, rows and columns

template <class T>
void dot_products(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                  T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; i += kDotRows) {
    const int tm = static_cast<int>(std::min<int64_t>(kDotRows, m - i));
    for (int64_t j = 0; j < n; j += kDotRows) {
      const int tn = static_cast<int>(std::min<int64_t>(kDotRows, n - j));
      with_count<kDotRows>(tm, [&]<int TM>() {
        with_count<kDotRows>(tn, [&]<int TN>() {
          dot_tile<T, TM, TN>(k, a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc);
        });
      });
    }
  }
}

// dst[t * dst_ld + i] = src[i * src_ld + t] for t < L and i < width, from `count` <= width <= L
// source rows of L contiguous elements; columns count..width-1 of dst get zeros. The transposed
// packing of both operands goes through this: a strided scalar copy costs as much as the
// arithmetic of a skinny product. Every store has a size known at compile time: a store of a size
// known only at run time is a call to the C library's copy, which for a row of a few elements
// costs more than the transpose (the channels-last forward's transposes, dgrad's packed weight
// rows and the direct dgrad's tiles of 12 positions each lost a large share of their time to
// such calls: docs/performance.md). A width known only at run time picks its fixed-size stores
// through one switch; Width: the width when the caller knows it (whole vectors, or a panel
// narrower than one: A's 12 rows of 16 lanes at AVX-512), 0 where it does not.
template <class T, int Width = 0>
inline void transpose_tile(const T* src, int64_t src_ld, int count, T* dst, int64_t dst_ld,
                           int width) {
  typedef T Vec __attribute__((vector_size(kVecBytes)));
  constexpr int L = kLanes<T>;
  Vec v[L];
  for (int i = 0; i < L; ++i) {
    if (i < count) {
      std::memcpy(&v[i], src + i * src_ld, kVecBytes);
    } else {
      v[i] = Vec{};
    }
  }
  transpose_square<Vec, L>(v);
  const auto store = [&]<int W>() {
    for (int t = 0; t < L; ++t)
      std::memcpy(dst + t * dst_ld, &v[t], sizeof(T) * W);
  };
  if constexpr (Width > 0) {
    store.template operator()<Width>();
  } else if (width == L) {
    store.template operator()<L>();
  } else {
    with_count<L>(width, store);
  }
}

// dst[i] = src[i] (copy_run) or 0 (zero_run) for i < n, for the short runs of a row the conv
// kernels copy by the thousand (a window's row of a small image, its padding's one or two
// columns): whole vectors, then the rest through a fixed-size copy picked by one switch. The C
// library's copy and fill are calls whose cost, for runs of a few elements, is many times the
// copy's, and more so on some machines than others (docs/performance.md, twentieth session).
template <class T>
inline void copy_run(const T* src, int64_t n, T* dst) {
  constexpr int L = kLanes<T>;
  int64_t i = 0;
  for (; i + L <= n; i += L)
    std::memcpy(dst + i, src + i, kVecBytes);
  with_count<L - 1>(static_cast<int>(n - i),
                    [&]<int R>() { std::memcpy(dst + i, src + i, sizeof(T) * R); });
}

template <class T>
inline void zero_run(T* dst, int64_t n) {
  typedef T Vec __attribute__((vector_size(kVecBytes)));
  constexpr int L = kLanes<T>;
  const Vec zero{};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    std::memcpy(dst + i, &zero, kVecBytes);
  with_count<L - 1>(static_cast<int>(n - i),
                    [&]<int R>() { std::memcpy(dst + i, &zero, sizeof(T) * R); });
}

// One panel of W lanes (W = MR rows of A, or NR columns of B) over kc steps of the reduction:
// dst[k * W + l] = src[l * lane_step + k * k_step] for the first `count` lanes, zero for the rest.
// Lanes contiguous in memory are copied as they are; a reduction contiguous in memory goes
// through L x L register transposes.
template <class T, int W>
inline void pack_panel(const T* src, int64_t lane_step, int64_t k_step, int count, int64_t kc,
                       T* dst) {
  constexpr int L = kLanes<T>;
  if (lane_step == 1) {
    for (int64_t k = 0; k < kc; ++k) {
      const T* lanes = src + k * k_step;
      if (count == W) {
        std::memcpy(dst + k * W, lanes, sizeof(T) * W);
        continue;
      }
      for (int l = 0; l < count; ++l)
        dst[k * W + l] = lanes[l];
      for (int l = count; l < W; ++l)
        dst[k * W + l] = T(0);
    }
    return;
  }
  int64_t k = 0;
  if (k_step == 1) {
    for (; k + L <= kc; k += L) {
      for (int g = 0; g < W; g += L) {
        const int width = std::min(L, W - g);
        const T* from = src + g * lane_step + k;
        const int rows = std::clamp(count - g, 0, width);
        // A panel's last piece narrower than a vector (W % L lanes) has a width known here.
        if (width == L) {
          transpose_tile<T, L>(from, lane_step, rows, dst + k * W + g, W, width);
        } else {
          transpose_tile<T, W % L>(from, lane_step, rows, dst + k * W + g, W, width);
        }
      }
    }
  }
  for (int l = 0; l < count; ++l) {
    const T* lane = src + l * lane_step;
    for (int64_t kk = k; kk < kc; ++kk)
      dst[kk * W + l] = lane[kk * k_step];
  }
  for (int l = count; l < W; ++l)
    for (int64_t kk = k; kk < kc; ++kk)
      dst[kk * W + l] = T(0);
}

// Rows [i0, i0 + mr) and reduction [k0, k0 + kc) of A as one MR-row panel.
template <class T>
inline void pack_a(const View<T>& a, int64_t i0, int mr, int64_t k0, int64_t kc, T* dst) {
  pack_panel<T, kRows>(a.p + i0 * a.rs + k0 * a.cs, a.rs, a.cs, mr, kc, dst);
}

// `count` lanes of kc reduction rows, row k at src + k * k_step with its lanes contiguous, as
// W-lane panels, panel p (lanes [p * W, p * W + W)) at dst + p * W * kc, lanes past count zero.
// Both operands come this way in the forward pass (A, the transposed weight, and B, a block of
// x), their reduction rows thousands of elements apart. A few rows are read at a time, each run
// of rows copied into every panel: panel by panel would read every reduction row once a panel,
// a cache line each, a page apart, all in the same few cache sets, so the lines are gone by the
// next panel and the prefetchers do not follow (costly where the product is short: a few-row
// weight's, or a fifth of a U-Net up-convolution's forward); one row at a time would write kc * W
// elements apart, a power of two that maps every panel's store to the same cache sets.
template <class T, int W>
inline void pack_contiguous_lanes(const T* src, int64_t k_step, int64_t count, int64_t kc, T* dst) {
  constexpr int64_t kRowsPerRun = 8;
  const int64_t whole = count / W * W;
  for (int64_t kr = 0; kr < kc; kr += kRowsPerRun) {
    const int64_t run = std::min(kRowsPerRun, kc - kr);
    const T* rows = src + kr * k_step;
    for (int64_t p = 0; p < whole; p += W)
      for (int64_t k = 0; k < run; ++k)
        std::memcpy(dst + p * kc + (kr + k) * W, rows + k * k_step + p, sizeof(T) * W);
    if (whole < count) {
      const int64_t rest = count - whole;
      for (int64_t k = 0; k < run; ++k) {
        T* last = dst + whole * kc + (kr + k) * W;
        std::memcpy(last, rows + k * k_step + whole, sizeof(T) * static_cast<size_t>(rest));
        std::fill(last + rest, last + W, T(0));
      }
    }
  }
}

// Rows [i0, i0 + m) and reduction [k0, k0 + kc) of A as its MR-row panels, panel ir at
// dst + ir * kc.
template <class T>
inline void pack_a_block(const View<T>& a, int64_t i0, int64_t m, int64_t k0, int64_t kc, T* dst) {
  if (a.rs == 1) {
    pack_contiguous_lanes<T, kRows>(a.p + k0 * a.cs + i0, a.cs, m, kc, dst);
    return;
  }
  for (int64_t ir = 0; ir < m; ir += kRows)
    pack_a(a, i0 + ir, static_cast<int>(std::min<int64_t>(kRows, m - ir)), k0, kc, dst + ir * kc);
}

// Columns [j0, j0 + nr) and reduction [k0, k0 + kc) of B as one NR-column panel.
template <class T>
inline void pack_b(const View<T>& b, int64_t k0, int64_t kc, int64_t j0, int nr, T* dst) {
  pack_panel<T, kCols<T>>(b.p + k0 * b.rs + j0 * b.cs, b.cs, b.rs, nr, kc, dst);
}

// Columns [j0, j0 + nc) and reduction [k0, k0 + kc) of B as its NR-column panels, panel jr at
// dst + jr * kc.
template <class T>
inline void pack_b_block(const View<T>& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
  constexpr int NR = kCols<T>;
  if (b.cs == 1) {
    pack_contiguous_lanes<T, NR>(b.p + k0 * b.rs + j0, b.rs, nc, kc, dst);
    return;
  }
  for (int64_t jr = 0; jr < nc; jr += NR)
    pack_b(b, k0, kc, j0 + jr, static_cast<int>(std::min<int64_t>(NR, nc - jr)), dst + jr * kc);
}

// The whole of A (m x k) packed once, for products that reuse it with several B: for each run of
// kKc of the reduction, starting at element pc * round_up(m, MR), its MR-row panels one after
// another (panel ir at + ir * kc). packed_whole_a_elems(m, k) elements.
template <class T>
int64_t packed_whole_a_elems(int64_t m, int64_t k) {
  return round_up(std::max<int64_t>(m, 0), kRows) * std::max<int64_t>(k, 0);
}
// The runs of the reduction a packed A has: ceil(k / kKc).
inline int64_t reduction_runs(int64_t k) {
  return (k + kKc - 1) / kKc;
}
// Run `run` of pack_whole_a (callers may pack the runs in parallel).
template <class T>
void pack_whole_a_run(const View<T>& a, int64_t m, int64_t k, int64_t run, T* dst) {
  const int64_t m_pad = round_up(m, kRows), pc = run * kKc;
  pack_a_block(a, 0, m, pc, std::min(kKc, k - pc), dst + pc * m_pad);
}
template <class T>
void pack_whole_a(const View<T>& a, int64_t m, int64_t k, T* dst) {
  for (int64_t run = 0; run < reduction_runs(k); ++run)
    pack_whole_a_run(a, m, k, run, dst);
}

namespace detail {

// gemm() below; `whole_a`, when not null, is A packed by pack_whole_a, of whole_m rows of which
// this product takes rows [row0, row0 + m) (then `a` is unused and scratch holds only the packed B
// block, at its start).
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const View<T>& a, const T* whole_a, int64_t whole_m,
          int64_t row0, const View<T>& b, T* c, int64_t ldc, bool accumulate, T* scratch) {
  constexpr int MR = kRows, NR = kCols<T>;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        std::fill_n(c + i * ldc, n, T(0));
    return;
  }
  const int64_t m_pad = round_up(whole_m, MR);
  T* packed_a = scratch;
  T* packed_b = whole_a != nullptr ? scratch : scratch + packed_a_elems<T>(m, k);
  // A product of one or two row panels (a few-row weight's) uses each element of B once or twice:
  // packing B would read and write all of it once more than the tiles read it. Rows of B
  // contiguous in memory are then read where they lie, a whole NR-column tile at a time; a last,
  // partial tile is packed, since its full-vector reads would pass the end of B's row. The tiles'
  // sums are the same. Not where the rows lie a multiple of kAliasBytes apart: a tile's rows then
  // share a few of L1's sets (they are indexed by an address's low 12 bits), evict each other
  // and the lines fetched ahead, and ran slower than packed (1-D rows of 16 K floats). With four
  // panels the packed tile's reuse won as often as it lost.
  constexpr int64_t kInPlacePanels = 2, kAliasBytes = 512;
  const int64_t row_bytes = b.rs * static_cast<int64_t>(sizeof(T));
  const bool b_in_place = m <= kInPlacePanels * MR && b.cs == 1 && row_bytes % kAliasBytes != 0;
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      const bool acc = accumulate || pc > 0;
      if (!b_in_place) pack_b_block(b, pc, kc, jc, nc, packed_b);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        const T* a_block = whole_a != nullptr ? whole_a + pc * m_pad + (row0 + ic) * kc : packed_a;
        if (whole_a == nullptr) pack_a_block(a, ic, mc, pc, kc, packed_a);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, nc - jr));
          // This tile's panel of B: packed with the block, or (in place) B's own rows, or the
          // partial last tile packed alone.
          const T* bt = packed_b + jr * kc;
          int64_t ldb = NR;
          if (b_in_place && nr == NR) {
            bt = b.p + pc * b.rs + jc + jr;
            ldb = b.rs;
          } else if (b_in_place) {
            pack_b(b, pc, kc, jc + jr, nr, packed_b);
            bt = packed_b;
          }
          T* c_tile = c + ic * ldc + jc + jr;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            run_tile(kc, a_block + ir * kc, bt, c_tile + ir * ldc, ldc, acc,
                     static_cast<int>(std::min<int64_t>(MR, mc - ir)), nr, ldb);
          }
        }
      }
    }
  }
}

}  // namespace detail

// C (m x n, rows ldc apart) = A B, or C += A B when `accumulate`; A is m x k, B is k x n.
// `scratch` holds scratch_elems<T>(m, n, k) elements. Each element of C sums its k products in
// order, in runs of kKc added to C one after another: the same order for the same sizes.
template <class T>
void gemm(int64_t m, int64_t n, int64_t k, const View<T>& a, const View<T>& b, T* c, int64_t ldc,
          bool accumulate, T* scratch) {
  detail::gemm(m, n, k, a, static_cast<const T*>(nullptr), m, 0, b, c, ldc, accumulate, scratch);
}

// The same with A packed beforehand by pack_whole_a(a, whole_m, k, whole_a): the product of its
// rows [row0, row0 + m), row0 a multiple of kRows. The results are the same bits as gemm()'s on
// those rows. `scratch` holds scratch_elems<T>(m, n, k) elements (less would do).
template <class T>
void gemm_packed_a(int64_t m, int64_t n, int64_t k, const T* whole_a, int64_t whole_m, int64_t row0,
                   const View<T>& b, T* c, int64_t ldc, bool accumulate, T* scratch) {
  detail::gemm(m, n, k, View<T>{nullptr, 0, 0}, whole_a, whole_m, row0, b, c, ldc, accumulate,
               scratch);
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS::gemm
