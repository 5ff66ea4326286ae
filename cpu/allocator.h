// HostAllocator: the CPU backend's memory. 64-byte aligned blocks with byte counters, an optional
// cap on live bytes (set_memory_limit), and a cache of freed large blocks (256 KiB and up) that
// later requests of about the same size reuse. Without the cache every large tensor and kernel
// scratch buffer is a fresh mmap from the C library: the kernel zeroes its pages on first touch
// and unmapping it interrupts every core the process runs on, a cost that grows with the thread
// count. The cache holds at most cache_limit bytes of unused blocks. Thread-safe.
// TGRAD_CPU_NO_CACHING=1 turns the cache off (and builds with AddressSanitizer start with it off,
// so that a stale use of a freed tensor is still reported).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "core/backend.h"

// TGRAD_CPU_ASAN: 1 in AddressSanitizer builds (GCC names them with a macro, Clang with a feature
// test), where the allocator leaves the blocks to its heap.
#if defined(__SANITIZE_ADDRESS__)
#define TGRAD_CPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TGRAD_CPU_ASAN 1
#endif
#endif
#ifndef TGRAD_CPU_ASAN
#define TGRAD_CPU_ASAN 0
#endif

namespace tgrad::cpu {

class HostAllocator {
 public:
  // host_bytes: RAM + swap (larger requests are refused up front); cache_limit: the most bytes
  // of unused blocks kept.
  HostAllocator(bool caching, int64_t host_bytes, int64_t cache_limit);
  HostAllocator(const HostAllocator&) = delete;
  HostAllocator& operator=(const HostAllocator&) = delete;

  // At least nbytes of storage, freed (or cached) when the last shared_ptr goes. Throws
  // tgrad::Error naming the bytes when the cap or the machine refuses them.
  std::shared_ptr<void> allocate(int64_t nbytes);
  // allocated: bytes asked for by live blocks; reserved: bytes held, live or cached.
  MemoryStats stats() const;
  void empty_cache();
  void set_memory_limit(int64_t bytes);  // 0: no cap
  int64_t memory_limit() const;
  bool caching() const { return caching_; }

  // Blocks of this size or more are cached; their sizes are rounded up to within 1/8 of the
  // request so that similar sizes share blocks.
  static constexpr int64_t kCacheMin = int64_t{256} << 10;
  // Blocks of this size or more are mappings of their own on a 2 MiB boundary, on huge pages
  // where the kernel grants them (allocator.cpp says why); not in AddressSanitizer builds, whose
  // own heap reports a use of a freed block.
  static constexpr bool kHugePages = !TGRAD_CPU_ASAN;
  static constexpr int64_t kHugeMin = int64_t{8} << 20;
  static_assert(kHugeMin % (int64_t{2} << 20) == 0);
  static int64_t round_size(int64_t nbytes);

 private:
  // The shared state: each block's deleter holds it, so a tensor that outlives the allocator (a
  // static one, say) still frees itself safely.
  struct State {
    mutable std::mutex mutex;
    std::multimap<int64_t, void*> free_blocks;  // block size -> unused block
    MemoryStats stats;
    int64_t cached = 0;  // bytes in free_blocks
    int64_t limit = 0;
    ~State();
    void free_cached_locked();
  };
  // Gives a block back: into the cache when block_size <= cache_limit (-1: never), else freed.
  static void release(State& s, void* block, int64_t nbytes, int64_t block_size,
                      int64_t cache_limit) noexcept;

  std::shared_ptr<State> state_ = std::make_shared<State>();
  bool caching_;
  int64_t host_bytes_;
  int64_t cache_limit_;
};

}  // namespace tgrad::cpu
