// cpu_conv_bench: times the CPU backend's conv_transpose forward, dgrad and wgrad on the
// five S1-S5 workloads scaled down (1-D lengths / 64, 2-D height and width / 8), as GFLOP/s
// (ConvGeometry::flops(), the median of several runs) next to Eigen's float32 GEMM (1024^3, on
// the same threads) measured just before each workload in the same run.
// Usage: cpu_conv_bench [runs=5]. Threads: TGRAD_NUM_THREADS, else every hardware thread.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/random.h"
#include "core/tensor.h"

namespace {

using tgrad::ConvGeometry;
using tgrad::Tensor;

struct Workload {
  const char* id;
  int dims;  // 1 or 2
  int64_t batch, in_channels, out_channels;
  std::array<int64_t, 2> kernel, in_size, stride, padding, dilation;  // 1-D: entry 0 only
};

// the S1-S5 table with 1-D lengths / 64 and 2-D height and width / 8.
const std::vector<Workload> kWorkloads = {
    {"S1", 1, 16, 32, 64, {3, 0}, {131072 / 64, 0}, {2, 0}, {1, 0}, {2, 0}},
    {"S2", 1, 64, 64, 128, {3, 0}, {65536 / 64, 0}, {1, 0}, {0, 0}, {1, 0}},
    {"S3", 1, 64, 128, 128, {3, 0}, {65536 / 64, 0}, {1, 0}, {0, 0}, {1, 0}},
    {"S4", 1, 32, 32, 64, {5, 0}, {131072 / 64, 0}, {1, 0}, {0, 0}, {3, 0}},
    {"S5", 2, 8, 32, 32, {3, 7}, {512 / 8, 1024 / 8}, {1, 1}, {1, 3}, {1, 1}},
};

double median_seconds(int runs, const std::function<void()>& fn) {
  fn();  // warm-up: first-touch of buffers, caches
  std::vector<double> times;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int thread_count() {
  if (const char* env = std::getenv("TGRAD_NUM_THREADS"); env != nullptr && *env != '\0') {
    return std::max(1, std::atoi(env));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Eigen float32 GEMM C = A B (n x n), GFLOP/s. With several threads, C's columns are split
// evenly and each thread runs a single-threaded GEMM on its part, as the backend does.
double eigen_gemm_gflops(int64_t n, int threads, int runs) {
  const Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n);
  const Eigen::MatrixXf b = Eigen::MatrixXf::Random(n, n);
  Eigen::MatrixXf c(n, n);
  const double seconds = median_seconds(runs, [&] {
    std::vector<std::jthread> pool;
    const int64_t per = (n + threads - 1) / threads;
    for (int t = 1; t < threads; ++t) {
      const int64_t c0 = t * per, len = std::min(per, n - c0);
      if (len > 0)
        pool.emplace_back(
            [&, c0, len] { c.middleCols(c0, len).noalias() = a * b.middleCols(c0, len); });
    }
    c.leftCols(std::min(per, n)).noalias() = a * b.leftCols(std::min(per, n));
  });
  return 2.0 * static_cast<double>(n * n * n) / seconds * 1e-9;
}

std::string describe(const Workload& w) {
  char buf[160];
  if (w.dims == 1) {
    std::snprintf(buf, sizeof buf, "N%ld %ld->%ld k%ld L%ld s%ld p%ld d%ld", long(w.batch),
                  long(w.in_channels), long(w.out_channels), long(w.kernel[0]), long(w.in_size[0]),
                  long(w.stride[0]), long(w.padding[0]), long(w.dilation[0]));
  } else {
    std::snprintf(buf, sizeof buf, "N%ld %ld->%ld k%ldx%ld %ldx%ld s%ld p(%ld,%ld) d%ld",
                  long(w.batch), long(w.in_channels), long(w.out_channels), long(w.kernel[0]),
                  long(w.kernel[1]), long(w.in_size[0]), long(w.in_size[1]), long(w.stride[0]),
                  long(w.padding[0]), long(w.padding[1]), long(w.dilation[0]));
  }
  return buf;
}

ConvGeometry geometry_of(const Workload& w) {
  tgrad::ConvTransposeArgs args;
  args.fn = w.dims == 1 ? "conv_transpose1d" : "conv_transpose2d";
  args.spatial_dims = w.dims;
  args.x_shape = {w.batch, w.in_channels};
  args.w_shape = {w.in_channels, w.out_channels};
  for (int a = 0; a < w.dims; ++a) {
    args.x_shape.push_back(w.in_size[a]);
    args.w_shape.push_back(w.kernel[a]);
  }
  args.has_bias = true;
  args.b_shape = {w.out_channels};
  args.stride = w.stride;
  args.padding = w.padding;
  args.dilation = w.dilation;
  args.output_padding = {0, 0};
  args.groups = 1;
  return tgrad::make_conv_transpose_geometry(args);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int threads = thread_count();
  tgrad::manual_seed(0);
  tgrad::Backend& cpu = tgrad::backend(tgrad::Device(tgrad::kCPU));

  // The machine may be shared, so the yardstick is measured again next to every workload and
  // each ratio uses the GEMM rate of its own workload's moment.
  constexpr int64_t kGemmN = 1024;
  std::printf("tgrad CPU conv-transpose bench, float32, %d thread(s), median of %d runs\n", threads,
              runs);
  std::printf(
      "Eigen sgemm %ld^3 on 1 thread: %.1f GFLOP/s; GEMM column: the same on %d thread(s)\n\n",
      long(kGemmN), eigen_gemm_gflops(kGemmN, 1, runs), threads);
  std::printf("%-3s %-36s %-7s %9s %9s %9s %7s\n", "id", "workload", "pass", "ms", "GFLOP/s",
              "GEMM", "ratio");
  std::printf("%s\n", std::string(85, '-').c_str());

  for (const Workload& w : kWorkloads) {
    const ConvGeometry g = geometry_of(w);
    const tgrad::Shape x_shape{g.batch, g.in_channels, g.in_size[0], g.in_size[1]};
    const tgrad::Shape y_shape{g.batch, g.out_channels, g.out_size[0], g.out_size[1]};
    const tgrad::Shape w_shape{g.in_channels, g.out_channels_per_group(), g.kernel[0], g.kernel[1]};
    const Tensor x = tgrad::randn(x_shape);
    const Tensor wt = tgrad::randn(w_shape);
    const Tensor b = tgrad::randn({g.out_channels});
    const Tensor dy = tgrad::randn(y_shape);
    Tensor y = tgrad::empty(y_shape);
    Tensor dx = tgrad::empty(x_shape);
    Tensor dw = tgrad::empty(w_shape);

    const struct {
      const char* name;
      std::function<void()> fn;
    } passes[] = {
        {"forward", [&] { cpu.conv_transpose_forward(g, x, wt, &b, y); }},
        {"dgrad", [&] { cpu.conv_transpose_dgrad(g, dy, wt, dx); }},
        {"wgrad", [&] { cpu.conv_transpose_wgrad(g, x, dy, dw); }},
    };
    const double gemm = eigen_gemm_gflops(kGemmN, threads, runs);
    for (const auto& pass : passes) {
      const double seconds = median_seconds(runs, pass.fn);
      const double gflops = g.flops() / seconds * 1e-9;
      std::printf("%-3s %-36s %-7s %9.2f %9.1f %9.1f %7.2f\n", w.id, describe(w).c_str(), pass.name,
                  seconds * 1e3, gflops, gemm, gflops / gemm);
    }
  }
  return 0;
}
