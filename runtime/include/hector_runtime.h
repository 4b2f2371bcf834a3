/* Hector native runtime: C ABI.
 *
 * A plain C interface (no Python headers), loaded by hector.runtime.native through ctypes
 * and callable from generated code. Every function returns an int32_t status code
 * (HECTOR_OK on success) unless documented otherwise, never throws, and never takes
 * ownership of the buffers it is given: the caller allocates every output buffer.
 *
 * Graph conventions: a heterogeneous graph is a COO edge list (src[e], dst[e], etype[e]) over
 * num_nodes nodes and num_etypes edge types; node ids are in [0, num_nodes) and edge types in
 * [0, num_etypes). Pointers may be NULL only when the number of elements they would hold is 0.
 */
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define HECTOR_OK 0
/* A source node id is negative or >= num_nodes. */
#define HECTOR_ERR_SRC_RANGE 1
/* A destination node id is negative or >= num_nodes. */
#define HECTOR_ERR_DST_RANGE 2
/* An edge type is negative or >= num_etypes. */
#define HECTOR_ERR_ETYPE_RANGE 3
/* A size argument is negative, or a required pointer is NULL. */
#define HECTOR_ERR_INVALID_ARGUMENT 4
/* Scratch memory could not be allocated. */
#define HECTOR_ERR_OUT_OF_MEMORY 5

/* Version of the C ABI; bumped on any incompatible change. */
int32_t hector_runtime_abi_version(void);

/* Checks that every edge of a COO edge list is in range.
 *
 * Edges are scanned in order; for each edge, src is checked first, then dst, then etype.
 * Returns HECTOR_OK if every src[e] and dst[e] is in [0, num_nodes) and every etype[e] is in
 * [0, num_etypes). Otherwise returns the code of the first failed check (HECTOR_ERR_SRC_RANGE,
 * HECTOR_ERR_DST_RANGE or HECTOR_ERR_ETYPE_RANGE) and, if bad_index_out is not NULL, writes the
 * index of the offending edge there (-1 is written on success and on invalid arguments).
 * etype may be NULL to skip the edge-type check. Returns HECTOR_ERR_INVALID_ARGUMENT when
 * num_edges, num_nodes or num_etypes is negative, or src/dst is NULL with num_edges > 0.
 */
int32_t hector_graph_validate(int64_t num_edges, int64_t num_nodes, int32_t num_etypes,
                              const int64_t* src, const int64_t* dst, const int64_t* etype,
                              int64_t* bad_index_out);

/* Stable counting sort of edges by edge type, in O(num_edges + num_etypes).
 *
 * Writes perm_out[num_edges]: perm_out[k] is the original edge id of the edge at sorted
 * position k (edges of equal type keep their original relative order), and
 * etype_ptr_out[num_etypes + 1]: the edges of type r occupy sorted positions
 * [etype_ptr_out[r], etype_ptr_out[r + 1]); etype_ptr_out[0] = 0 and
 * etype_ptr_out[num_etypes] = num_edges. Returns HECTOR_ERR_ETYPE_RANGE if some etype is out of
 * [0, num_etypes) (outputs are then unspecified), HECTOR_ERR_INVALID_ARGUMENT on negative sizes
 * or missing pointers.
 */
int32_t hector_graph_sort_by_etype(int64_t num_edges, int32_t num_etypes, const int64_t* etype,
                                   int64_t* perm_out, int64_t* etype_ptr_out);

/* Per-edge degree normalizers, in O(num_edges + num_nodes + num_etypes) time and memory.
 *
 * For every edge e, writes
 *   norm_dst_etype[e] = 1 / |{e' : dst[e'] = dst[e] and etype[e'] = etype[e]}|
 * (RGCN's 1/c_{i,r}, i.e. a mean over the in-neighbours of dst[e] through relation etype[e]) and
 *   norm_dst[e] = 1 / |{e' : dst[e'] = dst[e]}|   (1 / in-degree of dst[e]).
 * Either output may be NULL to skip it. Never allocates num_nodes * num_etypes memory.
 * Returns HECTOR_ERR_DST_RANGE / HECTOR_ERR_ETYPE_RANGE if an input is out of range (outputs
 * are then unspecified), HECTOR_ERR_INVALID_ARGUMENT on negative sizes or missing pointers,
 * HECTOR_ERR_OUT_OF_MEMORY if scratch space cannot be allocated.
 */
int32_t hector_graph_degree_norm(int64_t num_edges, int64_t num_nodes, int32_t num_etypes,
                                 const int32_t* dst, const int32_t* etype, float* norm_dst_etype,
                                 float* norm_dst);

/* Compaction map of a graph whose edges are sorted by type: one row per unique
 * (source node, edge type) pair. Writes compact_src / compact_etype (capacity num_edges; the
 * first *num_compact entries are used, grouped by edge type) and edge_compact[e], the row of
 * edge e. Returns HECTOR_ERR_INVALID_ARGUMENT if edge types are not sorted. */
int32_t hector_graph_compact(int64_t num_edges, int64_t num_nodes, int32_t num_etypes,
                             const int32_t* src, const int32_t* etype, int32_t* compact_src,
                             int32_t* compact_etype, int32_t* edge_compact, int64_t* num_compact);

#ifdef __cplusplus
}
#endif
