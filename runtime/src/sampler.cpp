// Hector native runtime: heterogeneous neighbour sampler and row gather. See hector/sampler.h
// for the contract of each function.
#include "hector/sampler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "hector_runtime.h"

namespace {

constexpr int32_t kAbiVersion = 1;
constexpr int64_t kInt32Max = 2147483647;
// Frontier nodes handed to a thread at a time: small enough to balance hubs across threads.
constexpr int64_t kChunk = 256;

inline bool in_range(int64_t v, int64_t n) { return v >= 0 && v < n; }

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The stream of one (hop, destination node): depends on nothing else, so the draws of a node
// do not depend on which thread samples it or in what order.
inline uint64_t stream_seed(uint64_t seed, int32_t hop, int64_t node) {
  uint64_t s = seed ^ (0xD1B54A32D192ED03ull * (static_cast<uint64_t>(hop) + 1));
  uint64_t t = s + 0x632BE59BD9B4E019ull * static_cast<uint64_t>(node);
  splitmix64(t);
  return t;
}

// Uniform integer in [0, n) (Lemire's multiply-shift; n is far below 2^32 here).
inline int64_t uniform(uint64_t& state, int64_t n) {
  const unsigned __int128 m =
      static_cast<unsigned __int128>(splitmix64(state)) * static_cast<uint64_t>(n);
  return static_cast<int64_t>(m >> 64);
}

int32_t hardware_threads(int32_t requested) {
  if (requested > 0) return requested;
  const unsigned h = std::thread::hardware_concurrency();
  return h == 0 ? 1 : static_cast<int32_t>(h);
}

// Runs body(begin, end) over [0, n) in chunks on up to num_threads threads; returns false if a
// thread ran out of memory.
template <typename Body>
bool parallel_chunks(int64_t n, int32_t num_threads, int64_t chunk, const Body& body) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int32_t threads =
      static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(num_threads, chunks)));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&]() {
    try {
      for (int64_t c = next++; c < chunks && !failed; c = next++) {
        body(c * chunk, std::min(n, (c + 1) * chunk));
      }
    } catch (const std::exception&) {
      failed = true;
    }
  };
  if (threads == 1) {
    worker();
    return !failed;
  }
  std::vector<std::thread> pool;
  try {
    pool.reserve(static_cast<size_t>(threads - 1));
    for (int32_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  } catch (const std::exception&) {
    failed = true;  // could not start every thread: the started ones still drain the chunks
  }
  worker();
  for (auto& th : pool) th.join();
  return !failed;
}

// k distinct offsets in [0, d), ascending (k < d). Floyd's algorithm for small k (no O(d)
// scratch), a partial Fisher-Yates shuffle otherwise.
void choose(uint64_t& state, int64_t d, int64_t k, std::vector<int64_t>& out,
            std::vector<int64_t>& scratch) {
  out.clear();
  if (k <= 64) {
    for (int64_t j = d - k; j < d; ++j) {
      const int64_t t = uniform(state, j + 1);
      const bool seen = std::find(out.begin(), out.end(), t) != out.end();
      out.push_back(seen ? j : t);
    }
  } else {
    scratch.resize(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) scratch[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = i + uniform(state, d - i);
      std::swap(scratch[static_cast<size_t>(i)], scratch[static_cast<size_t>(j)]);
    }
    out.assign(scratch.begin(), scratch.begin() + k);
  }
  std::sort(out.begin(), out.end());
}

}  // namespace

struct hector_sampler {
  int64_t num_nodes = 0;
  int32_t num_etypes = 0;
  int32_t num_ntypes = 0;
  int64_t max_in_degree = 0;
  std::vector<int64_t> indptr;     // [N + 1]: in-edges of v are [indptr[v], indptr[v + 1])
  std::vector<int32_t> nbr;        // [E]: source of each in-edge, sorted by (dst, etype)
  std::vector<int32_t> nbr_etype;  // [E]
  std::vector<int64_t> nbr_eid;    // [E]: input edge id
  std::vector<int32_t> ntype;      // [N]
  // Global-id -> discovery-index maps (all -1), reused across batches; several batches may be
  // sampled at once, so each takes its own from the pool.
  mutable std::mutex pool_mutex;
  mutable std::vector<std::unique_ptr<std::vector<int32_t>>> pool;

