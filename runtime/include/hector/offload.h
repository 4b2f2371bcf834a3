/* Hector native runtime: asynchronous tensor store on files (activation offloading).
 *
 * A store owns one private directory (mode 0700) named hector-offload-<pid>-<n> under a root
 * directory; it is removed by hector_store_close. The root must be private to the user: it is
 * created with mode 0700 when missing, and refused (HECTOR_STORE_ERR_UNSAFE) when it is a
 * symbolic link, not a directory, owned by another user, or writable by group or others. The
 * root is opened once (O_DIRECTORY | O_NOFOLLOW) and everything under it is reached relative
 * to its descriptor, never through a symbolic link: spill files are opened with O_NOFOLLOW
 * (and O_EXCL when created). Opening a store first removes the directories of dead processes
 * under the same root (a directory is stale when its owner pid is gone, or when the lock file
 * inside it is not locked by anyone); only real directories owned by the user are cleaned, and
 * only their regular files and symbolic links (the links themselves) are removed.
 *
 * Each stored object (one tensor storage) is one file, moved in chunks by one of two backends:
 * io_uring (the default: one ring per 4 I/O threads asked for, each keeping that many chunk
 * requests in flight; liburing when the build found it, else the kernel ABI directly) or a
 * pool of pread/pwrite worker threads (chosen, or used when the kernel refuses io_uring:
 * hector_store_backend says which ran and why). O_DIRECT is used where the filesystem accepts
 * it, buffered I/O otherwise. Under O_DIRECT an object starts at the file offset that puts its
 * source address in phase with the file (offset = address mod 4096), so its whole blocks go
 * straight from the caller's memory; only the partial first and last blocks pass through small
 * (registered) staging buffers, zero-padded on disk. A read goes straight into its destination
 * when that address has the same phase (hector_store_phase), through a staging buffer
 * otherwise. Every chunk carries a CRC32C (SSE4.2 when the CPU has it) kept in memory and
 * verified, with the zero padding, when it is read back.
 *
 * All operations are asynchronous: hector_store_write / hector_store_read queue work and return
 * at once; completion is observed with hector_store_poll, hector_store_wait or
 * hector_store_completions. The caller keeps the source buffer of a write and the destination
 * buffer of a read alive and untouched until that operation completes. At most one operation
 * is in flight per object. Functions return HECTOR_OK (0) or a status below; error text, with
 * the file and the cause, is available through hector_store_error.
 */
#pragma once
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Status codes of the store. */
#ifndef HECTOR_OK
#define HECTOR_OK 0
#endif
#define HECTOR_STORE_PENDING 100      /* operation still in flight (poll only) */
#define HECTOR_STORE_ERR_IO 101       /* a system call failed; errno in hector_store_error */
#define HECTOR_STORE_ERR_SHORT 102    /* a read or write transferred fewer bytes than asked */
#define HECTOR_STORE_ERR_CHECKSUM 103 /* data read back does not match its CRC32C */
#define HECTOR_STORE_ERR_ARG 104      /* bad key, bad size, or an operation already in flight */
#define HECTOR_STORE_ERR_STATE 105    /* the object has no stored data (never written / failed) */
#define HECTOR_STORE_ERR_NOMEM 106    /* memory for the operation could not be allocated */
#define HECTOR_STORE_ERR_UNSAFE 107   /* the root is a link, not a directory, another user's, or
                                         writable by group or others (hector_store_open*) */

/* Fault kinds for hector_store_inject_fault. */
#define HECTOR_FAULT_NONE 0
#define HECTOR_FAULT_ENOSPC 1
#define HECTOR_FAULT_EIO 2
#define HECTOR_FAULT_SHORT 3
/* Operations faults apply to. */
#define HECTOR_OP_WRITE 0
#define HECTOR_OP_READ 1

/* I/O backends (hector_store_open2, hector_store_backend). AUTO: $HECTOR_OFFLOAD_BACKEND
 * (io_uring | threads | auto), else io_uring. A store that asked for io_uring and could not
 * have it (io_uring_setup refused: EPERM under a seccomp filter, ENOSYS on old kernels, ...)
 * runs the thread pool and says so. */
#define HECTOR_BACKEND_AUTO 0
#define HECTOR_BACKEND_THREADS 1
#define HECTOR_BACKEND_IO_URING 2

