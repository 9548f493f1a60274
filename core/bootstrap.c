/*
 * bootstrap.c — launcher detection and the TCP rendezvous (see bootstrap.h).
 *
 * Protocol: each non-root rank connects to rank 0, which sends a challenge (magic, version,
 * whether the job authenticates, 32 random bytes); the rank sends a hello (magic, version, hash of
 * the job key, rank, size, blob length, its own 32 random bytes), its blob and a MAC: with a job
 * key (core/auth.h), HMAC-SHA-256 over rank 0's challenge, the hello and the blob; zeros without
 * one. Rank 0 reads every connection side by side, each into a bounded buffer with its own
 * deadline, and checks the MAC before it trusts a byte: a wrong MAC, magic or job key is a
 * stranger (refused and logged with its address, the job goes on); then a rank out of range, a
 * duplicate rank or a different size is a broken job (everyone is told why and fails). Rank 0
 * answers each rank with a reply header, all blobs (or the error text) and a MAC over the rank's
 * own random bytes and what it sends, which the rank checks: an impostor at the rendezvous address
 * without the key cannot steer the ranks. All reads have deadlines, and every length is checked
 * before use.
 */
#include "config.h"

#include "core/bootstrap.h"
#include "core/auth.h"
#include "core/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define HELLO_MAGIC 0x544d5042u /* "TMPB" */
#define REPLY_MAGIC 0x544d5052u /* "TMPR" */
#define CHAL_MAGIC 0x544d5043u  /* "TMPC" */
#define BS_VERSION 2u
#define MAX_BLOB 4096u

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint32_t auth; /* 1: rank 0 has a job key, and checks every hello's MAC */
    uint32_t pad;
    uint8_t nonce[TEMPO__AUTH_NONCE];
} chal_t;

typedef struct {
    uint32_t magic;
    uint32_t version;
    uint64_t key_hash;
    int32_t rank;
    int32_t size;
    uint32_t blob_len;
    uint32_t pad;
    uint8_t nonce[TEMPO__AUTH_NONCE]; /* the rank's challenge to rank 0 */
} hello_t;

_Static_assert(sizeof(hello_t) == TEMPO__BS_HELLO_BYTES, "bootstrap.h's hello size");

typedef struct {
    uint32_t magic;
    int32_t status;   /* 0, or a negative tempo_status_t */
    uint32_t msg_len; /* bytes of error text that follow when status != 0 */
    uint32_t pad;
} reply_t;

struct tempo__bootstrap {
    const tempo__launch_t *launch;
    int fd;         /* rank 0: listening socket; others: connection to rank 0 */
    char file[512]; /* rank 0 with a file rendezvous: the file to remove */
};

static int env_int(const char *name, int *v)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        return 0;
    }
    char *end;
    long x = strtol(s, &end, 10);
    if (*end || x < 0 || x > (1 << 30)) {
        return -1;
    }
    *v = (int)x;
    return 1;
}

