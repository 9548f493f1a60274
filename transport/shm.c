/*
 * shm.c — the shared-memory transport between ranks of one host, and shared regions for
 * collectives.
 *
 * Segment: the lowest world rank of the host creates a POSIX shared-memory object holding one
 * single-producer/single-consumer byte ring per ordered pair of local ranks (TEMPO_SHM_RING_BYTES
 * each, rounded up to a power of two). Messages are framed by the stream layer, so a ring is just a
 * byte pipe: the producer copies into it and publishes its tail with a release store; the consumer
 * copies out (straight into the receive buffer for large payloads) and publishes its head. Head and
 * tail sit on separate cache lines and each side caches the other's index to avoid needless
 * traffic.
 *
 * Creation protocol (over the tcp connections, which exist for every pair): the creator maps and
 * initialises the object and tells the others it is ready; each maps it and acknowledges; the
 * creator unlinks the name (so a crash leaves nothing in /dev/shm) and tells everyone whether all
 * succeeded. If anything fails (no room in /dev/shm, for example) every rank of the host falls back
 * to tcp, with a warning: all ranks decide the same way.
 *
 * A ring never reports end-of-stream; a dead peer is noticed through its tcp connection.
 */
#include "config.h"

#include "transport/tl_int.h"
#include "core/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEG_MAGIC 0x54454d504f53484dull /* "TEMPOSHM" */
#define CODE_READY 1u
#define CODE_OPENED 2u
#define CODE_DECIDE 3u

typedef struct shm_ring {
    _Atomic uint64_t tail; /* bytes produced */
    char pad0[TEMPO_CACHELINE - sizeof(uint64_t)];
    _Atomic uint64_t head; /* bytes consumed */
    char pad1[TEMPO_CACHELINE - sizeof(uint64_t)];
    char data[];
} shm_ring_t;

typedef struct seg_hdr {
    uint64_t magic;
    uint64_t job_uuid;
    uint64_t size;
    uint64_t ring_bytes;
    uint32_t nlocal;
} seg_hdr_t;

typedef struct shm_ep {
    tempo__stream_t stream;
    shm_ring_t *out;   /* this rank -> peer */
    shm_ring_t *in;    /* peer -> this rank */
    uint64_t mask;     /* ring_bytes - 1 */
    uint64_t out_tail; /* producer's own tail */
    uint64_t out_head; /* cached consumer head */
    uint64_t in_head;  /* consumer's own head */
    uint64_t in_tail;  /* cached producer tail */
} shm_ep_t;

struct shm_tl {
    tempo__world_t *world;
    void *base;
    size_t size;
    int nlocal;
    int *local;     /* (nlocal) world ranks of this host, ascending */
    shm_ep_t **eps; /* (world size) NULL unless the peer is served by shm */
};

