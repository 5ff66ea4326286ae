// The gradcheck binary: finite-difference checks of every differentiable op, first derivatives
// (gradcheck) and second (gradgradcheck, through create_graph), in float64, over random
// ConvTranspose and Conv configurations (every parameter) and every other op, on one device.
// Prints a summary table (op, configs, max abs and rel error) and exits 1 on any failure.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/conv_cases.h"

namespace {

using tgrad::Tensor;
using Fn = tgrad::GradcheckFn;

struct Row {
  int configs = 0;
  int failures = 0;
  double max_abs = 0.0;
  double max_rel = 0.0;
};

struct Runner {
  tgrad::Device device;
  std::map<std::string, Row> rows;
  std::vector<std::string> order;
  std::vector<std::string> failures;

  // gradcheck, then (when `second` is set) gradgradcheck in fast mode, each its own row.
  void check(const std::string& op, const Fn& fn, const std::vector<Tensor>& inputs,
             tgrad::GradcheckOptions options, bool second = true) {
    check_one(op, fn, inputs, options, false);
    if (second) {
      options.fast_mode = true;
      check_one(op + " (2nd)", fn, inputs, options, true);
    }
  }

  void check_one(const std::string& op, const Fn& fn, const std::vector<Tensor>& inputs,
                 tgrad::GradcheckOptions options, bool second) {
    options.name = op;
    if (!rows.count(op)) order.push_back(op);
    Row& row = rows[op];
    ++row.configs;
    tgrad::GradcheckResult r;
    try {
      r = second ? tgrad::gradgradcheck(fn, inputs, options)
                 : tgrad::gradcheck(fn, inputs, options);
    } catch (const std::exception& e) {
      r.ok = false;
      r.report = "gradcheck threw for " + op + " [" + options.config + "]: " + e.what();
    }
    row.max_abs = std::max(row.max_abs, r.max_abs_error);
    row.max_rel = std::max(row.max_rel, r.max_rel_error);
    if (!r.ok) {
      ++row.failures;
      failures.push_back(r.report);
    }
  }

