// Tensor: storage, views, conversions, host access, printing and the factories.
#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/derivatives.h"
#include "core/ops_internal.h"
#include "core/ops_shape.h"
#include "core/random.h"

namespace tgrad {

namespace {

Tensor make_tensor(const Shape& shape, DType dtype, Device device, const char* fn) {
  TGRAD_CHECK(static_cast<int64_t>(shape.size()) <= kMaxRank, fn, ": rank ", shape.size(),
              " exceeds the maximum rank ", kMaxRank, " (shape ", shape, ")");
  const int64_t numel = shape_numel(shape, fn);
  int64_t nbytes = 0;
  TGRAD_CHECK(!__builtin_mul_overflow(numel, dtype_size(dtype), &nbytes), fn, ": shape ", shape,
              " of ", dtype, " needs more bytes than int64 can count");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = backend(device).allocate(nbytes, device);
  impl->version = std::make_shared<VersionCounter>();
  impl->storage_numel = numel;
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

// Copies `src` into `dst` (same shape), converting device and dtype as needed.
void copy_into(const Tensor& dst, const Tensor& src) {
  Tensor s = src;
  if (s.dtype() != dst.dtype() && s.device() != dst.device()) {
    // Convert on the source side first: the host then moves the final bytes once.
    Tensor cast = make_tensor(s.shape(), dst.dtype(), s.device(), "copy_");
    if (s.numel() > 0) backend(s.device()).cast(s, cast);
    s = cast;
  }
  Tensor d = dst;
  if (s.device() == d.device()) {
    if (d.numel() == 0) return;
    if (s.dtype() == d.dtype()) {
      backend(d.device()).copy(d.raw_data(), s.raw_data(), d.nbytes(), d.device());
    } else {
      backend(d.device()).cast(s, d);
    }
    return;
  }
  if (d.numel() == 0) return;
  if (s.device().is_cpu()) {
    backend(d.device()).copy_from_host(d.raw_data(), s.raw_data(), d.nbytes(), d.device());
  } else if (d.device().is_cpu()) {
    backend(s.device()).copy_to_host(d.raw_data(), s.raw_data(), d.nbytes(), s.device());
  } else {  // between two GPUs: through the host
    std::vector<unsigned char> host(static_cast<size_t>(d.nbytes()));
    backend(s.device()).copy_to_host(host.data(), s.raw_data(), d.nbytes(), s.device());
    backend(d.device()).copy_from_host(d.raw_data(), host.data(), d.nbytes(), d.device());
  }
}

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

}  // namespace

namespace detail {

Tensor alias(const Tensor& t, const Shape& shape) {
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& src = *t.impl();
  impl->storage = src.storage;
  impl->version = src.version;
  impl->storage_numel = src.storage_numel;
  impl->copy_of_view = src.copy_of_view;
  impl->offset = src.offset;
  impl->shape = shape;
  impl->dtype = src.dtype;
  impl->device = src.device;
  return Tensor(std::move(impl));
}

Tensor unmark_copy_of_view(const Tensor& t) {
  Tensor out = alias(t, t.shape());
  out.impl()->copy_of_view = nullptr;
  out.impl()->requires_grad = t.impl()->requires_grad;
  out.impl()->grad_fn = t.impl()->grad_fn;
  return out;
}

}  // namespace detail

const TensorImpl& Tensor::checked(const char* fn) const {
  TGRAD_CHECK(impl_ != nullptr, "Tensor::", fn, ": the tensor is undefined");
  return *impl_;
}

const Shape& Tensor::shape() const {
  return checked("shape").shape;
}

int64_t Tensor::size(int64_t dim) const {
  const int64_t rank = this->dim();
  TGRAD_CHECK(dim >= -rank && dim < rank, "Tensor::size: dim ", dim, " is out of range for a ",
              rank, "-D tensor");
  return shape()[dim < 0 ? dim + rank : dim];
}

int64_t Tensor::dim() const {
  return static_cast<int64_t>(shape().size());
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape())
    n *= s;
  return n;
}

DType Tensor::dtype() const {
  return checked("dtype").dtype;
}

Device Tensor::device() const {
  return checked("device").device;
}

void* Tensor::raw_data() const {
  const TensorImpl& t = checked("raw_data");
  return static_cast<char*>(t.storage.get()) + t.offset * dtype_size(t.dtype);
}

void* Tensor::typed_data(DType want, const char* fn) const {
  TGRAD_CHECK(dtype() == want, "Tensor::", fn, ": asked for ", want, " but the tensor is ",
              dtype());
  return raw_data();
}

namespace {

// Calls f(p) with p the typed pointer to a CPU tensor's first element.
template <class F>
void with_host_elements(const Tensor& host, F&& f) {
  switch (host.dtype()) {
    case DType::float32:
      f(host.data_ptr<float>());
      return;
    case DType::float64:
      f(host.data_ptr<double>());
      return;
    case DType::int64:
      f(host.data_ptr<int64_t>());
      return;
  }
}

}  // namespace

namespace {

template <class T>
std::vector<T> host_copy(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : t.detach().to(Device(kCPU));
  std::vector<T> out(static_cast<size_t>(host.numel()));
  with_host_elements(host, [&](const auto* p) {
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<T>(p[i]);
  });
  return out;
}

}  // namespace

std::vector<float> Tensor::host_values(float) const {
  return host_copy<float>(*this);
}
std::vector<double> Tensor::host_values(double) const {
  return host_copy<double>(*this);
}
std::vector<int64_t> Tensor::host_values(int64_t) const {
  return host_copy<int64_t>(*this);
}

int64_t Tensor::single_int64() const {
  TGRAD_CHECK(numel() == 1, "Tensor::item: the tensor has ", numel(), " elements (shape ", shape(),
              "), item() needs exactly one");
  return to_vector<int64_t>()[0];
}

double Tensor::item() const {
  TGRAD_CHECK(numel() == 1, "Tensor::item: the tensor has ", numel(), " elements (shape ", shape(),
              "), item() needs exactly one");
  return to_vector<double>()[0];
}

uint64_t Tensor::version() const {
  return checked("version").version->get();
}

Tensor Tensor::to(Device device) const {
  checked("to");
  if (device == this->device()) return *this;
  backend(device);  // fails early, before any work, if the device is unusable
  Tensor y = make_tensor(shape(), dtype(), device, "Tensor::to");
  copy_into(y, *this);
  return record("to", y, {*this}, derivatives::to_device(this->device()));
}

Tensor Tensor::to(DType dtype) const {
  checked("to");
  if (dtype == this->dtype()) return *this;
  Tensor y = make_tensor(shape(), dtype, device(), "Tensor::to");
  if (numel() > 0) backend(device()).cast(*this, y);
  return record("to", y, {*this}, derivatives::to_dtype(this->dtype()));
}

Tensor Tensor::to(Device device, DType dtype) const {
  return to(device).to(dtype);
}

Tensor Tensor::clone() const {
  checked("clone");
  Tensor y = make_tensor(shape(), dtype(), device(), "Tensor::clone");
  copy_into(y, *this);
  return record("clone", y, {*this}, derivatives::identity());
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  checked("reshape");
  Shape s = new_shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      TGRAD_CHECK(infer < 0, "reshape: only one size may be -1, got ", new_shape);
      infer = static_cast<int64_t>(i);
    } else {
      TGRAD_CHECK(s[i] >= 0, "reshape: size ", s[i], " in ", new_shape, " is invalid");
      TGRAD_CHECK(!__builtin_mul_overflow(known, s[i], &known), "reshape: shape ", new_shape,
                  " is invalid: its sizes overflow int64");
    }
  }
  if (infer >= 0) {
    TGRAD_CHECK(known != 0 && numel() % known == 0, "reshape: shape ", new_shape,
                " is invalid for input of size ", numel());
    s[infer] = numel() / known;
  }
  TGRAD_CHECK(static_cast<int64_t>(s.size()) <= kMaxRank, "reshape: rank ", s.size(),
              " exceeds the maximum rank ", kMaxRank);
  TGRAD_CHECK(shape_numel(s, "reshape") == numel(), "reshape: shape ", new_shape,
              " is invalid for input of size ", numel(), " (shape ", shape(), ")");
  return record("reshape", detail::alias(*this, s), {*this}, derivatives::reshape(shape()));
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  checked("narrow");
  TGRAD_CHECK(this->dim() > 0, "narrow: cannot narrow a 0-D tensor");
  // Other dims and negative starts go through tgrad::narrow (a view where the result is
  // contiguous, else a marked copy), which comes back here with dim 0 and a start counted from 0.
  if (dim != 0 || start < 0) return tgrad::narrow(*this, dim, start, length);
  const int64_t n = size(0);
  TGRAD_CHECK(start >= 0 && length >= 0 && start <= n && length <= n - start, "narrow: start ",
              start, " and length ", length, " do not fit in dim 0 of size ", n);
  Shape s = shape();
  s[0] = length;
  Tensor y = detail::alias(*this, s);
  y.impl()->offset += start * (n == 0 ? 0 : numel() / n);
  return record("narrow", y, {*this}, derivatives::narrow(shape(), start));
}