/* Indices of hector_store_stats2's values. Times are nanoseconds summed over the threads that
 * spent them. Caller side: SUBMIT_NS (inside hector_store_write/read: bookkeeping, queueing),
 * WRITE_WAIT_NS / READ_WAIT_NS (blocked in hector_store_wait on a write / a read). I/O threads:
 * COPY_NS / COPY_BYTES (copies between the caller's memory and staging buffers), CRC_NS /
 * CRC_BYTES (CRC32C and padding checks), RING_SUBMIT_NS (io_uring_enter submissions),
 * WRITE_IO_NS / READ_IO_NS (each request from submission to completion, summed over requests),
 * IO_REQUESTS (requests issued). COPIES_AVOIDED_BYTES: bytes moved straight between the
 * caller's memory and the file that the store's previous design (a whole-chunk bounce copy
 * whenever an address or length was not 4096-aligned under O_DIRECT) would have copied.
 * REGISTERED_BYTES: staging memory registered with io_uring. BACKEND: HECTOR_BACKEND_*.
 * OPEN_NS (I/O threads): creating / opening objects' files, done there rather than in the
 * caller's hector_store_write / hector_store_read. */
enum {
  HECTOR_STAT_BYTES_WRITTEN = 0,
  HECTOR_STAT_BYTES_READ,
  HECTOR_STAT_WRITE_BUSY_NS,
  HECTOR_STAT_READ_BUSY_NS,
  HECTOR_STAT_OBJECTS_WRITTEN,
  HECTOR_STAT_OBJECTS_READ,
  HECTOR_STAT_BYTES_ON_DISK,
  HECTOR_STAT_PEAK_BYTES_ON_DISK,
  HECTOR_STAT_COPY_NS,
  HECTOR_STAT_COPY_BYTES,
  HECTOR_STAT_CRC_NS,
  HECTOR_STAT_CRC_BYTES,
  HECTOR_STAT_SUBMIT_NS,
  HECTOR_STAT_RING_SUBMIT_NS,
  HECTOR_STAT_WRITE_WAIT_NS,
  HECTOR_STAT_READ_WAIT_NS,
  HECTOR_STAT_WRITE_IO_NS,
  HECTOR_STAT_READ_IO_NS,
  HECTOR_STAT_IO_REQUESTS,
  HECTOR_STAT_COPIES_AVOIDED_BYTES,
  HECTOR_STAT_REGISTERED_BYTES,
  HECTOR_STAT_BACKEND,
  HECTOR_STAT_OPEN_NS,
  HECTOR_STAT_FILES_REUSED, /* writes that overwrote a removed object's file */
  HECTOR_STAT_COUNT
};

typedef struct hector_store hector_store;

/* Version of the store ABI; bumped on any incompatible change. */
int32_t hector_store_abi_version(void);

/* Opens a store under root (created with mode 0700 if missing; refused with
 * HECTOR_STORE_ERR_UNSAFE unless it is a directory, not a link, owned by the user and not
 * writable by group or others). threads: number of I/O workers (>= 1); chunk_bytes: request
 * split size (multiple of 4096, 4096 .. 2^40); direct: 1 use O_DIRECT if the filesystem accepts
 * it, 0 never. On failure returns HECTOR_STORE_ERR_IO, _ARG, _NOMEM or _UNSAFE and writes a
 * message into err (errlen bytes). The environment variable
 * HECTOR_OFFLOAD_FAULT="op:kind[:skip[:count]]" (op write|read, kind enospc|eio|short) arms a
 * fault at open, like hector_store_inject_fault. */
int32_t hector_store_open(const char* root, int32_t threads, int64_t chunk_bytes, int32_t direct,
                          hector_store** out, char* err, int64_t errlen);

/* hector_store_open with a backend (HECTOR_BACKEND_*); hector_store_open is backend AUTO.
 * threads: pool workers, or for io_uring the number of chunk requests in flight (one ring and
 * thread per 4). An unknown backend (or $HECTOR_OFFLOAD_BACKEND value) is HECTOR_STORE_ERR_ARG. */
int32_t hector_store_open2(const char* root, int32_t threads, int64_t chunk_bytes, int32_t direct,
                           int32_t backend, hector_store** out, char* err, int64_t errlen);

