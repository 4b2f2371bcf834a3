// Hector native runtime: the tensor store's C ABI (hector/offload.h). Each function checks its
// arguments and runs its body so that no exception crosses the ABI.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "crc32c.h"
#include "store_state.h"

using namespace hector_offload;

namespace {

void copy_out(const std::string& s, char* buf, int64_t buflen) {
  if (buf == nullptr || buflen <= 0) return;
  size_t n = std::min<size_t>(s.size(), static_cast<size_t>(buflen - 1));
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
}

// Is [p, p + n) mapped memory of this process? (msync with MS_ASYNC only walks the mappings:
// ENOMEM when part of the range is unmapped, as a range beyond the address space is.)
bool mapped(const void* p, int64_t n) {
  if (n <= 0) return true;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a > UINTPTR_MAX - static_cast<uint64_t>(n)) return false;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = a / page * page;
  return ::msync(reinterpret_cast<void*>(start), a + static_cast<uintptr_t>(n) - start,
                 MS_ASYNC) == 0;
}

std::atomic<int64_t> g_store_counter{0};

// Runs the body of a C ABI function: no exception crosses the ABI. std::bad_alloc is
// HECTOR_STORE_ERR_NOMEM, anything else HECTOR_STORE_ERR_IO.
template <class F>
int32_t guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return HECTOR_STORE_ERR_NOMEM;
  } catch (...) {
    return HECTOR_STORE_ERR_IO;
  }
}

// The same for a function whose failure is a value (a count, -1).
template <class R, class F>
R guarded_or(R on_error, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return on_error;
  }
}

// Creates store s's private directory under its root: built under a temporary name, locked,
// then renamed into place, so a concurrent cleaner never sees an unlocked directory of a live
// process (all of it relative to the root's descriptor). Sets s->dir_name, dir, dir_fd and
// lock_fd; false with *msg (and nothing left behind) when it cannot.
bool make_store_dir(hector_store* s, std::string* msg) {
  const long pid = static_cast<long>(::getpid());
  for (int attempt = 0;; ++attempt) {
    const int64_t n = g_store_counter.fetch_add(1);
    const std::string id = std::to_string(pid) + "-" + std::to_string(n);
    const std::string tmp = kTmpPrefix + id, name = kPrefix + id;
    if (::mkdirat(s->root_fd, tmp.c_str(), 0700) != 0) {
      if (errno == EEXIST && attempt < 1000) continue;
      *msg = "cannot create " + s->root + "/" + tmp + ": " + errno_text(errno);
      return false;
    }
    const int dfd = open_dir_at(s->root_fd, tmp.c_str());
    if (dfd < 0) {
      const int e = errno;
      ::unlinkat(s->root_fd, tmp.c_str(), AT_REMOVEDIR);
      *msg = "cannot open " + s->root + "/" + tmp + ": " + errno_text(e);
      return false;
    }
    ::fchmod(dfd, 0700);
    const int fd =
        ::openat(dfd, "lock", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    const bool locked = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const int e = errno;
    const bool renamed =
        locked && ::renameat(s->root_fd, tmp.c_str(), s->root_fd, name.c_str()) == 0;
    if (!renamed) {
      const int re = errno;
      if (fd >= 0) ::close(fd);
      empty_dir(dfd);
      ::close(dfd);
      ::unlinkat(s->root_fd, tmp.c_str(), AT_REMOVEDIR);
      if (!locked) {
        *msg = "cannot lock " + s->root + "/" + tmp + "/lock: " + errno_text(e);
        return false;
      }
      if ((re == EEXIST || re == ENOTEMPTY || re == ENOTDIR) && attempt < 1000) continue;
      *msg = "cannot create " + s->root + "/" + name + ": " + errno_text(re);
      return false;
    }
    s->dir_name = name;
    s->dir = s->root + "/" + name;
    s->dir_fd = dfd;
    s->lock_fd = fd;
    return true;
  }
}

}  // namespace

