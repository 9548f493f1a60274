/*
 * gpu/nccl.h — NCCL as the backend of CUDA device buffers (TEMPO_GPU_BACKEND=nccl, gpu/nccl.c).
 *
 * With the backend on, a collective whose buffers are all CUDA device memory is not staged
 * through the host: it runs as one NCCL call on the device buffers, on the communicator's own
 * stream (a blocking one: it waits for the legacy default stream's work, as cuMemcpy would; a
 * caller that computes on streams of its own synchronizes them first, or passes its stream:
 * TEMPO_ATTR_STREAM), and completes when an event recorded after it has
 * passed. The calls go through tempo's engine like every algorithm's: program order on the
 * plain lane, the scheduler's order (priorities, chunks) on the scheduled lane, the same on every
 * rank, which is the order NCCL needs. NCCL's communicator is made at the first such call on a
 * tempo communicator (NCCL's unique id travels by a tempo broadcast), in the calling thread's
 * current CUDA context; NCCL is loaded at run time (dlopen of TEMPO_NCCL_LIBRARY).
 *
 * Requests with a compressor, and what NCCL cannot run (all-to-all, barrier, send/recv, a
 * reduction NCCL lacks, a chunk of a reduce-scatter or all-gather), stay on the host-staged path.
 */
#ifndef TEMPO_GPU_NCCL_H
#define TEMPO_GPU_NCCL_H

#include "core/tempo_int.h"
#include "core/world.h"

/** tempo__sig_t.how of a call run by NCCL. */
#define TEMPO__HOW_NCCL 0x40000000u

/** Whether a call of coll over op with these buffers runs on NCCL: the backend is on, the
 *  collective and the reduction are NCCL's, no compressor, and every non-empty buffer is device
 *  memory. */
int tempo__nccl_takes(int coll, tempo_op_t redop, tempo_dtype_t dtype, int compressed,
                      const void *sendbuf, size_t sbytes, const void *recvbuf, size_t rbytes);

/** Make comm's NCCL communicator if it has none: collective over comm (a tempo broadcast of the
 *  unique id, then ncclCommInitRank), in the caller's thread, without the world lock. */
tempo_status_t tempo__nccl_comm_ready(struct tempo_comm *comm);

/** Prepare op (marked op->nccl) to run as an NCCL call: its progress enqueues it, then polls. */
tempo_status_t tempo__nccl_start(tempo__op_t *op);

/** Free comm's NCCL communicator (aborted if a call failed). */
void tempo__nccl_comm_free(struct tempo_comm *comm);

/** One line for tempo-info -b: the library and its version, or why not. */
void tempo__nccl_describe(char *buf, size_t len);

#endif /* TEMPO_GPU_NCCL_H */