  std::unique_ptr<std::vector<int32_t>> take_map() const {
    {
      std::lock_guard<std::mutex> lock(pool_mutex);
      if (!pool.empty()) {
        auto m = std::move(pool.back());
        pool.pop_back();
        return m;
      }
    }
    return std::make_unique<std::vector<int32_t>>(static_cast<size_t>(num_nodes), -1);
  }
  void give_map(std::unique_ptr<std::vector<int32_t>> m) const {
    std::lock_guard<std::mutex> lock(pool_mutex);
    pool.push_back(std::move(m));
  }
};

struct hector_sampled_batch {
  int32_t num_etypes = 0;
  int32_t num_ntypes = 0;
  int64_t num_seeds = 0;
  std::vector<int64_t> nodes;       // global ids in discovery order (seeds first)
  std::vector<int32_t> node_ntype;  // node type of each, in discovery order
  std::vector<int32_t> e_src;       // discovery index of each edge's source
  std::vector<int32_t> e_dst;       // discovery index of each edge's destination
  std::vector<int32_t> e_etype;
  std::vector<int64_t> e_eid;
  std::vector<float> e_norm_etype;  // 1 / #sampled edges of the same (dst, etype)
  std::vector<float> e_norm_dst;    // 1 / #sampled edges into dst
};

extern "C" int32_t hector_sampler_abi_version(void) { return kAbiVersion; }

extern "C" int32_t hector_sampler_create(int64_t num_nodes, int64_t num_edges, int32_t num_etypes,
                                         int32_t num_ntypes, const int64_t* src,
                                         const int64_t* dst, const int64_t* etype,
                                         const int64_t* ntype, int64_t* bad_index_out,
                                         hector_sampler** sampler_out) {
  if (bad_index_out != nullptr) *bad_index_out = -1;
  if (sampler_out == nullptr) return HECTOR_ERR_INVALID_ARGUMENT;
  *sampler_out = nullptr;
  if (num_nodes < 0 || num_edges < 0 || num_etypes < 0 || num_ntypes < 0 ||
      num_nodes > kInt32Max || num_edges > kInt32Max) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  if (num_edges > 0 && (src == nullptr || dst == nullptr || etype == nullptr)) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  auto fail = [&](int32_t code, int64_t index) {
    if (bad_index_out != nullptr) *bad_index_out = index;
    return code;
  };
  for (int64_t e = 0; e < num_edges; ++e) {
    if (!in_range(src[e], num_nodes)) return fail(HECTOR_ERR_SRC_RANGE, e);
    if (!in_range(dst[e], num_nodes)) return fail(HECTOR_ERR_DST_RANGE, e);
    if (!in_range(etype[e], num_etypes)) return fail(HECTOR_ERR_ETYPE_RANGE, e);
  }
  if (ntype != nullptr) {
    for (int64_t v = 0; v < num_nodes; ++v) {
      if (!in_range(ntype[v], num_ntypes)) return fail(HECTOR_SAMPLER_ERR_NTYPE_RANGE, v);
    }
  } else if (num_nodes > 0 && num_ntypes < 1) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  try {
    auto s = std::make_unique<hector_sampler>();
    s->num_nodes = num_nodes;
    s->num_etypes = num_etypes;
    s->num_ntypes = num_ntypes;
    const size_t n = static_cast<size_t>(num_nodes);
    const size_t m = static_cast<size_t>(num_edges);
    s->ntype.resize(n);
    for (size_t v = 0; v < n; ++v) s->ntype[v] = ntype ? static_cast<int32_t>(ntype[v]) : 0;
    // Two stable counting sorts (by type, then by destination) order in-edges by (dst, type).
    std::vector<int64_t> by_type(m);
    {
      std::vector<int64_t> cursor(static_cast<size_t>(num_etypes) + 1, 0);
      for (size_t e = 0; e < m; ++e) ++cursor[static_cast<size_t>(etype[e]) + 1];
      for (int32_t r = 0; r < num_etypes; ++r) cursor[r + 1] += cursor[r];
      for (size_t e = 0; e < m; ++e) {
        by_type[static_cast<size_t>(cursor[static_cast<size_t>(etype[e])]++)] =
            static_cast<int64_t>(e);
      }
    }
    s->indptr.assign(n + 1, 0);
    for (size_t e = 0; e < m; ++e) ++s->indptr[static_cast<size_t>(dst[e]) + 1];
    for (size_t v = 0; v < n; ++v) {
      s->max_in_degree = std::max(s->max_in_degree, s->indptr[v + 1]);
      s->indptr[v + 1] += s->indptr[v];
    }
    s->nbr.resize(m);
    s->nbr_etype.resize(m);
    s->nbr_eid.resize(m);
    std::vector<int64_t> cursor(s->indptr.begin(), s->indptr.end() - 1);
    for (size_t i = 0; i < m; ++i) {
      const int64_t e = by_type[i];
      const size_t at = static_cast<size_t>(cursor[static_cast<size_t>(dst[e])]++);
      s->nbr[at] = static_cast<int32_t>(src[e]);
      s->nbr_etype[at] = static_cast<int32_t>(etype[e]);
      s->nbr_eid[at] = e;
    }
    *sampler_out = s.release();
  } catch (const std::exception&) {
    return HECTOR_ERR_OUT_OF_MEMORY;
  }
  return HECTOR_OK;
}

