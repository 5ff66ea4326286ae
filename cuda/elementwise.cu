// Elementwise kernels: fill, cast, unary y[i] = f(x[i], p), binary y[i] = a[ia] (op) b[ib], and
// the optimizer's fused Adam update. Binary broadcasts: for y's coordinates (c0..c_{r-1}),
// ia = sum_k c_k * sa_k where sa_k is a's contiguous stride, or 0 where a's size is 1 (likewise
// ib). Grid-stride loops, int64 indices.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad::cuda {

namespace {

template <class T>
__global__ void fill_kernel(T* y, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = value;
  }
}

template <class From, class To>
__global__ void cast_kernel(const From* x, To* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = static_cast<To>(x[i]);
  }
}

// The float and double forms of the math functions (no implicit promotion of float to double).
__device__ inline float m_exp(float x) {
  return expf(x);
}
__device__ inline double m_exp(double x) {
  return ::exp(x);
}
__device__ inline float m_log(float x) {
  return logf(x);
}
__device__ inline double m_log(double x) {
  return ::log(x);
}
__device__ inline float m_abs(float x) {
  return fabsf(x);
}
__device__ inline double m_abs(double x) {
  return ::fabs(x);
}
__device__ inline float m_sqrt(float x) {
  return sqrtf(x);
}
__device__ inline double m_sqrt(double x) {
  return ::sqrt(x);
}
__device__ inline float m_tanh(float x) {
  return tanhf(x);
}
__device__ inline double m_tanh(double x) {
  return ::tanh(x);
}
__device__ inline float m_sin(float x) {
  return sinf(x);
}
__device__ inline double m_sin(double x) {
  return ::sin(x);
}
__device__ inline float m_cos(float x) {
  return cosf(x);
}
__device__ inline double m_cos(double x) {
  return ::cos(x);
}
__device__ inline float m_pow(float x, float p) {
  return powf(x, p);
}
__device__ inline double m_pow(double x, double p) {
  return ::pow(x, p);
}

template <class T>
__device__ inline T apply_unary(UnaryOp op, T x, T p) {
  const T zero = 0, one = 1;
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::exp:
      return m_exp(x);
    case UnaryOp::log:
      return m_log(x);
    case UnaryOp::abs:
      return m_abs(x);
    case UnaryOp::sign:
      return x > zero ? one : (x < zero ? -one : (x == zero ? zero : x));
    case UnaryOp::sqrt:
      return m_sqrt(x);
    case UnaryOp::relu:
      return x < zero ? zero : x;  // NaN passes through, as in PyTorch
    case UnaryOp::leaky_relu:
      return x > zero ? x : p * x;
    case UnaryOp::step:
      return x > zero ? one : zero;
    case UnaryOp::leaky_step:
      return x > zero ? one : p;
    case UnaryOp::sigmoid: {
      // e^-|x| never overflows: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) for x < 0.
      const T e = m_exp(-m_abs(x));
      return x >= zero ? one / (one + e) : e / (one + e);
    }
    case UnaryOp::tanh:
      return m_tanh(x);
    case UnaryOp::pow:
      return m_pow(x, p);
    case UnaryOp::add_scalar:
      return x + p;
    case UnaryOp::mul_scalar:
      return x * p;
    case UnaryOp::rsub_scalar:
      return p - x;
    case UnaryOp::rdiv_scalar:
      return p / x;
    case UnaryOp::sin:
      return m_sin(x);
    case UnaryOp::cos:
      return m_cos(x);
    case UnaryOp::clamp_min:
      return x < p ? p : x;
    case UnaryOp::clamp_max:
      return x > p ? p : x;
    case UnaryOp::ge_step:
      return x >= p ? one : zero;
    case UnaryOp::le_step:
      return x <= p ? one : zero;
  }
  return x;  // unreachable: the launcher checks the op
}

template <class T>
__global__ void unary_kernel(UnaryOp op, T p, const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = apply_unary(op, x[i], p);
  }
}

template <class T>
__device__ inline T apply_binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
  }
  return a;  // unreachable: the launcher checks the op
}

// y's sizes and the element strides of a and b in y's coordinates (0 on a broadcast axis).
struct BroadcastStrides {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t a_stride[kMaxRank] = {};
  int64_t b_stride[kMaxRank] = {};
};

// kSameShape: a, b and y have one shape, so every index is i. Otherwise each index is worked out
// from i axis by axis, in Index arithmetic: 32-bit when y has fewer than 2^31 elements (a 64-bit
// division costs several times a 32-bit one, and these divisions are most of the kernel's work).
template <class T, bool kSameShape, class Index>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* y, Index n,
                              BroadcastStrides s) {
  const Index step = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) +
                 static_cast<Index>(threadIdx.x);
       i < n; i += step) {
    if constexpr (kSameShape) {
      y[i] = apply_binary(op, a[i], b[i]);
    } else {
      Index rest = i, ia = 0, ib = 0;
      for (int k = s.rank - 1; k > 0; --k) {
        const Index size = static_cast<Index>(s.size[k]);
        const Index c = rest % size;
        rest /= size;
        ia += c * static_cast<Index>(s.a_stride[k]);
        ib += c * static_cast<Index>(s.b_stride[k]);
      }
      ia += rest * static_cast<Index>(s.a_stride[0]);  // the outermost coordinate is what is left
      ib += rest * static_cast<Index>(s.b_stride[0]);
      y[i] = apply_binary(op, a[ia], b[ib]);
    }
  }
}

