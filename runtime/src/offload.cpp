// Hector native runtime: asynchronous tensor store on files (see hector/offload.h).
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

#include "hector/offload.h"

#include "io_uring_ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr int64_t kAlign = 4096;
constexpr int64_t kMaxChunk = int64_t{1} << 40;  // keeps every offset sum far from overflow
constexpr const char* kPrefix = "hector-offload-";
constexpr const char* kTmpPrefix = ".tmp-hector-offload-";

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

// ---- the root and the directories under it ----------------------------------------------
// Everything under the offload root is reached relative to the root's descriptor, opened once
// without following a link: no path is resolved again after the root was checked, and no
// symbolic link under it is ever followed (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, unlinkat).

int open_dir_at(int dirfd, const char* name) {
  return ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

// Why a directory with this fstat is not private to the current user ("" if it is).
std::string why_not_private(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by the current user (uid " +
           std::to_string(::geteuid()) + ")";
  if ((st.st_mode & 022) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("is writable by group or others (mode ") + mode + ")";
  }
  return "";
}

// Opens the offload root (creating it with mode 0700 when asked and missing) and checks that it
// is private: a directory, not a symbolic link, owned by the current user, not writable by
// group or others. Returns its descriptor, or -1 with *code (HECTOR_STORE_ERR_IO, or
// HECTOR_STORE_ERR_UNSAFE for a root that is refused) and *msg. With create false, a missing
// root is -1 with *code HECTOR_OK.
int open_root(const std::string& root, bool create, int32_t* code, std::string* msg) {
  if (create && ::mkdir(root.c_str(), 0700) != 0 && errno != EEXIST) {
    *code = HECTOR_STORE_ERR_IO;
    *msg = "cannot create offload root " + root + ": " + errno_text(errno);
    return -1;
  }
  const int fd = open_dir_at(AT_FDCWD, root.c_str());
  std::string why;
  if (fd < 0) {
    const int e = errno;
    struct stat st;
    if (!create && e == ENOENT) {
      *code = HECTOR_OK;
      return -1;
    }
    if ((e == ELOOP || e == ENOTDIR) && ::lstat(root.c_str(), &st) == 0) {
      why = S_ISLNK(st.st_mode) ? "is a symbolic link" : "is not a directory";
    } else {
      *code = HECTOR_STORE_ERR_IO;
      *msg = "cannot open offload root " + root + ": " + errno_text(e);
      return -1;
    }
  } else {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      *code = HECTOR_STORE_ERR_IO;
      *msg = "cannot stat offload root " + root + ": " + errno_text(e);
      return -1;
    }
    why = why_not_private(st);
    if (why.empty()) return fd;
    ::close(fd);
  }
  *code = HECTOR_STORE_ERR_UNSAFE;
  *msg = "refusing to use offload root '" + root + "': it " + why +
         "; remove it or choose another directory (HECTOR_OFFLOAD_DIR)";
  return -1;
}

// The names in the directory dirfd (its own descriptor is left where it is).
std::vector<std::string> list_dir(int dirfd) {
  std::vector<std::string> names;
  const int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return names;
  }
  try {
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        names.emplace_back(e->d_name);
    }
  } catch (...) {  // no memory for more names: what was read is handled (shutdown runs this)
  }
  ::closedir(d);
  return names;
}

// Empties the directory dirfd: unlinks its regular files and symbolic links (a link is
// removed, never followed), recurses into subdirectories that are real directories owned by
// the user, and leaves anything else. True when nothing was left.
bool empty_dir(int dirfd, int depth = 0) {
  bool all = true;
  for (const std::string& name : list_dir(dirfd)) {
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone
    if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
      all &= ::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT;
    } else if (S_ISDIR(st.st_mode) && depth < 8) {
      const int sub = open_dir_at(dirfd, name.c_str());
      struct stat sst;
      const bool ours = sub >= 0 && ::fstat(sub, &sst) == 0 && S_ISDIR(sst.st_mode) &&
                        sst.st_uid == ::geteuid();
      const bool emptied = ours && empty_dir(sub, depth + 1);
      if (sub >= 0) ::close(sub);
      all &= emptied && ::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) == 0;
    } else {
      all = false;
    }
  }
  return all;
}

