// DType names and sizes, Device parsing and printing, and overflow-checked element counts.
#include "core/dtype.h"

#include "core/error.h"

namespace tgrad {

int64_t dtype_size(DType dtype) {
  return dtype == DType::float32 ? 4 : 8;
}

const char* dtype_name(DType dtype) {
  return dtype == DType::float32 ? "float32" : "float64";
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << dtype_name(dtype);
}

Device::Device(DeviceType type, int index) : type_(type), index_(index) {
  TGRAD_CHECK(index >= 0, "Device: index ", index, " must be non-negative");
  TGRAD_CHECK(type == DeviceType::cuda || index == 0, "Device: cpu has only index 0, got ", index);
}

Device::Device(const std::string& spec) : type_(DeviceType::cpu), index_(0) {
  if (spec == "cpu") return;
  if (spec == "cuda") {
    type_ = DeviceType::cuda;
    return;
  }
  const std::string prefix = "cuda:";
  if (spec.rfind(prefix, 0) == 0 && spec.size() > prefix.size() &&
      spec.find_first_not_of("0123456789", prefix.size()) == std::string::npos &&
      spec.size() - prefix.size() <= 4) {
    type_ = DeviceType::cuda;
    index_ = std::stoi(spec.substr(prefix.size()));
    return;
  }
  TGRAD_FAIL("Device: '", spec, "' is not a device; expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, const Device& device) {
  return os << device.str();
}

int64_t shape_numel(const Shape& shape, const char* fn) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    TGRAD_CHECK(shape[i] >= 0, fn, ": size[", i, "]=", shape[i], " must be non-negative (shape ",
                shape, ")");
    TGRAD_CHECK(!__builtin_mul_overflow(n, shape[i], &n), fn, ": shape ", shape,
                " has more elements than int64 can count");
  }
  return n;
}

}  // namespace tgrad
