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
 * Who may attach: the creator makes the object with O_EXCL and mode 0600, and a rank maps it only
 * if it is still this user's and open to no one else (fstat), so another user can neither read the
 * rings nor hand the job an object of their own. Names in /dev/shm and the doorbells' abstract
 * sockets (listed in /proc/net/unix) are visible to every user of the host, so they carry the job
 * tag (core/world.h), random and used for nothing else, never the job uuid, which a job without a
 * key relies on as its secret (transport/tcp.c).
 *
 * A ring never reports end-of-stream; a dead peer is noticed through its tcp connection.
 *
 * Single copy (TEMPO_SHM_CMA, TEMPO_SHM_CMA_BYTES): a payload of at least that many bytes does not go through the
 * ring (two copies: into it and out of it) but through the stream's zero-copy tickets: the sender
 * exposes its buffer (descriptor: address and length; nothing to register), the receiver copies it
 * straight into the receive buffer with process_vm_readv (cross-memory attach, one copy) and says
 * FIN. CMA needs ptrace permission over the peer (same user; Yama's ptrace_scope may forbid it), so
 * at setup every rank tries to read each same-host peer's segment header through CMA, and a pair
 * uses it only when both ends could (the rings otherwise, with an INFO line saying why).
 *
 * Doorbell (TEMPO_SHM_BELL): a ring or a counter in shared memory wakes no poll(), so a rank that
 * sleeps in a wait (core/engine.c, after TEMPO_SPIN) would notice a same-host peer's data only at
 * its next 1 ms tick. Before it sleeps, a rank sets its flag in the segment (one cache line per
 * local rank, plus one line counting the sleepers of the host; none of them is written on the hot
 * path), re-checks for progress (so that data published before the flag was visible is not
 * missed), then sleeps in epoll_wait with its bell socket in the set. A rank that publishes to a
 * peer (ring tail or head here, counters of the shm collectives through tempo__shm_published)
 * loads the peer's flag, or the sleeper count, relaxed: one load on the hot path. If it is set,
 * the publisher clears it (one ring per sleep) and sends a one-byte datagram to the peer's bell:
 * an abstract unix socket named by the job tag and the world rank, so nothing is exchanged and
 * nothing is left on disk. The 1 ms timeout stays as the backstop: a lost bell (the publisher's
 * flag load passed its own tail store, a second thread of the rank slept at the same time, ranks
 * in different network namespaces, a bind that failed) costs what a sleep cost before. A stray
 * datagram from another process of the host only wakes a sleeper early.
 */
#include "config.h"

#include "transport/tl_int.h"
#include "core/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define SEG_MAGIC 0x54454d504f53484dull /* "TEMPOSHM" */
#define CODE_READY 1u
#define CODE_OPENED 2u
#define CODE_DECIDE 3u
#define CODE_CMA_ADDR 0x201u
#define CODE_CMA_OK 0x202u

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

/* A doorbell word on a cache line of its own: bells[0] counts the sleepers of the host,
 * bells[1 + i] is set while local rank i sleeps (or is about to). */
typedef struct bell_line {
    _Atomic uint32_t v;
    char pad[TEMPO_CACHELINE - sizeof(uint32_t)];
} bell_line_t;

typedef struct shm_ep {
    tempo__stream_t stream;
    pid_t pid; /* the peer's process, for CMA */
    struct shm_tl *tl;
    _Atomic uint32_t *peer_bell; /* the peer's sleeping flag */
    struct sockaddr_un bell_addr; /* the peer's bell socket (abstract name) */
    socklen_t bell_len;
    shm_ring_t *out;   /* this rank -> peer */
    shm_ring_t *in;    /* peer -> this rank */
    uint64_t mask;     /* ring_bytes - 1 */
    uint64_t out_tail; /* producer's own tail */
    uint64_t out_head; /* cached consumer head */
    uint64_t in_head;  /* consumer's own head */
    uint64_t in_tail;  /* cached producer tail */
} shm_ep_t;

typedef struct shm_tl {
    tempo__world_t *world;
    void *base;
    size_t size;
    int nlocal;
    int *local;     /* (nlocal) world ranks of this host, ascending */
    shm_ep_t **eps; /* (world size) NULL unless the peer is served by shm */
    bell_line_t *bells; /* (1 + nlocal) in the segment: sleepers, then one flag per local rank */
    _Atomic uint32_t *my_bell; /* this rank's flag */
    int bell_fd;               /* this rank's bell socket, -1 when the doorbell is off */
} shm_tl_t;

/* ---------------------------------------------------------------------------------------------- */
/* Doorbell                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static socklen_t bell_name(struct sockaddr_un *a, uint64_t tag, int wrank)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    /* abstract namespace: sun_path[0] is 0 and the name is the bytes after it, no terminator */
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "tempo-bell-%016llx-%d",
                     (unsigned long long)tag, wrank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The peer's flag was seen set after a publish: clear it, and ring if this call cleared it. */
static void bell_ring(shm_tl_t *s, shm_ep_t *ep)
{
    if (s->bell_fd >= 0 && atomic_exchange_explicit(ep->peer_bell, 0, memory_order_acq_rel)) {
        char b = 1;
        (void)sendto(s->bell_fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                     (const struct sockaddr *)&ep->bell_addr, ep->bell_len);
    }
}

static inline void bell_check(shm_ep_t *ep)
{
    if (TEMPO_UNLIKELY(atomic_load_explicit(ep->peer_bell, memory_order_relaxed))) {
        bell_ring(ep->tl, ep);
    }
}

void tempo__shm_wake(tempo__world_t *w, const int *wranks, int n)
{
    shm_tl_t *s = tempo__tl_instance(w, &tempo__shm_backend);
    for (int i = 0; s && i < n; i++) {
        shm_ep_t *ep = wranks[i] != w->rank ? s->eps[wranks[i]] : NULL;
        if (ep) {
            bell_check(ep);
        }
    }
}

static int shm_doze(void *inst, int sleeping)
{
    shm_tl_t *s = inst;
    if (!s || s->bell_fd < 0) {
        return 0;
    }
    if (sleeping) {
        /* seq_cst: the flag is visible before the caller's re-check reads the rings */
        atomic_store(s->my_bell, 1);
        atomic_fetch_add(&s->bells[0].v, 1);
    } else {
        atomic_store_explicit(s->my_bell, 0, memory_order_relaxed);
        atomic_fetch_sub_explicit(&s->bells[0].v, 1, memory_order_relaxed);
    }
    return 1;
}

static int shm_wait_fd(void *inst)
{
    shm_tl_t *s = inst;
    return s ? s->bell_fd : -1;
}

static void shm_woken(void *inst)
{
    shm_tl_t *s = inst;
    char b[64];
    while (recv(s->bell_fd, b, sizeof(b), MSG_DONTWAIT) > 0) {
    }
}

/* This rank's bell socket; without one (bind failed) the doorbell is off here, so its flag is never
 * set and peers never ring it. */
static void bell_open(shm_tl_t *s, tempo__world_t *w)
{
    s->bell_fd = -1;
    if (!tempo__cfg.shm_bell) {
        return;
    }
    struct sockaddr_un a;
    socklen_t len = bell_name(&a, w->job_tag, w->rank);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (const struct sockaddr *)&a, len) != 0) {
        TEMPO_INFO(TEMPO_SUB_TRANSPORT,
                   "shm doorbell off on this rank (%s): sleeping waits notice same-host data "
                   "within 1 ms",
                   strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return;
    }
    s->bell_fd = fd;
}

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
    bell_check(ep);
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
    bell_check(ep); /* a producer may sleep waiting for room */
    return (ssize_t)n;
}

