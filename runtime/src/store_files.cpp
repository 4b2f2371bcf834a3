// Hector native runtime: the tensor store's files and directories (see store_files.h).
#include "store_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hector/offload.h"

namespace hector_offload {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static const char* errno_name(int e) {
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
static std::string why_not_private(const struct stat& st) {
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
static std::vector<std::string> list_dir(int dirfd) {
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
bool empty_dir(int dirfd, int depth) {
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
static long store_pid(const std::string& name) {
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
static bool remove_if_stale(int rootfd, const std::string& name) {
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

}  // namespace hector_offload
