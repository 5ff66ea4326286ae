// CudaBackend: device discovery, memory entry points (caching allocator, copies), the cuBLAS
// handles, and cuda_backend(), the process-lifetime instance core looks up. Kernels live in the
// per-family files listed in kernels.h.
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <new>
#include <utility>

#include "cuda/check.h"
#include "cuda/cuda_util.h"
#include "cuda/kernels.h"

namespace tgrad {

namespace cuda {

namespace {

// 0 when there is no driver or no device: never throws, so cuda_is_available() is always safe.
int query_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

// Holds a T that is never destroyed: tensors in static storage may be freed after main returns,
// and their deleters must still find the allocator alive.
template <class T>
class NeverDestroyed {
 public:
  NeverDestroyed() { ::new (static_cast<void*>(&storage_)) T(); }
  NeverDestroyed(const NeverDestroyed&) = delete;
  NeverDestroyed& operator=(const NeverDestroyed&) = delete;
  T* get() { return std::launder(reinterpret_cast<T*>(&storage_)); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace

CublasHandle::CublasHandle(int device) {
  DeviceGuard guard(device);
  TGRAD_CUBLAS_CHECK(cublasCreate(&handle_));
  // Default math: no TF32 for float32 (cuBLAS only uses TF32 when asked), deterministic results
  // on the default stream.
  const cublasStatus_t status = cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);
    TGRAD_CUBLAS_CHECK(status);
  }
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

CudaBackend::CudaBackend() : device_count_(query_device_count()), allocator_(device_count_) {
  cublas_.resize(static_cast<size_t>(device_count_));
}

void CudaBackend::check_device(const Device& device, const char* fn) const {
  TGRAD_CHECK(device.is_cuda() && device.index() >= 0 && device.index() < device_count_,
              "CUDA backend ", fn, ": device ", device, " is not available (", device_count_,
              " CUDA device(s) visible)");
}

cublasHandle_t CudaBackend::cublas(int device) {
  std::lock_guard<std::mutex> lock(cublas_mutex_);
  auto& handle = cublas_[static_cast<size_t>(device)];
  if (!handle) handle = std::make_unique<CublasHandle>(device);
  return handle->get();
}

std::shared_ptr<void> CudaBackend::allocate(int64_t nbytes, Device device) {
  check_device(device, "allocate");
  return allocator_.allocate(nbytes, device.index());
}

void CudaBackend::copy_from_host(void* dst, const void* src, int64_t nbytes, Device device) {
  check_device(device, "copy_from_host");
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  TGRAD_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(nbytes), cudaMemcpyHostToDevice));
}

void CudaBackend::copy_to_host(void* dst, const void* src, int64_t nbytes, Device device) {
  check_device(device, "copy_to_host");
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  TGRAD_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(nbytes), cudaMemcpyDeviceToHost));
}

void CudaBackend::copy(void* dst, const void* src, int64_t nbytes, Device device) {
  check_device(device, "copy");
  if (nbytes == 0) return;
  DeviceGuard guard(device);
  TGRAD_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(nbytes), cudaMemcpyDeviceToDevice));
}

void CudaBackend::synchronize(Device device) {
  check_device(device, "synchronize");
  DeviceGuard guard(device);
  TGRAD_CUDA_CHECK(cudaDeviceSynchronize());
}

MemoryStats CudaBackend::memory_stats(Device device) {
  check_device(device, "memory_stats");
  return allocator_.stats(device.index());
}

void CudaBackend::empty_cache(Device device) {
  check_device(device, "empty_cache");
  allocator_.empty_cache(device.index());
}

void CudaBackend::set_memory_limit(Device device, int64_t bytes) {
  check_device(device, "set_memory_limit");
  allocator_.set_memory_limit(device.index(), bytes);
}

int64_t CudaBackend::memory_limit(Device device) {
  check_device(device, "memory_limit");
  return allocator_.memory_limit(device.index());
}

void CudaBackend::fill(Tensor& y, double value) {
  cuda::fill(y, value);
}
void CudaBackend::cast(const Tensor& x, Tensor& y) {
  cuda::cast(x, y);
}
void CudaBackend::unary(UnaryOp op, double p, const Tensor& x, Tensor& y) {
  cuda::unary(op, p, x, y);
}
void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  cuda::binary(op, a, b, y);
}
void CudaBackend::adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
                            const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out,
                            Tensor& v_out, Tensor* vmax_out) {
  check_device(p.device(), "adam_step");
  check_adam_step(s, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out);
  cuda::adam_step(s, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out);
}
void CudaBackend::sum_to(const Tensor& x, Tensor& y) {
  cuda::sum_to(allocator_, x, y);
}

void CudaBackend::norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                               const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) {
  check_device(x.device(), "norm_forward");
  cuda::norm_forward(allocator_, ns, x, eps, w, b, y, mean, var);
}
void CudaBackend::norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x,
                                const Tensor& mean, const Tensor& var, double eps, const Tensor* w,
                                Tensor* dx, Tensor* dw, Tensor* db) {
  check_device(x.device(), "norm_backward");
  cuda::norm_backward(allocator_, ns, dy, x, mean, var, eps, w, dx, dw, db);
}
void CudaBackend::norm_running_stats(const Tensor& mean, const Tensor& var, double momentum,
                                     double unbias, Tensor& running_mean, Tensor& running_var,
                                     Tensor* num_batches_tracked) {
  check_device(mean.device(), "norm_running_stats");
  cuda::norm_running_stats(mean, var, momentum, unbias, running_mean, running_var,
                           num_batches_tracked);
}

void CudaBackend::strided_gather(const Tensor& x, const StridedWindow& window, Tensor& y) {
  check_device(y.device(), "strided_gather");
  cuda::strided_gather(x, window, y);
}
void CudaBackend::strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& window) {
  check_device(y.device(), "strided_scatter");
  cuda::strided_scatter(x, y, window);
}
void CudaBackend::index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                               Tensor& y) {
  check_device(y.device(), "index_gather");
  cuda::index_gather(x, outer, inner, index, y);
}
void CudaBackend::index_add(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                            Tensor& y) {
  check_device(y.device(), "index_add");
  cuda::index_add(allocator_, x, outer, inner, index, y);
}
void CudaBackend::reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner,
                             Tensor& values, Tensor& indices) {
  check_device(x.device(), "reduce_dim");
  cuda::reduce_dim(op, x, outer, inner, values, indices);
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a,
                         bool transpose_b) {
  check_device(y.device(), "matmul");
  cuda::matmul(cublas(y.device().index()), a, b, y, transpose_a, transpose_b);
}

void CudaBackend::conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                         const Tensor* b, Tensor& y) {
  cuda::conv_transpose_forward(allocator_, g, x, w, b, y);
}
void CudaBackend::conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w,
                                       Tensor& dx) {
  cuda::conv_transpose_dgrad(allocator_, g, dy, w, dx);
}
void CudaBackend::conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                                       Tensor& dw) {
  cuda::conv_transpose_wgrad(allocator_, g, x, dy, dw);
}
void CudaBackend::conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db) {
  cuda::conv_transpose_bias_grad(allocator_, g, dy, db);
}

}  // namespace cuda

Backend* cuda_backend() {
  static cuda::NeverDestroyed<cuda::CudaBackend> instance;
  return instance.get();
}

}  // namespace tgrad
