/*
 * bucketer_test.c — multi-rank test of the bucketer (tempo_bucketer_*): gradients of a small fake
 * model synchronized over several iterations, with tensors marked ready in a different order on
 * every rank, skipped tensors, gradient accumulation, in-place and fused buckets, the errors of
 * misuse, the registration check, priorities per policy and the statistics' consistency.
 *
 * Results go to DIR/r<rank> as "GROUP STATUS DETAIL" lines (mrtest.h); tests/mr/bucketer.sh
 * launches it and turns them into TAP.
 *
 * The model: LAYERS layers; layer l has a weight and a bias living in one flat gradient buffer
 * (like llm.c's grads_memory, so most buckets are reduced in place), plus every third layer an
 * extra tensor allocated on its own (so buckets holding it use a fusion buffer), and one bfloat16
 * tensor. Gradients are small integers (exact in fp32 and bf16) that depend on rank, iteration and
 * tensor, so the expected sum is computed here exactly, whatever the reduction order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tempo.h"
#include "tests/mr/mrtest.h"

#define LAYERS 8
#define MAXT (3 * LAYERS + 1)

typedef struct {
    tempo_tensor_desc_t d[MAXT];
    char names[MAXT][32];
    int nt;
    float *flat;
    float *own[LAYERS];
    uint16_t *bf;
} model_t;

static void model_build(model_t *m, int rank_variant)
{
    memset(m, 0, sizeof(*m));
    size_t wcount[LAYERS], total = 0;
    for (int l = 0; l < LAYERS; l++) {
        wcount[l] = 1000 + 977 * (size_t)l; /* different sizes per layer */
        total += wcount[l] + 17;
    }
    m->flat = calloc(total, sizeof(float));
    size_t off = 0;
    for (int l = 0; l < LAYERS; l++) {
        /* forward order in memory: weight then bias of layer 0, then layer 1, ... */
        tempo_tensor_desc_t *w = &m->d[m->nt], *bias = &m->d[m->nt + 1];
        snprintf(m->names[m->nt], 32, "h.%d.w", l);
        snprintf(m->names[m->nt + 1], 32, "h.%d.b", l);
        *w = (tempo_tensor_desc_t){.id = (uint64_t)(100 + 10 * l), .grad = m->flat + off,
                                   .count = wcount[l], .dtype = TEMPO_FLOAT32, .layer = l,
                                   .name = m->names[m->nt]};
        off += wcount[l];
        *bias = (tempo_tensor_desc_t){.id = (uint64_t)(101 + 10 * l), .grad = m->flat + off,
                                      .count = 17, .dtype = TEMPO_FLOAT32, .layer = l,
                                      .name = m->names[m->nt + 1]};
        off += 17;
        m->nt += 2;
        if (l % 3 == 1) {
            size_t c = 333 + (size_t)l + (size_t)rank_variant;
            m->own[l] = calloc(c, sizeof(float));
            snprintf(m->names[m->nt], 32, "h.%d.extra", l);
            m->d[m->nt] = (tempo_tensor_desc_t){.id = (uint64_t)(102 + 10 * l), .grad = m->own[l],
                                                .count = c, .dtype = TEMPO_FLOAT32, .layer = l,
                                                .name = m->names[m->nt]};
            m->nt++;
        }
    }
    m->bf = calloc(301, sizeof(uint16_t));
    snprintf(m->names[m->nt], 32, "emb.bf16");
    m->d[m->nt] = (tempo_tensor_desc_t){.id = 7, .grad = m->bf, .count = 301,
                                        .dtype = TEMPO_BFLOAT16, .layer = 0,
                                        .name = m->names[m->nt]};
    m->nt++;
}

static void model_free(model_t *m)
{
    free(m->flat);
    for (int l = 0; l < LAYERS; l++) {
        free(m->own[l]);
    }
    free(m->bf);
}

