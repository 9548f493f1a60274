/*
 * gpu/cuda.h — CUDA device buffers in the collectives and point-to-point calls (gpu/cuda.c).
 *
 * The CUDA driver is loaded at run time (dlopen of libcuda.so.1), so that libtempo has no link-time
 * dependency on CUDA and runs unchanged where there is no driver or no GPU: there every buffer is
 * host memory, and a buffer declared CUDA memory (tempo_attr_t.memtype) is refused with the reason.
 *
 * This version stages: a call whose buffers are device memory runs on page-locked host copies
 * (copied in before the call is posted, copied out when the caller completes it: tempo_wait,
 * tempo_test or the blocking call), so every algorithm, the scheduled lane and the compressors
 * work on device buffers unchanged, at the cost of the copies. The page-locked buffers are kept
 * for later calls (a pool per process, up to 16 buffers and 1 GiB). Copies in of 1 MB or more
 * are pipelined: asynchronous, in segments, and an operation starts when its part has landed.
 *
 * With a CUDA stream (TEMPO_ATTR_STREAM) the copies are stream-ordered: in after the stream's
 * earlier work, out when the call completes, before the stream's later work (gpu/cuda.c).
 */
#ifndef TEMPO_GPU_CUDA_H
#define TEMPO_GPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "core/tempo_int.h"

/** Whether device buffers can be used here: 1, or 0 with why (no driver, no device, not built
 *  with CUDA). Loads the driver on the first call. */
int tempo__cuda_usable(char *why, size_t len);

/** The memory type of p: TEMPO_MEMTYPE_CUDA for device memory, TEMPO_MEMTYPE_HOST for anything
 *  the CPU can read (ordinary, page-locked or managed memory), and always HOST where the driver is
 *  not usable. */
tempo_memtype_t tempo__cuda_memtype(const void *p);

/** A call's staging (owned by its operation; tempo__cuda_stage_done frees it). */
typedef struct tempo__cuda_stage tempo__cuda_stage_t;

/** Stage the buffers of a call: *sendbuf_p (sbytes, NULL or not needed: 0) and *recvbuf_p
 *  (rbytes) are replaced by host copies where they are device memory (declared: memtype; or
 *  found, TEMPO_MEMTYPE_AUTO), the send side copied in now (1 MB or more: started now, see
 *  tempo__cuda_stage_landed). *stage_p is NULL when nothing is
 *  device memory. ordered: the call is ordered on the CUDA stream `stream` (every non-empty
 *  buffer must be device memory; a call without buffers makes the stream wait for it; the send
 *  side is copied in on the stream, after its earlier work), and the caller must call
 *  tempo__cuda_stage_arm once the call is posted and tempo__cuda_stage_ready when it
 *  completes. Errors: TEMPO_ERR_UNSUPPORTED
 *  (declared CUDA memory, or a stream, where the driver is not usable), TEMPO_ERR_INVALID (a
 *  declared or stream-ordered buffer that is not device memory), TEMPO_ERR_NOMEM,
 *  TEMPO_ERR_SYSTEM (a failed copy), with a message. */
tempo_status_t tempo__cuda_stage(tempo_memtype_t memtype, int ordered, void *stream,
                                 const void **sendbuf_p, size_t sbytes, void **recvbuf_p,
                                 size_t rbytes, tempo__cuda_stage_t **stage_p);

/** The call of a stream-ordered stage was posted: make its stream wait for the call and copy
 *  the result out after it (before the call is posted, a call that fails at posting would leave
 *  the stream a copy of nothing into the receive buffer). NULL or not stream-ordered: nothing.
 *  Error: TEMPO_ERR_SYSTEM with the message (the call then runs, and completes with that error:
 *  its result never reaches the stream). */
tempo_status_t tempo__cuda_stage_arm(tempo__cuda_stage_t *g);

/** Whether the host copy of the send side of g has landed under [p, p + len) (host pointers in
 *  the staging; p NULL: all of it): 1, 0 (not yet), or -1 with the message. A copy in of 1 MB
 *  or more runs asynchronously, in segments (not for stream-ordered calls): the call, or each
 *  chunk of a scheduled request, starts once its part has landed (an engine gate, api.c), while
 *  later parts are still being copied. NULL or nothing pending: 1. Lock held (not thread-safe). */
int tempo__cuda_stage_landed(tempo__cuda_stage_t *g, const void *p, size_t len);

/** Part [p, p + len) of the result (host pointers in the staging) is final: copy it out now,
 *  asynchronously (a chunk of a scheduled request completed, while the others still run);
 *  tempo__cuda_stage_done then only waits for these copies where they cover the whole result,
 *  and copies it all otherwise. Not for stream-ordered stages (nothing is done). Lock held. */
void tempo__cuda_stage_out(tempo__cuda_stage_t *g, const void *p, size_t len);

