/*
 * test_model.c — the trainer's GPT-2 model and AdamW (trainer/model.c, trainer/optim.c):
 *   golden      against PyTorch (tests/golden/gpt_small.bin, written by make_gpt_golden.py): one
 *               forward/backward from the same weights and batch (logits and loss within 1e-4,
 *               every gradient tensor within 1e-3), then 5 AdamW steps with global-norm clipping
 *               and the warm-up/cosine schedule (every loss within 1e-4; final parameters: RMS
 *               difference within 5e-4 of the RMS update per tensor, no element off by 5 % of the
 *               largest update); the key bias, whose exact gradient is 0, has ~0 gradients
 *   kernels     the golden forward/backward with every GEMM build the CPU has (AVX-512, AVX2,
 *               generic vectors)
 *   fd          finite differences on a tiny random model whose shapes hit every edge path of the
 *               kernels (columns not a multiple of 16, rows not a multiple of the tile height,
 *               odd head size): central differences per coordinate and along a random direction
 *   determinism two runs, and runs with 1, 2 and 3 OpenMP threads, give the same bits
 *   accumulate  two backward passes with dloss 1/2 equal one with dloss 1
 *   layout      the tensor table and the per-layer ranges tile the buffer, in order
 *   adamw       a slice-by-slice update equals the whole-buffer update bitwise, and one element
 *               follows an independent double-precision AdamW; schedule, clip factor, sum of
 *               squares
 *   errors      bad configurations, T > max_seq_len, tokens outside the vocabulary, backward out
 *               of order: -1 and a message that says so
 *   sampling    argmax at temperature 0, frequencies of a known distribution
 *   tp          tensor parallelism without a network: T = 2 and 4 shards of the fd model, one thread
 *               each, whose collectives meet in shared memory; the shards' weights are exactly
 *               the single-rank model's slices, and the loss and every gradient (placed back into
 *               the unsharded layout) equal the single-rank model's within 1e-5 of the tensor's
 *               scale; replicated tensors get bitwise the same gradient on every shard; a
 *               configuration whose heads T does not divide is refused. The same with sequence
 *               parallelism (T = 2 and 4, sequence length 8, row blocks across sequences), whose
 *               LayerNorm and residual activations are 1/T of one rank's; with and without SP
 *               the column-parallel activations (QKV, attention, fc and GELU, logits, and their
 *               backward buffers) are 1/T of one rank's, and so less in all; SP without a group,
 *               without its collectives, or with a sequence length T does not divide is refused.
 *               Each TP and SP case also runs with --recompute selective and full: the same loss
 *               and gradients, bitwise, as the case without recomputation
 *   recompute   activation recomputation (selective, full) against none: the loss and every
 *               gradient bitwise equal, twice in a row (buffers reused), fewer activation floats
 *               (none > selective > full); pipeline stages (two chained stages, two micro-batches
 *               in flight): gradients bitwise equal, fewer floats; a bad mode refused
 *
 * Error measure for the golden comparisons: max_i |ours_i - ref_i| / max_i |ref_i| over a tensor,
 * i.e. relative to the tensor's scale. Elementwise relative errors are meaningless for entries
 * that are zero up to rounding (a gradient of 1e-9 computed as 3e-9 by either side), while an
 * error relative to the largest entry is what changes training; the worst element is printed.
 *
 * Random inputs are seeded (TEMPO_TEST_SEED replays; the seed is printed).
 *
 * "test_model --bench [L NH C T B iters]" times forward + backward instead (tokens/s).
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tests/tap.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "util/helpers.h"

static uint64_t seed;

static uint64_t rand64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [-1, 1). */
static float randf(uint64_t *s)
{
    return (float)((rand64(s) >> 40) / 8388608.0 - 1.0);
}

/* max |a - b| / max |b| over n elements; *worst_p the index of the largest |a - b|. */
static double rel_err(const float *a, const float *b, size_t n, size_t *worst_p)
{
    double maxd = 0, maxb = 0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > maxd || isnan(d)) {
            maxd = isnan(d) ? INFINITY : d;
            worst = i;
        }
        maxb = fmax(maxb, fabs(b[i]));
    }
    if (worst_p) {
        *worst_p = worst;
    }
    return maxb > 0 ? maxd / maxb : maxd;
}

/* ------------------------------------------------------------------------------------------ */
/* golden                                                                                      */

typedef struct {
    int B, T, nsteps, warmup, total;
    gpt_config_t cfg;
    size_t n;
    float max_lr, min_lr, beta1, beta2, eps, wd, clip;
    float *params, *logits, *grads, *losses, *final;
    float loss;
    int *x, *y;
} golden_t;

static void golden_free(golden_t *g)
{
    free(g->params);
    free(g->logits);
    free(g->grads);
    free(g->losses);
    free(g->final);
    free(g->x);
    free(g->y);
}

static int read_exact(FILE *f, void *p, size_t size, size_t count)
{
    return fread(p, size, count, f) == count;
}

static int golden_load(const char *path, golden_t *g)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tap_diag("cannot open %s", path);
        return -1;
    }
    int32_t h[256];
    int ok = read_exact(f, h, sizeof(int32_t), 256);
    if (!ok || h[0] != 20250721 || h[1] != 1) {
        tap_diag("%s: bad header (magic %d, version %d)", path, ok ? h[0] : -1, ok ? h[1] : -1);
        fclose(f);
        return -1;
    }
    memset(g, 0, sizeof *g);
    g->B = h[2];
    g->T = h[3];
    g->cfg = (gpt_config_t){h[4], h[5], h[6], h[7], h[8]};
    g->n = (size_t)h[9];
    g->nsteps = h[10];
    g->warmup = h[11];
    g->total = h[12];
    float *fl[7] = {&g->max_lr, &g->min_lr, &g->beta1, &g->beta2, &g->eps, &g->wd, &g->clip};
    for (int i = 0; i < 7; i++) {
        memcpy(fl[i], &h[16 + i], sizeof(float));
    }
    const size_t BT = (size_t)g->B * g->T, V = (size_t)g->cfg.vocab_size;
    g->params = malloc(g->n * sizeof(float));
    g->grads = malloc(g->n * sizeof(float));
    g->final = malloc(g->n * sizeof(float));
    g->logits = malloc(BT * V * sizeof(float));
    g->losses = malloc((size_t)g->nsteps * sizeof(float));
    g->x = malloc(BT * sizeof(int));
    g->y = malloc(BT * sizeof(int));
    ok = g->params && g->grads && g->final && g->logits && g->losses && g->x && g->y &&
         read_exact(f, g->params, sizeof(float), g->n) && read_exact(f, g->x, sizeof(int), BT) &&
         read_exact(f, g->y, sizeof(int), BT) && read_exact(f, g->logits, sizeof(float), BT * V) &&
         read_exact(f, &g->loss, sizeof(float), 1) &&
         read_exact(f, g->grads, sizeof(float), g->n) &&
         read_exact(f, g->losses, sizeof(float), (size_t)g->nsteps) &&
         read_exact(f, g->final, sizeof(float), g->n) && fgetc(f) == EOF;
    fclose(f);
    if (!ok) {
        tap_diag("%s: truncated or longer than its header says", path);
        golden_free(g);
        return -1;
    }
    return 0;
}

