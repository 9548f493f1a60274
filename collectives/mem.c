/*
 * mem.c — tempo_mem_alloc and tempo_mem_free: memory that the members of a communicator on one
 * host all map, so that a shared-memory all-reduce on it reads the peers' buffers directly
 * (allreduce_shm.c, "window"), as NCCL's registered windows do.
 *
 * Allocation is collective over the communicator and numbered (id: the same on every member,
 * since every member allocates in the same order). The members all-gather {size, id}; where the
 * communicator has shared-memory collectives (every member on this host), one shared region holds
 * every member's memory, each at its own page-aligned offset, created and mapped by the same
 * collective primitive as the collectives' own regions (tempo__shm_region_create: its name is
 * unlinked as soon as every member has mapped it, so nothing is left in /dev/shm whatever happens,
 * and a failure is every member's). Each member sees every other's memory in its own mapping of
 * the region: the layout of perf/all_reduce_bound. Elsewhere the memory is private. Freeing is
 * local: each member unmaps its view, and the memory goes with the last view.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/coll.h"

typedef struct {
    uint64_t bytes; /* page-aligned */
    uint32_t id;
    uint32_t zero;
} mem_rec_t;

static void win_free(tempo__mem_win_t *win)
{
    if (win->region.base) {
        tempo__shm_region_destroy(&win->region);
    } else if (win->base) {
        munmap(win->base, win->bytes);
    }
    tempo__free(win->peer);
    tempo__free(win->peer_bytes);
    tempo__free(win);
}

static tempo_status_t fail(struct tempo_comm *comm, tempo_status_t st)
{
    snprintf(comm->last_error, sizeof(comm->last_error), "%s", tempo__errmsg());
    return st;
}

tempo_status_t tempo_mem_alloc(tempo_comm_t comm, size_t bytes, void **ptr_p)
{
    if (!comm || !ptr_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_mem_alloc: %s is NULL",
                          comm ? "ptr_p" : "comm");
    }
    *ptr_p = NULL;
    if (bytes == 0) {
        return fail(comm, tempo__err(TEMPO_ERR_INVALID, "tempo_mem_alloc: 0 bytes"));
    }
    tempo__world_t *w = comm->world;
    tempo__coll_comm_t *cc = tempo__cc(comm);
    int n = comm->size;
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = (size_t)(pg > 0 ? pg : 4096);
    pthread_mutex_lock(&w->lock);
    mem_rec_t mine = {TEMPO_ALIGN_UP(bytes, page), cc->nwins++, 0};
    pthread_mutex_unlock(&w->lock);
    /* Out of memory for these few bytes, a member returns at once: its peers' exchange then
     * fails with TEMPO_ERR_TIMEOUT naming it. A region that cannot be created fails on all. */
    mem_rec_t *recs = tempo__calloc((size_t)n, sizeof(*recs), "tempo_mem_alloc");
    tempo__mem_win_t *win = tempo__calloc(1, sizeof(*win), "tempo_mem_alloc");
    if (win) {
        win->peer = tempo__calloc((size_t)n, sizeof(*win->peer), "tempo_mem_alloc");
        win->peer_bytes = tempo__calloc((size_t)n, sizeof(*win->peer_bytes), "tempo_mem_alloc");
    }
    if (!recs || !win || !win->peer || !win->peer_bytes) {
        tempo__free(recs);
        if (win) {
            win_free(win);
        }
        return fail(comm, tempo__err(TEMPO_ERR_NOMEM, "tempo_mem_alloc: out of memory"));
    }
    tempo_status_t st = tempo_allgather(comm, &mine, recs, sizeof(mine), TEMPO_UINT8);
    size_t total = 0;
    for (int q = 0; q < n && st == TEMPO_OK; q++) {
        if (recs[q].id != mine.id) {
            st = tempo__err(TEMPO_ERR_INVALID,
                            "tempo_mem_alloc: comm rank %d is at its allocation #%u on this "
                            "communicator, this rank at #%u: every member must call it alike",
                            q, recs[q].id, mine.id);
        }
        win->peer_bytes[q] = recs[q].bytes;
        total += recs[q].bytes;
    }
    win->id = mine.id;
    win->bytes = mine.bytes;
    if (st == TEMPO_OK && cc->shm) { /* every member on this host, shared memory on */
        pthread_mutex_lock(&w->lock);
        st = tempo__shm_region_create(comm, total, "mem", &win->region);
        pthread_mutex_unlock(&w->lock);
        size_t off = 0;
        for (int q = 0; q < n && st == TEMPO_OK; q++) {
            win->peer[q] = (char *)win->region.base + off;
            off += recs[q].bytes;
        }
        if (st == TEMPO_OK) {
            win->base = win->peer[comm->rank];
            win->usable = 1;
        }
    } else if (st == TEMPO_OK) {
        void *p = mmap(NULL, win->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                       0);
        if (p == MAP_FAILED) {
            st = tempo__err(TEMPO_ERR_NOMEM, "tempo_mem_alloc: %zu bytes: out of memory",
                            win->bytes);
        } else {
            win->base = p;
            TEMPO_INFO(TEMPO_SUB_COLL,
                       "tempo_mem_alloc #%u: the communicator has no shared-memory collectives "
                       "(ranks on several hosts, or shared memory off): ordinary memory",
                       win->id);
        }
    }
    tempo__free(recs);
    if (st != TEMPO_OK) {
        win_free(win);
        return fail(comm, st);
    }
    pthread_mutex_lock(&w->lock);
    win->next = cc->wins;
    cc->wins = win;
    pthread_mutex_unlock(&w->lock);
    *ptr_p = win->base;
    return TEMPO_OK;
}

