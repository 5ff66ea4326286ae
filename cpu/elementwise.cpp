// Elementwise CPU kernels: fill, cast, unary y[i] = f(x[i]), binary with broadcasting
// y[i] = a[i . sa] (op) b[i . sb] (stride 0 on a size-1 axis), and sum_to, which adds x over y's
// size-1 axes in one order fixed by the shapes (accumulated in double); adam_step, the optimizer's
// fused per-parameter update.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/kernels.h"
#include "cpu/parallel.h"

#ifndef TGRAD_CPU_ISA_NS
#error "compiled once per level with TGRAD_CPU_ISA_NS set (cpu/CMakeLists.txt)"
#endif

// One copy per x86-64 level (cpu/kernels.h); nothing here may be shared between the copies.
namespace tgrad::cpu::TGRAD_CPU_ISA_NS {
namespace {

// A row-major loop nest over `sizes` with one stride per operand and axis. Adjacent axes that
// every operand walks as one (stride[d] == stride[d+1] * size[d+1]) are merged, so the innermost
// loop is as long as possible.
template <int K>
struct LoopNest {
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, K> strides;
};

template <int K>
LoopNest<K> make_loop_nest(const Shape& sizes, const std::array<Shape, K>& strides) {
  LoopNest<K> nest;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;  // a size-1 axis moves no operand
    bool merge = !nest.sizes.empty();
    for (int k = 0; k < K && merge; ++k) {
      merge = nest.strides[k].back() == strides[k][d] * sizes[d];
    }
    if (merge) {
      nest.sizes.back() *= sizes[d];
      for (int k = 0; k < K; ++k)
        nest.strides[k].back() = strides[k][d];
    } else {
      nest.sizes.push_back(sizes[d]);
      for (int k = 0; k < K; ++k)
        nest.strides[k].push_back(strides[k][d]);
    }
  }
  if (nest.sizes.empty()) {  // rank 0 or all sizes 1: one element
    nest.sizes.push_back(1);
    for (int k = 0; k < K; ++k)
      nest.strides[k].push_back(0);
  }
  return nest;
}

// Calls inner(offsets, n, inner_strides) once per innermost run, in row-major order.
template <int K, class Inner>
void run_loop_nest(const LoopNest<K>& nest, Inner&& inner) {
  const size_t rank = nest.sizes.size();
  for (int64_t s : nest.sizes) {
    if (s == 0) return;
  }
  std::array<int64_t, K> inner_strides{};
  for (int k = 0; k < K; ++k)
    inner_strides[k] = nest.strides[k][rank - 1];
  std::vector<int64_t> index(rank, 0);
  std::array<int64_t, K> offsets{};
  while (true) {
    inner(offsets, nest.sizes[rank - 1], inner_strides);
    // Odometer step over the outer axes.
    size_t d = rank - 1;
    while (true) {
      if (d == 0) return;
      --d;
      ++index[d];
      for (int k = 0; k < K; ++k)
        offsets[k] += nest.strides[k][d];
      if (index[d] < nest.sizes[d]) break;
      for (int k = 0; k < K; ++k)
        offsets[k] -= nest.strides[k][d] * nest.sizes[d];
      index[d] = 0;
    }
  }
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// Strides of `shape` broadcast to `out`: 0 on an axis where shape has size 1.
Shape broadcast_strides(const Shape& shape, const Shape& out) {
  Shape strides = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1 && out[d] != 1) strides[d] = 0;
  }
  return strides;
}

// Checks the contract shared by binary and sum_to: `small` has big's rank and each size equals
// big's or is 1.
void check_broadcastable(const Tensor& small, const Tensor& big, const char* fn,
                         const char* small_name, const char* big_name) {
  bool ok = small.dim() == big.dim();
  for (int64_t d = 0; ok && d < small.dim(); ++d) {
    ok = small.size(d) == big.size(d) || small.size(d) == 1;
  }
  TGRAD_CHECK(ok, "cpu backend: ", fn, ": ", small_name, " shape ", small.shape(),
              " does not broadcast to ", big_name, " shape ", big.shape());
}

