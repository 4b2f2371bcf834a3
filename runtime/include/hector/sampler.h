/* Hector native runtime: heterogeneous neighbour sampler (C ABI).
 *
 * A sampler holds a graph's incoming adjacency (CSR by destination, each node's in-edges grouped
 * by edge type) and node types. Sampling a mini-batch starts from seed nodes and, for each of
 * num_hops hops, draws up to fanouts[hop * num_etypes + r] in-neighbours of every node reached
 * in the previous hop through each relation r, without replacement; nodes reached again are not
 * expanded again (PyG NeighborLoader semantics). The result is written straight in Hector's
 * graph layout (hector.HeteroGraph): local node ids grouped by node type (seeds first within
 * their type), edges stably sorted by type, per-edge degree normalizers and the compaction map.
 *
 * Randomness: every (hop, destination node) pair draws from its own stream derived from the
 * caller's seed, so a batch is a pure function of (graph, seeds, fan-outs, seed) whatever the
 * number of threads.
 *
 * Functions return HECTOR_OK (0), a code of hector_runtime.h (1..5) or a HECTOR_SAMPLER_ERR_*
 * code below, never throw, and never take ownership of caller buffers.
 */
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* A seed id is negative or >= num_nodes (index of the first bad seed in *bad_index_out). */
#define HECTOR_SAMPLER_ERR_SEED_RANGE 201
/* A seed id appears twice (index of the second occurrence in *bad_index_out). */
#define HECTOR_SAMPLER_ERR_SEED_DUPLICATE 202
/* A fan-out is < -1 (index into fanouts in *bad_index_out); -1 means every neighbour. */
#define HECTOR_SAMPLER_ERR_FANOUT 203
/* A node type is negative or >= num_ntypes (index of the node in *bad_index_out). */
#define HECTOR_SAMPLER_ERR_NTYPE_RANGE 204
/* The sampled batch has more than 2^31 - 1 nodes or edges (Hector's kernels index with int32). */
#define HECTOR_SAMPLER_ERR_TOO_LARGE 205
/* A read of a feature file failed: errno in *bad_index_out (0 for a read past its end). */
#define HECTOR_SAMPLER_ERR_IO 206

typedef struct hector_sampler hector_sampler;
typedef struct hector_sampled_batch hector_sampled_batch;

/* Version of this ABI; bumped on any incompatible change. */
int32_t hector_sampler_abi_version(void);

/* Builds a sampler from a COO graph (copied; the inputs may be freed afterwards).
 *
 * src/dst/etype: int64 [num_edges]; ntype: int64 [num_nodes] (NULL: every node has type 0).
 * On a range error returns HECTOR_ERR_SRC_RANGE / DST_RANGE / ETYPE_RANGE or
 * HECTOR_SAMPLER_ERR_NTYPE_RANGE with the offending index in *bad_index_out. Node ids and edge
 * counts must fit in int32. The sampler is read-only after creation: any number of threads may
 * sample from it at once. */
int32_t hector_sampler_create(int64_t num_nodes, int64_t num_edges, int32_t num_etypes,
                              int32_t num_ntypes, const int64_t* src, const int64_t* dst,
                              const int64_t* etype, const int64_t* ntype, int64_t* bad_index_out,
                              hector_sampler** sampler_out);

/* Frees a sampler (NULL is ignored). */
void hector_sampler_free(hector_sampler* sampler);

/* In-degree of every node through every relation is at most this (for sizing fan-outs). */
int64_t hector_sampler_max_in_degree(const hector_sampler* sampler);

/* Samples a mini-batch (see the file comment) with num_threads threads (<= 0: hardware).
 *
 * seeds: int64 [num_seeds] distinct global node ids; fanouts: int32 [num_hops * num_etypes].
 * On success *batch_out holds the batch (free with hector_sampled_batch_free) and sizes_out
 * [3] = {nodes, edges, seeds}. Errors: HECTOR_SAMPLER_ERR_SEED_RANGE / SEED_DUPLICATE /
 * FANOUT (index in *bad_index_out), HECTOR_SAMPLER_ERR_TOO_LARGE, HECTOR_ERR_OUT_OF_MEMORY,
 * HECTOR_ERR_INVALID_ARGUMENT. */