/* The backend that runs (HECTOR_BACKEND_THREADS or _IO_URING); why, and how it is set up, goes
 * into buf (e.g. "thread pool: io_uring (the default) is unavailable: io_uring_setup failed:
 * Operation not permitted (EPERM, errno 1)"). */
int32_t hector_store_backend(hector_store* store, char* buf, int64_t buflen);

/* The phase (0..4095) an address must have, modulo 4096, for a read of object key to go
 * straight into it under O_DIRECT (the write's source address mod 4096); 0 for buffered
 * stores; -1 for an unknown key. */
int64_t hector_store_phase(hector_store* store, int64_t key);

/* Waits for every operation, removes every file and the directory, frees the store. */
int32_t hector_store_close(hector_store* store);

/* Removes the directories of dead processes under root; returns how many were removed, 0 when
 * root does not exist, -1 when root is refused (as hector_store_open does) or unreadable. */
int64_t hector_store_clean_stale(const char* root);

/* Copies the store's directory path into buf (NUL-terminated). */
int32_t hector_store_path(hector_store* store, char* buf, int64_t buflen);

/* 1 if O_DIRECT is in use, 0 if buffered; the reason for buffered I/O goes into buf. */
int32_t hector_store_direct(hector_store* store, char* buf, int64_t buflen);

/* Starts writing nbytes from src into a new object; its key goes to *key_out.
 * HECTOR_STORE_ERR_ARG when nbytes < 0 or [src, src + nbytes) is not mapped memory of the
 * process (so an absurd size is refused, not allocated), HECTOR_STORE_ERR_NOMEM when the
 * object's bookkeeping cannot be allocated. */
int32_t hector_store_write(hector_store* store, const void* src, int64_t nbytes,
                           int64_t* key_out);

/* Starts reading object key (all nbytes of it) into dst. HECTOR_STORE_ERR_ARG for an unknown
 * key, another size, an operation in flight or a destination that is not mapped memory. */
int32_t hector_store_read(hector_store* store, int64_t key, void* dst, int64_t nbytes);

/* HECTOR_STORE_PENDING while an operation on key is in flight, else its final status. */
int32_t hector_store_poll(hector_store* store, int64_t key);

/* Waits for the operation on key and returns its final status. */
int32_t hector_store_wait(hector_store* store, int64_t key);

/* Copies the message of the last failed operation on key into buf; returns its errno (0 when
 * the failure had none, e.g. a checksum mismatch). */
int32_t hector_store_error(hector_store* store, int64_t key, char* buf, int64_t buflen);

/* Drains up to max keys whose operation completed since the last call into keys; returns the
 * number written. */
int64_t hector_store_completions(hector_store* store, int64_t* keys, int64_t max);

/* Forgets object key and deletes its file (after its in-flight operation, if any), or keeps
 * the file for a later write (hector_store_keep_files). */
int32_t hector_store_remove(hector_store* store, int64_t key);

/* enable != 0: hector_store_remove keeps an object's file for a later write of up to its size
 * (at most twice as large), which renames and overwrites it, while the kept files and the
 * stored objects stay within the peak bytes on disk; otherwise (the default) it deletes it. */
int32_t hector_store_keep_files(hector_store* store, int32_t enable);

/* Arms a deterministic fault: the (skip+1)-th and the following count-1 operations of kind op
 * submitted from now fail with kind (count <= 0 disarms). */
int32_t hector_store_inject_fault(hector_store* store, int32_t op, int32_t kind, int64_t skip,
                                  int64_t count);

/* Statistics: out[0] bytes written, out[1] bytes read, out[2] ns with >= 1 write in flight,
 * out[3] ns with >= 1 read in flight, out[4] objects written, out[5] objects read,
 * out[6] bytes currently stored on disk, out[7] peak bytes stored. */
int32_t hector_store_stats(hector_store* store, int64_t* out);

/* All statistics: writes min(n, HECTOR_STAT_COUNT) values (indices HECTOR_STAT_*) into out and
 * returns how many; -1 on a bad argument. The first 8 are hector_store_stats's. */
int64_t hector_store_stats2(hector_store* store, int64_t* out, int64_t n);

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t hector_crc32c(uint32_t crc, const void* data, int64_t n);

#ifdef __cplusplus
}
#endif