/** The call of a stream-ordered stage completed (whatever its status): its stream goes on.
 *  Cheap (one store), for any thread; NULL or a stage without a stream: nothing. */
void tempo__cuda_stage_ready(tempo__cuda_stage_t *g);

/** The call completed with status st: copy the result out where it succeeded (a stream-ordered
 *  stage: its stream does), free the staging. Returns st, or the copy's error. */
tempo_status_t tempo__cuda_stage_done(tempo__cuda_stage_t *g, tempo_status_t st);

/** Copy n bytes from src to dst, either of which may be device memory (the driver's copy, in the
 *  device pointer's context; memcpy where neither is). Error: TEMPO_ERR_SYSTEM with the message,
 *  what naming the copy in it. */
tempo_status_t tempo__cuda_copy(void *dst, const void *src, size_t n, const char *what);

/** Zero n bytes at p, device memory (the driver's memset) or not. Error as tempo__cuda_copy. */
tempo_status_t tempo__cuda_zero(void *p, size_t n);

/** n bytes of page-locked host memory in the context of the device buffer like (for a buffer that
 *  device memory is copied to and from), or of ordinary aligned memory where like is not device
 *  memory; *ctx_p says which, for tempo__cuda_host_free. NULL: no memory. */
void *tempo__cuda_host_alloc(const void *like, size_t n, void **ctx_p);
void tempo__cuda_host_free(void *p, void *ctx);

/* Streams and events for gpu/nccl.c (contexts and handles as void *: CUcontext, CUstream,
 * CUevent). Each runs in ctx, pushed; errors set the message. */
/** A new stream in the calling thread's current context (*ctx_p); a blocking one (its work
 *  waits for the legacy default stream's, as cuMemcpy's does). */
tempo_status_t tempo__cuda_stream_new(void **ctx_p, void **stream_p);
void tempo__cuda_stream_free(void *ctx, void *stream);
/** An event recorded on stream now. */
tempo_status_t tempo__cuda_event_after(void *ctx, void *stream, void **ev_p);
/** Whether stream has passed ev: 1, 0 (not yet), or -1 with the message. */
int tempo__cuda_event_passed(void *ctx, void *ev);
/** Wait until stream has passed ev (0), or -1 with the message. */
int tempo__cuda_event_wait(void *ctx, void *ev);
void tempo__cuda_event_free(void *ctx, void *ev);
/** Make ctx current in the calling thread (tempo__cuda_ctx_pop undoes it): for calls into
 *  libraries that run in the current context (NCCL). 0, or -1 with the message. */
int tempo__cuda_ctx_push(void *ctx);
void tempo__cuda_ctx_pop(void);

/* CUDA IPC (gpu/ipc.c): device buffers of the ranks of one host, mapped into each other. */
/** A device buffer as another process opens it: its allocation's IPC handle, the buffer's
 *  offset in that allocation, and the device's UUID. */
typedef struct {
    unsigned char handle[64];
    unsigned char uuid[16];
    uint64_t offset;
    uint64_t size; /* of the allocation */
} tempo__cuda_ipc_t;
/** Whether CUDA IPC and tempo's kernels work here: 1, or 0 with why (no driver, a driver without
 *  the entry points, a build without nvcc). */
int tempo__cuda_ipc_usable(char *why, size_t len);
/** Export device buffer p (memory from cuMemAlloc/cudaMalloc): 0, or -1 with the message. */
int tempo__cuda_ipc_export(const void *p, tempo__cuda_ipc_t *out);
/** Map a peer's exported allocation into like's context (like: a device buffer of this process):
 *  *base_p is its base here (add the offset), *ctx_p that context; 0, or -1 with the message.
 *  tempo__cuda_ipc_close(ctx, base) unmaps it. */
int tempo__cuda_ipc_open(const void *like, const tempo__cuda_ipc_t *h, void **base_p,
                         void **ctx_p);
void tempo__cuda_ipc_close(void *ctx, void *base);
/** Wait for the work on the legacy default stream of device buffer p's context (host memory:
 *  nothing). */
tempo_status_t tempo__cuda_sync(const void *p);
/** dst[i] = src[0][i] op ... op src[n-1][i] (gpu/kernels.h's tempo__gpu_reduce_n, n <= 8), by
 *  tempo's kernel in dst's context, after that context's default-stream work, waited for. Any
 *  src may be a peer's buffer opened with tempo__cuda_ipc_open. Errors as tempo__cuda_copy, and
 *  TEMPO_ERR_UNSUPPORTED where the kernels cannot be loaded. */
tempo_status_t tempo__cuda_reduce(void *dst, const void *const *src, int n, size_t count,
                                  tempo_dtype_t dtype, tempo_op_t op);

/** One line for tempo-info -b: the driver, its version and the devices, or why not. */
void tempo__cuda_describe(char *buf, size_t len);

#endif /* TEMPO_GPU_CUDA_H */
