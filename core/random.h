// Generator: the seeded random source behind rand/randn and layer initialisation. Each thread
// has a default generator, reseeded with manual_seed (like torch.manual_seed).
#pragma once

#include <cstdint>
#include <random>

namespace tgrad {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }
  uint64_t next_u64() { return engine_(); }
  double uniform();                         // [0, 1), 53 random bits
  double uniform(double low, double high);  // [low, high)
  double normal();                          // standard normal (Box-Muller, platform independent)

 private:
  std::mt19937_64 engine_;
  uint64_t seed_ = 0;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

Generator& default_generator();  // this thread's
void manual_seed(uint64_t seed);

}  // namespace tgrad
