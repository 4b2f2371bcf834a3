// Hector native runtime: the tensor store's I/O threads: a pool of pread/pwrite workers or one
// thread per io_uring ring, how the backend is chosen and set up, and their shutdown.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>

#include "store_state.h"

using namespace hector_offload;

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

namespace hector_offload {


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

}  // namespace hector_offload

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
