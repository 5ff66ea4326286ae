// Tensor: a handle to shared, contiguous, row-major storage of rank 0 to 8, float32, float64 or
// int64, on one device, with the autograd state (requires_grad, grad, grad_fn) of the tape
// engine. Copies of a Tensor share everything, as in LibTorch; views (reshape, narrow on dim 0)
// share storage and its version counter only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace tgrad {

struct Node;
class Generator;

// PixelShuffle reshapes a 4-D batch to rank 6; 8 leaves room for a batch of 3-D volumes too.
inline constexpr int64_t kMaxRank = 8;

// Counts the in-place writes to one storage; every view and detached alias of the storage
// shares it. The tape remembers the count of each tensor a node saved, and backward refuses to
// use a saved tensor whose count has moved (as PyTorch's version counter).
struct VersionCounter {
  std::atomic<uint64_t> value{0};
  void bump() { value.fetch_add(1, std::memory_order_relaxed); }
  uint64_t get() const { return value.load(std::memory_order_relaxed); }
};

struct TensorImpl {
  TensorImpl() = default;
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
  ~TensorImpl();  // releases grad_fn without recursion (core/autograd.cpp)

  std::shared_ptr<void> storage;            // owned by the backend's allocator
  std::shared_ptr<VersionCounter> version;  // shared by every alias of `storage`
  int64_t storage_numel = 0;                // elements the storage holds
  int64_t offset = 0;                       // first element of this tensor, in elements
  // Set on the copy that an op returns where PyTorch returns a strided view ("permute",
  // "narrow"...): an in-place write into it would not reach the tensor it came from, so writes
  // are refused, naming the op. Views of such a copy keep it.
  const char* copy_of_view = nullptr;
  Shape shape;
  DType dtype = DType::float32;
  Device device;
  // Autograd state.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf; null until backward
  std::shared_ptr<Node> grad_fn;     // the node that produced this tensor; null for leaves
};

// Options for factories, with LibTorch's chainable setters:
// zeros({2, 3}, TensorOptions().dtype(kFloat64).device(kCUDA).requires_grad(true)).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}        // NOLINT: implicit, as in LibTorch
  TensorOptions(Device d) : device_(d) {}      // NOLINT
  TensorOptions(DeviceType d) : device_(d) {}  // NOLINT

  TensorOptions& dtype(DType d) {
    dtype_ = d;
    return *this;
  }
  TensorOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  TensorOptions& requires_grad(bool r) {
    requires_grad_ = r;
    return *this;
  }

  DType dtype() const { return dtype_.value_or(DType::float32); }
  std::optional<DType> dtype_opt() const { return dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  std::optional<DType> dtype_;
  Device device_;
  bool requires_grad_ = false;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage (an absent bias, a grad not yet computed)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }

  // Shape and type.
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t dim() const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  int64_t nbytes() const { return numel() * dtype_size(dtype()); }

  // Data. raw_data() is a device pointer for CUDA tensors. data_ptr<T>() checks the dtype; T is
  // float, double or int64_t, and any other type fails to compile (never to link).
  void* raw_data() const;
  template <class T>
  T* data_ptr() const {
    return static_cast<T*>(typed_data(dtype_of<T>(), "data_ptr"));
  }
  // A host copy of the elements, converted to T (float, double or int64_t).
  template <class T>
  std::vector<T> to_vector() const {
    static_assert(
        std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int64_t>,
        "to_vector<T>: T must be float, double or int64_t");
    return host_values(T{});
  }
  double item() const;  // the single element as double; throws unless numel() == 1
  // The single element as T: exact for int64 tensors read as an integral type.
  template <class T>
  T item() const {
    static_assert(std::is_arithmetic_v<T>, "item<T>: T must be an arithmetic type");
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(single_int64());
    } else {
      return static_cast<T>(item());
    }
  }
  // The number of in-place writes to this tensor's storage so far (PyTorch's _version).
  uint64_t version() const;

  // Conversions. Each returns a new tensor (or *this when nothing changes, as in PyTorch) and
  // is differentiable.
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device(kCPU)); }
  Tensor cuda(int index = 0) const { return to(Device(kCUDA, index)); }
  Tensor clone() const;
  // reshape and view are the same here (storage is always contiguous); one size may be -1.
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const { return reshape(shape); }
  Tensor flatten() const { return reshape({-1}); }
  // A view of elements [start, start + length) along dim 0, sharing storage (not differentiable
  // through: it is for slicing batches; use it under NoGradGuard or on tensors needing no grad).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;

  // Autograd.
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);  // leaves only
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward reaches this leaf
  // Replaces .grad (shape, dtype and device checked; a tensor cannot be its own gradient, nor
  // share storage with it).
  void set_grad(const Tensor& grad) const;
  // Clears .grad (sets it to none, PyTorch's default for zero_grad).
  void zero_grad() const;
  const std::shared_ptr<Node>& grad_fn() const;
  // Reverse-mode differentiation from this tensor. A non-scalar needs `gradient` (same shape).
  // retain_graph defaults to create_graph, as in PyTorch; create_graph records the backward
  // itself so that the gradients can be differentiated again (double backward).
  void backward(const Tensor& gradient = Tensor(), std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  // Same data, no history, requires_grad false. Shares the storage and its version counter.
  Tensor detach() const;
  // Points this tensor (every handle to it) at `src`'s data, dtype and device, keeping its
  // autograd identity; shapes must match. For moving parameters in place (Module::to). Counts
  // as an in-place write: a graph that saved the old data refuses to run backward.
  void set_data(const Tensor& src) const;

  // In-place writes without autograd (for optimizers and initialisation). tgrad does not record
  // in-place ops, so while grad mode is on they refuse any tensor that requires grad (a leaf, or
  // a result of a recorded op), where PyTorch would refuse leaves and record the rest. Each
  // write bumps the storage's version counter.
  Tensor& copy_(const Tensor& src);  // same shape; converts dtype and device
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  const TensorImpl& checked(const char* fn) const;
  void* typed_data(DType want, const char* fn) const;
  std::vector<float> host_values(float) const;
  std::vector<double> host_values(double) const;
  std::vector<int64_t> host_values(int64_t) const;
  int64_t single_int64() const;
  std::shared_ptr<TensorImpl> impl_;
};

// Prints shape, dtype, device and values; long tensors are shortened with "..." as PyTorch does.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Factories. Shapes have rank 0 to 8. Every size is checked (non-negative, element and byte
// counts within int64, bytes within what the device can hold) before anything is allocated.
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// [start, end) in steps of `step`, 1-D.
Tensor arange(double end, TensorOptions options = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
// Uniform in [0, 1) and standard normal, from `gen` (the thread's default generator if omitted).
Tensor rand(const Shape& shape, TensorOptions options = {});
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options = {});
Tensor randn(const Shape& shape, TensorOptions options = {});
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options = {});
// Copies host values (float, double or int64_t); the dtype is T's unless options name one.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options = {});
// 0-d tensor holding one value.
Tensor scalar_tensor(double value, TensorOptions options = {});

// True when two tensors have the same shape, dtype and bit-identical values.
bool equal(const Tensor& a, const Tensor& b);
// torch.allclose: same shape and |a - b| <= atol + rtol * |b| element by element (NaNs equal
// only with equal_nan). Values compare in float64 on the host; dtypes may differ.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

}  // namespace tgrad