tempo_status_t tempo__launch_detect(const tempo_config_t *cfg, tempo__launch_t *l)
{
    static const struct {
        const char *rank, *size, *source;
    } sources[] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
        {"PMI_RANK", "PMI_SIZE", "MPICH/Hydra"},
        {"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
    };
    memset(l, 0, sizeof(*l));
    l->rank = 0;
    l->size = 1;
    l->local_size = -1;
    l->source = "single process (no launcher variables)";
    if (cfg && (cfg->field_mask & TEMPO_CONFIG_RANK)) {
        l->rank = cfg->rank;
        l->size = cfg->size;
        l->source = "config";
    } else if (tempo__cfg.rank >= 0 || tempo__cfg.size >= 0) {
        if (tempo__cfg.rank < 0 || tempo__cfg.size < 0) {
            return tempo__err(TEMPO_ERR_BOOTSTRAP,
                              "TEMPO_RANK and TEMPO_SIZE must be set together");
        }
        l->rank = tempo__cfg.rank;
        l->size = tempo__cfg.size;
        l->source = "TEMPO_RANK/TEMPO_SIZE";
    } else {
        for (size_t i = 0; i < TEMPO_ARRAY_SIZE(sources); i++) {
            int r, s;
            int hr = env_int(sources[i].rank, &r), hs = env_int(sources[i].size, &s);
            if (hr < 0 || hs < 0) {
                return tempo__err(TEMPO_ERR_BOOTSTRAP, "%s/%s hold invalid values ('%s', '%s')",
                                  sources[i].rank, sources[i].size, getenv(sources[i].rank) ?: "",
                                  getenv(sources[i].size) ?: "");
            }
            if (hr != hs) {
                return tempo__err(TEMPO_ERR_BOOTSTRAP,
                                  "%s is set but %s is not: incomplete "
                                  "launcher environment",
                                  hr ? sources[i].rank : sources[i].size,
                                  hr ? sources[i].size : sources[i].rank);
            }
            if (hr && hs) {
                l->rank = r;
                l->size = s;
                l->source = sources[i].source;
                break;
            }
        }
    }
    if (l->size < 1 || l->rank < 0 || l->rank >= l->size) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "rank %d is out of range for size %d (from %s)",
                          l->rank, l->size, l->source);
    }

    /* How many ranks share this host, if a launcher says so. */
    int v;
    if (tempo__cfg.local_size >= 0) {
        l->local_size = tempo__cfg.local_size;
    } else if (env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &v) > 0 ||
               env_int("MPI_LOCALNRANKS", &v) > 0) {
        l->local_size = v;
    } else if (env_int("SLURM_NNODES", &v) > 0 && v == 1) {
        l->local_size = l->size;
    }

    /* The rendezvous address. */
    const char *root = NULL;
    if (cfg && (cfg->field_mask & TEMPO_CONFIG_ROOT)) {
        root = cfg->root;
    } else if (tempo__cfg.root[0]) {
        root = tempo__cfg.root;
    }
    if (root) {
        if (strlen(root) >= sizeof(l->root_text)) {
            return tempo__err(TEMPO_ERR_INVALID, "rendezvous address too long");
        }
        l->has_root = 1;
        snprintf(l->root_text, sizeof(l->root_text), "%s", root);
    }

    /* The job key: explicit, else the launcher's job id, else the root address or the parent pid.
     */
    const char *ompi = getenv("OMPI_MCA_ess_base_jobid") ?: getenv("PMIX_NAMESPACE");
    const char *slurm = getenv("SLURM_JOB_ID");
    const char *hydra = getenv("PMI_PORT");
    if (tempo__cfg.job_id[0]) {
        snprintf(l->job_key, sizeof(l->job_key), "job:%s", tempo__cfg.job_id);
    } else if (ompi) {
        snprintf(l->job_key, sizeof(l->job_key), "ompi:%s", ompi);
    } else if (slurm) {
        snprintf(l->job_key, sizeof(l->job_key), "slurm:%s.%s", slurm,
                 getenv("SLURM_STEP_ID") ?: "0");
    } else if (l->has_root) {
        snprintf(l->job_key, sizeof(l->job_key), "root:%s", l->root_text);
    } else if (hydra) {
        snprintf(l->job_key, sizeof(l->job_key), "hydra:%s", hydra);
    } else {
        snprintf(l->job_key, sizeof(l->job_key), "ppid:%d", (int)getppid());
    }
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */

/* The rendezvous directory, $TMPDIR/tempo-<uid> (TMPDIR unset: /tmp): made here with mode 0700
 * where create is set, and trusted only as a directory of this user that no one else may enter
 * (lstat: a symbolic link in its place is refused too). In a shared /tmp, another user could
 * make it first, or plant a file in it or a link in its place, and steer the ranks to their own
 * address: that is refused with the reason, before anything is read from it. 0 with the path in
 * buf; 1: it does not exist (yet); or an error with the message. */