// The pid in a store directory's name (hector-offload-<pid>-<n>, or .tmp-hector-offload-<pid>-<n>
// while it is being built), or 0 when the name is not a store's.
long store_pid(const std::string& name) {
  size_t skip = 0;
  if (name.compare(0, std::strlen(kPrefix), kPrefix) == 0)
    skip = std::strlen(kPrefix);
  else if (name.compare(0, std::strlen(kTmpPrefix), kTmpPrefix) == 0)
    skip = std::strlen(kTmpPrefix);
  else
    return 0;
  const char* p = name.c_str() + skip;
  if (*p < '0' || *p > '9') return 0;
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(p, &end, 10);
  if (errno != 0 || end == p || *end != '-' || pid <= 0 || pid > 0x7fffffffL) return 0;
  return pid;
}

// Removes the store directory `name` under rootfd when it belongs to a dead process: its pid is
// gone, or nobody holds its lock file. Only a real directory (not a link) owned by the user is
// considered; its contents are removed relative to its descriptor (empty_dir). True if removed.
bool remove_if_stale(int rootfd, const std::string& name) {
  const long pid = store_pid(name);
  if (pid == 0) return false;
  struct stat st;
  if (::fstatat(rootfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != ::geteuid())
    return false;
  const int dfd = open_dir_at(rootfd, name.c_str());
  if (dfd < 0) return false;
  if (::fstat(dfd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(dfd);
    return false;
  }
  bool stale = ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
  int lock = -1;
  if (!stale && name[0] != '.') {
    // The pid is alive (or reused): stale only if nobody holds the directory's lock. (A
    // directory still under its temporary name may be between creating its lock and taking
    // it: it is left to its owner while the pid lives.)
    lock = ::openat(dfd, "lock", O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat lst;
    stale = lock >= 0 && ::fstat(lock, &lst) == 0 && S_ISREG(lst.st_mode) &&
            ::flock(lock, LOCK_EX | LOCK_NB) == 0;
  }
  const bool removed = stale && empty_dir(dfd) &&
                       ::unlinkat(rootfd, name.c_str(), AT_REMOVEDIR) == 0;
  if (lock >= 0) ::close(lock);
  ::close(dfd);
  return removed;
}

int64_t clean_stale_at(int rootfd) {
  int64_t removed = 0;
  for (const std::string& name : list_dir(rootfd)) removed += remove_if_stale(rootfd, name);
  return removed;
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

uint8_t* aligned_alloc_bytes(int64_t n) {
  void* p = nullptr;
  return ::posix_memalign(&p, kAlign, static_cast<size_t>(n)) == 0 ? static_cast<uint8_t*>(p)
                                                                    : nullptr;
}

// Address of file offset f of object o in the caller's buffer p (the file holds byte i of
// the object at offset pad + i).
uint8_t* mem_at(const Object* o, const void* p, int64_t f) {
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(p) - o->pad + f);
}

}  // namespace

struct hector_store {
  std::string root, dir;  // paths, for messages and hector_store_path
  std::string dir_name;   // the directory's name under the root
  int root_fd = -1;       // the root, opened without following a link and checked private
  int dir_fd = -1;        // the store's directory: every file is opened relative to it
  int lock_fd = -1;
  int64_t chunk = 0;
  bool direct = false;
  std::string direct_reason;
  Backend backend = kThreads;
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
    if (p.where == kSmall) return st.small + p.staging_off;
    if (p.where == kBig) return st.big + p.staging_off;
    return mem_at(j.c.obj, j.c.write ? static_cast<const void*>(j.c.obj->src) : j.c.obj->dst,
                  p.off);
  }
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
  // With mu held; o has nothing in flight. Returns the file name to unlink ("" if none): callers
  // unlink it after releasing mu (an unlink costs ~0.1 ms that other threads need not wait).
  std::string erase(Object* o) {
    std::string path;
    if (o->state == kStored) {
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

void hector_store::fail_errno(Job& j, int e) {
  if (j.status != HECTOR_OK) return;
  j.status = HECTOR_STORE_ERR_IO;
  j.err = e;
  j.msg = std::string(j.c.write ? "write" : "read") + " of " + j.c.obj->path +
          " failed: " + errno_text(e);
}

void hector_store::fail_short(Job& j, int64_t off, int64_t got, int64_t want) {
  if (j.status != HECTOR_OK) return;
  j.status = HECTOR_STORE_ERR_SHORT;
  j.msg = std::string("short ") + (j.c.write ? "write" : "read") + " of " + j.c.obj->path +
          " at offset " + std::to_string(off) + ": " + std::to_string(got) + " of " +
          std::to_string(want) + " bytes";
}

// Splits a chunk into at most three I/Os. Buffered: the exact byte range, straight from/to the
// caller's memory. O_DIRECT: the block-aligned range; the caller's memory is used directly
// where its address is in phase with the file (always for writes: the object's file offset
// follows its address), the partial first/last blocks go through the small staging buffer
// (zero padding on disk), and a read into an out-of-phase address goes through the big one.
// Returns false when the chunk fails without I/O (an injected fault).
bool hector_store::plan(Job& j) {
  Object* o = j.c.obj;
  if (!open_file(j)) return false;
  const int64_t start = j.c.index * chunk;
  j.fs = std::max(start, o->pad);
  j.fe = std::min(start + chunk, o->pad + o->nbytes);
  const int fault = j.c.index == 0 ? o->fault : HECTOR_FAULT_NONE;
  if (fault != HECTOR_FAULT_NONE) {
    if (fault == HECTOR_FAULT_SHORT)
      fail_short(j, j.fs, (j.fe - j.fs) / 2, j.fe - j.fs);
    else
      fail_errno(j, fault == HECTOR_FAULT_ENOSPC ? ENOSPC : EIO);
    j.msg += " [injected]";
    return false;
  }
  const void* user = j.c.write ? static_cast<const void*>(o->src) : o->dst;
  if (!direct) {
    j.pieces[j.npieces++] = {j.fs, j.fe - j.fs, kMemory, 0};
    return true;
  }
  const int64_t as = j.fs / kAlign * kAlign, ae = round_up(j.fe);
  const bool head = j.fs != as, tail = j.fe != ae;
  const bool in_phase = reinterpret_cast<uintptr_t>(mem_at(o, user, as)) % kAlign == 0;
  if (!in_phase || ((head || tail) && ae - as <= 2 * kAlign)) {
    j.pieces[j.npieces++] = {as, ae - as, in_phase ? kSmall : kBig, 0};
    j.avoided = previous_copy(o, user, j.fs - o->pad, j.fe - o->pad) - staged_bytes(j);
    return true;
  }
  if (head) j.pieces[j.npieces++] = {as, kAlign, kSmall, 0};
  const int64_t ms = head ? as + kAlign : as, me = tail ? ae - kAlign : ae;
  j.pieces[j.npieces++] = {ms, me - ms, kMemory, 0};
  if (tail) j.pieces[j.npieces++] = {ae - kAlign, kAlign, kSmall, kAlign};
  j.avoided = previous_copy(o, user, j.fs - o->pad, j.fe - o->pad) - staged_bytes(j);
  return true;
}

// Bytes of the object's range [d0, d1) that the previous design copied through its bounce
// buffer: it cut the object into chunks at multiples of chunk_bytes from the caller's address
// and copied every chunk whose address or length was not 4096-aligned.
int64_t hector_store::previous_copy(const Object* o, const void* user, int64_t d0,
                                    int64_t d1) const {
  if (reinterpret_cast<uintptr_t>(user) % kAlign != 0) return d1 - d0;
  if (o->nbytes % kAlign == 0) return 0;
  const int64_t last = (o->nbytes - 1) / chunk * chunk;
  return std::max<int64_t>(0, d1 - std::max(d0, last));
}

// Bytes of the object a job moves through staging buffers.
int64_t hector_store::staged_bytes(const Job& j) const {
  int64_t n = 0;
  for (int i = 0; i < j.npieces; ++i) {
    const Piece& p = j.pieces[i];
    if (p.where != kMemory) n += std::min(p.off + p.len, j.fe) - std::max(p.off, j.fs);
  }
  return n;
}

// Creates (write) or opens (read) the object's file once per operation, on the I/O thread
// that first needs it. False (and the job failed, naming the file and the cause) on failure.
bool hector_store::open_file(Job& j) {
  Object* o = j.c.obj;
  std::lock_guard<std::mutex> lock(o->open_mu);
  if (!o->opened) {
    const int64_t t0 = now_ns();
    // A kept file is renamed and overwritten in place (no O_TRUNC: that frees its blocks).
    // Never through a link: relative to the store's directory, O_NOFOLLOW, and a new file is
    // created with O_EXCL (a name already there, link or not, is an error, not a target).
    const bool reuse = j.c.write && !o->spare.empty() &&
                       ::renameat(dir_fd, o->spare.c_str(), dir_fd, o->name.c_str()) == 0;
    if (j.c.write && !o->spare.empty() && !reuse) unlink_file(o->spare);
    if (j.c.write && !reuse) o->file_bytes = o->disk_bytes;
    o->spare.clear();
    const int create = reuse ? 0 : O_CREAT | O_EXCL;
    const int flags = (j.c.write ? O_WRONLY | create : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC |
                      (direct ? O_DIRECT : 0);
    o->fd = ::openat(dir_fd, o->name.c_str(), flags, 0600);
    if (reuse && o->fd >= 0) ++counters.files_reused;
    o->open_errno = o->fd < 0 ? errno : 0;
    o->opened = true;
    counters.open_ns += now_ns() - t0;
  }
  if (o->open_errno == 0) return true;
  j.status = HECTOR_STORE_ERR_IO;
  j.err = o->open_errno;
  j.msg = std::string(j.c.write ? "write of " : "read of ") + o->path + " failed: " +
          (j.c.write ? "cannot create the file: " : "cannot open the file: ") +
          errno_text(o->open_errno);
  return false;
}

// Allocates the staging a job's pieces use; for a write, fills it (the object's bytes, zeros
// around them) and computes the chunk's CRC32C. False (and the job failed) without memory.
bool hector_store::stage(Job& j, Staging& st) {
  for (int i = 0; i < j.npieces; ++i) {
    const Piece& p = j.pieces[i];
    uint8_t*& buf = p.where == kSmall ? st.small : st.big;
    if (p.where != kMemory && buf == nullptr)
      buf = aligned_alloc_bytes(p.where == kSmall ? 2 * kAlign : chunk);
    if (p.where != kMemory && buf == nullptr) {
      fail_errno(j, ENOMEM);
      return false;
    }
  }
  if (!j.c.write) return true;
  Object* o = j.c.obj;
  int64_t t0 = now_ns(), copied = 0;
  for (int i = 0; i < j.npieces; ++i) {
    const Piece& p = j.pieces[i];
    if (p.where == kMemory) continue;
    uint8_t* buf = address(j, p, st);
    const int64_t ds = std::max(p.off, j.fs), de = std::min(p.off + p.len, j.fe);
    std::memset(buf, 0, static_cast<size_t>(ds - p.off));
    std::memcpy(buf + (ds - p.off), mem_at(o, o->src, ds), static_cast<size_t>(de - ds));
    std::memset(buf + (de - p.off), 0, static_cast<size_t>(p.off + p.len - de));
    copied += de - ds;
  }
  int64_t t1 = now_ns();
  if (copied) {
    counters.copy_ns += t1 - t0;
    counters.copy_bytes += copied;
  }
  o->crcs[j.c.index] = crc32c(0, mem_at(o, o->src, j.fs), j.fe - j.fs);
  counters.crc_ns += now_ns() - t1;
  counters.crc_bytes += j.fe - j.fs;
  return true;
}

// A job's pieces are adjacent in the file: they move as one (vectored) request.
int64_t hector_store::job_bytes(const Job& j) const {
  int64_t n = 0;
  for (int i = 0; i < j.npieces; ++i) n += j.pieces[i].len;
  return n;
}

int hector_store::fill_iov(const Job& j, const Staging& st, iovec* iov) const {
  for (int i = 0; i < j.npieces; ++i)
    iov[i] = {address(j, j.pieces[i], st), static_cast<size_t>(j.pieces[i].len)};
  return j.npieces;
}

// Moves a job's bytes from `done` on with plain pread/pwrite (after a partial transfer, or for
// a request io_uring did not take). Returns the bytes done in all, or -errno.
int64_t hector_store::finish_sync(Job& j, const Staging& st, int64_t done) {
  const int fd = j.c.obj->fd;
  int64_t total = done;
  for (int i = 0; i < j.npieces; ++i) {
    const Piece& p = j.pieces[i];
    if (done >= p.len) {
      done -= p.len;
      continue;
    }
    uint8_t* buf = address(j, p, st) + done;
    const int64_t n = p.len - done;
    const int64_t r = j.c.write ? pwrite_full(fd, buf, n, p.off + done)
                                : pread_full(fd, buf, n, p.off + done);
    if (r < 0) return r;
    total += r;
    if (r < n) return total;
    done = 0;
  }
  return total;
}

// Thread pool: one pwritev/preadv per job, finished piece by piece if it stops early.
void hector_store::run_job_sync(Job& j, const Staging& st) {
  iovec iov[3];
  const int n = fill_iov(j, st, iov);
  const int fd = j.c.obj->fd;
  const int64_t t0 = now_ns();
  int64_t got;
  do {
    got = j.c.write ? ::pwritev(fd, iov, n, j.pieces[0].off) : ::preadv(fd, iov, n, j.pieces[0].off);
  } while (got < 0 && errno == EINTR);
  if (got < 0)
    got = -errno;
  else if (got > 0 && got < job_bytes(j))
    got = finish_sync(j, st, got);
  (j.c.write ? counters.write_io_ns : counters.read_io_ns) += now_ns() - t0;
  counters.io_requests += 1;
  job_result(j, got);
}

void hector_store::job_result(Job& j, int64_t got) {
  const int64_t want = job_bytes(j);
  if (got < 0)
    fail_errno(j, static_cast<int>(-got));
  else if (got < want)
    fail_short(j, j.pieces[0].off, got, want);
}

// After a read: copies staged bytes out, checks that the padding around the object is zero and
// the chunk's CRC32C. False (and the job failed) on a mismatch.
bool hector_store::verify_read(Job& j, Staging& st) {
  Object* o = j.c.obj;
  int64_t t0 = now_ns(), copied = 0, pad_ns = 0;
  bool pad_ok = true;
  for (int i = 0; i < j.npieces; ++i) {
    const Piece& p = j.pieces[i];
    if (p.where == kMemory) continue;
    const uint8_t* buf = address(j, p, st);
    const int64_t ds = std::max(p.off, j.fs), de = std::min(p.off + p.len, j.fe);
    const int64_t c0 = now_ns();
    for (int64_t k = 0; k < ds - p.off; ++k) pad_ok &= buf[k] == 0;
    for (int64_t k = de - p.off; k < p.len; ++k) pad_ok &= buf[k] == 0;
    pad_ns += now_ns() - c0;
    std::memcpy(mem_at(o, o->dst, ds), buf + (ds - p.off), static_cast<size_t>(de - ds));
    copied += de - ds;
  }
  int64_t t1 = now_ns();
  if (copied) {
    counters.copy_ns += t1 - t0 - pad_ns;
    counters.copy_bytes += copied;
  }
  const uint32_t got = crc32c(0, mem_at(o, o->dst, j.fs), j.fe - j.fs);
  counters.crc_ns += now_ns() - t1 + pad_ns;
  counters.crc_bytes += j.fe - j.fs;
  const uint32_t want = o->crcs[j.c.index];
  if (got == want && pad_ok) return true;
  j.status = HECTOR_STORE_ERR_CHECKSUM;
  char what[96];
  if (got != want)
    std::snprintf(what, sizeof what, "stored CRC32C %08x, read %08x", want, got);
  else
    std::snprintf(what, sizeof what, "the zero padding around the stored bytes is not zero");
  j.msg = "checksum mismatch reading " + o->path + " (file bytes " + std::to_string(j.fs) +
          ".." + std::to_string(j.fe) + "): " + what + "; the file was modified or corrupted";
  return false;
}

void hector_store::complete(Job& j, Staging& st) {
  if (j.status == HECTOR_OK && !j.c.write) safely(j, [&] { verify_read(j, st); });
  if (j.status == HECTOR_OK) counters.copies_avoided += j.avoided;
  Object* o = j.c.obj;
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (j.status != HECTOR_OK && o->status == HECTOR_OK) {
      o->status = j.status;
      o->err = j.err;
      o->message = std::move(j.msg);
    }
    if (--o->pending == 0) fd = finish(o);
  }
  if (fd >= 0) ::close(fd);
}

// Thread pool: each worker takes one chunk at a time and does its I/O with pread/pwrite.
void hector_store::pool_worker() {
  Staging st;
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> lock(mu);
      work_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) break;
      j.c = queue.front();
      queue.pop_front();
    }
    safely(j, [&] {
      if (plan(j) && stage(j, st)) run_job_sync(j, st);
    });
    complete(j, st);
  }
  std::free(st.small);
  std::free(st.big);
}

// io_uring: one thread per ring keeps up to depth chunks in flight. It takes chunks while it
// has free slots, stages them (copies, CRC32C), submits one request per chunk (a fixed-buffer
// read/write when the chunk is one staged piece, else a vectored one) in one system call, then
// blocks until a completion arrives; requests the kernel did not take are run synchronously.
void hector_store::ring_worker(RingState* rs) {
  const int depth = rs->depth;
  std::vector<Job> jobs(static_cast<size_t>(depth));
  std::vector<int> free_slots;
  for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);
  std::vector<Chunk> taken;
  std::vector<hector_io::Completion> done(static_cast<size_t>(depth));
  std::vector<uint64_t> dropped(static_cast<size_t>(depth));
  std::vector<std::array<iovec, 3>> iovs(static_cast<size_t>(depth));
  int active = 0;
  int64_t in_kernel = 0;
  auto release = [&](int slot) {
    complete(jobs[slot], rs->staging[slot]);
    free_slots.push_back(slot);
    --active;
  };
  for (;;) {
    taken.clear();
    {
      std::unique_lock<std::mutex> lock(mu);
      if (active == 0) work_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (active == 0 && queue.empty()) break;
      while (active + static_cast<int>(taken.size()) < depth && !queue.empty()) {
        taken.push_back(queue.front());
        queue.pop_front();
      }
    }
    int queued = 0;
    for (const Chunk& c : taken) {
      const int slot = free_slots.back();
      free_slots.pop_back();
      ++active;
      Job& j = jobs[slot];
      j = Job();
      j.c = c;
      Staging& st = rs->staging[slot];
      bool ready = false;
      safely(j, [&] { ready = plan(j) && stage(j, st); });
      if (!ready) {
        release(slot);
        continue;
      }
      j.submitted_at = now_ns();
      const Piece& p = j.pieces[0];
      if (j.npieces == 1) {
        const int index = p.where == kSmall ? st.small_index : -1;
        rs->ring->prep(c.write, c.obj->fd, address(j, p, st), static_cast<uint32_t>(p.len),
                       static_cast<uint64_t>(p.off), index, static_cast<uint64_t>(slot));
      } else {
        const int n = fill_iov(j, st, iovs[slot].data());
        rs->ring->prepv(c.write, c.obj->fd, iovs[slot].data(), static_cast<unsigned>(n),
                        static_cast<uint64_t>(p.off), static_cast<uint64_t>(slot));
      }
      ++queued;
    }
    if (queued > 0) {
      const int64_t t0 = now_ns();
      unsigned ndropped = 0;
      rs->ring->submit(dropped.data(), &ndropped);
      counters.ring_submit_ns += now_ns() - t0;
      counters.io_requests += queued - static_cast<int64_t>(ndropped);
      in_kernel += queued - static_cast<int64_t>(ndropped);
      for (unsigned k = 0; k < ndropped; ++k) {
        const int slot = static_cast<int>(dropped[k]);
        safely(jobs[slot], [&] { run_job_sync(jobs[slot], rs->staging[slot]); });
        release(slot);
      }
    }
    if (in_kernel == 0) continue;
    if (rs->ring->wait_one() < 0) continue;  // EINTR-like: look again
    const unsigned n = rs->ring->reap(done.data(), static_cast<unsigned>(done.size()));
    const int64_t t = now_ns();
    for (unsigned k = 0; k < n; ++k) {
      const int slot = static_cast<int>(done[k].user_data);
      Job& j = jobs[slot];
      int64_t got = done[k].res;
      if (got > 0 && got < job_bytes(j)) got = finish_sync(j, rs->staging[slot], got);
      (j.c.write ? counters.write_io_ns : counters.read_io_ns) += t - j.submitted_at;
      safely(j, [&] { job_result(j, got); });
      --in_kernel;
      release(slot);
    }
  }
}

