/*
 * autosize.h — the scheduled lane's self-sizing credit and chunk size (TEMPO_CREDIT_BYTES=auto,
 * TEMPO_CHUNK_BYTES=auto): an estimator fed with the lane's own completed chunks (bytes, start and
 * finish times) that measures the communicator's transfer rate and per-chunk latency and turns
 * them into a credit and a chunk size. Pure arithmetic on the times it is given (no clock, no
 * locks, no logging), so tests drive it with a fake clock; schedq.c owns one per communicator, on
 * the coordinator only (the only rank whose credit and chunk size decide anything).
 *
 * Model. A chunk of b bytes started on an idle lane takes L + b/R: a per-chunk latency L (start
 * decision, first bytes, progress wake-ups, completion) and a transfer at rate R.
 *   - R: the second largest of the last TEMPO__AS_WIN rate samples (a max filter, less one
 *     outlier), averaged with the previous decision's R (and L likewise). A sample, taken at each
 *     completion, is the bytes of the last TEMPO__AS_WIN completed chunks (all but the oldest)
 *     over the lane's busy time (time with chunks in flight) from the oldest completion to this
 *     one. It cannot read more than the link moved however completions bunch (several harvested
 *     in one progress pass, a token bucket's burst: per-chunk delivery rates, bytes completed
 *     during a chunk's lifetime over it, read 345 MB/s on a 100 Mbit/s link). While the credit
 *     is below the bandwidth-delay product it underestimates R (the busy time holds the
 *     latencies the link idled through), which the credit rule below corrects by growing; a
 *     window that holds a probe or an iteration's last few chunks reads low too, and the max
 *     filter passes over it.
 *   - L: from the last TEMPO__AS_WIN lone chunks (durations d, sizes b): chunks that were the
 *     only chunk of the lane in flight from their start to their end, so d holds no queue. Where
 *     their sizes differ (pairs at least 1.5x apart), d = L + b*s is fitted to them (Theil-Sen:
 *     s the median of the pairs' slopes, L the median of d - b*s, at least 0), so that L does not
 *     lean on R: a link that passes short bursts above its rate makes the transfer of a large
 *     chunk look shorter than it is. Otherwise L is the median of d - b/R (at least 0). A chunk
 *     that starts on an idle lane but is joined by others is not lone: the chunks of a ring share
 *     its links, so its d grows with what the credit let in after it, and taking it as latency
 *     fed the credit back into itself (on 4 hosts at 1 Gbit/s, L read 18-71 ms against
 *     0.1-3 ms, and the credit 2.6-7.9 MB against 1.1). Lone chunks do not occur on their own
 *     on a busy lane, so the estimator asks for them: a chunk started on an idle lane becomes a
 *     probe (nothing else starts until it completes, tempo__autosize_fits) while fewer than
 *     TEMPO__AS_PROBE_MIN lone samples are held or TEMPO__AS_PROBE_EVERY chunks have completed
 *     since the last one; BBR's PROBE_RTT for the same reason. A probe costs at most one
 *     latency of an otherwise idle link, once per TEMPO__AS_PROBE_EVERY chunks. L is recomputed
 *     at each decision from the samples held, so an early underestimate of R does not linger.
 *   - credit: whole chunks of b, b the median size of the last TEMPO__AS_WIN chunks, held near
 *     R*L + b: the bytes the link moves during one chunk's latency, plus the chunk (within half
 *     a chunk of one more whole chunk counts as it: a second chunk in flight covers the latency
 *     only where it is more than half a chunk's transfer). The credit is a ceiling: a chunk
 *     starts only if it fits (or the lane is idle). On a shallow link (R*L well under a chunk:
 *     shared memory, a LAN ring with chunks of a millisecond or more) that is one chunk at a
 *     time, so urgent work waits for at most one chunk ahead of it; the earlier rule, R*L + 2b,
 *     kept a second chunk in flight that only queued there (4 hosts at 1 Gbit/s, whole 1 MB
 *     buckets: TIC's step 380-388 ms against 367-371 with a hand-set 1 MB credit). Bounded to
 *     [TEMPO__AS_CREDIT_MIN, TEMPO__AS_CREDIT_MAX]. b is a typical chunk, not the largest: a
 *     request far larger than the others (VGG's 18.7 MB fc6 among buckets of about 1 MB) then
 *     starts only on an idle lane, instead of setting a credit under which every small bucket
 *     goes at once (the largest chunk set it until this rule; on 4 hosts at 1 Gbit/s TIC with
 *     whole vgg buckets then gained 0-3 % over fifo).
 *   - How it moves, at each decision, from what the window's chunks did. Below the
 *     bandwidth-delay product R*L + b cannot see the link: with k chunks in flight the measured
 *     R is kb/(L + b/R) and, for chunks of one size, L comes out as (L + b/R)(1 - 1/k), so
 *     R*L + b = kb whatever the link (and with k = 1 every chunk is lone and L reads 0). What
 *     does tell is whether chunks queue: q, the median over the window's chunks that started
 *     beside others in a running stream (not in a busy period's opening burst, whose chunks
 *     share one latency and then queue whatever the credit), of d / (L + b/R): about 1 below
 *     the product, where a chunk in flight with others moves as if alone, and k/(R*L + b)
 *     chunks above it. So:
 *       - q > TEMPO__AS_QUEUE_Q (they queued) from at least 2 such chunks, and the credit above
 *         R*L + b: down to k/q chunks (what keeps the link as busy), at least one less, not
 *         below R*L + b;
 *       - q <= TEMPO__AS_ROOM_Q (room) from at least 2 such chunks, or a credit of one chunk
 *         (which cannot tell), and the credit held a chunk back since the last decision (work
 *         waited): one chunk more, unless a hold runs;
 *       - otherwise unchanged.
 *     A descent within 3 decisions of a climb takes it back: the next climb waits twice as
 *     many decisions as the last (from TEMPO__AS_HOLD_MIN up to TEMPO__AS_HOLD_MAX); any other
 *     descent holds climbs for as many as the last. So a deep link is climbed a chunk per
 *     decision, and a shallow one settles at one chunk, tried at two for one window (8 chunks)
 *     once per 64 decisions (TCP's and BBR's bandwidth probing, in whole chunks).
 *   - chunk = R' * TEMPO__AS_CHUNK_T rounded to a power of two in [TEMPO__AS_CHUNK_MIN,
 *     TEMPO__AS_CHUNK_MAX], R' the highest window R of the last TEMPO__AS_RHIST decisions: a chunk
 *     moves for about a millisecond at the best rate the lane has recently shown, so chunks are
 *     small where the rate is small (a slow link) and urgent work overtakes within a few
 *     milliseconds, and large where it is large (shared memory). Its per-chunk latency does not set
 *     it: the credit adds a chunk in flight as soon as the latency is more than half a chunk's
 *     transfer, so a chunk's latency is exposed only while it is less than that. What a chunk has
 *     to amortize is the per-chunk work that does not overlap, the progress thread's on a busy
 *     host, and a chunk of h of such work and b bytes settles at h + b/R_link = T: the work stays
 *     at most a fraction h/T of the lane's time. The max filter is there because on a contended
 *     host the rate of one decision ranges over a factor of 10 (two busy loops beside 2 ranks at
 *     nice 8: 150 MB/s to 2 GB/s), and smaller chunks read a smaller rate, so a chunk that followed
 *     each decision moved between 128 KiB and 2 MiB 6-11 times in a run; with the filter it only
 *     grows once the best rate is seen, and shrinks only when that has not recurred for
 *     TEMPO__AS_RHIST decisions (or in the first decisions, whose rates are a ramp's). The earlier
 *     rule, 4*R*L, was ill-conditioned twice over: L is d - b/R for chunks whose transfer is 10-100
 *     times it (on a 4-host ring at 1 Gbit/s one decision's L read 0.08-2.7 ms, and the chunk moved
 *     between 64 KiB and 1 MiB within one run), and on a host-bound lane smaller chunks measure a
 *     smaller rate and the same L, so the product followed the chunk down (CI's loaded host: 64 KiB
 *     chunks at 59 MB/s). The chunk changes only when the rule is at least a factor 2 away from
 *     the current size, in the same direction, at two decisions in a row.
 * Decisions are taken after every TEMPO__AS_EVERY completed chunks (not per chunk: the samples of
 * a busy host are noisy), the first once TEMPO__AS_WIN chunks have completed. Until then: credit
 * TEMPO__AS_CREDIT_INIT, chunk TEMPO__AS_CHUNK_INIT.
 *
 * What it is not: it never decides anything on its own; a fixed size (cfg value != 0) is returned
 * unchanged and only the measurements run. The auto chunk size is used only where the cuts cannot
 * change a result (tempo__autosize_cut_free).
 */