static void test_golden(void)
{
    char path[4096];
    const char *top = getenv("top_srcdir");
    snprintf(path, sizeof path, "%s/tests/golden/gpt_small.bin", top ? top : ".");
    golden_t g;
    if (!TAP_OK(golden_load(path, &g) == 0, "golden: load %s", path)) {
        return;
    }
    const gpt_config_t *cfg = &g.cfg;
    tap_diag("golden: L %d NH %d C %d V %d maxT %d, B %d T %d, %zu params", cfg->n_layer,
             cfg->n_head, cfg->channels, cfg->vocab_size, cfg->max_seq_len, g.B, g.T, g.n);
    gpt_model_t *m = NULL;
    if (!TAP_OK(gpt_create(cfg, 1, &m) == 0, "golden: create")) {
        tap_diag("  %s", gpt_last_error());
        golden_free(&g);
        return;
    }
    TAP_EQ_UINT(m->num_params, g.n, "golden: parameter count matches PyTorch's");
    if (m->num_params != g.n) {
        gpt_destroy(m);
        golden_free(&g);
        return;
    }
    memcpy(m->params, g.params, g.n * sizeof(float));

    /* forward: logits and loss */
    float loss = 0;
    TAP_OK(gpt_forward(m, g.x, g.y, g.B, g.T, &loss) == 0, "golden: forward");
    const size_t nlog = (size_t)g.B * g.T * cfg->vocab_size;
    size_t w;
    double e = rel_err(gpt_logits(m), g.logits, nlog, &w);
    if (!TAP_OK(e <= 1e-4, "golden: logits within 1e-4 (error %.2e)", e)) {
        tap_diag("  worst logit %zu: %.8g vs %.8g", w, gpt_logits(m)[w], g.logits[w]);
    }
    double el = fabs((double)loss - g.loss) / fabs(g.loss);
    TAP_OK(el <= 1e-4, "golden: loss %.7f vs %.7f (error %.2e) within 1e-4", loss, g.loss, el);

    /* backward: every tensor */
    gpt_zero_grad(m);
    TAP_OK(gpt_backward(m, 1.0f) == 0, "golden: backward");
    double worst_t = 0;
    int bad = 0;
    for (int ti = 0; ti < m->num_tensors; ti++) {
        const gpt_tensor_t *t = &m->tensors[ti];
        double et = rel_err(m->grads + t->offset, g.grads + t->offset, t->size, &w);
        worst_t = fmax(worst_t, et);
        bad += !(et <= 1e-3);
        tap_diag("  grad %-16s error %.2e  worst [%zu] %+.6e vs %+.6e", t->name, et, w,
                 m->grads[t->offset + w], g.grads[t->offset + w]);
    }
    TAP_OK(bad == 0, "golden: all %d gradient tensors within 1e-3 (worst %.2e)", m->num_tensors,
           worst_t);
    /* the key bias does not change the loss: its gradient is rounding noise on both sides */
    double kb = 0, qkvb_max = 0;
    for (int l = 0; l < cfg->n_layer; l++) {
        char name[GPT_NAME_MAX];
        snprintf(name, sizeof name, "h.%d.attn.qkv.b", l);
        const gpt_tensor_t *t = gpt_find_tensor(m, name);
        for (size_t i = 0; i < t->size; i++) {
            double gi = fabs(m->grads[t->offset + i]);
            qkvb_max = fmax(qkvb_max, gi);
            kb = i >= (size_t)cfg->channels && i < 2 * (size_t)cfg->channels ? fmax(kb, gi) : kb;
        }
    }
    TAP_OK(kb <= 1e-5 * qkvb_max, "golden: key-bias gradients are ~0 (%.1e of the qkv bias's)",
           kb / qkvb_max);

    /* training: 5 AdamW steps with clipping and the schedule */
    adamw_cfg_t oc = {g.beta1, g.beta2, g.eps, g.wd};
    float *mm = calloc(g.n, sizeof(float)), *vv = calloc(g.n, sizeof(float));
    double worst_l = 0;
    int ok = mm && vv;
    for (int step = 0; step < g.nsteps && ok; step++) {
        gpt_zero_grad(m);
        ok = gpt_forward(m, g.x, g.y, g.B, g.T, &loss) == 0 && gpt_backward(m, 1.0f) == 0;
        double norm = sqrt(grad_sumsq(m->grads, g.n));
        float scale = clip_scale(norm, g.clip);
        float lr = lr_schedule(step, g.warmup, g.total, g.max_lr, g.min_lr);
        ok =
            ok && adamw_step(m, m->params, m->grads, mm, vv, 0, g.n, step + 1, &oc, lr, scale) == 0;
        double es = fabs((double)loss - g.losses[step]) / fabs(g.losses[step]);
        worst_l = fmax(worst_l, es);
        tap_diag("  step %d: loss %.7f vs %.7f (error %.2e), grad norm %.4f, clip %.4f, lr %.3e",
                 step, loss, g.losses[step], es, norm, scale, lr);
    }
    TAP_OK(ok && worst_l <= 1e-4, "golden: %d training losses within 1e-4 (worst %.2e)", g.nsteps,
           worst_l);
    /*
     * Final parameters, per tensor, against how far PyTorch moved the tensor (its values are much
     * larger than 5 steps of lr): the RMS difference within 1e-3 of the RMS update, and no element
     * off by 5 % of the largest update. Elements whose gradient is ~0 get Adam steps of up to ±lr
     * from rounding noise (m / sqrt(v) of noise), so single elements can differ by more than the
     * RMS bound on another CPU; a wrong formula moves them all. The key bias (elements [C, 2C) of
     * attn.qkv.b) is left out: adding a constant to every score of a softmax row changes nothing,
     * so its gradient is exactly 0 (checked ~0 above) and its Adam steps are all noise.
     */
    double worst_rms = 0, worst_max = 0;
    const size_t C = (size_t)cfg->channels;
    bad = 0;
    for (int ti = 0; ti < m->num_tensors; ti++) {
        const gpt_tensor_t *t = &m->tensors[ti];
        const int qkvb = strstr(t->name, ".attn.qkv.b") != NULL;
        double maxd = 0, maxmove = 0, sd = 0, sm = 0;
        for (size_t i = t->offset; i < t->offset + t->size; i++) {
            if (qkvb && i - t->offset >= C && i - t->offset < 2 * C) {
                continue;
            }
            double d = (double)m->params[i] - g.final[i], mv = (double)g.final[i] - g.params[i];
            maxd = fmax(maxd, fabs(d));
            maxmove = fmax(maxmove, fabs(mv));
            sd += d * d;
            sm += mv * mv;
        }
        double erms = sqrt(sd / sm), emax = maxd / maxmove;
        worst_rms = fmax(worst_rms, erms);
        worst_max = fmax(worst_max, emax);
        if (!(erms <= 5e-4 && emax <= 5e-2)) {
            bad++;
            tap_diag("  params %-16s after %d steps: RMS diff %.2e, max diff %.2e of the update",
                     t->name, g.nsteps, erms, emax);
        }
    }
    TAP_OK(bad == 0,
           "golden: final parameters: RMS difference within 5e-4 of the RMS update (worst %.2e), "
           "max within 5e-2 of the max update (worst %.2e)",
           worst_rms, worst_max);
    free(mm);
    free(vv);
    gpt_destroy(m);
    golden_free(&g);
}

