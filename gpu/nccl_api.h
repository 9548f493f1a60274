/*
 * gpu/nccl_api.h — the NCCL entry points tempo loads at run time (gpu/nccl.c), as one table type
 * and one list of names, for the library and for tests/gpu/nccl_shim.c (which forwards them).
 * Include only where nccl.h is available (TEMPO_HAVE_NCCL).
 */
#ifndef TEMPO_GPU_NCCL_API_H
#define TEMPO_GPU_NCCL_API_H

#include <stddef.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* (nccl.h declares f() functions) */
#include <nccl.h>
#pragma GCC diagnostic pop

typedef struct {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*version)(int *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                   ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int,
                           ncclComm_t, cudaStream_t);
} tempo__nccl_api_t;

/* X(member, exported name) for every entry point of tempo__nccl_api_t. */
#define TEMPO__NCCL_ENTRY_POINTS(X)                                                                \
    X(get_unique_id, "ncclGetUniqueId")                                                            \
    X(init_rank, "ncclCommInitRank")                                                               \
    X(destroy, "ncclCommDestroy")                                                                  \
    X(abort, "ncclCommAbort")                                                                      \
    X(async_error, "ncclCommGetAsyncError")                                                        \
    X(error_string, "ncclGetErrorString")                                                          \
    X(version, "ncclGetVersion")                                                                   \
    X(all_reduce, "ncclAllReduce")                                                                 \
    X(reduce_scatter, "ncclReduceScatter")                                                         \
    X(all_gather, "ncclAllGather")                                                                 \
    X(broadcast, "ncclBroadcast")                                                                  \
    X(reduce, "ncclReduce")

#endif /* TEMPO_GPU_NCCL_API_H */
