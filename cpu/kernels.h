// The CPU backend's kernels as free functions, one family per file: elementwise.cpp (fill, cast,
// unary, binary, sum_to, adam_step), matmul.cpp, conv_transpose.cpp, indexing.cpp, norm.cpp.
// `threads` caps the threads a kernel may use; every result is bit-identical for any thread count.
// Internal to cpu/.
#pragma once

#include <cstdint>
#include <memory>

#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tgrad::cpu {

// Calls f.template operator()<T>() with T the C++ type of `dtype` (float or double).
template <class F>
void dispatch_floating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::float32:
      f.template operator()<float>();
      return;
    case DType::float64:
      f.template operator()<double>();
      return;
    case DType::int64:
      break;
  }
  TGRAD_FAIL("cpu backend: unsupported dtype ", static_cast<int>(dtype));
}

// dispatch_floating plus int64, for the kernels that move values without arithmetic (fill, cast).
template <class F>
void dispatch_all(DType dtype, F&& f) {
  if (dtype == DType::int64) {
    f.template operator()<int64_t>();
  } else {
    dispatch_floating(dtype, f);
  }
}

// Scratch bytes for a kernel from the CPU backend's counted allocator: set_memory_limit covers
// them like tensors, and an allocation past the cap is the same tgrad::Error.
std::shared_ptr<void> allocate_workspace(int64_t nbytes);

// a * b, a kernel's scratch size (in elements, or elements x bytes each), or a tgrad::Error where
// it passes 64 bits: a buffer sized by a geometry's reach (huge dilations or strides over a tiny
// tensor) can.
inline int64_t workspace_elems(int64_t a, int64_t b) {
  int64_t n = 0;
  TGRAD_CHECK(a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &n),
              "cpu backend: a kernel's scratch of ", a, " x ", b, " passes 2^63");
  return n;
}

// A kernel's scratch array of `count` elements of T (uninitialised), counted as above; a count
// whose bytes pass 64 bits is the same tgrad::Error as one past the memory.
template <class T>
class Workspace {
 public:
  explicit Workspace(int64_t count)
      : storage_(allocate_workspace(workspace_elems(count, static_cast<int64_t>(sizeof(T))))) {}
  T* data() const { return static_cast<T*>(storage_.get()); }

 private:
  std::shared_ptr<void> storage_;
};

// The first element of a contiguous CPU tensor, typed.
template <class T>
T* data(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// The hot kernels, compiled once per x86-64 level (cpu/CMakeLists.txt), each copy in namespace
// tgrad::cpu::isa_<level>; the functions of the same names in tgrad::cpu (isa.cpp) call the copy
// of the level in use (cpu/isa.h). elementwise.cpp, matmul.cpp and conv_transpose.cpp define them.
#define TGRAD_CPU_ISA_KERNELS                                                                      \
  void fill(Tensor& y, double value);                                                              \
  void cast(const Tensor& x, Tensor& y);                                                           \
  void unary(UnaryOp op, double p, const Tensor& x, Tensor& y);                                    \
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);                           \
  void sum_to(const Tensor& x, Tensor& y);                                                         \
  void adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,             \
                 const Tensor& v, const Tensor* vmax, Tensor& p_out, Tensor& m_out, Tensor& v_out, \
                 Tensor* vmax_out);                                                                \
  void matmul(const Tensor& a, const Tensor& b, Tensor& y, bool transpose_a, bool transpose_b,     \
              int threads);                                                                        \
  void conv_transpose_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,             \
                              const Tensor* b, Tensor& y, int threads);                            \
  void conv_transpose_dgrad(const ConvGeometry& g, const Tensor& dy, const Tensor& w, Tensor& dx,  \
                            int threads);                                                          \
  void conv_transpose_wgrad(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,  \
                            int threads);                                                          \
  void conv_transpose_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db, int threads);

TGRAD_CPU_ISA_KERNELS
namespace isa_default {
TGRAD_CPU_ISA_KERNELS
}
namespace isa_avx2 {
TGRAD_CPU_ISA_KERNELS
}
namespace isa_avx512 {
TGRAD_CPU_ISA_KERNELS
}

// indexing.cpp: see the Backend methods of the same names.
void strided_gather(const Tensor& x, const StridedWindow& w, Tensor& y, int threads);
void strided_scatter(const Tensor& x, Tensor& y, const StridedWindow& w, int threads);
void index_gather(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index, Tensor& y,
                  int threads);
void index_add(const Tensor& x, int64_t outer, int64_t inner, const Tensor& index, Tensor& y,
               int threads);
void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t inner, Tensor& values,
                Tensor& indices, int threads);

// norm.cpp: see the Backend methods of the same names (one task per key, so any thread count
// gives the same bits).
void norm_forward(const NormShape& ns, const Tensor& x, double eps, const Tensor* w,
                  const Tensor* b, Tensor& y, Tensor& mean, Tensor& var);
void norm_backward(const NormShape& ns, const Tensor& dy, const Tensor& x, const Tensor& mean,
                   const Tensor& var, double eps, const Tensor* w, Tensor* dx, Tensor* dw,
                   Tensor* db);
void norm_running_stats(const Tensor& mean, const Tensor& var, double momentum, double unbias,
                        Tensor& running_mean, Tensor& running_var, Tensor* num_batches_tracked);

}  // namespace tgrad::cpu
