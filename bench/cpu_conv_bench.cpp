// cpu_conv_bench: times the CPU backend's conv_transpose forward, dgrad and wgrad (float32, the
// median of several runs) on the S1-S5 workloads scaled down (1-D lengths / 64, 2-D height and
// width / 8) and on the decoder-layer suite (bench/decoder_layers.h) scaled down for the CPU.
// bench/cpu_vs_torch.py runs it with --json and times the same geometries in PyTorch.
// Usage: cpu_conv_bench [--suite s|decoders|all] [--id ID[,ID...]] [--shape SPEC]...
// [--passes forward,dgrad,wgrad] [--runs 5] [--threads N] [--model-threads N] [--model-regions]
// [--json]; --shape (any geometry, unscaled, keys as conv_bench's) replaces the suite.
// --model-threads N estimates, on a machine with fewer cores, the time on N: every parallel loop
// runs its tasks on one thread, timed, and is charged what N workers claiming them in order would
// take (cpu/parallel.h, TaskModel); memory bandwidth and caches shared between cores are left out
// (on the 16-core host, the few-columns products ran slower with more tasks, which the model had
// faster). --model-regions prints each loop of the first timed run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/decoder_layers.h"
#include "core/backend.h"
#include "core/conv_geometry.h"
#include "core/device.h"
#include "core/random.h"
#include "core/tensor.h"
#include "cpu/parallel.h"

