// Hector native runtime: a minimal io_uring submission/completion ring for the tensor store.
//
// Two implementations behind one small class: liburing when the build found it
// (HECTOR_HAVE_LIBURING), otherwise the kernel ABI of <linux/io_uring.h> used directly
// (io_uring_setup / io_uring_enter / io_uring_register system calls and mmap'd rings). The store
// uses one Ring per I/O thread; a Ring is not thread-safe.

#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>

namespace hector_io {

// One completed request: the user_data given to prep() and the kernel's result (bytes
// transferred, or -errno).
struct Completion {
  uint64_t user_data;
  int32_t res;
};

class Ring {
 public:
  Ring();
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Creates the ring with room for `entries` requests in flight and checks that the kernel
  // supports the read/write operations the store uses. On failure returns false and says why
  // in *reason (e.g. "io_uring_setup failed: Operation not permitted (EPERM, errno 1)").
  bool init(unsigned entries, std::string* reason);

  // Registers n buffers (IORING_REGISTER_BUFFERS) for prep(..., buf_index >= 0).
  bool register_buffers(const struct iovec* iov, unsigned n, std::string* reason);

  // Queues one read or write of len bytes at file offset off; buf_index >= 0 names the
  // registered buffer that contains [addr, addr + len). Returns false when the submission
  // queue is full.
  bool prep(bool write, int fd, void* addr, uint32_t len, uint64_t off, int buf_index,
            uint64_t user_data);

  // Queues one vectored read or write (n buffers, adjacent in the file from offset off); iov
  // must stay valid until the request completes.
  bool prepv(bool write, int fd, const struct iovec* iov, unsigned n, uint64_t off,
             uint64_t user_data);

  // Hands the queued requests to the kernel without waiting. Returns the number submitted or
  // -errno; on an error nothing that was still queued stays queued (*dropped gets the
  // user_data of every request that was not handed over, so the caller can run it itself).
  int submit(uint64_t* dropped, unsigned* ndropped);

  // Blocks until at least one completion is available (retries EINTR). Returns 0 or -errno.
  int wait_one();

  // Moves up to max available completions into out; returns how many.
  unsigned reap(Completion* out, unsigned max);

  // "liburing" or "kernel ABI".
  static const char* implementation();

  struct Impl;  // the implementation's state (public so its helpers can name it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hector_io
