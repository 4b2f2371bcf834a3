// Hector native runtime: io_uring ring (see io_uring_ring.h).

#include "io_uring_ring.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef HECTOR_HAVE_LIBURING
#include <liburing.h>
#else
#include <linux/io_uring.h>
#endif

namespace hector_io {

namespace {

std::string errno_text(int e) {
  const char* name = e == EPERM    ? "EPERM"
                     : e == ENOSYS ? "ENOSYS"
                     : e == ENOMEM ? "ENOMEM"
                     : e == EINVAL ? "EINVAL"
                     : e == EACCES ? "EACCES"
                                   : "errno";
  return std::string(std::strerror(e)) + " (" + name + ", errno " + std::to_string(e) + ")";
}

}  // namespace

#ifdef HECTOR_HAVE_LIBURING

// ---- liburing ---------------------------------------------------------------------------------

struct Ring::Impl {
  io_uring ring{};
  bool ready = false;
  ~Impl() {
    if (ready) io_uring_queue_exit(&ring);
  }
};

const char* Ring::implementation() { return "liburing"; }

bool Ring::init(unsigned entries, std::string* reason) {
  int r = io_uring_queue_init(entries, &impl_->ring, 0);
  if (r < 0) {
    *reason = "io_uring_setup failed: " + errno_text(-r);
    return false;
  }
  impl_->ready = true;
  io_uring_probe* probe = io_uring_get_probe_ring(&impl_->ring);
  if (probe == nullptr) {
    *reason = "the kernel cannot list its io_uring operations (IORING_REGISTER_PROBE, < 5.6)";
    return false;
  }
  bool ok = io_uring_opcode_supported(probe, IORING_OP_READV) &&
            io_uring_opcode_supported(probe, IORING_OP_WRITEV) &&
            io_uring_opcode_supported(probe, IORING_OP_READ) &&
            io_uring_opcode_supported(probe, IORING_OP_WRITE) &&
            io_uring_opcode_supported(probe, IORING_OP_READ_FIXED) &&
            io_uring_opcode_supported(probe, IORING_OP_WRITE_FIXED);
  io_uring_free_probe(probe);
  if (!ok) *reason = "the kernel's io_uring lacks IORING_OP_READ/WRITE(_FIXED)";
  return ok;
}

bool Ring::register_buffers(const struct iovec* iov, unsigned n, std::string* reason) {
  int r = io_uring_register_buffers(&impl_->ring, iov, n);
  if (r < 0) *reason = "IORING_REGISTER_BUFFERS failed: " + errno_text(-r);
  return r == 0;
}

bool Ring::prep(bool write, int fd, void* addr, uint32_t len, uint64_t off, int buf_index,
                uint64_t user_data) {
  io_uring_sqe* sqe = io_uring_get_sqe(&impl_->ring);
  if (sqe == nullptr) return false;
  if (buf_index >= 0) {
    if (write)
      io_uring_prep_write_fixed(sqe, fd, addr, len, off, buf_index);
    else
      io_uring_prep_read_fixed(sqe, fd, addr, len, off, buf_index);
  } else {
    if (write)
      io_uring_prep_write(sqe, fd, addr, len, off);
    else
      io_uring_prep_read(sqe, fd, addr, len, off);
  }
  sqe->user_data = user_data;
  return true;
}

bool Ring::prepv(bool write, int fd, const struct iovec* iov, unsigned n, uint64_t off,
                 uint64_t user_data) {
  io_uring_sqe* sqe = io_uring_get_sqe(&impl_->ring);
  if (sqe == nullptr) return false;
  if (write)
    io_uring_prep_writev(sqe, fd, iov, n, off);
  else
    io_uring_prep_readv(sqe, fd, iov, n, off);
  sqe->user_data = user_data;
  return true;
}

int Ring::submit(uint64_t* dropped, unsigned* ndropped) {
  *ndropped = 0;
  int r;
  do {
    r = io_uring_submit(&impl_->ring);
  } while (r == -EINTR);
  io_uring_sq& sq = impl_->ring.sq;
  unsigned head = __atomic_load_n(sq.khead, __ATOMIC_ACQUIRE);
  if (head != sq.sqe_tail) {
    // Not handed over (an error, or the kernel stopped early): take those requests back so
    // the caller runs them itself; without SQPOLL the kernel reads the queue only in enter.
    const unsigned mask = *sq.kring_mask;
    for (unsigned i = head; i != sq.sqe_tail; ++i)
      dropped[(*ndropped)++] = sq.sqes[i & mask].user_data;
    __atomic_store_n(sq.ktail, head, __ATOMIC_RELEASE);
    sq.sqe_head = sq.sqe_tail = head;
  }
  return r;
}

int Ring::wait_one() {
  io_uring_cqe* cqe = nullptr;
  int r;
  do {
    r = io_uring_wait_cqe(&impl_->ring, &cqe);
  } while (r == -EINTR);
  return r;
}

unsigned Ring::reap(Completion* out, unsigned max) {
  unsigned n = 0;
  io_uring_cqe* cqe = nullptr;
  while (n < max && io_uring_peek_cqe(&impl_->ring, &cqe) == 0 && cqe != nullptr) {
    out[n++] = {cqe->user_data, cqe->res};
    io_uring_cqe_seen(&impl_->ring, cqe);
  }
  return n;
}

#else

// ---- the kernel ABI ---------------------------------------------------------------------------

namespace {

int sys_setup(unsigned entries, io_uring_params* p) {
  return static_cast<int>(::syscall(__NR_io_uring_setup, entries, p));
}

int sys_enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags) {
  return static_cast<int>(
      ::syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, nullptr, 0));
}