/* Every GEMM build this CPU has, on the golden forward and backward (same tolerances). */
static void test_kernels(void)
{
    char path[4096];
    const char *top = getenv("top_srcdir");
    snprintf(path, sizeof path, "%s/tests/golden/gpt_small.bin", top ? top : ".");
    golden_t g;
    if (golden_load(path, &g) != 0) {
        TAP_OK(0, "kernels: load %s", path);
        return;
    }
    gpt_model_t *m = NULL;
    if (!TAP_OK(gpt_create(&g.cfg, 1, &m) == 0 && m->num_params == g.n, "kernels: create")) {
        gpt_destroy(m);
        golden_free(&g);
        return;
    }
    tap_diag("kernels: the CPU's choice is %s", gpt_gemm_name(m));
    const char *names[] = {"generic", "avx2", "avx512"};
    const size_t nlog = (size_t)g.B * g.T * g.cfg.vocab_size;
    float *prev = malloc(g.n * sizeof(float)); /* gradients of the avx2 build */
    int have_prev = 0;
    for (int k = 0; k < 3; k++) {
        if (gpt_set_gemm(m, names[k]) != 0) {
            tap_skip("not supported by this CPU", "kernels: %s", names[k]);
            continue;
        }
        memcpy(m->params, g.params, g.n * sizeof(float));
        gpt_zero_grad(m);
        float loss = 0;
        int ok = gpt_forward(m, g.x, g.y, g.B, g.T, &loss) == 0 && gpt_backward(m, 1.0f) == 0;
        double el = ok ? rel_err(gpt_logits(m), g.logits, nlog, NULL) : INFINITY, eg = 0;
        for (int ti = 0; ti < m->num_tensors; ti++) {
            const gpt_tensor_t *t = &m->tensors[ti];
            eg = fmax(eg, rel_err(m->grads + t->offset, g.grads + t->offset, t->size, NULL));
        }
        TAP_OK(ok && el <= 1e-4 && eg <= 1e-3 && fabs(loss - g.loss) <= 1e-4 * g.loss,
               "kernels: %s GEMM: logits error %.2e, worst gradient tensor %.2e", names[k], el, eg);
        /* FMA in the same k order in both: the vector width does not change a bit */
        if (k == 1) {
            memcpy(prev, m->grads, g.n * sizeof(float));
            have_prev = 1;
        } else if (k == 2 && have_prev) {
            TAP_OK(!memcmp(prev, m->grads, g.n * sizeof(float)),
                   "kernels: avx2 and avx512 GEMMs give the same bits");
        }
    }
    free(prev);
    TAP_OK(gpt_set_gemm(m, "avx1024") == -1, "kernels: an unknown build is refused");
    gpt_destroy(m);
    golden_free(&g);
}

/* ------------------------------------------------------------------------------------------ */
/* finite differences                                                                          */

static void fill_random(gpt_model_t *m, uint64_t *s, float scale)
{
    for (size_t i = 0; i < m->num_params; i++) {
        m->params[i] = scale * randf(s);
    }
    /* LayerNorm weights around 1 */
    for (int ti = 0; ti < m->num_tensors; ti++) {
        const gpt_tensor_t *t = &m->tensors[ti];
        size_t len = strlen(t->name);
        if (strstr(t->name, "ln") && len > 2 && strcmp(t->name + len - 2, ".w") == 0) {
            for (size_t i = 0; i < t->size; i++) {
                m->params[t->offset + i] += 1.0f;
            }
        }
    }
}

static void random_tokens(int *tok, int n, int V, uint64_t *s)
{
    for (int i = 0; i < n; i++) {
        tok[i] = (int)(rand64(s) % (uint64_t)V);
    }
}

static double loss_at(gpt_model_t *m, const int *x, const int *y, int B, int T)
{
    float loss = 0;
    gpt_forward(m, x, y, B, T, &loss);
    return loss;
}

static void test_fd(void)
{
    /* C = 20: 16 + 4 tail columns, 3C = 60, V = 37; BT = 21 rows; head size 5 */
    const gpt_config_t cfg = {9, 37, 2, 4, 20};
    const int B = 3, T = 7, BT = B * T;
    gpt_model_t *m = NULL;
    if (!TAP_OK(gpt_create(&cfg, 7, &m) == 0, "fd: create")) {
        return;
    }
    uint64_t s = (seed ^ 0xfd) | 1;
    fill_random(m, &s, 0.3f);
    int x[21], y[21];
    random_tokens(x, BT, cfg.vocab_size, &s);
    random_tokens(y, BT, cfg.vocab_size, &s);
    float loss;
    gpt_zero_grad(m);
    int ok = gpt_forward(m, x, y, B, T, &loss) == 0 && gpt_backward(m, 1.0f) == 0;
    TAP_OK(ok, "fd: forward/backward of a %d-parameter model", (int)m->num_params);
    float *grad = malloc(m->num_params * sizeof(float));
    memcpy(grad, m->grads, m->num_params * sizeof(float));

    /*
     * Central differences with h = 1e-2 on the largest-gradient element of every tensor and two
     * random ones. In fp32 the loss (~3.6) carries ~4e-7 of rounding, so the difference quotient
     * is good to ~2e-5 absolute plus an O(h²) truncation term: |fd - g| <= 2e-2 |g| + 1e-4.
     */
    const float h = 1e-2f;
    double worst = 0;
    int bad = 0, checked = 0;
    for (int ti = 0; ti < m->num_tensors; ti++) {
        const gpt_tensor_t *t = &m->tensors[ti];
        size_t pick[3] = {0, rand64(&s) % t->size, rand64(&s) % t->size};
        for (size_t i = 0; i < t->size; i++) {
            pick[0] = fabsf(grad[t->offset + i]) > fabsf(grad[t->offset + pick[0]]) ? i : pick[0];
        }
        for (int k = 0; k < 3; k++) {
            size_t i = t->offset + pick[k];
            float p0 = m->params[i];
            m->params[i] = p0 + h;
            double lp = loss_at(m, x, y, B, T);
            m->params[i] = p0 - h;
            double lm = loss_at(m, x, y, B, T);
            m->params[i] = p0;
            double fd = (lp - lm) / (2.0 * h), g = grad[i];
            double err = fabs(fd - g) / (2e-2 * fabs(g) + 1e-4);
            worst = fmax(worst, err);
            checked++;
            if (!(err <= 1.0)) {
                bad++;
                tap_diag("  %s[%zu]: backward %+.6e, finite difference %+.6e", t->name, pick[k], g,
                         fd);
            }
        }
    }
    TAP_OK(bad == 0, "fd: %d coordinates, worst error %.2f of the bound", checked, worst);

    /* along a random unit direction d: (L(p + h d) - L(p - h d)) / 2h = g · d */
    float *p0 = malloc(m->num_params * sizeof(float)), *d = malloc(m->num_params * sizeof(float));
    memcpy(p0, m->params, m->num_params * sizeof(float));
    double dn = 0, gd = 0;
    for (size_t i = 0; i < m->num_params; i++) {
        d[i] = randf(&s);
        dn += (double)d[i] * d[i];
    }
    dn = sqrt(dn);
    for (size_t i = 0; i < m->num_params; i++) {
        d[i] = (float)(d[i] / dn);
        gd += (double)grad[i] * d[i];
    }
    for (size_t i = 0; i < m->num_params; i++) {
        m->params[i] = p0[i] + h * d[i];
    }
    double lp = loss_at(m, x, y, B, T);
    for (size_t i = 0; i < m->num_params; i++) {
        m->params[i] = p0[i] - h * d[i];
    }
    double lm = loss_at(m, x, y, B, T);
    double fd = (lp - lm) / (2.0 * h);
    TAP_OK(fabs(fd - gd) <= 2e-2 * fabs(gd) + 1e-4, "fd: directional derivative %+.6e vs g·d %+.6e",
           fd, gd);
    free(p0);
    free(d);
    free(grad);
    gpt_destroy(m);
}

/* ------------------------------------------------------------------------------------------ */
/* determinism, accumulation, layout                                                           */

typedef struct {
    float loss;
    float *logits, *grads;
} run_t;

static int run_once(const gpt_config_t *cfg, const int *x, const int *y, int B, int T, run_t *r)
{
    gpt_model_t *m = NULL;
    if (gpt_create(cfg, 42, &m) != 0) {
        return -1;
    }
    size_t nl = (size_t)B * T * cfg->vocab_size;
    r->logits = malloc(nl * sizeof(float));
    r->grads = malloc(m->num_params * sizeof(float));
    int ok = gpt_forward(m, x, y, B, T, &r->loss) == 0 && gpt_backward(m, 1.0f) == 0;
    memcpy(r->logits, gpt_logits(m), nl * sizeof(float));
    memcpy(r->grads, m->grads, m->num_params * sizeof(float));
    gpt_destroy(m);
    return ok ? 0 : -1;
}