/* Cross-memory attach: the peer's exposed buffer is described by its address and length. */
typedef struct {
    uint64_t addr, len;
} cma_desc_t;

static size_t cma_expose(void *pipe, const void *buf, size_t len, void *desc, void **handle)
{
    (void)pipe;
    cma_desc_t d = {(uint64_t)(uintptr_t)buf, len};
    memcpy(desc, &d, sizeof(d));
    *handle = NULL;
    return sizeof(d);
}

static void cma_release(void *pipe, void *handle)
{
    (void)pipe;
    (void)handle;
}

/* Copy len bytes of the peer's memory at raddr into dst; 0 or -errno. */
static int cma_read(pid_t pid, void *dst, uint64_t raddr, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec l = {(char *)dst + done, len - done};
        struct iovec r = {(void *)(uintptr_t)(raddr + done), len - done};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0) {
            return n < 0 ? -errno : -EIO;
        }
        done += (size_t)n;
    }
    return 0;
}

static int cma_fetch(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len, void *op)
{
    shm_ep_t *ep = pipe;
    cma_desc_t d;
    (void)op;
    if (desc_len != sizeof(d)) {
        return -EPROTO;
    }
    memcpy(&d, desc, sizeof(d));
    if (d.len != len) {
        return -EPROTO;
    }
    int r = cma_read(ep->pid, dst, d.addr, len);
    return r < 0 ? r : 1;
}