bool Tensor::requires_grad() const {
  return checked("requires_grad").requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  TensorImpl& t = const_cast<TensorImpl&>(checked("requires_grad_"));
  TGRAD_CHECK(t.grad_fn == nullptr || requires_grad,
              "requires_grad_: cannot turn off "
              "requires_grad on a non-leaf tensor (it was made by '",
              t.grad_fn->name, "'); use detach()");
  t.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  return checked("is_leaf").grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = checked("grad");
  return t.grad ? Tensor(t.grad) : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  TensorImpl& t = const_cast<TensorImpl&>(checked("set_grad"));
  const std::lock_guard<std::mutex> lock(detail::leaf_grad_mutex());
  if (!grad.defined()) {
    t.grad.reset();
    return;
  }
  TGRAD_CHECK(grad.shape() == t.shape && grad.dtype() == t.dtype && grad.device() == t.device,
              "set_grad: gradient of shape ", grad.shape(), " ", grad.dtype(), " on ",
              grad.device(), " does not match the tensor's shape ", t.shape, " ", t.dtype, " on ",
              t.device);
  // A tensor holding itself as its gradient never frees, and an optimizer step would move the
  // "gradient" with the parameter.
  TGRAD_CHECK(grad.impl()->storage != t.storage,
              "set_grad: the gradient shares storage with the "
              "tensor itself (a tensor cannot be its own gradient); pass a clone()");
  t.grad = grad.impl_ptr();
}

