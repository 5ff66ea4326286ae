// The 32-bit per-plane geometry and the tap walk shared by the GEMM path's im2col/col2im kernels
// and the depthwise kernels. Their rules (fits_plane32 in conv_path_rules.h) keep every per-axis
// size under 2^30 and every plane under 2^31 elements, so the arithmetic inside a plane (and the divisions, which dominate
// these memory-bound kernels in 64 bits) is 32-bit. Private to cuda/.
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

}  // namespace tgrad::cuda
