// Learning-rate schedulers with PyTorch's closed forms: StepLR (lr = base * gamma^floor(e/s))
// and CosineAnnealingLR (lr = eta_min + (base - eta_min) * (1 + cos(pi * e / T_max)) / 2).
// As in PyTorch, construction counts as epoch 0 and sets the optimizer's lr to lr_at(0).
#pragma once

#include <cstdint>

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
  double base_lr() const { return base_lr_; }
  double get_last_lr() const { return optimizer_.lr(); }
  virtual double lr_at(int64_t epoch) const = 0;

 protected:
  // Derived constructors call this once their fields are set (lr_at is virtual).
  void start() { set_last_epoch(0); }

 private:
  Optimizer& optimizer_;
  double base_lr_;
  int64_t last_epoch_ = 0;
};

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

}  // namespace tgrad::optim