int sys_register(int fd, unsigned op, const void* arg, unsigned n) {
  return static_cast<int>(::syscall(__NR_io_uring_register, fd, op, arg, n));
}

template <class T>
T* at(void* base, uint32_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace

struct Ring::Impl {
  int fd = -1;
  void* sq_map = MAP_FAILED;
  size_t sq_map_size = 0;
  void* cq_map = MAP_FAILED;
  size_t cq_map_size = 0;
  io_uring_sqe* sqes = static_cast<io_uring_sqe*>(MAP_FAILED);
  size_t sqes_size = 0;
  unsigned *sq_head = nullptr, *sq_tail = nullptr, *sq_array = nullptr;
  unsigned *cq_head = nullptr, *cq_tail = nullptr;
  io_uring_cqe* cqes = nullptr;
  unsigned sq_mask = 0, cq_mask = 0, sq_entries = 0;
  unsigned local_tail = 0;  // the next free submission slot; published by submit()

  ~Impl() {
    if (sqes != MAP_FAILED) ::munmap(sqes, sqes_size);
    if (cq_map != MAP_FAILED && cq_map != sq_map) ::munmap(cq_map, cq_map_size);
    if (sq_map != MAP_FAILED) ::munmap(sq_map, sq_map_size);
    if (fd >= 0) ::close(fd);
  }
};

const char* Ring::implementation() { return "kernel ABI"; }

bool Ring::init(unsigned entries, std::string* reason) {
  Impl& r = *impl_;
  io_uring_params p;
  std::memset(&p, 0, sizeof p);
  r.fd = sys_setup(entries, &p);
  if (r.fd < 0) {
    *reason = "io_uring_setup failed: " + errno_text(errno);
    return false;
  }
  r.sq_map_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  r.cq_map_size = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
  const bool single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
  if (single) r.sq_map_size = r.cq_map_size = std::max(r.sq_map_size, r.cq_map_size);
  r.sq_map = ::mmap(nullptr, r.sq_map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                    r.fd, IORING_OFF_SQ_RING);
  if (r.sq_map == MAP_FAILED) {
    *reason = "mmap of the io_uring submission ring failed: " + errno_text(errno);
    return false;
  }
  r.cq_map = single ? r.sq_map
                    : ::mmap(nullptr, r.cq_map_size, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_POPULATE, r.fd, IORING_OFF_CQ_RING);
  if (r.cq_map == MAP_FAILED) {
    *reason = "mmap of the io_uring completion ring failed: " + errno_text(errno);
    return false;
  }
  r.sqes_size = p.sq_entries * sizeof(io_uring_sqe);
  r.sqes = static_cast<io_uring_sqe*>(::mmap(nullptr, r.sqes_size, PROT_READ | PROT_WRITE,
                                             MAP_SHARED | MAP_POPULATE, r.fd, IORING_OFF_SQES));
  if (r.sqes == MAP_FAILED) {
    *reason = "mmap of the io_uring submission entries failed: " + errno_text(errno);
    return false;
  }
  r.sq_head = at<unsigned>(r.sq_map, p.sq_off.head);
  r.sq_tail = at<unsigned>(r.sq_map, p.sq_off.tail);
  r.sq_mask = *at<unsigned>(r.sq_map, p.sq_off.ring_mask);
  r.sq_array = at<unsigned>(r.sq_map, p.sq_off.array);
  r.sq_entries = p.sq_entries;
  r.cq_head = at<unsigned>(r.cq_map, p.cq_off.head);
  r.cq_tail = at<unsigned>(r.cq_map, p.cq_off.tail);
  r.cq_mask = *at<unsigned>(r.cq_map, p.cq_off.ring_mask);
  r.cqes = at<io_uring_cqe>(r.cq_map, p.cq_off.cqes);
  r.local_tail = *r.sq_tail;

  // The store needs plain and fixed-buffer reads and writes (IORING_OP_READ/WRITE: 5.6).
  const unsigned nops = 256;
  std::vector<char> mem(sizeof(io_uring_probe) + nops * sizeof(io_uring_probe_op), 0);
  auto* probe = reinterpret_cast<io_uring_probe*>(mem.data());
  if (sys_register(r.fd, IORING_REGISTER_PROBE, probe, nops) < 0) {
    *reason = "the kernel cannot list its io_uring operations (IORING_REGISTER_PROBE): " +
              errno_text(errno);
    return false;
  }
  for (unsigned op : {IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_READ, IORING_OP_WRITE,
                      IORING_OP_READ_FIXED, IORING_OP_WRITE_FIXED}) {
    if (op > probe->last_op || !(probe->ops[op].flags & IO_URING_OP_SUPPORTED)) {
      *reason = "the kernel's io_uring lacks operation " + std::to_string(op);
      return false;
    }
  }
  return true;
}

bool Ring::register_buffers(const struct iovec* iov, unsigned n, std::string* reason) {
  if (sys_register(impl_->fd, IORING_REGISTER_BUFFERS, iov, n) < 0) {
    *reason = "IORING_REGISTER_BUFFERS failed: " + errno_text(errno);
    return false;
  }
  return true;
}

// The next free submission entry, zeroed and claimed (nullptr when the queue is full).
static io_uring_sqe* next_sqe(Ring::Impl& r);

bool Ring::prepv(bool write, int fd, const struct iovec* iov, unsigned n, uint64_t off,
                 uint64_t user_data) {
  io_uring_sqe* sqe = next_sqe(*impl_);
  if (sqe == nullptr) return false;
  sqe->opcode = write ? IORING_OP_WRITEV : IORING_OP_READV;
  sqe->fd = fd;
  sqe->off = off;
  sqe->addr = reinterpret_cast<uint64_t>(iov);
  sqe->len = n;
  sqe->user_data = user_data;
  return true;
}

static io_uring_sqe* next_sqe(Ring::Impl& r) {
  if (r.local_tail - __atomic_load_n(r.sq_head, __ATOMIC_ACQUIRE) >= r.sq_entries) return nullptr;
  const unsigned idx = r.local_tail & r.sq_mask;
  io_uring_sqe* sqe = &r.sqes[idx];
  std::memset(sqe, 0, sizeof *sqe);
  r.sq_array[idx] = idx;
  ++r.local_tail;
  return sqe;
}

bool Ring::prep(bool write, int fd, void* addr, uint32_t len, uint64_t off, int buf_index,
                uint64_t user_data) {
  io_uring_sqe* sqe = next_sqe(*impl_);
  if (sqe == nullptr) return false;
  if (buf_index >= 0) {
    sqe->opcode = write ? IORING_OP_WRITE_FIXED : IORING_OP_READ_FIXED;
    sqe->buf_index = static_cast<uint16_t>(buf_index);
  } else {
    sqe->opcode = write ? IORING_OP_WRITE : IORING_OP_READ;
  }
  sqe->fd = fd;
  sqe->off = off;
  sqe->addr = reinterpret_cast<uint64_t>(addr);
  sqe->len = len;
  sqe->user_data = user_data;
  return true;
}

int Ring::submit(uint64_t* dropped, unsigned* ndropped) {
  Impl& r = *impl_;
  *ndropped = 0;
  __atomic_store_n(r.sq_tail, r.local_tail, __ATOMIC_RELEASE);
  unsigned head = __atomic_load_n(r.sq_head, __ATOMIC_ACQUIRE);
  int ret = 0;
  while (head != r.local_tail) {
    int n = sys_enter(r.fd, r.local_tail - head, 0, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ret = -errno;
    head = __atomic_load_n(r.sq_head, __ATOMIC_ACQUIRE);
    if (n <= 0) break;
    ret += n;
  }
  if (head != r.local_tail) {
    // Not handed over (an error, or the kernel stopped early): take those requests back so the
    // caller runs them itself; without SQPOLL the kernel reads the queue only in enter.
    for (unsigned i = head; i != r.local_tail; ++i)
      dropped[(*ndropped)++] = r.sqes[r.sq_array[i & r.sq_mask]].user_data;
    r.local_tail = head;
    __atomic_store_n(r.sq_tail, head, __ATOMIC_RELEASE);
  }
  return ret;
}

int Ring::wait_one() {
  Impl& r = *impl_;
  while (__atomic_load_n(r.cq_tail, __ATOMIC_ACQUIRE) == *r.cq_head) {
    if (sys_enter(r.fd, 0, 1, IORING_ENTER_GETEVENTS) < 0 && errno != EINTR) return -errno;
  }
  return 0;
}

unsigned Ring::reap(Completion* out, unsigned max) {
  Impl& r = *impl_;
  unsigned head = *r.cq_head;
  const unsigned tail = __atomic_load_n(r.cq_tail, __ATOMIC_ACQUIRE);
  unsigned n = 0;
  for (; head != tail && n < max; ++head, ++n) {
    const io_uring_cqe& cqe = r.cqes[head & r.cq_mask];
    out[n] = {cqe.user_data, cqe.res};
  }
  __atomic_store_n(r.cq_head, head, __ATOMIC_RELEASE);
  return n;
}

#endif

Ring::Ring() : impl_(new Impl) {}
Ring::~Ring() = default;

}  // namespace hector_io
