// Hector native runtime: the tensor store's files and directories (see hector/offload.h): the
// private root and the store directories under it, stale-directory cleanup, full-length
// pread/pwrite, the O_DIRECT probe and errno text.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace hector_offload {

constexpr int64_t kAlign = 4096;
constexpr int64_t kMaxChunk = int64_t{1} << 40;  // keeps every offset sum far from overflow
constexpr const char* kPrefix = "hector-offload-";
constexpr const char* kTmpPrefix = ".tmp-hector-offload-";

// Monotonic time in nanoseconds.
int64_t now_ns();
// n rounded up to whole kAlign blocks.
inline int64_t round_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The text of errno e: "<strerror> (<NAME>, errno <e>)".
std::string errno_text(int e);

// Full pwrite/pread: loops over partial transfers; returns bytes done (< n on EOF / zero
// write) or -errno.
int64_t pwrite_full(int fd, const void* buf, int64_t n, int64_t off);
int64_t pread_full(int fd, void* buf, int64_t n, int64_t off);

// The directory name under dirfd, opened without following a link (-1 with errno on failure).
int open_dir_at(int dirfd, const char* name);
// Opens the offload root (creating it with mode 0700 when asked and missing) and checks that it
// is private: a directory, not a symbolic link, owned by the current user, not writable by
// group or others. Returns its descriptor, or -1 with *code (HECTOR_STORE_ERR_IO, or
// HECTOR_STORE_ERR_UNSAFE for a root that is refused) and *msg. With create false, a missing
// root is -1 with *code HECTOR_OK.
int open_root(const std::string& root, bool create, int32_t* code, std::string* msg);
// Empties the directory dirfd: unlinks its regular files and symbolic links (a link is
// removed, never followed), recurses into subdirectories that are real directories owned by
// the user, and leaves anything else. True when nothing was left.
bool empty_dir(int dirfd, int depth = 0);
// Removes the store directories of dead processes under the root rootfd; returns how many.
int64_t clean_stale_at(int rootfd);
// Decide whether O_DIRECT works in the directory dirfd: write and read one aligned block.
bool probe_direct(int dirfd, std::string* reason);

}  // namespace hector_offload
