// The 32-bit per-plane geometry and the tap walk shared by the GEMM path's im2col/col2im kernels
// and the depthwise kernels. Their rules (fits_plane32 in conv_path_rules.h) keep every per-axis
// size under 2^30 and every plane under 2^31 elements, so the arithmetic inside a plane (and the
// divisions, which dominate these memory-bound kernels in 64 bits) is 32-bit. Private to cuda/.
#pragma once

#include <cstdint>

#include "cuda/conv_params.h"
#include "cuda/conv_path_rules.h"

namespace tgrad::cuda {

struct Plane32 {
  int Hi, Wi, Ho, Wo, kH, kW, sH, sW, pH, pW, dH, dW;
};

inline Plane32 plane32(const ConvParams& p) {
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  return {i(p.Hi), i(p.Wi), i(p.Ho), i(p.Wo), i(p.kH), i(p.kW),
          i(p.sH), i(p.sW), i(p.pH), i(p.pW), i(p.dH), i(p.dW)};
}

// Calls f(k, i) for each tap k of one axis, ascending, that output index o gathers from: input
// index i = (o + pad - k*dil) / stride where the division is exact and 0 <= i < in. The walk
// stops at the first tap left of the input (the offset only falls as k grows).
template <class F>
__device__ inline void for_each_gather_tap(int o, int taps, int pad, int dil, int stride, int in,
                                           F&& f) {
  int t = o + pad;
  for (int k = 0; k < taps && t >= 0; ++k, t -= dil) {
    if (t % stride == 0) {
      const int i = t / stride;
      if (i < in) f(k, i);
    }
  }
}

// The taps of one axis that output index o gathers from (forward): taps k0 + j*k_step for j < n,
// reading input index i0 - j*i_step. The taps whose offset o + pad - k*dil divides by the stride
// step by k_step = stride / gcd(dil, stride), and those landing inside the input form a run of
// consecutive k, so together they are one arithmetic run.
struct TapRun {
  int k0, n, i0;
};
__device__ inline TapRun gather_run(int o, int taps, int pad, int dil, int stride, int in) {
  TapRun r{0, 0, 0};
  for_each_gather_tap(o, taps, pad, dil, stride, in, [&](int k, int i) {
    if (r.n++ == 0) {
      r.k0 = k;
      r.i0 = i;
    }
  });
  return r;
}

// The step of a tap run and of its input index (see TapRun), per axis.
struct RunSteps {
  int k_h, i_h, k_w, i_w;
};
__host__ __device__ inline int gcd_int(int a, int b) {
  while (b != 0) {
    const int t = a % b;
    a = b;
    b = t;
  }
  return a;
}
__host__ __device__ inline RunSteps run_steps(const Plane32& q) {
  const int kh = q.sH / gcd_int(q.dH, q.sH), kw = q.sW / gcd_int(q.dW, q.sW);
  return {kh, kh * q.dH / q.sH, kw, kw * q.dW / q.sW};
}

}  // namespace tgrad::cuda
