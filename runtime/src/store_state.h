// Hector native runtime: the tensor store's state (see hector/offload.h), shared by its parts:
// files (store_files.cpp), chunk I/O (store_jobs.cpp), the I/O threads (store_workers.cpp),
// fault injection (store_faults.cpp) and the C ABI (offload_abi.cpp).
//
// Design: each object is one file in the store's private directory; a request is split into
// chunk_bytes chunks of the file so one large tensor keeps several requests in flight. Two
// backends move the chunks: io_uring rings (io_uring_ring.h; one thread per ring, several
// chunks in flight per ring, one system call per batch of submissions) or a pool of
// pread/pwrite threads (the fallback when the kernel refuses io_uring, or when asked for).
// Under O_DIRECT the object's byte i sits at file offset pad + i with pad = source address mod
// 4096, so every whole block moves straight between the caller's memory and the file; only the
// partial first/last blocks go through a small staging buffer (zero padding on disk), and a
// read whose destination is out of phase goes through a chunk-sized one. Each chunk's CRC32C
// is kept in memory and checked, with the padding, when the chunk is read back. Counters record
// where the time goes (hector_store_stats2).
#pragma once

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hector/offload.h"
#include "io_uring_ring.h"
#include "store_files.h"

namespace hector_offload {

enum State { kWriting, kStored, kReading, kFailed };
enum Backend { kThreads = 0, kIoUring = 1 };

struct Object {
  int64_t key = 0;
  std::string name;  // the file's name in the store's directory
  std::string path;  // the directory's path and name, for messages
  int64_t nbytes = 0;
  int64_t pad = 0;  // file offset of the first byte: the source address mod 4096 (O_DIRECT)
  int64_t disk_bytes = 0;
  int64_t file_bytes = 0;  // the file's size: disk_bytes, or more when it reuses a larger file
  std::string spare;       // write: a removed object's file to rename to name and overwrite
  int fd = -1;
  // The file is created/opened by the first I/O thread that takes one of the operation's
  // chunks (creating a file costs ~0.1-1 ms on ext4: the caller's thread should not pay it).
  std::mutex open_mu;
  bool opened = false;
  int open_errno = 0;
  State state = kWriting;
  int32_t status = HECTOR_OK;  // final status of the last operation
  int err = 0;                 // errno of the last failure
  std::string message;         // text of the last failure
  std::vector<uint32_t> crcs;  // one per chunk of the file
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  int64_t pending = 0;
  int fault = HECTOR_FAULT_NONE;
  bool remove_requested = false;
};

struct Chunk {
  Object* obj;
  int64_t index;
  bool write;
};

struct Fault {
  int kind = HECTOR_FAULT_NONE;
  int64_t skip = 0;
  int64_t count = 0;
};

// Where one I/O of a chunk takes its bytes from or puts them: straight in the caller's memory,
// or a staging buffer: the small one (two 4096-byte blocks, registered with io_uring) for the
// partial first and last blocks of an object, the big one (one chunk) when the caller's
// address is not in phase with the file.
enum Where { kMemory, kSmall, kBig };

struct Piece {
  int64_t off = 0, len = 0;  // file range, 4096-aligned under O_DIRECT
  Where where = kMemory;
  int64_t staging_off = 0;  // offset in the staging buffer
};

// One chunk of an object in the hands of an I/O thread.
struct Job {
  Chunk c{};
  int64_t fs = 0, fe = 0;  // file range of the object's bytes in this chunk
  Piece pieces[3];
  int npieces = 0;
  int32_t status = HECTOR_OK;
  int err = 0;
  std::string msg;
  int64_t submitted_at = 0;
  int64_t avoided = 0;  // staging copy bytes saved against the previous design
};

// The staging buffers of one I/O thread (pool) or one ring slot (io_uring).
struct Staging {
  uint8_t* small = nullptr;  // 2 * kAlign bytes
  uint8_t* big = nullptr;    // chunk bytes, allocated on first use
  int small_index = -1;      // its registered-buffer index, -1 when not registered
};

struct Counters {
  std::atomic<int64_t> copy_ns{0}, copy_bytes{0}, crc_ns{0}, crc_bytes{0};
  std::atomic<int64_t> submit_ns{0}, ring_submit_ns{0};
  std::atomic<int64_t> write_wait_ns{0}, read_wait_ns{0}, write_io_ns{0}, read_io_ns{0};
  std::atomic<int64_t> io_requests{0}, copies_avoided{0}, registered_bytes{0}, open_ns{0};
  std::atomic<int64_t> files_reused{0};
};

// An io_uring ring, its thread's request slots and their staging buffers.
struct RingState {
  std::unique_ptr<hector_io::Ring> ring;
  int depth = 0;
  uint8_t* small_region = nullptr;  // depth * 2 * kAlign, registered when possible
  std::vector<Staging> staging;
};

inline uint8_t* aligned_alloc_bytes(int64_t n) {
  void* p = nullptr;
  return ::posix_memalign(&p, kAlign, static_cast<size_t>(n)) == 0 ? static_cast<uint8_t*>(p)
                                                                    : nullptr;
}

// Address of file offset f of object o in the caller's buffer p (the file holds byte i of
// the object at offset pad + i).
inline uint8_t* mem_at(const Object* o, const void* p, int64_t f) {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) - o->pad + f);
}

}  // namespace hector_offload

