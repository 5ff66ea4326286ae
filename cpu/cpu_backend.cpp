// CpuBackend: the default backend, on host memory (cpu/allocator.h: aligned blocks, the cap, the
// cache of large blocks); kernels live in the other files of cpu/ (see kernels.h). cpu_backend()
// returns the one instance (a function-local static).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include <sys/sysinfo.h>

#include "core/backend.h"
#include "cpu/allocator.h"
#include "cpu/kernels.h"
#include "cpu/parallel.h"

namespace tgrad {
namespace {

// RAM + swap in bytes: no single allocation larger than this can succeed, so it is refused with
// a clear error up front (malloc of an absurd size aborts under AddressSanitizer, and Linux
// overcommit may hand out memory that later kills the process).
int64_t host_memory_bytes() {
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return std::numeric_limits<int64_t>::max();
  const auto unit = static_cast<int64_t>(info.mem_unit);
  const auto total = static_cast<int64_t>(info.totalram) + static_cast<int64_t>(info.totalswap);
  int64_t bytes = 0;
  return __builtin_mul_overflow(total, unit, &bytes) ? std::numeric_limits<int64_t>::max() : bytes;
}

// The most bytes of unused large blocks the allocator keeps (less on a machine with under 8 GiB).
constexpr int64_t kMaxCacheBytes = int64_t{1} << 30;

// The cache is on unless TGRAD_CPU_NO_CACHING is set (to anything but 0), or AddressSanitizer is
// watching: a block kept for reuse would hide a use after free from it.
bool caching_by_default() {
  constexpr bool kAsan = TGRAD_CPU_ASAN;
  const char* off = std::getenv("TGRAD_CPU_NO_CACHING");
  return !kAsan && (off == nullptr || *off == '\0' || std::strcmp(off, "0") == 0);
}

void check_cpu(Device device, const char* fn) {
  TGRAD_CHECK(device.is_cpu(), "cpu backend: ", fn, ": device ", device.str(), " is not the CPU");
}

void check_tensor(const Tensor& t, const char* fn, const char* arg) {
  TGRAD_CHECK(t.defined(), "cpu backend: ", fn, ": ", arg, " is undefined");
  TGRAD_CHECK(t.device().is_cpu(), "cpu backend: ", fn, ": ", arg, " is on ", t.device().str(),
              ", not the CPU");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* fn, const char* a_name,
                      const char* b_name) {
  TGRAD_CHECK(a.dtype() == b.dtype(), "cpu backend: ", fn, ": ", a_name, " is ", a.dtype(), " but ",
              b_name, " is ", b.dtype());
}

void check_bytes(int64_t nbytes, const char* fn) {
  TGRAD_CHECK(nbytes >= 0, "cpu backend: ", fn, ": nbytes=", nbytes, " must be non-negative");
}

class CpuBackend final : public Backend {
 public:
  CpuBackend()
      : allocator_(caching_by_default(), host_memory_bytes(),
                   std::min(kMaxCacheBytes, host_memory_bytes() / 8)) {}

  std::string name() const override { return "cpu"; }
  int device_count() const override { return 1; }

  std::shared_ptr<void> allocate(int64_t nbytes, Device device) override {
    check_cpu(device, "allocate");
    return allocator_.allocate(nbytes);
  }

  void copy_from_host(void* dst, const void* src, int64_t nbytes, Device device) override {
    copy_bytes(dst, src, nbytes, device, "copy_from_host");
  }
  void copy_to_host(void* dst, const void* src, int64_t nbytes, Device device) override {
    copy_bytes(dst, src, nbytes, device, "copy_to_host");
  }
  void copy(void* dst, const void* src, int64_t nbytes, Device device) override {
    copy_bytes(dst, src, nbytes, device, "copy");
  }
  void synchronize(Device device) override { check_cpu(device, "synchronize"); }

  MemoryStats memory_stats(Device device) override {
    check_cpu(device, "memory_stats");
    return allocator_.stats();
  }
  void empty_cache(Device device) override {
    check_cpu(device, "empty_cache");
    allocator_.empty_cache();
  }
  void set_memory_limit(Device device, int64_t bytes) override {
    check_cpu(device, "set_memory_limit");
    allocator_.set_memory_limit(bytes);
  }
  int64_t memory_limit(Device device) override {
    check_cpu(device, "memory_limit");
    return allocator_.memory_limit();
  }