void Tensor::zero_grad() const {
  TensorImpl& t = const_cast<TensorImpl&>(checked("zero_grad"));
  const std::lock_guard<std::mutex> lock(detail::leaf_grad_mutex());
  t.grad.reset();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  return checked("grad_fn").grad_fn;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph,
                      bool create_graph) const {
  checked("backward");
  run_backward(*this, gradient, retain_graph.value_or(create_graph), create_graph);
}

Tensor Tensor::detach() const {
  checked("detach");
  return detail::alias(*this, shape());
}

namespace detail {

void begin_inplace_write(const char* fn, const Tensor& t) {
  check_inplace_write(fn, t);
  t.impl()->version->bump();
}

void check_inplace_write(const char* fn, const Tensor& t) {
  const TensorImpl& impl = *t.impl();
  TGRAD_CHECK(impl.copy_of_view == nullptr, fn, ": this tensor is the copy that ",
              impl.copy_of_view ? impl.copy_of_view : "",
              " returned (tgrad returns a copy where PyTorch returns a strided view), so an "
              "in-place write would not reach the tensor it came from; write into a clone() if a "
              "separate tensor is what you want");
  if (grad_mode_enabled() && impl.requires_grad) {
    TGRAD_CHECK(impl.grad_fn != nullptr, fn,
                ": a leaf tensor that requires grad cannot be written in place while grad mode "
                "is on (use NoGradGuard, as optimizers and init functions do)");
    TGRAD_FAIL(fn, ": the tensor was computed by '", impl.grad_fn->name,
               "' and requires grad; tgrad does not record in-place writes, so this one would "
               "be invisible to backward. Compute a new tensor instead (or write under "
               "NoGradGuard into a detach()ed copy)");
  }
}

}  // namespace detail

