/*
 * autosize.c — the self-sizing credit and chunk size of the scheduled lane: measurements and the
 * sizing rules documented in autosize.h. Deterministic arithmetic on the times it is given.
 */
#include "config.h"

#include <math.h>

#include "collectives/autosize.h"
#include "core/world.h"

void tempo__autosize_init(tempo__autosize_t *a, size_t credit_cfg, size_t chunk_cfg)
{
    *a = (tempo__autosize_t){0};
    a->auto_credit = credit_cfg == 0;
    a->auto_chunk = chunk_cfg == 0;
    a->credit = credit_cfg ? credit_cfg : TEMPO__AS_CREDIT_INIT;
    a->chunk = chunk_cfg ? chunk_cfg : TEMPO__AS_CHUNK_INIT;
    a->lat_s = -1.0;
    a->backoff = TEMPO__AS_HOLD_MIN;
}

tempo__as_mark_t tempo__autosize_mark(tempo__autosize_t *a, uint64_t t_ns, size_t inflight)
{
    a->starts++;
    if (inflight == 0) {
        if (a->busy && t_ns > a->busy_t0_ns) { /* a period whose last chunk failed */
            a->busy_s += (double)(t_ns - a->busy_t0_ns) * 1e-9;
        }
        a->busy = 1; /* a busy period begins */
        a->busy_t0_ns = t_ns;
        /* a latency probe is due while few lone samples are held or they age */
        a->probing = (a->auto_credit || a->auto_chunk) &&
                     (a->nl < TEMPO__AS_PROBE_MIN || a->since_lone >= TEMPO__AS_PROBE_EVERY);
    }
    uint64_t age = a->busy && t_ns > a->busy_t0_ns ? t_ns - a->busy_t0_ns : 0;
    return (tempo__as_mark_t){t_ns, inflight == 0, age, a->starts};
}

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* A rate sample at a completion: the bytes of the last TEMPO__AS_WIN completions (all but the
 * oldest) over the lane's busy time from the oldest to this one. Never more than the link moved in
 * that time however completions bunch (a progress pass that harvests several chunks at once, a
 * token bucket's burst), except for what was in flight at the oldest completion; below the
 * bandwidth-delay product it reads low (the busy time holds the latencies the link idled through),
 * which the credit rule corrects by growing. 0 until two completions are held. */
static double sample_rate(const tempo__autosize_t *a)
{
    if (a->ns < 2) {
        return 0.0;
    }
    unsigned newest = (a->is + TEMPO__AS_WIN - 1) % TEMPO__AS_WIN;
    unsigned oldest = (a->is + TEMPO__AS_WIN - a->ns) % TEMPO__AS_WIN;
    double busy = a->wb[newest] - a->wb[oldest];
    return busy > 0.0 ? (double)(a->wd[newest] - a->wd[oldest]) / busy : 0.0;
}

/* The second largest of the recent rate samples: the best stretch of the lane's recent work (one
 * without a probe, an iteration's tail, or a credit below the product), less one outlier. */
static double window_rate(const tempo__autosize_t *a)
{
    double r1 = 0.0, r2 = 0.0;
    for (unsigned i = 0; i < a->ns; i++) {
        if (a->rs[i] > r1) {
            r2 = r1;
            r1 = a->rs[i];
        } else if (a->rs[i] > r2) {
            r2 = a->rs[i];
        }
    }
    return a->ns > 1 ? r2 : r1;
}

/* The median of v[0..n) (n <= TEMPO__AS_WIN * TEMPO__AS_WIN), sorted in place. */
static double median(double *v, unsigned n)
{
    for (unsigned i = 1; i < n; i++) { /* insertion sort of a few values */
        double x = v[i];
        unsigned j = i;
        for (; j > 0 && v[j - 1] > x; j--) {
            v[j] = v[j - 1];
        }
        v[j] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* L from the lone chunks (durations d, sizes b). Where their sizes differ enough, d = L + b/R_l is
 * fitted to them (Theil-Sen: the median of the slopes between pairs at least 1.5x apart in size,
 * then the median intercept), so L does not depend on the window's R: on a link that lets bursts
 * through above its rate (a token bucket, a NIC's queue) the delivery rates of short transfers read
 * high, and d - b/R would take the underestimated transfer time of a large chunk for latency (a
 * 100 Mbit/s link with a 256 KiB bucket: R 21 MB/s and L 27 ms for 0.8 MB chunks). Otherwise, the
 * median of d - b/R: a lone chunk slowed by something else on the host is one sample out of many,
 * not a shift of the mean. */
static double lone_latency(const tempo__autosize_t *a, double r)
{
    double v[TEMPO__AS_WIN * TEMPO__AS_WIN];
    unsigned n = 0;
    for (unsigned i = 0; i < a->nl; i++) {
        for (unsigned j = 0; j < a->nl; j++) {
            if ((double)a->lb[j] >= 1.5 * (double)a->lb[i]) {
                v[n++] = (a->ld[j] - a->ld[i]) / (double)(a->lb[j] - a->lb[i]);
            }
        }
    }
    double slope = n >= 3 ? median(v, n) : 0.0;
    for (unsigned i = 0; i < a->nl; i++) {
        v[i] = a->ld[i] - (double)a->lb[i] * (slope > 0.0 ? slope : 1.0 / r);
    }
    return fmax(median(v, a->nl), 0.0);
}

/* The median over this window's chunks started beside others of d / (L + b/R): about 1 where they
 * moved as if alone (the link had room for them), more where they queued behind each other; 0
 * where none ran beside others. */
static double shared_q(const tempo__autosize_t *a)
{
    double v[TEMPO__AS_EVERY];
    for (unsigned i = 0; i < a->nsd; i++) {
        v[i] = a->sd[i] / (a->lat_s + (double)a->sb[i] / a->rate);
    }
    return a->nsd ? median(v, a->nsd) : 0.0;
}

/* R, L (each an EWMA, weight 1/2, of the windows' values at successive decisions) and the median
 * recent chunk. */
static size_t measure(tempo__autosize_t *a)
{
    double r = window_rate(a);
    if (r <= 0.0) {
        r = a->rate;
    }
    double v[TEMPO__AS_WIN];
    for (unsigned i = 0; i < a->ns; i++) {
        v[i] = (double)a->bs[i];
    }
    size_t b = a->ns ? (size_t)median(v, a->ns) : 0;
    if (a->nl) {
        double l = lone_latency(a, r);
        a->lat_s = a->lat_s < 0.0 ? l : 0.5 * (a->lat_s + l);
    }
    a->rate = a->rate <= 0.0 ? r : 0.5 * (a->rate + r);
    a->rh[a->irh] = r;
    a->irh = (a->irh + 1) % TEMPO__AS_RHIST;
    a->nrh += a->nrh < TEMPO__AS_RHIST;
    return b;
}

/* The rules of autosize.h, applied with hysteresis. */
static int resize(tempo__autosize_t *a, size_t b)
{
    double r = a->rate;
    if (a->lat_s < 0.0 || r <= 0.0 || a->samples < TEMPO__AS_WIN) {
        return 0; /* no lone chunk yet, or a window not yet full (of a first ramp's chunks) */
    }
    a->decisions++;
    int changed = 0;
    if (a->auto_credit) {
        /* In whole chunks of b. The rule, R*L + b, where within half a chunk of one more whole
         * chunk counts as it (a second chunk in flight covers the latency only where it is more
         * than half a chunk's transfer), is the floor of a descent, never climbed to directly:
         * below the product it reads the credit itself (autosize.h, How it moves). */
        double cb = (double)b;
        double k = fmax(floor((double)a->credit / cb + 0.5), 1.0), kw = k;
        double rule = fmax(floor((r * a->lat_s + cb) / cb + 0.5), 1.0);
        double q = shared_q(a);
        if (a->nsd >= 2 && q > TEMPO__AS_QUEUE_Q && k > rule) {
            /* They queued. k chunks in flight that take q times a lone chunk's time need about
             * k/q to keep the link as busy (fewer during a burst): at least one less, not below
             * the rule. A descent soon after a climb takes it back: the next try waits twice
             * as long. */
            kw = fmax(rule, fmin(k - 1.0, ceil(k / q)));
            if (a->climb_at && a->samples - a->climb_at <= 3 * TEMPO__AS_EVERY) {
                a->backoff =
                    2 * a->backoff > TEMPO__AS_HOLD_MAX ? TEMPO__AS_HOLD_MAX : 2 * a->backoff;
            }
            a->hold = a->backoff;
        } else if (a->held && !a->hold && (a->nsd >= 2 ? q <= TEMPO__AS_ROOM_Q : k < 2.0)) {
            /* room (or one chunk at a time, which cannot tell), and work waited */
            kw = k + 1.0;
            a->climb_at = a->samples;
        } else if (a->hold) {
            a->hold--;
        }
        size_t c =
            (size_t)clampd(kw * cb, (double)TEMPO__AS_CREDIT_MIN, (double)TEMPO__AS_CREDIT_MAX);
        /* a credit under half a chunk, left from smaller chunks, is one chunk now */
        if ((kw != k || (double)a->credit < 0.5 * cb) && c != a->credit) {
            a->credit = c;
            changed = 1;
        }
    }
    if (a->auto_chunk) {
        double rc = 0.0;
        for (unsigned i = 0; i < a->nrh; i++) {
            rc = fmax(rc, a->rh[i]);
        }
        double want = clampd(rc * TEMPO__AS_CHUNK_T, (double)TEMPO__AS_CHUNK_MIN,
                             (double)TEMPO__AS_CHUNK_MAX);
        /* A change needs two decisions in a row that want one in the same direction: one
         * decision's R can read low (a window that holds a probe or an iteration's tail). */
        double lw = log2(want), dl = lw - log2((double)a->chunk);
        int dir = dl >= 1.0 ? 1 : dl <= -1.0 ? -1 : 0;
        if (dir && dir == a->chunk_dir) {
            a->chunk = (size_t)1 << (int)lround(lw);
            changed = 1;
            dir = 0;
        }
        a->chunk_dir = dir;
    }
    return changed;
}

int tempo__autosize_done(tempo__autosize_t *a, const tempo__as_mark_t *m, size_t bytes,
                         uint64_t t_ns, size_t inflight)
{
    double busy = a->busy_s;
    if (a->busy && t_ns > a->busy_t0_ns) {
        busy += (double)(t_ns - a->busy_t0_ns) * 1e-9;
    }
    if (inflight == 0) { /* the busy period ends */
        a->busy_s = busy;
        a->busy = 0;
    }
    a->delivered += bytes;
    if (t_ns <= m->t0_ns || bytes == 0) {
        return 0; /* a clock that did not move says nothing */
    }
    double d = (double)(t_ns - m->t0_ns) * 1e-9;
    a->wd[a->is] = a->delivered;
    a->wb[a->is] = busy;
    a->bs[a->is] = bytes;
    a->is = (a->is + 1) % TEMPO__AS_WIN;
    a->ns += a->ns < TEMPO__AS_WIN;
    a->rs[(a->is + TEMPO__AS_WIN - 1) % TEMPO__AS_WIN] = sample_rate(a);
    a->probing = 0; /* while probing only the probe is in flight, and this is its end */
    if (m->alone && m->starts == a->starts) { /* alone from start to end: d is L + b/R */
        a->since_lone = 0;
        a->ld[a->il] = d;
        a->lb[a->il] = bytes;
        a->il = (a->il + 1) % TEMPO__AS_WIN;
        a->nl += a->nl < TEMPO__AS_WIN;
    } else {
        a->since_lone++;
    }
    /* Started beside others, into a running stream (not in a busy period's opening burst,
     * whose chunks share one latency and then queue whatever the credit): did it queue? */
    if (!m->alone && a->nsd < TEMPO__AS_EVERY && (double)m->age_ns * 1e-9 >= a->lat_s) {
        a->sd[a->nsd] = d;
        a->sb[a->nsd++] = bytes;
    }
    a->samples++;
    if (a->samples % TEMPO__AS_EVERY) {
        return 0; /* decide every few chunks: fewer, better-founded changes */
    }
    int changed = resize(a, measure(a));
    a->held = 0; /* the next window's */
    a->nsd = 0;
    return changed;
}

int tempo__autosize_cut_free(int coll, int dtype, int nranks, int compressed)
{
    if (compressed) {
        return 0;
    }
    if (coll != TEMPO__COLL_ALLREDUCE && coll != TEMPO__COLL_REDUCE_SCATTER &&
        coll != TEMPO__COLL_REDUCE) {
        return 1;
    }
    return nranks <= 2 || dtype < TEMPO_FLOAT16;
}

int tempo__autosize_fits(tempo__autosize_t *a, size_t inflight, size_t bytes)
{
    if (a->probing && inflight) {
        return 0;
    }
    if (!a->auto_credit) {
        return inflight < a->credit;
    }
    if (inflight == 0 || inflight + bytes <= a->credit) {
        return 1;
    }
    a->held = 1;
    return 0;
}
