// Learning-rate schedulers with PyTorch's closed forms: StepLR (lr = base * gamma^floor(e/s)),
// CosineAnnealingLR (lr = eta_min + (base - eta_min) * (1 + cos(pi * e / T_max)) / 2) and
// LinearLR (warm-up: lr = base * factor moving linearly from start_factor to end_factor over
// total_iters epochs). As in PyTorch, construction counts as epoch 0 and sets each parameter
// group's lr to lr_at(0, its base lr): the base is each group's lr when the scheduler was made.
// ReduceLROnPlateau instead follows a metric. A step that throws changes nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/optimizer.h"

namespace tgrad::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  // Advances one epoch and sets the optimizer's lr.
  void step();
  // Jumps to `epoch` (to resume a run) and sets the optimizer's lr.
  void set_last_epoch(int64_t epoch);
  int64_t last_epoch() const { return last_epoch_; }
  // Group 0's base lr and lr (the single-group shorthand), and every group's.
  double base_lr() const { return base_lrs_.front(); }
  double get_last_lr() const { return optimizer_.lr(); }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  std::vector<double> get_last_lrs() const { return optimizer_.lrs(); }
  // The schedule: the lr at `epoch` of a group whose base lr is `base_lr`.
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;

 protected:
  // Derived constructors call this once their fields are set (lr_at is virtual).
  void start() { set_last_epoch(0); }

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

// ReduceLROnPlateauOptions().mode(kMin).factor(0.1).patience(10).threshold(1e-4)
//   .threshold_mode(kRel).cooldown(0).min_lr(0).eps(1e-8), PyTorch's names and defaults.
struct ReduceLROnPlateauOptions {
  enum class Mode { min, max };
  enum class ThresholdMode { rel, abs };
  TGRAD_ARG(Mode, mode) = Mode::min;
  TGRAD_ARG(double, factor) = 0.1;
  TGRAD_ARG(int64_t, patience) = 10;
  TGRAD_ARG(double, threshold) = 1e-4;
  TGRAD_ARG(ThresholdMode, threshold_mode) = ThresholdMode::rel;
  TGRAD_ARG(int64_t, cooldown) = 0;
  TGRAD_ARG(double, min_lr) = 0.0;
  TGRAD_ARG(double, eps) = 1e-8;
};

// Multiplies each group's lr by `factor` when the metric given to step() has not improved (by
// `threshold`, relative or absolute) for more than `patience` steps, then waits `cooldown` steps;
// never below min_lr, and not at all when the change would be under eps. As PyTorch's.
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options = {});
  void step(double metric);
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }

 private:
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
};

}  // namespace tgrad::optim
