// CudaBackend: the Backend of CUDA devices. It owns the caching allocator and one cuBLAS handle
// per device, and forwards every kernel entry point to its kernel family's launcher (kernels.h).
// Private to cuda/; core reaches it only through cuda_backend().
#pragma once

#include <cublas_v2.h>

#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "cuda/allocator.h"

namespace tgrad::cuda {

// A cuBLAS handle, created on its device and destroyed with it.
class CublasHandle {
 public:
  explicit CublasHandle(int device);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend();

  std::string name() const override { return "cuda"; }
  int device_count() const override { return device_count_; }

  std::shared_ptr<void> allocate(int64_t nbytes, Device device) override;
  void copy_from_host(void* dst, const void* src, int64_t nbytes, Device device) override;
  void copy_to_host(void* dst, const void* src, int64_t nbytes, Device device) override;
  void copy(void* dst, const void* src, int64_t nbytes, Device device) override;
  void synchronize(Device device) override;
  MemoryStats memory_stats(Device device) override;
  void empty_cache(Device device) override;
  void set_memory_limit(Device device, int64_t bytes) override;
  int64_t memory_limit(Device device) override;

  void fill(Tensor& y, double value) override;
  void cast(const Tensor& x, Tensor& y) override;
  void unary(UnaryOp op, double p, const Tensor& x, Tensor& y) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) override;
  void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
                 const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out,
                 Tensor* vmax_out) override;
  void sum_to(const Tensor& x, Tensor& y) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a,
              bool transpose_b) override;

  void norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                    const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) override;
  void norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x, const Tensor& mean,
                     const Tensor& var, double eps, const Tensor* w, Tensor* dx, Tensor* dw,
                     Tensor* db) override;
  void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum, double unbias,
                          Tensor& running_mean, Tensor& running_var,
                          Tensor* num_batches_tracked) override;

  void strided_gather(const Tensor& x, const StridedWindow& window, Tensor& y) override;
  void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& window) override;
  void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                    Tensor& y) override;
  void index_add(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                 Tensor& y) override;
  void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner, Tensor& values,
                  Tensor& indices) override;

  void conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                              const Tensor* b, Tensor& y) override;
  void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w,
                            Tensor& dx) override;
  void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                            Tensor& dw) override;
  void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db) override;

  // The device's handle (created on first use); the conv GEMM path borrows it too.
  cublasHandle_t cublas(int device);

 private:
  void check_device(const Device& device, const char* fn) const;

  int device_count_ = 0;
  CachingAllocator allocator_;
  std::mutex cublas_mutex_;
  std::vector<std::unique_ptr<CublasHandle>> cublas_;  // per device, created on first use
};

}  // namespace tgrad::cuda
