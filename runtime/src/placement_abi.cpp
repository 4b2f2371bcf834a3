// Hector native runtime: the placement ABI compiled training programs call (hector/placement.h).
//
// Built only on the public store API (hector/offload.h): a frame maps slots to store keys and
// records its first failure; generated code reaches it through a thread-local "current frame",
// so the compiled functions keep their signatures and no Python runs between their kernels
// and the store.

#include "hector/placement.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

struct hector_placement_frame {
  hector_store* store;
  std::mutex mu;
  std::unordered_map<int64_t, int64_t> keys;  // slot -> store key (stored or in flight)
  // slot -> the buffer its last write or prefetch used, and whether it was a write
  struct Buffer {
    int64_t ptr, nbytes;
    bool written;
  };
  std::unordered_map<int64_t, Buffer> buffers;
  int32_t status = HECTOR_OK;
  int32_t err_no = 0;
  std::string message;
  int64_t bytes_written = 0, bytes_read = 0, writes = 0, reads = 0;
};

namespace {

thread_local hector_placement_frame* g_current = nullptr;
// Time blocked in hector_place_wait, for writes and for reads, and the waits (all frames).
std::atomic<int64_t> g_wait_write_ns{0}, g_wait_read_ns{0}, g_waits{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Records the frame's first failure (later ones are consequences of it).
void fail(hector_placement_frame* f, int32_t status, int32_t err_no, const std::string& what) {
  if (f->status != HECTOR_OK) return;
  f->status = status;
  f->err_no = err_no;
  f->message = what;
}

// The store's message for a failed operation on key, prefixed with what the frame was doing.
void fail_key(hector_placement_frame* f, int32_t status, int64_t key, const char* what,
              int64_t slot) {
  char buf[1024] = {0};
  int32_t e = hector_store_error(f->store, key, buf, sizeof buf);
  std::string text = std::string(what) + " saved value " + std::to_string(slot) + ": " + buf;
  if (status == HECTOR_STORE_ERR_CHECKSUM && !buf[0])
    text += "data read back does not match its CRC32C";
  fail(f, status, e, text);
}

// Gives the pages of a buffer that is about to be freed back to the system at once. Generated
// code frees an offloaded value right after this (its copy is in the store), but the buffer may
// come from an allocator that keeps freed blocks mapped for reuse (Hector's host memory cache):
// without this its bytes would stay resident, and offloading would not lower the peak. Only
// whole pages inside the buffer are dropped (an allocator's header before it is untouched).
void discard(int64_t ptr, int64_t nbytes) {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  int64_t start = (ptr + page - 1) / page * page;
  int64_t end = (ptr + nbytes) / page * page;
  if (end > start) {
    madvise(reinterpret_cast<void*>(start), static_cast<size_t>(end - start), MADV_DONTNEED);
  }
}

}  // namespace

extern "C" {

int32_t hector_placement_abi_version(void) { return 1; }

hector_placement_frame* hector_placement_frame_open(hector_store* store) {
  if (store == nullptr) return nullptr;
  auto* f = new hector_placement_frame();
  f->store = store;
  return f;
}

hector_placement_frame* hector_placement_frame_activate(hector_placement_frame* frame) {
  hector_placement_frame* prev = g_current;
  g_current = frame;
  return prev;
}

int32_t hector_placement_frame_status(hector_placement_frame* f, int32_t* errno_out, char* buf,
                                      int64_t buflen) {
  if (f == nullptr) return HECTOR_STORE_ERR_ARG;
  std::lock_guard<std::mutex> lock(f->mu);
  if (errno_out) *errno_out = f->err_no;
  if (buf && buflen > 0) {
    std::snprintf(buf, static_cast<size_t>(buflen), "%s", f->message.c_str());
  }
  return f->status;
}

int32_t hector_placement_frame_stats(hector_placement_frame* f, int64_t* out) {
  if (f == nullptr || out == nullptr) return HECTOR_STORE_ERR_ARG;
  std::lock_guard<std::mutex> lock(f->mu);
  out[0] = f->bytes_written;
  out[1] = f->bytes_read;
  out[2] = static_cast<int64_t>(f->keys.size());
  out[3] = f->writes;
  out[4] = f->reads;
  return HECTOR_OK;
}

int32_t hector_placement_frame_close(hector_placement_frame* f) {
  if (f == nullptr) return HECTOR_OK;
  if (g_current == f) g_current = nullptr;
  {
    std::lock_guard<std::mutex> lock(f->mu);
    for (auto& kv : f->keys) {
      hector_store_wait(f->store, kv.second);  // its failure is already recorded, or moot
      hector_store_remove(f->store, kv.second);
    }
    f->keys.clear();
    f->buffers.clear();
  }
  delete f;
  return HECTOR_OK;
}

void hector_place_write(int64_t slot, int64_t ptr, int64_t nbytes) {
  hector_placement_frame* f = g_current;
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->status != HECTOR_OK) return;
  if (f->keys.count(slot)) {
    fail(f, HECTOR_STORE_ERR_ARG, 0,
         "saved value " + std::to_string(slot) + " is offloaded twice in one step");
    return;
  }
  int64_t key = -1;
  int32_t code = hector_store_write(f->store, reinterpret_cast<const void*>(ptr), nbytes, &key);
  if (code != HECTOR_OK) {
    fail(f, code, EINVAL, "cannot start writing saved value " + std::to_string(slot));
    return;
  }
  f->keys[slot] = key;
  f->buffers[slot] = {ptr, nbytes, true};
  f->bytes_written += nbytes;
  f->writes += 1;
}

void hector_place_wait(int64_t slot) {
  hector_placement_frame* f = g_current;
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(f->mu);
  auto it = f->keys.find(slot);
  if (it == f->keys.end()) return;  // its write never started: the failure is recorded
  auto buffer = f->buffers.find(slot);
  const bool writing = buffer != f->buffers.end() && buffer->second.written;
  const int64_t start = now_ns();
  int32_t code = hector_store_wait(f->store, it->second);
  (writing ? g_wait_write_ns : g_wait_read_ns) += now_ns() - start;
  g_waits += 1;
  if (code != HECTOR_OK) {
    fail_key(f, code, it->second, "waiting for", slot);
    return;
  }
  if (buffer != f->buffers.end() && buffer->second.written) {
    // Written: the forward frees the buffer right after this wait.
    discard(buffer->second.ptr, buffer->second.nbytes);
    f->buffers.erase(buffer);
  }
}

void hector_place_wait_stats(int64_t* out) {
  if (out == nullptr) return;
  out[0] = g_wait_write_ns.load();
  out[1] = g_wait_read_ns.load();
  out[2] = g_waits.load();
}

void hector_place_prefetch(int64_t slot, int64_t ptr, int64_t nbytes) {
  hector_placement_frame* f = g_current;
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(f->mu);
  if (f->status != HECTOR_OK) return;
  auto it = f->keys.find(slot);
  if (it == f->keys.end()) {
    fail(f, HECTOR_STORE_ERR_STATE, ENOENT,
         "saved value " + std::to_string(slot) +
             " was never offloaded in this step (run the forward in the same frame)");
    return;
  }
  int32_t code = hector_store_read(f->store, it->second, reinterpret_cast<void*>(ptr), nbytes);
  if (code != HECTOR_OK) {
    fail_key(f, code, it->second, "cannot start reading", slot);
    return;
  }
  f->buffers[slot] = {ptr, nbytes, false};
  f->bytes_read += nbytes;
  f->reads += 1;
}

void hector_place_release(int64_t slot) {
  hector_placement_frame* f = g_current;
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(f->mu);
  auto buffer = f->buffers.find(slot);
  if (buffer != f->buffers.end() && !buffer->second.written) {
    // Read back and used: the backward frees the buffer right after this release.
    discard(buffer->second.ptr, buffer->second.nbytes);
    f->buffers.erase(buffer);
  }
  auto it = f->keys.find(slot);
  if (it == f->keys.end()) return;
  hector_store_remove(f->store, it->second);
  f->keys.erase(it);
}

}  // extern "C"