  Tensor input(const tgrad::Shape& shape, tgrad::Generator& gen, double shift = 0.0) {
    Tensor t = tgrad::randn(shape, gen, tgrad::TensorOptions(tgrad::kFloat64));
    if (shift != 0.0) t = tgrad::add(tgrad::abs(t), shift);
    return t.to(device).detach().requires_grad_(true);
  }
};

void check_conv(Runner& run, int configs, uint64_t seed) {
  int done = 0;
  for (uint64_t round = 0; done < configs; ++round) {
    for (const tgrad::testing::ConvCase& c : tgrad::testing::conv_sweep(seed + round)) {
      if (done++ >= configs) break;
      const tgrad::testing::ConvData d = tgrad::testing::make_conv_data(c, seed + done);
      const tgrad::testing::ConvTensors t =
          tgrad::testing::conv_tensors(c, d, tgrad::kFloat64, run.device);
      std::vector<Tensor> inputs = {t.x.reshape(c.x_shape()).detach().requires_grad_(true),
                                    t.w.reshape(c.w_shape()).detach().requires_grad_(true)};
      if (c.bias) inputs.push_back(t.b.detach().requires_grad_(true));
      Fn fn = [c](const std::vector<Tensor>& in) {
        const Tensor b = in.size() > 2 ? in[2] : Tensor();
        return c.spatial_dims == 1 ? tgrad::conv_transpose1d(in[0], in[1], b, c.options1d())
                                   : tgrad::conv_transpose2d(in[0], in[1], b, c.options2d());
      };
      tgrad::GradcheckOptions o;
      o.config = c.str();
      o.seed = seed + done;
      // Small problems get the full Jacobian; the rest random projections (v^T J u).
      const int64_t work = c.p.batch * c.p.in_channels * c.p.in_size[0] * c.p.in_size[1];
      o.fast_mode = work > 24 || done % 4 != 0;
      // Second derivatives on every third configuration: each costs a recorded backward per
      // finite-difference step.
      run.check(c.fn(), fn, inputs, o, done % 3 == 0);

      // The regular convolution with the same weight, on an input shaped like this case's
      // output: conv1d/conv2d run the same kernels with the passes swapped.
      if (c.p.in_size[0] == 0 || c.p.in_size[1] == 0) continue;  // no convolution has that output
      tgrad::Generator conv_gen(seed + done);
      const Tensor y = fn(inputs);
      std::vector<Tensor> conv_inputs = {run.input(y.shape(), conv_gen),
                                         inputs[1].detach().requires_grad_(true)};
      if (c.bias) conv_inputs.push_back(run.input({c.p.in_channels}, conv_gen));
      Fn conv_fn = [c](const std::vector<Tensor>& in) {
        const Tensor b = in.size() > 2 ? in[2] : Tensor();
        if (c.spatial_dims == 1) {
          return tgrad::conv1d(in[0], in[1], b,
                               tgrad::Conv1dFuncOptions()
                                   .stride(c.p.stride[1])
                                   .padding(c.p.padding[1])
                                   .dilation(c.p.dilation[1])
                                   .groups(c.p.groups));
        }
        return tgrad::conv2d(in[0], in[1], b,
                             tgrad::Conv2dFuncOptions()
                                 .stride({c.p.stride[0], c.p.stride[1]})
                                 .padding({c.p.padding[0], c.p.padding[1]})
                                 .dilation({c.p.dilation[0], c.p.dilation[1]})
                                 .groups(c.p.groups));
      };
      o.fast_mode = true;
      run.check(c.spatial_dims == 1 ? "conv1d" : "conv2d", conv_fn, conv_inputs, o, done % 3 == 1);
    }
  }
}

void check_other_ops(Runner& run, uint64_t seed) {
  tgrad::Generator gen(seed);
  tgrad::GradcheckOptions o;
  auto unary = [&](const std::string& op, std::function<Tensor(const Tensor&)> f,
                   double shift = 0.0) {
    for (const tgrad::Shape& s : {tgrad::Shape{}, tgrad::Shape{5}, tgrad::Shape{2, 3, 2}}) {
      o.config = "shape " + tgrad::detail::cat(s);
      run.check(
          op, [f](const std::vector<Tensor>& in) { return f(in[0]); }, {run.input(s, gen, shift)},
          o);
    }
  };
  // relu, leaky_relu and abs have kinks at 0; randn puts an input within eps of 0 with
  // probability ~1e-6 per element, so these draws are safe.
  unary("neg", [](const Tensor& x) { return -x; });
  unary("exp", [](const Tensor& x) { return tgrad::exp(x); });
  unary(
      "log", [](const Tensor& x) { return tgrad::log(x); }, 0.5);
  unary(
      "sqrt", [](const Tensor& x) { return tgrad::sqrt(x); }, 0.5);
  unary("abs", [](const Tensor& x) { return tgrad::abs(x); });
  unary("pow", [](const Tensor& x) { return tgrad::pow(x, 3.0); });
  unary(
      "pow_fractional", [](const Tensor& x) { return tgrad::pow(x, 1.5); }, 0.5);
  unary("relu", [](const Tensor& x) { return tgrad::relu(x); });
  unary("leaky_relu", [](const Tensor& x) { return tgrad::leaky_relu(x, 0.2); });
  unary("sigmoid", [](const Tensor& x) { return tgrad::sigmoid(x); });
  unary("tanh", [](const Tensor& x) { return tgrad::tanh(x); });
  unary("add_scalar", [](const Tensor& x) { return x + 2.5; });
  unary("sub_scalar", [](const Tensor& x) { return x - 1.5; });
  unary("mul_scalar", [](const Tensor& x) { return x * -3.0; });
  unary("div_scalar", [](const Tensor& x) { return x / 4.0; });
  unary("rsub_scalar", [](const Tensor& x) { return 2.0 - x; });
  unary(
      "rdiv_scalar", [](const Tensor& x) { return 2.0 / x; }, 0.5);
  unary("sum", [](const Tensor& x) { return tgrad::sum(x); });
  unary("mean", [](const Tensor& x) { return tgrad::mean(x); });
  unary("clone", [](const Tensor& x) { return x.clone(); });
  unary("reshape", [](const Tensor& x) { return x.reshape({-1}); });

  using Pair = std::pair<tgrad::Shape, tgrad::Shape>;
  const std::vector<Pair> broadcast = {
      {{3}, {3}}, {{2, 3}, {3}}, {{2, 1, 4}, {3, 1}}, {{}, {2, 2}}, {{4, 1}, {1, 5}}};
  auto binary = [&](const std::string& op, std::function<Tensor(const Tensor&, const Tensor&)> f,
                    double shift_b = 0.0) {
    for (const Pair& p : broadcast) {
      o.config = tgrad::detail::cat(p.first, " with ", p.second);
      run.check(
          op, [f](const std::vector<Tensor>& in) { return f(in[0], in[1]); },
          {run.input(p.first, gen), run.input(p.second, gen, shift_b)}, o);
    }
  };
  binary("add", [](const Tensor& a, const Tensor& b) { return a + b; });
  binary("sub", [](const Tensor& a, const Tensor& b) { return a - b; });
  binary("mul", [](const Tensor& a, const Tensor& b) { return a * b; });
  binary(
      "div", [](const Tensor& a, const Tensor& b) { return a / b; }, 0.5);
  // The same tensor used twice: its gradient is the sum of both uses.
  o.config = "x * x + x";
  run.check(
      "fan_out", [](const std::vector<Tensor>& in) { return in[0] * in[0] + in[0]; },
      {run.input({3, 2}, gen)}, o);

  const tgrad::Shape s = {2, 3, 4};
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, {1}, {-1}, {0, 2}}) {
    for (bool keep : {false, true}) {
      o.config = tgrad::detail::cat("dims ", dims, keep ? " keepdim" : "");
      run.check(
          "sum_dims",
          [dims, keep](const std::vector<Tensor>& in) { return tgrad::sum(in[0], dims, keep); },
          {run.input(s, gen)}, o);
      run.check(
          "mean_dims",
          [dims, keep](const std::vector<Tensor>& in) { return tgrad::mean(in[0], dims, keep); },
          {run.input(s, gen)}, o);
    }
  }
  o.config = "(2,3,4) to (3,1)";
  run.check(
      "sum_to",
      [](const std::vector<Tensor>& in) {
        return tgrad::sum_to(in[0], {3, 1});
      },
      {run.input(s, gen)}, o);
  o.config = "(3,1) to (2,3,4)";
  run.check(
      "expand",
      [](const std::vector<Tensor>& in) {
        return tgrad::expand(in[0], {2, 3, 4});
      },
      {run.input({3, 1}, gen)}, o);
  o.config = "rows 1..3 of 4";
  run.check(
      "narrow", [](const std::vector<Tensor>& in) { return in[0].narrow(0, 1, 2); },
      {run.input({4, 3}, gen)}, o);
  for (const Pair& p : std::vector<Pair>{{{3, 4}, {4, 2}}, {{1, 5}, {5, 1}}, {{6, 3}, {3, 7}}}) {
    o.config = tgrad::detail::cat(p.first, " x ", p.second);
    run.check(
        "matmul", [](const std::vector<Tensor>& in) { return tgrad::matmul(in[0], in[1]); },
        {run.input(p.first, gen), run.input(p.second, gen)}, o);
  }
  for (bool bias : {false, true}) {
    o.config = bias ? "x (2,3,4), w (5,4), b (5)" : "x (2,3,4), w (5,4)";
    std::vector<Tensor> in = {run.input({2, 3, 4}, gen), run.input({5, 4}, gen)};
    if (bias) in.push_back(run.input({5}, gen));
    run.check(
        "linear",
        [](const std::vector<Tensor>& v) {
          return tgrad::linear(v[0], v[1], v.size() > 2 ? v[2] : Tensor());
        },
        in, o);
  }
  if (run.device.is_cuda()) {
    o.config = "cuda -> cpu -> cuda";
    run.check(
        "to_device",
        [](const std::vector<Tensor>& in) { return (in[0].cpu() * 2.0).to(in[0].device()); },
        {run.input({2, 3}, gen)}, o);
  }
}

