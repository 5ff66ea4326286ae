// conv_bench: tgrad's CUDA conv-transpose fwd/dgrad/wgrad against cuDNN, same GPU and run, on
// S1-S5, the decoder-layer suite (bench/decoder_layers.h) or any --shape, at precisions highest
// (float32) and high (TF32): time, TFLOP/s, GB/s, % of floor, float64-referenced errors, targets,
// per-layer totals, the kernel each cell ran (the planner's label); one table + JSON (method:
// docs/performance-method.md).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/cudnn_conv.h"
#include "bench/decoder_layers.h"
#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/device.h"
#include "core/tensor.h"
#include "cuda/conv_plan.h"

namespace conv_bench {
namespace {

using tgrad::ConvGeometry;
using tgrad::Precision;
using tgrad::Tensor;

// ---------------------------------------------------------------------------------------------
// Device helpers: random fill and relative L2 error, both on the GPU.

// Uniform in [-1, 1) from a hash of (seed, index): fresh, reproducible, and as fast as a copy.
__global__ void fill_uniform_kernel(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = static_cast<float>(static_cast<double>(z >> 40) * 0x1.0p-23 - 1.0);
  }
}

constexpr int kReduceBlocks = 1024;
constexpr int kReduceThreads = 256;
// cuDNN algorithms timed for the reference: Find's fastest few, whose order Find gets wrong
// between near ties.
constexpr size_t kCudnnCandidatesTimed = 4;

// partials[2*b] = sum over block b's elements of (out - ref)^2, partials[2*b+1] of ref^2.
template <class Ref>
__global__ void error_partials_kernel(const float* out, const Ref* ref, int64_t n,
                                      double* partials) {
  __shared__ double diff_sq[kReduceThreads];
  __shared__ double ref_sq[kReduceThreads];
  double d = 0.0, r = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double e = static_cast<double>(out[i]) - static_cast<double>(ref[i]);
    d += e * e;
    r += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  diff_sq[threadIdx.x] = d;
  ref_sq[threadIdx.x] = r;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      diff_sq[threadIdx.x] += diff_sq[threadIdx.x + half];
      ref_sq[threadIdx.x] += ref_sq[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = diff_sq[0];
    partials[2 * blockIdx.x + 1] = ref_sq[0];
  }
}

void fill_uniform(Tensor& t, uint64_t seed) {
  fill_uniform_kernel<<<1024, 256>>>(t.data_ptr<float>(), t.numel(), seed);
  BENCH_CUDA_CHECK(cudaGetLastError());
}

// ||out - ref||_2 / ||ref||_2, accumulated in float64 in a fixed order. NaN in out gives NaN.
template <class Ref>
double relative_error(const Tensor& out, const Tensor& ref) {
  TGRAD_CHECK(out.numel() == ref.numel(), "conv_bench: relative_error of ", out.numel(), " vs ",
              ref.numel(), " elements");
  DeviceBuffer partials(2 * kReduceBlocks * sizeof(double));
  error_partials_kernel<Ref>
      <<<kReduceBlocks, kReduceThreads>>>(out.data_ptr<float>(), ref.data_ptr<Ref>(), out.numel(),
                                          static_cast<double*>(partials.get()));
  BENCH_CUDA_CHECK(cudaGetLastError());
  std::vector<double> host(2 * kReduceBlocks);
  BENCH_CUDA_CHECK(
      cudaMemcpy(host.data(), partials.get(), partials.size(), cudaMemcpyDeviceToHost));
  double diff = 0.0, norm = 0.0;
  for (int b = 0; b < kReduceBlocks; ++b) {
    diff += host[2 * b];
    norm += host[2 * b + 1];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// ---------------------------------------------------------------------------------------------
// Workloads and passes.

using Workload = tgrad::bench::ConvLayerSpec;

// The project's S1-S5 workloads (docs/performance.md). groups 1, output_padding 0.
std::vector<Workload> s_workloads() {
  using tgrad::bench::layer1d;
  std::vector<Workload> w = {
      layer1d("S1", "S1", 16, 32, 64, 131072, 3, 2, 1),
      layer1d("S2", "S2", 64, 64, 128, 65536, 3, 1, 0),
      layer1d("S3", "S3", 64, 128, 128, 65536, 3, 1, 0),
      layer1d("S4", "S4", 32, 32, 64, 131072, 5, 1, 0),
  };
  w[0].dilation = {2, 0};
  w[3].dilation = {3, 0};
  Workload s5 = tgrad::bench::layer2d("S5", "S5", 8, 32, 32, 512, 3, 1, 1);
  s5.in_size = {512, 1024};
  s5.kernel = {3, 7};
  s5.padding = {1, 3};
  w.push_back(s5);
  return w;
}

ConvGeometry make_geometry(const Workload& wl, int64_t batch) {
  return tgrad::make_conv_transpose_geometry(tgrad::bench::conv_args(wl, batch));
}

// The 4-D shapes of one pass's operands, as tgrad's backend takes them:
// fwd (a = x, b = w, out = y), dgrad (a = dy, b = w, out = dx), wgrad (a = x, b = dy, out = dw).
struct PassShapes {
  tgrad::Shape a, b, out;
};

PassShapes pass_shapes(const ConvGeometry& g, Pass pass) {
  const tgrad::Shape x = {g.batch, g.in_channels, g.in_size[0], g.in_size[1]};
  const tgrad::Shape y = {g.batch, g.out_channels, g.out_size[0], g.out_size[1]};
  const tgrad::Shape w = {g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]};
  switch (pass) {
    case Pass::fwd:
      return {x, w, y};
    case Pass::dgrad:
      return {y, w, x};
    case Pass::wgrad:
      return {x, y, w};
  }
  return {};
}

tgrad::cuda::ConvPass conv_pass(Pass pass) {
  switch (pass) {
    case Pass::fwd:
      return tgrad::cuda::ConvPass::forward;
    case Pass::dgrad:
      return tgrad::cuda::ConvPass::dgrad;
    case Pass::wgrad:
      return tgrad::cuda::ConvPass::wgrad;
  }
  return tgrad::cuda::ConvPass::forward;
}

void run_tgrad(const ConvGeometry& g, Pass pass, const Tensor& a, const Tensor& b, Tensor& out) {
  tgrad::Backend& be = tgrad::backend(out.device());
  switch (pass) {
    case Pass::fwd:
      be.conv_transpose_forward(g, a, b, nullptr, out);
      break;
    case Pass::dgrad:
      be.conv_transpose_dgrad(g, a, b, out);
      break;
    case Pass::wgrad:
      be.conv_transpose_wgrad(g, a, b, out);
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Timing: CUDA events around each run on the legacy default stream (tgrad's and cuDNN's).

struct Timing {
  double median_ms = NAN, min_ms = NAN, max_ms = NAN;
};

// Runs fn(set) `warmup` times, then `repeats` times each between two events, cycling through
// `sets` operand sets; returns the median, min and max of the per-run times.
template <class Fn>
Timing time_runs(int warmup, int repeats, int sets, Fn&& fn) {
  for (int r = 0; r < warmup; ++r)
    fn(r % sets);
  std::vector<Event> start(static_cast<size_t>(repeats)), stop(static_cast<size_t>(repeats));
  for (int r = 0; r < repeats; ++r) {
    BENCH_CUDA_CHECK(cudaEventRecord(start[r].get(), 0));
    fn(r % sets);
    BENCH_CUDA_CHECK(cudaEventRecord(stop[r].get(), 0));
  }
  BENCH_CUDA_CHECK(cudaEventSynchronize(stop.back().get()));
  BENCH_CUDA_CHECK(cudaGetLastError());
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    float t = 0.0f;
    BENCH_CUDA_CHECK(cudaEventElapsedTime(&t, start[r].get(), stop[r].get()));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]), ms.front(), ms.back()};
}

// ---------------------------------------------------------------------------------------------
// Options, results, report.

struct Options {
  std::string suite = "s";             // "s" (S1-S5) or "decoders"
  std::vector<std::string> workloads;  // ids of the suite to run; empty: all
  std::vector<std::string> shapes;     // --shape specs; when given, they replace the suite
  std::vector<std::string> passes{"fwd", "dgrad", "wgrad"};
  std::vector<std::string> precisions{"highest", "high"};
  int repeats = 20;
  int warmup = 3;
  bool check = false;
  int64_t check_batch = 2;
  std::string json_path;
  std::string kernel;           // set_conv_kernel spec: force a kernel ("" lets the planner choose)
  bool benchmark_mode = false;  // set_conv_benchmark: tgrad times its candidates per cell
  double peak_flops_highest = 50e12;
  double peak_flops_high = 380e12;
  double peak_bw = 4.3e12;
  double workspace_mb = 16384;
  bool deterministic_cudnn = false;
  uint64_t seed = 1;
};

struct Row {
  std::string workload, pass, precision, geometry;
  double flops = 0, bytes = 0;
  int sets = 1;
  Timing tgrad, cudnn;
  double err_tgrad = NAN, err_cudnn = NAN, diff_tgrad_cudnn = NAN;
  std::string cudnn_algo;
  std::string kernel;   // the planner's label of the kernel tgrad ran ("wgmma, fill", "fma", ...)
  std::string plan;     // the full plan line (configuration and declined candidates)
  std::string failure;  // non-empty when the row could not be measured

