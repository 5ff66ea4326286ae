// HostAllocator: the CPU backend's memory. 64-byte aligned blocks with byte counters, an optional
// cap on live bytes (set_memory_limit), and a cache of freed blocks (16 KiB and up) that later
// requests of about the same size reuse. Without the cache every large tensor and kernel scratch
// buffer is a fresh mmap from the C library, and a smaller one freed on top of the C library's
// heap is given back to the kernel when the heap is trimmed: either way the next request faults
// its pages in again and the kernel zeroes them, and unmapping interrupts every core the process
// runs on, a cost that grows with the thread count. The cache holds at most cache_limit bytes of
// unused blocks. Thread-safe.
// TGRAD_CPU_NO_CACHING=1 turns the cache off (and builds with AddressSanitizer start with it off,
// so that a stale use of a freed tensor is still reported).
#pragma once

#include <array>
#include <atomic>
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
  // request so that similar sizes share blocks. From 256 KiB the demo's training step still
  // faulted in 6 to 60 pages a step (scratch of 16-256 KiB whose heap pages the C library had
  // trimmed), from 64 KiB under one, from 16 KiB none (docs/performance.md, twenty-first session);
  // page faults cost most in a virtual machine with no huge pages.
  static constexpr int64_t kCacheMin = int64_t{16} << 10;
  // Blocks of this size or more are mappings of their own on a 2 MiB boundary, on huge pages
  // where the kernel grants them (allocator.cpp says why); not in AddressSanitizer builds, whose
  // own heap reports a use of a freed block.
  static constexpr bool kHugePages = !TGRAD_CPU_ASAN;
  static constexpr int64_t kHugeMin = int64_t{8} << 20;
  static_assert(kHugeMin % (int64_t{2} << 20) == 0);
  static int64_t round_size(int64_t nbytes);

 private:
  // Unused blocks are kept in shards, each thread using one of its own first (threads past
  // kShards share): the pool's workers take and give back their scratch at the start and end of
  // every parallel loop, all at once, and behind one lock they queued for it (the demo's 2-D
  // step 0.89x at 16 threads, with blocks from 16 KiB cached); a thread also gets back the block
  // it used last, still in its own cache. A request its own shard cannot serve looks in the
  // others before it maps a new block.
  static constexpr int kShards = 16;
  struct alignas(64) Shard {
    std::mutex mutex;
    std::multimap<int64_t, void*> free_blocks;  // block size -> unused block
  };
  // The shared state: each block's deleter holds it, so a tensor that outlives the allocator (a
  // static one, say) still frees itself safely. The counters are atomics, outside any lock.
  struct State {
    std::array<Shard, kShards> shards;
    std::atomic<int64_t> allocated{0}, reserved{0}, peak_allocated{0};
    std::atomic<int64_t> cached{0};  // bytes in the shards
    std::atomic<int64_t> limit{0};
    ~State();
    void free_cached();
    // An unused block of between size and size + size / 8 bytes from shard `first` or, failing
    // that, from another; nullptr if none.
    void* take(int first, int64_t size, int64_t& block_size);
    // Frees the largest unused blocks, shard `first`'s before the others', while more than
    // `budget` bytes are cached.
    void trim(int first, int64_t budget);
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