tempo_status_t tempo_mem_free(tempo_comm_t comm, void *ptr)
{
    if (!comm) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_mem_free: comm is NULL");
    }
    if (!ptr) {
        return TEMPO_OK;
    }
    tempo__world_t *w = comm->world;
    tempo__coll_comm_t *cc = tempo__cc(comm);
    pthread_mutex_lock(&w->lock);
    tempo__mem_win_t **pp = &cc->wins;
    while (*pp && (*pp)->base != ptr) {
        pp = &(*pp)->next;
    }
    tempo__mem_win_t *win = *pp;
    if (win) {
        *pp = win->next;
    }
    pthread_mutex_unlock(&w->lock);
    if (!win) {
        tempo_status_t st = tempo__err(TEMPO_ERR_INVALID,
                                       "tempo_mem_free: %p is not memory from tempo_mem_alloc on "
                                       "this communicator",
                                       ptr);
        snprintf(comm->last_error, sizeof(comm->last_error), "%s", tempo__errmsg());
        return st;
    }
    win_free(win);
    return TEMPO_OK;
}

const tempo__mem_win_t *tempo__mem_find(struct tempo_comm *comm, const void *p, size_t len)
{
    tempo__coll_comm_t *cc = tempo__cc(comm);
    uintptr_t a = (uintptr_t)p;
    for (const tempo__mem_win_t *win = cc ? cc->wins : NULL; win; win = win->next) {
        uintptr_t b = (uintptr_t)win->base;
        if (a >= b && a - b <= win->bytes && len <= win->bytes - (a - b)) {
            return win->usable ? win : NULL;
        }
    }
    return NULL;
}

const tempo__mem_win_t *tempo__mem_by_id(struct tempo_comm *comm, uint32_t id)
{
    tempo__coll_comm_t *cc = tempo__cc(comm);
    for (const tempo__mem_win_t *win = cc ? cc->wins : NULL; win; win = win->next) {
        if (win->id == id) {
            return win;
        }
    }
    return NULL;
}

void tempo__mem_free_all(struct tempo_comm *comm)
{
    tempo__coll_comm_t *cc = tempo__cc(comm);
    while (cc && cc->wins) {
        tempo__mem_win_t *win = cc->wins;
        cc->wins = win->next;
        win_free(win);
    }
}