static int rdv_dir(char *buf, size_t len, int create)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) {
        dir = "/tmp";
    }
    snprintf(buf, len, "%s/tempo-%u", dir, (unsigned)getuid());
    if (create && mkdir(buf, 0700) != 0 && errno != EEXIST) {
        return tempo__err(TEMPO_ERR_SYSTEM, "cannot make the rendezvous directory %s: %s", buf,
                          strerror(errno));
    }
    struct stat st;
    if (lstat(buf, &st) != 0) {
        if (errno == ENOENT && !create) {
            return 1;
        }
        return tempo__err(TEMPO_ERR_SYSTEM, "the rendezvous directory %s: %s", buf,
                          strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous directory %s is not a directory "
                          "(a symbolic link or a file someone made in its place?): remove it, or "
                          "set TMPDIR to a directory of your own", buf);
    }
    if (st.st_uid != getuid()) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous directory %s belongs to uid %u, "
                          "not this user (%u): someone else made it; remove it, or set TMPDIR to a "
                          "directory of your own", buf, (unsigned)st.st_uid, (unsigned)getuid());
    }
    if (st.st_mode & 077) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous directory %s has mode %03o: other "
                          "users could have changed what is in it; remove it (tempo makes it with "
                          "mode 700)", buf, (unsigned)(st.st_mode & 0777));
    }
    return 0;
}

/* The rendezvous file of the job in that directory (rdv_dir's status). */
static int rendezvous_file(const tempo__launch_t *l, char *buf, size_t len, int create)
{
    char dir[400];
    int rc = rdv_dir(dir, sizeof(dir), create);
    uint64_t h = tempo__hash64(l->job_key, strlen(l->job_key), 0);
    snprintf(buf, len, "%s/rdv-%016llx", dir, (unsigned long long)h);
    return rc;
}

/* Read the address in rank 0's rendezvous file: 1 with it in line, 0 not there (yet), or an error
 * with the message: a file that is not a regular file of this user, private to it (opened without
 * following a link). */
static int rendezvous_read(const char *path, char *line, size_t len)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) {
            return 0;
        }
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous file %s cannot be read: %s%s", path,
                          strerror(errno),
                          errno == ELOOP ? " (a symbolic link in its place: refused)" : "");
    }
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 077)) {
        close(fd);
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous file %s is not a private file of "
                          "this user (uid %u, mode %03o): refused", path, (unsigned)st.st_uid,
                          (unsigned)(st.st_mode & 0777));
    }
    ssize_t n = read(fd, line, len - 1);
    close(fd);
    line[n > 0 ? n : 0] = '\0';
    line[strcspn(line, "\n")] = '\0';
    return line[0] != '\0';
}