struct hector_store {
  using Backend = hector_offload::Backend;
  using Chunk = hector_offload::Chunk;
  using Counters = hector_offload::Counters;
  using Fault = hector_offload::Fault;
  using Job = hector_offload::Job;
  using Object = hector_offload::Object;
  using Piece = hector_offload::Piece;
  using RingState = hector_offload::RingState;
  using Staging = hector_offload::Staging;

  std::string root, dir;  // paths, for messages and hector_store_path
  std::string dir_name;   // the directory's name under the root
  int root_fd = -1;       // the root, opened without following a link and checked private
  int dir_fd = -1;        // the store's directory: every file is opened relative to it
  int lock_fd = -1;
  int64_t chunk = 0;
  bool direct = false;
  std::string direct_reason;
  Backend backend = hector_offload::kThreads;
  std::string backend_reason;
  Counters counters;
  std::vector<RingState> rings;

  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::list<Chunk> queue;  // a list: an operation's chunks are spliced in, which cannot throw
  std::unordered_map<int64_t, std::unique_ptr<Object>> objects;
  std::vector<int64_t> completions;
  std::vector<std::thread> workers;
  bool stop = false;
  int64_t next_key = 1;
  Fault faults[2];

  int64_t bytes[2] = {0, 0}, objects_done[2] = {0, 0};
  int64_t inflight[2] = {0, 0}, busy_since[2] = {0, 0}, busy_ns[2] = {0, 0};
  int64_t stored_bytes = 0, peak_stored = 0;
  // Names of removed objects' files kept for later writes, by size. Overwriting written blocks
  // is 1.5-1.7x faster than allocating new ones (ext4 with discard here: a fresh file's writes
  // convert unwritten extents, and an unlink discards its blocks), and the files stay within
  // the most the store ever held at once.
  std::multimap<int64_t, std::string> spares;
  int64_t spare_bytes = 0;
  bool keep_files = false;  // hector_store_keep_files