namespace {

using tgrad::ConvGeometry;
using tgrad::Tensor;
using tgrad::bench::ConvLayerSpec;
using tgrad::bench::layer1d;

// The S1-S5 table with 1-D lengths / 64 and 2-D height and width / 8.
std::vector<ConvLayerSpec> s_workloads() {
  std::vector<ConvLayerSpec> w = {
      layer1d("S1", "N16 32->64 k3 L2048 s2 p1 d2", 16, 32, 64, 131072 / 64, 3, 2, 1),
      layer1d("S2", "N64 64->128 k3 L1024 s1 p0", 64, 64, 128, 65536 / 64, 3, 1, 0),
      layer1d("S3", "N64 128->128 k3 L1024 s1 p0", 64, 128, 128, 65536 / 64, 3, 1, 0),
      layer1d("S4", "N32 32->64 k5 L2048 s1 p0 d3", 32, 32, 64, 131072 / 64, 5, 1, 0),
  };
  w[0].dilation = {2, 0};
  w[3].dilation = {3, 0};
  ConvLayerSpec s5;
  s5.id = "S5";
  s5.source = "N8 32->32 k3x7 64x128 s1 p(1,3)";
  s5.dims = 2;
  s5.batch = 8;
  s5.in_channels = 32;
  s5.out_channels = 32;
  s5.in_size = {512 / 8, 1024 / 8};
  s5.kernel = {3, 7};
  s5.padding = {1, 3};
  w.push_back(s5);
  return w;
}

// The decoder suite made CPU-sized by a rule of the shape alone: batch / 16 (at least 1), then
// the spatial size halved until one pass is at most 0.5 GFLOP.
std::vector<ConvLayerSpec> decoder_workloads() {
  std::vector<ConvLayerSpec> out;
  for (ConvLayerSpec l : tgrad::bench::decoder_layers()) {
    l.batch = std::max<int64_t>(1, l.batch / 16);
    for (;;) {
      const ConvGeometry g = tgrad::make_conv_transpose_geometry(tgrad::bench::conv_args(l));
      const bool can_halve = l.in_size[0] > 2 && (l.dims == 1 || l.in_size[1] > 2);
      if (g.flops() <= 5e8 || !can_halve) break;
      l.in_size[0] /= 2;
      if (l.dims == 2) l.in_size[1] /= 2;
    }
    out.push_back(l);
  }
  return out;
}

// The median of `runs` timings of fn, after one warm-up run. With `model` (--model-threads), each
// run's time is its serial time with every parallel loop's tasks replaced by the model's time
// for them.
double median_seconds(int runs, const std::function<void()>& fn, tgrad::cpu::TaskModel* model) {
  fn();  // warm-up: first-touch of buffers, caches
  std::vector<double> times;
  for (int r = 0; r < runs; ++r) {
    tgrad::cpu::TaskModel counts;
    tgrad::cpu::set_task_model(model != nullptr ? &counts : nullptr);
    const auto start = std::chrono::steady_clock::now();
    fn();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tgrad::cpu::set_task_model(nullptr);
    if (model != nullptr) {
      seconds += counts.makespan_seconds - counts.task_seconds;
      if (r == 0) *model = counts;
    }
    times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string json_array(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The geometry as PyTorch's conv_transpose{1,2}d arguments (1-D: entry 0 only).
std::string json_geometry(const ConvLayerSpec& l) {
  const auto axes = [&](const std::array<int64_t, 2>& a) {
    return json_array(l.dims == 1 ? std::vector<int64_t>{a[0]} : std::vector<int64_t>{a[0], a[1]});
  };
  std::vector<int64_t> x{l.batch, l.in_channels}, w{l.in_channels, l.out_channels / l.groups};
  for (int a = 0; a < l.dims; ++a) {
    x.push_back(l.in_size[static_cast<size_t>(a)]);
    w.push_back(l.kernel[static_cast<size_t>(a)]);
  }
  return "\"dims\": " + std::to_string(l.dims) + ", \"x\": " + json_array(x) +
         ", \"w\": " + json_array(w) + ", \"stride\": " + axes(l.stride) +
         ", \"padding\": " + axes(l.padding) + ", \"output_padding\": " + axes(l.output_padding) +
         ", \"dilation\": " + axes(l.dilation) + ", \"groups\": " + std::to_string(l.groups);
}

int usage(const char* why) {
  std::fprintf(
      stderr,
      "cpu_conv_bench: %s\nusage: cpu_conv_bench [--suite s|decoders|all] [--id ID[,ID...]] "
      "[--shape SPEC]... [--passes P[,P...]] [--runs N] [--threads N] [--model-threads N] "
      "[--model-regions] [--json]\n"
      "  --id: only these workloads (e.g. S5,dcgan_g2; from every suite unless --suite)\n"
      "  --passes: only these passes (e.g. forward,wgrad)\n"
      "  --model-threads: estimate N threads' time from one thread's timed tasks\n"
      "  --shape: any geometry instead of the suite, e.g. \"n=16 ci=512 co=256 l=32 k=16 s=8 "
      "p=4\"\n",
      why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string suite;             // "s" by default, every suite when --id is given without --suite
  std::vector<std::string> ids;  // workload ids to keep; empty keeps all
  std::vector<std::string> pass_names;  // --passes: the passes to time; empty times all
  std::vector<ConvLayerSpec> shapes;    // --shape geometries; when given, they replace the suite
  int runs = 5;
  bool json = false;
  bool modeled = false;        // --model-threads
  bool model_regions = false;  // --model-regions: print each modeled parallel loop
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--json") {
      json = true;
    } else if (arg == "--suite" && has_value) {
      suite = argv[++i];
      if (suite != "s" && suite != "decoders" && suite != "all") return usage("bad --suite");
    } else if (arg == "--id" && has_value) {
      for (std::string rest = argv[++i]; !rest.empty();) {
        const size_t comma = rest.find(',');
        ids.push_back(rest.substr(0, comma));
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      }
    } else if (arg == "--shape" && has_value) {
      try {
        shapes.push_back(tgrad::bench::parse_layer_spec(argv[++i]));
        // Numbered in order, so that rows of several shapes (and their JSON) stay apart.
        shapes.back().id = "shape" + std::to_string(shapes.size());
      } catch (const tgrad::Error& e) {
        return usage(e.what());
      }
    } else if (arg == "--help" || arg == "-h") {
      usage("times the CPU backend's conv-transpose passes");
      return 0;
    } else if (arg == "--passes" && has_value) {
      for (std::string rest = argv[++i]; !rest.empty();) {
        const size_t comma = rest.find(',');
        pass_names.push_back(rest.substr(0, comma));
        if (pass_names.back() != "forward" && pass_names.back() != "dgrad" &&
            pass_names.back() != "wgrad") {
          return usage("--passes takes forward, dgrad and wgrad");
        }
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      }
    } else if (arg == "--runs" && has_value) {
      runs = std::atoi(argv[++i]);
      if (runs < 1) return usage("--runs must be positive");
    } else if (arg == "--threads" && has_value) {
      const int t = std::atoi(argv[++i]);
      if (t < 1) return usage("--threads must be positive");
      tgrad::set_num_threads(t);
    } else if (arg == "--model-threads" && has_value) {
      const int t = std::atoi(argv[++i]);
      if (t < 1) return usage("--model-threads must be positive");
      tgrad::set_num_threads(t);
      modeled = true;
    } else if (arg == "--model-regions") {
      model_regions = true;
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  std::vector<std::pair<std::string, ConvLayerSpec>> workloads;
  if (suite.empty()) suite = ids.empty() ? "s" : "all";
  if (suite != "decoders") {
    for (const auto& l : s_workloads())
      workloads.emplace_back("s", l);
  }
  if (suite != "s") {
    for (const auto& l : decoder_workloads())
      workloads.emplace_back("decoders", l);
  }

  if (!shapes.empty()) {
    workloads.clear();
    for (const ConvLayerSpec& l : shapes)
      workloads.emplace_back("shape", l);
  }
  if (!ids.empty()) {
    std::erase_if(workloads, [&](const auto& w) {
      return std::find(ids.begin(), ids.end(), w.second.id) == ids.end();
    });
    if (workloads.empty()) return usage("no workload has one of the --id ids in this --suite");
  }

  tgrad::manual_seed(0);
  tgrad::Backend& cpu = tgrad::backend(tgrad::Device(tgrad::kCPU));
  if (json) {
    std::printf(
        "{\"threads\": %d, \"modeled\": %s, \"cpu_capability\": \"%s\", \"runs\": %d, "
        "\"results\": [\n",
        tgrad::get_num_threads(), modeled ? "true" : "false", tgrad::get_cpu_capability().c_str(),
        runs);
  } else {
    std::printf("tgrad CPU conv-transpose bench, float32, %d thread(s)%s, level %s, median of %d\n",
                tgrad::get_num_threads(), modeled ? " modeled on one" : "",
                tgrad::get_cpu_capability().c_str(), runs);
    std::printf("%-9s %-16s %-7s %10s %9s\n", "suite", "id", "pass", "ms", "GFLOP/s");
  }
  bool first = true;
  for (const auto& [suite_name, l] : workloads) {
    tgrad::ConvTransposeArgs args = tgrad::bench::conv_args(l);
    args.has_bias = true;
    args.b_shape = {l.out_channels};
    const ConvGeometry g = tgrad::make_conv_transpose_geometry(args);
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
    for (const auto& pass : passes) {
      if (!pass_names.empty() &&
          std::find(pass_names.begin(), pass_names.end(), pass.name) == pass_names.end()) {
        continue;
      }
      tgrad::cpu::TaskModel model;
      const double seconds = median_seconds(runs, pass.fn, modeled ? &model : nullptr);
      const double gflops = g.flops() / seconds * 1e-9;
      if (json) {
        std::printf(
            "%s{\"suite\": \"%s\", \"id\": \"%s\", \"pass\": \"%s\", \"ms\": %.6f, "
            "\"gflops\": %.3f, %s}",
            first ? "" : ",\n", suite_name.c_str(), l.id.c_str(), pass.name, seconds * 1e3, gflops,
            json_geometry(l).c_str());
        first = false;
      } else {
        std::printf("%-9s %-16s %-7s %10.3f %9.1f\n", suite_name.c_str(), l.id.c_str(), pass.name,
                    seconds * 1e3, gflops);
      }
      if (model_regions && modeled && !json) {  // the first timed run's parallel loops
        std::printf("    serial %.3f ms;", (seconds - model.makespan_seconds) * 1e3);
        for (const auto& r : model.regions)
          std::printf(" [%lld tasks: sum %.3f, longest %.3f, %.3f ms]",
                      static_cast<long long>(r.tasks), r.task_seconds * 1e3,
                      r.longest_task_seconds * 1e3, r.makespan_seconds * 1e3);
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  if (json) std::printf("\n]}\n");
  return 0;
}