#ifndef TEMPO_COLLECTIVES_AUTOSIZE_H
#define TEMPO_COLLECTIVES_AUTOSIZE_H

#include <stddef.h>
#include <stdint.h>

#define TEMPO__AS_WIN 16
#define TEMPO__AS_EVERY 8 /* chunks measured between two decisions */
#define TEMPO__AS_CREDIT_INIT ((size_t)4 << 20)
#define TEMPO__AS_CREDIT_MIN ((size_t)64 << 10)
#define TEMPO__AS_CREDIT_MAX ((size_t)64 << 20)
#define TEMPO__AS_CHUNK_INIT ((size_t)1 << 20)
#define TEMPO__AS_CHUNK_MIN ((size_t)64 << 10)
#define TEMPO__AS_CHUNK_MAX ((size_t)4 << 20)
#define TEMPO__AS_CHUNK_T 1e-3   /* seconds: the auto chunk moves for about this long at R */
#define TEMPO__AS_RHIST 64       /* decisions whose highest R sets the chunk */
#define TEMPO__AS_PROBE_MIN 8    /* lone samples wanted before probing only as they age */
#define TEMPO__AS_PROBE_EVERY 32 /* chunks completed without a lone one before a probe */
#define TEMPO__AS_ROOM_Q 1.1     /* room: chunks beside others took at most this x a lone one */
#define TEMPO__AS_QUEUE_Q 1.25   /* queued: they took more than this x a lone one */
#define TEMPO__AS_HOLD_MIN 4     /* decisions without a climb after a descent, at first ... */
#define TEMPO__AS_HOLD_MAX 64    /* ... twice as many after each climb taken back, up to this */