  void pool_worker();
  void ring_worker(RingState* rs);
  bool plan(Job& j);
  bool open_file(Job& j);
  int64_t previous_copy(const Object* o, const void* user, int64_t d0, int64_t d1) const;
  int64_t staged_bytes(const Job& j) const;
  bool stage(Job& j, Staging& st);
  int64_t job_bytes(const Job& j) const;
  int fill_iov(const Job& j, const Staging& st, iovec* iov) const;
  int64_t finish_sync(Job& j, const Staging& st, int64_t done);
  void run_job_sync(Job& j, const Staging& st);
  void job_result(Job& j, int64_t got);
  void complete(Job& j, Staging& st);
  bool verify_read(Job& j, Staging& st);
  void fail_errno(Job& j, int e);
  void fail_short(Job& j, int64_t off, int64_t got, int64_t want);
  // With mu held: the operation on o is over. Returns its file descriptor for the caller to
  // close once mu is released (-1 if none).
  int finish(Object* o);
  // With mu held: room for one completion per operation in flight plus one, so that finish()
  // never allocates (it runs on the I/O threads). Throws std::bad_alloc before any change.
  void reserve_completions() {
    const size_t need = completions.size() + static_cast<size_t>(inflight[0] + inflight[1]) + 1;
    if (completions.capacity() < need)
      completions.reserve(std::max(need, 2 * completions.capacity()));
  }
  void unlink_file(const std::string& name) const {
    if (!name.empty()) ::unlinkat(dir_fd, name.c_str(), 0);
  }
  // Stops and joins the I/O threads, frees the rings, removes the directory, closes the
  // descriptors (close, and a failed open).
  void shutdown();
  // Runs part of a job on an I/O thread; an exception (std::bad_alloc building a message)
  // fails the job with ENOMEM instead of ending the process.
  template <class F>
  void safely(Job& j, F&& f) noexcept {
    try {
      f();
    } catch (...) {
      j.status = HECTOR_STORE_ERR_IO;
      j.err = ENOMEM;
      j.msg.clear();
    }
  }
  uint8_t* address(const Job& j, const Piece& p, const Staging& st) const {
    if (p.where == hector_offload::kSmall) return st.small + p.staging_off;
    if (p.where == hector_offload::kBig) return st.big + p.staging_off;
    return hector_offload::mem_at(j.c.obj, j.c.write ? static_cast<const void*>(j.c.obj->src) : j.c.obj->dst,
                  p.off);
  }
  void begin_op(int op) {  // with mu held
    if (inflight[op]++ == 0) busy_since[op] = hector_offload::now_ns();
  }
  void end_op(int op) {
    if (--inflight[op] == 0) busy_ns[op] += hector_offload::now_ns() - busy_since[op];
  }
  // With mu held: the fault to inject into the next operation of kind op (HECTOR_OP_WRITE or
  // HECTOR_OP_READ), HECTOR_FAULT_NONE when none is armed (store_faults.cpp).
  int take_fault(int op);
  // With mu held; o has nothing in flight. Returns the file name to unlink ("" if none): callers
  // unlink it after releasing mu (an unlink costs ~0.1 ms that other threads need not wait).
  std::string erase(Object* o) {
    std::string path;
    if (o->state == hector_offload::kStored) {
      stored_bytes -= o->disk_bytes;
      const bool keep = keep_files && o->nbytes > 0 && o->status == HECTOR_OK &&
                        stored_bytes + spare_bytes + o->file_bytes <= peak_stored;
      if (keep) {
        spares.emplace(o->file_bytes, o->name);
        spare_bytes += o->file_bytes;
      } else {
        path = o->name;
      }
    }
    objects.erase(o->key);
    return path;
  }
  // With mu held: a kept file for an object of disk_bytes (the smallest that fits, at most
  // twice its size, so small objects do not take the large files), or "" if none.
  std::string take_spare(int64_t disk_bytes, int64_t* file_bytes) {
    auto it = spares.lower_bound(disk_bytes);
    if (it == spares.end() || it->first > 2 * disk_bytes) return "";
    std::string path = std::move(it->second);
    *file_bytes = it->first;
    spare_bytes -= it->first;
    spares.erase(it);
    return path;
  }
};

namespace hector_offload {

// Arms the faults asked for by $HECTOR_OFFLOAD_FAULT (op:kind[:skip[:count]]) on store s.
void parse_fault_env(hector_store* s);
// The backend a store asks for: the caller's choice, else $HECTOR_OFFLOAD_BACKEND, else
// io_uring. False (with *err) for an unknown name.
bool requested_backend(int32_t requested, int32_t* out, std::string* why, std::string* err);
// Creates the io_uring rings of store s (see store_workers.cpp); false (with *reason) when the
// kernel refuses io_uring: the store then uses the thread pool.
bool setup_rings(hector_store* s, int threads, std::string* reason);
// Frees the rings of store s and their staging buffers.
void free_rings(hector_store* s);

}  // namespace hector_offload
