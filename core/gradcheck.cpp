// gradcheck: numeric Jacobians (central differences on host copies of each input) against the
// analytic vector-Jacobian products of the tape, plus reproducibility and zero-gradient checks.
#include "core/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/random.h"

namespace tgrad {

namespace {

struct Checker {
  Checker(const GradcheckFn& f, const std::vector<Tensor>& in, const GradcheckOptions& o)
      : fn(f), inputs(in), opt(o), op_name(o.name) {}

  const GradcheckFn& fn;
  const std::vector<Tensor>& inputs;
  const GradcheckOptions& opt;
  GradcheckResult result;
  std::string op_name;         // the caller's name, else the op that made the output
  double worst_excess = -1.0;  // (error - allowed) of the worst element so far

  // Runs fn with input `which` replaced by host values `values`; returns the output on the host.
  std::vector<double> eval_with(size_t which, const std::vector<double>& values) {
    NoGradGuard no_grad;
    std::vector<Tensor> args;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i == which) {
        args.push_back(from_vector(values, inputs[i].shape(),
                                   TensorOptions(kFloat64).device(inputs[i].device())));
      } else {
        args.push_back(inputs[i].defined() ? inputs[i].detach() : Tensor());
      }
    }
    return fn(args).to_vector<double>();
  }

  // Analytic gradients of <v, fn(inputs)> w.r.t. every input needing grad (undefined if none).
  std::vector<Tensor> vjp(const Tensor& v) {
    std::vector<Tensor> leaves;
    for (const Tensor& in : inputs) {
      Tensor leaf = in.defined() ? in.detach() : Tensor();
      if (leaf.defined() && in.requires_grad()) leaf.requires_grad_(true);
      leaves.push_back(leaf);
    }
    Tensor y;
    {
      EnableGradGuard enable;
      y = fn(leaves);
    }
    if (op_name.empty() && y.grad_fn()) op_name = y.grad_fn()->name;
    std::vector<Tensor> wanted;
    std::vector<size_t> index;
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (leaves[i].defined() && leaves[i].requires_grad()) {
        wanted.push_back(leaves[i]);
        index.push_back(i);
      }
    }
    std::vector<Tensor> out(inputs.size());
    if (!y.requires_grad()) {  // fn does not depend on any input: all gradients are zero
      for (size_t k = 0; k < index.size(); ++k)
        out[index[k]] = zeros_like(inputs[index[k]]);
      return out;
    }
    std::vector<Tensor> g = grad({y}, wanted, {v.to(y.device())});
    for (size_t k = 0; k < index.size(); ++k) {
      out[index[k]] = g[k].defined() ? g[k] : zeros_like(inputs[index[k]]);
    }
    return out;
  }

  void compare(double analytic, double numeric, const std::string& where) {
    const double err = std::abs(analytic - numeric);
    const double allowed = opt.atol + opt.rtol * std::abs(numeric);
    result.max_abs_error = std::max(result.max_abs_error, err);
    if (numeric != 0.0)
      result.max_rel_error = std::max(result.max_rel_error, err / std::abs(numeric));
    const bool bad = !(err <= allowed);  // NaN fails
    if (bad && (err - allowed > worst_excess || std::isnan(err))) {
      worst_excess = std::isnan(err) ? INFINITY : err - allowed;
      std::ostringstream os;
      os.precision(10);
      os << "worst at " << where << ": analytic " << analytic << " vs numeric " << numeric
         << " (abs err " << err << ", allowed " << allowed << ")";
      fail(os.str());
    }
  }

  void fail(const std::string& what) {
    result.ok = false;
    std::ostringstream os;
    os << "gradcheck failed for " << (op_name.empty() ? "function" : op_name);
    if (!opt.config.empty()) os << " [" << opt.config << "]";
    os << ": " << what;
    result.report = os.str();
  }

  std::vector<double> numeric_directional(size_t i, const std::vector<double>& x0,
                                          const std::vector<double>& u) {
    std::vector<double> plus = x0, minus = x0;
    for (size_t j = 0; j < x0.size(); ++j) {
      plus[j] += opt.eps * u[j];
      minus[j] -= opt.eps * u[j];
    }
    std::vector<double> fp = eval_with(i, plus), fm = eval_with(i, minus);
    for (size_t k = 0; k < fp.size(); ++k)
      fp[k] = (fp[k] - fm[k]) / (2.0 * opt.eps);
    return fp;
  }

  void run_exhaustive(const Tensor& y0) {
    const int64_t m = y0.numel();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
      const std::vector<double> x0 = inputs[i].to_vector<double>();
      // Numeric Jacobian, one input element (column) at a time.
      std::vector<std::vector<double>> numeric(x0.size());
      for (size_t j = 0; j < x0.size(); ++j) {
        std::vector<double> e(x0.size(), 0.0);
        e[j] = 1.0;
        numeric[j] = numeric_directional(i, x0, e);
      }
      // Analytic Jacobian, one output element (row) at a time.
      for (int64_t k = 0; k < m; ++k) {
        std::vector<double> onehot(static_cast<size_t>(m), 0.0);
        onehot[static_cast<size_t>(k)] = 1.0;
        const Tensor v = from_vector(onehot, y0.shape(), TensorOptions(kFloat64));
        const std::vector<double> row = vjp(v)[i].to_vector<double>();
        for (size_t j = 0; j < x0.size(); ++j) {
          std::ostringstream where;
          where << "input " << i << " element " << j << ", output element " << k;
          compare(row[j], numeric[j][static_cast<size_t>(k)], where.str());
        }
      }
    }
  }

  void run_fast(const Tensor& y0) {
    Generator gen(opt.seed);
    for (int p = 0; p < opt.projections; ++p) {
      const Tensor v = randn(y0.shape(), gen, TensorOptions(kFloat64));
      const std::vector<double> vh = v.to_vector<double>();
      const std::vector<Tensor> g = vjp(v);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (!g[i].defined()) continue;
        const std::vector<double> x0 = inputs[i].to_vector<double>();
        std::vector<double> u(x0.size());
        for (double& e : u)
          e = gen.normal();
        const std::vector<double> ju = numeric_directional(i, x0, u);
        double numeric = 0.0, analytic = 0.0;
        for (size_t k = 0; k < ju.size(); ++k)
          numeric += vh[k] * ju[k];
        const std::vector<double> gi = g[i].to_vector<double>();
        for (size_t j = 0; j < gi.size(); ++j)
          analytic += gi[j] * u[j];
        std::ostringstream where;
        where << "input " << i << ", projection " << p << " (v^T J u)";
        compare(analytic, numeric, where.str());
      }
    }
  }

  void run_structural(const Tensor& y0) {
    Generator gen(opt.seed + 1);
    const Tensor v = randn(y0.shape(), gen, TensorOptions(kFloat64));
    const std::vector<Tensor> g1 = vjp(v), g2 = vjp(v);
    const std::vector<Tensor> g0 = vjp(zeros(y0.shape(), TensorOptions(kFloat64)));
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!g1[i].defined()) continue;
      if (g1[i].shape() != inputs[i].shape()) {
        fail(detail::cat("input ", i, ": gradient shape ", g1[i].shape(),
                         " does not match the input shape ", inputs[i].shape()));
        return;
      }
      if (!equal(g1[i], g2[i])) {
        fail(detail::cat("input ", i,
                         ": two backward runs gave different bits (not reentrant or "
                         "not deterministic)"));
        return;
      }
      for (double e : g0[i].to_vector<double>()) {
        if (e != 0.0) {
          fail(detail::cat("input ", i, ": a zero upstream gradient gave a non-zero gradient ", e));
          return;
        }
      }
    }
  }
};

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    TGRAD_CHECK(inputs[i].dtype() == kFloat64, "gradcheck: input ", i, " is ", inputs[i].dtype(),
                "; finite differences need float64 inputs");
    any |= inputs[i].requires_grad();
  }
  TGRAD_CHECK(any, "gradcheck: no input requires grad");
  TGRAD_CHECK(options.eps > 0.0, "gradcheck: eps=", options.eps, " must be positive");
  Checker c(fn, inputs, options);
  Tensor y0;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> detached;
    detached.reserve(inputs.size());
    for (const Tensor& in : inputs)
      detached.push_back(in.defined() ? in.detach() : Tensor());
    y0 = fn(detached);
  }
  TGRAD_CHECK(y0.defined() && y0.dtype() == kFloat64,
              "gradcheck: the function must return a "
              "float64 tensor");
  c.run_structural(y0);
  if (c.result.ok) {
    if (options.fast_mode) {
      c.run_fast(y0);
    } else {
      c.run_exhaustive(y0);
    }
  }
  return c.result;
}

GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options) {
  std::vector<bool> wanted(inputs.size(), false);
  for (size_t i = 0; i < inputs.size(); ++i)
    wanted[i] = inputs[i].defined() && inputs[i].requires_grad();
  // A fixed upstream gradient v and fixed projections u_i, drawn from the seed.
  Tensor y0;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> detached;
    for (const Tensor& in : inputs)
      detached.push_back(in.defined() ? in.detach() : Tensor());
    y0 = fn(detached);
  }
  TGRAD_CHECK(y0.defined() && y0.dtype() == kFloat64,
              "gradgradcheck: the function must return a float64 tensor");
  Generator gen(options.seed + 7);
  const Tensor v = randn(y0.shape(), gen, TensorOptions(kFloat64).device(y0.device()));
  std::vector<Tensor> u(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (wanted[i])
      u[i] = randn(inputs[i].shape(), gen, TensorOptions(kFloat64).device(inputs[i].device()));
  }
  // H(x) = sum_i <d<v, fn(x)>/dx_i, u_i>, its first derivatives computed with create_graph:
  // gradcheck of H compares the recorded backward-of-backward with finite differences of the
  // (already checked) first backward.
  const GradcheckFn h = [&](const std::vector<Tensor>& xs) {
    EnableGradGuard on;
    std::vector<Tensor> args = xs, leaves;
    std::vector<size_t> index;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!wanted[i]) continue;
      if (!args[i].requires_grad()) args[i] = args[i].detach().requires_grad_(true);
      leaves.push_back(args[i]);
      index.push_back(i);
    }
    const Tensor y = fn(args);
    Tensor total = zeros({}, TensorOptions(kFloat64).device(y.device()));
    if (!y.requires_grad()) return total;
    const std::vector<Tensor> g = grad({y}, leaves, {v}, true, true);
    for (size_t k = 0; k < g.size(); ++k) {
      if (g[k].defined()) total = total + sum(g[k] * u[index[k]]);
    }
    return total;
  };
  GradcheckOptions second = options;
  if (second.name.empty() && y0.grad_fn() == nullptr) second.name = "second derivative";
  second.config = "gradgradcheck" + (options.config.empty() ? "" : "; " + options.config);
  return gradcheck(h, inputs, second);
}

}  // namespace tgrad