/* Fetches are synchronous: nothing is ever in flight to stop. */
static void cma_kill(void *pipe)
{
    (void)pipe;
}

static const tempo__pipe_ops_t ring_pipe_ops = {.writev = ring_writev,
                                                .read = ring_read,
                                                .expose = cma_expose,
                                                .release = cma_release,
                                                .fetch = cma_fetch,
                                                .kill = cma_kill};

/* Whether each same-host pair can use CMA: every rank sends its segment address to the others, reads
 * their segment headers through process_vm_readv and compares them with its own mapping of the same
 * bytes, then the results are exchanged; a pair uses CMA when both ends succeeded. */
static tempo_status_t cma_setup(shm_tl_t *s, uint64_t deadline)
{
    tempo__world_t *w = s->world;
    int np = s->nlocal - 1;
    if (!tempo__cfg.shm_cma || !tempo__cfg.shm_cma_bytes || np < 1) {
        return TEMPO_OK;
    }
    /* Indexed by world rank: the same-host peers, their segment addresses, whether this rank
     * could read each ([p]) and whether each could read this rank ([size + p]). */
    unsigned char *peer = tempo__calloc((size_t)w->size, 1, "shm setup");
    uint64_t *addr = tempo__calloc((size_t)w->size, sizeof(*addr), "shm setup");
    uint8_t *ok = tempo__calloc((size_t)w->size * 2, 1, "shm setup");
    tempo_status_t st = TEMPO_ERR_NOMEM;
    uint64_t mine = (uint64_t)(uintptr_t)s->base;
    if (!peer || !addr || !ok) {
        goto out;
    }
    for (int i = 0; i < s->nlocal; i++) {
        peer[s->local[i]] = s->local[i] != w->rank;
    }
    st = tempo__ctrl_swap(w, peer, CODE_CMA_ADDR, &mine, 0, addr, sizeof(*addr), deadline,
                          "shared memory setup (CMA)");
    if (st != TEMPO_OK) {
        goto out;
    }
    char why[128] = "";
    for (int p = 0; p < w->size; p++) {
        if (!peer[p]) {
            continue;
        }
        seg_hdr_t h;
        int r = cma_read(s->eps[p]->pid, &h, addr[p], sizeof(h));
        ok[p] = r == 0 && memcmp(&h, s->base, sizeof(h)) == 0;
        if (!ok[p] && !why[0]) {
            snprintf(why, sizeof(why), "process_vm_readv from rank %d: %s", p,
                     r ? strerror(-r) : "read other bytes");
        }
    }
    st = tempo__ctrl_swap(w, peer, CODE_CMA_OK, ok, 1, ok + w->size, 1, deadline,
                          "shared memory setup (CMA)");
    if (st != TEMPO_OK) {
        goto out;
    }
    int n = 0;
    for (int p = 0; p < w->size; p++) {
        if (peer[p] && ok[p] && ok[w->size + p]) {
            tempo__stream_set_fetch(&s->eps[p]->stream, tempo__cfg.shm_cma_bytes);
            n++;
        }
    }
    if (n < np) {
        TEMPO_INFO(TEMPO_SUB_TRANSPORT,
                   "shm: single-copy transfers (CMA) with %d of %d same-host peers; the others "
                   "copy through the rings (%s)",
                   n, np, why[0] ? why : "the peer could not read this rank");
    } else {
        TEMPO_INFO(TEMPO_SUB_TRANSPORT,
                   "shm: payloads of %zu bytes and more are copied once (CMA) with all %d peers",
                   tempo__cfg.shm_cma_bytes, np);
    }
out:
    tempo__free(peer);
    tempo__free(addr);
    tempo__free(ok);
    return st;
}

