// Hector native runtime: one chunk of a stored object through the tensor store: its plan (the
// I/Os it takes and where their bytes go), staging and CRC32C, the synchronous I/O, the read-back
// check, and the end of its operation.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "crc32c.h"
#include "store_state.h"

using namespace hector_offload;

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
