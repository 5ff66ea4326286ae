// cpu/conv_transpose_cols.h's channel_cut: how dgrad and wgrad cut a group's input channels for
// the threads. Every block must start on a multiple of kChannelQuantum (what keeps the bits the
// same for any thread count; CpuConvPaths.SameBitsForAnyThreadCount checks the results), the
// blocks must cover the channels once, the short quantum must sit in a larger block, and the
// count must be the one the estimate prefers.
//
// The header is compiled here as a copy of its own (namespace isa_cut_test), as each per-level
// copy of the kernels compiles it.
#define TGRAD_CPU_ISA_NS isa_cut_test
#include "cpu/conv_transpose_cols.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tgrad::testing {
namespace {

namespace conv = cpu::isa_cut_test::conv;

conv::Plan plan_with_channels(int64_t cig) {
  conv::Plan pl{};
  pl.cig = cig;
  return pl;
}

std::string blocks_of(const conv::ChannelCut& cut) {
  std::string s;
  for (int64_t b = 0; b < cut.blocks; ++b)
    s += (b > 0 ? " + " : "") + std::to_string(cut.size(b));
  return s;
}

TEST(CpuChannelCut, BlocksStartOnQuantaAndCoverTheChannelsOnce) {
  for (int64_t cig = 1; cig <= 600; ++cig) {
    const int64_t quanta = conv::ceil_div(cig, conv::kChannelQuantum);
    for (int64_t c = 1; c <= quanta + 2; ++c) {
      const conv::ChannelCut cut = conv::channel_cut_of(cig, c);
      SCOPED_TRACE(std::to_string(cig) + " channels in " + std::to_string(c) + ": " +
                   blocks_of(cut));
      EXPECT_EQ(cut.blocks, std::min(c, quanta));
      EXPECT_EQ(cut.begin(0), 0);
      EXPECT_EQ(cut.begin(cut.blocks), cig);
      int64_t largest = 0;
      for (int64_t b = 0; b < cut.blocks; ++b) {
        EXPECT_EQ(cut.begin(b) % conv::kChannelQuantum, 0);
        EXPECT_GT(cut.size(b), 0);
        largest = std::max(largest, cut.size(b));
      }
      EXPECT_EQ(cut.largest(), largest);
      // As even as whole quanta allow: no block more than one quantum over another.
      for (int64_t b = 0; b < cut.blocks; ++b)
        EXPECT_LE(largest - cut.size(b), conv::kChannelQuantum);
    }
  }
}

TEST(CpuChannelCut, ShortQuantumGoesToALargerBlock) {
  // 128 channels = 48 + 48 + 32: in 2 blocks, 48 + 80 (a common block size left 96 + 32).
  EXPECT_EQ(blocks_of(conv::channel_cut_of(128, 2)), "48 + 80");
  EXPECT_EQ(blocks_of(conv::channel_cut_of(200, 2)), "96 + 104");
  EXPECT_EQ(blocks_of(conv::channel_cut_of(512, 4)), "96 + 144 + 144 + 128");
  EXPECT_EQ(blocks_of(conv::channel_cut_of(144, 3)), "48 + 48 + 48");
}

TEST(CpuChannelCut, CountFollowsTheThreads) {
  // One thread, or tasks in whole rounds of the threads: no cut.
  EXPECT_EQ(conv::channel_cut(plan_with_channels(512), 1, 1).blocks, 1);
  EXPECT_EQ(conv::channel_cut(plan_with_channels(512), 32, 16).blocks, 1);
  // 5 tasks on 2 threads (3 rounds, the last half idle): 2 blocks, 240 + 272.
  EXPECT_EQ(blocks_of(conv::channel_cut(plan_with_channels(512), 5, 2)), "240 + 272");
  // 8 tasks of 128 channels on 16 threads: 2 blocks, 48 + 80, all 16 threads busy.
  EXPECT_EQ(blocks_of(conv::channel_cut(plan_with_channels(128), 8, 16)), "48 + 80");
  // One task of 200 channels: 96 + 104 on 2 threads; on 5 and 16, one block per quantum.
  EXPECT_EQ(blocks_of(conv::channel_cut(plan_with_channels(200), 1, 2)), "96 + 104");
  EXPECT_EQ(blocks_of(conv::channel_cut(plan_with_channels(200), 1, 5)), "48 + 48 + 48 + 48 + 8");
  EXPECT_EQ(blocks_of(conv::channel_cut(plan_with_channels(200), 1, 16)), "48 + 48 + 48 + 48 + 8");
  // 32 channels are one quantum: never cut.
  EXPECT_EQ(conv::channel_cut(plan_with_channels(32), 1, 16).blocks, 1);
}

TEST(CpuChannelCut, ChosenCountIsTheFastestEstimated) {
  for (const int64_t cig : {64, 96, 128, 200, 256, 384, 512, 1024}) {
    for (const int threads : {2, 4, 5, 16}) {
      for (int64_t tasks = 1; tasks <= 12; ++tasks) {
        const conv::ChannelCut chosen = conv::channel_cut(plan_with_channels(cig), tasks, threads);
        std::vector<double> load;
        const double chosen_time = conv::channel_cut_time(chosen, tasks, threads, load);
        const int64_t quanta = conv::ceil_div(cig, conv::kChannelQuantum);
        for (int64_t c = 1; c <= quanta && tasks * c <= conv::kMaxCutRounds * threads; ++c) {
          EXPECT_LE(
              chosen_time,
              conv::channel_cut_time(conv::channel_cut_of(cig, c), tasks, threads, load) + 1e-9)
              << cig << " channels, " << tasks << " tasks, " << threads
              << " threads: " << blocks_of(chosen) << " against " << c << " blocks";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tgrad::testing