static void test_determinism(void)
{
    const gpt_config_t cfg = {40, 256, 2, 4, 64};
    const int B = 3, T = 37, BT = B * T;
    const size_t n = gpt_num_params(&cfg), nl = (size_t)BT * cfg.vocab_size;
    int *x = malloc(BT * sizeof(int)), *y = malloc(BT * sizeof(int));
    uint64_t s = (seed ^ 0xde7) | 1;
    random_tokens(x, BT, cfg.vocab_size, &s);
    random_tokens(y, BT, cfg.vocab_size, &s);
    run_t a, b;
    TAP_OK(run_once(&cfg, x, y, B, T, &a) == 0 && run_once(&cfg, x, y, B, T, &b) == 0,
           "determinism: two runs");
    TAP_OK(a.loss == b.loss && !memcmp(a.logits, b.logits, nl * sizeof(float)) &&
               !memcmp(a.grads, b.grads, n * sizeof(float)),
           "determinism: two runs give the same loss, logits and gradients bitwise");
    free(b.logits);
    free(b.grads);
#ifdef _OPENMP
    const int saved = omp_get_max_threads();
    for (int nt = 1; nt <= 3; nt++) {
        omp_set_num_threads(nt);
        run_t c;
        int ok = run_once(&cfg, x, y, B, T, &c) == 0;
        TAP_OK(ok && c.loss == a.loss && !memcmp(c.logits, a.logits, nl * sizeof(float)) &&
                   !memcmp(c.grads, a.grads, n * sizeof(float)),
               "determinism: %d thread%s give the same bits as %d", nt, nt > 1 ? "s" : "", saved);
        free(c.logits);
        free(c.grads);
    }
    omp_set_num_threads(saved);
#else
    tap_skip("built without OpenMP", "determinism across thread counts");
#endif

    /* gradient accumulation: two backward passes with dloss 1/2 = one with dloss 1 */
    gpt_model_t *m = NULL;
    if (gpt_create(&cfg, 42, &m) == 0) {
        float loss;
        int ok = gpt_forward(m, x, y, B, T, &loss) == 0 && gpt_backward(m, 0.5f) == 0 &&
                 gpt_forward(m, x, y, B, T, &loss) == 0 && gpt_backward(m, 0.5f) == 0;
        double e = rel_err(m->grads, a.grads, n, NULL);
        TAP_OK(ok && e <= 1e-6, "accumulate: 2 x dloss 1/2 = dloss 1 (error %.2e)", e);
        gpt_zero_grad(m);
        float maxg = 0;
        for (size_t i = 0; i < n; i++) {
            maxg = fmaxf(maxg, fabsf(m->grads[i]));
        }
        TAP_OK(maxg == 0.0f, "accumulate: gpt_zero_grad clears the gradients");
        /* layer by layer through the public per-layer calls: the same bits as gpt_forward */
        ok = gpt_forward_embed(m, x, B, T) == 0;
        for (int l = 0; l < cfg.n_layer; l++) {
            ok = ok && gpt_forward_layer(m, l) == 0;
        }
        ok = ok && gpt_forward_head(m, y, &loss) == 0 && gpt_backward_head(m, 1.0f) == 0;
        for (int l = cfg.n_layer - 1; l >= 0; l--) {
            ok = ok && gpt_backward_layer(m, l) == 0;
        }
        ok = ok && gpt_backward_embed(m) == 0;
        TAP_OK(ok && loss == a.loss && !memcmp(m->grads, a.grads, n * sizeof(float)),
               "per-layer calls give gpt_forward/gpt_backward's bits");
        /* group buffers (ZeRO 2): the shared buffer released, every group written elsewhere */
        const int ng = cfg.n_layer + 2;
        float **gb = calloc((size_t)ng, sizeof(float *));
        ok = gb != NULL;
        for (int g = 0; ok && g < ng; g++) {
            /* NaN-filled: gpt_zero_grad must clear them too */
            gb[g] = malloc(m->groups[g].n * sizeof(float));
            ok = gb[g] != NULL;
            for (size_t i = 0; ok && i < m->groups[g].n; i++) {
                gb[g][i] = NAN;
            }
        }
        gpt_release_grads(m);
        ok = ok && m->grads == NULL && gpt_forward(m, x, y, B, T, &loss) == 0;
        int refused = ok && gpt_backward(m, 1.0f) != 0 &&
                      strstr(gpt_last_error(), "no gradient buffer") != NULL;
        TAP_OK(refused, "group buffers: backward with the shared buffer released and no group "
                        "buffer is refused (%s)", gpt_last_error());
        for (int g = 0; ok && g < ng; g++) {
            ok = gpt_set_group_grads(m, g, gb[g]) == 0;
        }
        gpt_zero_grad(m);
        ok = ok && gpt_forward(m, x, y, B, T, &loss) == 0 && gpt_backward(m, 1.0f) == 0;
        for (int g = 0; ok && g < ng; g++) {
            ok = !memcmp(gb[g], a.grads + m->groups[g].off, m->groups[g].n * sizeof(float));
        }
        TAP_OK(ok, "group buffers: each group's gradients land in its own buffer, bitwise the "
                   "shared buffer's");
        TAP_OK(gpt_set_group_grads(m, ng, gb[0]) != 0 && gpt_set_group_grads(m, 0, NULL) != 0,
               "group buffers: a group out of range, or NULL after release, is refused");
        for (int g = 0; gb && g < ng; g++) {
            free(gb[g]);
        }
        free(gb);
        gpt_destroy(m);
    }
    free(a.logits);
    free(a.grads);
    free(x);
    free(y);
}

static void test_layout(void)
{
    const gpt_config_t cfg = {16, 256, 3, 2, 8};
    gpt_model_t *m = NULL;
    if (!TAP_OK(gpt_create(&cfg, 3, &m) == 0, "layout: create")) {
        return;
    }
    const size_t C = 8;
    TAP_EQ_UINT(m->num_params, (256 + 16) * C + 3 * (12 * C * C + 13 * C) + 2 * C,
                "layout: parameter count");
    TAP_EQ_INT(m->num_tensors, 2 + 12 * 3 + 2, "layout: tensor count");
    int ok = 1;
    size_t off = 0;
    for (int ti = 0; ti < m->num_tensors; ti++) {
        const gpt_tensor_t *t = &m->tensors[ti];
        gpt_range_t r = gpt_layer_range(m, t->layer);
        ok &= t->offset == off && t->size == t->shape[0] * t->shape[1];
        ok &= t->offset >= r.off && t->offset + t->size <= r.off + r.n;
        ok &= t->decay == (t->ndim == 2);
        off += t->size;
    }
    TAP_OK(ok && off == m->num_params, "layout: tensors tile the buffer in order, inside their "
                                       "layer's range, decay on 2-D only");
    off = 0;
    ok = 1;
    for (int l = -1; l <= cfg.n_layer; l++) {
        gpt_range_t r = gpt_layer_range(m, l);
        ok &= r.off == off && r.n > 0;
        off += r.n;
    }
    TAP_OK(ok && off == m->num_params, "layout: layer ranges -1..L are contiguous and in order");
    const gpt_tensor_t *t = gpt_find_tensor(m, "h.1.attn.qkv.w");
    TAP_OK(t && t->layer == 1 && t->shape[0] == 3 * C && t->shape[1] == C && t->decay,
           "layout: h.1.attn.qkv.w is (3C, C) in layer 1 with decay");
    t = gpt_find_tensor(m, "lnf.b");
    TAP_OK(t && t->layer == 3 && t->ndim == 1 && !t->decay && t->offset + C == m->num_params,
           "layout: lnf.b is last, 1-D, no decay");
    /* initialization: std 0.02, residual projections 0.02 / sqrt(2L), LN weights 1, biases 0 */
    double s2 = 0;
    const gpt_tensor_t *wte = gpt_find_tensor(m, "wte"), *pr = gpt_find_tensor(m, "h.2.mlp.proj.w");
    for (size_t i = 0; i < wte->size; i++) {
        s2 += (double)m->params[wte->offset + i] * m->params[wte->offset + i];
    }
    double std1 = sqrt(s2 / wte->size);
    s2 = 0;
    for (size_t i = 0; i < pr->size; i++) {
        s2 += (double)m->params[pr->offset + i] * m->params[pr->offset + i];
    }
    double std2 = sqrt(s2 / pr->size) * sqrt(6.0);
    const gpt_tensor_t *lw = gpt_find_tensor(m, "h.0.ln2.w"),
                       *fb = gpt_find_tensor(m, "h.0.mlp.fc.b");
    TAP_OK(fabs(std1 - 0.02) < 0.001 && fabs(std2 - 0.02) < 0.003 &&
               m->params[lw->offset] == 1.0f && m->params[fb->offset + 5] == 0.0f,
           "layout: init std %.4f (wte), %.4f (mlp.proj x sqrt(2L)), LN 1, biases 0", std1, std2);
    gpt_model_t *m2 = NULL;
    if (gpt_create(&cfg, 3, &m2) == 0) {
        TAP_OK(!memcmp(m->params, m2->params, m->num_params * sizeof(float)),
               "layout: the same seed gives the same weights");
        gpt_init_weights(m2, 4);
        TAP_OK(memcmp(m->params, m2->params, m->num_params * sizeof(float)) != 0,
               "layout: another seed gives other weights");
        gpt_destroy(m2);
    }
    gpt_destroy(m);
}