// Drops y's size-1 axes and merges each axis into the next inner one where both operands walk the
// pair as one axis (a bias (1, C, 1, 1) added to (N, C, H, W) becomes three axes, N, C, H*W), so
// the kernel divides once per remaining axis. Keeps at least one axis.
BroadcastStrides collapse_axes(const BroadcastStrides& in) {
  BroadcastStrides out;
  for (int k = 0; k < in.rank; ++k) {
    if (in.size[k] == 1) continue;
    const int last = out.rank - 1;
    if (last >= 0 && out.a_stride[last] == in.a_stride[k] * in.size[k] &&
        out.b_stride[last] == in.b_stride[k] * in.size[k]) {
      out.size[last] *= in.size[k];
      out.a_stride[last] = in.a_stride[k];
      out.b_stride[last] = in.b_stride[k];
    } else {
      out.size[out.rank] = in.size[k];
      out.a_stride[out.rank] = in.a_stride[k];
      out.b_stride[out.rank] = in.b_stride[k];
      ++out.rank;
    }
  }
  if (out.rank == 0) {  // every size 1: one element
    out.rank = 1;
    out.size[0] = 1;
  }
  return out;
}

// AdamStep's coefficients, each rounded to T.
template <class T>
struct AdamCoefficients {
  T beta1, c1, beta2, c2, wd, scale, inv_bc2, eps, neg_step;
};

// One thread per element: three (amsgrad: four) reads and writes per element, one launch per
// parameter in place of the dozen the unfused update took. The products and sums are rounded
// one at a time (__fmul_rn / __fadd_rn never contract into FMAs) so that the update rounds as
// the CPU backend's loop does (built without FP contraction: ISO C++ mode).
template <class T>
__device__ inline T mul_rn(T a, T b) {
  if constexpr (sizeof(T) == 4) {
    return __fmul_rn(a, b);
  } else {
    return __dmul_rn(a, b);
  }
}
template <class T>
__device__ inline T add_rn(T a, T b) {
  if constexpr (sizeof(T) == 4) {
    return __fadd_rn(a, b);
  } else {
    return __dadd_rn(a, b);
  }
}

template <class T, bool kCoupled, bool kAmsgrad>
__global__ void adam_step_kernel(AdamCoefficients<T> c, const T* p, const T* g, const T* m,
                                 const T* v, const T* vmax, T* p_out, T* m_out, T* v_out,
                                 T* vmax_out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const T pi = p[i];
    T gi = g[i];
    if constexpr (kCoupled) gi = add_rn(gi, mul_rn(pi, c.wd));
    const T mi = add_rn(mul_rn(m[i], c.beta1), mul_rn(gi, c.c1));
    const T vi = add_rn(mul_rn(v[i], c.beta2), mul_rn(mul_rn(gi, gi), c.c2));
    T second = vi;
    if constexpr (kAmsgrad) {
      if (vmax != nullptr && !(vmax[i] < vi)) second = vmax[i];
      vmax_out[i] = second;
    }
    const T denom = add_rn(mul_rn(m_sqrt(second), c.inv_bc2), c.eps);
    p_out[i] = add_rn(mul_rn(pi, c.scale), mul_rn(mi / denom, c.neg_step));
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

bool is_unary_op(UnaryOp op) {
  return static_cast<int>(op) >= static_cast<int>(UnaryOp::neg) &&
         static_cast<int>(op) <= static_cast<int>(UnaryOp::le_step);
}

}  // namespace

void fill(Tensor& y, double value) {
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_all(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<grid_for(n), kThreads>>>(y.data_ptr<T>(), static_cast<T>(value), n);
    TGRAD_CUDA_CHECK_LAUNCH("fill_kernel");
  });
}

void cast(const Tensor& x, Tensor& y) {
  TGRAD_CHECK(x.numel() == y.numel(), "CUDA cast: ", x.numel(), " elements into ", y.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_all(x.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    dispatch_all(y.dtype(), [&](auto to_tag) {
      using To = decltype(to_tag);
      cast_kernel<From, To><<<grid_for(n), kThreads>>>(x.data_ptr<From>(), y.data_ptr<To>(), n);
      TGRAD_CUDA_CHECK_LAUNCH("cast_kernel");
    });
  });
}

