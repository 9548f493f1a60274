/*
 * gpu/ipc.h — all-reduce of CUDA device buffers between the ranks of one host through CUDA IPC
 * (TEMPO_GPU_IPC=1, gpu/ipc.c).
 *
 * With it on, a blocking tempo_allreduce on a communicator whose 2-8 ranks are all on this host
 * first exchanges a small record with every rank (a host all-gather): whether its buffers are
 * device memory it can export, their IPC handles, the device, the call's count, dtype and op.
 * Where every record allows it, the all-reduce runs on the device buffers themselves: each rank
 * maps the others' buffers (cuIpcOpenMemHandle, kept for later calls), reduces its 1/n share of
 * the elements from all ranks' send buffers with tempo's kernel (gpu/kernels.cu, built into the
 * library), then copies the other shares from their owners' receive buffers, with host
 * agreements between the steps. Otherwise (a rank with host buffers, ranks on different
 * devices, disagreeing arguments, an allocation IPC cannot export) every rank takes the
 * host-staged path, as with TEMPO_GPU_IPC=0, whose checks report disagreeing arguments.
 * Several ranks may share one GPU. Every rank must set the same TEMPO_GPU_IPC.
 */
#ifndef TEMPO_GPU_IPC_H
#define TEMPO_GPU_IPC_H

#include "core/tempo_int.h"
#include "core/world.h"

/** Whether this rank takes part in the record exchange of a blocking call of coll on comm: the
 *  same answer on every rank (it depends on the configuration and the communicator only). */
int tempo__ipc_joins(const struct tempo_comm *comm, int coll);

/** The blocking all-reduce through CUDA IPC, collective over comm (tempo__ipc_joins said so on
 *  every rank). *taken 0: every rank found it cannot run this way and nothing was done (run the
 *  host-staged path); 1: it ran, with the status returned. Errors where *taken is 0: the
 *  exchange itself failed (that status). */
tempo_status_t tempo__ipc_allreduce(struct tempo_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, tempo_dtype_t dtype, tempo_op_t op, int *taken);

/** Unmap the peers' buffers comm kept mapped (comm->ipc). */
void tempo__ipc_comm_free(struct tempo_comm *comm);

#endif /* TEMPO_GPU_IPC_H */