// Elementwise work is cut into blocks of kGrain elements (fixed by the size, never by the thread
// count); a tensor of one block stays on the calling thread.
constexpr int64_t kGrain = int64_t{1} << 15;

// Calls f(begin, end) for consecutive blocks of [0, n), in parallel when there are several.
template <class F>
void for_blocks(int64_t n, F f) {
  parallel_for_range(n, kGrain, f);
}

template <class T, class F>
void map_unary(const Tensor& x, Tensor& y, F f) {
  const T* xp = data<T>(x);
  T* yp = data<T>(y);
  for_blocks(y.numel(), [&](int64_t i0, int64_t i1) {
    // Local copies of f and the pointers: read through the closure, they might change with any
    // store to y as far as the compiler knows, so it neither vectorised the loop nor kept f's
    // captures in registers (leaky_relu and its gradient ran a scalar loop with a branch per
    // element, a tenth of the demo's CPU step).
    const F g = f;
    const T* const xs = xp;
    T* const ys = yp;
    for (int64_t i = i0; i < i1; ++i)
      ys[i] = g(xs[i]);
  });
}

// e^t for float t in [-105, 0], within 1.2 ulp, in arithmetic the compiler vectorizes at every
// level. std::exp is a libm call per element, which kept the sigmoid's loop scalar, a visible
// share of the demo's CPU training step (docs/performance.md). t = n ln2 + r with |r| <= ln2 / 2
// (ln2 in two parts, the first exact times any n here); e^r by its Taylor polynomial to degree 7,
// whose truncation is under 0.05 ulp on that interval; then scaled by 2^n in two halves of at least
// -76 each, normal numbers both, so that a result in the denormals rounds once. At -105 e^t is
// under half the smallest denormal: the result is 0.
inline float exp_to_minus_105(float t) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to integer
  const float nf = (t * 1.44269504f + kRound) - kRound;
  const float r = (t - nf * 0.693359375f) + nf * 2.12194440e-4f;
  float q = 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  const int n = static_cast<int>(nf), n1 = n / 2, n2 = n - n1;
  return q * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
}

// sigmoid(v) from e = e^-|v|, which never overflows: 1 / (1 + e) for v >= 0, e / (1 + e) below,
// one division either way (within 2.2 ulp, as the libm form before it). The float form selects
// with integer masks: a float comparison may raise an exception, so the compiler (which keeps
// exceptions by default) would not turn it into a blend, and the loop would stay scalar. -|v| is
// clamped at -105 on its bits (negative floats order as their bits do; a NaN clamps too, and
// the last select returns it).
template <class T>
T sigmoid_of(T v) {
  if constexpr (std::is_same_v<T, float>) {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    constexpr uint32_t kMinus105 = 0xC2D20000u, kOne = 0x3F800000u;
    const float e = exp_to_minus_105(std::bit_cast<float>(std::min(bits | 0x80000000u, kMinus105)));
    const uint32_t below = 0u - (bits >> 31);  // all ones where v < 0 (and at -0: e = 1 there)
    const float s =
        std::bit_cast<float>((below & std::bit_cast<uint32_t>(e)) | (~below & kOne)) / (1.0f + e);
    const uint32_t nan = 0u - static_cast<uint32_t>((bits & 0x7FFFFFFFu) > 0x7F800000u);
    return std::bit_cast<float>((nan & bits) | (~nan & std::bit_cast<uint32_t>(s)));
  } else {
    if (v >= 0) return T(1) / (T(1) + std::exp(-v));
    const T e = std::exp(v);
    return e / (T(1) + e);
  }
}