int hector_store::finish(Object* o) {
  const int op = o->state == kWriting ? HECTOR_OP_WRITE : HECTOR_OP_READ;
  const int fd = o->fd;
  o->fd = -1;
  if (op == HECTOR_OP_WRITE) {
    if (o->status == HECTOR_OK) {
      o->state = kStored;
      stored_bytes += o->disk_bytes;
      peak_stored = std::max(peak_stored, stored_bytes);
      bytes[op] += o->nbytes;
      objects_done[op] += 1;
    } else {
      o->state = kFailed;
      unlink_file(o->name);  // nothing half-written stays behind
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
    unlink_file(erase(o));  // rare (removed in flight): unlinked right here
  } else {
    completions.push_back(o->key);
  }
  done_cv.notify_all();
  return fd;
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

// Decide whether O_DIRECT works in the directory dirfd: write and read one aligned block.
bool probe_direct(int dirfd, std::string* reason) {
  int fd = ::openat(dirfd, "probe", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_DIRECT,
                    0600);
  if (fd < 0) {
    *reason = "O_DIRECT refused by the filesystem: " + errno_text(errno);
    ::unlinkat(dirfd, "probe", 0);  // some kernels create the file before refusing O_DIRECT
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
  ::unlinkat(dirfd, "probe", 0);
  return ok;
}


// The backend a store asks for: the caller's choice, else $HECTOR_OFFLOAD_BACKEND, else
// io_uring. False (with *err) for an unknown name.
bool requested_backend(int32_t requested, int32_t* out, std::string* why, std::string* err) {
  if (requested == HECTOR_BACKEND_THREADS || requested == HECTOR_BACKEND_IO_URING) {
    *out = requested;
    *why = "chosen by the caller";
    return true;
  }
  if (requested != HECTOR_BACKEND_AUTO) {
    *err = "invalid argument: backend must be HECTOR_BACKEND_AUTO, _THREADS or _IO_URING";
    return false;
  }
  const char* env = std::getenv("HECTOR_OFFLOAD_BACKEND");
  const std::string name = env ? env : "";
  if (name.empty() || name == "auto") {
    *out = HECTOR_BACKEND_IO_URING;
    *why = "the default";
  } else if (name == "io_uring" || name == "threads") {
    *out = name == "threads" ? HECTOR_BACKEND_THREADS : HECTOR_BACKEND_IO_URING;
    *why = "HECTOR_OFFLOAD_BACKEND=" + name;
  } else {
    *err = "HECTOR_OFFLOAD_BACKEND=" + name + " is not a backend: use io_uring, threads or auto";
    return false;
  }
  return true;
}

// Creates the io_uring rings of a store: one per 4 I/O threads asked for, each with as many
// request slots as its share of threads (so as many chunks are in flight as with the pool),
// and registers each ring's small staging buffers. False (with *reason) when the kernel
// refuses io_uring: the store then uses the thread pool.
bool setup_rings(hector_store* s, int threads, std::string* reason) {
  if (s->chunk > (int64_t{1} << 30)) {
    *reason = "chunk_bytes above 1 GiB (one io_uring request moves at most 4 GiB - 1)";
    return false;
  }
  const int nrings = (threads + 3) / 4;
  const int depth = (threads + nrings - 1) / nrings;
  std::string registered = "registered staging buffers";
  s->rings.resize(static_cast<size_t>(nrings));
  for (RingState& rs : s->rings) {
    rs.ring = std::make_unique<hector_io::Ring>();
    if (!rs.ring->init(static_cast<unsigned>(depth) * 3, reason)) {
      s->rings.clear();
      return false;
    }
    rs.depth = depth;
    rs.staging.resize(static_cast<size_t>(depth));
    rs.small_region = aligned_alloc_bytes(int64_t{depth} * 2 * kAlign);
    if (rs.small_region == nullptr) {
      *reason = "cannot allocate io_uring staging buffers: " + errno_text(ENOMEM);
      s->rings.clear();
      return false;
    }
    std::memset(rs.small_region, 0, static_cast<size_t>(depth) * 2 * kAlign);
    std::vector<iovec> iov(static_cast<size_t>(depth));
    for (int i = 0; i < depth; ++i) {
      rs.staging[i].small = rs.small_region + int64_t{i} * 2 * kAlign;
      iov[i] = {rs.staging[i].small, static_cast<size_t>(2 * kAlign)};
    }
    std::string why;
    if (rs.ring->register_buffers(iov.data(), static_cast<unsigned>(depth), &why)) {
      for (int i = 0; i < depth; ++i) rs.staging[i].small_index = i;
      s->counters.registered_bytes += int64_t{depth} * 2 * kAlign;
    } else {
      registered = "unregistered staging buffers (" + why + ")";
    }
  }
  *reason = std::to_string(nrings) + (nrings == 1 ? " ring" : " rings") + " of " +
            std::to_string(depth) + " requests, " + hector_io::Ring::implementation() + ", " +
            registered;
  return true;
}

void free_rings(hector_store* s) {
  for (RingState& rs : s->rings) {
    rs.ring.reset();  // unregisters the buffers before they are freed
    for (Staging& st : rs.staging) std::free(st.big);
    std::free(rs.small_region);
  }
  s->rings.clear();
}

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

}  // namespace

void hector_store::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  work_cv.notify_all();
  for (auto& t : workers)
    if (t.joinable()) t.join();
  workers.clear();
  free_rings(this);
  if (dir_fd >= 0) {
    empty_dir(dir_fd);
    ::close(dir_fd);
    dir_fd = -1;
    ::unlinkat(root_fd, dir_name.c_str(), AT_REMOVEDIR);
  }
  if (lock_fd >= 0) ::close(lock_fd);
  if (root_fd >= 0) ::close(root_fd);
  lock_fd = root_fd = -1;
}

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
      // Build the directory under a temporary name, lock it, then rename it into place, so a
      // concurrent cleaner never sees an unlocked directory of a live process. All of it
      // relative to the root's descriptor.
      const long pid = static_cast<long>(::getpid());
      for (int attempt = 0;; ++attempt) {
        const int64_t n = g_store_counter.fetch_add(1);
        const std::string id = std::to_string(pid) + "-" + std::to_string(n);
        const std::string tmp = kTmpPrefix + id, name = kPrefix + id;
        if (::mkdirat(s->root_fd, tmp.c_str(), 0700) != 0) {
          if (errno == EEXIST && attempt < 1000) continue;
          return fail(HECTOR_STORE_ERR_IO,
                      "cannot create " + s->root + "/" + tmp + ": " + errno_text(errno));
        }
        const int dfd = open_dir_at(s->root_fd, tmp.c_str());
        if (dfd < 0) {
          const int e = errno;
          ::unlinkat(s->root_fd, tmp.c_str(), AT_REMOVEDIR);
          return fail(HECTOR_STORE_ERR_IO,
                      "cannot open " + s->root + "/" + tmp + ": " + errno_text(e));
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
          if (!locked)
            return fail(HECTOR_STORE_ERR_IO,
                        "cannot lock " + s->root + "/" + tmp + "/lock: " + errno_text(e));
          if ((re == EEXIST || re == ENOTEMPTY || re == ENOTDIR) && attempt < 1000) continue;
          return fail(HECTOR_STORE_ERR_IO,
                      "cannot create " + s->root + "/" + name + ": " + errno_text(re));
        }
        s->dir_name = name;
        s->dir = s->root + "/" + name;
        s->dir_fd = dfd;
        s->lock_fd = fd;
        break;
      }
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