  void fill(Tensor& y, double value) override {
    check_tensor(y, "fill", "y");
    cpu::fill(y, value);
  }
  void cast(const Tensor& x, Tensor& y) override {
    check_tensor(x, "cast", "x");
    check_tensor(y, "cast", "y");
    cpu::cast(x, y);
  }
  void unary(UnaryOp op, double p, const Tensor& x, Tensor& y) override {
    check_tensor(x, "unary", "x");
    check_tensor(y, "unary", "y");
    check_same_dtype(x, y, "unary", "x", "y");
    cpu::unary(op, p, x, y);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) override {
    check_tensor(a, "binary", "a");
    check_tensor(b, "binary", "b");
    check_tensor(y, "binary", "y");
    check_same_dtype(a, y, "binary", "a", "y");
    check_same_dtype(b, y, "binary", "b", "y");
    cpu::binary(op, a, b, y);
  }
  void sum_to(const Tensor& x, Tensor& y) override {
    check_tensor(x, "sum_to", "x");
    check_tensor(y, "sum_to", "y");
    check_same_dtype(x, y, "sum_to", "x", "y");
    cpu::sum_to(x, y);
  }
  void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
                 const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out,
                 Tensor* vmax_out) override {
    check_tensor(p, "adam_step", "p");
    check_adam_step(s, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out);
    cpu::adam_step(s, p, g, m, v, vmax, p_out, m_out, v_out, vmax_out);
  }
  void norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                    const Tensor* b, Tensor& y, Tensor& mean, Tensor& var) override {
    check_tensor(x, "norm_forward", "x");
    cpu::norm_forward(ns, x, eps, w, b, y, mean, var);
  }
  void norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x, const Tensor& mean,
                     const Tensor& var, double eps, const Tensor* w, Tensor* dx, Tensor* dw,
                     Tensor* db) override {
    check_tensor(dy, "norm_backward", "dy");
    check_tensor(x, "norm_backward", "x");
    cpu::norm_backward(ns, dy, x, mean, var, eps, w, dx, dw, db);
  }
  void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum, double unbias,
                          Tensor& running_mean, Tensor& running_var,
                          Tensor* num_batches_tracked) override {
    check_tensor(running_mean, "norm_running_stats", "running_mean");
    cpu::norm_running_stats(mean, var, momentum, unbias, running_mean, running_var,
                            num_batches_tracked);
  }
  void matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a,
              bool transpose_b) override {
    check_tensor(a, "matmul", "a");
    check_tensor(b, "matmul", "b");
    check_tensor(y, "matmul", "y");
    check_same_dtype(a, y, "matmul", "a", "y");
    check_same_dtype(b, y, "matmul", "b", "y");
    cpu::matmul(a, b, y, transpose_a, transpose_b, cpu::max_threads());
  }

  void strided_gather(const Tensor& x, const StridedWindow& window, Tensor& y) override {
    check_tensor(x, "strided_gather", "x");
    check_tensor(y, "strided_gather", "y");
    check_same_dtype(x, y, "strided_gather", "x", "y");
    cpu::strided_gather(x, window, y, cpu::max_threads());
  }
  void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& window) override {
    check_tensor(x, "strided_scatter", "x");
    check_tensor(y, "strided_scatter", "y");
    check_same_dtype(x, y, "strided_scatter", "x", "y");
    cpu::strided_scatter(x, y, window, cpu::max_threads());
  }
  void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                    Tensor& y) override {
    check_tensor(x, "index_gather", "x");
    check_tensor(index, "index_gather", "index");
    check_tensor(y, "index_gather", "y");
    check_same_dtype(x, y, "index_gather", "x", "y");
    cpu::index_gather(x, outer, inner, index, y, cpu::max_threads());
  }
  void index_add(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index,
                 Tensor& y) override {
    check_tensor(x, "index_add", "x");
    check_tensor(index, "index_add", "index");
    check_tensor(y, "index_add", "y");
    check_same_dtype(x, y, "index_add", "x", "y");
    cpu::index_add(x, outer, inner, index, y, cpu::max_threads());
  }
  void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner, Tensor& values,
                  Tensor& indices) override {
    check_tensor(x, "reduce_dim", "x");
    check_tensor(values, "reduce_dim", "values");
    check_tensor(indices, "reduce_dim", "indices");
    check_same_dtype(x, values, "reduce_dim", "x", "values");
    cpu::reduce_dim(op, x, outer, inner, values, indices, cpu::max_threads());
  }

  void conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                              const Tensor* b, Tensor& y) override {
    const char* fn = "conv_transpose_forward";
    check_tensor(x, fn, "x");
    check_tensor(w, fn, "w");
    check_tensor(y, fn, "y");
    check_same_dtype(x, y, fn, "x", "y");
    check_same_dtype(w, y, fn, "w", "y");
    if (b != nullptr && b->defined()) {
      check_tensor(*b, fn, "b");
      check_same_dtype(*b, y, fn, "b", "y");
      cpu::conv_transpose_forward(g, x, w, b, y, cpu::max_threads());
    } else {
      cpu::conv_transpose_forward(g, x, w, nullptr, y, cpu::max_threads());
    }
  }
  void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w,
                            Tensor& dx) override {
    const char* fn = "conv_transpose_dgrad";
    check_tensor(dy, fn, "dy");
    check_tensor(w, fn, "w");
    check_tensor(dx, fn, "dx");
    check_same_dtype(dy, dx, fn, "dy", "dx");
    check_same_dtype(w, dx, fn, "w", "dx");
    cpu::conv_transpose_dgrad(g, dy, w, dx, cpu::max_threads());
  }
  void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy,
                            Tensor& dw) override {
    const char* fn = "conv_transpose_wgrad";
    check_tensor(x, fn, "x");
    check_tensor(dy, fn, "dy");
    check_tensor(dw, fn, "dw");
    check_same_dtype(x, dw, fn, "x", "dw");
    check_same_dtype(dy, dw, fn, "dy", "dw");
    cpu::conv_transpose_wgrad(g, x, dy, dw, cpu::max_threads());
  }
  void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db) override {
    const char* fn = "conv_transpose_bias_grad";
    check_tensor(dy, fn, "dy");
    check_tensor(db, fn, "db");
    check_same_dtype(dy, db, fn, "dy", "db");
    cpu::conv_transpose_bias_grad(g, dy, db, cpu::max_threads());
  }

 private:
  static void copy_bytes(void* dst, const void* src, int64_t nbytes, Device device,
                         const char* fn) {
    check_cpu(device, fn);
    check_bytes(nbytes, fn);
    if (nbytes > 0) std::memmove(dst, src, static_cast<size_t>(nbytes));
  }

  cpu::HostAllocator allocator_;
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend instance;
  return instance;
}

std::shared_ptr<void> cpu::allocate_workspace(int64_t nbytes) {
  return cpu_backend().allocate(nbytes, Device(kCPU));
}

}  // namespace tgrad
