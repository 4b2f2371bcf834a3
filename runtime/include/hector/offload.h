/* Hector native runtime: asynchronous tensor store on files (activation offloading).
 *
 * A store owns one private directory (mode 0700) named hector-offload-<pid>-<n> under a root
 * directory; it is removed by hector_store_close. Opening a store first removes the
 * directories of dead processes under the same root (a directory is stale when its owner pid
 * is gone, or when the lock file inside it is not locked by anyone).
 *
 * Each stored object (one tensor storage) is one file, written and read by a pool of worker
 * threads with pwrite/pread in chunks (a thread pool: io_uring is not used by this build),
 * with O_DIRECT and aligned bounce buffers where the filesystem accepts O_DIRECT, buffered I/O
 * otherwise. Every chunk carries a CRC32C kept in memory and verified when it is read back.
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

/* Fault kinds for hector_store_inject_fault. */
#define HECTOR_FAULT_NONE 0
#define HECTOR_FAULT_ENOSPC 1
#define HECTOR_FAULT_EIO 2
#define HECTOR_FAULT_SHORT 3
/* Operations faults apply to. */
#define HECTOR_OP_WRITE 0
#define HECTOR_OP_READ 1

typedef struct hector_store hector_store;

/* Version of the store ABI; bumped on any incompatible change. */
int32_t hector_store_abi_version(void);

/* Opens a store under root (created with mode 0700 if missing). threads: number of I/O
 * workers (>= 1); chunk_bytes: request split size (multiple of 4096, >= 4096); direct: 1 use
 * O_DIRECT if the filesystem accepts it, 0 never. On failure returns HECTOR_STORE_ERR_IO or
 * HECTOR_STORE_ERR_ARG and writes a message into err (errlen bytes). The environment variable
 * HECTOR_OFFLOAD_FAULT="op:kind[:skip[:count]]" (op write|read, kind enospc|eio|short) arms a
 * fault at open, like hector_store_inject_fault. */
int32_t hector_store_open(const char* root, int32_t threads, int64_t chunk_bytes, int32_t direct,
                          hector_store** out, char* err, int64_t errlen);

/* Waits for every operation, removes every file and the directory, frees the store. */
int32_t hector_store_close(hector_store* store);

/* Removes the directories of dead processes under root; returns how many were removed. */
int64_t hector_store_clean_stale(const char* root);

/* Copies the store's directory path into buf (NUL-terminated). */
int32_t hector_store_path(hector_store* store, char* buf, int64_t buflen);

/* 1 if O_DIRECT is in use, 0 if buffered; the reason for buffered I/O goes into buf. */
int32_t hector_store_direct(hector_store* store, char* buf, int64_t buflen);

/* Starts writing nbytes from src into a new object; its key goes to *key_out. */
int32_t hector_store_write(hector_store* store, const void* src, int64_t nbytes,
                           int64_t* key_out);

/* Starts reading object key (all nbytes of it) into dst. */
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

/* Forgets object key and deletes its file (after its in-flight operation, if any). */
int32_t hector_store_remove(hector_store* store, int64_t key);

/* Arms a deterministic fault: the (skip+1)-th and the following count-1 operations of kind op
 * submitted from now fail with kind (count <= 0 disarms). */
int32_t hector_store_inject_fault(hector_store* store, int32_t op, int32_t kind, int64_t skip,
                                  int64_t count);

/* Statistics: out[0] bytes written, out[1] bytes read, out[2] ns with >= 1 write in flight,
 * out[3] ns with >= 1 read in flight, out[4] objects written, out[5] objects read,
 * out[6] bytes currently stored on disk, out[7] peak bytes stored. */
int32_t hector_store_stats(hector_store* store, int64_t* out);

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t hector_crc32c(uint32_t crc, const void* data, int64_t n);

#ifdef __cplusplus
}
#endif