/* ------------------------------------------------------------------------------------------ */
/* optimizer                                                                                   */

static void test_adamw(void)
{
    const gpt_config_t cfg = {16, 64, 2, 2, 16};
    gpt_model_t *m = NULL;
    if (!TAP_OK(gpt_create(&cfg, 5, &m) == 0, "adamw: create")) {
        return;
    }
    const size_t n = m->num_params;
    uint64_t s = (seed ^ 0xada) | 1;
    float *p0 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *pa = malloc(n * sizeof(float)), *ma = calloc(n, sizeof(float));
    float *va = calloc(n, sizeof(float)), *pb = malloc(n * sizeof(float));
    float *mb = calloc(n, sizeof(float)), *vb = calloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) {
        p0[i] = randf(&s);
        g[i] = 0.1f * randf(&s);
    }
    memcpy(pa, p0, n * sizeof(float));
    memcpy(pb, p0, n * sizeof(float));
    const adamw_cfg_t oc = {0.9f, 0.95f, 1e-8f, 0.1f};
    /* slices that cut tensors in the middle */
    const size_t cuts[] = {0, 7, 1000, n / 2 + 3, n - 1, n};
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        ok &= adamw_step(m, pa, g, ma, va, 0, n, t, &oc, 1e-2f, 0.5f) == 0;
        for (int c = 0; c + 1 < 6; c++) {
            size_t lo = cuts[c], hi = cuts[c + 1];
            ok &=
                adamw_step(m, pb + lo, g + lo, mb + lo, vb + lo, lo, hi, t, &oc, 1e-2f, 0.5f) == 0;
        }
    }
    TAP_OK(ok && !memcmp(pa, pb, n * sizeof(float)) && !memcmp(ma, mb, n * sizeof(float)) &&
               !memcmp(va, vb, n * sizeof(float)),
           "adamw: 5 slices = the whole buffer, bitwise (3 steps)");
    /* an independent double-precision AdamW on one decayed and one non-decayed element */
    const gpt_tensor_t *w2 = gpt_find_tensor(m, "h.1.mlp.fc.w"),
                       *b1 = gpt_find_tensor(m, "h.1.ln1.b");
    size_t idx[2] = {w2->offset + 17, b1->offset + 3};
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        size_t i = idx[k];
        double p = p0[i], mm = 0, vv = 0, gi = (double)g[i] * 0.5, wd = k == 0 ? 0.1 : 0.0;
        for (int t = 1; t <= 3; t++) {
            p *= 1.0 - 1e-2 * wd;
            mm = 0.9 * mm + 0.1 * gi;
            vv = 0.95 * vv + 0.05 * gi * gi;
            double mhat = mm / (1 - pow(0.9, t)), vhat = vv / (1 - pow(0.95, t));
            p -= 1e-2 * mhat / (sqrt(vhat) + 1e-8);
        }
        worst = fmax(worst, fabs(p - pa[i]) / fabs(p));
    }
    TAP_OK(worst < 1e-5, "adamw: matches a double-precision AdamW with and without decay (%.1e)",
           worst);
    TAP_OK(adamw_step(m, pa, g, ma, va, 0, n + 1, 1, &oc, 1e-3f, 1.0f) == -1,
           "adamw: a slice past the buffer is refused");
    TAP_CONTAINS(gpt_last_error(), "not inside", "adamw: ... with a message");
    TAP_OK(adamw_step(m, pa, g, ma, va, 0, n, 0, &oc, 1e-3f, 1.0f) == -1,
           "adamw: step 0 is refused");

    /* schedule: warm-up (step + 1) / warmup, cosine, min_lr at the end */
    TAP_EQ_DBL(lr_schedule(0, 4, 20, 1e-3f, 1e-4f), (float)(1e-3f * 1 / 4.0),
               "lr: first warm-up step");
    TAP_EQ_DBL(lr_schedule(3, 4, 20, 1e-3f, 1e-4f), 1e-3f, "lr: last warm-up step is max_lr");
    TAP_EQ_DBL(lr_schedule(4, 4, 20, 1e-3f, 1e-4f), 1e-3f, "lr: decay starts at max_lr");
    TAP_OK(fabs(lr_schedule(12, 4, 20, 1e-3f, 1e-4f) - 5.5e-4) < 1e-9, "lr: halfway is the mean");
    TAP_EQ_DBL(lr_schedule(20, 4, 20, 1e-3f, 1e-4f), 1e-4f, "lr: min_lr at the end");
    /* clip factor and sum of squares */
    TAP_EQ_DBL(clip_scale(0.5, 1.0f), 1.0f, "clip: below max_norm is 1");
    TAP_EQ_DBL(clip_scale(4.0, 1.0f), 1.0f / (4.0f + 1e-6f), "clip: 1 / (norm + 1e-6)");
    for (size_t i = 0; i < n; i++) {
        g[i] = (float)((i % 7) - 3);
    }
    double want = 0;
    for (size_t i = 0; i < n; i++) {
        want += (double)g[i] * g[i];
    }
    TAP_EQ_DBL(grad_sumsq(g, n), want, "grad_sumsq: exact on small integers");
    free(p0);
    free(g);
    free(pa);
    free(ma);
    free(va);
    free(pb);
    free(mb);
    free(vb);
    gpt_destroy(m);
}

/* ------------------------------------------------------------------------------------------ */
/* errors and sampling                                                                         */

static void test_errors(void)
{
    gpt_model_t *m = NULL;
    gpt_config_t bad = {16, 256, 2, 3, 64};
    TAP_OK(gpt_create(&bad, 1, &m) == -1 && m == NULL, "errors: C %% NH != 0 is refused");
    TAP_CONTAINS(gpt_last_error(), "multiple of n_head", "errors: ... saying so");
    bad = (gpt_config_t){16, 256, 0, 4, 64};
    TAP_OK(gpt_create(&bad, 1, &m) == -1, "errors: n_layer 0 is refused");
    TAP_CONTAINS(gpt_last_error(), "n_layer 0", "errors: ... naming the field");
    TAP_EQ_UINT(gpt_num_params(&bad), 0, "errors: no parameter count for a bad config");

    const gpt_config_t cfg = {8, 16, 1, 2, 8};
    if (!TAP_OK(gpt_create(&cfg, 1, &m) == 0, "errors: create a small model")) {
        return;
    }
    int x[2 * 9] = {0}, y[2 * 9] = {0};
    TAP_OK(gpt_alloc_acts(m, 2, 9) == -1, "errors: T 9 > max_seq_len 8 is refused");
    TAP_CONTAINS(gpt_last_error(), "exceeds the model's max_seq_len", "errors: ... saying so");
    TAP_OK(gpt_forward(m, x, y, 2, 9, NULL) == -1, "errors: ... by forward too");
    x[3] = 16;
    TAP_OK(gpt_forward(m, x, y, 2, 8, NULL) == -1, "errors: token 16 with V = 16 is refused");
    TAP_CONTAINS(gpt_last_error(), "outside the vocabulary", "errors: ... saying so");
    x[3] = 1;
    float loss = 0;
    TAP_OK(gpt_forward(m, x, NULL, 2, 8, &loss) == 0 && loss == -1.0f,
           "errors: forward without targets gives logits and loss -1");
    TAP_OK(gpt_backward(m, 1.0f) == -1, "errors: backward after a forward without targets");
    TAP_CONTAINS(gpt_last_error(), "no forward with targets", "errors: ... saying so");
    TAP_OK(gpt_forward(m, x, y, 2, 8, &loss) == 0 && gpt_backward_layer(m, 0) == -1,
           "errors: a layer's backward before the head's");
    TAP_CONTAINS(gpt_last_error(), "gpt_backward_head comes first", "errors: ... saying so");
    TAP_OK(gpt_forward_embed(m, x, 1, 4) == 0 && gpt_forward_head(m, y, &loss) == -1,
           "errors: the head's forward before the layers'");
    TAP_OK(gpt_forward(m, x, y, 1, 4, &loss) == 0 && loss > 0,
           "errors: a smaller batch (1 x 4) than allocated works");
    gpt_destroy(m);
    gpt_destroy(NULL);
}