extern "C" {

int32_t hector_store_abi_version(void) { return 1; }

uint32_t hector_crc32c(uint32_t crc, const void* data, int64_t n) {
  if (data == nullptr || n <= 0) return crc;
  return crc32c(crc, data, n);
}

int64_t hector_store_clean_stale(const char* root) {
  if (root == nullptr || *root == '\0') return 0;
  return guarded_or<int64_t>(-1, [&]() -> int64_t {
    int32_t code = HECTOR_OK;
    std::string msg;
    const int fd = open_root(root, false, &code, &msg);
    if (fd < 0) return code == HECTOR_OK ? 0 : -1;  // missing: nothing to clean; else refused
    const int64_t removed = guarded_or<int64_t>(0, [&] { return clean_stale_at(fd); });
    ::close(fd);
    return removed;
  });
}

int32_t hector_store_open(const char* root, int32_t threads, int64_t chunk_bytes, int32_t direct,
                          hector_store** out, char* err, int64_t errlen) {
  return hector_store_open2(root, threads, chunk_bytes, direct, HECTOR_BACKEND_AUTO, out, err,
                            errlen);
}

int32_t hector_store_open2(const char* root, int32_t threads, int64_t chunk_bytes, int32_t direct,
                           int32_t backend, hector_store** out, char* err, int64_t errlen) {
  return guarded([&]() -> int32_t {
    int32_t wanted = HECTOR_BACKEND_THREADS;
    std::string why, bad;
    if (!requested_backend(backend, &wanted, &why, &bad)) {
      copy_out(bad, err, errlen);
      return HECTOR_STORE_ERR_ARG;
    }
    if (out == nullptr || root == nullptr || *root == '\0' || threads < 1 || threads > 256 ||
        chunk_bytes < kAlign || chunk_bytes % kAlign != 0 || chunk_bytes > kMaxChunk) {
      copy_out("invalid argument: root must be a path, 1 <= threads <= 256, chunk_bytes a "
               "multiple of 4096 from 4096 to 2^40",
               err, errlen);
      return HECTOR_STORE_ERR_ARG;
    }
    *out = nullptr;
    auto s = std::make_unique<hector_store>();
    s->root = root;
    int32_t code = HECTOR_OK;
    std::string msg;
    s->root_fd = open_root(s->root, true, &code, &msg);
    if (s->root_fd < 0) {
      copy_out(msg, err, errlen);
      return code;
    }
    // From here on a failure removes what was made (shutdown) before returning.
    auto fail = [&](int32_t status, const std::string& text) {
      s->shutdown();
      copy_out(text, err, errlen);
      return status;
    };
    try {
      clean_stale_at(s->root_fd);
      s->chunk = chunk_bytes;
      std::string dir_error;
      if (!make_store_dir(s.get(), &dir_error)) return fail(HECTOR_STORE_ERR_IO, dir_error);
      if (direct) {
        s->direct = probe_direct(s->dir_fd, &s->direct_reason);
      } else {
        s->direct_reason = "O_DIRECT disabled by the caller";
      }
      parse_fault_env(s.get());
      std::string how;
      if (wanted == HECTOR_BACKEND_IO_URING && setup_rings(s.get(), threads, &how)) {
        s->backend = kIoUring;
        s->backend_reason = "io_uring (" + why + "): " + how;
        for (RingState& rs : s->rings)
          s->workers.emplace_back([p = s.get(), r = &rs] { p->ring_worker(r); });
      } else {
        s->backend = kThreads;
        s->backend_reason =
            wanted == HECTOR_BACKEND_IO_URING
                ? "thread pool: io_uring (" + why + ") is unavailable: " + how
                : "thread pool of " + std::to_string(threads) + " pread/pwrite workers (" +
                      why + ")";
        for (int i = 0; i < threads; ++i)
          s->workers.emplace_back([p = s.get()] { p->pool_worker(); });
      }
    } catch (const std::bad_alloc&) {
      return fail(HECTOR_STORE_ERR_NOMEM, "cannot open an offload store: out of memory");
    } catch (const std::exception& e) {  // std::system_error: a thread could not be started
      return fail(HECTOR_STORE_ERR_IO, std::string("cannot open an offload store: ") + e.what());
    }
    *out = s.release();
    return HECTOR_OK;
  });
}

int32_t hector_store_close(hector_store* s) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->done_cv.wait(lock, [&] { return s->inflight[0] == 0 && s->inflight[1] == 0; });
    }
    s->shutdown();
    delete s;
    return HECTOR_OK;
  });
}

int32_t hector_store_path(hector_store* s, char* buf, int64_t buflen) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  copy_out(s->dir, buf, buflen);
  return HECTOR_OK;
}

