/*
 * ckpt.c — checkpoints of the trainer (see ckpt.h for the layout and the guarantees).
 *
 * File formats (host byte order; little-endian on every machine we build for):
 *   model.bin        u32 magic "TMDL", u32 version, ckpt_meta_t (zero-padded), num_params fp32,
 *                    u64 FNV-1a of all preceding bytes. Version 2 added ckpt_meta_t's batch and
 *                    accum at its end; a version-1 file has the meta without them (read with 0).
 *   optim_RRRRR.bin  u32 magic "TOPT", u32 version, u32 rank, u32 nranges, u64 num_params,
 *                    i64 step, nranges x (u64 off, u64 n), m (sum n fp32), v (sum n fp32),
 *                    u64 FNV-1a of all preceding bytes
 */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainer/ckpt.h"

#define MODEL_MAGIC 0x4c444d54u /* "TMDL" */
#define OPTIM_MAGIC 0x54504f54u /* "TOPT" */
#define MODEL_VERSION 2u
#define MODEL_V1_META offsetof(ckpt_meta_t, batch) /* version 1: the meta up to batch */
#define OPTIM_VERSION 1u

static int errf(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, CKPT_ERR_LEN, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ c[i]) * 1099511628211ull;
    }
    return h;
}
#define FNV0 1469598103934665603ull

uint64_t ckpt_checksum(const void *p, size_t n)
{
    return fnv(FNV0, p, n);
}

/* A file being written: data goes through stdio, the checksum alongside. err: the errno of the
 * first failure (0 while fine), kept so the report names the cause, not a later call's errno. */
typedef struct {
    FILE *f;
    uint64_t h;
    int err;
} wfile_t;

static void wfail(wfile_t *w)
{
    if (!w->err) {
        w->err = errno ? errno : EIO;
    }
}

static void wput(wfile_t *w, const void *p, size_t n)
{
    if (n && !w->err && fwrite(p, 1, n, w->f) != n) {
        wfail(w);
    }
    w->h = fnv(w->h, p, n);
}

static int wopen(wfile_t *w, const char *path, char *err)
{
    *w = (wfile_t){fopen(path, "wb"), FNV0, 0};
    return w->f ? 0 : errf(err, "cannot create %s: %s", path, strerror(errno));
}

/* Append the checksum, flush, fsync and close. A file that could not be written whole is removed
 * (a disk-full save must not leave a partial file that keeps the disk full). */
static int wclose(wfile_t *w, const char *path, char *err)
{
    uint64_t h = w->h;
    wput(w, &h, sizeof h);
    if (!w->err && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)) {
        wfail(w);
    }
    if (fclose(w->f) != 0) {
        wfail(w);
    }
    if (w->err) {
        unlink(path);
        return errf(err, "cannot write %s: %s", path, strerror(w->err));
    }
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        return -1;
    }
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Remove a checkpoint directory (files, and checkpoint directories in a superseded-* one). 0 once
 * it is gone. */
static int remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        return errno == ENOENT ? 0 : -1;
    }
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            if (unlink(p) != 0 && errno == EISDIR) {
                remove_dir(p);
            }
        }
    }
    closedir(d);
    return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* "step_<digits>.tmp": the directory of a save that has not been published. A complete
 * checkpoint never has this name (publishing renames it away), so removing one loses nothing. */
static int is_tmp_name(const char *name)
{
    const char *c = name + 5;
    if (strncmp(name, "step_", 5) || !isdigit((unsigned char)*c)) {
        return 0;
    }
    while (isdigit((unsigned char)*c)) {
        c++;
    }
    return !strcmp(c, ".tmp");
}

/* Rank 0, before any rank writes: create dir, remove the temporary directories of saves that never
 * finished (a run killed while saving, or a failed save whose own cleanup failed too), whose space
 * the new save may need, then create tmp. */
static int prepare(const char *dir, const char *tmp, char *err)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        return errf(err, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
    }
    DIR *d = opendir(dir);
    if (!d) {
        return errf(err, "cannot read checkpoint directory %s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (is_tmp_name(e->d_name)) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            remove_dir(p);
        }
    }
    closedir(d);
    if (mkdir(tmp, 0777) != 0) {
        return errf(err, "cannot create %s: %s%s", tmp, strerror(errno),
                    errno == EEXIST ? " (left by an earlier save, and it cannot be removed)" : "");
    }
    return 0;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Delete complete checkpoints older than the newest keep. */
