// The CPU backend's allocator (cpu/allocator.h): freed blocks from 16 KiB are reused by requests
// of about their size, on any thread, smaller ones are not cached, the cache stays under its
// budget and empties on request, the cap refuses without side effects, counters stay exact under
// threads, and large blocks sit on 2 MiB boundaries with huge pages asked for.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cpu/allocator.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

using cpu::HostAllocator;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kPlenty = int64_t{1} << 40;  // "RAM + swap" that no test reaches

TEST(HostAllocator, SizesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(HostAllocator::round_size(1000), 1000);  // below kCacheMin: exact
  EXPECT_EQ(HostAllocator::round_size(kMiB), kMiB);
  EXPECT_EQ(HostAllocator::round_size(kMiB + 1), kMiB + kMiB / 8);
  for (int64_t n = HostAllocator::kCacheMin; n < 64 * kMiB; n = n * 5 / 3 + 12345) {
    const int64_t r = HostAllocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_LE(r, n + n / 8) << n;
    EXPECT_EQ(r % 64, 0) << n;  // every block stays 64-byte aligned in size too
  }
}

TEST(HostAllocator, AFreedLargeBlockServesTheNextRequestOfAboutItsSize) {
  HostAllocator a(true, kPlenty, 64 * kMiB);
  void* first = nullptr;
  {
    const auto block = a.allocate(3 * kMiB);
    first = block.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    EXPECT_EQ(a.stats().allocated, 3 * kMiB);
  }
  EXPECT_EQ(a.stats().allocated, 0);
  EXPECT_EQ(a.stats().reserved, 3 * kMiB);  // kept for reuse
  {
    const auto again = a.allocate(3 * kMiB - 4096);
    EXPECT_EQ(again.get(), first);
    EXPECT_EQ(a.stats().allocated, 3 * kMiB - 4096);
    EXPECT_EQ(a.stats().reserved, 3 * kMiB);
    // A much smaller request does not take a block it would waste most of.
    const auto other = a.allocate(kMiB);
    EXPECT_NE(other.get(), first);
    EXPECT_EQ(a.stats().reserved, 4 * kMiB);
  }
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_EQ(a.stats().peak_allocated, 4 * kMiB - 4096);
}

TEST(HostAllocator, SmallBlocksAreNotCached) {
  HostAllocator a(true, kPlenty, 64 * kMiB);
  { const auto block = a.allocate(HostAllocator::kCacheMin - 1); }
  EXPECT_EQ(a.stats().reserved, 0);
  {
    const auto empty = a.allocate(0);
    EXPECT_NE(empty.get(), nullptr);
  }
  EXPECT_EQ(a.stats().reserved, 0);
}

// Scratch of a few tens of KiB is kept too: freed to the C library's heap, its pages went back
// to the kernel when the heap was trimmed and were faulted in again by the next call (the demo's
// training step, 6 to 60 pages a step with blocks from 256 KiB cached).
TEST(HostAllocator, BlocksOfTensOfKiBAreKeptForReuse) {
  HostAllocator a(true, kPlenty, 64 * kMiB);
  EXPECT_LE(HostAllocator::kCacheMin, 16 * 1024);
  void* first = nullptr;
  {
    const auto block = a.allocate(20 * 1024);
    first = block.get();
  }
  EXPECT_EQ(a.stats().reserved, HostAllocator::round_size(20 * 1024));
  const auto again = a.allocate(20 * 1024);
  EXPECT_EQ(again.get(), first);
}

TEST(HostAllocator, TheCacheStaysWithinItsBudget) {
  HostAllocator a(true, kPlenty, 3 * kMiB);
  {
    std::vector<std::shared_ptr<void>> blocks;
    for (int i = 0; i < 4; ++i)
      blocks.push_back(a.allocate(kMiB));
    EXPECT_EQ(a.stats().reserved, 4 * kMiB);
  }
  EXPECT_EQ(a.stats().allocated, 0);
  EXPECT_EQ(a.stats().reserved, 3 * kMiB);
  { const auto too_big = a.allocate(5 * kMiB); }  // larger than the whole budget: freed
  EXPECT_EQ(a.stats().reserved, 3 * kMiB);
}

TEST(HostAllocator, WithoutCachingEveryBlockIsFreed) {
  HostAllocator a(false, kPlenty, 64 * kMiB);
  { const auto block = a.allocate(8 * kMiB); }
  EXPECT_EQ(a.stats().reserved, 0);
  EXPECT_FALSE(a.caching());
}

// The VmFlags of the mapping that holds `p`, from /proc/self/smaps ("" where there is none).
std::string vm_flags_at(const void* p) {
  std::ifstream f("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
        line.find(':') > line.find(' ')) {  // a mapping's header, not a "Key: value" line
      inside = lo <= addr && addr < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.substr(8) + " ";
  }
  return "";
}

