// The backend registry (a device type picks its backend) and the device-level user functions:
// cuda_is_available, memory statistics, and the float32 precision setting.
#include "core/backend.h"

#include <atomic>
#include <utility>

namespace tgrad {

void check_adam_step(const AdamStep& s, const Tensor& p, const Tensor& g, const Tensor& m,
                     const Tensor& v, const Tensor* vmax, const Tensor& p_out, const Tensor& m_out,
                     const Tensor& v_out, const Tensor* vmax_out) {
  TGRAD_CHECK(p.defined() && is_floating(p.dtype()), "adam_step: p must be a defined float32 or ",
              "float64 tensor");
  TGRAD_CHECK((vmax_out != nullptr) == s.amsgrad, "adam_step: vmax_out must be given exactly when ",
              "amsgrad is on (amsgrad=", s.amsgrad, ")");
  const std::pair<const Tensor*, const char*> operands[] = {
      {&g, "g"},         {&m, "m"},         {&v, "v"},       {vmax, "vmax"},
      {&p_out, "p_out"}, {&m_out, "m_out"}, {&v_out, "v_out"}, {vmax_out, "vmax_out"}};
  for (const auto& [t, name] : operands) {
    if (t == nullptr) continue;
    TGRAD_CHECK(t->defined() && t->shape() == p.shape() && t->dtype() == p.dtype() &&
                    t->device() == p.device(),
                "adam_step: ", name, " (", t->defined() ? t->shape() : Shape{}, ", ",
                t->defined() ? t->dtype() : p.dtype(), ") must match p (", p.shape(), ", ",
                p.dtype(), ", ", p.device().str(), ")");
  }
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return "neg";
    case UnaryOp::exp:
      return "exp";
    case UnaryOp::log:
      return "log";
    case UnaryOp::abs:
      return "abs";
    case UnaryOp::sign:
      return "sign";
    case UnaryOp::sqrt:
      return "sqrt";
    case UnaryOp::relu:
      return "relu";
    case UnaryOp::leaky_relu:
      return "leaky_relu";
    case UnaryOp::step:
      return "step";
    case UnaryOp::leaky_step:
      return "leaky_step";
    case UnaryOp::sigmoid:
      return "sigmoid";
    case UnaryOp::tanh:
      return "tanh";
    case UnaryOp::pow:
      return "pow";
    case UnaryOp::add_scalar:
      return "add_scalar";
    case UnaryOp::mul_scalar:
      return "mul_scalar";
    case UnaryOp::rsub_scalar:
      return "rsub_scalar";
    case UnaryOp::rdiv_scalar:
      return "rdiv_scalar";
    case UnaryOp::sin:
      return "sin";
    case UnaryOp::cos:
      return "cos";
    case UnaryOp::clamp_min:
      return "clamp_min";
    case UnaryOp::clamp_max:
      return "clamp_max";
    case UnaryOp::ge_step:
      return "ge_step";
    case UnaryOp::le_step:
      return "le_step";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
  }
  return "?";
}

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  Backend* cuda = cuda_backend();
  TGRAD_CHECK(cuda != nullptr, "tgrad was built without CUDA: cannot use device ", device,
              " (rebuild with nvcc on the PATH and -DTGRAD_CUDA=ON)");
  const int count = cuda->device_count();
  TGRAD_CHECK(device.index() < count, "device ", device, " is not available: ", count,
              " CUDA device(s) visible");
  return *cuda;
}

bool cuda_is_available() {
  return cuda_device_count() > 0;
}

int cuda_device_count() {
  Backend* cuda = cuda_backend();
  return cuda == nullptr ? 0 : cuda->device_count();
}

int64_t cuda_memory_allocated(int device) {
  return backend(Device(kCUDA, device)).memory_stats(Device(kCUDA, device)).allocated;
}
int64_t cuda_memory_reserved(int device) {
  return backend(Device(kCUDA, device)).memory_stats(Device(kCUDA, device)).reserved;
}
int64_t cuda_max_memory_allocated(int device) {
  return backend(Device(kCUDA, device)).memory_stats(Device(kCUDA, device)).peak_allocated;
}
void cuda_empty_cache(int device) {
  backend(Device(kCUDA, device)).empty_cache(Device(kCUDA, device));
}
void cuda_synchronize(int device) {
  backend(Device(kCUDA, device)).synchronize(Device(kCUDA, device));
}

void set_memory_limit(Device device, int64_t bytes) {
  TGRAD_CHECK(bytes >= 0, "set_memory_limit: bytes=", bytes, " must be non-negative (0: no limit)");
  backend(device).set_memory_limit(device, bytes);
}
int64_t memory_limit(Device device) {
  return backend(device).memory_limit(device);
}

namespace {
std::atomic<Precision>& precision_setting() {
  static std::atomic<Precision> setting{Precision::highest};
  return setting;
}
}  // namespace

void set_float32_matmul_precision(const std::string& precision) {
  if (precision == "highest") {
    precision_setting() = Precision::highest;
  } else if (precision == "high") {
    precision_setting() = Precision::high;
  } else {
    TGRAD_FAIL("set_float32_matmul_precision: precision '", precision,
               "' is not one of \"highest\", \"high\"");
  }
}

std::string get_float32_matmul_precision() {
  return precision_setting() == Precision::highest ? "highest" : "high";
}

Precision float32_precision() {
  return precision_setting();
}

}  // namespace tgrad
