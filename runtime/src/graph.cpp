// Hector native runtime: graph preprocessing (validation, sorting by edge type, degree
// normalizers). See hector_runtime.h for the contract of each function.
#include <cstddef>
#include <exception>
#include <vector>

#include "hector_runtime.h"

namespace {

constexpr int32_t kAbiVersion = 1;

inline bool in_range(int64_t v, int64_t n) { return v >= 0 && v < n; }

}  // namespace

extern "C" int32_t hector_runtime_abi_version(void) { return kAbiVersion; }

extern "C" int32_t hector_graph_validate(int64_t num_edges, int64_t num_nodes, int32_t num_etypes,
                                         const int64_t* src, const int64_t* dst,
                                         const int64_t* etype, int64_t* bad_index_out) {
  if (bad_index_out != nullptr) *bad_index_out = -1;
  if (num_edges < 0 || num_nodes < 0 || num_etypes < 0) return HECTOR_ERR_INVALID_ARGUMENT;
  if (num_edges > 0 && (src == nullptr || dst == nullptr)) return HECTOR_ERR_INVALID_ARGUMENT;
  for (int64_t e = 0; e < num_edges; ++e) {
    int32_t code = HECTOR_OK;
    if (!in_range(src[e], num_nodes)) {
      code = HECTOR_ERR_SRC_RANGE;
    } else if (!in_range(dst[e], num_nodes)) {
      code = HECTOR_ERR_DST_RANGE;
    } else if (etype != nullptr && !in_range(etype[e], num_etypes)) {
      code = HECTOR_ERR_ETYPE_RANGE;
    }
    if (code != HECTOR_OK) {
      if (bad_index_out != nullptr) *bad_index_out = e;
      return code;
    }
  }
  return HECTOR_OK;
}

extern "C" int32_t hector_graph_sort_by_etype(int64_t num_edges, int32_t num_etypes,
                                              const int64_t* etype, int64_t* perm_out,
                                              int64_t* etype_ptr_out) {
  if (num_edges < 0 || num_etypes < 0 || etype_ptr_out == nullptr) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  if (num_edges > 0 && (etype == nullptr || perm_out == nullptr)) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  // Histogram into etype_ptr_out[r + 1], then an exclusive prefix sum.
  for (int64_t r = 0; r <= num_etypes; ++r) etype_ptr_out[r] = 0;
  for (int64_t e = 0; e < num_edges; ++e) {
    if (!in_range(etype[e], num_etypes)) return HECTOR_ERR_ETYPE_RANGE;
    ++etype_ptr_out[etype[e] + 1];
  }
  for (int64_t r = 0; r < num_etypes; ++r) etype_ptr_out[r + 1] += etype_ptr_out[r];
  try {
    std::vector<int64_t> cursor(etype_ptr_out, etype_ptr_out + num_etypes);
    for (int64_t e = 0; e < num_edges; ++e) perm_out[cursor[static_cast<size_t>(etype[e])]++] = e;
  } catch (const std::exception&) {
    return HECTOR_ERR_OUT_OF_MEMORY;
  }
  return HECTOR_OK;
}

