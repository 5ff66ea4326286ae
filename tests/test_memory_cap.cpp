// What set_memory_limit covers on the CPU: tensors and the conv kernels' scratch (im2col column
// buffers, split-reduction partials), so a capped program cannot grow past the cap unseen.
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/ops.h"
#include "core/random.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

// Restores the CPU cap when a test ends.
class CapScope {
 public:
  CapScope() : saved_(memory_limit(Device(kCPU))) {}
  ~CapScope() { set_memory_limit(Device(kCPU), saved_); }
  CapScope(const CapScope&) = delete;
  CapScope& operator=(const CapScope&) = delete;

 private:
  int64_t saved_;
};

int64_t allocated_now() {
  return backend(Device(kCPU)).memory_stats(Device(kCPU)).allocated;
}

// A cap that leaves room for the output tensor and a few KiB, but not for column buffers of
// C_out/g * taps rows: every conv pass must fail with the out-of-memory error instead of
// allocating its scratch outside the cap, and must leave nothing allocated behind.
TEST(MemoryCap, ConvScratchCountsAgainstTheCpuCap) {
  CapScope restore;
  Generator gen(2);
  const Tensor x = randn({2, 32, 64, 64}, gen);
  const Tensor w = randn({32, 32, 3, 3}, gen);
  const auto o = ConvTranspose2dFuncOptions().padding(1);
  const Tensor y = conv_transpose2d(x, w, Tensor(), o);  // (2, 32, 64, 64), 1 MiB
  const Tensor dy = randn(y.shape(), gen);
  const int64_t output_bytes = y.nbytes();
  const int64_t before = allocated_now();
  set_memory_limit(Device(kCPU), before + output_bytes + 4096);
  EXPECT_NE(error_of([&] { conv_transpose2d(x, w, Tensor(), o); }).find("out of memory"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              conv2d(dy, w, Tensor(), Conv2dFuncOptions().padding(1));
            }).find("out of memory"),
            std::string::npos);
  EXPECT_EQ(allocated_now(), before);
  set_memory_limit(Device(kCPU), 0);
  // Uncapped, the same calls succeed: the cap, not the arguments, refused them.
  EXPECT_EQ(conv_transpose2d(x, w, Tensor(), o).shape(), y.shape());
}

}  // namespace
}  // namespace tgrad::testing