extern "C" void hector_sampler_free(hector_sampler* sampler) { delete sampler; }

extern "C" int64_t hector_sampler_max_in_degree(const hector_sampler* sampler) {
  return sampler == nullptr ? 0 : sampler->max_in_degree;
}

namespace {

// One hop: sample the in-neighbours of frontier nodes [begin, end) (discovery indices), append
// the edges to the batch and the newly reached nodes to batch.nodes.
bool sample_hop(const hector_sampler& s, hector_sampled_batch& b, std::vector<int32_t>& local_of,
                int64_t begin, int64_t end, int32_t hop, const int32_t* fanout, uint64_t seed,
                int32_t threads) {
  const int64_t width = end - begin;
  auto take = [&](int32_t r, int64_t d) -> int64_t {
    const int64_t f = fanout[r];
    return (f < 0 || f >= d) ? d : f;
  };
  // Pass 1: how many edges each frontier node contributes (exact: min(fanout, degree) per
  // relation), so each node's edges get a fixed slot and pass 2 writes without locks.
  std::vector<int64_t> offset(static_cast<size_t>(width) + 1, 0);
  bool ok = parallel_chunks(width, threads, kChunk, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t v = b.nodes[static_cast<size_t>(begin + i)];
      int64_t count = 0;
      for (int64_t p = s.indptr[v], q = s.indptr[v + 1]; p < q;) {
        const int32_t r = s.nbr_etype[static_cast<size_t>(p)];
        int64_t run = p;
        while (run < q && s.nbr_etype[static_cast<size_t>(run)] == r) ++run;
        count += take(r, run - p);
        p = run;
      }
      offset[static_cast<size_t>(i) + 1] = count;
    }
  });
  if (!ok) return false;
  for (int64_t i = 0; i < width; ++i) offset[static_cast<size_t>(i) + 1] += offset[i];
  const size_t base = b.e_src.size();
  const size_t added = static_cast<size_t>(offset[static_cast<size_t>(width)]);
  if (base + added > static_cast<size_t>(kInt32Max)) throw std::length_error("too many edges");
  b.e_src.resize(base + added);
  b.e_dst.resize(base + added);
  b.e_etype.resize(base + added);
  b.e_eid.resize(base + added);
  b.e_norm_etype.resize(base + added);
  b.e_norm_dst.resize(base + added);
  // Pass 2: draw. e_src temporarily holds global source ids.
  ok = parallel_chunks(width, threads, kChunk, [&](int64_t lo, int64_t hi) {
    std::vector<int64_t> chosen, scratch;
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t v = b.nodes[static_cast<size_t>(begin + i)];
      uint64_t state = stream_seed(seed, hop, v);
      size_t at = base + static_cast<size_t>(offset[static_cast<size_t>(i)]);
      const int64_t total = offset[static_cast<size_t>(i) + 1] - offset[static_cast<size_t>(i)];
      const float norm_dst = total > 0 ? 1.0f / static_cast<float>(total) : 0.0f;
      for (int64_t p = s.indptr[v], q = s.indptr[v + 1]; p < q;) {
        const int32_t r = s.nbr_etype[static_cast<size_t>(p)];
        int64_t run = p;
        while (run < q && s.nbr_etype[static_cast<size_t>(run)] == r) ++run;
        const int64_t d = run - p, k = take(r, d);
        if (k > 0) {
          const float norm_etype = 1.0f / static_cast<float>(k);
          if (k == d) {
            chosen.resize(static_cast<size_t>(d));
            for (int64_t j = 0; j < d; ++j) chosen[static_cast<size_t>(j)] = j;
          } else {
            choose(state, d, k, chosen, scratch);
          }
          for (const int64_t j : chosen) {
            const size_t from = static_cast<size_t>(p + j);
            b.e_src[at] = s.nbr[from];
            b.e_dst[at] = static_cast<int32_t>(begin + i);
            b.e_etype[at] = r;
            b.e_eid[at] = s.nbr_eid[from];
            b.e_norm_etype[at] = norm_etype;
            b.e_norm_dst[at] = norm_dst;
            ++at;
          }
        }
        p = run;
      }
    }
  });
  if (!ok) return false;
  // Discovery order follows edge order (not thread timing): the same batch for any threads.
  for (size_t e = base; e < base + added; ++e) {
    const int32_t u = b.e_src[e];
    int32_t& idx = local_of[static_cast<size_t>(u)];
    if (idx < 0) {
      if (b.nodes.size() >= static_cast<size_t>(kInt32Max)) {
        throw std::length_error("too many nodes");
      }
      idx = static_cast<int32_t>(b.nodes.size());
      b.nodes.push_back(u);
    }
    b.e_src[e] = idx;
  }
  return true;
}

}  // namespace

