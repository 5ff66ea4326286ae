// StepLR, CosineAnnealingLR, LinearLR and ReduceLROnPlateau.
#include "layers/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace tgrad::optim {

LRScheduler::LRScheduler(Optimizer& optimizer)
    : optimizer_(optimizer), base_lrs_(optimizer.lrs()) {}

void LRScheduler::step() {
  set_last_epoch(last_epoch_ + 1);
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  TGRAD_CHECK(epoch >= 0, "LRScheduler::set_last_epoch: epoch=", epoch, " must be non-negative");
  // The new lr is computed and accepted by the optimizer before the epoch moves, so a step that
  // throws (a schedule overflowing to an infinite lr) changes neither.
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = lr_at(epoch, base_lrs_[g]);
    TGRAD_CHECK(std::isfinite(lr), "LRScheduler: the schedule gives lr=", lr, " at epoch ", epoch,
                " for param group ", g, " (base lr ", base_lrs_[g], "); nothing was changed");
    lrs.push_back(lr);
  }
  optimizer_.set_lrs(lrs);
  last_epoch_ = epoch;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TGRAD_CHECK(step_size > 0, "StepLR: step_size=", step_size, " must be positive");
  TGRAD_CHECK(std::isfinite(gamma) && gamma >= 0.0, "StepLR: gamma=", gamma,
              " must be finite and non-negative");
  start();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  // Integer division on purpose: gamma^floor(epoch / step_size), as PyTorch's StepLR.
  return base_lr *
         std::pow(gamma_,
                  static_cast<double>(epoch / step_size_));  // NOLINT(bugprone-integer-division)
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  TGRAD_CHECK(t_max > 0, "CosineAnnealingLR: T_max=", t_max, " must be positive");
  TGRAD_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, "CosineAnnealingLR: eta_min=", eta_min,
              " must be finite and non-negative");
  start();
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  const double cos_term = std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr - eta_min_) * (1.0 + cos_term) / 2.0;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  TGRAD_CHECK(start_factor > 0.0 && start_factor <= 1.0, "LinearLR: start_factor=", start_factor,
              " must be in (0, 1]");
  TGRAD_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "LinearLR: end_factor=", end_factor,
              " must be in [0, 1]");
  TGRAD_CHECK(total_iters > 0, "LinearLR: total_iters=", total_iters, " must be positive");
  start();
}

double LinearLR::lr_at(int64_t epoch, double base_lr) const {
  const double progress =
      static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * progress);
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& o)
    : optimizer_(optimizer), options_(o) {
  TGRAD_CHECK(o.factor() >= 0.0 && o.factor() < 1.0, "ReduceLROnPlateau: factor=", o.factor(),
              " must be in [0, 1) (it multiplies the lr)");
  TGRAD_CHECK(o.patience() >= 0, "ReduceLROnPlateau: patience=", o.patience(),
              " must be non-negative");
  TGRAD_CHECK(o.cooldown() >= 0, "ReduceLROnPlateau: cooldown=", o.cooldown(),
              " must be non-negative");
  TGRAD_CHECK(std::isfinite(o.threshold()) && o.threshold() >= 0.0,
              "ReduceLROnPlateau: threshold=", o.threshold(), " must be finite and non-negative");
  TGRAD_CHECK(std::isfinite(o.min_lr()) && o.min_lr() >= 0.0,
              "ReduceLROnPlateau: min_lr=", o.min_lr(), " must be finite and non-negative");
  TGRAD_CHECK(std::isfinite(o.eps()) && o.eps() >= 0.0, "ReduceLROnPlateau: eps=", o.eps(),
              " must be finite and non-negative");
  best_ = o.mode() == ReduceLROnPlateauOptions::Mode::min ? INFINITY : -INFINITY;
}

bool ReduceLROnPlateau::is_better(double metric) const {
  const double t = options_.threshold();
  const bool rel = options_.threshold_mode() == ReduceLROnPlateauOptions::ThresholdMode::rel;
  if (options_.mode() == ReduceLROnPlateauOptions::Mode::min) {
    return rel ? metric < best_ * (1.0 - t) : metric < best_ - t;
  }
  return rel ? metric > best_ * (1.0 + t) : metric > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  TGRAD_CHECK(!std::isnan(metric), "ReduceLROnPlateau::step: the metric is NaN");
  // Everything is computed first and committed at the end, so a step that throws (the
  // optimizer refusing the new lr) changes nothing.
  double best = best_;
  int64_t bad = num_bad_epochs_, cooldown = cooldown_counter_;
  if (is_better(metric)) {
    best = metric;
    bad = 0;
  } else {
    ++bad;
  }
  if (cooldown > 0) {
    --cooldown;
    bad = 0;
  }
  if (bad > options_.patience()) {
    std::vector<double> lrs = optimizer_.lrs();
    for (double& lr : lrs) {
      const double reduced = std::max(lr * options_.factor(), options_.min_lr());
      if (lr - reduced > options_.eps()) lr = reduced;
    }
    optimizer_.set_lrs(lrs);
    cooldown = options_.cooldown();
    bad = 0;
  }
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
  ++last_epoch_;
}

}  // namespace tgrad::optim