extern "C" int32_t hector_graph_degree_norm(int64_t num_edges, int64_t num_nodes,
                                            int32_t num_etypes, const int32_t* dst,
                                            const int32_t* etype, float* norm_dst_etype,
                                            float* norm_dst) {
  if (num_edges < 0 || num_nodes < 0 || num_etypes < 0) return HECTOR_ERR_INVALID_ARGUMENT;
  if (num_edges == 0) return HECTOR_OK;
  if (dst == nullptr || (norm_dst_etype != nullptr && etype == nullptr)) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  for (int64_t e = 0; e < num_edges; ++e) {
    if (!in_range(dst[e], num_nodes)) return HECTOR_ERR_DST_RANGE;
    if (norm_dst_etype != nullptr && !in_range(etype[e], num_etypes)) {
      return HECTOR_ERR_ETYPE_RANGE;
    }
  }
  try {
    // In-degree of every node, as CSR offsets by destination: the edges into v are
    // by_dst[dst_ptr[v] .. dst_ptr[v + 1]).
    std::vector<int64_t> dst_ptr(static_cast<size_t>(num_nodes) + 1, 0);
    for (int64_t e = 0; e < num_edges; ++e) ++dst_ptr[static_cast<size_t>(dst[e]) + 1];
    for (int64_t v = 0; v < num_nodes; ++v) {
      dst_ptr[static_cast<size_t>(v) + 1] += dst_ptr[static_cast<size_t>(v)];
    }
    if (norm_dst != nullptr) {
      for (int64_t e = 0; e < num_edges; ++e) {
        const size_t v = static_cast<size_t>(dst[e]);
        norm_dst[e] = 1.0f / static_cast<float>(dst_ptr[v + 1] - dst_ptr[v]);
      }
    }
    if (norm_dst_etype == nullptr) return HECTOR_OK;

    // Bucket the edges by destination, then count edge types within each bucket with a
    // per-type scratch counter that is reset after each node: O(E + N + R) memory instead of a
    // dense N x R table.
    std::vector<int64_t> by_dst(static_cast<size_t>(num_edges));
    {
      std::vector<int64_t> cursor(dst_ptr.begin(), dst_ptr.end() - 1);
      for (int64_t e = 0; e < num_edges; ++e) {
        by_dst[static_cast<size_t>(cursor[static_cast<size_t>(dst[e])]++)] = e;
      }
    }
    std::vector<int64_t> count(static_cast<size_t>(num_etypes), 0);
    for (int64_t v = 0; v < num_nodes; ++v) {
      const size_t begin = static_cast<size_t>(dst_ptr[static_cast<size_t>(v)]);
      const size_t end = static_cast<size_t>(dst_ptr[static_cast<size_t>(v) + 1]);
      for (size_t i = begin; i < end; ++i) ++count[static_cast<size_t>(etype[by_dst[i]])];
      for (size_t i = begin; i < end; ++i) {
        const int64_t e = by_dst[i];
        norm_dst_etype[e] = 1.0f / static_cast<float>(count[static_cast<size_t>(etype[e])]);
      }
      for (size_t i = begin; i < end; ++i) count[static_cast<size_t>(etype[by_dst[i]])] = 0;
    }
  } catch (const std::exception&) {
    return HECTOR_ERR_OUT_OF_MEMORY;
  }
  return HECTOR_OK;
}

extern "C" int32_t hector_graph_compact(int64_t num_edges, int64_t num_nodes, int32_t num_etypes,
                                        const int32_t* src, const int32_t* etype,
                                        int32_t* compact_src, int32_t* compact_etype,
                                        int32_t* edge_compact, int64_t* num_compact) {
  if (num_edges < 0 || num_nodes < 0 || num_etypes < 0 || num_compact == nullptr) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  *num_compact = 0;
  if (num_edges == 0) return HECTOR_OK;
  if (src == nullptr || etype == nullptr || compact_src == nullptr || compact_etype == nullptr ||
      edge_compact == nullptr) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  for (int64_t e = 0; e < num_edges; ++e) {
    if (!in_range(src[e], num_nodes)) return HECTOR_ERR_SRC_RANGE;
    if (!in_range(etype[e], num_etypes)) return HECTOR_ERR_ETYPE_RANGE;
  }
  try {
    // One pass over edges sorted by type with a per-node stamp: the row of (src, etype) is
    // remembered while the stamp says the node was last seen under the current edge type, so
    // the map costs O(N + E) and its rows come out grouped by edge type.
    std::vector<int32_t> stamp(static_cast<size_t>(num_nodes), -1);
    std::vector<int64_t> row(static_cast<size_t>(num_nodes), -1);
    int64_t c = 0;
    for (int64_t e = 0; e < num_edges; ++e) {
      const size_t s = static_cast<size_t>(src[e]);
      const int32_t r = etype[e];
      if (e > 0 && etype[e] < etype[e - 1]) return HECTOR_ERR_INVALID_ARGUMENT;  // needs sorted
      if (stamp[s] != r) {
        stamp[s] = r;
        row[s] = c;
        compact_src[c] = src[e];
        compact_etype[c] = r;
        ++c;
      }
      edge_compact[e] = static_cast<int32_t>(row[s]);
    }
    *num_compact = c;
  } catch (const std::bad_alloc&) {
    return HECTOR_ERR_OUT_OF_MEMORY;
  }
  return HECTOR_OK;
}