extern "C" int32_t hector_sampler_sample(const hector_sampler* sampler, int64_t num_seeds,
                                         const int64_t* seeds, int32_t num_hops,
                                         const int32_t* fanouts, uint64_t rng_seed,
                                         int32_t num_threads, int64_t* bad_index_out,
                                         int64_t* sizes_out, hector_sampled_batch** batch_out) {
  if (bad_index_out != nullptr) *bad_index_out = -1;
  if (sampler == nullptr || batch_out == nullptr || sizes_out == nullptr || num_seeds < 0 ||
      num_hops < 0 || (num_seeds > 0 && seeds == nullptr) ||
      (num_hops > 0 && sampler->num_etypes > 0 && fanouts == nullptr)) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  *batch_out = nullptr;
  const hector_sampler& s = *sampler;
  auto fail = [&](int32_t code, int64_t index) {
    if (bad_index_out != nullptr) *bad_index_out = index;
    return code;
  };
  if (num_seeds > kInt32Max) return HECTOR_SAMPLER_ERR_TOO_LARGE;
  for (int64_t i = 0; i < num_seeds; ++i) {
    if (!in_range(seeds[i], s.num_nodes)) return fail(HECTOR_SAMPLER_ERR_SEED_RANGE, i);
  }
  const int64_t num_fanouts = static_cast<int64_t>(num_hops) * s.num_etypes;
  for (int64_t i = 0; i < num_fanouts; ++i) {
    if (fanouts[i] < -1) return fail(HECTOR_SAMPLER_ERR_FANOUT, i);
  }
  const int32_t threads = hardware_threads(num_threads);
  std::unique_ptr<std::vector<int32_t>> map;
  int32_t code = HECTOR_OK;
  try {
    map = s.take_map();
    std::vector<int32_t>& local_of = *map;
    auto b = std::make_unique<hector_sampled_batch>();
    b->num_etypes = s.num_etypes;
    b->num_ntypes = s.num_ntypes;
    b->num_seeds = num_seeds;
    b->nodes.reserve(static_cast<size_t>(num_seeds));
    for (int64_t i = 0; i < num_seeds && code == HECTOR_OK; ++i) {
      int32_t& idx = local_of[static_cast<size_t>(seeds[i])];
      if (idx >= 0) {
        code = fail(HECTOR_SAMPLER_ERR_SEED_DUPLICATE, i);
      } else {
        idx = static_cast<int32_t>(i);
        b->nodes.push_back(seeds[i]);
      }
    }
    int64_t begin = 0;
    for (int32_t hop = 0; hop < num_hops && code == HECTOR_OK; ++hop) {
      const int64_t end = static_cast<int64_t>(b->nodes.size());
      if (!sample_hop(s, *b, local_of, begin, end, hop,
                      fanouts + static_cast<int64_t>(hop) * s.num_etypes, rng_seed, threads)) {
        code = HECTOR_ERR_OUT_OF_MEMORY;
      }
      begin = end;
    }
    for (const int64_t v : b->nodes) local_of[static_cast<size_t>(v)] = -1;  // reset for reuse
    if (code == HECTOR_OK) {
      b->node_ntype.resize(b->nodes.size());
      for (size_t j = 0; j < b->nodes.size(); ++j) {
        b->node_ntype[j] = s.ntype[static_cast<size_t>(b->nodes[j])];
      }
      sizes_out[0] = static_cast<int64_t>(b->nodes.size());
      sizes_out[1] = static_cast<int64_t>(b->e_src.size());
      sizes_out[2] = num_seeds;
      *batch_out = b.release();
    }
  } catch (const std::length_error&) {
    code = HECTOR_SAMPLER_ERR_TOO_LARGE;
  } catch (const std::exception&) {
    code = HECTOR_ERR_OUT_OF_MEMORY;
  }
  if (map) {
    if (code != HECTOR_OK) std::fill(map->begin(), map->end(), -1);  // may be partly stamped
    s.give_map(std::move(map));
  }
  return code;
}