static void prune(const char *dir, int keep)
{
    DIR *d = opendir(dir);
    if (!d || keep <= 0) {
        if (d) {
            closedir(d);
        }
        return;
    }
    long steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        long s;
        char tail;
        if (sscanf(e->d_name, "step_%ld%c", &s, &tail) == 1) {
            steps[n++] = s;
        }
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof(long), cmp_long);
    for (int i = 0; i + keep < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/step_%08ld", dir, steps[i]);
        remove_dir(p);
    }
}

/* A name a checkpoint directory's content may have: step_<digits>[.tmp], latest, latest.tmp,
 * superseded-* (ckpt_supersede). */
static int ckpt_name(const char *name, long *step_p, int *complete_p)
{
    char tail;
    *complete_p = sscanf(name, "step_%ld%c", step_p, &tail) == 1;
    return *complete_p || is_tmp_name(name) || !strcmp(name, "latest") ||
           !strcmp(name, "latest.tmp") || !strncmp(name, "superseded-", 11);
}

int ckpt_count(const char *dir, int *complete_p, long *newest_p)
{
    int n = 0, complete = 0, c;
    long newest = -1, s;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (ckpt_name(e->d_name, &s, &c) && !is_tmp_name(e->d_name) &&
            strcmp(e->d_name, "latest.tmp")) {
            n++;
            complete += c;
            newest = c && s > newest ? s : newest;
        }
    }
    if (d) {
        closedir(d);
    }
    *complete_p = complete;
    *newest_p = newest;
    return n;
}

int ckpt_clear(const char *dir, char *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        return errno == ENOENT ? 0 : errf(err, "cannot read %s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    char p[4096];
    long s;
    int c, rc = 0;
    while ((e = readdir(d))) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (ckpt_name(e->d_name, &s, &c) && unlink(p) != 0 && remove_dir(p) != 0 && !rc) {
            rc = errf(err, "cannot remove %s: %s", p, strerror(errno));
        }
    }
    closedir(d);
    if (!rc && rmdir(dir) != 0 && errno != ENOTEMPTY && errno != EEXIST) {
        rc = errf(err, "cannot remove %s: %s", dir, strerror(errno));
    }
    return rc;
}

static int point_latest(const char *dir, const char *fin, int64_t step, char *err);