// The shape, math and resampling ops (core/ops_shape.h), each on one or two configurations.
void check_shape_ops(Runner& run, uint64_t seed) {
  tgrad::Generator gen(seed);
  tgrad::GradcheckOptions o;
  auto one = [&](const std::string& op, const std::string& config, const tgrad::Shape& shape,
                 std::function<Tensor(const Tensor&)> f) {
    o.config = config;
    run.check(
        op, [f](const std::vector<Tensor>& in) { return f(in[0]); }, {run.input(shape, gen)}, o);
  };
  const tgrad::Shape s = {2, 3, 4};
  const Tensor idx = tgrad::from_vector<int64_t>({3, 0, 3, 1}, {4}).to(run.device);
  o.config = "dim 1, (2,3,4) and (2,2,4)";
  run.check(
      "cat", [](const std::vector<Tensor>& in) { return tgrad::cat(in, 1); },
      {run.input(s, gen), run.input({2, 2, 4}, gen)}, o);
  o.config = "dim -1, two (2,3,4)";
  run.check(
      "stack", [](const std::vector<Tensor>& in) { return tgrad::stack(in, -1); },
      {run.input(s, gen), run.input(s, gen)}, o);
  one("split", "size 3 on dim 2, piece 1", s,
      [](const Tensor& x) { return tgrad::split(x, 3, 2)[1]; });
  one("chunk", "2 on dim 1, piece 0", s, [](const Tensor& x) { return tgrad::chunk(x, 2, 1)[0]; });
  one("narrow_any_dim", "dim 2 [1, 3)", s,
      [](const Tensor& x) { return tgrad::narrow(x, 2, 1, 2); });
  one("slice", "dim 2, 0:4:3", s, [](const Tensor& x) { return tgrad::slice(x, 2, 0, 4, 3); });
  one("select", "dim 1 index -1", s, [](const Tensor& x) { return tgrad::select(x, 1, -1); });
  one("index_select", "dim 2 [3,0,3,1]", s,
      [idx](const Tensor& x) { return tgrad::index_select(x, 2, idx); });
  one("index_add", "dim 2 [3,0,3,1] into 5", s,
      [idx](const Tensor& x) { return tgrad::index_add(x, 2, idx, 5); });
  one("permute", "(1,2,0)", s, [](const Tensor& x) { return tgrad::permute(x, {1, 2, 0}); });
  one("transpose", "0,2", s, [](const Tensor& x) { return tgrad::transpose(x, 0, 2); });
  one("unsqueeze_squeeze", "dim 1", s,
      [](const Tensor& x) { return tgrad::squeeze(tgrad::unsqueeze(x, 1), 1); });
  one("flip", "dims 0,-1", s, [](const Tensor& x) { return tgrad::flip(x, {0, -1}); });
  one("clamp", "[-0.5, 0.5]", s, [](const Tensor& x) { return tgrad::clamp(x, -0.5, 0.5); });
  one("sin", "", s, [](const Tensor& x) { return tgrad::sin(x); });
  one("cos", "", s, [](const Tensor& x) { return tgrad::cos(x); });
  one("max", "all", s, [](const Tensor& x) { return tgrad::max(x); });
  one("max_dim", "dim 1 keepdim", s,
      [](const Tensor& x) { return std::get<0>(tgrad::max(x, 1, true)); });
  one("min_dim", "dim -1", s, [](const Tensor& x) { return std::get<0>(tgrad::min(x, -1)); });
  one("softmax", "dim 1", s, [](const Tensor& x) { return tgrad::softmax(x, 1); });
  one("log_softmax", "dim -1", s, [](const Tensor& x) { return tgrad::log_softmax(x, -1); });
  const tgrad::Shape img = {1, 2, 3, 4};
  one("pad_constant", "(1,2,-1,1) value 0.5", img, [](const Tensor& x) {
    return tgrad::pad(x, tgrad::PadFuncOptions({1, 2, -1, 1}).value(0.5));
  });
  one("pad_reflect", "(2,3,2,1)", img, [](const Tensor& x) {
    return tgrad::pad(x, tgrad::PadFuncOptions({2, 3, 2, 1}).mode(tgrad::kReflect));
  });
  one("pad_replicate", "(3,1,0,2)", img, [](const Tensor& x) {
    return tgrad::pad(x, tgrad::PadFuncOptions({3, 1, 0, 2}).mode(tgrad::kReplicate));
  });
  one("interpolate_nearest", "size (5,3)", img, [](const Tensor& x) {
    return tgrad::interpolate(x, tgrad::InterpolateFuncOptions().size(std::vector<int64_t>{5, 3}));
  });
  for (bool align : {false, true}) {
    one("interpolate_bilinear", align ? "scale 1.5 align_corners" : "scale 1.5", img,
        [align](const Tensor& x) {
          return tgrad::interpolate(x, tgrad::InterpolateFuncOptions()
                                           .scale_factor(std::vector<double>{1.5})
                                           .mode(tgrad::kBilinear)
                                           .align_corners(align));
        });
  }
  one("pixel_shuffle", "r 2", {1, 4, 2, 3},
      [](const Tensor& x) { return tgrad::pixel_shuffle(x, 2); });
  one("pixel_unshuffle", "r 2", {1, 1, 4, 2},
      [](const Tensor& x) { return tgrad::pixel_unshuffle(x, 2); });
}

}  // namespace

