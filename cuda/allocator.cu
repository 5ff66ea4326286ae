// CachingAllocator: rounded blocks, per-device size-keyed cache, stats, empty_cache, the memory
// cap, and the out-of-memory path (empty the cache, retry once, then throw with the bytes).
// Every kernel runs on the legacy default stream, so a block reused from the cache is ordered
// after all work that used it before: no events are needed.
#include "cuda/allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda/check.h"
#include "cuda/cuda_util.h"

namespace tgrad::cuda {

namespace {
constexpr int64_t kSmallLimit = int64_t{1} << 20;
constexpr int64_t kSmallRound = 512;
constexpr int64_t kLargeRound = int64_t{128} << 10;
}  // namespace

CachingAllocator::CachingAllocator(int device_count) {
  const char* no_caching = std::getenv("TGRAD_CUDA_NO_CACHING");
  caching_ = no_caching == nullptr || std::strcmp(no_caching, "") == 0 ||
             std::strcmp(no_caching, "0") == 0;
  for (int i = 0; i < device_count; ++i)
    caches_.push_back(std::make_unique<DeviceCache>());
}

int64_t CachingAllocator::round_size(int64_t nbytes) {
  const int64_t n = std::max<int64_t>(nbytes, 1);
  const int64_t unit = n < kSmallLimit ? kSmallRound : kLargeRound;
  return ceil_div(n, unit) * unit;
}

CachingAllocator::DeviceCache& CachingAllocator::cache(int device) {
  TGRAD_CHECK(device >= 0 && device < static_cast<int>(caches_.size()), "CUDA device cuda:", device,
              " does not exist (", caches_.size(), " device(s) visible)");
  return *caches_[static_cast<size_t>(device)];
}

std::shared_ptr<void> CachingAllocator::allocate(int64_t nbytes, int device) {
  TGRAD_CHECK(nbytes >= 0, "CUDA allocate: negative size ", nbytes);
  DeviceCache& c = cache(device);
  const int64_t size = caching_ ? round_size(nbytes) : std::max<int64_t>(nbytes, 1);
  std::lock_guard<std::mutex> lock(c.mutex);
  // The cap counts the block size asked for (a cached block may be slightly larger).
  TGRAD_CHECK(c.limit == 0 || size <= c.limit - c.stats.allocated,
              "CUDA out of memory: allocating ", nbytes, " bytes on cuda:", device,
              " would pass the memory limit of ", c.limit, " bytes (", c.stats.allocated,
              " bytes allocated)");

  void* ptr = nullptr;
  int64_t block_size = size;
  // Best fit from the cache, accepting at most 1/8 waste so big blocks are not eaten by small
  // requests.
  auto it = c.free_blocks.lower_bound(size);
  if (it != c.free_blocks.end() && it->first <= size + size / 8) {
    block_size = it->first;
    ptr = it->second;
    c.free_blocks.erase(it);
  } else {
    DeviceGuard guard(device);
    cudaError_t err = cudaMalloc(&ptr, static_cast<size_t>(size));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the (non-sticky) error before trying again
      free_cached_locked(device, c);
      err = cudaMalloc(&ptr, static_cast<size_t>(size));
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
      TGRAD_FAIL("CUDA out of memory: tried to allocate ", nbytes, " bytes on cuda:", device,
                 " (free ", free_bytes, " of total ", total_bytes, " bytes; tgrad holds ",
                 c.stats.allocated, " bytes allocated, ", c.stats.reserved, " reserved)");
    }
    TGRAD_CUDA_CHECK(err);
    c.stats.reserved += size;
  }
  c.stats.allocated += block_size;
  c.stats.peak_allocated = std::max(c.stats.peak_allocated, c.stats.allocated);
  return std::shared_ptr<void>(
      ptr, [this, device, block_size](void* p) { release(device, p, block_size); });
}

void CachingAllocator::release(int device, void* ptr, int64_t size) noexcept {
  DeviceCache& c = *caches_[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.allocated -= size;
  if (!caching_) {
    // A deleter cannot throw (so no DeviceGuard) and errors have nowhere to go; at exit the
    // runtime may already be unloading.
    int previous = 0;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device &&
                          cudaSetDevice(device) == cudaSuccess;
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    if (switched) (void)cudaSetDevice(previous);
    c.stats.reserved -= size;
    return;
  }
  try {
    c.free_blocks.emplace(size, ptr);
  } catch (...) {
    // No memory for the map node: give the block straight back to the driver instead.
    (void)cudaFree(ptr);
    c.stats.reserved -= size;
  }
}

void CachingAllocator::free_cached_locked(int device, DeviceCache& c) {
  if (c.free_blocks.empty()) return;
  DeviceGuard guard(device);
  // A cached block may still be read by queued kernels; cudaFree waits for them, but be explicit.
  TGRAD_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto it = c.free_blocks.begin(); it != c.free_blocks.end(); it = c.free_blocks.erase(it)) {
    TGRAD_CUDA_CHECK(cudaFree(it->second));
    c.stats.reserved -= it->first;
  }
}

MemoryStats CachingAllocator::stats(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void CachingAllocator::set_memory_limit(int device, int64_t bytes) {
  TGRAD_CHECK(bytes >= 0, "CUDA set_memory_limit: negative limit ", bytes);
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.limit = bytes;
}

int64_t CachingAllocator::memory_limit(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.limit;
}

void CachingAllocator::empty_cache(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mutex);
  free_cached_locked(device, c);
}

}  // namespace tgrad::cuda