int ckpt_supersede(const char *dir, long step, char *moved_to, char *err)
{
    moved_to[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) {
        return errno == ENOENT ? 0 : errf(err, "cannot read %s: %s", dir, strerror(errno));
    }
    char to[4096], src[4096], dst[4096 + 64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    snprintf(to, sizeof to, "%s/superseded-%04d%02d%02d-%02d%02d%02d", dir, tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    struct dirent *e;
    long s;
    int c, n = 0, rc = 0;
    while (!rc && (e = readdir(d))) {
        if (!ckpt_name(e->d_name, &s, &c) || !c || s <= step) {
            continue;
        }
        if (n++ == 0 && mkdir(to, 0777) != 0 && errno != EEXIST) {
            rc = errf(err, "cannot create %s: %s", to, strerror(errno));
            break;
        }
        snprintf(src, sizeof src, "%s/%s", dir, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", to, e->d_name);
        if (rename(src, dst) != 0) {
            rc = errf(err, "cannot move %s to %s: %s", src, to, strerror(errno));
        }
    }
    closedir(d);
    if (rc || n == 0) {
        return rc;
    }
    snprintf(moved_to, 4096, "%s", to);
    snprintf(src, sizeof src, "%s/step_%08ld", dir, step);
    struct stat st;
    if (stat(src, &st) == 0) {
        rc = point_latest(dir, src, step, err);
    } else { /* resumed from a checkpoint kept elsewhere: latest named a moved one */
        snprintf(dst, sizeof dst, "%s/latest", dir);
        unlink(dst);
    }
    return rc ? rc : n;
}

/* Rank 0, once every rank's files are durable: rename tmp to fin, then point latest at it. A
 * failure before the rename removes tmp; after it, fin is complete and stays. */
static int publish(const char *dir, const char *tmp, const char *fin, int64_t step, char *err)
{
    int bad = fsync_dir(tmp) != 0;
    if (!bad) {
        remove_dir(fin); /* the same step saved again (a run resumed from an older checkpoint) */
        bad = rename(tmp, fin) != 0;
    }
    if (bad) {
        int e = errno;
        remove_dir(tmp);
        return errf(err, "cannot publish %s as %s: %s", tmp, fin, strerror(e));
    }
    return point_latest(dir, fin, step, err);
}

/* Replace dir/latest (through latest.tmp) with the name of step's checkpoint fin. */
static int point_latest(const char *dir, const char *fin, int64_t step, char *err)
{
    char p[4096], lat[4096];
    snprintf(p, sizeof p, "%s/latest.tmp", dir);
    snprintf(lat, sizeof lat, "%s/latest", dir);
    int e = fsync_dir(dir) != 0 ? errno : 0; /* the rename is durable before latest names it */
    FILE *f = e ? NULL : fopen(p, "w");
    if (!e && !f) {
        e = errno;
    }
    if (f && (fprintf(f, "step_%08lld\n", (long long)step) < 0 || fflush(f) != 0 ||
              fsync(fileno(f)) != 0)) {
        e = errno ? errno : EIO;
    }
    if (f && fclose(f) != 0 && !e) {
        e = errno;
    }
    if (!e && rename(p, lat) != 0) {
        e = errno;
    }
    if (e) {
        unlink(p);
        return errf(err,
                    "%s is complete, but %s cannot be updated: %s (it still names the previous "
                    "checkpoint)",
                    fin, lat, strerror(e));
    }
    if (fsync_dir(dir) != 0) {
        return errf(err, "cannot sync %s after updating %s: %s", dir, lat, strerror(errno));
    }
    return 0;
}

/* The verdict on one phase of a save: every rank learns whether any rank failed (rc != 0). */
static int any_failed(int rc, int (*agree)(void *, int *), void *arg, const char *tmp, char *err,
                      int *failed_p)
{
    *failed_p = rc != 0;
    if (agree(arg, failed_p)) {
        *failed_p = 1;
        return errf(err, "lost contact with the other ranks while saving %s", tmp);
    }
    return rc;
}

/* The return value of a rank whose own part went well when another rank's did not. */
static int failed_elsewhere(const char *fin, char *err)
{
    errf(err, "checkpoint %s not saved: another rank failed (its message says why)", fin);
    return CKPT_FAILED_ELSEWHERE;
}

int ckpt_save(const char *dir, const ckpt_meta_t *meta, const float *params,
              const ckpt_range_t *ranges, int nranges, const float *m, const float *v, int keep,
              int rank, int (*agree)(void *, int *), void *agree_arg, char *err)
{
    char tmp[4096], fin[4096], mine[2][4096]; /* mine: the files this rank has written whole */
    int nmine = 0, failed;
    snprintf(tmp, sizeof tmp, "%s/step_%08lld.tmp", dir, (long long)meta->step);
    snprintf(fin, sizeof fin, "%s/step_%08lld", dir, (long long)meta->step);
    int rc = rank == 0 ? prepare(dir, tmp, err) : 0;
    if ((rc = any_failed(rc, agree, agree_arg, tmp, err, &failed)) || failed) {
        return rc ? CKPT_FAILED_HERE : failed_elsewhere(fin, err);
    }
    if (rank == 0) {
        wfile_t w;
        snprintf(mine[nmine], sizeof mine[0], "%s/model.bin", tmp);
        if ((rc = wopen(&w, mine[nmine], err)) == 0) {
            uint32_t hdr[2] = {MODEL_MAGIC, MODEL_VERSION};
            ckpt_meta_t mt;
            memset(&mt, 0, sizeof mt);
            mt = *meta;
            wput(&w, hdr, sizeof hdr);
            wput(&w, &mt, sizeof mt);
            wput(&w, params, meta->num_params * sizeof(float));
            rc = wclose(&w, mine[nmine], err);
            nmine += rc == 0;
        }
    }
    if (rc == 0 && nranges > 0) {
        wfile_t w;
        snprintf(mine[nmine], sizeof mine[0], "%s/optim_%05d.bin", tmp, rank);
        if ((rc = wopen(&w, mine[nmine], err)) == 0) {
            uint32_t hdr[4] = {OPTIM_MAGIC, OPTIM_VERSION, (uint32_t)rank, (uint32_t)nranges};
            uint64_t np = meta->num_params;
            int64_t step = meta->step;
            size_t tot = 0;
            wput(&w, hdr, sizeof hdr);
            wput(&w, &np, sizeof np);
            wput(&w, &step, sizeof step);
            for (int i = 0; i < nranges; i++) {
                wput(&w, &ranges[i], sizeof ranges[i]);
                tot += ranges[i].n;
            }
            wput(&w, m, tot * sizeof(float));
            wput(&w, v, tot * sizeof(float));
            rc = wclose(&w, mine[nmine], err);
            nmine += rc == 0;
        }
    }
    /* Every rank's files are durable before the directory is published. If any rank failed, the
     * save is abandoned: each rank removes the files it wrote (a file it failed to write is gone
     * already), rank 0 the directory, so a full disk is left as it was before the save. */
    if ((rc = any_failed(rc, agree, agree_arg, tmp, err, &failed)) || failed) {
        for (int i = 0; i < nmine; i++) {
            unlink(mine[i]);
        }
        if (rank == 0) {
            remove_dir(tmp);
        }
        return rc ? CKPT_FAILED_HERE : failed_elsewhere(fin, err);
    }
    rc = rank == 0 ? publish(dir, tmp, fin, meta->step, err) : 0;
    if ((rc = any_failed(rc, agree, agree_arg, tmp, err, &failed)) || failed) {
        return rc ? CKPT_FAILED_HERE : failed_elsewhere(fin, err);
    }
    if (rank == 0) {
        prune(dir, keep);
    }
    return 0;
}

int ckpt_latest(const char *dir, char *path, char *err)
{
    char p[4096], name[256];
    snprintf(p, sizeof p, "%s/latest", dir);
    FILE *f = fopen(p, "r");
    if (!f) {
        return errf(err, "no checkpoint in %s (%s: %s)", dir, p, strerror(errno));
    }
    int ok = fscanf(f, "%255s", name) == 1 && !strncmp(name, "step_", 5) && !strchr(name, '/');
    fclose(f);
    if (!ok) {
        return errf(err, "%s does not name a checkpoint", p);
    }
    snprintf(path, 4096, "%s/%s", dir, name);
    return 0;
}

/* Read a whole file and check its trailing checksum. */
static unsigned char *read_checked(const char *path, size_t *len_p, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        errf(err, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 16) {
        errf(err, "%s is truncated (%lld bytes)", path, (long long)st.st_size);
        goto out;
    }
    buf = malloc((size_t)st.st_size);
    if (!buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        errf(err, "cannot read %s: %s", path, buf ? strerror(errno) : "out of memory");
        free(buf);
        buf = NULL;
        goto out;
    }
    size_t n = (size_t)st.st_size - 8;
    uint64_t h;
    memcpy(&h, buf + n, 8);
    if (fnv(FNV0, buf, n) != h) {
        errf(err, "%s is corrupt or truncated (checksum mismatch)", path);
        free(buf);
        buf = NULL;
        goto out;
    }
    *len_p = n;
out:
    fclose(f);
    return buf;
}

/* The meta after model.bin's magic and version (buf: len bytes of the file), into mt, and its
 * length in the file into mlen_p. */
static int parse_meta(const char *p, const unsigned char *buf, size_t len, ckpt_meta_t *mt,
                      size_t *mlen_p, char *err)
{
    uint32_t hdr[2];
    if (len < sizeof hdr) {
        return errf(err, "%s is truncated", p);
    }
    memcpy(hdr, buf, sizeof hdr);
    if (hdr[0] != MODEL_MAGIC || (hdr[1] != MODEL_VERSION && hdr[1] != 1)) {
        return errf(err, "%s is not a tempo-train model checkpoint (magic %08x, version %u)", p,
                    hdr[0], hdr[1]);
    }
    size_t mlen = hdr[1] == 1 ? MODEL_V1_META : sizeof *mt;
    if (len < sizeof hdr + mlen) {
        return errf(err, "%s is truncated", p);
    }
    memset(mt, 0, sizeof *mt);
    memcpy(mt, buf + sizeof hdr, mlen);
    *mlen_p = mlen;
    return 0;
}

int ckpt_peek(const char *path, ckpt_meta_t *meta_p, char *err)
{
    char p[4096];
    unsigned char buf[8 + sizeof(ckpt_meta_t)];
    snprintf(p, sizeof p, "%s/model.bin", path);
    FILE *f = fopen(p, "rb");
    if (!f) {
        return errf(err, "cannot open %s: %s", p, strerror(errno));
    }
    size_t len = fread(buf, 1, sizeof buf, f), mlen;
    fclose(f);
    return parse_meta(p, buf, len, meta_p, &mlen, err);
}

typedef struct {
    ckpt_range_t r;
    const float *m, *v;
} piece_t;

int ckpt_load(const char *path, const ckpt_meta_t *want, ckpt_meta_t *meta_p, float *params,
              const ckpt_range_t *ranges, int nranges, float *m, float *v, char *err)
{
    char p[4096];
    int rc = -1, nfiles = 0, npieces = 0;
    unsigned char *model = NULL, **files = NULL;
    piece_t *pieces = NULL;
    size_t len;
    snprintf(p, sizeof p, "%s/model.bin", path);
    if (!(model = read_checked(p, &len, err))) {
        return -1;
    }
    ckpt_meta_t mt;
    size_t mlen = 0;
    if (parse_meta(p, model, len, &mt, &mlen, err)) {
        goto out;
    }
    if (mt.n_layer != want->n_layer || mt.n_head != want->n_head ||
        mt.channels != want->channels || mt.max_seq_len != want->max_seq_len ||
        mt.vocab_size != want->vocab_size || mt.num_params != want->num_params) {
        errf(err,
             "%s holds a model of %d layers, %d heads, %d channels, context %d, vocabulary %d "
             "(%llu parameters); this run has %d, %d, %d, %d, %d (%llu)",
             p, mt.n_layer, mt.n_head, mt.channels, mt.max_seq_len, mt.vocab_size,
             (unsigned long long)mt.num_params, want->n_layer, want->n_head, want->channels,
             want->max_seq_len, want->vocab_size, (unsigned long long)want->num_params);
        goto out;
    }
    /* (len - 8 - mlen) / 4 before the product: a num_params near 2^62 wraps it */
    if ((len - 8 - mlen) % sizeof(float) || (len - 8 - mlen) / sizeof(float) != mt.num_params) {
        errf(err, "%s has %zu bytes, not the header's %zu and %llu parameters", p, len,
             8 + mlen, (unsigned long long)mt.num_params);
        goto out;
    }
    /* Optimizer files: every optim_*.bin of the checkpoint. */
    DIR *d = opendir(path);
    if (!d) {
        errf(err, "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        int r;
        char tail;
        if (sscanf(e->d_name, "optim_%d.bi%c", &r, &tail) != 2 || tail != 'n') {
            continue;
        }
        unsigned char **nf = realloc(files, (size_t)(nfiles + 1) * sizeof(*files));
        if (!nf) {
            closedir(d);
            errf(err, "out of memory");
            goto out;
        }
        files = nf;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (!(files[nfiles] = read_checked(p, &len, err))) {
            closedir(d);
            goto out;
        }
        nfiles++;
        unsigned char *b = files[nfiles - 1];
        uint32_t oh[4];
        uint64_t np;
        int64_t step;
        if (len < 32) {
            closedir(d);
            errf(err, "%s is truncated", p);
            goto out;
        }
        memcpy(oh, b, 16);
        memcpy(&np, b + 16, 8);
        memcpy(&step, b + 24, 8);
        size_t nr = oh[3], tot = 0;
        if (oh[0] != OPTIM_MAGIC || oh[1] != OPTIM_VERSION || np != mt.num_params ||
            step != mt.step || len < 32 + nr * 16) {
            closedir(d);
            errf(err, "%s does not belong to this checkpoint (step %lld, %llu parameters)", p,
                 (long long)step, (unsigned long long)np);
            goto out;
        }
        piece_t *np2 = realloc(pieces, ((size_t)npieces + nr + 1) * sizeof(*pieces));
        if (!np2) {
            closedir(d);
            errf(err, "out of memory");
            goto out;
        }
        pieces = np2;
        /* Each range inside the model and their sum within the file (off + n and 8 * tot would
         * wrap: a range [2^64 - 2^61, +2^61) passed both, and moved the next range's m and v
         * pointers 2^63 bytes outside the file). */
        size_t room = (len - 32 - nr * 16) / (2 * sizeof(float)); /* elements m and v can hold */
        for (size_t i = 0; i < nr; i++) {
            ckpt_range_t *rg = &pieces[npieces + (int)i].r;
            memcpy(rg, b + 32 + i * 16, 16);
            if (rg->off > mt.num_params || rg->n > mt.num_params - rg->off) {
                closedir(d);
                errf(err, "%s: range [%llu, +%llu) outside the model", p,
                     (unsigned long long)rg->off, (unsigned long long)rg->n);
                goto out;
            }
            if (rg->n > room - tot) {
                closedir(d);
                errf(err, "%s has %zu bytes, too few for its ranges", p, len);
                goto out;
            }
            tot += rg->n;
        }
        if (len != 32 + nr * 16 + 2 * tot * sizeof(float)) {
            closedir(d);
            errf(err, "%s has %zu bytes, expected %zu", p, len,
                 32 + nr * 16 + 2 * tot * sizeof(float));
            goto out;
        }
        const float *mm = (const float *)(b + 32 + nr * 16), *vv = mm + tot;
        for (size_t i = 0; i < nr; i++) {
            piece_t *pc = &pieces[npieces + (int)i];
            pc->m = mm;
            pc->v = vv;
            mm += pc->r.n;
            vv += pc->r.n;
        }
        npieces += (int)nr;
    }
    closedir(d);
    /* Coverage: every requested element exactly once. */
    for (int i = 0; i < nranges; i++) {
        uint64_t a = ranges[i].off, z = a + ranges[i].n, covered = 0;
        for (int k = 0; k < npieces; k++) {
            uint64_t lo = pieces[k].r.off > a ? pieces[k].r.off : a;
            uint64_t hi = pieces[k].r.off + pieces[k].r.n < z ? pieces[k].r.off + pieces[k].r.n : z;
            covered += hi > lo ? hi - lo : 0;
        }
        if (covered != ranges[i].n) {
            errf(err,
                 "%s: optimizer state for parameters [%llu, %llu) is %s (files missing or "
                 "overlapping)",
                 path, (unsigned long long)a, (unsigned long long)z,
                 covered < ranges[i].n ? "incomplete" : "duplicated");
            goto out;
        }
    }
    /* Everything checked: copy out. */
    size_t pos = 0;
    for (int i = 0; i < nranges; i++) {
        uint64_t a = ranges[i].off, z = a + ranges[i].n;
        for (int k = 0; k < npieces; k++) {
            uint64_t lo = pieces[k].r.off > a ? pieces[k].r.off : a;
            uint64_t hi = pieces[k].r.off + pieces[k].r.n < z ? pieces[k].r.off + pieces[k].r.n : z;
            if (hi > lo) {
                memcpy(m + pos + (lo - a), pieces[k].m + (lo - pieces[k].r.off),
                       (hi - lo) * sizeof(float));
                memcpy(v + pos + (lo - a), pieces[k].v + (lo - pieces[k].r.off),
                       (hi - lo) * sizeof(float));
            }
        }
        pos += ranges[i].n;
    }
    memcpy(params, model + 8 + mlen, mt.num_params * sizeof(float));
    *meta_p = mt;
    rc = 0;
out:
    for (int i = 0; i < nfiles; i++) {
        free(files[i]);
    }
    free(files);
    free(pieces);
    free(model);
    return rc;
}

int ckpt_dump(const char *path, int step, double loss, const float *g, size_t n, char *err)
{
    FILE *f = fopen(path, "wb");
    double hdr[2] = {loss, (double)n};
    if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1 || fwrite(g, sizeof(float), n, f) != n) {
        int e = errno;
        if (f) {
            fclose(f);
        }
        return errf(err, "cannot write %s: %s", path, strerror(e));
    }
    if (fclose(f) != 0) {
        return errf(err, "cannot write %s: %s", path, strerror(errno));
    }
    printf("dump: wrote %s (%zu bytes): the loss (%.6f) and the synchronized gradient of step %d, "
           "%zu float32 after a 16-byte header (loss, count as float64); no update was made\n",
           path, sizeof hdr + n * sizeof(float), loss, step, n);
    fflush(stdout);
    return 0;
}