typedef struct {
    int auto_credit, auto_chunk; /* 1: sized here; 0: the configured size is kept */
    size_t credit, chunk;        /* current choices, bytes */
    double rate;                 /* R, bytes/s (0: no sample yet) */
    double lat_s;                /* L, seconds (< 0: no sample yet) */
    uint64_t delivered;          /* bytes of completed chunks so far */
    uint64_t samples;            /* completed chunks measured */
    uint64_t decisions;          /* times the rules were applied (a change or not) */
    double rs[TEMPO__AS_WIN];    /* rate samples taken at recent completions, bytes/s */
    uint64_t wd[TEMPO__AS_WIN];  /* delivered at each recent completion */
    double wb[TEMPO__AS_WIN];    /* busy_s, as of each recent completion */
    size_t bs[TEMPO__AS_WIN];    /* recent chunk sizes, bytes */
    unsigned ns, is;             /* samples held (<= WIN), next slot */
    double ld[TEMPO__AS_WIN];    /* durations of recent lone chunks, seconds */
    size_t lb[TEMPO__AS_WIN];    /* their sizes, bytes */
    unsigned nl, il;             /* lone samples held (<= WIN), next slot */
    double busy_s;               /* seconds the lane had chunks in flight, closed periods */
    uint64_t busy_t0_ns;         /* start of the current busy period */
    int busy;                    /* a busy period is open */
    uint64_t starts;             /* chunks started so far */
    uint64_t since_lone;         /* chunks completed since the last lone one */
    int probing;                 /* a probe is in flight: nothing else may start */
    int chunk_dir;               /* the previous decision wanted a larger (1), smaller (-1) chunk */
    double sd[TEMPO__AS_EVERY];  /* durations of this window's chunks started beside others, s */
    size_t sb[TEMPO__AS_EVERY];  /* their sizes, bytes */
    unsigned nsd;                /* held (<= EVERY) */
    int held;                    /* the credit held a chunk back since the last decision */
    uint64_t climb_at;           /* samples when the credit last climbed (0: never) */
    unsigned hold, backoff;      /* decisions before the next climb; the next hold */
    double rh[TEMPO__AS_RHIST];  /* R of recent decisions (each its window's), bytes/s */
    unsigned nrh, irh;           /* held (<= RHIST), next slot */
} tempo__autosize_t;