  double speedup() const { return cudnn.median_ms / tgrad.median_ms; }
  double floor_ms(const Options& o) const {
    const double peak = precision == "highest" ? o.peak_flops_highest : o.peak_flops_high;
    return 1e3 * std::max(flops / peak, bytes / o.peak_bw);
  }
  // The issue's bar. highest: as fast as cuDNN, error within 2x cuDNN's strict error;
  // high: 1.5x faster than cuDNN's TF32, error at most 1e-3. NaN fails every comparison.
  bool accuracy_ok() const {
    return precision == "highest" ? err_tgrad <= 2.0 * err_cudnn : err_tgrad <= 1e-3;
  }
  bool target_met() const {
    return failure.empty() && accuracy_ok() && speedup() >= (precision == "highest" ? 1.0 : 1.5);
  }
};

// One workload and pass: fresh inputs, a float64 reference from tgrad's float64 CUDA path, the
// errors of tgrad and cuDNN at each precision, then the timings.
void bench_pass(const Options& opt, const cudaDeviceProp& prop, cudnnHandle_t handle,
                const Workload& wl, size_t index, Pass pass, std::vector<Row>& rows) {
  const int64_t batch = opt.check ? std::min(opt.check_batch, wl.batch) : wl.batch;
  const ConvGeometry base = make_geometry(wl, batch);
  const PassShapes shapes = pass_shapes(base, pass);
  const tgrad::TensorOptions f32 = tgrad::TensorOptions().device(tgrad::Device(tgrad::kCUDA));
  const uint64_t seed =
      opt.seed * 1000003ull + static_cast<uint64_t>(index) * 16 + static_cast<uint64_t>(pass) * 4;

  std::vector<Precision> precisions;
  for (const std::string& p : opt.precisions) {
    precisions.push_back(p == "highest" ? Precision::highest : Precision::high);
  }
  std::vector<Row> local;
  for (Precision p : precisions) {
    Row row;
    row.workload = wl.id;
    row.pass = pass_name(pass);
    row.precision = precision_name(p);
    row.geometry = base.str();
    row.flops = base.flops();
    local.push_back(row);
  }
  auto fail_all = [&](const std::string& why) {
    for (Row& row : local) {
      if (row.failure.empty()) row.failure = why;
    }
  };

  try {
    std::vector<Tensor> a{tgrad::empty(shapes.a, f32)}, b{tgrad::empty(shapes.b, f32)};
    fill_uniform(a[0], seed + 1);
    fill_uniform(b[0], seed + 2);
    const double in_bytes = static_cast<double>(a[0].nbytes() + b[0].nbytes());
    const double bytes = in_bytes + 4.0 * static_cast<double>(tgrad::shape_numel(shapes.out));
    for (Row& row : local)
      row.bytes = bytes;

    // float64 reference of the same float32 inputs, computed on the GPU by the planner's choice:
    // a forced float32-only kernel (--kernel) cannot run it.
    Tensor ref =
        tgrad::empty(shapes.out, tgrad::TensorOptions(tgrad::kFloat64).device(f32.device()));
    {
      const std::string forced = tgrad::get_conv_kernel();
      tgrad::set_conv_kernel("");
      try {
        run_tgrad(base, pass, a[0].to(tgrad::kFloat64), b[0].to(tgrad::kFloat64), ref);
      } catch (...) {
        tgrad::set_conv_kernel(forced);
        throw;
      }
      tgrad::set_conv_kernel(forced);
    }
    tgrad::cuda_empty_cache();

    Tensor out_tgrad = tgrad::empty(shapes.out, f32), out_cudnn = tgrad::empty(shapes.out, f32);
    std::vector<std::optional<CudnnConvTranspose>> cudnn(precisions.size());
    for (size_t i = 0; i < precisions.size(); ++i) {
      Row& row = local[i];
      try {
        ConvGeometry g = base;
        g.precision = precisions[i];
        run_tgrad(g, pass, a[0], b[0], out_tgrad);
        const tgrad::cuda::ConvPlan plan = tgrad::cuda::last_conv_plan(conv_pass(pass));
        row.kernel = plan.label();
        row.plan = plan.describe();
        row.err_tgrad = relative_error<double>(out_tgrad, ref);

        cudnn[i].emplace(handle, g, pass, precisions[i]);
        tgrad::cuda_empty_cache();  // hand cached blocks back so cuDNN's workspace fits
        size_t free_bytes = 0, total_bytes = 0;
        BENCH_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        const size_t margin = size_t{1} << 30;
        const size_t cap = std::min(static_cast<size_t>(opt.workspace_mb * 1e6),
                                    free_bytes > margin ? free_bytes - margin : 0);
        cudnn[i]->choose_algorithm(a[0].raw_data(), b[0].raw_data(), out_cudnn.raw_data(), cap,
                                   opt.deterministic_cudnn);
        row.cudnn_algo = cudnn[i]->describe();
        cudnn[i]->run(a[0].raw_data(), b[0].raw_data(), out_cudnn.raw_data());
        row.err_cudnn = relative_error<double>(out_cudnn, ref);
        row.diff_tgrad_cudnn = relative_error<float>(out_tgrad, out_cudnn);
        std::printf(
            "  %s %-5s %-7s err tgrad %.2e cuDNN %.2e (tgrad vs cuDNN %.2e); tgrad %s; cuDNN %s\n",
            wl.id.c_str(), row.pass.c_str(), row.precision.c_str(), row.err_tgrad, row.err_cudnn,
            row.diff_tgrad_cudnn, row.kernel.c_str(), row.cudnn_algo.c_str());
        if (precisions[i] == Precision::highest && row.err_cudnn > 1e-5) {
          std::printf("  warning: cuDNN's strict float32 error %.2e looks like TF32\n",
                      row.err_cudnn);
        }
      } catch (const std::exception& e) {
        row.failure = e.what();
        cudnn[i].reset();
        std::printf("  %s %s %s: %s\n", wl.id.c_str(), row.pass.c_str(), row.precision.c_str(),
                    e.what());
      }
    }
    tgrad::cuda_empty_cache();

    // Small operands stay in L2 between runs; cycle through enough sets to overflow it.
    const double l2 = static_cast<double>(prop.l2CacheSize);
    int sets = 1;
    if (in_bytes < 2.0 * l2) {
      sets = static_cast<int>(std::clamp(std::ceil(3.0 * l2 / bytes), 2.0, 64.0));
    }
    std::vector<Tensor> out{out_tgrad};
    for (int s = 1; s < sets; ++s) {
      a.push_back(tgrad::empty(shapes.a, f32));
      b.push_back(tgrad::empty(shapes.b, f32));
      out.push_back(tgrad::empty(shapes.out, f32));
      fill_uniform(a.back(), seed + 16 * s + 1);
      fill_uniform(b.back(), seed + 16 * s + 2);
    }
    const int warmup = std::max(opt.warmup, sets);
    for (size_t i = 0; i < precisions.size(); ++i) {
      Row& row = local[i];
      if (!row.failure.empty()) continue;
      row.sets = sets;
      try {
        ConvGeometry g = base;
        g.precision = precisions[i];
        row.tgrad = time_runs(warmup, opt.repeats, sets,
                              [&](int s) { run_tgrad(g, pass, a[s], b[s], out[s]); });
        const auto run_cudnn = [&](int s) {
          cudnn[i]->run(a[s].raw_data(), b[s].raw_data(), out[s].raw_data());
        };
        // Find times each algorithm once, and on small calls the order it reports changes from
        // one process to the next (docs/performance.md): its fastest few are timed here as the
        // reference is, and the fastest of them is the reference.
        const std::vector<AlgoResult> candidates = cudnn[i]->candidates();
        const size_t timed = std::min(candidates.size(), kCudnnCandidatesTimed);
        if (timed > 1) {
          size_t best = 0;
          double best_ms = INFINITY;
          for (size_t c = 0; c < timed; ++c) {
            cudnn[i]->select(candidates[c]);
            const double ms =
                time_runs(warmup, std::max(3, opt.repeats / 2), sets, run_cudnn).median_ms;
            if (ms < best_ms) best_ms = ms, best = c;
          }
          cudnn[i]->select(candidates[best]);
          if (best != 0) {
            // The errors belong to the algorithm that is timed.
            cudnn[i]->run(a[0].raw_data(), b[0].raw_data(), out_cudnn.raw_data());
            run_tgrad(g, pass, a[0], b[0], out_tgrad);
            row.err_cudnn = relative_error<double>(out_cudnn, ref);
            row.diff_tgrad_cudnn = relative_error<float>(out_tgrad, out_cudnn);
            row.cudnn_algo = cudnn[i]->describe();
            std::printf("  %s %-5s %-7s cuDNN timed %zu of Find's fastest: %s (err %.2e)\n",
                        wl.id.c_str(), row.pass.c_str(), row.precision.c_str(), timed,
                        row.cudnn_algo.c_str(), row.err_cudnn);
          }
        }
        row.cudnn = time_runs(warmup, opt.repeats, sets, run_cudnn);
      } catch (const std::exception& e) {
        row.failure = e.what();
        std::printf("  %s %s %s: %s\n", wl.id.c_str(), row.pass.c_str(), row.precision.c_str(),
                    e.what());
      }
    }
  } catch (const std::exception& e) {
    std::printf("  %s %s: %s\n", wl.id.c_str(), pass_name(pass), e.what());
    fail_all(e.what());
  }
  tgrad::cuda_empty_cache();
  rows.insert(rows.end(), local.begin(), local.end());
}

double geomean_speedup(const std::vector<Row>& rows, const std::string& precision, int* count) {
  double log_sum = 0.0;
  *count = 0;
  for (const Row& r : rows) {
    if (r.precision != precision || !r.failure.empty() || !(r.speedup() > 0.0)) continue;
    log_sum += std::log(r.speedup());
    ++*count;
  }
  return *count > 0 ? std::exp(log_sum / *count) : NAN;
}

void print_table(const Options& opt, const std::vector<Row>& rows) {
  std::printf("\n%-16s %-5s %-7s %9s %9s %7s %8s %8s %6s %9s %9s %9s %-6s %s\n", "wl", "pass",
              "prec", "tgrad_ms", "cudnn_ms", "speedup", "TFLOP/s", "GB/s", "%floor", "err_tgrad",
              "err_cudnn", "tg_vs_cd", "target", "kernel");
  for (const Row& r : rows) {
    if (!r.failure.empty()) {
      std::printf("%-16s %-5s %-7s ERROR %s\n", r.workload.c_str(), r.pass.c_str(),
                  r.precision.c_str(), r.failure.c_str());
      continue;
    }
    const double t = r.tgrad.median_ms;
    std::printf("%-16s %-5s %-7s %9.3f %9.3f %7.2f %8.2f %8.0f %6.1f %9.2e %9.2e %9.2e %-6s %s\n",
                r.workload.c_str(), r.pass.c_str(), r.precision.c_str(), t, r.cudnn.median_ms,
                r.speedup(), r.flops / (t * 1e-3) / 1e12, r.bytes / (t * 1e-3) / 1e9,
                100.0 * r.floor_ms(opt) / t, r.err_tgrad, r.err_cudnn, r.diff_tgrad_cudnn,
                r.target_met() ? "PASS" : "FAIL", r.kernel.c_str());
  }
  for (const std::string& p : opt.precisions) {
    int n = 0;
    const double gm = geomean_speedup(rows, p, &n);
    std::printf("geomean speedup (cuDNN/tgrad), %s: %.3f over %d rows\n", p.c_str(), gm, n);
  }
}

// Per layer and precision: fwd + dgrad + wgrad times of tgrad and cuDNN (layers with all three
// passes measured), and the geometric mean of the total speedups.
struct Total {
  std::string workload, precision;
  double tgrad_ms = 0, cudnn_ms = 0;
  int passes = 0;
  double speedup() const { return cudnn_ms / tgrad_ms; }
};

std::vector<Total> layer_totals(const std::vector<Row>& rows) {
  std::vector<Total> totals;
  for (const Row& r : rows) {
    auto it = std::find_if(totals.begin(), totals.end(), [&](const Total& t) {
      return t.workload == r.workload && t.precision == r.precision;
    });
    if (it == totals.end()) {
      totals.push_back({r.workload, r.precision});
      it = totals.end() - 1;
    }
    if (!r.failure.empty()) {
      it->passes = -100;  // any failed pass leaves the layer without a total
      continue;
    }
    it->tgrad_ms += r.tgrad.median_ms;
    it->cudnn_ms += r.cudnn.median_ms;
    ++it->passes;
  }
  std::erase_if(totals, [](const Total& t) { return t.passes != 3; });
  return totals;
}

void print_totals(const Options& opt, const std::vector<Row>& rows) {
  const std::vector<Total> totals = layer_totals(rows);
  if (totals.empty()) return;
  std::printf("\n%-16s %-7s %10s %10s %7s   (fwd + dgrad + wgrad)\n", "layer", "prec", "tgrad_ms",
              "cudnn_ms", "speedup");
  for (const Total& t : totals) {
    std::printf("%-16s %-7s %10.3f %10.3f %7.2f\n", t.workload.c_str(), t.precision.c_str(),
                t.tgrad_ms, t.cudnn_ms, t.speedup());
  }
  for (const std::string& p : opt.precisions) {
    double log_sum = 0.0;
    int n = 0;
    for (const Total& t : totals) {
      if (t.precision != p || !(t.speedup() > 0.0)) continue;
      log_sum += std::log(t.speedup());
      ++n;
    }
    std::printf("geomean of per-layer total speedups, %s: %.3f over %d layers\n", p.c_str(),
                n > 0 ? std::exp(log_sum / n) : NAN, n);
  }
}

nlohmann::json to_json(const Options& opt, const nlohmann::json& env,
                       const std::vector<Row>& rows) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  nlohmann::json j;
  j["environment"] = env;
  j["options"] = {{"suite", opt.suite},
                  {"workloads", opt.workloads},
                  {"shapes", opt.shapes},
                  {"passes", opt.passes},
                  {"precisions", opt.precisions},
                  {"repeats", opt.repeats},
                  {"warmup", opt.warmup},
                  {"check", opt.check},
                  {"peak_flops_highest", opt.peak_flops_highest},
                  {"peak_flops_high", opt.peak_flops_high},
                  {"peak_bw", opt.peak_bw},
                  {"deterministic_cudnn", opt.deterministic_cudnn},
                  {"seed", opt.seed},
                  {"forced_kernel", opt.kernel},
                  {"benchmark_mode", opt.benchmark_mode}};
  j["results"] = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json o = {{"workload", r.workload}, {"pass", r.pass},   {"precision", r.precision},
                        {"geometry", r.geometry}, {"flops", r.flops}, {"min_bytes", r.bytes}};
    if (!r.kernel.empty()) {
      o["kernel"] = r.kernel;
      o["plan"] = r.plan;
    }
    if (!r.failure.empty()) {
      o["error"] = r.failure;
    } else {
      const double t = r.tgrad.median_ms;
      o["rotating_sets"] = r.sets;
      o["tgrad_ms"] = {
          {"median", r.tgrad.median_ms}, {"min", r.tgrad.min_ms}, {"max", r.tgrad.max_ms}};
      o["cudnn_ms"] = {
          {"median", r.cudnn.median_ms}, {"min", r.cudnn.min_ms}, {"max", r.cudnn.max_ms}};
      o["cudnn_algo"] = r.cudnn_algo;
      o["speedup"] = num(r.speedup());
      o["tgrad_tflops"] = num(r.flops / (t * 1e-3) / 1e12);
      o["tgrad_gbs"] = num(r.bytes / (t * 1e-3) / 1e9);
      o["floor_ms"] = num(r.floor_ms(opt));
      o["pct_of_floor"] = num(100.0 * r.floor_ms(opt) / t);
      o["err_tgrad"] = num(r.err_tgrad);
      o["err_cudnn"] = num(r.err_cudnn);
      o["diff_tgrad_cudnn"] = num(r.diff_tgrad_cudnn);
      o["accuracy_ok"] = r.accuracy_ok();
      o["target_met"] = r.target_met();
    }
    j["results"].push_back(o);
  }
  for (const std::string& p : opt.precisions) {
    int n = 0;
    j["geomean_speedup"][p] = num(geomean_speedup(rows, p, &n));
  }
  j["layer_totals"] = nlohmann::json::array();
  for (const Total& t : layer_totals(rows)) {
    j["layer_totals"].push_back({{"workload", t.workload},
                                 {"precision", t.precision},
                                 {"tgrad_ms", t.tgrad_ms},
                                 {"cudnn_ms", t.cudnn_ms},
                                 {"speedup", num(t.speedup())}});
  }
  return j;
}

