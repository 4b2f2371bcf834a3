// Hector's host memory cache (see hector/host_memory.h for what it is for and its guarantees).
#include "hector/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kSmallAlign = 64;  // a cache line
constexpr int64_t kDefaultLimit = 8ll << 30;

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

int64_t limit_from_env() {
  const char* text = std::getenv("HECTOR_HOST_CACHE_LIMIT");
  if (text == nullptr || *text == '\0') return kDefaultLimit;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  return (end != nullptr && *end == '\0' && value >= 0) ? value : kDefaultLimit;
}

// Maps `bytes` (a multiple of kPage). No transparent huge pages: a huge page makes a block's
// partly written tail resident too, and the cache must never hold more than malloc would.
void* map_block(uint64_t bytes) {
  void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return block == MAP_FAILED ? nullptr : block;
}

struct Cache {
  std::mutex mu;
  std::multimap<uint64_t, void*> idle;      // capacity -> block
  std::unordered_map<void*, uint64_t> live;  // block -> capacity
  int64_t counters[HECTOR_HOST_STAT_COUNT] = {0, 0, 0, 0, 0, kDefaultLimit, 0, 0};
  bool limit_read = false;

  int64_t& stat(int i) { return counters[i]; }

  int64_t limit() {
    if (!limit_read) {
      stat(HECTOR_HOST_STAT_LIMIT_BYTES) = limit_from_env();
      limit_read = true;
    }
    return stat(HECTOR_HOST_STAT_LIMIT_BYTES);
  }

  // Unmaps idle blocks until at least `bytes` were released (or none is left): the smallest
  // block that covers what is still owed, else the largest, so no more is given back than
  // needed (each byte released is a page fault again when a later request needs it).
  void release(uint64_t bytes) {
    uint64_t freed = 0;
    while (freed < bytes && !idle.empty()) {
      auto victim = idle.lower_bound(bytes - freed);
      if (victim == idle.end()) victim = std::prev(idle.end());
      munmap(victim->second, victim->first);
      freed += victim->first;
      stat(HECTOR_HOST_STAT_IDLE_BYTES) -= static_cast<int64_t>(victim->first);
      stat(HECTOR_HOST_STAT_RELEASED_BYTES) += static_cast<int64_t>(victim->first);
      idle.erase(victim);
    }
  }

  void* take(uint64_t nbytes) {
    uint64_t needed = round_up(nbytes, kPage);
    uint64_t capacity = needed;
    std::lock_guard<std::mutex> lock(mu);
    auto fit = idle.lower_bound(capacity);
    void* block = nullptr;
    if (fit != idle.end() && fit->first <= capacity + capacity / 4) {
      block = fit->second;
      capacity = fit->first;
      idle.erase(fit);
      stat(HECTOR_HOST_STAT_IDLE_BYTES) -= static_cast<int64_t>(capacity);
      stat(HECTOR_HOST_STAT_HITS) += 1;
      // The pages past this request were touched by a larger one: give them back, so the
      // block is no more resident than a fresh one of this size would become.
      if (capacity > needed) madvise(static_cast<char*>(block) + needed, capacity - needed,
                                     MADV_DONTNEED);
    } else if (!idle.empty()) {
      block = resize(fit != idle.end() ? fit : std::prev(idle.end()), needed);
      if (block == nullptr) return nullptr;
    } else {
      block = map_block(capacity);
      if (block == nullptr) return nullptr;
      stat(HECTOR_HOST_STAT_MISSES) += 1;
      stat(HECTOR_HOST_STAT_MAPPED_BYTES) += static_cast<int64_t>(capacity);
    }
    live.emplace(block, capacity);
    stat(HECTOR_HOST_STAT_LIVE_BYTES) += static_cast<int64_t>(capacity);
    return block;
  }

  // Serves a request of `needed` bytes that no idle block is about the size of from idle
  // blocks remapped (mremap moves page tables, not data), instead of unmapping idle blocks and
  // mapping a fresh one: pages resident in idle blocks stay resident, so a step whose phases
  // ask for blocks of sizes that alternate (a forward's [N, out] buffers, a backward's
  // [N, in]) faults in nothing again once idle memory covers the request. The smallest larger
  // block is split: its head serves the request and its tail stays idle (resident, ready for
  // the next request or the next growth; a tail under HECTOR_HOST_CACHE_MIN_BYTES, which no
  // request would fit, is unmapped), so a step whose forward splits a block its backward grew
  // back maps nothing. Else the largest grows, and pages of the other idle blocks are moved
  // into its growth; only what idle memory cannot cover is new. Live plus idle bytes never
  // grow but by what is newly mapped when nothing idle is left, so resident memory stays under
  // the peak malloc and free would have reached.
  void* resize(std::multimap<uint64_t, void*>::iterator victim, uint64_t needed) {
    uint64_t old = victim->first;
    char* block = static_cast<char*>(victim->second);
    idle.erase(victim);
    stat(HECTOR_HOST_STAT_IDLE_BYTES) -= static_cast<int64_t>(old);
    if (old > needed) return split(block, old, needed);
    // The grown block is a fresh range (mapped, not touched: no page is resident yet) that the
    // old block's pages and then other idle blocks' pages are moved into; the rest faults in.
    char* grown = static_cast<char*>(map_block(needed));
    if (grown == nullptr) {  // (out of address space): unmap it and map a fresh block
      munmap(block, old);
      stat(HECTOR_HOST_STAT_RELEASED_BYTES) += static_cast<int64_t>(old);
      release(needed - old);
      void* fresh = map_block(needed);
      if (fresh == nullptr) return nullptr;
      stat(HECTOR_HOST_STAT_MISSES) += 1;
      stat(HECTOR_HOST_STAT_MAPPED_BYTES) += static_cast<int64_t>(needed);
      return fresh;
    }
    stat(HECTOR_HOST_STAT_RESIZED) += 1;
    uint64_t moved = move_pages(block, grown, old);
    stat(HECTOR_HOST_STAT_RELEASED_BYTES) += static_cast<int64_t>(old - moved);
    moved += fill(grown, old, needed);
    stat(HECTOR_HOST_STAT_MAPPED_BYTES) += static_cast<int64_t>(needed - moved);
    return grown;
  }