/* ---------------------------------------------------------------------------------------------- */
/* Ring pipe                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static ssize_t ring_writev(void *pipe, const struct iovec *iov, int iovcnt)
{
    shm_ep_t *ep = pipe;
    uint64_t cap = ep->mask + 1;
    size_t want = 0;
    for (int i = 0; i < iovcnt; i++) {
        want += iov[i].iov_len;
    }
    uint64_t space = cap - (ep->out_tail - ep->out_head);
    if (space < want) {
        ep->out_head = atomic_load_explicit(&ep->out->head, memory_order_acquire);
        space = cap - (ep->out_tail - ep->out_head);
        if (space == 0) {
            return 0;
        }
    }
    size_t written = 0;
    for (int i = 0; i < iovcnt && space > 0; i++) {
        const char *src = iov[i].iov_base;
        size_t n = TEMPO_MIN((uint64_t)iov[i].iov_len, space);
        uint64_t off = ep->out_tail & ep->mask;
        size_t first = (size_t)TEMPO_MIN((uint64_t)n, cap - off);
        memcpy(ep->out->data + off, src, first);
        memcpy(ep->out->data, src + first, n - first);
        ep->out_tail += n;
        space -= n;
        written += n;
        if (n < iov[i].iov_len) {
            break;
        }
    }
    atomic_store_explicit(&ep->out->tail, ep->out_tail, memory_order_release);
    return (ssize_t)written;
}

static ssize_t ring_read(void *pipe, void *buf, size_t len)
{
    shm_ep_t *ep = pipe;
    uint64_t avail = ep->in_tail - ep->in_head;
    if (avail < len) {
        ep->in_tail = atomic_load_explicit(&ep->in->tail, memory_order_acquire);
        avail = ep->in_tail - ep->in_head;
        if (avail == 0) {
            return 0;
        }
    }
    uint64_t cap = ep->mask + 1;
    size_t n = (size_t)TEMPO_MIN((uint64_t)len, avail);
    uint64_t off = ep->in_head & ep->mask;
    size_t first = (size_t)TEMPO_MIN((uint64_t)n, cap - off);
    memcpy(buf, ep->in->data + off, first);
    memcpy((char *)buf + first, ep->in->data, n - first);
    ep->in_head += n;
    atomic_store_explicit(&ep->in->head, ep->in_head, memory_order_release);
    return (ssize_t)n;
}

static const tempo__pipe_ops_t ring_pipe_ops = {ring_writev, ring_read};

static tempo_status_t ep_isend(void *ep, tempo__xfer_t *x)
{
    return tempo__stream_isend(&((shm_ep_t *)ep)->stream, x);
}
static tempo_status_t ep_irecv(void *ep, tempo__xfer_t *x)
{
    return tempo__stream_irecv(&((shm_ep_t *)ep)->stream, x);
}
static void ep_cancel(void *ep, tempo__xfer_t *x)
{
    tempo__stream_cancel(&((shm_ep_t *)ep)->stream, x);
}

static tempo_status_t ep_note(void *ep, const void *data, size_t len)
{
    return tempo__stream_send_note(&((shm_ep_t *)ep)->stream, data, len);
}

static void ep_purge(void *ep, int ctx)
{
    tempo__stream_purge_ctx(&((shm_ep_t *)ep)->stream, ctx);
}

const tempo__tl_ops_t tempo__shm_ops = {"shm", ep_isend, ep_irecv, ep_cancel, ep_note, ep_purge};

/* ---------------------------------------------------------------------------------------------- */
/* Collective creation of a shared object                                                         */
/* ---------------------------------------------------------------------------------------------- */

/* Map `name` of `size` bytes among world ranks ranks[0..n) (ranks[0] creates it). init(base) runs
 * on the creator before the others map it. All ranks return the same status: TEMPO_OK, or the
 * creator's or a member's failure (the message says which). */