static void test_sampling(void)
{
    const float logits[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)}; /* p = i+1 / 10 */
    uint64_t rng = 1337;
    TAP_EQ_INT(gpt_sample_next(logits, 4, 0.0f, &rng), 3, "sample: temperature 0 is the argmax");
    int counts[4] = {0};
    const int N = 100000;
    for (int i = 0; i < N; i++) {
        counts[gpt_sample_next(logits, 4, 1.0f, &rng)]++;
    }
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        double p = (i + 1) / 10.0, z = (counts[i] - N * p) / sqrt(N * p * (1 - p));
        worst = fmax(worst, fabs(z));
    }
    TAP_OK(worst < 4.5, "sample: frequencies of p = (.1, .2, .3, .4) within 4.5 sigma (%.2f)",
           worst);
}

/* ------------------------------------------------------------------------------------------ */

/* ---- tp: T shards in T threads; all-reduce = every thread adds (or maxes) its buffer into a
 * shared one in rank order between barriers, so the result is the same bits on every shard; the
 * sequence-parallel all-gather and reduce-scatter meet in the same shared buffer */
#define TP_MAX 4
typedef struct {
    pthread_barrier_t bar;
    float *acc; /* (n) the reduction being built, or the gathered blocks */
    gpt_model_t *m[TP_MAX];
    const int *x, *y;
    int B, T, n, rc[TP_MAX];
    float loss[TP_MAX];
} fake_tp_t;

typedef struct {
    fake_tp_t *f;
    int rank;
} fake_rank_t;

/* acc = the sum (max) over the ranks of their buf (n), added in rank order. */
static void fake_accumulate(fake_rank_t *r, const float *buf, size_t n, int max)
{
    fake_tp_t *f = r->f;
    for (int k = 0; k < f->n; k++) { /* rank order: the same sum on every shard */
        if (k == r->rank) {
            for (size_t i = 0; i < n; i++) {
                f->acc[i] = k == 0 ? buf[i] : max ? fmaxf(f->acc[i], buf[i]) : f->acc[i] + buf[i];
            }
        }
        pthread_barrier_wait(&f->bar);
    }
}

/* out (n) = acc from element first; then everyone has read acc before the next collective. */
static int fake_read(fake_rank_t *r, float *out, size_t first, size_t n)
{
    memcpy(out, r->f->acc + first, n * sizeof(float));
    pthread_barrier_wait(&r->f->bar);
    return 0;
}

static int fake_sum(void *ctx, float *buf, size_t n)
{
    fake_accumulate(ctx, buf, n, 0);
    return fake_read(ctx, buf, 0, n);
}

static int fake_max(void *ctx, float *buf, size_t n)
{
    fake_accumulate(ctx, buf, n, 1);
    return fake_read(ctx, buf, 0, n);
}

static int fake_reduce_scatter(void *ctx, const float *send, float *recv, size_t n)
{
    fake_rank_t *r = ctx;
    fake_accumulate(r, send, (size_t)r->f->n * n, 0);
    return fake_read(r, recv, (size_t)r->rank * n, n);
}

static int fake_allgather(void *ctx, const float *send, float *recv, size_t n)
{
    fake_rank_t *r = ctx;
    memcpy(r->f->acc + (size_t)r->rank * n, send, n * sizeof(float));
    pthread_barrier_wait(&r->f->bar);
    return fake_read(r, recv, 0, (size_t)r->f->n * n);
}

static void *fake_rank_main(void *arg)
{
    fake_rank_t *r = arg;
    fake_tp_t *f = r->f;
    gpt_model_t *m = f->m[r->rank];
    gpt_zero_grad(m);
    f->rc[r->rank] = gpt_forward(m, f->x, f->y, f->B, f->T, &f->loss[r->rank]) ||
                     gpt_backward(m, 1.0f);
    return NULL;
}

/*
 * n shards (sequence-parallel if sp) against the single-rank model ref, which has just run
 * forward and backward on x, y (B, T): weights, loss, gradients, replicated gradients bitwise
 * alike; with sp, the LayerNorm and residual regions' activations are 1/n of ref's.
 */
