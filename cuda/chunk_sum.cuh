// The fixed-order sum of chunked partial results: the wgrad kernels that cut the positions into
// chunks (direct, thin) write one partial weight gradient per chunk, and this adds them in chunk
// order in float64, so the bits depend on the shape only, not on the GPU or the run. Private to
// cuda/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tgrad::cuda {

// out[e] = sum_{k < chunks} partials[k * elements + e], in order of k, in float64.
template <class T>
__global__ void sum_chunks_in_order(const T* __restrict__ partials, T* __restrict__ out,
                                    int64_t elements, int64_t chunks) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < elements;
       e += int64_t{gridDim.x} * blockDim.x) {
    double acc = 0.0;
    for (int64_t k = 0; k < chunks; ++k)
      acc += static_cast<double>(partials[k * elements + e]);
    out[e] = static_cast<T>(acc);
  }
}

}  // namespace tgrad::cuda