// Exit status when the device cannot be used; ctest reports it as a skip, not a failure.
constexpr int kDeviceUnavailable = 77;

int main(int argc, char** argv) {
  CLI::App app{"tgrad gradcheck: finite-difference checks of every differentiable op"};
  uint64_t seed = 1;
  int configs = 300;
  std::string device = "cpu";
  app.add_option("--seed", seed, "seed of the random configurations and inputs");
  app.add_option("--configs", configs, "number of random ConvTranspose configurations")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device, "cpu, cuda or cuda:N");
  CLI11_PARSE(app, argc, argv);

  Runner run{tgrad::Device(tgrad::kCPU), {}, {}, {}};
  try {
    run.device = tgrad::Device(device);
    tgrad::backend(run.device);  // a clear error now if the device cannot be used
  } catch (const std::exception& e) {
    std::cerr << "gradcheck: skipped: " << e.what() << "\n";
    return kDeviceUnavailable;
  }
  std::cout << "gradcheck on " << run.device << ": " << configs
            << " ConvTranspose configurations (seed " << seed << ") and every other op\n";
  check_conv(run, configs, seed);
  check_other_ops(run, seed);
  check_shape_ops(run, seed);

  std::printf("\n%-24s %8s %9s %12s %12s\n", "op", "configs", "failures", "max abs err",
              "max rel err");
  int total = 0, failed = 0;
  for (const std::string& op : run.order) {
    const Row& r = run.rows[op];
    std::printf("%-24s %8d %9d %12.3e %12.3e\n", op.c_str(), r.configs, r.failures, r.max_abs,
                r.max_rel);
    total += r.configs;
    failed += r.failures;
  }
  for (const std::string& f : run.failures)
    std::cout << "\n" << f << "\n";
  std::cout << "\n" << total - failed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