void unary(UnaryOp op, double p, const Tensor& x, Tensor& y) {
  TGRAD_CHECK(is_unary_op(op), "CUDA unary: unknown op ", static_cast<int>(op));
  TGRAD_CHECK(x.numel() == y.numel(), "CUDA unary ", unary_op_name(op), ": ", x.numel(),
              " elements into ", y.numel());
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T>
        <<<grid_for(n), kThreads>>>(op, static_cast<T>(p), x.data_ptr<T>(), y.data_ptr<T>(), n);
    TGRAD_CUDA_CHECK_LAUNCH("unary_kernel");
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  TGRAD_CHECK(
      op == BinaryOp::add || op == BinaryOp::sub || op == BinaryOp::mul || op == BinaryOp::div,
      "CUDA binary: unknown op ", static_cast<int>(op));
  const Shape& ys = y.shape();
  const int rank = static_cast<int>(ys.size());
  TGRAD_CHECK(a.dim() == rank && b.dim() == rank, "CUDA binary ", binary_op_name(op),
              ": operands of shapes ", a.shape(), " and ", b.shape(), " must have y's rank ", rank);
  BroadcastStrides s;
  s.rank = rank;
  int64_t a_stride = 1, b_stride = 1;
  for (int k = rank - 1; k >= 0; --k) {
    const int64_t as = a.shape()[k], bs = b.shape()[k];
    TGRAD_CHECK((as == ys[k] || as == 1) && (bs == ys[k] || bs == 1), "CUDA binary ",
                binary_op_name(op), ": shapes ", a.shape(), " and ", b.shape(),
                " do not broadcast to ", ys);
    s.size[k] = ys[k];
    s.a_stride[k] = as == 1 ? 0 : a_stride;
    s.b_stride[k] = bs == 1 ? 0 : b_stride;
    a_stride *= as;
    b_stride *= bs;
  }
  const int64_t n = y.numel();
  if (n == 0) return;
  const bool same_shape = a.shape() == ys && b.shape() == ys;
  DeviceGuard guard(y.device());
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // The grid-stride loop's last step may pass n by up to one grid of threads, so the 32-bit
    // form needs that much headroom below 2^31.
    const bool fits_32 = n + int64_t{kMaxBlocks} * kThreads < (int64_t{1} << 31);
    if (same_shape) {
      binary_kernel<T, true, int64_t>
          <<<grid_for(n), kThreads>>>(op, a.data_ptr<T>(), b.data_ptr<T>(), y.data_ptr<T>(), n, s);
    } else if (fits_32) {
      binary_kernel<T, false, int32_t>
          <<<grid_for(n), kThreads>>>(op, a.data_ptr<T>(), b.data_ptr<T>(), y.data_ptr<T>(),
                                      static_cast<int32_t>(n), collapse_axes(s));
    } else {
      binary_kernel<T, false, int64_t><<<grid_for(n), kThreads>>>(
          op, a.data_ptr<T>(), b.data_ptr<T>(), y.data_ptr<T>(), n, collapse_axes(s));
    }
    TGRAD_CUDA_CHECK_LAUNCH("binary_kernel");
  });
}

void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
               const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out,
               Tensor* vmax_out) {
  const int64_t n = p.numel();
  if (n == 0) return;
  DeviceGuard guard(p.device());
  dispatch_float(p.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const AdamCoefficients<T> c{static_cast<T>(s.beta1),
                                static_cast<T>(s.one_minus_beta1),
                                static_cast<T>(s.beta2),
                                static_cast<T>(s.one_minus_beta2),
                                static_cast<T>(s.coupled_weight_decay),
                                static_cast<T>(s.param_scale),
                                static_cast<T>(s.inv_bias_correction2_sqrt),
                                static_cast<T>(s.eps),
                                static_cast<T>(s.neg_step_size)};
    const T* vmax_p = vmax != nullptr ? vmax->data_ptr<T>() : nullptr;
    T* vmax_o = vmax_out != nullptr ? vmax_out->data_ptr<T>() : nullptr;
    auto launch = [&](auto kernel) {
      kernel<<<grid_for(n), kThreads>>>(c, p.data_ptr<T>(), g.data_ptr<T>(), m.data_ptr<T>(),
                                        v.data_ptr<T>(), vmax_p, p_out.data_ptr<T>(),
                                        m_out.data_ptr<T>(), v_out.data_ptr<T>(), vmax_o, n);
    };
    const bool coupled = s.coupled_weight_decay != 0.0;
    if (coupled && s.amsgrad) {
      launch(adam_step_kernel<T, true, true>);
    } else if (coupled) {
      launch(adam_step_kernel<T, true, false>);
    } else if (s.amsgrad) {
      launch(adam_step_kernel<T, false, true>);
    } else {
      launch(adam_step_kernel<T, false, false>);
    }
    TGRAD_CUDA_CHECK_LAUNCH("adam_step_kernel");
  });
}

}  // namespace tgrad::cuda