static tempo_status_t root_listen(tempo__bootstrap_t *bs, tempo__addr_t *local_p)
{
    const tempo__launch_t *l = bs->launch;
    tempo__addr_t addr, bound;
    if (l->has_root) {
        TEMPO_CHECK(tempo__addr_parse(l->root_text, &addr));
        *local_p = addr;
        /* tempo-run's socket, listening at TEMPO_ROOT since before this rank started: binding
         * the port here instead could find it taken by then */
        if (tempo__cfg.root_fd >= 0) {
            if (tempo__sock_adopt_listener(tempo__cfg.root_fd, &addr) == TEMPO_OK) {
                bs->fd = tempo__cfg.root_fd;
                TEMPO_INFO(TEMPO_SUB_INIT, "rendezvous at %s on the launcher's socket (fd %d)",
                           l->root_text, bs->fd);
                return TEMPO_OK;
            }
            TEMPO_WARN(TEMPO_SUB_INIT,
                       "TEMPO_ROOT_FD=%d: %s; listening at TEMPO_ROOT=%s instead",
                       tempo__cfg.root_fd, tempo__errmsg(), l->root_text);
        }
        /* Listen only on the address the job meets at (not on every interface: nothing outside
         * the job's network should reach the rendezvous); where that address is not one of this
         * host's (a name behind NAT), on every interface of its family, saying so. */
        tempo_status_t st = tempo__sock_listen(&addr, &bs->fd, &bound);
        if (st != TEMPO_OK && st != TEMPO_ERR_BOOTSTRAP && !tempo__addr_is_any(&addr)) {
            char msg[TEMPO_ERRMSG_LEN];
            snprintf(msg, sizeof(msg), "%s", tempo__errmsg());
            tempo__addr_t any = addr;
            tempo__addr_set_any(&any);
            st = tempo__sock_listen(&any, &bs->fd, &bound);
            if (st == TEMPO_OK) {
                TEMPO_WARN(TEMPO_SUB_INIT, "rendezvous: %s; listening on every interface at port "
                           "%d instead", msg, tempo__addr_port(&addr));
            }
        }
        if (st != TEMPO_OK) {
            return tempo__err(st,
                              "rank 0 cannot listen at TEMPO_ROOT=%s: %s (is another job using "
                              "this port?)",
                              l->root_text, tempo__errmsg());
        }
        if (tempo__addr_is_any(local_p)) {
            TEMPO_CHECK(tempo__addr_parse("127.0.0.1:0", local_p));
        }
        return TEMPO_OK;
    }
    TEMPO_CHECK(tempo__addr_parse("127.0.0.1:0", &addr));
    TEMPO_CHECK(tempo__sock_listen(&addr, &bs->fd, &bound));
    *local_p = addr;
    /* Publish the address atomically: write a temporary file, then rename it into place, both
     * in the private directory, the file created anew (never through a link) with mode 600. */
    char tmp[600], abuf[128];
    int rc = rendezvous_file(l, bs->file, sizeof(bs->file), 1);
    if (rc != 0) {
        bs->file[0] = '\0';
        return (tempo_status_t)rc; /* (the message is set) */
    }
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", bs->file, (int)getpid());
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    tempo__addr_str(&bound, abuf, sizeof(abuf));
    size_t alen = strlen(abuf);
    abuf[alen] = '\n';
    int wrote = fd >= 0 && write(fd, abuf, alen + 1) == (ssize_t)(alen + 1);
    abuf[alen] = '\0';
    if (fd < 0 || !wrote || close(fd) != 0) {
        int e = errno;
        if (fd >= 0 && !wrote) {
            close(fd);
        }
        unlink(tmp);
        bs->file[0] = '\0';
        return tempo__err(TEMPO_ERR_SYSTEM, "cannot write the rendezvous file %s: %s", tmp,
                          strerror(e));
    }
    if (rename(tmp, bs->file) != 0) {
        int e = errno;
        unlink(tmp);
        bs->file[0] = '\0';
        return tempo__err(TEMPO_ERR_SYSTEM, "cannot publish the rendezvous file: %s", strerror(e));
    }
    TEMPO_INFO(TEMPO_SUB_INIT, "rendezvous at %s (file %s)", abuf, bs->file);
    return TEMPO_OK;
}