extern "C" int32_t hector_sampled_batch_write(
    const hector_sampled_batch* batch, int64_t* node_ids, int32_t* ntype, int32_t* ntype_ptr,
    int32_t* seed_local, int32_t* src, int32_t* dst, int32_t* etype, int32_t* etype_ptr,
    float* norm_dst_etype, float* norm_dst, int64_t* perm, int64_t* edge_ids,
    int32_t* compact_src, int32_t* compact_etype, int32_t* edge_compact, int64_t* num_compact,
    int32_t* etype_src_ntype, int32_t* src_typed) {
  if (batch == nullptr || ntype_ptr == nullptr || etype_ptr == nullptr ||
      num_compact == nullptr || src_typed == nullptr ||
      (batch->num_etypes > 0 && etype_src_ntype == nullptr)) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  const hector_sampled_batch& b = *batch;
  const size_t n = b.nodes.size(), m = b.e_src.size();
  const size_t num_t = static_cast<size_t>(b.num_ntypes), num_r = static_cast<size_t>(b.num_etypes);
  if (n > 0 && (node_ids == nullptr || ntype == nullptr)) return HECTOR_ERR_INVALID_ARGUMENT;
  if (b.num_seeds > 0 && seed_local == nullptr) return HECTOR_ERR_INVALID_ARGUMENT;
  if (m > 0 && (src == nullptr || dst == nullptr || etype == nullptr ||
                norm_dst_etype == nullptr || norm_dst == nullptr || perm == nullptr ||
                edge_ids == nullptr || compact_src == nullptr || compact_etype == nullptr ||
                edge_compact == nullptr)) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  try {
    // Local ids grouped by node type, in discovery order within a type (seeds lead theirs).
    std::vector<int64_t> type_cursor(num_t + 1, 0);
    for (size_t j = 0; j < n; ++j) ++type_cursor[static_cast<size_t>(b.node_ntype[j]) + 1];
    for (size_t t = 0; t < num_t; ++t) type_cursor[t + 1] += type_cursor[t];
    for (size_t t = 0; t <= num_t; ++t) ntype_ptr[t] = static_cast<int32_t>(type_cursor[t]);
    std::vector<int32_t> new_id(n);
    for (size_t j = 0; j < n; ++j) {
      const int32_t t = b.node_ntype[j];
      const int32_t id = static_cast<int32_t>(type_cursor[static_cast<size_t>(t)]++);
      new_id[j] = id;
      node_ids[id] = b.nodes[j];
      ntype[id] = t;
    }
    for (int64_t i = 0; i < b.num_seeds; ++i) seed_local[i] = new_id[static_cast<size_t>(i)];

    // Edges stably sorted by type (counting sort over the sampling order).
    std::vector<int64_t> cursor(num_r + 1, 0);
    for (size_t e = 0; e < m; ++e) ++cursor[static_cast<size_t>(b.e_etype[e]) + 1];
    for (size_t r = 0; r < num_r; ++r) cursor[r + 1] += cursor[r];
    for (size_t r = 0; r <= num_r; ++r) etype_ptr[r] = static_cast<int32_t>(cursor[r]);
    for (size_t e = 0; e < m; ++e) {
      const size_t at = static_cast<size_t>(cursor[static_cast<size_t>(b.e_etype[e])]++);
      src[at] = new_id[static_cast<size_t>(b.e_src[e])];
      dst[at] = new_id[static_cast<size_t>(b.e_dst[e])];
      etype[at] = b.e_etype[e];
      norm_dst_etype[at] = b.e_norm_etype[e];
      norm_dst[at] = b.e_norm_dst[e];
      perm[at] = static_cast<int64_t>(e);
      edge_ids[at] = b.e_eid[e];
    }

    // Compaction map (as hector_graph_compact): one row per unique (src, type), grouped by type.
    std::vector<int32_t> stamp(n, -1), row(n, -1);
    int64_t c = 0;
    for (size_t e = 0; e < m; ++e) {
      const size_t u = static_cast<size_t>(src[e]);
      if (stamp[u] != etype[e]) {
        stamp[u] = etype[e];
        row[u] = static_cast<int32_t>(c);
        compact_src[c] = src[e];
        compact_etype[c] = etype[e];
        ++c;
      }
      edge_compact[e] = row[u];
    }
    *num_compact = c;

    // Source node type of each relation, and whether it is unique per relation.
    int32_t uniform = 1;
    for (size_t r = 0; r < num_r; ++r) {
      const int32_t lo = etype_ptr[r], hi = etype_ptr[r + 1];
      int32_t t_min = b.num_ntypes, t_max = -1;
      for (int32_t e = lo; e < hi; ++e) {
        const int32_t t = ntype[src[e]];
        t_min = std::min(t_min, t);
        t_max = std::max(t_max, t);
      }
      etype_src_ntype[r] = t_max < 0 ? 0 : t_min;
      if (t_max >= 0 && t_min != t_max) uniform = 0;
    }
    *src_typed = uniform;
  } catch (const std::exception&) {
    return HECTOR_ERR_OUT_OF_MEMORY;
  }
  return HECTOR_OK;
}