TEST(HostAllocator, LargeBlocksStartOnA2MiBBoundaryAndAskForHugePages) {
  // (kHugePages is off under AddressSanitizer: there only the sizes are checked.)
  for (const bool caching : {true, false}) {
    HostAllocator a(caching, kPlenty, 64 * kMiB);
    const auto small = a.allocate(HostAllocator::kHugeMin - 64);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % 64, 0u);
    const auto below = a.allocate(2 * kMiB);  // under kHugeMin: the C library's, no advice
    if (HostAllocator::kHugePages) {
      EXPECT_EQ(vm_flags_at(below.get()).find(" hg "), std::string::npos);
    }
    for (const int64_t bytes : {HostAllocator::kHugeMin, HostAllocator::kHugeMin + 4096,
                                HostAllocator::kHugeMin + 3 * kMiB}) {
      const auto block = a.allocate(bytes);
      EXPECT_EQ(a.stats().allocated, HostAllocator::kHugeMin - 64 + 2 * kMiB + bytes);
      static_cast<char*>(block.get())[bytes - 1] = 1;  // the whole block is there
      if (!HostAllocator::kHugePages) continue;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(block.get()) % (2 * kMiB), 0u) << bytes;
      // The advice is on the block's whole 2 MiB pages ("hg" in their mapping's flags), whether
      // or not the kernel then grants huge pages (its THP setting and free memory decide), and
      // not on the 4 KiB past them.
      EXPECT_NE(vm_flags_at(block.get()).find(" hg "), std::string::npos) << bytes;
      if (bytes % (2 * kMiB) != 0) {
        EXPECT_EQ(vm_flags_at(static_cast<char*>(block.get()) + bytes - 1).find(" hg "),
                  std::string::npos);
      }
    }
  }
}

TEST(HostAllocator, TheCapAndTheMachineRefuseWithTheBytesAndChangeNothing) {
  HostAllocator a(true, 64 * kMiB, 64 * kMiB);
  a.set_memory_limit(2 * kMiB);
  const auto held = a.allocate(kMiB);
  const MemoryStats before = a.stats();
  EXPECT_NE(error_of([&] {
              a.allocate(kMiB + 1);
            }).find("allocating 1048577 bytes would pass the memory limit of 2097152 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.allocate(65 * kMiB); }).find("cannot allocate 68157440 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.allocate(-1); }).find("nbytes=-1 must be non-negative"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.set_memory_limit(-5); }).find("bytes=-5 must be non-negative"),
            std::string::npos);
  EXPECT_EQ(a.stats().allocated, before.allocated);
  EXPECT_EQ(a.stats().reserved, before.reserved);
  EXPECT_EQ(a.memory_limit(), 2 * kMiB);
}

TEST(HostAllocator, CountersStayExactUnderThreads) {
  HostAllocator a(true, kPlenty, 16 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      for (int i = 0; i < 200; ++i) {
        const auto x = a.allocate((1 + (i + t) % 5) * HostAllocator::kCacheMin);
        const auto y = a.allocate(100 + i);
        static_cast<char*>(x.get())[0] = 1;  // the memory is really there
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(a.stats().allocated, 0);
  EXPECT_LE(a.stats().reserved, 16 * kMiB);
}

// Each thread gives its blocks back to a shard of its own; a request that its own shard cannot
// serve takes a block another thread gave back before it maps a new one, and the budget holds
// over every shard together.
TEST(HostAllocator, ABlockFreedOnOneThreadServesAnother) {
  HostAllocator a(true, kPlenty, 3 * kMiB);
  void* freed = nullptr;
  std::thread([&] {
    const auto block = a.allocate(2 * kMiB);
    freed = block.get();
  }).join();
  EXPECT_EQ(a.stats().reserved, 2 * kMiB);
  {
    const auto again = a.allocate(2 * kMiB);
    EXPECT_EQ(again.get(), freed);
    EXPECT_EQ(a.stats().reserved, 2 * kMiB);
  }
  // 2 MiB cached in this thread's shard now; another thread gives back 2.25 MiB more: one of the
  // two is freed to stay within 3 MiB.
  std::thread([&] { const auto block = a.allocate(2 * kMiB + kMiB / 4); }).join();
  EXPECT_LE(a.stats().reserved, 3 * kMiB);
  EXPECT_GE(a.stats().reserved, 2 * kMiB);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved, 0);
}

TEST(HostAllocator, ABlockMayOutliveItsAllocator) {
  std::shared_ptr<void> survivor;
  {
    HostAllocator a(true, kPlenty, 64 * kMiB);
    survivor = a.allocate(2 * kMiB);
    { const auto cached = a.allocate(kMiB); }
  }
  static_cast<char*>(survivor.get())[2 * kMiB - 1] = 1;
  survivor.reset();  // freed through the shared state the block holds
}

}  // namespace
}  // namespace tgrad::testing
