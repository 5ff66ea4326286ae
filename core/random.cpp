// Generator: mt19937_64 with platform-independent uniform and normal draws (the standard
// library's distributions differ between implementations, so they are not used).
#include "core/random.h"

#include <cmath>

namespace tgrad {

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  engine_.seed(seed);
  has_spare_ = false;
}

double Generator::uniform() {
  return static_cast<double>(engine_() >> 11) * 0x1.0p-53;
}

double Generator::uniform(double low, double high) {
  return low + (high - low) * uniform();
}

double Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  while (u1 <= 0.0)
    u1 = uniform();
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

Generator& default_generator() {
  thread_local Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace tgrad