  // Moves the pages of [src, src + len) onto [dst, dst + len) (mremap moves page tables, not
  // data). A block made of pieces of other blocks spans several mappings, which one mremap
  // refuses: such a range moves half by half. Returns the bytes moved; a page that cannot be
  // moved is unmapped (its part of dst faults in fresh).
  static uint64_t move_pages(char* src, char* dst, uint64_t len) {
    if (mremap(src, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED) return len;
    if (len <= kPage) {
      munmap(src, len);
      return 0;
    }
    uint64_t half = len / 2 / kPage * kPage;
    return move_pages(src, dst, half) + move_pages(src + half, dst + half, len - half);
  }

  // Hands out the first `needed` bytes of the idle block [block, block + old) and keeps the
  // rest idle (no system call: the block is pages of one mapping, which later calls may unmap
  // or remap piece by piece); a tail too small for any request is unmapped.
  void* split(void* block, uint64_t old, uint64_t needed) {
    char* tail = static_cast<char*>(block) + needed;
    uint64_t rest = old - needed;
    stat(HECTOR_HOST_STAT_RESIZED) += 1;
    if (rest >= HECTOR_HOST_CACHE_MIN_BYTES) {
      idle.emplace(rest, tail);
      stat(HECTOR_HOST_STAT_IDLE_BYTES) += static_cast<int64_t>(rest);
    } else {
      munmap(tail, rest);
      stat(HECTOR_HOST_STAT_RELEASED_BYTES) += static_cast<int64_t>(rest);
    }
    return block;
  }

  // Moves pages of idle blocks into [block + filled, block + needed) (largest block first; a
  // block only partly needed keeps its rest idle); returns how many bytes were moved in.
  uint64_t fill(char* block, uint64_t filled, uint64_t needed) {
    uint64_t moved = 0;
    while (filled < needed && !idle.empty()) {
      auto donor = std::prev(idle.end());
      uint64_t size = donor->first;
      char* pages = static_cast<char*>(donor->second);
      uint64_t take = size < needed - filled ? size : needed - filled;
      idle.erase(donor);
      if (size > take) idle.emplace(size - take, pages + take);
      stat(HECTOR_HOST_STAT_IDLE_BYTES) -= static_cast<int64_t>(take);
      uint64_t got = move_pages(pages, block + filled, take);
      stat(HECTOR_HOST_STAT_RELEASED_BYTES) += static_cast<int64_t>(take - got);
      moved += got;
      filled += take;
    }
    return moved;
  }

  // True when `ptr` was one of the cache's blocks (now idle, or released past the limit).
  bool give_back(void* ptr) {
    std::lock_guard<std::mutex> lock(mu);
    auto found = live.find(ptr);
    if (found == live.end()) return false;
    uint64_t capacity = found->second;
    live.erase(found);
    stat(HECTOR_HOST_STAT_LIVE_BYTES) -= static_cast<int64_t>(capacity);
    idle.emplace(capacity, ptr);
    stat(HECTOR_HOST_STAT_IDLE_BYTES) += static_cast<int64_t>(capacity);
    int64_t over = stat(HECTOR_HOST_STAT_IDLE_BYTES) - limit();
    if (over > 0) release(static_cast<uint64_t>(over));
    return true;
  }
};

// Never destroyed: generated code may free blocks from static destructors at exit.
Cache& cache() {
  static Cache* instance = new Cache();
  return *instance;
}

void* small_alloc(uint64_t alignment, uint64_t nbytes) {
  uint64_t align = alignment < kSmallAlign ? kSmallAlign : alignment;
  return std::aligned_alloc(align, round_up(nbytes == 0 ? 1 : nbytes, align));
}

}  // namespace

extern "C" {

void* hector_host_alloc(uint64_t nbytes) { return hector_host_aligned_alloc(kSmallAlign, nbytes); }

void* hector_host_aligned_alloc(uint64_t alignment, uint64_t nbytes) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kPage)
    return nullptr;
  if (nbytes < HECTOR_HOST_CACHE_MIN_BYTES) return small_alloc(alignment, nbytes);
  return cache().take(nbytes);
}

void hector_host_free(void* ptr) {
  if (ptr == nullptr) return;
  if (!cache().give_back(ptr)) std::free(ptr);
}

void hector_host_empty_cache(void) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.release(UINT64_MAX);
}

int64_t hector_host_set_cache_limit(int64_t limit_bytes) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit_read = true;
  c.stat(HECTOR_HOST_STAT_LIMIT_BYTES) = limit_bytes < 0 ? limit_from_env() : limit_bytes;
  int64_t over = c.stat(HECTOR_HOST_STAT_IDLE_BYTES) - c.stat(HECTOR_HOST_STAT_LIMIT_BYTES);
  if (over > 0) c.release(static_cast<uint64_t>(over));
  return c.stat(HECTOR_HOST_STAT_LIMIT_BYTES);
}

int32_t hector_host_stats(int64_t* out, int32_t n) {
  if (out == nullptr || n <= 0) return 0;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit();
  int32_t count = n < HECTOR_HOST_STAT_COUNT ? n : HECTOR_HOST_STAT_COUNT;
  for (int32_t i = 0; i < count; ++i) out[i] = c.counters[i];
  return count;
}

}  // extern "C"