static tempo_status_t peer_connect(tempo__bootstrap_t *bs, uint64_t deadline,
                                   tempo__addr_t *local_p)
{
    const tempo__launch_t *l = bs->launch;
    tempo__addr_t addr;
    if (l->has_root) {
        TEMPO_CHECK(tempo__addr_parse(l->root_text, &addr));
        tempo_status_t st = tempo__sock_connect(&addr, deadline, &bs->fd);
        if (st != TEMPO_OK) {
            return tempo__err(st, "rank %d cannot reach the rendezvous at %s: %s", l->rank,
                              l->root_text, tempo__errmsg());
        }
    } else {
        /* Poll for rank 0's file; reread it after a refused connection (it may be stale). A
         * directory or file that another user could have made or changed fails at once. */
        char path[512];
        for (;;) {
            char line[256] = "";
            int rc = rendezvous_file(l, path, sizeof(path), 0);
            if (rc == 0) {
                rc = rendezvous_read(path, line, sizeof(line));
            } else if (rc == 1) {
                rc = 0; /* (no directory yet) */
            }
            if (rc < 0) {
                return (tempo_status_t)rc; /* (the message is set) */
            }
            if (line[0] && tempo__addr_parse(line, &addr) == TEMPO_OK) {
                uint64_t try_until = TEMPO_MIN(deadline, tempo__now_ns() + 200000000ull);
                if (tempo__sock_connect(&addr, try_until, &bs->fd) == TEMPO_OK) {
                    break;
                }
            }
            if (tempo__now_ns() >= deadline) {
                return tempo__err(
                    TEMPO_ERR_TIMEOUT,
                    "rank %d found no rendezvous from rank 0 (waited for %s for %.0f s;"
                    " is rank 0 running? set TEMPO_ROOT=host:port for jobs across "
                    "hosts)",
                    l->rank, path, tempo__cfg.timeout_s);
            }
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
    }
    local_p->len = sizeof(local_p->ss);
    if (getsockname(bs->fd, (struct sockaddr *)&local_p->ss, &local_p->len) != 0) {
        return tempo__err(TEMPO_ERR_SYSTEM, "getsockname(): %s", strerror(errno));
    }
    tempo__addr_set_port(local_p, 0);
    return TEMPO_OK;
}

tempo_status_t tempo__bootstrap_open(const tempo__launch_t *launch, uint64_t deadline,
                                     tempo__bootstrap_t **bs_p, tempo__addr_t *local_p)
{
    if (!launch->has_root && launch->size > 1 && launch->local_size != launch->size) {
        return tempo__err(
            TEMPO_ERR_BOOTSTRAP,
            "no rendezvous address: set TEMPO_ROOT=host:port (rank 0's host and a free "
            "port) for a job of %d ranks launched by %s%s",
            launch->size, launch->source, launch->local_size < 0 ? "" : " across several hosts");
    }
    int key = tempo__auth_key();
    if (key < 0) {
        return (tempo_status_t)key; /* (an unusable key: the message says why) */
    }
    tempo__bootstrap_t *bs = tempo__calloc(1, sizeof(*bs), "bootstrap");
    if (!bs) {
        return TEMPO_ERR_NOMEM;
    }
    bs->launch = launch;
    bs->fd = -1;
    tempo_status_t st;
    if (launch->size == 1 && !launch->has_root) {
        st = tempo__addr_parse("127.0.0.1:0", local_p);
    } else if (launch->rank == 0) {
        st = root_listen(bs, local_p);
    } else {
        st = peer_connect(bs, deadline, local_p);
    }
    if (st != TEMPO_OK) {
        tempo__bootstrap_close(bs);
        return st;
    }
    *bs_p = bs;
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */

/* A reply to a rank: its header, payload (the table, or the error text) and MAC over the rank's
 * challenge (nonce), the header and the payload. */
static tempo_status_t send_reply_mac(int fd, const reply_t *r, const void *payload, size_t n,
                                     const uint8_t *nonce, uint64_t deadline)
{
    uint8_t mac[TEMPO__AUTH_MAC];
    const void *parts[] = {nonce, r, payload};
    size_t lens[] = {TEMPO__AUTH_NONCE, sizeof(*r), n};
    tempo__auth_mac("tempo rendezvous reply", 3, parts, lens, mac);
    tempo_status_t st = tempo__sock_send_all(fd, r, sizeof(*r), deadline, "peer");
    if (st == TEMPO_OK) {
        st = tempo__sock_send_all(fd, payload, n, deadline, "peer");
    }
    if (st == TEMPO_OK) {
        st = tempo__sock_send_all(fd, mac, sizeof(mac), deadline, "peer");
    }
    return st;
}

static void send_reply(int fd, int32_t status, const char *msg, const uint8_t *nonce,
                       uint64_t deadline)
{
    reply_t r = {REPLY_MAGIC, status, (uint32_t)strlen(msg), 0};
    (void)send_reply_mac(fd, &r, msg, r.msg_len, nonce, deadline);
}

/* Each connection at the rendezvous gets HELLO_S to send its whole hello, blob and MAC; they are
 * read side by side (core/sock.h's greeter, at most PENDING_MAX at once). */
#define HELLO_S 5.0
#define PENDING_MAX 64

int tempo__bs_hello_check(const void *msg, size_t len, const uint8_t *nonce, int auth,
                          uint64_t key_hash, const int *fds, int n, char *why, size_t why_len)
{
    hello_t h;
    memcpy(&h, msg, sizeof(h));
    const char *hblob = (const char *)msg + sizeof(h);
    const uint8_t *hmac = (const uint8_t *)msg + sizeof(h) + len;
    if (h.magic != HELLO_MAGIC || h.version != BS_VERSION) {
        snprintf(why, why_len, "not a tempo rank of this version");
        return TEMPO__HELLO_NOT_TEMPO;
    }
    if (auth) {
        uint8_t mac[TEMPO__AUTH_MAC];
        const void *parts[] = {nonce, &h, hblob};
        size_t lens[] = {TEMPO__AUTH_NONCE, sizeof(h), len};
        tempo__auth_mac("tempo rendezvous hello", 3, parts, lens, mac);
        if (!tempo__auth_equal(mac, hmac)) {
            snprintf(why, why_len, "its hello is not authenticated with this job's key (refused)");
            return TEMPO__HELLO_NOT_AUTH;
        }
    }
    if (h.key_hash != key_hash) {
        snprintf(why, why_len, "another job");
        return TEMPO__HELLO_OTHER_JOB;
    }
    int dup = h.rank > 0 && h.rank < n && fds[h.rank] >= 0;
    if (h.size != n) {
        snprintf(why, why_len, "rank %d was started with size %d but rank 0 with size %d",
                 (int)h.rank, (int)h.size, n);
    } else if (h.rank <= 0 || h.rank >= n) {
        snprintf(why, why_len, "a rank joined with rank %d, out of range for size %d",
                 (int)h.rank, n);
    } else if (dup) {
        snprintf(why, why_len, "two processes joined as rank %d", (int)h.rank);
    } else if (h.blob_len != len) {
        snprintf(why, why_len, "rank %d runs a different tempo build (blob %u != %zu)",
                 (int)h.rank, h.blob_len, len);
    } else {
        return TEMPO__HELLO_JOINED;
    }
    return TEMPO__HELLO_BROKEN;
}

static tempo_status_t root_gather(tempo__bootstrap_t *bs, const void *blob, size_t len,
                                  uint64_t deadline, char *all)
{
    const tempo__launch_t *l = bs->launch;
    uint64_t key_hash = tempo__hash64(l->job_key, strlen(l->job_key), 0);
    int n = l->size;
    int auth = tempo__auth_key() == 1;
    const size_t total = sizeof(hello_t) + len + TEMPO__AUTH_MAC;
    tempo__greeter_t g;
    int *fds = tempo__malloc(sizeof(int) * (size_t)n, "rendezvous sockets");
    uint8_t *nonces = tempo__calloc((size_t)n, TEMPO__AUTH_NONCE, "rendezvous challenges");
    if (!fds || !nonces ||
        tempo__greeter_init(&g, PENDING_MAX, total, HELLO_S, "rendezvous", TEMPO_SUB_INIT) !=
            TEMPO_OK) {
        tempo__free(fds);
        tempo__free(nonces);
        return TEMPO_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        fds[i] = -1;
    }
    memcpy(all, blob, len);
    chal_t ch = {CHAL_MAGIC, BS_VERSION, (uint32_t)auth, 0, {0}}; /* (its nonce: the greeter's) */
    tempo_status_t st = TEMPO_OK;
    char why[TEMPO_ERRMSG_LEN] = "";
    int joined = 1;
    while (joined < n && st == TEMPO_OK) {
        if (tempo__now_ns() >= deadline) {
            char missing[256] = "";
            size_t o = 0;
            for (int r = 1; r < n && o < sizeof(missing) - 16; r++) {
                if (fds[r] < 0) {
                    o +=
                        (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", r);
                }
            }
            snprintf(why, sizeof(why),
                     "rendezvous timed out after %.0f s: %d of %d ranks joined; "
                     "missing ranks %s",
                     tempo__cfg.timeout_s, joined, n, missing);
            st = TEMPO_ERR_TIMEOUT;
            break;
        }
        int i = tempo__greeter_next(&g, bs->fd, &ch, offsetof(chal_t, nonce), deadline);
        if (i < 0) {
            continue;
        }
        /* a whole hello: authenticated first (with a job key), then checked */
        tempo__greet_conn_t *c = &g.c[i];
        hello_t h;
        memcpy(&h, c->buf, sizeof(h));
        const char *hblob = (const char *)c->buf + sizeof(h);
        uint64_t reply_by = TEMPO_MIN(c->deadline, tempo__now_ns() + 1000000000ull);
        int verdict = tempo__bs_hello_check(c->buf, len, c->nonce, auth, key_hash, fds, n, why,
                                            sizeof(why));
        if (verdict == TEMPO__HELLO_NOT_TEMPO) {
            tempo__greeter_drop(&g, i, why);
            continue;
        }
        if (verdict == TEMPO__HELLO_NOT_AUTH) {
            send_reply(c->fd, TEMPO_ERR_BOOTSTRAP,
                       "not authenticated: the rendezvous checks every rank's hello with its "
                       "job's key (TEMPO_AUTH_KEY), and this one's does not match",
                       h.nonce, reply_by);
            tempo__greeter_drop(&g, i, why);
            continue;
        }
        if (verdict == TEMPO__HELLO_OTHER_JOB) {
            TEMPO_WARN(TEMPO_SUB_INIT,
                       "refused rank %d of another job at the rendezvous, from %s (job keys "
                       "differ; this job is '%s')",
                       (int)h.rank, c->who, l->job_key);
            send_reply(c->fd, TEMPO_ERR_BOOTSTRAP,
                       "the rendezvous belongs to another job "
                       "(job keys differ); use a different TEMPO_ROOT port "
                       "or TEMPO_JOB_ID",
                       h.nonce, reply_by);
            tempo__greeter_drop(&g, i, NULL);
            continue;
        }
        if (verdict == TEMPO__HELLO_BROKEN) {
            send_reply(c->fd, TEMPO_ERR_BOOTSTRAP, why, h.nonce, reply_by);
            tempo__greeter_drop(&g, i, NULL);
            st = TEMPO_ERR_BOOTSTRAP;
            break;
        }
        /* a rank of this job, joined */
        memcpy(all + (size_t)h.rank * len, hblob, len);
        memcpy(nonces + (size_t)h.rank * TEMPO__AUTH_NONCE, h.nonce, TEMPO__AUTH_NONCE);
        fds[h.rank] = tempo__greeter_take(&g, i);
        joined++;
    }
    tempo__greeter_free(&g); /* (not yet ranks of this job: nothing is said to them) */
    for (int r = 1; r < n; r++) {
        if (fds[r] < 0) {
            continue;
        }
        const uint8_t *nonce = nonces + (size_t)r * TEMPO__AUTH_NONCE;
        if (st == TEMPO_OK) {
            reply_t rep = {REPLY_MAGIC, 0, 0, 0};
            if (send_reply_mac(fds[r], &rep, all, len * (size_t)n, nonce, deadline) != TEMPO_OK) {
                snprintf(why, sizeof(why), "rank %d disconnected during the rendezvous", r);
                st = TEMPO_ERR_BOOTSTRAP;
            }
        } else {
            send_reply(fds[r], st, why, nonce, deadline);
        }
        close(fds[r]);
    }
    tempo__free(fds);
    tempo__free(nonces);
    if (st != TEMPO_OK) {
        return tempo__err(st, "%s", why);
    }
    return TEMPO_OK;
}

static tempo_status_t peer_gather(tempo__bootstrap_t *bs, const void *blob, size_t len,
                                  uint64_t deadline, char *all)
{
    const tempo__launch_t *l = bs->launch;
    const char *who = "rank 0 (rendezvous)";
    int auth = tempo__auth_key() == 1;
    chal_t ch;
    tempo_status_t st = tempo__sock_recv_all(bs->fd, &ch, sizeof(ch), deadline, who);
    if (st != TEMPO_OK) {
        return tempo__err(st, "rendezvous failed: %s", tempo__errmsg());
    }
    if (ch.magic != CHAL_MAGIC || ch.version != BS_VERSION) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous did not answer as a tempo rank 0 "
                          "of this version (another program, or another tempo build)");
    }
    if (ch.auth != (uint32_t)auth) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "%s",
                          auth ? "this rank has a job key (TEMPO_AUTH_KEY) but rank 0 does not "
                                 "authenticate: every rank needs the same key"
                               : "rank 0 authenticates its peers with a job key (TEMPO_AUTH_KEY, "
                                 "TEMPO_AUTH_KEY_FILE) and this rank has none: every rank needs "
                                 "the same key");
    }
    hello_t h = {HELLO_MAGIC,
                 BS_VERSION,
                 tempo__hash64(l->job_key, strlen(l->job_key), 0),
                 l->rank,
                 l->size,
                 (uint32_t)len,
                 0,
                 {0}};
    if (tempo__auth_random(h.nonce, sizeof(h.nonce)) != 0) {
        return TEMPO_ERR_SYSTEM;
    }
    uint8_t mac[TEMPO__AUTH_MAC];
    const void *parts[] = {ch.nonce, &h, blob};
    size_t lens[] = {TEMPO__AUTH_NONCE, sizeof(h), len};
    tempo__auth_mac("tempo rendezvous hello", 3, parts, lens, mac);
    TEMPO_CHECK(tempo__sock_send_all(bs->fd, &h, sizeof(h), deadline, who));
    TEMPO_CHECK(tempo__sock_send_all(bs->fd, blob, len, deadline, who));
    TEMPO_CHECK(tempo__sock_send_all(bs->fd, mac, sizeof(mac), deadline, who));
    reply_t r;
    st = tempo__sock_recv_all(bs->fd, &r, sizeof(r), deadline, who);
    if (st != TEMPO_OK) {
        return tempo__err(st, "rendezvous failed: %s", tempo__errmsg());
    }
    size_t n = r.status == 0 ? len * (size_t)l->size : r.msg_len;
    if (r.magic != REPLY_MAGIC || (r.status != 0 && r.msg_len >= TEMPO_ERRMSG_LEN)) {
        return tempo__err(TEMPO_ERR_BOOTSTRAP, "malformed reply from the rendezvous");
    }
    char msg[TEMPO_ERRMSG_LEN];
    char *payload = r.status == 0 ? all : msg;
    uint8_t got[TEMPO__AUTH_MAC];
    st = tempo__sock_recv_all(bs->fd, payload, n, deadline, who);
    if (st == TEMPO_OK) {
        st = tempo__sock_recv_all(bs->fd, got, sizeof(got), deadline, who);
    }
    if (st != TEMPO_OK) {
        return tempo__err(st, "rendezvous failed: %s", tempo__errmsg());
    }
    if (auth) {
        const void *rparts[] = {h.nonce, &r, payload};
        size_t rlens[] = {TEMPO__AUTH_NONCE, sizeof(r), n};
        tempo__auth_mac("tempo rendezvous reply", 3, rparts, rlens, mac);
        if (!tempo__auth_equal(mac, got)) {
            return tempo__err(TEMPO_ERR_BOOTSTRAP, "the rendezvous's reply is not authenticated "
                              "with this job's key: whoever answered at the rendezvous address "
                              "does not hold it (another job's rank 0, or an impostor)");
        }
    }
    if (r.status != 0) {
        msg[n] = '\0';
        tempo_status_t rs = (r.status < 0 && r.status > TEMPO_ERR_LAST) ? (tempo_status_t)r.status
                                                                        : TEMPO_ERR_BOOTSTRAP;
        return tempo__err(rs, "rendezvous refused rank %d: %s", l->rank, msg);
    }
    return TEMPO_OK;
}

tempo_status_t tempo__bootstrap_allgather(tempo__bootstrap_t *bs, const void *blob, size_t len,
                                          uint64_t deadline, void **all_p)
{
    if (len == 0 || len > MAX_BLOB) {
        return tempo__err(TEMPO_ERR_INTERNAL, "bootstrap blob of %zu bytes", len);
    }
    char *all = tempo__malloc(len * (size_t)bs->launch->size, "rendezvous table");
    if (!all) {
        return TEMPO_ERR_NOMEM;
    }
    tempo_status_t st;
    if (bs->launch->size == 1) {
        memcpy(all, blob, len);
        st = TEMPO_OK;
    } else if (bs->launch->rank == 0) {
        st = root_gather(bs, blob, len, deadline, all);
    } else {
        st = peer_gather(bs, blob, len, deadline, all);
    }
    if (st != TEMPO_OK) {
        tempo__free(all);
        return st;
    }
    *all_p = all;
    return TEMPO_OK;
}

void tempo__bootstrap_close(tempo__bootstrap_t *bs)
{
    if (!bs) {
        return;
    }
    if (bs->fd >= 0) {
        close(bs->fd);
    }
    if (bs->file[0]) {
        unlink(bs->file);
    }
    tempo__free(bs);
}
