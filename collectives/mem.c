/*
 * mem.c — tempo_mem_alloc and tempo_mem_free: memory that the members of a communicator on one
 * host map into each other's address spaces, so that a shared-memory all-reduce on it reads the
 * peers' buffers directly (allreduce_shm.c, "window"), as NCCL's registered windows do.
 *
 * Allocation is collective over the communicator and numbered (id: the same on every member,
 * since every member allocates in the same order). Each member creates a POSIX shared-memory
 * object with a name only it and its job know (pid, id and a random nonce), maps it, and the
 * members exchange {pid, id, nonce, bytes, ok} with an all-gather; each then maps the objects of
 * the members on its host, the members exchange whether they mapped all of them (a second
 * all-gather: the window is usable only if every member mapped every other's), and each unlinks
 * its own name. After that no name is left in /dev/shm, whatever happens to the processes, and
 * nobody else can open the memory (mode 0600, and the name is gone). Freeing is local: each member
 * unmaps its memory and its mappings of the others'; a mapping keeps the memory alive for as long
 * as anyone has it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "collectives/coll.h"

typedef struct {
    uint64_t pid;
    uint64_t nonce;
    uint64_t bytes; /* 0: this member could not allocate */
    uint64_t want;  /* what it asked for */
    uint32_t id;
    uint32_t err;   /* errno of the failure, when bytes is 0 */
} mem_rec_t;

static void mem_name(char *buf, size_t len, uint64_t pid, uint32_t id, uint64_t nonce)
{
    snprintf(buf, len, "/tempo-mem-%llu-%u-%016llx", (unsigned long long)pid, id,
             (unsigned long long)nonce);
}

static void win_unmap(tempo__mem_win_t *win, int n)
{
    for (int q = 0; win->peer && q < n; q++) {
        if (win->peer[q] && win->peer[q] != win->base) {
            munmap(win->peer[q], win->peer_bytes[q]);
        }
    }
    if (win->base) {
        munmap(win->base, win->bytes);
    }
    tempo__free(win->peer);
    tempo__free(win->peer_bytes);
    tempo__free(win);
}