extern "C" void hector_sampled_batch_free(hector_sampled_batch* batch) { delete batch; }

extern "C" int32_t hector_gather_rows(const float* table, int64_t num_rows, int64_t width,
                                      const int64_t* index, int64_t num_index, float* out,
                                      int32_t num_threads, int64_t* bad_index_out) {
  if (bad_index_out != nullptr) *bad_index_out = -1;
  if (num_rows < 0 || width < 0 || num_index < 0) return HECTOR_ERR_INVALID_ARGUMENT;
  if (num_index > 0 && (index == nullptr || out == nullptr || (width > 0 && table == nullptr))) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  for (int64_t i = 0; i < num_index; ++i) {
    if (!in_range(index[i], num_rows)) {
      if (bad_index_out != nullptr) *bad_index_out = i;
      return HECTOR_SAMPLER_ERR_SEED_RANGE;
    }
  }
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  // Rows of a memory-mapped table fault in from the file here: several threads keep several
  // page reads in flight.
  const bool ok = parallel_chunks(
      num_index, hardware_threads(num_threads), 256, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          std::memcpy(out + i * width, table + index[i] * width, row_bytes);
        }
      });
  return ok ? HECTOR_OK : HECTOR_ERR_OUT_OF_MEMORY;
}

// ---------------------------------------------------------------------------------------------
// Row gather straight from a file (pread), nothing of the file mapped into the process.
// ---------------------------------------------------------------------------------------------