/* Rank r's gradient element i of tensor t in iteration it: a small integer. */
static int gval(int r, int it, uint64_t id, size_t i)
{
    return (int)(mr_hash3((uint64_t)r * 1000 + (uint64_t)it, id, i) % 7) - 3;
}

/* Does rank r skip tensor t in iteration it? */
static int skips(int r, int it, int t)
{
    return it % 3 == 2 && (t * 7 + r + it) % 5 == 0;
}

static void set_grad(tempo_tensor_desc_t *d, size_t i, double v, int add)
{
    if (d->dtype == TEMPO_BFLOAT16) {
        uint16_t *g = d->grad;
        double old = add ? mr_bf16_to_f32(g[i]) : 0;
        g[i] = mr_f32_to_bf16((float)(old + v));
    } else {
        float *g = d->grad;
        g[i] = (float)((add ? g[i] : 0) + v);
    }
}

static double get_grad(const tempo_tensor_desc_t *d, size_t i)
{
    return d->dtype == TEMPO_BFLOAT16 ? mr_bf16_to_f32(((uint16_t *)d->grad)[i])
                                      : ((float *)d->grad)[i];
}

static void run_iterations(tempo_comm_t comm, mr_out_t *out, const char *policy)
{
    int n = tempo_comm_size(comm), r = tempo_comm_rank(comm);
    model_t m;
    model_build(&m, 0);
    tempo_bucketer_config_t cfg = {0};
    cfg.field_mask = TEMPO_BUCKETER_OP | TEMPO_BUCKETER_BUCKET_BYTES | TEMPO_BUCKETER_FIRST_BYTES |
                     TEMPO_BUCKETER_CHUNK_BYTES | TEMPO_BUCKETER_TAC_WARMUP;
    cfg.op = TEMPO_SUM;
    cfg.bucket_bytes = 24 * 1024; /* several layers per bucket, some alone */
    cfg.first_bucket_bytes = 8 * 1024;
    cfg.chunk_bytes = 16 * 1024; /* the largest buckets run in chunks */
    cfg.tac_warmup = 2;
    tempo_bucketer_t b;
    tempo_status_t st = tempo_bucketer_create(comm, m.d, (size_t)m.nt, &cfg, &b);
    if (st != TEMPO_OK) {
        mr_result(out, "bucketer/values", "FAIL", "create: %s", mr_errtext(comm, st));
        model_free(&m);
        return;
    }
    /* Layout: every tensor in exactly one bucket, layers contiguous in ready order, priorities. */
    size_t nb = tempo_bucketer_nbuckets(b), tensors = 0;
    int prev_min = LAYERS, order_ok = 1, prio_ok = 1, in_place = 0, fused = 0, prev_prio = -1;
    /* With TEMPO_COMPRESS (exact here: fp16 carries these small integers exactly) every float32
     * bucket goes through the compressor and the bfloat16 one does not. */
    const char *qenv = getenv("TEMPO_COMPRESS");
    int want_q = qenv && *qenv && strncmp(qenv, "none", 4) != 0, q_ok = 1, nq = 0;
    for (size_t k = 0; k < nb; k++) {
        tempo_bucket_info_t bi;
        tempo_bucketer_bucket_info(b, k, &bi);
        tensors += bi.ntensors;
        order_ok &= bi.max_layer <= prev_min;
        prev_min = bi.min_layer;
        in_place += bi.in_place;
        fused += !bi.in_place;
        nq += bi.compressed;
        q_ok &= bi.compressed == (want_q && bi.dtype == TEMPO_FLOAT32);
        if (!strcmp(policy, "fifo")) {
            prio_ok &= bi.priority == 0;
        } else if (!strcmp(policy, "tic") && k > 0) {
            /* A chain: later buckets hold earlier layers, which the next forward needs sooner. */
            prio_ok &= bi.priority <= prev_prio;
        }
        prev_prio = bi.priority;
    }
    mr_result(out, "bucketer/layout", tensors == (size_t)m.nt && order_ok ? "PASS" : "FAIL",
              "%zu buckets hold %zu of %d tensors in ready order (%d in place, %d fused)", nb,
              tensors, m.nt, in_place, fused);
    mr_result(out, "bucketer/layout", in_place && fused ? "PASS" : "FAIL",
              "both in-place and fused buckets exist");
    mr_result(out, "bucketer/layout", prio_ok ? "PASS" : "FAIL", "priorities follow policy %s",
              policy);
    mr_result(out, "bucketer/layout", q_ok ? "PASS" : "FAIL",
              "%d of %zu buckets compressed (TEMPO_COMPRESS=%s)", nq, nb, qenv ? qenv : "");

    const int iters = 9;
    uint64_t rs = mr_hash3(77, (uint64_t)r, 3);
    for (int it = 0; it < iters; it++) {
        int micro = it % 4 == 1; /* a micro-step: accumulate, the next iteration synchronizes */
        /* Forward of this iteration: the previous iteration's gradients, layer by layer. */
        for (int l = 0; l < LAYERS; l++) {
            st = tempo_bucketer_wait_layer(b, l);
            if (st != TEMPO_OK) {
                mr_result(out, "bucketer/values", "FAIL", "it %d wait_layer %d: %s", it, l,
                          mr_errtext(comm, st));
            }
        }
        /* Check the previous synchronizing iteration's results. */
        if (it > 0 && (it - 1) % 4 != 1) {
            int prev = it - 1, bad = 0;
            for (int t = 0; t < m.nt; t++) {
                tempo_tensor_desc_t *d = &m.d[t];
                for (size_t i = 0; i < d->count && !bad; i++) {
                    double want = 0;
                    for (int q = 0; q < n; q++) {
                        if (skips(q, prev, t)) {
                            continue; /* zeroed: the micro-step's gradient is gone too */
                        }
                        want += gval(q, prev, d->id, i);
                        /* the accumulated micro-step before it, unless skipped there */
                        if (prev % 4 == 2 && !skips(q, prev - 1, t)) {
                            want += gval(q, prev - 1, d->id, i);
                        }
                    }
                    if (get_grad(d, i) != want) {
                        mr_result(out, "bucketer/values", "FAIL",
                                  "iteration %d tensor %s element %zu: got %g, expected %g", prev,
                                  d->name, i, get_grad(d, i), want);
                        bad = 1;
                    }
                }
            }
            mr_result(out, "bucketer/values", bad ? "FAIL" : "PASS",
                      "iteration %d: every tensor holds the sum over ranks%s", prev,
                      prev % 3 == 2 ? " (some skipped)" : prev % 4 == 2 ? " (accumulated)" : "");
        }
        st = tempo_bucketer_begin(b, !micro);
        if (st != TEMPO_OK) {
            mr_result(out, "bucketer/values", "FAIL", "begin %d: %s", it, mr_errtext(comm, st));
        }
        /* Backward: last layer first; this rank's own order inside a layer and its own pace. */
        for (int l = LAYERS - 1; l >= 0; l--) {
            tempo_bucketer_compute_begin(b, l, TEMPO_PHASE_BACKWARD);
            int ids[3], k = 0;
            for (int t = 0; t < m.nt; t++) {
                if (m.d[t].layer == l) {
                    ids[k++] = t;
                }
            }
            for (int a = k - 1; a > 0; a--) {
                int j = (int)(mr_mix64(rs += 0x9e37) % (uint64_t)(a + 1)), tmp = ids[a];
                ids[a] = ids[j];
                ids[j] = tmp;
            }
            tempo_bucketer_compute_end(b);
            for (int a = 0; a < k; a++) {
                int t = ids[a];
                tempo_tensor_desc_t *d = &m.d[t];
                int accumulate = it % 4 == 2; /* add to the micro-step's gradient */
                if (skips(r, it, t)) {
                    st = tempo_bucketer_skip(b, d->id);
                } else {
                    for (size_t i = 0; i < d->count; i++) {
                        set_grad(d, i, gval(r, it, d->id, i), accumulate);
                    }
                    st = tempo_bucketer_ready(b, d->id);
                }
                if (st != TEMPO_OK) {
                    mr_result(out, "bucketer/values", "FAIL", "it %d mark %s: %s", it, d->name,
                              mr_errtext(comm, st));
                }
            }
        }
    }
    st = tempo_bucketer_wait_all(b);
    tempo_bucketer_stats_t last, mean;
    tempo_bucketer_begin(b, 1);
    tempo_bucketer_stats(b, &last, &mean);
    size_t total_bytes = 0;
    for (int t = 0; t < m.nt; t++) {
        total_bytes += m.d[t].count * tempo_dtype_size(m.d[t].dtype);
    }
    int stats_ok = st == TEMPO_OK && mean.iterations > 0 && last.bytes == (double)total_bytes &&
                   last.iter_s >= last.exposed_s && last.comm_s >= 0 && last.compute_s >= 0 &&
                   last.overlap >= 0 && last.overlap <= 1;
    mr_result(out, "bucketer/stats", stats_ok ? "PASS" : "FAIL",
              "%ld iterations; last: %.0f bytes (expected %zu), T %.6f s, exposed %.6f s, comm "
              "%.6f s, compute %.6f s, overlap %.3f, E %.3f",
              mean.iterations, last.bytes, total_bytes, last.iter_s, last.exposed_s, last.comm_s,
              last.compute_s, last.overlap, last.efficiency);
    st = tempo_bucketer_destroy(b);
    if (st != TEMPO_OK) {
        mr_result(out, "bucketer/values", "FAIL", "destroy: %s", mr_errtext(comm, st));
    }
    model_free(&m);
}

