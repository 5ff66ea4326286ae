// The cuDNN side of conv_bench: checked CUDA/cuDNN calls, RAII owners (handle, descriptors,
// device buffer, event), and CudnnConvTranspose, which runs one pass of a tgrad transposed
// convolution as the matching cuDNN regular-convolution call with cuDNN's fastest algorithm.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/conv_geometry.h"
#include "core/error.h"

namespace conv_bench {

// The three passes of a transposed convolution, named fwd, dgrad and wgrad.
enum class Pass { fwd, dgrad, wgrad };

inline const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::fwd:
      return "fwd";
    case Pass::dgrad:
      return "dgrad";
    case Pass::wgrad:
      return "wgrad";
  }
  return "?";
}

inline const char* precision_name(tgrad::Precision precision) {
  return precision == tgrad::Precision::highest ? "highest" : "high";
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    TGRAD_FAIL("conv_bench: ", call, " failed: ", cudaGetErrorName(status), " (",
               cudaGetErrorString(status), ") at ", file, ":", line);
  }
}

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) {
    TGRAD_FAIL("conv_bench: ", call, " failed: ", cudnnGetErrorString(status), " at ", file, ":",
               line);
  }
}

}  // namespace conv_bench

#define BENCH_CUDA_CHECK(call) ::conv_bench::check_cuda((call), #call, __FILE__, __LINE__)
#define BENCH_CUDNN_CHECK(call) ::conv_bench::check_cudnn((call), #call, __FILE__, __LINE__)