template <class T>
void unary_typed(UnaryOp op, T p, const Tensor& x, Tensor& y) {
  switch (op) {
    case UnaryOp::neg:
      return map_unary<T>(x, y, [](T v) { return -v; });
    case UnaryOp::exp:
      return map_unary<T>(x, y, [](T v) { return std::exp(v); });
    case UnaryOp::log:
      return map_unary<T>(x, y, [](T v) { return std::log(v); });
    case UnaryOp::abs:
      return map_unary<T>(x, y, [](T v) { return std::abs(v); });
    case UnaryOp::sign:
      return map_unary<T>(x, y, [](T v) { return static_cast<T>((v > 0) - (v < 0)); });
    case UnaryOp::sqrt:
      return map_unary<T>(x, y, [](T v) { return std::sqrt(v); });
    case UnaryOp::relu:  // NaN stays NaN, as torch.relu
      return map_unary<T>(x, y, [](T v) { return (v > 0 || std::isnan(v)) ? v : T(0); });
    case UnaryOp::leaky_relu:
      return map_unary<T>(x, y, [p](T v) { return v > 0 ? v : p * v; });
    case UnaryOp::step:
      return map_unary<T>(x, y, [](T v) { return v > 0 ? T(1) : T(0); });
    case UnaryOp::leaky_step:
      return map_unary<T>(x, y, [p](T v) { return v > 0 ? T(1) : p; });
    case UnaryOp::sigmoid:
      return map_unary<T>(x, y, [](T v) { return sigmoid_of(v); });
    case UnaryOp::tanh:
      return map_unary<T>(x, y, [](T v) { return std::tanh(v); });
    case UnaryOp::pow:
      return map_unary<T>(x, y, [p](T v) { return std::pow(v, p); });
    case UnaryOp::add_scalar:
      return map_unary<T>(x, y, [p](T v) { return v + p; });
    case UnaryOp::mul_scalar:
      return map_unary<T>(x, y, [p](T v) { return v * p; });
    case UnaryOp::rsub_scalar:
      return map_unary<T>(x, y, [p](T v) { return p - v; });
    case UnaryOp::rdiv_scalar:
      return map_unary<T>(x, y, [p](T v) { return p / v; });
    case UnaryOp::sin:
      return map_unary<T>(x, y, [](T v) { return std::sin(v); });
    case UnaryOp::cos:
      return map_unary<T>(x, y, [](T v) { return std::cos(v); });
    case UnaryOp::clamp_min:
      return map_unary<T>(x, y, [p](T v) { return v < p ? p : v; });
    case UnaryOp::clamp_max:
      return map_unary<T>(x, y, [p](T v) { return v > p ? p : v; });
    case UnaryOp::ge_step:
      return map_unary<T>(x, y, [p](T v) { return v >= p ? T(1) : T(0); });
    case UnaryOp::le_step:
      return map_unary<T>(x, y, [p](T v) { return v <= p ? T(1) : T(0); });
  }
  TGRAD_FAIL("cpu backend: unary: unknown op ", static_cast<int>(op));
}

template <class T, class F>
void map_binary(const Tensor& a, const Tensor& b, Tensor& y, F f) {
  const T* ap = data<T>(a);
  const T* bp = data<T>(b);
  T* yp = data<T>(y);
  if (a.shape() == y.shape() && b.shape() == y.shape()) {
    for_blocks(y.numel(), [&](int64_t i0, int64_t i1) {
      const F g = f;  // local copies, as in map_unary
      const T* const as = ap;
      const T* const bs = bp;
      T* const ys = yp;
      for (int64_t i = i0; i < i1; ++i)
        ys[i] = g(as[i], bs[i]);
    });
    return;
  }
  // Broadcasting: the output's first axis is split into slices, each a loop nest of its own.
  const Shape& out = y.shape();
  const Shape sa = broadcast_strides(a.shape(), out), sb = broadcast_strides(b.shape(), out),
              sy = contiguous_strides(out);
  const int64_t rows = out.empty() ? 1 : out[0];
  const Shape inner(out.begin() + (out.empty() ? 0 : 1), out.end());
  const auto nest = make_loop_nest<3>(inner, {Shape(sa.begin() + (out.empty() ? 0 : 1), sa.end()),
                                              Shape(sb.begin() + (out.empty() ? 0 : 1), sb.end()),
                                              Shape(sy.begin() + (out.empty() ? 0 : 1), sy.end())});
  const int64_t row_elems = rows == 0 ? 0 : y.numel() / rows;
  const int64_t rows_per_task = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, row_elems));
  const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  parallel_for(tasks > 1 ? max_threads() : 1, tasks, [&](int64_t t) {
    for (int64_t r = t * rows_per_task; r < std::min(rows, (t + 1) * rows_per_task); ++r) {
      const int64_t oa = out.empty() ? 0 : r * sa[0], ob = out.empty() ? 0 : r * sb[0],
                    oy = out.empty() ? 0 : r * sy[0];
      run_loop_nest<3>(
          nest, [&](const std::array<int64_t, 3>& o, int64_t n, const std::array<int64_t, 3>& s) {
            const T* ai = ap + oa + o[0];
            const T* bi = bp + ob + o[1];
            T* yi = yp + oy + o[2];
            for (int64_t i = 0; i < n; ++i)
              yi[i * s[2]] = f(ai[i * s[0]], bi[i * s[1]]);
          });
    }
  });
}

