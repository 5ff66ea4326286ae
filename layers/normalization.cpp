// BatchNorm1d/2d, InstanceNorm2d, GroupNorm, LayerNorm: checks, PyTorch's initialisation and
// buffers, and forward passes composed from differentiable ops.
#include "layers/normalization.h"

#include <cmath>
#include <optional>
#include <ostream>

#include "core/autograd.h"
#include "core/ops_internal.h"
#include "layers/init.h"

namespace tgrad::nn {

namespace {

// (x - mean) / sqrt(var + eps) with the mean and the biased variance over `dims` (kept as size
// 1); the statistics are returned through mean_out / var_out when asked.
Tensor normalize(const Tensor& x, const std::vector<int64_t>& dims, double eps,
                 Tensor* mean_out = nullptr, Tensor* var_out = nullptr) {
  const Tensor mu = mean(x, dims, true);
  const Tensor centered = x - mu;
  const Tensor var = mean(centered * centered, dims, true);
  if (mean_out != nullptr) *mean_out = mu;
  if (var_out != nullptr) *var_out = var;
  return centered * pow(var + eps, -0.5);
}

// (1, C, 1, ...) of rank `rank`: a per-channel tensor seen against an (N, C, ...) input.
Shape channel_view(int64_t rank, int64_t channels, int64_t channel_dim = 1) {
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(channel_dim)] = channels;
  return s;
}

void check_eps(const char* m, double eps) {
  TGRAD_CHECK(std::isfinite(eps) && eps > 0.0, m, ": eps=", eps, " must be positive and finite");
}

}  // namespace

// ---- BatchNorm ----

