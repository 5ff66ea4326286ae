// conv_plan_bench: the host cost of the conv planner's entry, plan_conv_call, which every CUDA
// conv launch pays before its kernel starts. Plain C++ with H100 caps (DeviceCaps::h100()), so it
// runs without a GPU. For a handful of decoder-suite layers (bench/decoder_layers.h) and each
// pass it prints microseconds per call, the median of several rounds:
//   plan_conv   the planner alone, from scratch (the reference);
//   repeat      plan_conv_call with the same inputs every time, as a training step's calls are;
//   new         plan_conv_call with inputs it has not seen (the batch grows by one each call).
// Usage: conv_plan_bench [--calls N] [--rounds R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/decoder_layers.h"
#include "core/conv_geometry.h"
#include "core/error.h"
#include "cuda/conv_plan.h"

namespace {

using tgrad::ConvGeometry;
using tgrad::DType;
using tgrad::bench::ConvLayerSpec;
using tgrad::cuda::ConvPass;
using tgrad::cuda::DeviceCaps;

// Layers whose calls reach different rows of the table: batch-igemm, wgmma, mma.sync, the GEMM
// path, depthwise, and grouped calls (which the tensor-core rows decline early).
const char* const kLayers[] = {"dcgan_g3",      "encodec_up4", "pix2pix_out",
                               "depthwise_256", "grouped_g4",  "hifigan_v1_up4"};

// The planner's results are used, so the calls cannot be dropped.
size_t g_sink = 0;

template <class F>
double median_us_per_call(int rounds, int calls, F&& call) {
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      call();
    const auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int positive_arg(const char* flag, const char* value) {
  char* end = nullptr;
  const long v = value == nullptr ? 0 : std::strtol(value, &end, 10);
  TGRAD_CHECK(value != nullptr && *value != '\0' && *end == '\0' && v > 0 && v <= 10000000,
              "conv_plan_bench: ", flag, "='", value == nullptr ? "" : value,
              "' must be an integer in [1, 10000000]");
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) try {
  int calls = 2000, rounds = 7;
  for (int i = 1; i < argc; ++i) {
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(argv[i], "--calls") == 0) {
      calls = positive_arg("--calls", value), ++i;
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      rounds = positive_arg("--rounds", value), ++i;
    } else {
      TGRAD_FAIL("conv_plan_bench: unknown argument '", argv[i],
                 "' (usage: conv_plan_bench [--calls N] [--rounds R])");
    }
  }
  const DeviceCaps caps = DeviceCaps::h100();
  const ConvPass passes[] = {ConvPass::forward, ConvPass::dgrad, ConvPass::wgrad};
  std::printf("%-16s %-6s %-12s %10s %10s %10s\n", "layer", "pass", "kernel", "plan_conv", "repeat",
              "new");
  std::printf("%-16s %-6s %-12s %10s %10s %10s\n", "", "", "", "us/call", "us/call", "us/call");
  double sum[3] = {0, 0, 0};
  int rows = 0;
  // Batches past any layer's own, unique across the run: each "new" call is a fresh input.
  int64_t next_batch = 1000000;
  for (const char* id : kLayers) {
    const auto& layers = tgrad::bench::decoder_layers();
    const auto found = std::find_if(layers.begin(), layers.end(),
                                    [&](const ConvLayerSpec& l) { return l.id == id; });
    TGRAD_CHECK(found != layers.end(), "conv_plan_bench: no layer '", id, "' in the suite");
    const ConvGeometry g = tgrad::make_conv_transpose_geometry(tgrad::bench::conv_args(*found));
    for (ConvPass pass : passes) {
      const std::string kernel = tgrad::cuda::plan_conv(pass, g, DType::float32, caps).kernel;
      const double scratch = median_us_per_call(rounds, calls, [&] {
        g_sink += tgrad::cuda::plan_conv(pass, g, DType::float32, caps).declined.size();
      });
      const double repeat = median_us_per_call(rounds, calls, [&] {
        g_sink += tgrad::cuda::plan_conv_call(pass, g, DType::float32, caps)->declined.size();
      });
      ConvGeometry fresh = g;
      const double fresh_us = median_us_per_call(rounds, calls, [&] {
        fresh.batch = next_batch++;
        g_sink += tgrad::cuda::plan_conv_call(pass, fresh, DType::float32, caps)->declined.size();
      });
      std::printf("%-16s %-6s %-12s %10.3f %10.3f %10.3f\n", id, tgrad::cuda::conv_pass_name(pass),
                  kernel.c_str(), scratch, repeat, fresh_us);
      sum[0] += scratch, sum[1] += repeat, sum[2] += fresh_us, ++rows;
    }
  }
  std::printf("%-16s %-6s %-12s %10.3f %10.3f %10.3f\n", "mean", "", "", sum[0] / rows,
              sum[1] / rows, sum[2] / rows);
  return g_sink == 0 ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
}