namespace conv_bench {

// Owns one cuDNN object made by Create and released by Destroy (handle or descriptor).
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class CudnnObject {
 public:
  CudnnObject() { check_cudnn(Create(&value_), "cudnnCreate*", __FILE__, __LINE__); }
  ~CudnnObject() {
    if (value_ != nullptr) Destroy(value_);
  }
  CudnnObject(const CudnnObject&) = delete;
  CudnnObject& operator=(const CudnnObject&) = delete;
  T get() const { return value_; }

 private:
  T value_ = nullptr;
};

using CudnnHandle = CudnnObject<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using TensorDescriptor =
    CudnnObject<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor =
    CudnnObject<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    CudnnObject<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                cudnnDestroyConvolutionDescriptor>;

// Raw device memory (cuDNN's workspace, scratch for reductions); empty when nbytes is 0.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t nbytes) : nbytes_(nbytes) {
    if (nbytes > 0) {
      const cudaError_t status = cudaMalloc(&ptr_, nbytes);
      if (status != cudaSuccess) {
        (void)cudaGetLastError();
        TGRAD_FAIL("conv_bench: cudaMalloc of ", nbytes,
                   " bytes failed: ", cudaGetErrorString(status));
      }
    }
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), nbytes_(std::exchange(other.nbytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      nbytes_ = std::exchange(other.nbytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t size() const { return nbytes_; }
  void reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    nbytes_ = 0;
  }

 private:
  void* ptr_ = nullptr;
  size_t nbytes_ = 0;
};

class Event {
 public:
  Event() { BENCH_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// One algorithm as cuDNN's Find reported it, whatever the pass.
struct AlgoResult {
  int algo = -1;
  cudnnStatus_t status = CUDNN_STATUS_NOT_SUPPORTED;
  float ms = 0.0f;
  size_t workspace = 0;
  bool deterministic = false;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

inline const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor_op_conv";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "?";
}

// How many algorithms the cuDNN call behind `pass` has (our fwd is cuDNN's backward-data, our
// dgrad its forward, our wgrad its backward-filter).
inline int algo_count(Pass pass) {
  switch (pass) {
    case Pass::fwd:
      return static_cast<int>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    case Pass::dgrad:
      return static_cast<int>(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    case Pass::wgrad:
      return static_cast<int>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  }
  return 0;
}

// The cuDNN algorithm enum's name for `algo` of the cuDNN call that implements `pass`.
inline std::string algo_name(Pass pass, int algo) {
  static const char* const kFwd[] = {"fwd_implicit_gemm", "fwd_implicit_precomp_gemm",
                                     "fwd_gemm",          "fwd_direct",
                                     "fwd_fft",           "fwd_fft_tiling",
                                     "fwd_winograd",      "fwd_winograd_nonfused"};
  static const char* const kBwdData[] = {"bwd_data_0",        "bwd_data_1",
                                         "bwd_data_fft",      "bwd_data_fft_tiling",
                                         "bwd_data_winograd", "bwd_data_winograd_nonfused"};
  static const char* const kBwdFilter[] = {"bwd_filter_0",         "bwd_filter_1",
                                           "bwd_filter_fft",       "bwd_filter_3",
                                           "bwd_filter_winograd",  "bwd_filter_winograd_nonfused",
                                           "bwd_filter_fft_tiling"};
  const char* const* names = pass == Pass::fwd ? kBwdData : pass == Pass::dgrad ? kFwd : kBwdFilter;
  const int count = algo_count(pass);
  if (algo < 0 || algo >= count) return "algo_" + std::to_string(algo);
  return names[algo];
}

// One pass of a transposed convolution run by cuDNN. The regular convolution cuDNN knows maps
// the transposed one's y (N, C_out, H_out, W_out) to its x (N, C_in, H_in, W_in) with a filter
// (K = C_in, C = C_out/g, kH, kW), which is exactly tgrad's weight in NCHW. Hence:
//   fwd   y  = convT(x, w)   -> cudnnConvolutionBackwardData  (dy := x, dx := y)
//   dgrad dx = conv(dy, w)   -> cudnnConvolutionForward       (x := dy, y := dx)
//   wgrad dw = wgrad(x, dy)  -> cudnnConvolutionBackwardFilter(x := dy, dy := x)
// Operands follow tgrad's backend: fwd (a = x, b = w, out = y), dgrad (a = dy, b = w,
// out = dx), wgrad (a = x, b = dy, out = dw). All float32, contiguous NCHW.
class CudnnConvTranspose {
 public:
  CudnnConvTranspose(cudnnHandle_t handle, const tgrad::ConvGeometry& g, Pass pass,
                     tgrad::Precision precision)
      : handle_(handle), pass_(pass), precision_(precision) {
    BENCH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(big_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                 to_int(g.batch), to_int(g.out_channels),
                                                 to_int(g.out_size[0]), to_int(g.out_size[1])));
    BENCH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(small_.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                 to_int(g.batch), to_int(g.in_channels),
                                                 to_int(g.in_size[0]), to_int(g.in_size[1])));
    BENCH_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        filter_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, to_int(g.in_channels),
        to_int(g.out_channels_per_group()), to_int(g.kernel[0]), to_int(g.kernel[1])));
    BENCH_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv_.get(), to_int(g.padding[0]), to_int(g.padding[1]), to_int(g.stride[0]),
        to_int(g.stride[1]), to_int(g.dilation[0]), to_int(g.dilation[1]), CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    BENCH_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), to_int(g.groups)));
    // cuDNN reads output_padding from the shapes: check that its output size formula gives
    // back x's size from y's, as it does for output_padding < stride.
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t span = g.dilation[axis] * (g.kernel[axis] - 1) + 1;
      const int64_t back = (g.out_size[axis] + 2 * g.padding[axis] - span) / g.stride[axis] + 1;
      TGRAD_CHECK(back == g.in_size[axis], "conv_bench: cuDNN cannot express ", g.str(), " (axis ",
                  axis, " maps back to ", back, ", not ", g.in_size[axis], ")");
    }
  }

  // Times every algorithm with cuDNN's Find on these operands (out is overwritten), keeps the
  // ones the precision allows as candidates() and selects Find's fastest: "highest" runs with
  // CUDNN_FMA_MATH (no tensor cores, so no TF32); "high" searches CUDNN_DEFAULT_MATH and
  // CUDNN_TENSOR_OP_MATH (TF32 allowed, no down-conversion to half). The workspace offered to
  // Find is capped at workspace_cap bytes.
  void choose_algorithm(const void* a, const void* b, void* out, size_t workspace_cap,
                        bool deterministic_only) {
    const std::vector<cudnnMathType_t> maths =
        precision_ == tgrad::Precision::highest
            ? std::vector<cudnnMathType_t>{CUDNN_FMA_MATH}
            : std::vector<cudnnMathType_t>{CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH};
    size_t wanted = 0;
    for (cudnnMathType_t math : maths) {
      set_math(math);
      wanted = std::max(wanted, max_workspace_size());
    }
    workspace_ = DeviceBuffer();  // release the previous choice's before asking for more
    workspace_ = DeviceBuffer(std::min(wanted, workspace_cap));

    std::vector<AlgoResult> results;
    for (cudnnMathType_t math : maths) {
      set_math(math);
      for (const AlgoResult& r : find(a, b, out))
        results.push_back(r);
    }
    std::stable_sort(results.begin(), results.end(),
                     [](const AlgoResult& x, const AlgoResult& y) { return x.ms < y.ms; });
    candidates_.clear();
    for (const AlgoResult& r : results) {
      if (r.status != CUDNN_STATUS_SUCCESS || r.workspace > workspace_.size()) continue;
      if (r.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      if (precision_ == tgrad::Precision::highest && r.math == CUDNN_TENSOR_OP_MATH) continue;
      if (deterministic_only && !r.deterministic) continue;
      const auto same = [&](const AlgoResult& c) { return c.algo == r.algo && c.math == r.math; };
      if (std::none_of(candidates_.begin(), candidates_.end(), same)) candidates_.push_back(r);
    }
    TGRAD_CHECK(!candidates_.empty(), "conv_bench: cuDNN found no usable algorithm for ",
                pass_name(pass_), " at precision ", precision_name(precision_), " (",
                results.size(), " tried, workspace cap ", workspace_cap, " bytes)");
    select(candidates_.front());
  }

  // The usable algorithms Find reported (one per algorithm and math type), fastest first by
  // Find's own timing.
  const std::vector<AlgoResult>& candidates() const { return candidates_; }

  // Runs `r` (one of candidates()) from now on. highest keeps FMA on the descriptor whatever
  // Find reported; high runs the math type the algorithm was timed with, as frameworks do.
  void select(const AlgoResult& r) {
    choice_ = r;
    set_math(precision_ == tgrad::Precision::highest ? CUDNN_FMA_MATH : r.math);
    workspace_ = DeviceBuffer();
    workspace_ = DeviceBuffer(r.workspace);
  }

  // out = pass(a, b) with the chosen algorithm, on the legacy default stream.
  void run(const void* a, const void* b, void* out) const {
    TGRAD_CHECK(choice_.algo >= 0, "conv_bench: CudnnConvTranspose::run before choose_algorithm");
    const float one = 1.0f, zero = 0.0f;
    switch (pass_) {
      case Pass::fwd:
        BENCH_CUDNN_CHECK(cudnnConvolutionBackwardData(
            handle_, &one, filter_.get(), b, small_.get(), a, conv_.get(),
            static_cast<cudnnConvolutionBwdDataAlgo_t>(choice_.algo), workspace_.get(),
            workspace_.size(), &zero, big_.get(), out));
        break;
      case Pass::dgrad:
        BENCH_CUDNN_CHECK(
            cudnnConvolutionForward(handle_, &one, big_.get(), a, filter_.get(), b, conv_.get(),
                                    static_cast<cudnnConvolutionFwdAlgo_t>(choice_.algo),
                                    workspace_.get(), workspace_.size(), &zero, small_.get(), out));
        break;
      case Pass::wgrad:
        BENCH_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            handle_, &one, big_.get(), b, small_.get(), a, conv_.get(),
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice_.algo), workspace_.get(),
            workspace_.size(), &zero, filter_.get(), out));
        break;
    }
  }

  const AlgoResult& choice() const { return choice_; }
  std::string describe() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s math=%s ws=%.1fMB%s", algo_name(pass_, choice_.algo).c_str(),
                  math_name(choice_.math), static_cast<double>(choice_.workspace) / 1e6,
                  choice_.deterministic ? "" : " nondeterministic");
    return buf;
  }

 private:
  static int to_int(int64_t v) {
    TGRAD_CHECK(v >= 0 && v <= 0x7fffffff, "conv_bench: size ", v, " does not fit cuDNN's int");
    return static_cast<int>(v);
  }

  void set_math(cudnnMathType_t math) {
    BENCH_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), math));
  }

  // The largest workspace any algorithm asks for under the descriptor's math type (algorithms
  // that do not support this problem report an error and are skipped).
  size_t max_workspace_size() const {
    size_t most = 0;
    const int count = algo_count(pass_);
    for (int algo = 0; algo < count; ++algo) {
      size_t bytes = 0;
      cudnnStatus_t status = CUDNN_STATUS_NOT_SUPPORTED;
      switch (pass_) {
        case Pass::fwd:
          status = cudnnGetConvolutionBackwardDataWorkspaceSize(
              handle_, filter_.get(), small_.get(), conv_.get(), big_.get(),
              static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
          break;
        case Pass::dgrad:
          status = cudnnGetConvolutionForwardWorkspaceSize(
              handle_, big_.get(), filter_.get(), conv_.get(), small_.get(),
              static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
          break;
        case Pass::wgrad:
          status = cudnnGetConvolutionBackwardFilterWorkspaceSize(
              handle_, big_.get(), small_.get(), conv_.get(), filter_.get(),
              static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
          break;
      }
      if (status == CUDNN_STATUS_SUCCESS) most = std::max(most, bytes);
    }
    return most;
  }

  template <class Perf>
  static std::vector<AlgoResult> to_results(const Perf* perf, int n) {
    std::vector<AlgoResult> results;
    for (int i = 0; i < n; ++i) {
      results.push_back({static_cast<int>(perf[i].algo), perf[i].status, perf[i].time,
                         perf[i].memory, perf[i].determinism == CUDNN_DETERMINISTIC,
                         perf[i].mathType});
    }
    return results;
  }

  // cuDNN's Find under the descriptor's current math type, with our workspace.
  std::vector<AlgoResult> find(const void* a, const void* b, void* out) {
    int n = 0;
    switch (pass_) {
      case Pass::fwd: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        BENCH_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            handle_, filter_.get(), b, small_.get(), a, conv_.get(), big_.get(), out,
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, workspace_.get(), workspace_.size()));
        return to_results(perf, n);
      }
      case Pass::dgrad: {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        BENCH_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            handle_, big_.get(), a, filter_.get(), b, conv_.get(), small_.get(), out,
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, workspace_.get(), workspace_.size()));
        return to_results(perf, n);
      }
      case Pass::wgrad: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        BENCH_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            handle_, big_.get(), b, small_.get(), a, conv_.get(), filter_.get(), out,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf, workspace_.get(),
            workspace_.size()));
        return to_results(perf, n);
      }
    }
    return {};
  }

  cudnnHandle_t handle_;
  Pass pass_;
  tgrad::Precision precision_;
  TensorDescriptor big_;    // the transposed conv's y (N, C_out, H_out, W_out)
  TensorDescriptor small_;  // the transposed conv's x (N, C_in, H_in, W_in)
  std::vector<AlgoResult> candidates_;
  FilterDescriptor filter_;
  ConvolutionDescriptor conv_;
  DeviceBuffer workspace_;
  AlgoResult choice_;
};

}  // namespace conv_bench