int32_t hector_sampler_sample(const hector_sampler* sampler, int64_t num_seeds,
                              const int64_t* seeds, int32_t num_hops, const int32_t* fanouts,
                              uint64_t rng_seed, int32_t num_threads, int64_t* bad_index_out,
                              int64_t* sizes_out, hector_sampled_batch** batch_out);

/* Writes a sampled batch in Hector's layout into caller buffers (N nodes, E edges, R edge types,
 * T node types, B seeds; the sizes come from hector_sampler_sample):
 *   node_ids int64 [N]   global id of each local node (grouped by type, seeds first in theirs)
 *   ntype int32 [N], ntype_ptr int32 [T + 1]   node type, and each type's local id range
 *   seed_local int32 [B] local id of each seed, in the order given
 *   src, dst, etype int32 [E]   local endpoints and type, stably sorted by type
 *   etype_ptr int32 [R + 1]     edges of type r are [etype_ptr[r], etype_ptr[r + 1])
 *   norm_dst_etype, norm_dst float32 [E]   1 / #sampled edges of the same (dst, type), 1 / dst's
 *                               sampled in-degree
 *   perm int64 [E]      sampling order of each sorted edge; edge_ids int64 [E] input edge id
 *   compact_src, compact_etype int32 [E capacity], edge_compact int32 [E]: the unique
 *                        (src, type) pairs, grouped by type, and each edge's pair; *num_compact
 *   etype_src_ntype int32 [R]   node type of each type's sources (0 if none); *src_typed = 1
 *                        when every type's sources share one node type.
 * Returns HECTOR_ERR_INVALID_ARGUMENT on a NULL pointer where a size is non-zero. */
int32_t hector_sampled_batch_write(const hector_sampled_batch* batch, int64_t* node_ids,
                                   int32_t* ntype, int32_t* ntype_ptr, int32_t* seed_local,
                                   int32_t* src, int32_t* dst, int32_t* etype,
                                   int32_t* etype_ptr, float* norm_dst_etype, float* norm_dst,
                                   int64_t* perm, int64_t* edge_ids, int32_t* compact_src,
                                   int32_t* compact_etype, int32_t* edge_compact,
                                   int64_t* num_compact, int32_t* etype_src_ntype,
                                   int32_t* src_typed);

/* Frees a sampled batch (NULL is ignored). */
void hector_sampled_batch_free(hector_sampled_batch* batch);

/* Gathers rows of a row-major float32 table [num_rows, width] (e.g. a memory-mapped file) into
 * out [num_index, width] with num_threads threads (<= 0: hardware): out[i] = table[index[i]].
 * Returns HECTOR_SAMPLER_ERR_SEED_RANGE with the index position in *bad_index_out when an
 * index is out of [0, num_rows). */
int32_t hector_gather_rows(const float* table, int64_t num_rows, int64_t width,
                           const int64_t* index, int64_t num_index, float* out,
                           int32_t num_threads, int64_t* bad_index_out);

/* Gathers rows of a row-major float32 table [num_rows, width] stored in the open file fd from
 * byte data_offset (an .npy file's data) into out [num_index, width]: out[i] = row index[i].
 * The rows are read with pread(2), so the file is never mapped into the process (its pages stay
 * in the OS page cache, not in this process's RSS). Positions are bucketed by 256 KiB stretches
 * of the file and sorted by row within a stretch; wanted rows at most max_gap_bytes apart are read
 * by one pread into a per-thread buffer and copied out (one large read beats a read per row: a
 * system call costs about as much as copying a few KiB; reading straight into the output rows
 * with preadv, the gaps into scratch, measured no faster), a lone row is read straight into its
 * output row; a repeated row is read once. num_threads threads (<= 0: hardware) take stretches
 * in file order, hinting each grab's span to the kernel (POSIX_FADV_WILLNEED). The result does
 * not depend on the thread count. Returns HECTOR_SAMPLER_ERR_SEED_RANGE with the position in
 * *bad_index_out when an index is out of [0, num_rows), HECTOR_SAMPLER_ERR_IO with errno (0:
 * past the end of the file) in *bad_index_out when a read fails. */
int32_t hector_gather_file_rows(int32_t fd, int64_t data_offset, int64_t num_rows, int64_t width,
                                const int64_t* index, int64_t num_index, float* out,
                                int32_t num_threads, int64_t max_gap_bytes,
                                int64_t* bad_index_out);

#ifdef __cplusplus
}
#endif