/* Map member q's object (rec) read-write; NULL when it cannot. */
static char *map_peer(const mem_rec_t *rec, int q, int *err)
{
    char name[96];
    mem_name(name, sizeof(name), rec->pid, rec->id, rec->nonce);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
        *err = errno;
        TEMPO_INFO(TEMPO_SUB_COLL, "tempo_mem_alloc: cannot open comm rank %d's memory %s: %s", q,
                   name, strerror(errno));
        return NULL;
    }
    void *p = mmap(NULL, rec->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    *err = errno;
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

tempo_status_t tempo_mem_alloc(tempo_comm_t comm, size_t bytes, void **ptr_p)
{
    if (!comm || !ptr_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_mem_alloc: %s is NULL",
                          comm ? "ptr_p" : "comm");
    }
    *ptr_p = NULL;
    if (bytes == 0) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_mem_alloc: 0 bytes");
    }
    tempo__world_t *w = comm->world;
    tempo__coll_comm_t *cc = tempo__cc(comm);
    int n = comm->size;
    long pg = sysconf(_SC_PAGESIZE);
    size_t len = TEMPO_ALIGN_UP(bytes, (size_t)(pg > 0 ? pg : 4096));
    tempo__mem_win_t *win = tempo__calloc(1, sizeof(*win), "tempo_mem_alloc");
    mem_rec_t *recs = tempo__calloc((size_t)n, sizeof(*recs), "tempo_mem_alloc");
    int32_t *mapped = tempo__calloc((size_t)n, sizeof(*mapped), "tempo_mem_alloc");
    if (win) {
        win->peer = tempo__calloc((size_t)n, sizeof(*win->peer), "tempo_mem_alloc");
        win->peer_bytes = tempo__calloc((size_t)n, sizeof(*win->peer_bytes), "tempo_mem_alloc");
    }
    pthread_mutex_lock(&w->lock);
    uint32_t id = cc->nwins++;
    pthread_mutex_unlock(&w->lock);

    /* This member's object (a failure is still announced: every member must learn of it). */
    mem_rec_t mine = {(uint64_t)getpid(), 0, 0, bytes, id, 0};
    char name[96] = "";
    if (getrandom(&mine.nonce, sizeof(mine.nonce), 0) != (ssize_t)sizeof(mine.nonce)) {
        mine.nonce = (uint64_t)tempo__now_ns() ^ ((uint64_t)getpid() << 32);
    }
    if (!win || !recs || !mapped || !win->peer || !win->peer_bytes) {
        mine.err = ENOMEM;
    } else {
        mem_name(name, sizeof(name), mine.pid, id, mine.nonce);
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        void *p = MAP_FAILED;
        if (fd >= 0 && ftruncate(fd, (off_t)len) == 0) {
            p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        }
        mine.err = p == MAP_FAILED ? (uint32_t)errno : 0;
        if (fd >= 0) {
            close(fd);
        }
        if (p != MAP_FAILED) {
            win->base = p;
            win->bytes = len;
            mine.bytes = len;
        } else if (fd >= 0) {
            shm_unlink(name);
            name[0] = 0;
        }
    }
    tempo_status_t st = TEMPO_ERR_NOMEM;
    if (!recs || !mapped) {
        goto fail_alone; /* still take part, so that the others fail too instead of waiting */
    }
    st = tempo_allgather(comm, &mine, recs, sizeof(mine), TEMPO_UINT8);
    if (st != TEMPO_OK) {
        goto out;
    }
    for (int q = 0; q < n; q++) {
        if (recs[q].id != id) {
            st = tempo__err(TEMPO_ERR_INVALID,
                            "tempo_mem_alloc: comm rank %d is at its allocation #%u on this "
                            "communicator, this rank at #%u: every member must call it alike",
                            q, recs[q].id, id);
            goto out;
        }
        if (recs[q].bytes == 0) {
            st = tempo__err(recs[q].err == ENOMEM ? TEMPO_ERR_NOMEM : TEMPO_ERR_SYSTEM,
                            "tempo_mem_alloc: comm rank %d could not allocate %llu bytes of "
                            "shared memory: %s",
                            q, (unsigned long long)recs[q].want, strerror((int)recs[q].err));
            goto out;
        }
    }

    /* Map the members on this host; the window is usable when every member mapped all others. */
    int all = comm->all_local;
    for (int q = 0; q < n; q++) {
        if (q == comm->rank) {
            win->peer[q] = win->base;
            win->peer_bytes[q] = win->bytes;
            continue;
        }
        if (!w->peers[tempo__wrank(comm, q)].local) {
            all = 0;
            continue;
        }
        int e = 0;
        win->peer[q] = map_peer(&recs[q], q, &e);
        win->peer_bytes[q] = win->peer[q] ? recs[q].bytes : 0;
        all &= win->peer[q] != NULL;
    }
    int32_t ok = all;
    st = tempo_allgather(comm, &ok, mapped, 1, TEMPO_INT32);
    if (st != TEMPO_OK) {
        goto out;
    }
    win->usable = 1;
    for (int q = 0; q < n; q++) {
        win->usable &= mapped[q] == 1;
    }
    if (!win->usable) {
        TEMPO_INFO(TEMPO_SUB_COLL,
                   "tempo_mem_alloc #%u: not every member maps every other's memory (%s): "
                   "ordinary memory for collectives",
                   id, comm->all_local ? "see the INFO lines above" : "not all on one host");
    }
    win->id = id;
    pthread_mutex_lock(&w->lock);
    win->next = cc->wins;
    cc->wins = win;
    pthread_mutex_unlock(&w->lock);
    *ptr_p = win->base;
    win = NULL;
    st = TEMPO_OK;
out:
    if (name[0]) {
        shm_unlink(name); /* every member has mapped it, or failed: nobody opens it any more */
    }
    if (win) {
        win_unmap(win, n);
    }
    tempo__free(recs);
    tempo__free(mapped);
    if (st != TEMPO_OK) {
        snprintf(comm->last_error, sizeof(comm->last_error), "%s", tempo__errmsg());
    }
    return st;
fail_alone:
    /* Out of memory before the exchange: the others are told through a record of our own. */
    {
        mem_rec_t *r1 = tempo__calloc((size_t)n, sizeof(*r1), "tempo_mem_alloc");
        if (r1) {
            (void)tempo_allgather(comm, &mine, r1, sizeof(mine), TEMPO_UINT8);
            tempo__free(r1);
        }
    }
    st = tempo__err(TEMPO_ERR_NOMEM, "tempo_mem_alloc: out of memory on comm rank %d",
                    comm->rank);
    goto out;
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
    win_unmap(win, comm->size);
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
        win_unmap(win, comm->size);
    }
}