static void tp_case(const gpt_config_t *cfg, gpt_model_t *ref, float ref_loss, const int *x,
                    const int *y, int B, int T, int n, int sp, float *acc, int mode, float *base)
{
    char what[32]; /* base: the placed gradients and the loss of the same case at rc none */
    snprintf(what, sizeof what, "%s%s%s", sp ? "sp" : "tp", mode ? " recompute " : "",
             mode ? gpt_recompute_name(mode) : "");
    fake_tp_t f = {.acc = acc, .x = x, .y = y, .B = B, .T = T, .n = n};
    fake_rank_t rk[TP_MAX];
    pthread_t th[TP_MAX];
    pthread_barrier_init(&f.bar, NULL, (unsigned)n);
    int made = 1, same_w = 1, same_rep = 1;
    for (int r = 0; r < n; r++) {
        rk[r] = (fake_rank_t){&f, r};
        gpt_tp_t tp = {r, n, fake_sum, fake_max, &rk[r], fake_allgather, fake_reduce_scatter, sp};
        f.m[r] = NULL;
        made = made && gpt_create_tp(cfg, &tp, 11, &f.m[r]) == 0 &&
               gpt_set_recompute(f.m[r], mode) == 0;
    }
    float *full = malloc(ref->num_params * sizeof(float));
    if (!TAP_OK(made && full, "%s %d: shards created", what, n)) {
        goto out;
    }
    TAP_EQ_UINT(f.m[0]->full_params, ref->num_params, "%s %d: unsharded size", what, n);
    for (int r = 0; r < n; r++) { /* weights: the slices of the single-rank model */
        float *w = malloc(f.m[r]->num_params * sizeof(float));
        gpt_tp_slice(f.m[r], ref->params, w);
        same_w = same_w && !memcmp(w, f.m[r]->params, f.m[r]->num_params * sizeof(float));
        free(w);
    }
    TAP_OK(same_w, "%s %d: every shard's initial weights are the single-rank model's slices", what,
           n);
    for (int r = 0; r < n; r++) {
        pthread_create(&th[r], NULL, fake_rank_main, &rk[r]);
    }
    int rc = 0;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        rc |= f.rc[r];
    }
    if (!TAP_OK(rc == 0, "%s %d: forward and backward on every shard", what, n)) {
        tap_diag("%s", gpt_last_error());
        goto out;
    }
    TAP_OK(fabsf(f.loss[0] - ref_loss) <= 1e-5f * ref_loss && f.loss[n - 1] == f.loss[0],
           "%s %d: loss %.8f equals one rank's %.8f within 1e-5 on every shard", what, n,
           f.loss[0], ref_loss);
    memset(full, 0, ref->num_params * sizeof(float));
    for (int r = n - 1; r >= 0; r--) { /* rank 0's replicated tensors last: they stay */
        gpt_tp_place(f.m[r], f.m[r]->grads, r, full);
    }
    for (int ti = 0; ti < f.m[0]->num_tensors; ti++) {
        const gpt_tensor_t *t = &f.m[0]->tensors[ti];
        for (int r = 1; r < n && t->tp_split == GPT_TP_REPLICATED; r++) {
            same_rep = same_rep && !memcmp(f.m[r]->grads + t->offset, f.m[0]->grads + t->offset,
                                           t->size * sizeof(float));
        }
    }
    TAP_OK(same_rep, "%s %d: replicated tensors have bitwise the same gradient on every shard",
           what, n);
    double worst = 0;
    const char *wname = "";
    for (int ti = 0; ti < ref->num_tensors; ti++) {
        const gpt_tensor_t *t = &ref->tensors[ti];
        size_t wi;
        double e = rel_err(full + t->offset, ref->grads + t->offset, t->size, &wi);
        if (e > worst) {
            worst = e, wname = t->name;
        }
    }
    TAP_OK(worst <= 1e-5, "%s %d: every gradient equals one rank's within 1e-5 (worst %.3g, %s)",
           what, n, worst, wname);
    if (mode == GPT_RECOMPUTE_NONE) {
        memcpy(base, full, ref->num_params * sizeof(float));
        base[ref->num_params] = f.loss[0];
    } else {
        TAP_OK(!memcmp(base, full, ref->num_params * sizeof(float)) &&
                   base[ref->num_params] == f.loss[0],
               "%s %d: loss and every gradient bitwise those without recomputation", what, n);
    }
    const size_t want = sp ? ref->act_seq_floats / (size_t)n : ref->act_seq_floats;
    TAP_OK((f.m[0]->act_seq_floats == want || mode == GPT_RECOMPUTE_FULL) &&
               ref->act_seq_floats > 0, /* full keeps fewer: the recompute test counts them */
           "%s %d: LayerNorm and residual activations %zu floats (one rank: %zu)", what, n,
           f.m[0]->act_seq_floats, ref->act_seq_floats);
    /* the column-parallel outputs are the rank's heads, MLP columns and vocabulary rows: 1/n of
     * one rank's (ref keeps every activation: compared at mode none only) */
    if (mode == GPT_RECOMPUTE_NONE) {
        TAP_OK(f.m[0]->act_col_floats * (size_t)n == ref->act_col_floats &&
                   ref->act_col_floats > 0 && f.m[0]->act_floats < ref->act_floats,
               "%s %d: column-parallel activations %zu floats (one rank: %zu), all %zu (one "
               "rank: %zu)",
               what, n, f.m[0]->act_col_floats, ref->act_col_floats, f.m[0]->act_floats,
               ref->act_floats);
    }
out:
    free(full);
    for (int r = 0; r < n; r++) {
        gpt_destroy(f.m[r]);
    }
    pthread_barrier_destroy(&f.bar);
}

static void test_tp(void)
{
    const gpt_config_t cfg = {9, 36, 2, 4, 20}; /* the fd model's shapes with V = 36 (T | V) */
    const int B = 3, TMAX = 8;
    float *acc = malloc((size_t)B * TMAX * cfg.vocab_size * sizeof(float) +
                        3 * (size_t)B * TMAX * cfg.channels * sizeof(float));
    /* tensor parallel at T = 7 (no divisibility needed), sequence parallel at T = 8: the row
     * blocks of 4 shards (6 of the 24 rows each) straddle the sequences of the batch */
    for (int sp = 0; sp <= 1 && acc; sp++) {
        const int T = sp ? 8 : 7, BT = B * T;
        gpt_model_t *ref = NULL;
        if (!TAP_OK(gpt_create(&cfg, 11, &ref) == 0, "%s: single-rank model", sp ? "sp" : "tp")) {
            break;
        }
        uint64_t s = (seed ^ 0x7e) | 1;
        int x[24], y[24];
        random_tokens(x, BT, cfg.vocab_size, &s);
        random_tokens(y, BT, cfg.vocab_size, &s);
        float ref_loss;
        gpt_zero_grad(ref);
        TAP_OK(gpt_forward(ref, x, y, B, T, &ref_loss) == 0 && gpt_backward(ref, 1.0f) == 0,
               "%s: single-rank forward and backward", sp ? "sp" : "tp");
        float *base = malloc((ref->num_params + 1) * sizeof(float));
        for (int n = 2; n <= TP_MAX && base; n *= 2) {
            for (int rc = GPT_RECOMPUTE_NONE; rc <= GPT_RECOMPUTE_FULL; rc++) {
                tp_case(&cfg, ref, ref_loss, x, y, B, T, n, sp, acc, rc, base);
            }
        }
        free(base);
        gpt_destroy(ref);
    }
    free(acc);
    const gpt_config_t bad = {9, 36, 2, 3, 24};
    gpt_model_t *m = NULL;
    gpt_tp_t tp2 = {0, 2, fake_sum, fake_max, NULL, NULL, NULL, 0};
    TAP_OK(gpt_create_tp(&bad, &tp2, 1, &m) == -1 && m == NULL, "tp: 3 heads over 2 ranks refused");
    TAP_CONTAINS(gpt_last_error(), "3 heads cannot be split over 2 ranks", "tp: the error says why");
    /* sequence parallelism: a group of 1, missing collectives, T not a multiple of the group */
    gpt_tp_t sp1 = {0, 1, NULL, NULL, NULL, NULL, NULL, 1};
    TAP_OK(gpt_create_tp(&cfg, &sp1, 1, &m) == -1 && m == NULL, "sp: a TP group of 1 refused");
    TAP_CONTAINS(gpt_last_error(), "--tp 1 must be > 1", "sp: the error says why");
    gpt_tp_t sp2 = {0, 2, fake_sum, fake_max, NULL, NULL, NULL, 1};
    TAP_OK(gpt_create_tp(&cfg, &sp2, 1, &m) == -1 && m == NULL, "sp: no all-gather refused");
    sp2.allgather = fake_allgather;
    sp2.reduce_scatter = fake_reduce_scatter;
    if (TAP_OK(gpt_create_tp(&cfg, &sp2, 1, &m) == 0, "sp: shard 0 of 2 created")) {
        int x[7] = {0};
        TAP_OK(gpt_alloc_acts(m, 1, 7) == -1, "sp: activations for T = 7 over 2 ranks refused");
        TAP_CONTAINS(gpt_last_error(), "T = 7 is not a multiple of the tensor-parallel size 2",
                     "sp: the error says why");
        TAP_OK(gpt_forward(m, x, NULL, 1, 7, NULL) == -1, "sp: a forward of T = 7 refused");
        TAP_CONTAINS(gpt_last_error(), "T = 7 is not a multiple", "sp: the error says why");
        gpt_destroy(m);
    }
}

