// Hector's caching CPU allocator for PyTorch: large blocks reused by size instead of handed back
// to glibc's heap (see docs/offload.md, "Caching CPU allocator").
//
// Installed with c10::SetCPUAllocator, it serves every CPU block of `min_block` bytes or more
// from its own anonymous mappings and keeps freed ones, up to `cache_limit` bytes, for the
// next request of about the same size (at most 1/16 or a page larger). A freed block that
// does not fit under the limit is unmapped at once, so it leaves the process. Training
// allocates the same sizes every step: the next block's activations land in the memory
// the last offloaded block freed, and backward's gradients in last step's, without the page
// faults glibc's heap costs once its free memory has been handed back (malloc_trim, madvise).
// A request no cached block fits takes one of another size and resizes it in place of a new
// mapping (mremap): shrinking hands the tail back to the OS, growing keeps the pages already
// resident and faults in only the rest. Without that, blocks of sizes that backward never asks
// for (freed activations while the gradients are of other sizes) would stay resident beside
// new mappings, and the process's peak would be that of keeping every activation.
// Smaller blocks go to the allocator it replaced. Built at run time against the installed
// PyTorch (runtime/cpu_allocator.py); a C ABI, like the rest of the runtime.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <unordered_map>

namespace {

constexpr size_t kPage = 4096;

struct State {
  std::mutex mu;
  std::multimap<size_t, void*> cached;      // freed blocks by size
  std::unordered_map<void*, size_t> live;   // blocks handed out, by address
  size_t cached_bytes = 0, mapped_bytes = 0, limit = 0, min_block = 0;
  uint64_t hits = 0, misses = 0, unmapped_on_free = 0, resized = 0, passed_on = 0;
  c10::Allocator* previous = nullptr;
};

State& state() {
  static State* s = new State();  // never destroyed: blocks may be freed at exit
  return *s;
}

void release(void* p) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.live.find(p);
  if (it == s.live.end()) {  // a small block of the previous allocator (raw_deallocate)
    lock.unlock();
    s.previous->raw_deleter()(p);
    return;
  }
  size_t size = it->second;
  s.live.erase(it);
  if (s.cached_bytes + size <= s.limit) {
    s.cached.emplace(size, p);
    s.cached_bytes += size;
  } else {
    munmap(p, size);
    s.mapped_bytes -= size;
    ++s.unmapped_on_free;
  }
}

struct CachingCPUAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    State& s = state();
    if (n < s.min_block) return s.previous->allocate(n);
    const size_t want = (n + kPage - 1) & ~(kPage - 1);
    void* p = nullptr;
    size_t size = want;
    void* other = nullptr;  // a cached block of another size, to resize
    size_t other_size = 0;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.cached.lower_bound(want);
      if (it != s.cached.end() && it->first <= want + std::max<size_t>(kPage, want / 16)) {
        p = it->second;
        size = it->first;
        ++s.hits;
      } else if (!s.cached.empty()) {
        // The smallest larger block loses only its tail; else the largest smaller one grows.
        if (it == s.cached.end()) --it;
        other = it->second;
        other_size = it->first;
      }
      if (p != nullptr || other != nullptr) {
        s.cached_bytes -= it->first;
        s.cached.erase(it);
      }
      if (p != nullptr) s.live.emplace(p, size);
    }
    if (other != nullptr) p = resize(other, other_size, want);
    if (p == nullptr) {  // mapped outside the lock: other threads keep allocating meanwhile
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        // Out of mappings (vm.max_map_count) or address space: the allocator it replaced may
        // still serve the block from its heap, and fails with PyTorch's own error if not.
        { std::lock_guard<std::mutex> lock(s.mu); ++s.passed_on; }
        return s.previous->allocate(n);
      }
      std::lock_guard<std::mutex> lock(s.mu);
      ++s.misses;
      s.mapped_bytes += size;
      s.live.emplace(p, size);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  // A cached block (already out of the cache) resized to `want` bytes and made live; nullptr
  // when the kernel refuses (the block is then intact, and goes back to the cache), so the
  // caller maps a new one, or reports the allocation failed.
  static void* resize(void* block, size_t size, size_t want) {
    State& s = state();
    void* p = mremap(block, size, want, MREMAP_MAYMOVE);
    std::lock_guard<std::mutex> lock(s.mu);
    if (p == MAP_FAILED) {
      s.cached.emplace(size, block);
      s.cached_bytes += size;
      return nullptr;
    }
    ++s.resized;
    s.mapped_bytes += want;
    s.mapped_bytes -= size;
    s.live.emplace(p, want);
    return p;
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

CachingCPUAllocator allocator;

}  // namespace

extern "C" {

// Install (once per process; later calls only set the limits). Returns 0, or 1 when
// min_block is below one page.
int hector_calloc_install(uint64_t cache_limit, uint64_t min_block) {
  if (min_block < kPage) return 1;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.limit = cache_limit;
  s.min_block = min_block;
  if (s.previous == nullptr) {
    s.previous = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&allocator, /*priority=*/UINT8_MAX);
  }
  return 0;
}

int hector_calloc_installed(void) { return state().previous != nullptr; }

// Unmap every cached block; the bytes unmapped.
uint64_t hector_calloc_empty_cache(void) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  uint64_t bytes = 0;
  for (auto& [size, p] : s.cached) {
    munmap(p, size);
    bytes += size;
  }
  s.mapped_bytes -= bytes;
  s.cached.clear();
  s.cached_bytes = 0;
  return bytes;
}

// out[0..7]: cached bytes, mapped bytes, hits, misses, blocks unmapped on free, live blocks,
// cached blocks resized for a request of another size, requests passed on to the allocator it
// replaced because no mapping could be made.
void hector_calloc_stats(uint64_t* out) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  out[0] = s.cached_bytes;
  out[1] = s.mapped_bytes;
  out[2] = s.hits;
  out[3] = s.misses;
  out[4] = s.unmapped_on_free;
  out[5] = s.live.size();
  out[6] = s.resized;
  out[7] = s.passed_on;
}

}  // extern "C"
