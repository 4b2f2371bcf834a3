/* Hector native runtime: the placement ABI that compiled training programs call.
 *
 * convert-placement-to-runtime lowers the placement decisions of <f>_train / <f>_backward into
 * calls of the hector_place_* functions below, in the generated code itself: a saved value the
 * planner offloaded is written to the tensor store (hector/offload.h) right after its last use
 * in the forward and read back ahead of its first use in the backward. Values are named by
 * their slot (the saved value's position among <f>_train's saved results); the store objects
 * behind the slots belong to a *frame*, one per training step, which the caller opens before
 * the forward, makes current on its thread before each call of compiled code, and closes
 * after the backward (or when the step is abandoned): closing waits for and deletes every
 * object of the frame.
 *
 * The hector_place_* functions never fail loudly (generated code has no error path): the first
 * failure of a frame (ENOSPC, EIO, a short transfer, a checksum mismatch on read, a slot with
 * no stored data) is recorded in the frame, every later operation of the frame is skipped, and
 * the caller reads it with hector_placement_frame_status after the compiled call returns and
 * discards that call's results.
 */
#pragma once
#include <stdint.h>

#include "hector/offload.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hector_placement_frame hector_placement_frame;

/* Version of the placement ABI; bumped on any incompatible change. */
int32_t hector_placement_abi_version(void);

/* Opens a frame whose objects go to store (which must outlive the frame). */
hector_placement_frame* hector_placement_frame_open(hector_store* store);

/* Makes frame current on the calling thread (NULL: none); returns the previous one. */
hector_placement_frame* hector_placement_frame_activate(hector_placement_frame* frame);

/* HECTOR_OK, or the store status of the frame's first failure (HECTOR_STORE_ERR_*); its errno
 * goes to *errno_out and a message naming the slot and the cause into buf. */
int32_t hector_placement_frame_status(hector_placement_frame* frame, int32_t* errno_out,
                                      char* buf, int64_t buflen);

/* out[0] bytes written, out[1] bytes read, out[2] objects stored now, out[3] writes issued,
 * out[4] reads issued. */
int32_t hector_placement_frame_stats(hector_placement_frame* frame, int64_t* out);

/* Time generated code spent blocked in hector_place_wait since the process started, over all
 * frames: out[0] waiting for writes (ns), out[1] waiting for reads (ns), out[2] waits. The
 * part of the store's I/O that compute did not hide. */
void hector_place_wait_stats(int64_t* out);

/* Waits for every operation of the frame, deletes its objects and frees it (a frame current
 * on this thread stops being current). */
int32_t hector_placement_frame_close(hector_placement_frame* frame);

/* ---- called by generated code, on the current frame ------------------------------------- */

/* Starts writing nbytes at address ptr as slot's object (the buffer stays untouched until
 * hector_place_wait(slot) returns). */
void hector_place_write(int64_t slot, int64_t ptr, int64_t nbytes);

/* Waits for the operation in flight on slot (a write or a prefetch). */
void hector_place_wait(int64_t slot);

/* Starts reading slot's object (exactly nbytes) into ptr. */
void hector_place_prefetch(int64_t slot, int64_t ptr, int64_t nbytes);

/* Deletes slot's object: the backward no longer needs it. */
void hector_place_release(int64_t slot);

#ifdef __cplusplus
}
#endif