/* What the lane notes about a chunk when it starts, for tempo__autosize_done. */
typedef struct {
    uint64_t t0_ns;  /* start time */
    int alone;       /* nothing else of the lane was in flight at start */
    uint64_t age_ns; /* how long the lane had been busy at start */
    uint64_t starts; /* tempo__autosize_t.starts, this chunk counted */
} tempo__as_mark_t;

/** credit_cfg, chunk_cfg: the configured sizes, 0 for auto. */
void tempo__autosize_init(tempo__autosize_t *a, size_t credit_cfg, size_t chunk_cfg);

/** A chunk starts at t_ns with inflight bytes of the lane already running; on an idle lane it may
 *  become a latency probe (see Model). */
tempo__as_mark_t tempo__autosize_mark(tempo__autosize_t *a, uint64_t t_ns, size_t inflight);

/** May a chunk of bytes start with inflight bytes of the lane running? Not while a probe runs.
 *  The auto credit is a ceiling (R*L + b already counts the chunk itself): on an idle lane, or
 *  when it fits; a refusal is noted (the credit held a chunk back: see Climbing). A set credit
 *  lets chunks start while fewer bytes than it are in flight (so one chunk may go past it).
 *  schedq.c's dispatch and test_autosize's lane use it. */
int tempo__autosize_fits(tempo__autosize_t *a, size_t inflight, size_t bytes);

/** A chunk of bytes marked m completed at t_ns, leaving inflight bytes of the lane running.
 *  Returns 1 when credit or chunk changed. */
int tempo__autosize_done(tempo__autosize_t *a, const tempo__as_mark_t *m, size_t bytes,
                         uint64_t t_ns, size_t inflight);

/** The auto chunk size applies only to requests whose result cannot depend on where they are cut:
 *  uncompressed (a compressor quantizes each chunk on its own), and moving data without
 *  arithmetic (all-gather, broadcast, all-to-all), or reducing integers (wrapping sums and
 *  products, min and max are exact in any order), or over at most 2 ranks (one addition or
 *  product per element, and IEEE addition and multiplication are commutative). Float reductions
 *  over 3+ ranks and compressed requests are cut at TEMPO__AS_CHUNK_EXACT bytes instead, so that a
 *  run's results stay bitwise repeatable: where the cuts fall decides which rank folds an element
 *  first. coll is tempo__coll_t, dtype tempo_dtype_t. */
#define TEMPO__AS_CHUNK_EXACT ((size_t)4 << 20)
int tempo__autosize_cut_free(int coll, int dtype, int nranks, int compressed);

#endif /* TEMPO_COLLECTIVES_AUTOSIZE_H */