int32_t hector_store_direct(hector_store* s, char* buf, int64_t buflen) {
  if (s == nullptr) return 0;
  copy_out(s->direct_reason, buf, buflen);
  return s->direct ? 1 : 0;
}

// With s->mu held: queue an object's chunk jobs (work, spliced in: nothing allocates) for the
// I/O threads, or finish it at once when its file could not be opened (the error names the file
// and the cause) or it is empty.
static void enqueue_chunks(hector_store* s, Object* o, std::list<Chunk>& work, int open_errno,
                           bool write) {
  if (open_errno != 0 || work.empty()) {
    if (open_errno != 0) {
      o->status = HECTOR_STORE_ERR_IO;
      o->err = open_errno;
      try {
        o->message = std::string(write ? "write of " : "read of ") + o->path + " failed: " +
                     (write ? "cannot create the file: " : "cannot open the file: ") +
                     errno_text(open_errno);
      } catch (...) {  // no memory for the text: the errno says it
      }
    }
    const int fd = s->finish(o);  // a zero-byte object or a failed open: rare
    if (fd >= 0) ::close(fd);
    return;
  }
  o->pending = static_cast<int64_t>(work.size());
  if (write) {
    s->queue.splice(s->queue.end(), work);
  } else {
    // A read is what a backward pass waits for: its chunks go ahead of queued writes (after
    // the reads already queued), so a prefetch is not stuck behind a whole forward's offloads.
    auto at = s->queue.begin();
    while (at != s->queue.end() && !at->write) ++at;
    s->queue.splice(at, work);
  }
  s->work_cv.notify_all();
}

int32_t hector_store_write(hector_store* s, const void* src, int64_t nbytes, int64_t* key_out) {
  if (s == nullptr || key_out == nullptr || nbytes < 0 || (src == nullptr && nbytes > 0))
    return HECTOR_STORE_ERR_ARG;
  // The source must be memory of this process: an absurd size (1 << 60) is refused here
  // instead of sizing the object's bookkeeping after it.
  if (!mapped(src, nbytes)) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    const int64_t t0 = now_ns();
    auto obj = std::make_unique<Object>();
    Object* o = obj.get();
    {
      std::lock_guard<std::mutex> lock(s->mu);
      o->key = s->next_key++;
    }
    o->name = "t" + std::to_string(o->key) + ".bin";
    o->path = s->dir + "/" + o->name;
    o->nbytes = nbytes;
    // Under O_DIRECT the object starts at the file offset that puts its address in phase with
    // the file, so its blocks go straight from its memory (no copy through a bounce buffer).
    o->pad = s->direct && nbytes > 0
                 ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(src) % kAlign)
                 : 0;
    o->disk_bytes = s->direct ? round_up(o->pad + nbytes) : nbytes;
    o->file_bytes = o->disk_bytes;
    o->src = static_cast<const uint8_t*>(src);
    o->state = kWriting;
    const int64_t chunks = nbytes > 0 ? (o->pad + nbytes + s->chunk - 1) / s->chunk : 0;
    o->crcs.assign(static_cast<size_t>(chunks), 0);
    std::list<Chunk> work;
    for (int64_t i = 0; i < chunks; ++i) work.push_back({o, i, true});
    std::lock_guard<std::mutex> lock(s->mu);
    // What allocates comes first: a failure leaves the store as it was.
    s->reserve_completions();
    s->objects.emplace(o->key, std::move(obj));
    o->fault = s->take_fault(HECTOR_OP_WRITE);
    int open_errno = 0;
    if (chunks > 0) {
      o->spare = s->take_spare(o->disk_bytes, &o->file_bytes);
    } else {  // no I/O thread will see it: create the empty file here (rare)
      o->fd = ::openat(s->dir_fd, o->name.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      open_errno = o->fd < 0 ? errno : 0;
    }
    *key_out = o->key;
    s->begin_op(HECTOR_OP_WRITE);
    enqueue_chunks(s, o, work, open_errno, true);
    s->counters.submit_ns += now_ns() - t0;
    return HECTOR_OK;
  });
}

