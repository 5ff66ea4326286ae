// HostAllocator: aligned blocks, the cap on live bytes, and the cache of freed blocks in
// per-thread shards (best fit within 1/8 of the request, this thread's shard first; emptied and
// retried once before out of memory).
#include "cpu/allocator.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <iterator>
#include <new>

#include <sys/mman.h>

#include "core/error.h"

namespace tgrad::cpu {
namespace {

constexpr std::align_val_t kAlignment{64};
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
constexpr uintptr_t kSmallPage = 4096;

uintptr_t round_up(uintptr_t n, uintptr_t step) {
  return (n + step - 1) / step * step;
}

bool huge(int64_t size) {
  return HostAllocator::kHugePages && size >= HostAllocator::kHugeMin;
}

// Blocks of kHugeMin bytes and up are mappings of their own, starting on a 2 MiB boundary, and
// ask the kernel for transparent huge pages over their whole 2 MiB pages (where THP is
// "madvise", the common default, nothing gets them unasked; where it is "never", the advice
// does nothing; the tail past the last whole page stays on small pages, so a block never holds
// more memory than it spans). The conv kernels read many channel planes a few cache lines at a
// time, each plane on pages of its own; past 8 MiB a tensor outgrows what the second-level TLB
// maps in 4 KiB pages (2048 entries on current x86-64 cores). The scaled S1-S5 passes, whose
// tensors are 8-32 MiB, measured 1.05x-1.09x on the geometric mean at 1 and 2 threads; from
// 2 MiB up, the decoder layers' smaller blocks measured up to 7% slower at 2 and 4 threads
// (docs/performance.md). Mapped here rather than taken from the C library: advice given to a
// block of its heap would stay on whatever the heap later puts there.
void* map_huge(int64_t size) {
  const uintptr_t len = round_up(static_cast<uintptr_t>(size), kSmallPage);
  void* raw =
      mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t block = round_up(start, kHugePage);
  // Unmap the slack before and after the aligned block.
  if (block > start) munmap(raw, block - start);
  if (start + len + kHugePage > block + len)
    munmap(reinterpret_cast<void*>(block + len), start + len + kHugePage - (block + len));
#ifdef MADV_HUGEPAGE
  if (len >= kHugePage)  // advice only: a kernel that refuses it leaves small pages
    (void)madvise(reinterpret_cast<void*>(block), len / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return reinterpret_cast<void*>(block);
}

void* new_block(int64_t size) {
  if (huge(size)) return map_huge(size);
  return ::operator new(static_cast<size_t>(size), kAlignment, std::nothrow);
}

void delete_block(void* block, int64_t size) {
  if (huge(size)) {
    munmap(block, round_up(static_cast<uintptr_t>(size), kSmallPage));
    return;
  }
  ::operator delete(block, kAlignment);
}

// This thread's shard: threads take them in turn as they first allocate.
int this_thread_shard(int shards) {
  static std::atomic<unsigned> next{0};
  thread_local const unsigned mine = next.fetch_add(1);
  return static_cast<int>(mine % static_cast<unsigned>(shards));
}

}  // namespace

HostAllocator::HostAllocator(bool caching, int64_t host_bytes, int64_t cache_limit)
    : caching_(caching), host_bytes_(host_bytes), cache_limit_(cache_limit) {}

int64_t HostAllocator::round_size(int64_t nbytes) {
  if (nbytes < kCacheMin) return nbytes;
  // Eight steps per power of two: at most 1/8 more than asked.
  const int64_t step = (int64_t{1} << (63 - std::countl_zero(static_cast<uint64_t>(nbytes)))) / 8;
  return (nbytes + step - 1) / step * step;
}

HostAllocator::State::~State() {
  free_cached();
}

void HostAllocator::State::free_cached() {
  for (Shard& shard : shards) {
    const std::lock_guard<std::mutex> lock(shard.mutex);
    for (const auto& [size, block] : shard.free_blocks) {
      delete_block(block, size);
      reserved -= size;
      cached -= size;
    }
    shard.free_blocks.clear();
  }
}

void* HostAllocator::State::take(int first, int64_t size, int64_t& block_size) {
  for (int i = 0; i < kShards; ++i) {
    Shard& shard = shards[static_cast<size_t>((first + i) % kShards)];
    const std::lock_guard<std::mutex> lock(shard.mutex);
    const auto it = shard.free_blocks.lower_bound(size);
    if (it != shard.free_blocks.end() && it->first <= size + size / 8) {
      block_size = it->first;
      void* block = it->second;
      shard.free_blocks.erase(it);
      cached -= block_size;
      return block;
    }
  }
  return nullptr;
}

void HostAllocator::State::trim(int first, int64_t budget) {
  for (int i = 0; i < kShards && cached > budget; ++i) {
    Shard& shard = shards[static_cast<size_t>((first + i) % kShards)];
    const std::lock_guard<std::mutex> lock(shard.mutex);
    while (cached > budget && !shard.free_blocks.empty()) {
      const auto largest = std::prev(shard.free_blocks.end());
      delete_block(largest->second, largest->first);
      cached -= largest->first;
      reserved -= largest->first;
      shard.free_blocks.erase(largest);
    }
  }
}

std::shared_ptr<void> HostAllocator::allocate(int64_t nbytes) {
  TGRAD_CHECK(nbytes >= 0, "cpu backend: allocate: nbytes=", nbytes, " must be non-negative");
  TGRAD_CHECK(nbytes <= host_bytes_, "cpu backend: out of memory: cannot allocate ", nbytes,
              " bytes, more than the machine's ", host_bytes_, " bytes of RAM + swap");
  const bool cache = caching_ && nbytes >= kCacheMin;
  const int64_t size = cache ? round_size(nbytes) : nbytes;
  State& s = *state_;
  // The bytes are counted first, so that requests on several threads cannot pass the cap
  // together; a refused request takes them back.
  const int64_t before = s.allocated.fetch_add(nbytes);
  const int64_t limit = s.limit.load();
  if (limit != 0 && nbytes > limit - before) {
    s.allocated -= nbytes;
    TGRAD_FAIL("cpu backend: out of memory: allocating ", nbytes,
               " bytes would pass the memory limit of ", limit, " bytes (", before,
               " bytes already allocated)");
  }
  int64_t block_size = size;
  void* block = cache ? s.take(this_thread_shard(kShards), size, block_size) : nullptr;
  if (block == nullptr) {
    // Zero bytes still get a distinct, valid pointer, as operator new gives.
    block = new_block(size);
    if (block == nullptr && s.cached > 0) {
      s.free_cached();
      block = new_block(size);
    }
    if (block == nullptr) {
      s.allocated -= nbytes;
      TGRAD_FAIL("cpu backend: out of memory allocating ", nbytes, " bytes (", before,
                 " bytes already allocated)");
    }
    s.reserved += size;
  }
  int64_t peak = s.peak_allocated.load();
  while (before + nbytes > peak && !s.peak_allocated.compare_exchange_weak(peak, before + nbytes)) {
  }
  // If the control block cannot be allocated, shared_ptr calls the deleter itself.
  return std::shared_ptr<void>(
      block, [state = state_, nbytes, block_size, cache, limit = cache_limit_](void* p) {
        release(*state, p, nbytes, block_size, cache ? limit : -1);
      });
}

void HostAllocator::release(State& s, void* block, int64_t nbytes, int64_t block_size,
                            int64_t cache_limit) noexcept {
  s.allocated -= nbytes;
  if (block_size <= cache_limit) {
    const int shard_index = this_thread_shard(kShards);
    Shard& shard = s.shards[static_cast<size_t>(shard_index)];
    bool kept = false;
    {
      const std::lock_guard<std::mutex> lock(shard.mutex);
      try {
        shard.free_blocks.emplace(block_size, block);
        s.cached += block_size;
        kept = true;
      } catch (...) {
        // No memory for the map node: free the block instead.
      }
    }
    if (kept) {
      // Over the cache's budget: give back the largest unused blocks first, this thread's own
      // shard's before the others'.
      if (s.cached > cache_limit) s.trim(shard_index, cache_limit);
      return;
    }
  }
  delete_block(block, block_size);
  s.reserved -= block_size;
}

MemoryStats HostAllocator::stats() const {
  MemoryStats m;
  m.allocated = state_->allocated.load();
  m.reserved = state_->reserved.load();
  m.peak_allocated = state_->peak_allocated.load();
  return m;
}

void HostAllocator::empty_cache() {
  state_->free_cached();
}

void HostAllocator::set_memory_limit(int64_t bytes) {
  TGRAD_CHECK(bytes >= 0, "cpu backend: set_memory_limit: bytes=", bytes, " must be non-negative");
  state_->limit = bytes;
}

int64_t HostAllocator::memory_limit() const {
  return state_->limit.load();
}

}  // namespace tgrad::cpu