static void expect_err(mr_out_t *out, tempo_comm_t comm, tempo_status_t st, const char *needle,
                       const char *what)
{
    const char *msg = tempo_last_error(comm);
    int ok = st == TEMPO_ERR_INVALID && strstr(msg, needle) != NULL;
    mr_result(out, "bucketer/errors", ok ? "PASS" : "FAIL", "%s: %s", what, mr_errtext(comm, st));
}

static void run_errors(tempo_comm_t comm, mr_out_t *out)
{
    int r = tempo_comm_rank(comm);
    model_t m;
    model_build(&m, 0);
    /* 64K: the first bucket (at most the bucket size) holds h.7.b and h.7.w (31 KB) */
    tempo_bucketer_config_t cfg = {.field_mask = TEMPO_BUCKETER_OP | TEMPO_BUCKETER_BUCKET_BYTES,
                                   .op = TEMPO_SUM,
                                   .bucket_bytes = 64 * 1024};
    tempo_bucketer_t b;
    tempo_status_t st = tempo_bucketer_create(comm, m.d, (size_t)m.nt, &cfg, &b);
    if (st != TEMPO_OK) {
        mr_result(out, "bucketer/errors", "FAIL", "create: %s", mr_errtext(comm, st));
        model_free(&m);
        return;
    }
    expect_err(out, comm, tempo_bucketer_ready(b, 100), "no iteration is open",
               "ready before begin");
    tempo_bucketer_begin(b, 1);
    expect_err(out, comm, tempo_bucketer_ready(b, 999999), "not registered", "unknown id");
    /* Mark the last layer's weight only: its bucket cannot complete. */
    uint64_t w7 = 100 + 10 * (LAYERS - 1), b7 = w7 + 1;
    tempo_bucketer_ready(b, w7);
    expect_err(out, comm, tempo_bucketer_ready(b, w7), "already marked", "ready twice");
    expect_err(out, comm, tempo_bucketer_wait_tensor(b, w7), "h.7.b", "wait on an incomplete bucket");
    /* Every rank leaves the same tensors unmarked, so the next begin fails the same way
     * everywhere and no rank posts what the others do not. */
    tempo_bucketer_ready(b, b7);
    expect_err(out, comm, tempo_bucketer_begin(b, 1), "neither ready nor skipped",
               "begin with unmarked tensors");
    expect_err(out, comm, tempo_bucketer_compute_end(b), "no span is open", "compute_end alone");
    expect_err(out, comm, tempo_bucketer_wait_layer(b, LAYERS), "out of range", "layer range");
    int cyc_off[3] = {0, 1, 2}, cyc[2] = {1, 0};
    expect_err(out, comm, tempo_bucketer_set_graph(b, 2, cyc_off, cyc), "before the first",
               "graph after the first iteration");
    tempo_bucketer_destroy(b);

    /* A fresh bucketer: graph validation. */
    st = tempo_bucketer_create(comm, m.d, (size_t)m.nt, &cfg, &b);
    if (st == TEMPO_OK) {
        int goff[LAYERS + 1], gp[LAYERS];
        for (int l = 0; l <= LAYERS; l++) {
            goff[l] = l > 0 ? l - 1 : 0;
        }
        for (int l = 1; l < LAYERS; l++) {
            gp[l - 1] = l - 1;
        }
        gp[0] = LAYERS - 1; /* layer 1 after layer 7, which comes after 6 ... after 1: a cycle */
        expect_err(out, comm, tempo_bucketer_set_graph(b, LAYERS, goff, gp), "cycle",
                   "cyclic layer graph");
        tempo_bucketer_destroy(b);
    }
    /* The first bucket is never larger than the others: bucket_bytes 8K below the default 1M
     * first bucket (a small model used to go whole into the first bucket, issue 27). */
    tempo_bucketer_config_t small = cfg;
    small.bucket_bytes = 8 * 1024;
    st = tempo_bucketer_create(comm, m.d, (size_t)m.nt, &small, &b);
    if (st == TEMPO_OK) {
        tempo_bucket_info_t bi = {0};
        size_t nb = tempo_bucketer_nbuckets(b);
        tempo_bucketer_bucket_info(b, 0, &bi);
        const int fits = nb > 1 && bi.bytes <= small.bucket_bytes;
        mr_result(out, "bucketer/layout", fits ? "PASS" : "FAIL",
                  "bucket_bytes 8K, first bucket default: %zu buckets, the first of %zu bytes", nb,
                  bi.bytes);
        tempo_bucketer_destroy(b);
    } else {
        mr_result(out, "bucketer/layout", "FAIL", "create: %s", mr_errtext(comm, st));
    }

    model_free(&m);

    /* Registration that differs on rank 1 (an extra tensor has another size there). */
    if (tempo_comm_size(comm) > 1) {
        model_build(&m, r == 1 ? 1 : 0);
        st = tempo_bucketer_create(comm, m.d, (size_t)m.nt, &cfg, &b);
        const char *msg = tempo_last_error(comm);
        int ok = st == TEMPO_ERR_INVALID && strstr(msg, "differs across ranks") &&
                 strstr(msg, "rank 1 registered");
        mr_result(out, "bucketer/errors", ok ? "PASS" : "FAIL",
                  "registration that differs on rank 1: %s", mr_errtext(comm, st));
        if (st == TEMPO_OK) {
            tempo_bucketer_destroy(b);
        }
        model_free(&m);
    }
}

int main(int argc, char **argv)
{
    tempo_comm_t comm;
    mr_out_t out;
    int rc = mr_start(argc, argv, "bucketer/values", &comm, &out);
    if (rc) {
        return rc;
    }
    const char *policy = getenv("TEMPO_SCHED") ? getenv("TEMPO_SCHED") : "tic";
    tempo_trace_begin(comm, "bucketer test");
    run_iterations(comm, &out, policy);
    tempo_trace_end(comm, "bucketer test");
    run_errors(comm, &out);
    tempo_status_t st = tempo_comm_destroy(comm);
    if (st != TEMPO_OK) {
        mr_result(&out, "bucketer/values", "FAIL", "destroy: %s", mr_errtext(NULL, st));
    }
    mr_out_close(&out);
    return 0;
}