Tensor& Tensor::copy_(const Tensor& src) {
  const TensorImpl& t = checked("copy_");
  TGRAD_CHECK(src.defined(), "copy_: the source tensor is undefined");
  TGRAD_CHECK(src.shape() == t.shape, "copy_: source shape ", src.shape(),
              " does not match destination shape ", t.shape);
  detail::begin_inplace_write("copy_", *this);
  copy_into(*this, src);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  checked("fill_");
  detail::begin_inplace_write("fill_", *this);
  if (numel() > 0) backend(device()).fill(*this, value);
  return *this;
}

void Tensor::set_data(const Tensor& src) const {
  TensorImpl& t = const_cast<TensorImpl&>(checked("set_data"));
  TGRAD_CHECK(src.defined(), "set_data: the source tensor is undefined");
  TGRAD_CHECK(src.shape() == t.shape, "set_data: source shape ", src.shape(),
              " does not match the tensor's shape ", t.shape);
  // The version counter stays (it is the tensor's identity for saved-tensor checks) and counts
  // this as a write; the storage, dtype and device are src's.
  t.version->bump();
  t.storage = src.impl()->storage;
  t.storage_numel = src.impl()->storage_numel;
  t.offset = src.impl()->offset;
  t.dtype = src.dtype();
  t.device = src.device();
}

// ---- printing ----

namespace {

constexpr int64_t kSummarizeAbove = 1000;  // PyTorch's default print threshold
constexpr int64_t kEdgeItems = 3;

// Prints the elements p[offset + ...] of `shape` from dimension `dim` on, reading them in place.
template <class T>
void print_values(std::ostream& os, const T* p, const Shape& shape, size_t dim, int64_t offset,
                  bool summarize, int indent) {
  if (shape.empty()) {
    os << p[0];
    return;
  }
  const int64_t n = shape[dim];
  int64_t stride = 1;
  for (size_t i = dim + 1; i < shape.size(); ++i)
    stride *= shape[i];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      i = n - kEdgeItems - 1;
      os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (dim + 1 == shape.size()) {
      os << std::setw(10) << p[offset + i * stride];
    } else {
      print_values(os, p, shape, dim + 1, offset + i * stride, summarize, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::ostringstream body;
  body << std::setprecision(4) << std::fixed;
  const bool summarize = t.numel() > kSummarizeAbove;
  if (t.numel() == 0) {
    body << "[]";
  } else {
    // Read in place on the CPU; a CUDA tensor costs one host copy.
    const Tensor host = t.device().is_cpu() ? t : t.detach().to(Device(kCPU));
    with_host_elements(
        host, [&](const auto* p) { print_values(body, p, t.shape(), 0, 0, summarize, 7); });
  }
  os << "tensor(" << body.str() << ", shape=" << detail::cat(t.shape()) << ", dtype=" << t.dtype()
     << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

// ---- factories ----

Tensor empty(const Shape& shape, TensorOptions options) {
  return finish(make_tensor(shape, options.dtype(), options.device(), "empty"), options);
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  Tensor t = make_tensor(shape, options.dtype(), options.device(), "full");
  if (t.numel() > 0) backend(t.device()).fill(t, value);
  return finish(t, options);
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  return full(shape, 0.0, options);
}
Tensor ones(const Shape& shape, TensorOptions options) {
  return full(shape, 1.0, options);
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), TensorOptions(t.dtype()).device(t.device()));
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), TensorOptions(t.dtype()).device(t.device()));
}
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
}

Tensor scalar_tensor(double value, TensorOptions options) {
  return full({}, value, options);
}

Tensor arange(double end, TensorOptions options) {
  return arange(0.0, end, 1.0, options);
}

namespace {

// A tensor of `shape` with element i = value(i), written straight into a host tensor of the
// requested dtype. For another device, the device tensor is allocated first (so an impossible
// size fails before any work) and the host tensor, counted by the CPU allocator, is the only
// staging copy.
template <class Value>
Tensor host_filled(const Shape& shape, TensorOptions options, const char* fn, Value value) {
  const DType dtype = options.dtype();
  Tensor device_tensor;
  if (!options.device().is_cpu()) device_tensor = make_tensor(shape, dtype, options.device(), fn);
  Tensor host = make_tensor(shape, dtype, Device(kCPU), fn);
  const int64_t n = host.numel();
  with_host_elements(host, [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<T>(value(i));
  });
  if (!device_tensor.defined()) return finish(host, options);
  copy_into(device_tensor, host);
  return finish(device_tensor, options);
}

}  // namespace

