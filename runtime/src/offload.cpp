// Hector native runtime: asynchronous tensor store on files (see hector/offload.h).
//
// Design: a thread pool of pread/pwrite workers (io_uring is not used: this build does not link
// liburing). Each object is one file in the store's private directory; a request is split into
// chunk_bytes chunks that the workers process in parallel, so one large tensor keeps several
// requests in flight. With O_DIRECT, chunks whose memory is 4096-aligned go straight from/to
// the caller's buffer; the others go through a per-worker aligned bounce buffer (the tail of
// an object is padded to 4096 bytes on disk). Each chunk's CRC32C is kept in memory and checked
// when the chunk is read back.

#include "hector/offload.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t kAlign = 4096;
constexpr const char* kPrefix = "hector-offload-";

// ---- CRC32C -------------------------------------------------------------------------------

uint32_t g_table[8][256];
std::once_flag g_table_once;

void init_tables() {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    g_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int t = 1; t < 8; ++t) g_table[t][i] = (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xFF];
}

uint32_t crc_soft(uint32_t crc, const uint8_t* p, int64_t n) {
  std::call_once(g_table_once, init_tables);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = g_table[7][v & 0xFF] ^ g_table[6][(v >> 8) & 0xFF] ^ g_table[5][(v >> 16) & 0xFF] ^
          g_table[4][(v >> 24) & 0xFF] ^ g_table[3][(v >> 32) & 0xFF] ^
          g_table[2][(v >> 40) & 0xFF] ^ g_table[1][(v >> 48) & 0xFF] ^ g_table[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ g_table[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_hw(uint32_t crc, const uint8_t* p, int64_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
bool have_hw() {
  static const bool ok = __builtin_cpu_supports("sse4.2");
  return ok;
}
#endif

uint32_t crc32c(uint32_t crc, const void* data, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  crc = have_hw() ? crc_hw(crc, p, n) : crc_soft(crc, p, n);
#else
  crc = crc_soft(crc, p, n);
#endif
  return ~crc;
}

// ---- helpers ------------------------------------------------------------------------------

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t round_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool aligned(const void* p, int64_t n) {
  return (reinterpret_cast<uintptr_t>(p) % kAlign) == 0 && n % kAlign == 0;
}

const char* errno_name(int e) {
  switch (e) {
    case ENOSPC: return "ENOSPC";
    case EIO: return "EIO";
    case EDQUOT: return "EDQUOT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EINVAL: return "EINVAL";
    case EROFS: return "EROFS";
    case EMFILE: return "EMFILE";
    case ENOMEM: return "ENOMEM";
    default: return "errno";
  }
}

std::string errno_text(int e) {
  return std::string(std::strerror(e)) + " (" + errno_name(e) + ", errno " + std::to_string(e) +
         ")";
}

void copy_out(const std::string& s, char* buf, int64_t buflen) {
  if (buf == nullptr || buflen <= 0) return;
  size_t n = std::min<size_t>(s.size(), static_cast<size_t>(buflen - 1));
  std::memcpy(buf, s.data(), n);
  buf[n] = '\0';
}

// Full pwrite/pread: loops over partial transfers; returns bytes done (< n on EOF / zero
// write) or -errno.
int64_t pwrite_full(int fd, const void* buf, int64_t n, int64_t off) {
  int64_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd, static_cast<const char*>(buf) + done, n - done, off + done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) break;
    done += r;
  }
  return done;
}

int64_t pread_full(int fd, void* buf, int64_t n, int64_t off) {
  int64_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done, off + done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) break;
    done += r;
  }
  return done;
}