int run(const Options& opt) {
  if (!tgrad::cuda_is_available()) {
    std::fprintf(stderr, "conv_bench: no CUDA device (or tgrad built without CUDA)\n");
    return 2;
  }
  tgrad::set_conv_kernel(opt.kernel);  // an unknown name throws here, before any work
  // The first call of a cell (a warm-up run) times tgrad's candidates, as cuDNN's search does.
  tgrad::set_conv_benchmark(opt.benchmark_mode);
  BENCH_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  BENCH_CUDA_CHECK(cudaDriverGetVersion(&driver));
  BENCH_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const char* tf32_override = std::getenv("NVIDIA_TF32_OVERRIDE");
  nlohmann::json env = {
      {"device", prop.name},
      {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
      {"sms", prop.multiProcessorCount},
      {"l2_bytes", prop.l2CacheSize},
      {"memory_bytes", prop.totalGlobalMem},
      {"driver_version", driver},
      {"runtime_version", runtime},
      {"cudnn_version", cudnnGetVersion()},
      {"cudnn_compiled_version", CUDNN_VERSION},
      {"cudnn_cudart_version", cudnnGetCudartVersion()}};
  std::printf("device: %s (sm_%d%d, %d SMs, L2 %.1f MB, %.1f GB)\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, prop.l2CacheSize / 1e6,
              static_cast<double>(prop.totalGlobalMem) / 1e9);
  std::printf("CUDA driver %d, runtime %d; cuDNN %zu (compiled against %d, its cudart %zu)\n",
              driver, runtime, cudnnGetVersion(), CUDNN_VERSION, cudnnGetCudartVersion());
  std::printf("floors: peak %.0f TFLOP/s highest, %.0f TFLOP/s high, %.0f GB/s%s\n",
              opt.peak_flops_highest / 1e12, opt.peak_flops_high / 1e12, opt.peak_bw / 1e9,
              opt.check ? "; --check: reduced batch" : "");
  if (tf32_override != nullptr) {
    std::printf("warning: NVIDIA_TF32_OVERRIDE=%s changes cuDNN's TF32 use\n", tf32_override);
  }

  // The layers to run: --shape specs, else the chosen suite filtered by --workloads.
  std::vector<Workload> layers;
  if (!opt.shapes.empty()) {
    for (const std::string& spec : opt.shapes) {
      layers.push_back(tgrad::bench::parse_layer_spec(spec));
      layers.back().id = "shape" + std::to_string(layers.size());
      make_geometry(layers.back(), 1);  // a bad geometry fails here, before any timing
    }
  } else {
    const std::vector<Workload> suite =
        opt.suite == "decoders" ? tgrad::bench::decoder_layers() : s_workloads();
    for (const std::string& id : opt.workloads) {
      TGRAD_CHECK(
          std::any_of(suite.begin(), suite.end(), [&](const Workload& wl) { return wl.id == id; }),
          "conv_bench: --workloads names '", id, "', not a layer of suite ", opt.suite);
    }
    for (const Workload& wl : suite) {
      if (opt.workloads.empty() ||
          std::find(opt.workloads.begin(), opt.workloads.end(), wl.id) != opt.workloads.end()) {
        layers.push_back(wl);
      }
    }
  }
  for (const Workload& wl : layers) {
    std::printf("%-16s %s\n", wl.id.c_str(), wl.source.c_str());
  }

  CudnnHandle handle;
  std::vector<Row> rows;
  for (size_t index = 0; index < layers.size(); ++index) {
    const Workload& wl = layers[index];
    for (Pass pass : {Pass::fwd, Pass::dgrad, Pass::wgrad}) {
      if (std::find(opt.passes.begin(), opt.passes.end(), pass_name(pass)) == opt.passes.end()) {
        continue;
      }
      std::printf("%s %s\n", wl.id.c_str(), pass_name(pass));
      std::fflush(stdout);
      bench_pass(opt, prop, handle.get(), wl, index, pass, rows);
    }
  }
  print_table(opt, rows);
  print_totals(opt, rows);
  if (!opt.json_path.empty()) {
    std::ofstream file(opt.json_path);
    TGRAD_CHECK(file.good(), "conv_bench: cannot write --json ", opt.json_path);
    file << to_json(opt, env, rows).dump(2) << "\n";
    std::printf("wrote %s\n", opt.json_path.c_str());
  }
  // Exit status: 1 when any row failed to run or tgrad's error misses its bar (a smoke test
  // for --check); speed alone never fails the run.
  for (const Row& r : rows) {
    if (!r.failure.empty() || !r.accuracy_ok()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace conv_bench

int main(int argc, char** argv) {
  conv_bench::Options opt;
  CLI::App app{
      "conv_bench: tgrad's CUDA conv-transpose fwd/dgrad/wgrad vs cuDNN on S1-S5, the decoder "
      "suite or any --shape"};
  app.add_option("--suite", opt.suite, "s (S1-S5, default) or decoders (bench/decoder_layers.h)")
      ->check(CLI::IsMember({"s", "decoders"}));
  app.add_option("--workloads", opt.workloads,
                 "comma-separated layer ids of the suite (S1..S5, or decoder ids); default all")
      ->delimiter(',');
  app.add_option("--shape", opt.shapes,
                 "a layer as key=value tokens, e.g. \"n=16 ci=512 co=256 l=32 k=16 s=8 p=4\" "
                 "(keys n ci co g l|h w k s p op d; k=3x7 per axis); repeatable, replaces the "
                 "suite");
  app.add_option("--passes", opt.passes, "comma-separated subset of fwd,dgrad,wgrad")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "dgrad", "wgrad"}));
  app.add_option("--precisions", opt.precisions, "comma-separated subset of highest,high")
      ->delimiter(',')
      ->check(CLI::IsMember({"highest", "high"}));
  auto* repeats = app.add_option("--repeats", opt.repeats,
                                 "timed runs per measurement; the median is reported (default "
                                 "20, 5 with --check)")
                      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed runs first (at least one per rotating set)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--check", opt.check, "smoke test: each workload at a reduced batch, few repeats");
  app.add_option("--check-batch", opt.check_batch, "batch size used by --check")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", opt.json_path, "write every result as JSON to this file");
  app.add_option("--peak-flops-highest", opt.peak_flops_highest,
                 "FLOP/s of the floor at precision highest (H200 float32: 50e12)");
  app.add_option("--peak-flops-high", opt.peak_flops_high,
                 "FLOP/s of the floor at precision high (H200 TF32 dense: 380e12)");
  app.add_option("--peak-bw", opt.peak_bw, "bytes/s of the floor (H200 HBM3e: 4.3e12)");
  app.add_option("--cudnn-workspace-mb", opt.workspace_mb,
                 "largest workspace offered to cuDNN's algorithm search, MB");
  app.add_flag("--cudnn-deterministic", opt.deterministic_cudnn,
               "only let cuDNN choose deterministic algorithms (tgrad's always are)");
  app.add_option("--seed", opt.seed, "seed of the random inputs");
  app.add_option("--kernel", opt.kernel,
                 "force tgrad's conv kernel: a name (wgmma, mma.sync, batch-wgmma, batch-igemm, "
                 "depthwise, thin, direct, gemm, "
                 "fma) or fwd=..,dgrad=..,"
                 "wgrad=.. (set_conv_kernel); cells it cannot run report the planner's reason");
  app.add_flag("--benchmark-mode", opt.benchmark_mode,
               "tgrad's benchmark mode (set_conv_benchmark): each cell runs the fastest of the "
               "kernels that can take it, timed on first use, as cuDNN's search picks its "
               "algorithm");
  CLI11_PARSE(app, argc, argv);
  if (opt.check && repeats->count() == 0) opt.repeats = 5;
  try {
    return conv_bench::run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conv_bench: %s\n", e.what());
    return 2;
  }
}
