// DType names and sizes, Device parsing and printing, and overflow-checked element counts.
#include "core/dtype.h"

#include <algorithm>

#include "core/error.h"

namespace tgrad {

int64_t dtype_size(DType dtype) {
  return dtype == DType::float32 ? 4 : 8;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
    case DType::int64:
      return "int64";
  }
  return "unknown dtype";
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
  // The product of the non-zero sizes must fit in int64 even when another size is 0, so that
  // zeros({0, 2^40, 2^40}) and zeros({2^40, 2^40, 0}) are refused alike, and any product of some
  // of a shape's sizes (Flatten, a mean's count, a fan-in) is known to fit.
  int64_t nonzero = 1;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    TGRAD_CHECK(shape[i] >= 0, fn, ": size[", i, "]=", shape[i], " must be non-negative (shape ",
                shape, ")");
    if (shape[i] == 0) {
      empty = true;
      continue;
    }
    TGRAD_CHECK(!__builtin_mul_overflow(nonzero, shape[i], &nonzero), fn, ": shape ", shape,
                " has more elements than int64 can count",
                empty || std::count(shape.begin(), shape.end(), 0) > 0
                    ? " (its non-zero sizes multiply past int64, which tgrad refuses even for an "
                      "empty tensor)"
                    : "");
  }
  return empty ? 0 : nonzero;
}

}  // namespace tgrad