void remove_tree(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      ::unlink((dir + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

// Is the store directory `name` under root owned by a dead process?
bool is_stale(const std::string& root, const std::string& name) {
  if (name.compare(0, std::strlen(kPrefix), kPrefix) != 0) return false;
  const char* p = name.c_str() + std::strlen(kPrefix);
  char* end = nullptr;
  long pid = std::strtol(p, &end, 10);
  if (end == p || *end != '-' || pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  // The pid is alive (or reused): stale only if nobody holds the directory's lock.
  std::string lock = root + "/" + name + "/lock";
  int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  bool stale = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return stale;
}

int64_t clean_stale(const std::string& root) {
  int64_t removed = 0;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : names) {
    if (is_stale(root, name)) {
      remove_tree(root + "/" + name);
      ++removed;
    }
  }
  return removed;
}

std::atomic<int64_t> g_store_counter{0};

enum State { kWriting, kStored, kReading, kFailed };

struct Object {
  int64_t key = 0;
  std::string path;
  int64_t nbytes = 0;
  int64_t disk_bytes = 0;
  int fd = -1;
  State state = kWriting;
  int32_t status = HECTOR_OK;  // final status of the last operation
  int err = 0;                 // errno of the last failure
  std::string message;         // text of the last failure
  std::vector<uint32_t> crcs;
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

}  // namespace

struct hector_store {
  std::string root, dir;
  int lock_fd = -1;
  int64_t chunk = 0;
  bool direct = false;
  std::string direct_reason;

  std::mutex mu;
  std::condition_variable work_cv, done_cv;
  std::deque<Chunk> queue;
  std::unordered_map<int64_t, std::unique_ptr<Object>> objects;
  std::vector<int64_t> completions;
  std::vector<std::thread> workers;
  bool stop = false;
  int64_t next_key = 1;
  Fault faults[2];

  int64_t bytes[2] = {0, 0}, objects_done[2] = {0, 0};
  int64_t inflight[2] = {0, 0}, busy_since[2] = {0, 0}, busy_ns[2] = {0, 0};
  int64_t stored_bytes = 0, peak_stored = 0;

  void worker();
  void run_chunk(const Chunk& c, uint8_t* bounce);
  void finish(Object* o);  // with mu held
  void begin_op(int op) {  // with mu held
    if (inflight[op]++ == 0) busy_since[op] = now_ns();
  }
  void end_op(int op) {
    if (--inflight[op] == 0) busy_ns[op] += now_ns() - busy_since[op];
  }
  int take_fault(int op) {  // with mu held
    Fault& f = faults[op];
    if (f.kind == HECTOR_FAULT_NONE || f.count <= 0) return HECTOR_FAULT_NONE;
    if (f.skip > 0) {
      --f.skip;
      return HECTOR_FAULT_NONE;
    }
    int kind = f.kind;
    if (--f.count == 0) f.kind = HECTOR_FAULT_NONE;
    return kind;
  }
  void erase(Object* o) {  // with mu held; o has nothing in flight
    if (o->state == kStored) {
      ::unlink(o->path.c_str());
      stored_bytes -= o->disk_bytes;
    }
    objects.erase(o->key);
  }
};

void hector_store::worker() {
  uint8_t* bounce = nullptr;
  if (::posix_memalign(reinterpret_cast<void**>(&bounce), kAlign, static_cast<size_t>(chunk)) !=
      0)
    bounce = nullptr;
  for (;;) {
    Chunk c;
    {
      std::unique_lock<std::mutex> lock(mu);
      work_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) break;
      c = queue.front();
      queue.pop_front();
    }
    run_chunk(c, bounce);
  }
  std::free(bounce);
}

void hector_store::run_chunk(const Chunk& c, uint8_t* bounce) {
  Object* o = c.obj;
  const int64_t off = c.index * chunk;
  const int64_t len = std::min(chunk, o->nbytes - off);
  int32_t status = HECTOR_OK;
  int err = 0;
  std::string msg;
  const char* what = c.write ? "write" : "read";
  auto fail_errno = [&](int e) {
    status = HECTOR_STORE_ERR_IO;
    err = e;
    msg = std::string(what) + " of " + o->path + " failed: " + errno_text(e);
  };
  auto fail_short = [&](int64_t got, int64_t want) {
    status = HECTOR_STORE_ERR_SHORT;
    msg = std::string("short ") + what + " of " + o->path + " at offset " + std::to_string(off) +
          ": " + std::to_string(got) + " of " + std::to_string(want) + " bytes";
  };
  const int fault = c.index == 0 ? o->fault : HECTOR_FAULT_NONE;
  if (bounce == nullptr && direct) {
    fail_errno(ENOMEM);
  } else if (fault == HECTOR_FAULT_ENOSPC) {
    fail_errno(ENOSPC);
    msg += " [injected]";
  } else if (fault == HECTOR_FAULT_EIO) {
    fail_errno(EIO);
    msg += " [injected]";
  } else if (fault == HECTOR_FAULT_SHORT) {
    fail_short(len / 2, len);
    msg += " [injected]";
  } else if (c.write) {
    const uint8_t* src = o->src + off;
    const void* buf = src;
    int64_t n = len;
    if (direct && !aligned(src, len)) {
      n = round_up(len);
      std::memcpy(bounce, src, static_cast<size_t>(len));
      std::memset(bounce + len, 0, static_cast<size_t>(n - len));
      buf = bounce;
    }
    o->crcs[c.index] = crc32c(0, buf, len);
    int64_t r = pwrite_full(o->fd, buf, n, off);
    if (r < 0)
      fail_errno(static_cast<int>(-r));
    else if (r < n)
      fail_short(r, n);
  } else {
    uint8_t* dst = o->dst + off;
    int64_t r;
    int64_t want = len;
    if (direct && !aligned(dst, len)) {
      want = round_up(len);
      r = pread_full(o->fd, bounce, want, off);
      if (r == want) std::memcpy(dst, bounce, static_cast<size_t>(len));
    } else {
      r = pread_full(o->fd, dst, len, off);
    }
    if (r < 0) {
      fail_errno(static_cast<int>(-r));
    } else if (r < want) {
      fail_short(r, want);
    } else {
      uint32_t got = crc32c(0, dst, len);
      if (got != o->crcs[c.index]) {
        status = HECTOR_STORE_ERR_CHECKSUM;
        char hex[64];
        std::snprintf(hex, sizeof hex, "stored CRC32C %08x, read %08x", o->crcs[c.index], got);
        msg = "checksum mismatch reading " + o->path + " (bytes " + std::to_string(off) + ".." +
              std::to_string(off + len) + "): " + hex + "; the file was modified or corrupted";
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  if (status != HECTOR_OK && o->status == HECTOR_OK) {
    o->status = status;
    o->err = err;
    o->message = msg;
  }
  if (--o->pending == 0) finish(o);
}

void hector_store::finish(Object* o) {
  const int op = o->state == kWriting ? HECTOR_OP_WRITE : HECTOR_OP_READ;
  if (o->fd >= 0) {
    ::close(o->fd);
    o->fd = -1;
  }
  if (op == HECTOR_OP_WRITE) {
    if (o->status == HECTOR_OK) {
      o->state = kStored;
      stored_bytes += o->disk_bytes;
      peak_stored = std::max(peak_stored, stored_bytes);
      bytes[op] += o->nbytes;
      objects_done[op] += 1;
    } else {
      o->state = kFailed;
      ::unlink(o->path.c_str());  // nothing half-written stays behind
    }
  } else {
    o->state = kStored;
    if (o->status == HECTOR_OK) {
      bytes[op] += o->nbytes;
      objects_done[op] += 1;
    }
  }
  o->src = nullptr;
  o->dst = nullptr;
  end_op(op);
  if (o->remove_requested) {
    erase(o);
  } else {
    completions.push_back(o->key);
  }
  done_cv.notify_all();
}

namespace {

void parse_fault_env(hector_store* s) {
  const char* env = std::getenv("HECTOR_OFFLOAD_FAULT");
  if (env == nullptr || *env == '\0') return;
  std::string text(env);
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() < 2) return;
  int op = parts[0] == "write" ? HECTOR_OP_WRITE : parts[0] == "read" ? HECTOR_OP_READ : -1;
  int kind = parts[1] == "enospc" ? HECTOR_FAULT_ENOSPC
             : parts[1] == "eio"  ? HECTOR_FAULT_EIO
             : parts[1] == "short" ? HECTOR_FAULT_SHORT
                                   : -1;
  if (op < 0 || kind < 0) return;
  s->faults[op].kind = kind;
  s->faults[op].skip = parts.size() > 2 ? std::atoll(parts[2].c_str()) : 0;
  s->faults[op].count = parts.size() > 3 ? std::atoll(parts[3].c_str()) : 1;
}

// Decide whether O_DIRECT works in dir: write and read one aligned block.
bool probe_direct(const std::string& dir, std::string* reason) {
  std::string path = dir + "/probe";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
  if (fd < 0) {
    *reason = "O_DIRECT refused by the filesystem: " + errno_text(errno);
    return false;
  }
  void* buf = nullptr;
  bool ok = false;
  if (::posix_memalign(&buf, kAlign, kAlign) == 0) {
    std::memset(buf, 0, kAlign);
    int64_t w = pwrite_full(fd, buf, kAlign, 0);
    int64_t r = w == kAlign ? pread_full(fd, buf, kAlign, 0) : w;
    ok = w == kAlign && r == kAlign;
    if (!ok) *reason = "O_DIRECT I/O failed: " + errno_text(w < 0 ? -w : r < 0 ? -r : EIO);
    std::free(buf);
  }
  ::close(fd);
  ::unlink(path.c_str());
  return ok;
}

}  // namespace

extern "C" {

int32_t hector_store_abi_version(void) { return 1; }

uint32_t hector_crc32c(uint32_t crc, const void* data, int64_t n) {
  if (data == nullptr || n <= 0) return crc;
  return crc32c(crc, data, n);
}

int64_t hector_store_clean_stale(const char* root) {
  if (root == nullptr) return 0;
  return clean_stale(root);
}

int32_t hector_store_open(const char* root, int32_t threads, int64_t chunk_bytes, int32_t direct,
                          hector_store** out, char* err, int64_t errlen) {
  if (out == nullptr || root == nullptr || *root == '\0' || threads < 1 || threads > 256 ||
      chunk_bytes < kAlign || chunk_bytes % kAlign != 0) {
    copy_out("invalid argument: root must be a path, 1 <= threads <= 256, chunk_bytes a "
             "positive multiple of 4096",
             err, errlen);
    return HECTOR_STORE_ERR_ARG;
  }
  *out = nullptr;
  std::string r(root);
  if (::mkdir(r.c_str(), 0700) != 0 && errno != EEXIST) {
    copy_out("cannot create offload root " + r + ": " + errno_text(errno), err, errlen);
    return HECTOR_STORE_ERR_IO;
  }
  clean_stale(r);
  auto s = std::make_unique<hector_store>();
  s->root = r;
  s->chunk = chunk_bytes;
  // Build the directory under a temporary name, lock it, then rename it into place, so a
  // concurrent cleaner never sees an unlocked directory of a live process.
  const long pid = static_cast<long>(::getpid());
  for (int attempt = 0;; ++attempt) {
    int64_t n = g_store_counter.fetch_add(1);
    std::string tmp = r + "/.tmp-" + kPrefix + std::to_string(pid) + "-" + std::to_string(n);
    std::string dir = r + "/" + kPrefix + std::to_string(pid) + "-" + std::to_string(n);
    if (::mkdir(tmp.c_str(), 0700) != 0) {
      if (errno == EEXIST && attempt < 1000) continue;
      copy_out("cannot create " + tmp + ": " + errno_text(errno), err, errlen);
      return HECTOR_STORE_ERR_IO;
    }
    ::chmod(tmp.c_str(), 0700);
    int fd = ::open((tmp + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      if (fd >= 0) ::close(fd);
      remove_tree(tmp);
      copy_out("cannot lock " + tmp + "/lock: " + errno_text(e), err, errlen);
      return HECTOR_STORE_ERR_IO;
    }
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      int e = errno;
      ::close(fd);
      remove_tree(tmp);
      if ((e == EEXIST || e == ENOTEMPTY) && attempt < 1000) continue;
      copy_out("cannot create " + dir + ": " + errno_text(e), err, errlen);
      return HECTOR_STORE_ERR_IO;
    }
    s->dir = dir;
    s->lock_fd = fd;
    break;
  }
  if (direct) {
    s->direct = probe_direct(s->dir, &s->direct_reason);
  } else {
    s->direct_reason = "O_DIRECT disabled by the caller";
  }
  parse_fault_env(s.get());
  for (int i = 0; i < threads; ++i) s->workers.emplace_back([p = s.get()] { p->worker(); });
  *out = s.release();
  return HECTOR_OK;
}

int32_t hector_store_close(hector_store* s) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  {
    std::unique_lock<std::mutex> lock(s->mu);
    s->done_cv.wait(lock, [&] { return s->inflight[0] == 0 && s->inflight[1] == 0; });
    s->stop = true;
  }
  s->work_cv.notify_all();
  for (auto& t : s->workers) t.join();
  remove_tree(s->dir);
  if (s->lock_fd >= 0) ::close(s->lock_fd);
  delete s;
  return HECTOR_OK;
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

// With s->mu held: queue an object's chunk jobs for the I/O threads, or finish it at once when
// its file could not be opened (the error names the file and the cause) or it is empty.
static void enqueue_chunks(hector_store* s, Object* o, int64_t chunks, int open_errno,
                           bool write) {
  if (open_errno != 0 || chunks == 0) {
    if (open_errno != 0) {
      o->status = HECTOR_STORE_ERR_IO;
      o->err = open_errno;
      o->message = std::string(write ? "write of " : "read of ") + o->path + " failed: " +
                   (write ? "cannot create the file: " : "cannot open the file: ") +
                   errno_text(open_errno);
    }
    s->finish(o);
    return;
  }
  o->pending = chunks;
  for (int64_t i = 0; i < chunks; ++i) s->queue.push_back({o, i, write});
  s->work_cv.notify_all();
}

int32_t hector_store_write(hector_store* s, const void* src, int64_t nbytes, int64_t* key_out) {
  if (s == nullptr || key_out == nullptr || nbytes < 0 || (src == nullptr && nbytes > 0))
    return HECTOR_STORE_ERR_ARG;
  auto obj = std::make_unique<Object>();
  Object* o = obj.get();
  {
    std::lock_guard<std::mutex> lock(s->mu);
    o->key = s->next_key++;
    o->fault = s->take_fault(HECTOR_OP_WRITE);
  }
  o->path = s->dir + "/t" + std::to_string(o->key) + ".bin";
  o->nbytes = nbytes;
  o->disk_bytes = s->direct ? round_up(nbytes) : nbytes;
  o->src = static_cast<const uint8_t*>(src);
  o->state = kWriting;
  const int64_t chunks = (nbytes + s->chunk - 1) / s->chunk;
  o->crcs.assign(static_cast<size_t>(chunks), 0);
  o->fd = ::open(o->path.c_str(),
                 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (s->direct ? O_DIRECT : 0), 0600);
  int open_errno = o->fd < 0 ? errno : 0;
  std::lock_guard<std::mutex> lock(s->mu);
  s->objects.emplace(o->key, std::move(obj));
  *key_out = o->key;
  s->begin_op(HECTOR_OP_WRITE);
  enqueue_chunks(s, o, chunks, open_errno, true);
  return HECTOR_OK;
}

int32_t hector_store_read(hector_store* s, int64_t key, void* dst, int64_t nbytes) {
  if (s == nullptr || (dst == nullptr && nbytes > 0)) return HECTOR_STORE_ERR_ARG;
  std::unique_lock<std::mutex> lock(s->mu);
  auto it = s->objects.find(key);
  if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
  Object* o = it->second.get();
  if (o->state == kWriting || o->state == kReading || o->remove_requested)
    return HECTOR_STORE_ERR_ARG;
  if (o->state != kStored) return HECTOR_STORE_ERR_STATE;
  if (nbytes != o->nbytes) return HECTOR_STORE_ERR_ARG;
  o->state = kReading;
  o->status = HECTOR_OK;
  o->err = 0;
  o->message.clear();
  o->dst = static_cast<uint8_t*>(dst);
  o->fault = s->take_fault(HECTOR_OP_READ);
  s->begin_op(HECTOR_OP_READ);
  lock.unlock();
  int fd = ::open(o->path.c_str(), O_RDONLY | O_CLOEXEC | (s->direct ? O_DIRECT : 0));
  int open_errno = fd < 0 ? errno : 0;
  lock.lock();
  o->fd = fd;
  const int64_t chunks = static_cast<int64_t>(o->crcs.size());
  enqueue_chunks(s, o, chunks, open_errno, false);
  return HECTOR_OK;
}

int32_t hector_store_poll(hector_store* s, int64_t key) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  std::lock_guard<std::mutex> lock(s->mu);
  auto it = s->objects.find(key);
  if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
  Object* o = it->second.get();
  if (o->state == kWriting || o->state == kReading) return HECTOR_STORE_PENDING;
  return o->status;
}

int32_t hector_store_wait(hector_store* s, int64_t key) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    auto it = s->objects.find(key);
    if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
    Object* o = it->second.get();
    if (o->state != kWriting && o->state != kReading) return o->status;
    s->done_cv.wait(lock);
  }
}

int32_t hector_store_error(hector_store* s, int64_t key, char* buf, int64_t buflen) {
  if (s == nullptr) return 0;
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
}

int64_t hector_store_completions(hector_store* s, int64_t* keys, int64_t max) {
  if (s == nullptr || keys == nullptr || max <= 0) return 0;
  std::lock_guard<std::mutex> lock(s->mu);
  int64_t n = std::min<int64_t>(max, static_cast<int64_t>(s->completions.size()));
  std::copy(s->completions.begin(), s->completions.begin() + n, keys);
  s->completions.erase(s->completions.begin(), s->completions.begin() + n);
  return n;
}

int32_t hector_store_remove(hector_store* s, int64_t key) {
  if (s == nullptr) return HECTOR_STORE_ERR_ARG;
  std::lock_guard<std::mutex> lock(s->mu);
  auto it = s->objects.find(key);
  if (it == s->objects.end()) return HECTOR_STORE_ERR_ARG;
  Object* o = it->second.get();
  if (o->state == kWriting || o->state == kReading) {
    o->remove_requested = true;
  } else {
    s->erase(o);
  }
  return HECTOR_OK;
}

int32_t hector_store_inject_fault(hector_store* s, int32_t op, int32_t kind, int64_t skip,
                                  int64_t count) {
  if (s == nullptr || (op != HECTOR_OP_WRITE && op != HECTOR_OP_READ) || kind < 0 ||
      kind > HECTOR_FAULT_SHORT || skip < 0)
    return HECTOR_STORE_ERR_ARG;
  std::lock_guard<std::mutex> lock(s->mu);
  s->faults[op].kind = count > 0 ? kind : HECTOR_FAULT_NONE;
  s->faults[op].skip = skip;
  s->faults[op].count = count;
  return HECTOR_OK;
}

int32_t hector_store_stats(hector_store* s, int64_t* out) {
  if (s == nullptr || out == nullptr) return HECTOR_STORE_ERR_ARG;
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
}

}  // extern "C"
