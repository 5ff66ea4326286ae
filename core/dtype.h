// Element types and devices: DType (float32, float64, and int64 for indices), Device (cpu, or
// cuda with an index), and the Shape type with its element count.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tgrad {

// float32 trains, float64 checks; int64 holds indices (index_select, argmax) and counters
// (BatchNorm's num_batches_tracked). Arithmetic ops take the floating dtypes only and say so.
enum class DType { float32, float64, int64 };
inline constexpr DType kFloat32 = DType::float32;
inline constexpr DType kFloat64 = DType::float64;
inline constexpr DType kInt64 = DType::int64;

int64_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32" / "float64" / "int64"
inline bool is_floating(DType dtype) {
  return dtype != DType::int64;
}
std::ostream& operator<<(std::ostream& os, DType dtype);

// The DType of a C++ element type; any other type is a compile-time error naming the choices.
template <class T>
constexpr DType dtype_of() {
  static_assert(sizeof(T) == 0, "tgrad tensors hold float, double or int64_t elements only");
  return DType::float32;
}
template <>
constexpr DType dtype_of<float>() {
  return DType::float32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::float64;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::int64;
}

enum class DeviceType { cpu, cuda };
inline constexpr DeviceType kCPU = DeviceType::cpu;
inline constexpr DeviceType kCUDA = DeviceType::cuda;

// A device as LibTorch names it: kCPU, kCUDA (index 0), Device(kCUDA, 1) or Device("cuda:1").
class Device {
 public:
  Device(DeviceType type = DeviceType::cpu, int index = 0);  // NOLINT: implicit, as in LibTorch
  explicit Device(const std::string& spec);                  // "cpu", "cuda", "cuda:1"

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::cpu; }
  bool is_cuda() const { return type_ == DeviceType::cuda; }
  std::string str() const;  // "cpu", "cuda:0"

  friend bool operator==(const Device& a, const Device& b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }

 private:
  DeviceType type_;
  int index_;
};
std::ostream& operator<<(std::ostream& os, const Device& device);

using Shape = std::vector<int64_t>;

// Product of the sizes; throws tgrad::Error (naming `fn`) on a negative size or int64 overflow.
int64_t shape_numel(const Shape& shape, const char* fn = "shape_numel");

}  // namespace tgrad