template <class T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  switch (op) {
    case BinaryOp::add:
      return map_binary<T>(a, b, y, [](T u, T v) { return u + v; });
    case BinaryOp::sub:
      return map_binary<T>(a, b, y, [](T u, T v) { return u - v; });
    case BinaryOp::mul:
      return map_binary<T>(a, b, y, [](T u, T v) { return u * v; });
    case BinaryOp::div:
      return map_binary<T>(a, b, y, [](T u, T v) { return u / v; });
  }
  TGRAD_FAIL("cpu backend: binary: unknown op ", static_cast<int>(op));
}

// Sums over contiguous runs go into kSumLanes partial sums in double, element i of a run into
// lane i % kSumLanes, added in lane order at the end: one chain of adds would wait on the add's
// latency at every element.
constexpr int kSumLanes = 8;

template <class T>
inline void add_run(const T* p, int64_t n, double (&lanes)[kSumLanes]) {
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l)
      lanes[l] += static_cast<double>(p[i + l]);
  for (int l = 0; i < n; ++i, ++l)
    lanes[l] += static_cast<double>(p[i]);
}

inline double lanes_total(const double (&lanes)[kSumLanes]) {
  double total = lanes[0];
  for (int l = 1; l < kSumLanes; ++l)
    total += lanes[l];
  return total;
}