int32_t hector_store_read(hector_store* s, int64_t key, void* dst, int64_t nbytes) {
  if (s == nullptr || nbytes < 0 || (dst == nullptr && nbytes > 0)) return HECTOR_STORE_ERR_ARG;
  if (!mapped(dst, nbytes)) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    const int64_t t0 = now_ns();
    std::unique_lock<std::mutex> lock(s->mu);
    auto it = s->objects.find(key);
    if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
    Object* o = it->second.get();
    if (o->state == kWriting || o->state == kReading || o->remove_requested)
      return HECTOR_STORE_ERR_ARG;
    if (o->state != kStored) return HECTOR_STORE_ERR_STATE;
    if (nbytes != o->nbytes) return HECTOR_STORE_ERR_ARG;
    const int64_t chunks = static_cast<int64_t>(o->crcs.size());
    std::list<Chunk> work;  // what allocates comes first: a failure changes nothing
    for (int64_t i = 0; i < chunks; ++i) work.push_back({o, i, false});
    s->reserve_completions();
    o->state = kReading;
    o->status = HECTOR_OK;
    o->err = 0;
    o->message.clear();
    o->dst = static_cast<uint8_t*>(dst);
    o->fault = s->take_fault(HECTOR_OP_READ);
    s->begin_op(HECTOR_OP_READ);
    o->opened = false;  // no chunk of this object is in flight: nobody holds open_mu
    int open_errno = 0;
    if (chunks == 0) {  // no I/O thread will see it: check the (empty) file here
      lock.unlock();
      const int fd = ::openat(s->dir_fd, o->name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      open_errno = fd < 0 ? errno : 0;
      lock.lock();
      o->fd = fd;
    }
    enqueue_chunks(s, o, work, open_errno, false);
    s->counters.submit_ns += now_ns() - t0;
    return HECTOR_OK;
  });
}

int32_t hector_store_poll(hector_store* s, int64_t key) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->objects.find(key);
    if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
    Object* o = it->second.get();
    if (o->state == kWriting || o->state == kReading) return HECTOR_STORE_PENDING;
    return o->status;
  });
}

int32_t hector_store_wait(hector_store* s, int64_t key) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    std::unique_lock<std::mutex> lock(s->mu);
    int64_t since = 0;
    std::atomic<int64_t>* counter = nullptr;
    for (;;) {
      auto it = s->objects.find(key);
      // A removed object's wait ends here too; the time is still counted.
      Object* o = it == s->objects.end() ? nullptr : it->second.get();
      if (o == nullptr || (o->state != kWriting && o->state != kReading)) {
        if (counter != nullptr) *counter += now_ns() - since;
        return o == nullptr ? HECTOR_STORE_ERR_ARG : o->status;
      }
      if (counter == nullptr) {
        counter = o->state == kWriting ? &s->counters.write_wait_ns : &s->counters.read_wait_ns;
        since = now_ns();
      }
      s->done_cv.wait(lock);
    }
  });
}

int32_t hector_store_error(hector_store* s, int64_t key, char* buf, int64_t buflen) {
  if (s == nullptr) return 0;
  return guarded_or<int32_t>(ENOMEM, [&]() -> int32_t {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->objects.find(key);
    if (it == s->objects.end()) {
      copy_out("unknown key " + std::to_string(key), buf, buflen);
      return 0;
    }
    Object* o = it->second.get();
    std::string msg = o->message;
    if (msg.empty() && o->state == kFailed) msg = "object " + o->path + " has no stored data";
    copy_out(msg, buf, buflen);
    return o->err;
  });
}

int64_t hector_store_completions(hector_store* s, int64_t* keys, int64_t max) {
  if (s == nullptr || keys == nullptr || max <= 0) return 0;
  return guarded_or<int64_t>(0, [&]() -> int64_t {
    std::lock_guard<std::mutex> lock(s->mu);
    int64_t n = std::min<int64_t>(max, static_cast<int64_t>(s->completions.size()));
    std::copy(s->completions.begin(), s->completions.begin() + n, keys);
    s->completions.erase(s->completions.begin(), s->completions.begin() + n);
    return n;
  });
}

int32_t hector_store_remove(hector_store* s, int64_t key) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    std::string path;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      auto it = s->objects.find(key);
      if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
      Object* o = it->second.get();
      if (o->state == kWriting || o->state == kReading) {
        o->remove_requested = true;
      } else {
        path = s->erase(o);
      }
    }
    s->unlink_file(path);  // before returning: the file is gone after remove
    return HECTOR_OK;
  });
}