static tempo_status_t shm_open_collective(tempo__world_t *w, const int *ranks, int n, int me,
                                          const char *name, size_t size, uint32_t code_base,
                                          void (*init)(void *base, void *arg), void *arg,
                                          uint64_t deadline, void **base_p)
{
    void *base = MAP_FAILED;
    int32_t my_st = 0;
    char why[TEMPO_ERRMSG_LEN] = "";
    tempo_status_t st = TEMPO_OK;

    if (me == 0) {
        shm_unlink(name); /* a stale object of a crashed job with the same name */
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        int e = 0;
        if (fd < 0) {
            e = errno;
            snprintf(why, sizeof(why), "shm_open(%s): %s", name, strerror(e));
        } else if (ftruncate(fd, (off_t)size) != 0) {
            e = errno;
            snprintf(why, sizeof(why), "ftruncate(%s, %zu): %s", name, size, strerror(e));
        } else if ((e = posix_fallocate(fd, 0, (off_t)size)) != 0) {
            char b[32];
            snprintf(why, sizeof(why),
                     "cannot reserve %s in /dev/shm for %s: %s (is /dev/shm too "
                     "small? TEMPO_SHM=0 disables shared memory)",
                     tempo__fmt_bytes(size, b, sizeof(b)), name, strerror(e));
        } else if ((base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
                   MAP_FAILED) {
            e = errno;
            snprintf(why, sizeof(why), "mmap(%s): %s", name, strerror(e));
        }
        if (fd >= 0) {
            close(fd);
        }
        if (base == MAP_FAILED) {
            my_st = e == ENOSPC || e == ENOMEM ? TEMPO_ERR_NOMEM : TEMPO_ERR_SYSTEM;
            shm_unlink(name);
        } else if (init) {
            init(base, arg);
        }
        /* ready -> opened -> decide */
        tempo__ctrl_msg_t *msgs = tempo__calloc((size_t)n, sizeof(*msgs), "shm setup");
        int32_t *acks = tempo__calloc((size_t)n, sizeof(*acks), "shm setup");
        if (!msgs || !acks) {
            tempo__free(msgs);
            tempo__free(acks);
            if (base != MAP_FAILED) {
                munmap(base, size);
            }
            shm_unlink(name);
            return TEMPO_ERR_NOMEM;
        }
        for (int i = 1; i < n; i++) {
            msgs[i - 1] =
                (tempo__ctrl_msg_t){ranks[i], code_base | CODE_READY, &my_st, sizeof(my_st)};
        }
        st = tempo__ctrl_exchange(w, msgs, n - 1, NULL, 0, deadline, "shared memory setup");
        if (st == TEMPO_OK) {
            for (int i = 1; i < n; i++) {
                msgs[i - 1] = (tempo__ctrl_msg_t){ranks[i], code_base | CODE_OPENED, &acks[i],
                                                  sizeof(acks[i])};
            }
            st = tempo__ctrl_exchange(w, NULL, 0, msgs, n - 1, deadline, "shared memory setup");
        }
        shm_unlink(name);
        int32_t decision = my_st;
        for (int i = 1; i < n && decision == 0 && st == TEMPO_OK; i++) {
            if (acks[i] != 0) {
                decision = acks[i];
                snprintf(why, sizeof(why), "world rank %d could not map %s", ranks[i], name);
            }
        }
        if (st == TEMPO_OK) {
            for (int i = 1; i < n; i++) {
                msgs[i - 1] = (tempo__ctrl_msg_t){ranks[i], code_base | CODE_DECIDE, &decision,
                                                  sizeof(decision)};
            }
            st = tempo__ctrl_exchange(w, msgs, n - 1, NULL, 0, deadline, "shared memory setup");
        }
        tempo__free(msgs);
        tempo__free(acks);
        if (st == TEMPO_OK && decision != 0) {
            st =
                tempo__err_quiet((tempo_status_t)decision, "%s", why[0] ? why : "shm setup failed");
        }
    } else {
        int32_t ready = 0, decision = 0;
        tempo__ctrl_msg_t m = {ranks[0], code_base | CODE_READY, &ready, sizeof(ready)};
        st = tempo__ctrl_exchange(w, NULL, 0, &m, 1, deadline, "shared memory setup");
        if (st == TEMPO_OK && ready == 0) {
            int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
            struct stat sb;
            if (fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size == size) {
                base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            }
            if (base == MAP_FAILED) {
                my_st = TEMPO_ERR_SYSTEM;
                TEMPO_WARN(TEMPO_SUB_TRANSPORT, "cannot map shared memory %s: %s", name,
                           strerror(errno));
            }
            if (fd >= 0) {
                close(fd);
            }
        } else if (st == TEMPO_OK) {
            my_st = ready;
        }
        if (st == TEMPO_OK) {
            m = (tempo__ctrl_msg_t){ranks[0], code_base | CODE_OPENED, &my_st, sizeof(my_st)};
            st = tempo__ctrl_exchange(w, &m, 1, NULL, 0, deadline, "shared memory setup");
        }
        if (st == TEMPO_OK) {
            m = (tempo__ctrl_msg_t){ranks[0], code_base | CODE_DECIDE, &decision, sizeof(decision)};
            st = tempo__ctrl_exchange(w, NULL, 0, &m, 1, deadline, "shared memory setup");
        }
        if (st == TEMPO_OK && decision != 0) {
            st = tempo__err_quiet((tempo_status_t)decision,
                                  "world rank %d could not create or map shared memory %s "
                                  "(see its log)",
                                  ranks[0], name);
        }
    }
    if (st != TEMPO_OK) {
        if (base != MAP_FAILED) {
            munmap(base, size);
        }
        return st;
    }
    *base_p = base;
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Transport setup                                                                                */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t uuid;
    size_t size;
    size_t ring_bytes;
    int nlocal;
} seg_init_arg_t;

static void seg_init(void *base, void *arg)
{
    seg_init_arg_t *a = arg;
    seg_hdr_t *h = base;
    h->job_uuid = a->uuid;
    h->size = a->size;
    h->ring_bytes = a->ring_bytes;
    h->nlocal = (uint32_t)a->nlocal;
    atomic_thread_fence(memory_order_release);
    h->magic = SEG_MAGIC;
}

static size_t ring_stride(size_t ring_bytes)
{
    return sizeof(shm_ring_t) + ring_bytes;
}

static shm_ring_t *ring_at(void *base, size_t ring_bytes, int nlocal, int from, int to)
{
    size_t off = TEMPO_ALIGN_UP(sizeof(seg_hdr_t), TEMPO_CACHELINE) +
                 ((size_t)from * (size_t)nlocal + (size_t)to) * ring_stride(ring_bytes);
    return (shm_ring_t *)((char *)base + off);
}

tempo_status_t tempo__shm_setup(tempo__world_t *w, uint64_t deadline, shm_tl_t **shm_p)
{
    *shm_p = NULL;
    if (!tempo__cfg.shm || w->nlocal < 2) {
        return TEMPO_OK;
    }
    shm_tl_t *s = tempo__calloc(1, sizeof(*s), "shm transport");
    if (!s) {
        return TEMPO_ERR_NOMEM;
    }
    s->world = w;
    s->local = tempo__malloc(sizeof(int) * (size_t)w->nlocal, "shm local ranks");
    s->eps = tempo__calloc((size_t)w->size, sizeof(*s->eps), "shm endpoints");
    if (!s->local || !s->eps) {
        tempo__shm_close(s, 0, 0);
        return TEMPO_ERR_NOMEM;
    }
    int me = -1;
    for (int r = 0; r < w->size; r++) {
        if (w->peers[r].local) {
            if (r == w->rank) {
                me = s->nlocal;
            }
            s->local[s->nlocal++] = r;
        }
    }
    size_t ring_bytes = 4096;
    while (ring_bytes < tempo__cfg.shm_ring_bytes && ring_bytes < (1ull << 30)) {
        ring_bytes <<= 1;
    }
    size_t size = TEMPO_ALIGN_UP(sizeof(seg_hdr_t), TEMPO_CACHELINE) +
                  (size_t)s->nlocal * (size_t)s->nlocal * ring_stride(ring_bytes);
    char name[96];
    snprintf(name, sizeof(name), "/tempo-%016llx-%016llx", (unsigned long long)w->job_uuid,
             (unsigned long long)w->peers[w->rank].info.host_id);
    seg_init_arg_t arg = {w->job_uuid, size, ring_bytes, s->nlocal};
    void *base;
    tempo_status_t st = shm_open_collective(w, s->local, s->nlocal, me, name, size, 0x100u,
                                            seg_init, &arg, deadline, &base);
    if (st == TEMPO_ERR_NOMEM || st == TEMPO_ERR_SYSTEM) {
        TEMPO_WARN(TEMPO_SUB_TRANSPORT, "shared memory unavailable, ranks of this host use tcp: %s",
                   tempo__errmsg());
        tempo__shm_close(s, 0, 0);
        return TEMPO_OK;
    }
    if (st != TEMPO_OK) {
        tempo__shm_close(s, 0, 0);
        return st;
    }
    seg_hdr_t *h = base;
    if (h->magic != SEG_MAGIC || h->job_uuid != w->job_uuid || h->nlocal != (uint32_t)s->nlocal ||
        h->ring_bytes != ring_bytes) {
        munmap(base, size);
        tempo__shm_close(s, 0, 0);
        return tempo__err(TEMPO_ERR_INTERNAL, "shared memory %s has an unexpected layout", name);
    }
    s->base = base;
    s->size = size;
    for (int i = 0; i < s->nlocal; i++) {
        int r = s->local[i];
        if (r == w->rank) {
            continue;
        }
        shm_ep_t *ep = tempo__calloc(1, sizeof(*ep), "shm endpoint");
        if (!ep) {
            tempo__shm_close(s, 0, 0);
            return TEMPO_ERR_NOMEM;
        }
        ep->out = ring_at(base, ring_bytes, s->nlocal, me, i);
        ep->in = ring_at(base, ring_bytes, s->nlocal, i, me);
        ep->mask = ring_bytes - 1;
        st = tempo__stream_init(&ep->stream, w, r, "shm", &ring_pipe_ops, ep);
        if (st != TEMPO_OK) {
            tempo__free(ep);
            tempo__shm_close(s, 0, 0);
            return st;
        }
        s->eps[r] = ep;
    }
    TEMPO_INFO(TEMPO_SUB_INIT, "shm: %d ranks on this host, rings of %zu bytes", s->nlocal,
               ring_bytes);
    *shm_p = s;
    return TEMPO_OK;
}

void *tempo__shm_ep(shm_tl_t *s, int peer)
{
    return s ? s->eps[peer] : NULL;
}

int tempo__shm_progress(shm_tl_t *s)
{
    int events = 0;
    for (int i = 0; i < s->nlocal; i++) {
        shm_ep_t *ep = s->eps[s->local[i]];
        if (!ep) {
            continue;
        }
        int moved = 0;
        if (!tempo__stream_send_idle(&ep->stream)) {
            int r = tempo__stream_progress_send(&ep->stream);
            moved += r > 0 ? r : 0;
        }
        if (ep->stream.in_payload ||
            atomic_load_explicit(&ep->in->tail, memory_order_relaxed) != ep->in_head ||
            ep->stream.rtail != ep->stream.rhead) {
            int r = tempo__stream_progress_recv(&ep->stream);
            moved += r > 0 ? r : 0;
        }
        if (moved) {
            tempo__peer_heard(s->world, s->local[i]);
            events += moved;
        }
    }
    return events;
}

void tempo__shm_close(shm_tl_t *s, int graceful, uint64_t deadline)
{
    if (!s) {
        return;
    }
    tempo__world_t *w = s->world;
    if (graceful && s->eps) {
        for (int i = 0; i < s->nlocal; i++) {
            shm_ep_t *ep = s->eps[s->local[i]];
            if (ep) {
                tempo__stream_send_bye(&ep->stream);
            }
        }
        for (;;) {
            int busy = 0;
            for (int i = 0; i < s->nlocal; i++) {
                shm_ep_t *ep = s->eps[s->local[i]];
                if (ep && !tempo__stream_send_idle(&ep->stream) && !w->peers[s->local[i]].left) {
                    tempo__stream_progress_send(&ep->stream);
                    busy += !tempo__stream_send_idle(&ep->stream);
                }
            }
            if (!busy || tempo__now_ns() > deadline) {
                break;
            }
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    if (s->eps) {
        for (int r = 0; r < w->size; r++) {
            if (s->eps[r]) {
                if (!graceful) {
                    tempo__stream_send_abort(&s->eps[r]->stream);
                }
                tempo__stream_fini(&s->eps[r]->stream);
                tempo__free(s->eps[r]);
            }
        }
    }
    if (s->base) {
        munmap(s->base, s->size);
    }
    tempo__free(s->eps);
    tempo__free(s->local);
    tempo__free(s);
}

/* ---------------------------------------------------------------------------------------------- */
/* Regions for collectives                                                                        */
/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo__shm_region_create(struct tempo_comm *comm, size_t size,
                                        tempo__shm_region_t *region_p)
{
    tempo__world_t *w = comm->world;
    if (!comm->all_local) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "shared regions need all ranks on one host");
    }
    tempo__shm_region_t r;
    memset(&r, 0, sizeof(r));
    /* Communicators that share a context id have disjoint members (sibling splits of a split), so
     * the context id and the creator's world rank name a region that no other live communicator's
     * region has, at any depth of splitting. */
    snprintf(r.name, sizeof(r.name), "/tempo-%016llx-c%d-r%d", (unsigned long long)w->job_uuid,
             comm->ctx, comm->ranks[0]);
    r.size = size;
    uint64_t deadline = tempo__deadline_after(w->timeout_s);
    TEMPO_CHECK(shm_open_collective(w, comm->ranks, comm->size, comm->rank, r.name, size,
                                    0x80000000u | ((uint32_t)comm->ctx << 4), NULL, NULL,
                                    deadline, &r.base));
    *region_p = r;
    return TEMPO_OK;
}

void tempo__shm_region_destroy(tempo__shm_region_t *region)
{
    if (region && region->base) {
        munmap(region->base, region->size);
        region->base = NULL;
    }
}
