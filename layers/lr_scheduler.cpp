// StepLR and CosineAnnealingLR.
#include "layers/lr_scheduler.h"

#include <cmath>

namespace tgrad::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  set_last_epoch(last_epoch_ + 1);
}

void LRScheduler::set_last_epoch(int64_t epoch) {
  TGRAD_CHECK(epoch >= 0, "LRScheduler::set_last_epoch: epoch=", epoch, " must be non-negative");
  // The new lr is computed and accepted by the optimizer before the epoch moves, so a step that
  // throws (a schedule overflowing to an infinite lr) changes neither.
  const double lr = lr_at(epoch);
  TGRAD_CHECK(std::isfinite(lr), "LRScheduler: the schedule gives lr=", lr, " at epoch ", epoch,
              " (base lr ", base_lr_, "); nothing was changed");
  optimizer_.set_lr(lr);
  last_epoch_ = epoch;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TGRAD_CHECK(step_size > 0, "StepLR: step_size=", step_size, " must be positive");
  TGRAD_CHECK(std::isfinite(gamma) && gamma >= 0.0, "StepLR: gamma=", gamma,
              " must be finite and non-negative");
  start();
}

double StepLR::lr_at(int64_t epoch) const {
  // Integer division on purpose: gamma^floor(epoch / step_size), as PyTorch's StepLR.
  return base_lr() *
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

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double cos_term = std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr() - eta_min_) * (1.0 + cos_term) / 2.0;
}

}  // namespace tgrad::optim
