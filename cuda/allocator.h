// CachingAllocator: the CUDA backend's device memory. Blocks are rounded up in size, handed out
// as shared_ptr whose deleter returns them to a per-device cache (bins keyed by size), and given
// back to the driver only by empty_cache or when cudaMalloc fails. An optional per-device cap on
// allocated bytes (set_memory_limit) makes out-of-memory reproducible in tests. Thread-safe.
// TGRAD_CUDA_NO_CACHING=1 in the environment turns the cache off (exact-size cudaMalloc, cudaFree
// on release) so that compute-sanitizer memcheck sees every out-of-bounds access and stale use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"

namespace tgrad::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device_count);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Storage of at least nbytes on `device`. Out of memory (after emptying the cache and trying
  // again) throws tgrad::Error naming the bytes asked for and the device's free/total memory.
  std::shared_ptr<void> allocate(int64_t nbytes, int device);
  MemoryStats stats(int device);
  void empty_cache(int device);
  // Caps the bytes handed out (rounded block sizes, as stats().allocated counts them); 0: none.
  void set_memory_limit(int device, int64_t bytes);
  int64_t memory_limit(int device);

  // The size a request of nbytes is rounded to: 512 bytes below 1 MiB, 128 KiB above.
  static int64_t round_size(int64_t nbytes);
  bool caching() const { return caching_; }

 private:
  struct DeviceCache {
    std::mutex mutex;
    std::multimap<int64_t, void*> free_blocks;  // size -> block, both cached and unused
    MemoryStats stats;
    int64_t limit = 0;
  };
  DeviceCache& cache(int device);
  void release(int device, void* ptr, int64_t size) noexcept;
  static void free_cached_locked(int device, DeviceCache& cache);

  std::vector<std::unique_ptr<DeviceCache>> caches_;
  bool caching_ = true;
};

}  // namespace tgrad::cuda