template <int D>
BatchNormNd<D>::BatchNormNd(const BatchNormOptions& options)
    : Module(D == 1 ? "BatchNorm1d" : "BatchNorm2d"), options_(options) {
  const char* m = D == 1 ? "BatchNorm1d" : "BatchNorm2d";
  const int64_t c = options_.num_features();
  TGRAD_CHECK(c > 0, m, ": num_features=", c, " must be positive");
  check_eps(m, options_.eps());
  if (options_.momentum()) {
    const double mo = *options_.momentum();
    TGRAD_CHECK(mo >= 0.0 && mo <= 1.0, m, ": momentum=", mo, " must be in [0, 1]");
  }
  if (options_.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (options_.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

template <int D>
void BatchNormNd<D>::reset_running_stats() {
  if (!options_.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.fill_(0.0);
  running_var.fill_(1.0);
  num_batches_tracked.fill_(0.0);
}

// running = running * (1 - f) + batch * f (the variance unbiased), f the momentum or, without
// one, 1 / num_batches_tracked (a cumulative average, which needs the count on the host). With
// a momentum nothing leaves the device, so a training step's host never waits for the GPU here.
template <int D>
void BatchNormNd<D>::update_running_stats(const Tensor& mean, const Tensor& var,
                                          int64_t per_channel) {
  NoGradGuard no_grad;
  const char* m = D == 1 ? "BatchNorm1d" : "BatchNorm2d";
  // The count after this batch, read from the device only where it is needed.
  std::optional<int64_t> tracked;
  const auto count = [&] {
    if (!tracked) tracked = num_batches_tracked.item<int64_t>() + 1;
    return *tracked;
  };
  const double f =
      options_.momentum() ? *options_.momentum() : 1.0 / static_cast<double>(count());
  const double unbias = static_cast<double>(per_channel) / static_cast<double>(per_channel - 1);
  if (detail::fused_running_stats(m, mean, var, f, unbias, running_mean, running_var,
                                  num_batches_tracked)) {
    return;
  }
  num_batches_tracked.copy_(scalar_tensor(static_cast<double>(count()), kInt64));
  running_mean.copy_(running_mean * (1.0 - f) + mean * f);
  running_var.copy_(running_var * (1.0 - f) + var * (unbias * f));
}

template <int D>
Tensor BatchNormNd<D>::forward(const Tensor& x) {
  const char* m = D == 1 ? "BatchNorm1d" : "BatchNorm2d";
  TGRAD_CHECK(x.defined(), m, ": the input is undefined");
  const bool rank_ok = D == 1 ? (x.dim() == 2 || x.dim() == 3) : x.dim() == 4;
  TGRAD_CHECK(rank_ok, m, ": expected ",
              D == 1 ? "2-D (N, C) or 3-D (N, C, L)" : "4-D (N, C, H, W)", " input, got shape ",
              x.shape());
  const int64_t c = options_.num_features();
  TGRAD_CHECK(x.size(1) == c, m, ": input has ", x.size(1), " channels (shape ", x.shape(),
              ") but num_features=", c);
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d)
    dims.push_back(d);
  const Shape cs = channel_view(x.dim(), c);
  if (is_training() || !options_.track_running_stats()) {
    const int64_t per_channel = c == 0 ? 0 : x.numel() / c;
    TGRAD_CHECK(!is_training() || per_channel > 1, m,
                ": expected more than 1 value per channel when training, got input shape ",
                x.shape());
    const bool update = is_training() && options_.track_running_stats();
    const NormShape ns{x.size(0), c, x.size(0) == 0 ? 0 : per_channel / x.size(0), 1, true};
    if (detail::fused_norm_supports(ns)) {
      Tensor mu, var;
      const Tensor y = detail::fused_norm(m, ns, x.reshape({ns.n, ns.c, ns.s}), weight, bias,
                                          options_.eps(), &mu, &var);
      if (update) update_running_stats(mu, var, per_channel);
      return y.reshape(x.shape());
    }
    Tensor mu, var;
    Tensor y = normalize(x, dims, options_.eps(), &mu, &var);
    if (update) update_running_stats(mu.detach().reshape({c}), var.detach().reshape({c}), per_channel);
    if (options_.affine()) y = y * weight.reshape(cs) + bias.reshape(cs);
    return y;
  }
  Tensor y = (x - running_mean.reshape(cs)) * pow(running_var.reshape(cs) + options_.eps(), -0.5);
  if (options_.affine()) y = y * weight.reshape(cs) + bias.reshape(cs);
  return y;
}

namespace {

// BatchNorm's and InstanceNorm's shared line, LibTorch's "(16, eps=1e-05, momentum=0.1, ...)".
void print_norm(std::ostream& stream, const std::string& name, int64_t num_features, double eps,
                std::optional<double> momentum, bool affine, bool track_running_stats) {
  stream << name << "(" << num_features << ", eps=" << eps << ", momentum=";
  if (momentum) {
    stream << *momentum;
  } else {
    stream << "None";
  }
  stream << std::boolalpha << ", affine=" << affine
         << ", track_running_stats=" << track_running_stats << std::noboolalpha << ")";
}

}  // namespace

template <int D>
void BatchNormNd<D>::pretty_print(std::ostream& stream) const {
  print_norm(stream, type_name(), options_.num_features(), options_.eps(), options_.momentum(),
             options_.affine(), options_.track_running_stats());
}

template class BatchNormNd<1>;
template class BatchNormNd<2>;

// ---- InstanceNorm2d ----

InstanceNorm2dImpl::InstanceNorm2dImpl(const InstanceNormOptions& options)
    : Module("InstanceNorm2d"), options_(options) {
  const int64_t c = options_.num_features();
  TGRAD_CHECK(c > 0, "InstanceNorm2d: num_features=", c, " must be positive");
  check_eps("InstanceNorm2d", options_.eps());
  TGRAD_CHECK(!options_.track_running_stats(),
              "InstanceNorm2d: track_running_stats=true is not supported; tgrad normalizes each "
              "instance with its own statistics in training and eval");
  if (options_.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
}

Tensor InstanceNorm2dImpl::forward(const Tensor& x) {
  TGRAD_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4),
              "InstanceNorm2d: expected 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ",
              x.defined() ? x.shape() : Shape{});
  const int64_t channel_dim = x.dim() - 3;
  TGRAD_CHECK(x.size(channel_dim) == options_.num_features(), "InstanceNorm2d: input has ",
              x.size(channel_dim), " channels but num_features=", options_.num_features());
  const int64_t c = options_.num_features();
  const NormShape ns{x.dim() == 4 ? x.size(0) : 1, c, x.size(-2) * x.size(-1), c, false};
  if (detail::fused_norm_supports(ns)) {
    return detail::fused_norm("InstanceNorm2d", ns, x.reshape({ns.n, ns.c, ns.s}), weight, bias,
                              options_.eps())
        .reshape(x.shape());
  }
  Tensor y = normalize(x, {-2, -1}, options_.eps());
  if (options_.affine()) {
    const Shape cs = channel_view(x.dim(), c, channel_dim);
    y = y * weight.reshape(cs) + bias.reshape(cs);
  }
  return y;
}

// ---- GroupNorm ----

GroupNormImpl::GroupNormImpl(const GroupNormOptions& options) : Module("GroupNorm"), options_(options) {
  const int64_t g = options_.num_groups(), c = options_.num_channels();
  TGRAD_CHECK(g > 0 && c > 0, "GroupNorm: num_groups=", g, " and num_channels=", c,
              " must be positive");
  TGRAD_CHECK(c % g == 0, "GroupNorm: num_channels=", c, " must be divisible by num_groups=", g);
  check_eps("GroupNorm", options_.eps());
  if (options_.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
}

Tensor GroupNormImpl::forward(const Tensor& x) {
  const int64_t c = options_.num_channels();
  TGRAD_CHECK(x.defined() && x.dim() >= 2, "GroupNorm: expected an (N, C, ...) input, got shape ",
              x.defined() ? x.shape() : Shape{});
  TGRAD_CHECK(x.size(1) == c, "GroupNorm: input has ", x.size(1), " channels (shape ", x.shape(),
              ") but num_channels=", c);
  const int64_t n = x.size(0), g = options_.num_groups();
  const int64_t per_group = n * g == 0 ? 0 : x.numel() / (n * g);
  const NormShape ns{n, c, per_group * g / c, g, false};
  if (detail::fused_norm_supports(ns)) {
    return detail::fused_norm("GroupNorm", ns, x.reshape({ns.n, ns.c, ns.s}), weight, bias,
                              options_.eps())
        .reshape(x.shape());
  }
  Tensor y = normalize(x.reshape({n, g, per_group}), {2}, options_.eps()).reshape(x.shape());
  if (options_.affine()) {
    const Shape cs = channel_view(x.dim(), c);
    y = y * weight.reshape(cs) + bias.reshape(cs);
  }
  return y;
}

// ---- LayerNorm ----

LayerNormImpl::LayerNormImpl(const LayerNormOptions& options) : Module("LayerNorm"), options_(options) {
  const Shape& s = options_.normalized_shape();
  TGRAD_CHECK(!s.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t v : s)
    TGRAD_CHECK(v > 0, "LayerNorm: normalized_shape ", s, " must have positive sizes");
  check_eps("LayerNorm", options_.eps());
  if (options_.elementwise_affine()) {
    weight = register_parameter("weight", ones(s));
    bias = register_parameter("bias", zeros(s));
  }
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  const Shape& s = options_.normalized_shape();
  const auto k = static_cast<int64_t>(s.size());
  TGRAD_CHECK(x.defined() && x.dim() >= k && Shape(x.shape().end() - k, x.shape().end()) == s,
              "LayerNorm: the input's last dims ", x.defined() ? x.shape() : Shape{},
              " must be normalized_shape ", s);
  const int64_t row = shape_numel(s);
  // One key per row, each element of the row its own "channel": the per-element affine of
  // normalized_shape is then the fused op's per-channel one.
  const NormShape ns{x.numel() / row, row, 1, 1, false};
  if (detail::fused_norm_supports(ns)) {
    const bool affine = options_.elementwise_affine();
    return detail::fused_norm("LayerNorm", ns, x.reshape({ns.n, row, 1}),
                              affine ? weight.reshape({row}) : Tensor(),
                              affine ? bias.reshape({row}) : Tensor(), options_.eps())
        .reshape(x.shape());
  }
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d)
    dims.push_back(d);
  Tensor y = normalize(x, dims, options_.eps());
  if (options_.elementwise_affine()) y = y * weight + bias;
  return y;
}

void InstanceNorm2dImpl::pretty_print(std::ostream& stream) const {
  print_norm(stream, "InstanceNorm2d", options_.num_features(), options_.eps(), options_.momentum(),
             options_.affine(), options_.track_running_stats());
}

void GroupNormImpl::pretty_print(std::ostream& stream) const {
  stream << "GroupNorm(" << options_.num_groups() << ", " << options_.num_channels()
         << ", eps=" << options_.eps() << ", affine=" << std::boolalpha << options_.affine()
         << std::noboolalpha << ")";
}

void LayerNormImpl::pretty_print(std::ostream& stream) const {
  const Shape& shape = options_.normalized_shape();
  stream << "LayerNorm(";
  detail::print_int_list(stream, shape.data(), shape.size());
  stream << ", eps=" << options_.eps() << ", elementwise_affine=" << std::boolalpha
         << options_.elementwise_affine() << std::noboolalpha << ")";
}

}  // namespace tgrad::nn