/* Forward + backward throughput of one configuration (not a test). */
static int bench(int argc, char **argv)
{
    gpt_config_t cfg = {128, 256, 4, 4, 128};
    int B = 8, iters = 10;
    if (argc >= 7) {
        cfg = (gpt_config_t){atoi(argv[5]), 256, atoi(argv[2]), atoi(argv[3]), atoi(argv[4])};
        B = atoi(argv[6]);
        iters = argc >= 8 ? atoi(argv[7]) : iters;
    }
    const int T = cfg.max_seq_len, BT = B * T;
    gpt_model_t *m = NULL;
    if (gpt_create(&cfg, 1, &m) != 0) {
        fprintf(stderr, "%s\n", gpt_last_error());
        return 1;
    }
    int *x = malloc(BT * sizeof(int)), *y = malloc(BT * sizeof(int));
    uint64_t s = 99;
    random_tokens(x, BT, cfg.vocab_size, &s);
    random_tokens(y, BT, cfg.vocab_size, &s);
    float loss;
    gpt_forward(m, x, y, B, T, &loss); /* warm-up, allocation */
    gpt_backward(m, 1.0f);
    double best = 1e30, tf = 0, tb = 0;
    for (int i = 0; i < iters; i++) {
        double t0 = util_now_s();
        gpt_forward(m, x, y, B, T, &loss);
        double t1 = util_now_s();
        gpt_backward(m, 1.0f);
        double t2 = util_now_s();
        if (t2 - t0 < best) {
            best = t2 - t0;
            tf = t1 - t0;
            tb = t2 - t1;
        }
    }
#ifdef _OPENMP
    int threads = omp_get_max_threads();
#else
    int threads = 1;
#endif
    printf("L %d NH %d C %d T %d B %d, %zu params, %d thread(s): best of %d: fwd %.1f ms, "
           "bwd %.1f ms, %.0f tokens/s, %.1f GFLOP/s\n",
           cfg.n_layer, cfg.n_head, cfg.channels, T, B, m->num_params, threads, iters, tf * 1e3,
           tb * 1e3, BT / best, gpt_flops_per_token(&cfg, T) * BT / best / 1e9);
    free(x);
    free(y);
    gpt_destroy(m);
    return 0;
}

/* ---- recompute: selective and full against none, whole models and pipeline stages */

/* Two forward/backward passes (other tokens the second time) of a fresh seed-11 model in mode rc:
 * the losses, the accumulated gradients (grads, the caller's), the activation floats. */
static int recompute_run(const gpt_config_t *cfg, int rc, const int *x, const int *y, int B, int T,
                         float *loss, float *grads, size_t *act)
{
    gpt_model_t *m = NULL;
    int ok = gpt_create(cfg, 11, &m) == 0 && gpt_set_recompute(m, rc) == 0;
    gpt_zero_grad(m);
    for (int pass = 0; ok && pass < 2; pass++) {
        const int *xp = x + pass * B * T, *yp = y + pass * B * T;
        ok = gpt_forward(m, xp, yp, B, T, &loss[pass]) == 0 && gpt_backward(m, 1.0f) == 0;
    }
    if (ok) {
        memcpy(grads, m->grads, m->num_params * sizeof(float));
        *act = gpt_act_floats(m);
    }
    gpt_destroy(m);
    return ok ? 0 : -1;
}

/* Stages [0, 1) and [1, 2) of a 2-layer model in mode rc, 2 slots each: forwards of micro-batches
 * 0 and 1, then their backwards (0 first); grads gets stage 0's then stage 1's gradients. */
static int recompute_stages(const gpt_config_t *cfg, int rc, const int *x, const int *y, int B,
                            int T, float *grads, size_t *act)
{
    gpt_stage_t *st[2] = {NULL, NULL};
    const size_t n = (size_t)B * T * cfg->channels;
    float *h = malloc(2 * n * sizeof(float)), *d = malloc(n * sizeof(float)), loss;
    int ok = h && d;
    for (int i = 0; ok && i < 2; i++) {
        ok = gpt_stage_create(cfg, i, i + 1, 2, B, T, 11, &st[i]) == 0 &&
             gpt_stage_set_recompute(st[i], rc) == 0;
    }
    for (int mb = 0; ok && mb < 2; mb++) {
        const size_t o = (size_t)mb * B * T;
        ok = gpt_stage_forward(st[0], mb, x + o, NULL, NULL, B, T, h + mb * n, NULL) == 0 &&
             gpt_stage_forward(st[1], mb, NULL, h + mb * n, y + o, B, T, NULL, &loss) == 0;
    }
    for (int mb = 0; ok && mb < 2; mb++) {
        ok = gpt_stage_backward(st[1], mb, NULL, 0.5f, d) == 0 &&
             gpt_stage_backward(st[0], mb, d, 0.0f, NULL) == 0;
    }
    if (ok) {
        const gpt_model_t *a = gpt_stage_model(st[0]), *b = gpt_stage_model(st[1]);
        memcpy(grads, a->grads, a->num_params * sizeof(float));
        memcpy(grads + a->num_params, b->grads, b->num_params * sizeof(float));
        *act = gpt_stage_act_floats(st[0]) + gpt_stage_act_floats(st[1]);
    }
    gpt_stage_destroy(st[0]);
    gpt_stage_destroy(st[1]);
    free(h);
    free(d);
    return ok ? 0 : -1;
}

static void test_recompute(void)
{
    const gpt_config_t cfg = {9, 36, 2, 4, 20}; /* the fd/tp model: odd shapes, 2 blocks */
    const int B = 3, T = 9, BT = B * T;
    const size_t np = gpt_num_params(&cfg);
    int x[2 * 27], y[2 * 27];
    uint64_t s = (seed ^ 0x5ec) | 1;
    random_tokens(x, 2 * BT, cfg.vocab_size, &s);
    random_tokens(y, 2 * BT, cfg.vocab_size, &s);
    float loss[3][2], *g[3];
    size_t act[3] = {0, 0, 0}, sact[3] = {0, 0, 0};
    for (int rc = 0; rc < 3; rc++) {
        g[rc] = malloc(2 * np * sizeof(float)); /* stages hold wte twice: < 2 np */
        const char *name = gpt_recompute_name(rc);
        if (!TAP_OK(g[rc] && recompute_run(&cfg, rc, x, y, B, T, loss[rc], g[rc], &act[rc]) == 0,
                    "recompute %s: two forward and backward passes", name)) {
            tap_diag("%s", gpt_last_error());
            continue;
        }
        if (rc > 0) {
            TAP_OK(loss[rc][0] == loss[0][0] && loss[rc][1] == loss[0][1] &&
                       !memcmp(g[rc], g[0], np * sizeof(float)),
                   "recompute %s: losses %.8f %.8f and every gradient bitwise those of none",
                   name, loss[rc][0], loss[rc][1]);
            TAP_OK(act[rc] < act[rc - 1], "recompute %s: %zu activation floats < %s's %zu", name,
                   act[rc], gpt_recompute_name(rc - 1), act[rc - 1]);
        }
    }
    float *sg = malloc(2 * np * sizeof(float));
    for (int rc = 0; rc < 3 && sg; rc++) {
        const char *name = gpt_recompute_name(rc);
        if (!TAP_OK(recompute_stages(&cfg, rc, x, y, B, T, rc ? sg : g[0], &sact[rc]) == 0,
                    "recompute %s: two stages, two micro-batches in flight", name)) {
            tap_diag("%s", gpt_last_error());
            continue;
        }
        if (rc > 0) {
            TAP_OK(!memcmp(sg, g[0], (np + 36 * 20) * sizeof(float)),
                   "recompute %s: stage gradients bitwise those of none", name);
            TAP_OK(sact[rc] < sact[rc - 1], "recompute %s: stage activations %zu floats < %s's %zu",
                   name, sact[rc], gpt_recompute_name(rc - 1), sact[rc - 1]);
        }
    }
    free(sg);
    for (int rc = 0; rc < 3; rc++) {
        free(g[rc]);
    }
    gpt_model_t *m = NULL;
    if (TAP_OK(gpt_create(&cfg, 1, &m) == 0, "recompute: model for the bad mode")) {
        TAP_OK(gpt_set_recompute(m, 3) == -1, "recompute: mode 3 refused");
        TAP_CONTAINS(gpt_last_error(), "not none (0), selective (1) or full (2)",
                     "recompute: the error says why");
        TAP_OK(gpt_recompute_parse("full") == GPT_RECOMPUTE_FULL &&
                   gpt_recompute_parse("ful") == -1,
               "recompute: names parse");
        gpt_destroy(m);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        return bench(argc, argv);
    }
    const char *env = getenv("TEMPO_TEST_SEED");
    seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    tap_diag("seed %llu (TEMPO_TEST_SEED replays it)", (unsigned long long)seed);
    test_golden();
    test_kernels();
    test_fd();
    test_determinism();
    test_layout();
    test_adamw();
    test_errors();
    test_sampling();
    test_tp();
    test_recompute();
    return tap_done();
}