namespace {

// Rows are bucketed by the stretch of file they live in; one thread copies one stretch at a time
// (a bounded read buffer, and reads in file order within it).
constexpr int64_t kGatherBlockBytes = 256 * 1024;
// Stretches handed to a thread at a time; their span gets one read-ahead hint.
constexpr int64_t kGatherBlocksPerGrab = 4;

// Reads exactly n bytes at offset into dst: 0, an errno, or -1 at the end of the file.
int read_exact(int fd, char* dst, size_t n, int64_t offset) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return -1;
    dst += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return 0;
}

}  // namespace

// Contract: hector/sampler.h.
extern "C" int32_t hector_gather_file_rows(int32_t fd, int64_t data_offset, int64_t num_rows,
                                           int64_t width, const int64_t* index,
                                           int64_t num_index, float* out, int32_t num_threads,
                                           int64_t max_gap_bytes, int64_t* bad_index_out) {
  if (bad_index_out != nullptr) *bad_index_out = -1;
  if (fd < 0 || data_offset < 0 || num_rows < 0 || width < 0 || num_index < 0 ||
      max_gap_bytes < 0) {
    return HECTOR_ERR_INVALID_ARGUMENT;
  }
  if (num_index > 0 && (index == nullptr || out == nullptr)) return HECTOR_ERR_INVALID_ARGUMENT;
  for (int64_t i = 0; i < num_index; ++i) {
    if (!in_range(index[i], num_rows)) {
      if (bad_index_out != nullptr) *bad_index_out = i;
      return HECTOR_SAMPLER_ERR_SEED_RANGE;
    }
  }
  if (num_index == 0 || width == 0) return HECTOR_OK;
  const int64_t row_bytes = width * static_cast<int64_t>(sizeof(float));
  const int64_t rows_per_block = std::max<int64_t>(1, kGatherBlockBytes / row_bytes);
  const int64_t num_blocks = (num_rows + rows_per_block - 1) / rows_per_block;
  const int64_t gap_rows = max_gap_bytes / row_bytes;  // unneeded rows one read may step over
  std::atomic<int64_t> io_error{0};
  std::atomic<bool> io_failed{false};
  try {
    // Counting sort of the positions by stretch (stable: positions ascend within a stretch).
    std::vector<int64_t> start(static_cast<size_t>(num_blocks) + 1, 0);
    for (int64_t i = 0; i < num_index; ++i) ++start[index[i] / rows_per_block + 1];
    for (int64_t b = 0; b < num_blocks; ++b) start[b + 1] += start[b];
    std::vector<int64_t> order(static_cast<size_t>(num_index));
    {
      std::vector<int64_t> fill(start.begin(), start.end() - 1);
      for (int64_t i = 0; i < num_index; ++i) order[fill[index[i] / rows_per_block]++] = i;
    }
    std::vector<int64_t> busy;  // stretches holding at least one wanted row, in file order
    for (int64_t b = 0; b < num_blocks; ++b) {
      if (start[b + 1] > start[b]) busy.push_back(b);
    }
    const size_t buffer_bytes = static_cast<size_t>(rows_per_block * row_bytes);
    auto by_row = [&](int64_t a, int64_t b) {
      return index[a] < index[b] || (index[a] == index[b] && a < b);
    };
    auto copy_block = [&](int64_t b, std::vector<char>& buffer) {
      int64_t* pos = order.data() + start[b];
      const int64_t n = start[b + 1] - start[b];
      std::sort(pos, pos + n, by_row);
      for (int64_t j = 0; j < n && !io_failed;) {
        const int64_t first = index[pos[j]];
        int64_t k = j, last = first;
        while (k + 1 < n && index[pos[k + 1]] - last - 1 <= gap_rows) last = index[pos[++k]];
        const int64_t at = data_offset + first * row_bytes;
        int rc;
        if (last == first) {  // one row (maybe repeated): read it where it goes
          char* dst = reinterpret_cast<char*>(out + pos[j] * width);
          rc = read_exact(fd, dst, static_cast<size_t>(row_bytes), at);
          for (int64_t m = j + 1; rc == 0 && m <= k; ++m) {
            std::memcpy(out + pos[m] * width, dst, static_cast<size_t>(row_bytes));
          }
        } else {
          rc = read_exact(fd, buffer.data(), static_cast<size_t>((last - first + 1) * row_bytes),
                          at);
          for (int64_t m = j; rc == 0 && m <= k; ++m) {
            std::memcpy(out + pos[m] * width, buffer.data() + (index[pos[m]] - first) * row_bytes,
                        static_cast<size_t>(row_bytes));
          }
        }
        if (rc != 0) {
          io_error = rc < 0 ? 0 : rc;
          io_failed = true;
        }
        j = k + 1;
      }
    };
    const int64_t grabs = static_cast<int64_t>(busy.size());
    const bool ok = parallel_chunks(
        grabs, hardware_threads(num_threads), kGatherBlocksPerGrab, [&](int64_t lo, int64_t hi) {
          thread_local std::vector<char> buffer;  // one per thread, not one per grab
          if (buffer.size() < buffer_bytes) buffer.resize(buffer_bytes);
          const int64_t from = data_offset + busy[lo] * rows_per_block * row_bytes;
          const int64_t end_row = std::min(num_rows, (busy[hi - 1] + 1) * rows_per_block);
          const int64_t to = data_offset + end_row * row_bytes;
          (void)::posix_fadvise(fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                                POSIX_FADV_WILLNEED);  // a hint: failure changes nothing
          for (int64_t g = lo; g < hi && !io_failed; ++g) copy_block(busy[g], buffer);
        });
    if (!ok) return HECTOR_ERR_OUT_OF_MEMORY;
  } catch (const std::exception&) {
    return HECTOR_ERR_OUT_OF_MEMORY;
  }
  if (io_failed) {
    if (bad_index_out != nullptr) *bad_index_out = io_error;
    return HECTOR_SAMPLER_ERR_IO;
  }
  return HECTOR_OK;
}
