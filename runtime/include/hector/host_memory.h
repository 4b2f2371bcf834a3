/* Hector's host memory cache: the buffers of generated CPU code and of compiled functions'
 * results.
 *
 * A large buffer freed by glibc goes back to the kernel (munmap), so the next step's buffer of
 * the same size faults every page in again: on a training step of a relational GNN that is
 * gigabytes of first-touch faults, more time than its GEMMs. This cache keeps freed blocks of
 * at least HECTOR_HOST_CACHE_MIN_BYTES and hands them back for requests of about their size
 * (best fit, at most a quarter larger than asked), like a GPU caching allocator does.
 *
 * A request no idle block is about the size of is served by remapping idle blocks (mremap
 * moves page tables, not data): the smallest larger block is split, its head serving the
 * request and its tail staying idle (unmapped only when under HECTOR_HOST_CACHE_MIN_BYTES),
 * else the largest grows and pages of the other idle blocks are moved into its growth, so
 * pages resident in idle blocks stay resident and only what idle memory cannot cover is
 * faulted in (a training step's forward and backward ask for blocks of different sizes in
 * turn: once warm, a step maps nothing). A new block is mapped only when nothing is idle.
 *
 * It never raises the process's peak: a block gains only pages taken from idle blocks, or new
 * ones when no idle block is left, a split keeps live plus idle bytes as they were, and a block
 * handed whole to a smaller request than it held gives the pages past that request back
 * (madvise), so resident memory is never above the peak plain malloc and free would have
 * reached, only kept between steps. Blocks are whole pages,
 * without transparent huge pages (which would make a partly written block fully resident).
 * Idle blocks beyond the cache limit are released at free. Thread-safe; every call is
 * O(log blocks).
 */
#ifndef HECTOR_HOST_MEMORY_H
#define HECTOR_HOST_MEMORY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Requests below this many bytes go straight to malloc/free. */
#define HECTOR_HOST_CACHE_MIN_BYTES (1 << 20)

/* Indices of hector_host_stats' output array. */
enum {
  HECTOR_HOST_STAT_LIVE_BYTES = 0,   /* blocks handed out and not yet freed */
  HECTOR_HOST_STAT_IDLE_BYTES = 1,   /* freed blocks kept for reuse */
  HECTOR_HOST_STAT_HITS = 2,         /* requests served from an idle block */
  HECTOR_HOST_STAT_MISSES = 3,       /* requests that mapped a new block */
  HECTOR_HOST_STAT_RELEASED_BYTES = 4, /* idle bytes given back to the system */
  HECTOR_HOST_STAT_LIMIT_BYTES = 5,  /* the idle-byte limit in force */
  HECTOR_HOST_STAT_RESIZED = 6,      /* requests served by resizing an idle block (mremap) */
  HECTOR_HOST_STAT_MAPPED_BYTES = 7, /* bytes newly mapped: new blocks, growth idle pages did not cover */
  HECTOR_HOST_STAT_COUNT = 8
};

/* nbytes of memory aligned to 64 bytes (a page for cached blocks); NULL when out of memory.
 * A zero-byte request returns a valid pointer that must be freed. */
void* hector_host_alloc(uint64_t nbytes);
/* As hector_host_alloc, aligned to `alignment` (a power of two, at most a page, 4096). */
void* hector_host_aligned_alloc(uint64_t alignment, uint64_t nbytes);
/* Give a block back (NULL is ignored). */
void hector_host_free(void* ptr);
/* Release every idle block to the system. */
void hector_host_empty_cache(void);
/* Keep at most `limit_bytes` idle (negative: the default, HECTOR_HOST_CACHE_LIMIT bytes from
 * the environment, else 8 GiB); returns the limit now in force. */
int64_t hector_host_set_cache_limit(int64_t limit_bytes);
/* Copy min(n, HECTOR_HOST_STAT_COUNT) counters into out; returns how many were written. */
int32_t hector_host_stats(int64_t* out, int32_t n);

#ifdef __cplusplus
}
#endif

#endif /* HECTOR_HOST_MEMORY_H */