// sum_to's order, fixed by the shapes alone, in double. With one output only (a full sum), the
// input is cut into blocks of kGrain, each summed in lanes (above), whose totals are then added
// in block order. Otherwise outputs are cut into blocks of consecutive elements, one task each.
// Where the summed axes end in x's last axis (a channel sum over (N, C, H, W), say), each output
// sums its contiguous runs, in row-major order, in lanes. Otherwise each output adds its inputs
// one by one in x's row-major order: the task walks the summed axes once and, for every summed
// position, adds into each output of its block.
template <class T>
void sum_to_typed(const T* xp, const Shape& in, T* yp, const Shape& out) {
  const int64_t outputs = numel_of(out);
  const int64_t inputs = numel_of(in);
  if (inputs == 0 || outputs == 0) {
    std::fill_n(yp, outputs, T(0));
    return;
  }
  const int64_t per_output = inputs / outputs;
  if (outputs == 1) {
    const int64_t blocks = (inputs + kGrain - 1) / kGrain;
    std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
    for_blocks(inputs, [&](int64_t i0, int64_t i1) {
      double lanes[kSumLanes] = {};
      add_run(xp + i0, i1 - i0, lanes);
      partial[static_cast<size_t>(i0 / kGrain)] = lanes_total(lanes);
    });
    double total = 0.0;
    for (double v : partial)
      total += v;
    yp[0] = static_cast<T>(total);
    return;
  }
  // The summed axes (x's size, y's size 1) form one loop nest; the kept ones give each output's
  // offset in x.
  const Shape xs = contiguous_strides(in);
  Shape summed_sizes, summed_strides, kept_sizes, kept_strides;
  for (size_t d = 0; d < in.size(); ++d) {
    if (out[d] == 1 && in[d] != 1) {
      summed_sizes.push_back(in[d]);
      summed_strides.push_back(xs[d]);
    } else {
      kept_sizes.push_back(in[d]);
      kept_strides.push_back(xs[d]);
    }
  }
  const auto nest = make_loop_nest<1>(summed_sizes, {summed_strides});
  const bool contiguous_runs = nest.strides[0].back() == 1 && nest.sizes.back() >= kSumLanes;
  const int64_t block = std::clamp<int64_t>(kGrain / std::max<int64_t>(1, per_output), 1, 4096);
  const int64_t tasks = (outputs + block - 1) / block;
  parallel_for(
      tasks > 1 && inputs > kGrain ? max_threads() : 1, tasks,
      [&] { return std::pair<std::vector<int64_t>, std::vector<double>>(); },
      [&](std::pair<std::vector<int64_t>, std::vector<double>>& scratch, int64_t t) {
        const int64_t j0 = t * block, len = std::min(block, outputs - j0);
        // Named references, not a structured binding: clang before 16 (the fuzz build) cannot
        // capture a binding in the lambda below.
        std::vector<int64_t>& offsets = scratch.first;
        std::vector<double>& acc = scratch.second;
        offsets.assign(static_cast<size_t>(len), 0);
        acc.assign(static_cast<size_t>(len), 0.0);
        // x offset of output j: its kept coordinates (row-major in y's order) times x's strides.
        for (int64_t k = 0; k < len; ++k) {
          int64_t rest = j0 + k, off = 0;
          for (size_t d = kept_sizes.size(); d-- > 0;) {
            off += rest % kept_sizes[d] * kept_strides[d];
            rest /= kept_sizes[d];
          }
          offsets[static_cast<size_t>(k)] = off;
        }
        if (contiguous_runs) {
          for (int64_t k = 0; k < len; ++k) {
            double lanes[kSumLanes] = {};
            const T* xk = xp + offsets[static_cast<size_t>(k)];
            run_loop_nest<1>(nest,
                             [&](const std::array<int64_t, 1>& o, int64_t n,
                                 const std::array<int64_t, 1>&) { add_run(xk + o[0], n, lanes); });
            yp[j0 + k] = static_cast<T>(lanes_total(lanes));
          }
          return;
        }
        run_loop_nest<1>(
            nest, [&](const std::array<int64_t, 1>& o, int64_t n, const std::array<int64_t, 1>& s) {
              for (int64_t i = 0; i < n; ++i) {
                const T* xi = xp + o[0] + i * s[0];
                for (int64_t k = 0; k < len; ++k)
                  acc[static_cast<size_t>(k)] +=
                      static_cast<double>(xi[offsets[static_cast<size_t>(k)]]);
              }
            });
        for (int64_t k = 0; k < len; ++k)
          yp[j0 + k] = static_cast<T>(acc[static_cast<size_t>(k)]);
      });
}

}  // namespace

void fill(Tensor& y, double value) {
  dispatch_all(y.dtype(), [&]<class T>() {
    T* yp = data<T>(y);
    const T v = static_cast<T>(value);
    for_blocks(y.numel(), [&](int64_t i0, int64_t i1) { std::fill(yp + i0, yp + i1, v); });
  });
}

void cast(const Tensor& x, Tensor& y) {
  TGRAD_CHECK(x.shape() == y.shape(), "cpu backend: cast: x shape ", x.shape(),
              " differs from y shape ", y.shape());
  dispatch_all(x.dtype(), [&]<class From>() {
    dispatch_all(y.dtype(), [&]<class To>() {
      const From* xp = data<From>(x);
      To* yp = data<To>(y);
      for_blocks(y.numel(), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          yp[i] = static_cast<To>(xp[i]);
      });
    });
  });
}