static const tempo__tl_ops_t shm_ops = TEMPO__STREAM_EP_OPS("shm");
TEMPO__STREAM_FIRST(shm_ep_t);

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
            int fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
            struct stat sb;
            int ok = fd >= 0 && fstat(fd, &sb) == 0;
            if (ok && (sb.st_uid != geteuid() || (sb.st_mode & 077) != 0)) {
                my_st = TEMPO_ERR_SYSTEM;
                TEMPO_WARN(TEMPO_SUB_TRANSPORT,
                           "shared memory %s belongs to uid %u with mode %04o, not to this user "
                           "alone: not mapped",
                           name, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
            } else if (ok && (size_t)sb.st_size == size) {
                base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            }
            if (base == MAP_FAILED && my_st == 0) {
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

/* Segment layout: header, doorbell lines (1 + nlocal), rings (nlocal x nlocal). */
static size_t rings_off(int nlocal)
{
    return TEMPO_ALIGN_UP(sizeof(seg_hdr_t), TEMPO_CACHELINE) +
           (1 + (size_t)nlocal) * sizeof(bell_line_t);
}

static shm_ring_t *ring_at(void *base, size_t ring_bytes, int nlocal, int from, int to)
{
    size_t off = rings_off(nlocal) +
                 ((size_t)from * (size_t)nlocal + (size_t)to) * ring_stride(ring_bytes);
    return (shm_ring_t *)((char *)base + off);
}

static void shm_close(void *inst, int graceful, uint64_t deadline);

/* Collective over the ranks of this host whatever want[] says (every rank of the host takes part,
 * so that the segment is set up the same way everywhere); ep() is asked only for wanted peers. */
static tempo_status_t shm_tl_open(tempo__world_t *w, const unsigned char *want, uint64_t deadline,
                               void **inst_p)
{
    (void)want;
    shm_tl_t **shm_p = (shm_tl_t **)inst_p;
    *shm_p = NULL;
    if (!tempo__cfg.shm || w->nlocal < 2) {
        return TEMPO_OK;
    }
    shm_tl_t *s = tempo__calloc(1, sizeof(*s), "shm transport");
    if (!s) {
        return TEMPO_ERR_NOMEM;
    }
    s->world = w;
    s->bell_fd = -1;
    s->local = tempo__malloc(sizeof(int) * (size_t)w->nlocal, "shm local ranks");
    s->eps = tempo__calloc((size_t)w->size, sizeof(*s->eps), "shm endpoints");
    if (!s->local || !s->eps) {
        shm_close(s, 0, 0);
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
    size_t ring_bytes = tempo__cfg.shm_ring_bytes; /* a power of two, 4K-1G (core/cfg.c) */
    size_t size = rings_off(s->nlocal) + (size_t)s->nlocal * (size_t)s->nlocal * ring_stride(ring_bytes);
    char name[96];
    snprintf(name, sizeof(name), "/tempo-%016llx-%016llx", (unsigned long long)w->job_tag,
             (unsigned long long)w->peers[w->rank].info.host_id);
    seg_init_arg_t arg = {w->job_uuid, size, ring_bytes, s->nlocal};
    void *base;
    tempo_status_t st = shm_open_collective(w, s->local, s->nlocal, me, name, size, 0x100u,
                                            seg_init, &arg, deadline, &base);
    if (st == TEMPO_ERR_NOMEM || st == TEMPO_ERR_SYSTEM) {
        TEMPO_WARN(TEMPO_SUB_TRANSPORT, "shared memory unavailable, ranks of this host use tcp: %s",
                   tempo__errmsg());
        shm_close(s, 0, 0);
        return TEMPO_OK;
    }
    if (st != TEMPO_OK) {
        shm_close(s, 0, 0);
        return st;
    }
    seg_hdr_t *h = base;
    if (h->magic != SEG_MAGIC || h->job_uuid != w->job_uuid || h->nlocal != (uint32_t)s->nlocal ||
        h->ring_bytes != ring_bytes) {
        munmap(base, size);
        shm_close(s, 0, 0);
        return tempo__err(TEMPO_ERR_INTERNAL, "shared memory %s has an unexpected layout", name);
    }
    s->base = base;
    s->size = size;
    s->bells = (bell_line_t *)((char *)base + TEMPO_ALIGN_UP(sizeof(seg_hdr_t), TEMPO_CACHELINE));
    s->my_bell = &s->bells[1 + me].v;
    bell_open(s, w);
    for (int i = 0; i < s->nlocal; i++) {
        int r = s->local[i];
        if (r == w->rank) {
            continue;
        }
        shm_ep_t *ep = tempo__calloc(1, sizeof(*ep), "shm endpoint");
        if (!ep) {
            shm_close(s, 0, 0);
            return TEMPO_ERR_NOMEM;
        }
        ep->out = ring_at(base, ring_bytes, s->nlocal, me, i);
        ep->in = ring_at(base, ring_bytes, s->nlocal, i, me);
        ep->mask = ring_bytes - 1;
        ep->tl = s;
        ep->pid = (pid_t)w->peers[r].info.pid;
        ep->peer_bell = &s->bells[1 + i].v;
        ep->bell_len = bell_name(&ep->bell_addr, w->job_tag, r);
        st = tempo__stream_init(&ep->stream, w, r, "shm", &ring_pipe_ops, ep);
        if (st != TEMPO_OK) {
            tempo__free(ep);
            shm_close(s, 0, 0);
            return st;
        }
        s->eps[r] = ep;
    }
    st = cma_setup(s, deadline);
    if (st != TEMPO_OK) {
        shm_close(s, 0, 0);
        return st;
    }
    if (s->bell_fd >= 0) {
        w->shm_sleepers = &s->bells[0].v;
    }
    TEMPO_INFO(TEMPO_SUB_INIT, "shm: %d ranks on this host, rings of %zu bytes", s->nlocal,
               ring_bytes);
    *shm_p = s;
    return TEMPO_OK;
}

static void *shm_ep(void *inst, int peer)
{
    shm_tl_t *s = inst;
    return s ? s->eps[peer] : NULL;
}

static int shm_progress(void *inst)
{
    shm_tl_t *s = inst;
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
        if (tempo__stream_heard(&ep->stream)) { /* (not for control notes: stream.h) */
            tempo__peer_heard(s->world, s->local[i]);
        }
        events += moved;
    }
    return events;
}

static void shm_close(void *inst, int graceful, uint64_t deadline)
{
    shm_tl_t *s = inst;
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
    if (s->bell_fd >= 0) {
        close(s->bell_fd);
    }
    if (s->base) {
        munmap(s->base, s->size);
    }
    tempo__free(s->eps);
    tempo__free(s->local);
    tempo__free(s);
}

static int shm_probe(char *detail, size_t len)
{
    if (tempo__config_load() != TEMPO_OK) { /* the defaults, which nothing will use */
        snprintf(detail, len, "not usable: the configuration is refused (see tempo-info -c)");
        return 0;
    }
    snprintf(detail, len,
             "POSIX shared memory rings between ranks of one host (%s; rings of %zu bytes per "
             "direction)",
             tempo__cfg.shm ? "enabled" : "disabled by TEMPO_SHM=0", tempo__cfg.shm_ring_bytes);
    return tempo__cfg.shm;
}

const tempo__tl_backend_t tempo__shm_backend = {
    .name = "shm",
    .priority = 0,
    .by_default = 1,
    .caps = TEMPO__TL_CAP_TAGGED | TEMPO__TL_CAP_RMA | TEMPO__TL_CAP_WAIT_FD,
    .probe = shm_probe,
    .open = shm_tl_open,
    .ep = shm_ep,
    .ops = &shm_ops,
    .progress = shm_progress,
    .wait_fd = shm_wait_fd,
    .doze = shm_doze,
    .woken = shm_woken,
    .close = shm_close,
};

int tempo__tl_shm_on(tempo__world_t *w)
{
    return tempo__tl_instance(w, &tempo__shm_backend) != NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Regions for collectives                                                                        */
/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo__shm_region_create(struct tempo_comm *comm, size_t size, const char *tag,
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
    snprintf(r.name, sizeof(r.name), "/tempo-%016llx-c%d-r%d%s%s",
             (unsigned long long)w->job_tag, comm->ctx, comm->ranks[0], tag ? "-" : "",
             tag ? tag : "");
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