int32_t hector_store_keep_files(hector_store* s, int32_t enable) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    std::lock_guard<std::mutex> lock(s->mu);
    s->keep_files = enable != 0;
    return HECTOR_OK;
  });
}

int32_t hector_store_inject_fault(hector_store* s, int32_t op, int32_t kind, int64_t skip,
                                  int64_t count) {
  if (s == nullptr || (op != HECTOR_OP_WRITE && op != HECTOR_OP_READ) || kind < 0 ||
      kind > HECTOR_FAULT_SHORT || skip < 0)
    return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    std::lock_guard<std::mutex> lock(s->mu);
    s->faults[op].kind = count > 0 ? kind : HECTOR_FAULT_NONE;
    s->faults[op].skip = skip;
    s->faults[op].count = count;
    return HECTOR_OK;
  });
}

int32_t hector_store_stats(hector_store* s, int64_t* out) {
  if (s == nullptr || out == nullptr) return HECTOR_STORE_ERR_ARG;
  return guarded([&]() -> int32_t {
    std::lock_guard<std::mutex> lock(s->mu);
    const int64_t t = now_ns();
    out[0] = s->bytes[0];
    out[1] = s->bytes[1];
    out[2] = s->busy_ns[0] + (s->inflight[0] ? t - s->busy_since[0] : 0);
    out[3] = s->busy_ns[1] + (s->inflight[1] ? t - s->busy_since[1] : 0);
    out[4] = s->objects_done[0];
    out[5] = s->objects_done[1];
    out[6] = s->stored_bytes;
    out[7] = s->peak_stored;
    return HECTOR_OK;
  });
}

int64_t hector_store_stats2(hector_store* s, int64_t* out, int64_t n) {
  if (s == nullptr || out == nullptr || n < 0) return -1;
  return guarded_or<int64_t>(-1, [&]() -> int64_t {
    int64_t all[HECTOR_STAT_COUNT];
    hector_store_stats(s, all);
    const Counters& c = s->counters;
    all[HECTOR_STAT_COPY_NS] = c.copy_ns;
    all[HECTOR_STAT_COPY_BYTES] = c.copy_bytes;
    all[HECTOR_STAT_CRC_NS] = c.crc_ns;
    all[HECTOR_STAT_CRC_BYTES] = c.crc_bytes;
    all[HECTOR_STAT_SUBMIT_NS] = c.submit_ns;
    all[HECTOR_STAT_RING_SUBMIT_NS] = c.ring_submit_ns;
    all[HECTOR_STAT_WRITE_WAIT_NS] = c.write_wait_ns;
    all[HECTOR_STAT_READ_WAIT_NS] = c.read_wait_ns;
    all[HECTOR_STAT_WRITE_IO_NS] = c.write_io_ns;
    all[HECTOR_STAT_READ_IO_NS] = c.read_io_ns;
    all[HECTOR_STAT_IO_REQUESTS] = c.io_requests;
    all[HECTOR_STAT_COPIES_AVOIDED_BYTES] = c.copies_avoided;
    all[HECTOR_STAT_REGISTERED_BYTES] = c.registered_bytes;
    all[HECTOR_STAT_OPEN_NS] = c.open_ns;
    all[HECTOR_STAT_FILES_REUSED] = c.files_reused;
    all[HECTOR_STAT_BACKEND] = s->backend == kIoUring ? HECTOR_BACKEND_IO_URING
                                                      : HECTOR_BACKEND_THREADS;
    const int64_t m = std::min<int64_t>(n, HECTOR_STAT_COUNT);
    std::copy(all, all + m, out);
    return m;
  });
}

int32_t hector_store_backend(hector_store* s, char* buf, int64_t buflen) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  copy_out(s->backend_reason, buf, buflen);
  return s->backend == kIoUring ? HECTOR_BACKEND_IO_URING : HECTOR_BACKEND_THREADS;
}

int64_t hector_store_phase(hector_store* s, int64_t key) {
  if (s == nullptr) return -1;
  return guarded_or<int64_t>(-1, [&]() -> int64_t {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->objects.find(key);
    return it == s->objects.end() ? -1 : it->second->pad;
  });
}

}  // extern "C"