void unary(UnaryOp op, double p, const Tensor& x, Tensor& y) {
  TGRAD_CHECK(x.shape() == y.shape(), "cpu backend: unary ", unary_op_name(op), ": x shape ",
              x.shape(), " differs from y shape ", y.shape());
  dispatch_floating(y.dtype(), [&]<class T>() { unary_typed<T>(op, static_cast<T>(p), x, y); });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  check_broadcastable(a, y, binary_op_name(op), "a", "y");
  check_broadcastable(b, y, binary_op_name(op), "b", "y");
  dispatch_floating(y.dtype(), [&]<class T>() { binary_typed<T>(op, a, b, y); });
}

void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
               const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out,
               Tensor* vmax_out) {
  dispatch_floating(p.dtype(), [&]<class T>() {
    // Each coefficient rounded to T once, as the elementwise ops the update replaces did.
    const T beta1 = static_cast<T>(s.beta1), c1 = static_cast<T>(s.one_minus_beta1);
    const T beta2 = static_cast<T>(s.beta2), c2 = static_cast<T>(s.one_minus_beta2);
    const T wd = static_cast<T>(s.coupled_weight_decay), scale = static_cast<T>(s.param_scale);
    const T inv_bc2 = static_cast<T>(s.inv_bias_correction2_sqrt), eps = static_cast<T>(s.eps);
    const T neg_step = static_cast<T>(s.neg_step_size);
    const bool coupled = s.coupled_weight_decay != 0.0;
    const T *pp = data<T>(p), *gp = data<T>(g), *mp = data<T>(m), *vp = data<T>(v);
    const T* vmax_p = vmax != nullptr ? data<T>(*vmax) : nullptr;
    T *po = data<T>(p_out), *mo = data<T>(m_out), *vo = data<T>(v_out);
    T* vmax_o = s.amsgrad ? data<T>(*vmax_out) : nullptr;
    // One loop per block, on local copies of the coefficients and pointers (see map_unary), its
    // AMSGrad step compiled in or out: it vectorises.
    const auto update = [&]<bool kAmsgrad>(int64_t i0, int64_t i1) {
      const T b1 = beta1, k1 = c1, b2 = beta2, k2 = c2, w = wd, sc = scale, ib = inv_bc2, e = eps,
              ns = neg_step;
      const T *const ps = pp, *const gs = gp, *const ms = mp, *const vs = vp, *const xs = vmax_p;
      T *const pd = po, *const md = mo, *const vd = vo, *const xd = vmax_o;
      const bool cw = coupled;
      // Each element reads and writes index i only (an output is its input's own tensor or
      // another one, never a shifted view), so no iteration depends on another; the compiler
      // cannot check that for so many pointers at run time and would not vectorise.
#if defined(__GNUC__) && !defined(__clang__)  // Clang does not know the pragma
#pragma GCC ivdep
#endif
      for (int64_t i = i0; i < i1; ++i) {
        const T gi = cw ? gs[i] + ps[i] * w : gs[i];
        const T mi = ms[i] * b1 + gi * k1;
        const T vi = vs[i] * b2 + (gi * gi) * k2;
        T second = vi;
        if constexpr (kAmsgrad) {
          if (xs != nullptr && !(xs[i] < vi)) second = xs[i];
          xd[i] = second;
        }
        pd[i] = ps[i] * sc + (mi / (std::sqrt(second) * ib + e)) * ns;
        md[i] = mi;
        vd[i] = vi;
      }
    };
    for_blocks(p.numel(), [&](int64_t i0, int64_t i1) {
      if (vmax_o != nullptr) {
        update.template operator()<true>(i0, i1);
      } else {
        update.template operator()<false>(i0, i1);
      }
    });
  });
}

void sum_to(const Tensor& x, Tensor& y) {
  check_broadcastable(y, x, "sum_to", "y", "x");
  dispatch_floating(
      y.dtype(), [&]<class T>() { sum_to_typed<T>(data<T>(x), x.shape(), data<T>(y), y.shape()); });
}

}  // namespace tgrad::cpu::TGRAD_CPU_ISA_NS