Tensor arange(double start, double end, double step, TensorOptions options) {
  TGRAD_CHECK(step != 0.0 && std::isfinite(step), "arange: step=", step,
              " must be non-zero and finite");
  TGRAD_CHECK(std::isfinite(start) && std::isfinite(end), "arange: start=", start, " and end=", end,
              " must be finite");
  TGRAD_CHECK((end - start) * step >= 0.0, "arange: step=", step, " goes away from end=", end,
              " starting at start=", start);
  // The count is checked as a double before it becomes an int64 (a cast of a double past
  // int64's range is undefined); no tensor can hold 2^62 elements of 4 bytes anyway.
  const double count = std::ceil((end - start) / step);
  constexpr double kMaxCount = 4611686018427387904.0;  // 2^62
  TGRAD_CHECK(std::isfinite(count) && count <= kMaxCount, "arange: start=", start, ", end=", end,
              " and step=", step, " make ", count, " elements, more than a tensor can hold");
  const auto n = static_cast<int64_t>(count);
  if (!options.dtype_opt()) options.dtype(DType::float32);
  return host_filled({n}, options, "arange",
                     [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

namespace {

template <class Draw>
Tensor random_tensor(const Shape& shape, TensorOptions options, const char* fn, Draw draw) {
  if (!options.dtype_opt()) options.dtype(DType::float32);
  return host_filled(shape, options, fn, [&](int64_t) { return draw(); });
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options) {
  return rand(shape, default_generator(), options);
}
Tensor rand(const Shape& shape, Generator& gen, TensorOptions options) {
  return random_tensor(shape, options, "rand", [&] { return gen.uniform(); });
}
Tensor randn(const Shape& shape, TensorOptions options) {
  return randn(shape, default_generator(), options);
}
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options) {
  return random_tensor(shape, options, "randn", [&] { return gen.normal(); });
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options) {
  const int64_t n = shape_numel(shape, "from_vector");
  TGRAD_CHECK(n == static_cast<int64_t>(values.size()), "from_vector: shape ", shape, " holds ", n,
              " elements but ", values.size(), " values were given");
  const DType dtype = options.dtype_opt().value_or(dtype_of<T>());
  Tensor host = make_tensor(shape, dtype, Device(kCPU), "from_vector");
  with_host_elements(host, [&](auto* p) {
    using T2 = std::remove_pointer_t<decltype(p)>;
    for (size_t i = 0; i < values.size(); ++i)
      p[i] = static_cast<T2>(values[i]);
  });
  Tensor t = host;
  if (!options.device().is_cpu()) {
    t = make_tensor(shape, dtype, options.device(), "from_vector");
    copy_into(t, host);
  }
  return finish(t, options);
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ha = a.device().is_cpu() ? a : a.detach().to(Device(kCPU));
  Tensor hb = b.device().is_cpu() ? b : b.detach().to(Device(kCPU));
  return a.numel() == 0 ||
         std::memcmp(ha.raw_data(), hb.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  TGRAD_CHECK(a.defined() && b.defined(), "allclose: both tensors must be defined");
  TGRAD_CHECK(std::isfinite(rtol) && rtol >= 0.0 && std::isfinite(atol) && atol >= 0.0,
              "allclose: rtol=", rtol, " and atol=", atol, " must be finite and non-negative");
  if (a.shape() != b.shape()) return false;
  const std::vector<double> va = a.detach().to_vector<double>();
  const std::vector<double> vb = b.detach().to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (!(equal_nan && std::isnan(va[i]) && std::isnan(vb[i]))) return false;
      continue;
    }
    if (va[i] == vb[i]) continue;  // equal infinities
    if (!(std::abs(va[i] - vb[i]) <= atol + rtol * std::abs(vb[i]))) return false;
  }
  return true;
}

}  // namespace tgrad
