// The launchers of the CUDA backend's kernel families, one .cu file each (elementwise.cu,
// reduction.cu, matmul.cu, conv_transpose_{fwd,dgrad,wgrad}.cu). Each checks its launches and
// runs on the legacy default stream of the tensors' device. Private to cuda/.
#pragma once

#include <cublas_v2.h>

#include "core/backend.h"
#include "cuda/allocator.h"

namespace tgrad::cuda {

// elementwise.cu
void fill(Tensor& y, double value);
void cast(const Tensor& x, Tensor& y);
void unary(UnaryOp op, double p, const Tensor& x, Tensor& y);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
               const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out,
               Tensor* vmax_out);

// norm.cu: see the Backend methods of the same names. The split path borrows its partial sums.
void norm_forward(CachingAllocator& alloc, const NormShape& ns, const Tensor& x, double eps,
                  const Tensor* w, const Tensor* b, Tensor& y, Tensor& mean, Tensor& var);
void norm_backward(CachingAllocator& alloc, const NormShape& ns, const Tensor& dy,
                   const Tensor& x, const Tensor& mean, const Tensor& var, double eps,
                   const Tensor* w, Tensor* dx, Tensor* dw, Tensor* db);
void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum, double unbias,
                        Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked);

// reduction.cu: y = x summed over the axes where y has size 1 (same rank). Deterministic.
void sum_to(CachingAllocator& alloc, const Tensor& x, Tensor& y);
// The same with x and y seen with other (equal-numel) shapes, e.g. dy as (N, C, H*W) -> (1, C, 1).
void sum_to_shape(CachingAllocator& alloc, const Tensor& x, const Shape& x_shape, Tensor& y,
                  const Shape& y_shape);

// indexing.cu: see the Backend methods of the same names. index_add borrows its CSR buffer.
void strided_gather(const Tensor& x, const StridedWindow& window, Tensor& y);
void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& window);
void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index, Tensor& y);
void index_add(CachingAllocator& alloc, const Tensor& x, int64_t outer, int64_t inner,
               const Tensor& index, Tensor& y);
void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner, Tensor& values,
                Tensor& indices);

// matmul.cu
void matmul(cublasHandle_t handle, const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a,
            bool transpose_b);

// conv_transpose_fwd.cu, conv_transpose_dgrad.cu, conv_transpose_wgrad.cu
// The allocator lends the fast paths their workspace (packed weights, split-K partials).
void conv_transpose_forward(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& x,
                            const Tensor& w, const Tensor* b, Tensor& y);
void conv_transpose_dgrad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& dy,
                          const Tensor& w, Tensor& dx);
void conv_transpose_wgrad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& x,
                          const Tensor& dy, Tensor& dw);
void conv_transpose_bias_grad(CachingAllocator& alloc, const ConvGeometry& g, const Tensor& dy,
                              Tensor& db);

}  // namespace tgrad::cuda
