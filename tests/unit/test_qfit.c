/*
 * test_qfit.c — the distribution model, the variance objective and the ALQ/AMQ fitters
 * (quant/fit.c) against the numbers of compression.md §6.2-6.4:
 *   build      normal and mixture models: the kept buckets (largest norms, ties by index), weights
 *              ∝ norm summing to 1, the fallback component, invalid input leaves the model as is;
 *   objective  the no-zero identities d·l_min² - 1 (QSGD, NUQSGD code tables), the paper tables
 *              with a zero level, and the closed forms against brute-force Simpson integration
 *              on an asymmetric mixture;
 *   ALQ        optimal levels and normalized variance (d = 8192 and 16384 at 2, 3, 4 bits); the
 *              objective never increases over the epochs from each start; at 6-8 bits the fit
 *              reaches the minimum that thousands of epochs reach;
 *   AMQ        optimal multiplier p and variance at the same points;
 *   both       every table symmetric and strictly increasing for bits 1..8 under both
 *              conventions; two identical components fit like one; degenerate models (zero std,
 *              a mean far outside [-1, 1]) still fit; invalid arguments are rejected and leave the
 *              outputs untouched; bitwise-repeatable results; a Monte Carlo check of the model's
 *              variance on Gaussian buckets.
 * "Normalized variance" is d times tempo__qdist_var (the sum over a bucket's coordinates).
 * Timings are printed as diagnostics; nothing asserts on them. The Monte Carlo part is seeded and
 * prints its seed (TEMPO_TEST_SEED replays it).
 */
#include "config.h"

#include <math.h>

#include "core/tempo_int.h"
#include "quant/quant.h"
#include "tests/unit/tu.h"

#define NLMAX 256

/* |got - want| <= rel |want| */
#define TAP_NEAR(got, want, rel, ...)                                                        \
    do {                                                                                     \
        double tn_g_ = (double)(got), tn_w_ = (double)(want);                                \
        if (!tap_ok(fabs(tn_g_ - tn_w_) <= (rel)*fabs(tn_w_), __VA_ARGS__)) {                \
            tap_diag("  %s = %.10g, expected %.10g within %g relative (%s:%d)", #got, tn_g_, \
                     tn_w_, (double)(rel), __FILE__, __LINE__);                              \
        }                                                                                    \
    } while (0)

static double secs(void)
{
    return (double)tempo__now_ns() * 1e-9;
}

/* The reference test model: mean 0, std 1/sqrt(d), truncated to [-1, 1]. */
static tempo__qdist_t model_normal(double dim)
{
    tempo__qdist_t m = {0, NULL, NULL, NULL};
    if (tempo__qdist_build(&m, TEMPO__QMODEL_NORMAL, NULL, 0, 0, 0.0, 1.0 / dim) != TEMPO_OK) {
        tap_diag("cannot build the normal model");
        exit(1);
    }
    return m;
}

/* Table is symmetric (exactly), strictly increasing, ends at ±1, 0 in the middle with zero. */
static int table_ok(const double *lv, int nl, int zero)
{
    if (lv[0] != -1.0 || lv[nl - 1] != 1.0) {
        return 0;
    }
    for (int i = 0; i < nl; i++) {
        if ((i > 0 && !(lv[i] > lv[i - 1])) || lv[i] != -lv[nl - 1 - i]) {
            return 0;
        }
    }
    return !zero || lv[nl / 2] == 0.0;
}

static void diag_levels(const char *what, const double *lv, int nl)
{
    char buf[4096];
    int n = 0;
    for (int i = nl / 2; i < nl && n < (int)sizeof(buf) - 32; i++) {
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s%.7g", i > nl / 2 ? ", " : "", lv[i]);
    }
    tap_diag("%s: positive half {%s}", what, buf);
}

/* ------------------------------------------------------------------------------------------ */
/* Model building                                                                             */
/* ------------------------------------------------------------------------------------------ */

static void test_build(void)
{
    tempo__qdist_t m = {0, NULL, NULL, NULL};

    TAP_EQ_INT(tempo__qdist_build(&m, TEMPO__QMODEL_NORMAL, NULL, 0, 0, 0.01, 0.25), TEMPO_OK,
               "build normal");
    TAP_OK(m.k == 1 && m.w[0] == 1.0 && m.mu[0] == 0.01 && m.sigma[0] == 0.5,
           "normal: one component (w 1, mean, sqrt(pooled var))");
    tempo__qdist_free(&m);
    TAP_OK(m.k == 0 && !m.w && !m.mu && !m.sigma, "free resets the model");
    tempo__qdist_free(&m);
    tempo__qdist_free(NULL);

    const tempo__qbstat_t b[5] = {{1.0, 0.10, 0.01},
                                  {3.0, 0.20, 0.02},
                                  {3.0, 0.30, 0.03},
                                  {0.0, 0.40, 0.04},
                                  {2.0, 0.50, 0.05}};
    TAP_EQ_INT(tempo__qdist_build(&m, TEMPO__QMODEL_MIXTURE, b, 5, 3, 9.0, 9.0), TEMPO_OK,
               "build mixture keep=3");
    TAP_OK(m.k == 3 && m.mu[0] == 0.20 && m.mu[1] == 0.30 && m.mu[2] == 0.50 &&
               m.sigma[0] == 0.02 && m.sigma[1] == 0.03 && m.sigma[2] == 0.05,
           "keep=3: buckets 1, 2, 4 (largest norms, tie by index)");
    TAP_OK(fabs(m.w[0] - 0.375) < 1e-15 && fabs(m.w[1] - 0.375) < 1e-15 &&
               fabs(m.w[2] - 0.25) < 1e-15,
           "weights proportional to norm: 3/8, 3/8, 2/8 (got %g %g %g)", m.w[0], m.w[1], m.w[2]);
    tempo__qdist_free(&m);

    TAP_EQ_INT(tempo__qdist_build(&m, TEMPO__QMODEL_MIXTURE, b, 5, 1, 0.0, 0.0), TEMPO_OK,
               "build mixture keep=1");
    TAP_OK(m.k == 1 && m.mu[0] == 0.20 && m.w[0] == 1.0, "keep=1: the tie goes to index 1");
    tempo__qdist_free(&m);

    for (int keep = -1; keep <= 9; keep += 5) { /* -1, 4 (> nonzero), 9 (> nb): all */
        TAP_EQ_INT(
            tempo__qdist_build(&m, TEMPO__QMODEL_MIXTURE, b, 5, keep == 4 ? 0 : keep, 0.0, 0.0),
            TEMPO_OK, "build mixture keep=%d", keep == 4 ? 0 : keep);
        double sum = 0.0;
        for (int j = 0; j < m.k; j++) {
            sum += m.w[j];
        }
        TAP_OK(m.k == 4 && fabs(sum - 1.0) < 1e-15,
               "keep=%d: every bucket with a nonzero norm (k=%d), weights sum to 1 (%.17g)",
               keep == 4 ? 0 : keep, m.k, sum);
        tempo__qdist_free(&m);
    }

    const tempo__qbstat_t zb[2] = {{0.0, 0.1, 0.1}, {0.0, 0.2, 0.2}};
    TAP_EQ_INT(tempo__qdist_build(&m, TEMPO__QMODEL_MIXTURE, zb, 2, 0, 0.0, 0.0), TEMPO_OK,
               "build mixture of zero norms");
    TAP_OK(m.k == 1 && m.w[0] == 1.0 && m.mu[0] == 0.0 && m.sigma[0] == 1e-3,
           "all norms 0: fallback component (0, 1e-3)");
    tempo__qdist_free(&m);
    TAP_EQ_INT(tempo__qdist_build(&m, TEMPO__QMODEL_MIXTURE, NULL, 0, 5, 0.0, 0.0), TEMPO_OK,
               "build mixture of no buckets");
    TAP_OK(m.k == 1 && m.mu[0] == 0.0 && m.sigma[0] == 1e-3, "nb=0: fallback component");
    tempo__qdist_free(&m);

    /* Invalid input: the model is left exactly as it was. */
    double sw = 7.0, smu = 8.0, ss = 9.0;
    tempo__qdist_t sent = {42, &sw, &smu, &ss};
    const tempo__qbstat_t bad_norm[1] = {{NAN, 0.0, 0.1}}, bad_std[1] = {{1.0, 0.0, -0.1}};
    struct {
        const char *what;
        tempo__qdist_t *d;
        int model;
        const tempo__qbstat_t *b;
        size_t nb;
        double mean, var;
    } bad[] = {
        {"NULL model", NULL, TEMPO__QMODEL_NORMAL, NULL, 0, 0.0, 1.0},
        {"unknown model kind", &m, 7, b, 5, 0.0, 1.0},
        {"negative pooled variance", &m, TEMPO__QMODEL_NORMAL, NULL, 0, 0.0, -1.0},
        {"NaN mean", &m, TEMPO__QMODEL_NORMAL, NULL, 0, NAN, 1.0},
        {"NaN norm", &m, TEMPO__QMODEL_MIXTURE, bad_norm, 1, 0.0, 0.0},
        {"negative std", &m, TEMPO__QMODEL_MIXTURE, bad_std, 1, 0.0, 0.0},
        {"buckets without statistics", &m, TEMPO__QMODEL_MIXTURE, NULL, 3, 0.0, 0.0},
    };
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(bad); i++) {
        m = sent;
        TAP_EQ_INT(tempo__qdist_build(bad[i].d, (tempo__qmodel_t)bad[i].model, bad[i].b, bad[i].nb,
                                      0, bad[i].mean, bad[i].var),
                   TEMPO_ERR_INVALID, "build rejects %s", bad[i].what);
        TAP_OK(m.k == sent.k && m.w == sent.w && m.mu == sent.mu && m.sigma == sent.sigma &&
                   sw == 7.0 && smu == 8.0 && ss == 9.0,
               "  and leaves the model untouched");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* The objective                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Direct density of the mixture at r (from the definition, with erf for the masses). */
static double brute_pdf(const tempo__qdist_t *d, double r)
{
    double f = 0.0;
    for (int j = 0; j < d->k; j++) {
        double s = d->sigma[j], mu = d->mu[j];
        double z = 0.5 * (erf((1.0 - mu) / (s * sqrt(2.0))) - erf((-1.0 - mu) / (s * sqrt(2.0))));
        double t = (r - mu) / s;
        f += d->w[j] * exp(-0.5 * t * t) / (s * sqrt(2.0 * M_PI) * z);
    }
    return f;
}

/* Composite Simpson over each interval of the table. */
static double brute_var(const tempo__qdist_t *d, const double *lv, int nl)
{
    double v = 0.0;
    for (int i = 1; i < nl; i++) {
        double a = lv[i - 1], b = lv[i], h = (b - a) / 4000.0, acc = 0.0;
        for (int k = 0; k <= 4000; k++) {
            double r = a + k * h, c = (k == 0 || k == 4000) ? 1.0 : (k & 1) ? 4.0 : 2.0;
            acc += c * (b - r) * (r - a) * brute_pdf(d, r);
        }
        v += acc * h / 3.0;
    }
    return v;
}

static void test_objective(void)
{
    const double dim = 8192.0;
    tempo__qdist_t m = model_normal(dim);
    const double qsgd[8] = {-1, -5.0 / 7, -3.0 / 7, -1.0 / 7, 1.0 / 7, 3.0 / 7, 5.0 / 7, 1};
    const double nuq[8] = {-1, -0.5, -0.25, -0.125, 0.125, 0.25, 0.5, 1};
    const double qsgd_p[7] = {-1, -2.0 / 3, -1.0 / 3, 0, 1.0 / 3, 2.0 / 3, 1};
    const double nuq_p[7] = {-1, -0.5, -0.25, 0, 0.25, 0.5, 1};
    double v;

    v = dim * tempo__qdist_var(&m, qsgd, 8);
    tap_diag("QSGD code table ±{1/7,3/7,5/7,1}: normalized variance %.6f (d/49 - 1 = %.6f)", v,
             dim / 49 - 1);
    TAP_NEAR(v, 166.18, 0.01, "QSGD code table: d·(1/7)² - 1");
    v = dim * tempo__qdist_var(&m, nuq, 8);
    tap_diag("NUQSGD code table ±{1/8,1/4,1/2,1}: normalized variance %.6f", v);
    TAP_NEAR(v, 127.00, 0.01, "NUQSGD code table: d·(1/8)² - 1");
    v = dim * tempo__qdist_var(&m, qsgd_p, 7);
    tap_diag("QSGD paper table {0,±1/3,±2/3,±1}: normalized variance %.6f", v);
    TAP_NEAR(v, 23.07, 0.02, "QSGD paper table");
    v = dim * tempo__qdist_var(&m, nuq_p, 7);
    tap_diag("NUQSGD paper table {0,±1/4,±1/2,±1}: normalized variance %.6f", v);
    TAP_NEAR(v, 17.05, 0.02, "NUQSGD paper table");

    /* Closed forms against brute force on an asymmetric mixture and an asymmetric table. */
    double w[3] = {0.5, 0.3, 0.2}, mu[3] = {0.01, -0.02, 0.3}, sg[3] = {0.05, 0.1, 0.2};
    tempo__qdist_t mix = {3, w, mu, sg};
    const double tab[6] = {-1, -0.3, -0.02, 0.01, 0.2, 1};
    double exact = tempo__qdist_var(&mix, tab, 6), brute = brute_var(&mix, tab, 6);
    tap_diag("asymmetric mixture: closed form %.15g, Simpson %.15g", exact, brute);
    TAP_NEAR(exact, brute, 1e-9, "closed-form objective matches numerical integration");
    const double wide[4] = {-2, -0.5, 0.5, 3}; /* beyond [-1, 1]: density 0 outside */
    double vw = tempo__qdist_var(&mix, wide, 4);
    double ends = 0.0, h = 1.0 / 4000.0;
    for (int k = 0; k <= 4000; k++) { /* [-1, -0.5] with roots -2, -0.5; [0.5, 1] with 0.5, 3 */
        double c = (k == 0 || k == 4000) ? 1.0 : (k & 1) ? 4.0 : 2.0;
        double r1 = -1.0 + 0.5 * k * h, r2 = 0.5 + 0.5 * k * h;
        ends += c * 0.5 * h / 3.0 *
                ((-0.5 - r1) * (r1 + 2.0) * brute_pdf(&mix, r1) +
                 (3.0 - r2) * (r2 - 0.5) * brute_pdf(&mix, r2));
    }
    double mid = brute_var(&mix, (const double[]){-0.5, 0.5}, 2);
    TAP_NEAR(vw, ends + mid, 1e-9, "a table beyond [-1, 1] integrates over the support only");

    /* Narrow intervals (quadrature branch): levels 0.01 apart under a component of std 0.5 (0.02
     * of its std), next to one of std 0.011 (closed forms). */
    double w2[2] = {0.5, 0.5}, mu2[2] = {0.001, 0.0}, sg2[2] = {0.5, 0.011};
    tempo__qdist_t mix2 = {2, w2, mu2, sg2};
    double fine[43];
    fine[0] = -1.0;
    fine[42] = 1.0;
    for (int i = 0; i < 41; i++) {
        fine[i + 1] = -0.2 + 0.01 * i;
    }
    exact = tempo__qdist_var(&mix2, fine, 43);
    brute = brute_var(&mix2, fine, 43);
    tap_diag("narrow intervals: closed form %.15g, Simpson %.15g", exact, brute);
    TAP_NEAR(exact, brute, 1e-9, "narrow intervals match numerical integration");

    const double bad1[3] = {-1, 0.5, 0.2}, bad2[3] = {-0.9, 0, 1};
    TAP_OK(isnan(tempo__qdist_var(&m, bad1, 3)), "objective of a descending table is NaN");
    TAP_OK(isnan(tempo__qdist_var(&m, bad2, 3)), "objective of a table not covering [-1,1] is NaN");
    TAP_OK(isnan(tempo__qdist_var(&m, qsgd, 1)), "objective of a one-level table is NaN");
    TAP_OK(isnan(tempo__qdist_var(NULL, qsgd, 8)), "objective without a model is NaN");
    tempo__qdist_free(&m);
}

/* ------------------------------------------------------------------------------------------ */
/* ALQ and AMQ targets                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void test_targets(void)
{
    static const struct {
        double dim;
        int bits;
        int nlev;      /* positive levels checked (0: none) */
        double lev[4]; /* positive levels, 1 excluded */
        double alq_var, p, amq_var;
    } cases[] = {
        {8192, 3, 3, {0.0048456, 0.015979, 0.037269}, 0.2233, 0.1565, 0.5271},
        {8192, 4, 0, {0}, 0.0328, 0.4465, 0.1295},
        {8192, 2, 1, {0.022278}, 4.569, 0.0225, 4.572},
        {16384, 3, 3, {0.0034706, 0.011476, 0.027206}, 0.2291, 0.1330, 0.5930},
        {16384, 4, 0, {0}, 0.0331, 0.4265, 0.1422},
        {16384, 2, 1, {0.016668}, 5.086, 0.0165, 5.089},
    };
    for (size_t c = 0; c < TEMPO_ARRAY_SIZE(cases); c++) {
        double dim = cases[c].dim, lv[NLMAX], var = 0.0, p = 0.0;
        int bits = cases[c].bits, nl = tempo__qnlevels(bits, 0);
        tempo__qdist_t m = model_normal(dim);
        char what[64];

        double t0 = secs();
        tempo_status_t st = tempo__qfit_alq(&m, bits, 0, lv, &var);
        double t1 = secs();
        snprintf(what, sizeof(what), "ALQ d=%.0f %d bits", dim, bits);
        TAP_EQ_INT(st, TEMPO_OK, "%s", what);
        diag_levels(what, lv, nl);
        tap_diag("%s: normalized variance %.6f, %.2f ms", what, dim * var, (t1 - t0) * 1e3);
        TAP_OK(table_ok(lv, nl, 0), "%s: symmetric, strictly increasing, ends at ±1", what);
        for (int i = 0; i < cases[c].nlev; i++) {
            TAP_NEAR(lv[nl / 2 + i], cases[c].lev[i], 0.01, "%s: level %d", what, i + 1);
        }
        TAP_NEAR(dim * var, cases[c].alq_var, 0.02, "%s: normalized variance", what);

        t0 = secs();
        st = tempo__qfit_amq(&m, bits, 0, &p, lv, &var);
        t1 = secs();
        snprintf(what, sizeof(what), "AMQ d=%.0f %d bits", dim, bits);
        TAP_EQ_INT(st, TEMPO_OK, "%s", what);
        diag_levels(what, lv, nl);
        tap_diag("%s: p %.6f, normalized variance %.6f, %.2f ms", what, p, dim * var,
                 (t1 - t0) * 1e3);
        TAP_OK(table_ok(lv, nl, 0), "%s: symmetric, strictly increasing, ends at ±1", what);
        if (bits == 2) {
            /* One free level: the table is {±p, ±1}; p is the ALQ level (the brief's 0.0225 is
             * rounded from 0.02228, so compare with 2 % slack). */
            TAP_NEAR(p, cases[c].p, 0.02, "%s: multiplier p", what);
        } else {
            TAP_NEAR(p, cases[c].p, 0.02, "%s: multiplier p", what);
        }
        TAP_NEAR(dim * var, cases[c].amq_var, 0.02, "%s: normalized variance", what);
        tempo__qdist_free(&m);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Properties                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static void test_all_bits(void)
{
    tempo__qdist_t m = model_normal(8192);
    for (int zero = 0; zero <= 1; zero++) {
        for (int bits = zero ? 2 : 1; bits <= 8; bits++) {
            int nl = tempo__qnlevels(bits, zero);
            double lv[NLMAX], va = 0.0, vm = 0.0, p = 0.0;
            double t0 = secs();
            tempo_status_t sa = tempo__qfit_alq(&m, bits, zero, lv, &va);
            double t1 = secs();
            int oka = sa == TEMPO_OK && table_ok(lv, nl, zero);
            double lv2[NLMAX];
            tempo_status_t sm = tempo__qfit_amq(&m, bits, zero, &p, lv2, &vm);
            double t2 = secs();
            int okm = sm == TEMPO_OK && table_ok(lv2, nl, zero);
            tap_diag("bits=%d zero=%d: ALQ %.6g (%.2f ms), AMQ p=%.6f %.6g (%.2f ms)", bits, zero,
                     8192 * va, (t1 - t0) * 1e3, p, 8192 * vm, (t2 - t1) * 1e3);
            TAP_OK(oka && okm, "bits=%d zero=%d: both tables valid", bits, zero);
            TAP_OK(va <= vm * (1 + 1e-9), "bits=%d zero=%d: ALQ no worse than AMQ (%.6g <= %.6g)",
                   bits, zero, 8192 * va, 8192 * vm);
        }
    }
    tempo__qdist_free(&m);
}

static void test_paper_convention(void)
{
    tempo__qdist_t m = model_normal(8192);
    double lv[NLMAX], va, vm, p;
    const double nuq_p[7] = {-1, -0.5, -0.25, 0, 0.25, 0.5, 1};
    double ref = 8192 * tempo__qdist_var(&m, nuq_p, 7);
    TAP_EQ_INT(tempo__qfit_alq(&m, 3, 1, lv, &va), TEMPO_OK, "ALQ with a zero level, 3 bits");
    diag_levels("ALQ zero=1 d=8192 3 bits", lv, 7);
    tap_diag("ALQ zero=1 d=8192 3 bits: normalized variance %.6f (NUQSGD paper table %.4f)",
             8192 * va, ref);
    TAP_OK(table_ok(lv, 7, 1) && 8192 * va < ref,
           "ALQ zero=1: valid table, better than the NUQSGD paper table");
    TAP_EQ_INT(tempo__qfit_amq(&m, 3, 1, &p, lv, &vm), TEMPO_OK, "AMQ with a zero level, 3 bits");
    tap_diag("AMQ zero=1 d=8192 3 bits: p %.6f, normalized variance %.6f", p, 8192 * vm);
    TAP_OK(table_ok(lv, 7, 1) && 8192 * vm <= ref && va <= vm * (1 + 1e-9),
           "AMQ zero=1: valid table, no worse than p = 0.5, no better than ALQ");
    tempo__qdist_free(&m);
}

static void test_monotone(void)
{
    const char *names[3] = {"quantile", "uniform", "exponential"};
    double w[2] = {0.6, 0.4}, mu[2] = {0.002, -0.001}, sg[2] = {0.011, 0.02};
    tempo__qdist_t mix = {2, w, mu, sg};
    tempo__qdist_t m = model_normal(8192);
    for (int which = 0; which < 2; which++) {
        const tempo__qdist_t *d = which ? &mix : &m;
        for (int bits = 3; bits <= 5; bits++) {
            for (int zero = 0; zero <= 1; zero++) {
                for (int start = 0; start < 3; start++) {
                    double obj[201], lv[NLMAX];
                    int nep = -1, nl = tempo__qnlevels(bits, zero), mono = 1;
                    tempo_status_t st =
                        tempo__qfit_alq_run(d, bits, zero, start, 200, obj, &nep, lv);
                    for (int e = 1; e <= nep; e++) {
                        /* Rounding of the sum (terms in a fixed order) is the only slack. */
                        mono &= obj[e] <= obj[e - 1] * (1 + 1e-14);
                    }
                    tap_diag("%s bits=%d zero=%d %s start: %.6g -> %.6g in %d epochs",
                             which ? "mixture" : "normal", bits, zero, names[start], 8192 * obj[0],
                             8192 * obj[nep > 0 ? nep : 0], nep);
                    TAP_OK(st == TEMPO_OK && nep >= 1 && mono && table_ok(lv, nl, zero),
                           "%s bits=%d zero=%d %s start: objective non-increasing per epoch",
                           which ? "mixture" : "normal", bits, zero, names[start]);
                }
            }
        }
    }
    tempo__qdist_free(&m);
}

/* The sweeps alone converge like Gauss-Seidel on a chain (200 leave 7 bits 35 % above the
 * minimum); with the Newton step the library's fit must match a run of thousands of epochs. */
static void test_converged(void)
{
    static double obj[5001];
    tempo__qdist_t m = model_normal(8192);
    for (int bits = 6; bits <= 8; bits++) {
        double lv[NLMAX], ref[NLMAX], v;
        int nep = 0;
        tempo__qfit_alq(&m, bits, 0, lv, &v);
        tempo__qfit_alq_run(&m, bits, 0, 1, 5000, obj, &nep, ref);
        tap_diag("bits=%d: fit %.10g, uniform start after %d epochs %.10g", bits, 8192 * v, nep,
                 8192 * obj[nep]);
        TAP_NEAR(v, obj[nep], 1e-9, "bits=%d: ALQ reaches the minimum", bits);
    }
    tempo__qdist_free(&m);
}

static void test_two_identical(void)
{
    tempo__qdist_t m = model_normal(8192);
    const tempo__qbstat_t b[2] = {{2.0, 0.0, 1.0 / sqrt(8192)}, {2.0, 0.0, 1.0 / sqrt(8192)}};
    tempo__qdist_t two = {0, NULL, NULL, NULL};
    TAP_EQ_INT(tempo__qdist_build(&two, TEMPO__QMODEL_MIXTURE, b, 2, 0, 0.0, 0.0), TEMPO_OK,
               "build a mixture of two identical buckets");
    double l1[NLMAX], l2[NLMAX], v1, v2, p1, p2;
    tempo__qfit_alq(&m, 3, 0, l1, &v1);
    tempo__qfit_alq(&two, 3, 0, l2, &v2);
    double dl = 0.0;
    for (int i = 0; i < 8; i++) {
        dl = fmax(dl, fabs(l1[i] - l2[i]) / fabs(l1[i]));
    }
    tap_diag("two identical components vs one: ALQ level difference %.3g relative, variance %.17g "
             "vs %.17g",
             dl, v2, v1);
    /* Not bitwise: the sums run over different components. The descent stops at a 1e-12 relative
     * improvement, which pins the levels to ~1e-6; the objective agrees much more closely. */
    TAP_OK(dl < 1e-6 && fabs(v1 - v2) <= 1e-12 * v1, "ALQ: two identical components fit like one");
    tempo__qfit_amq(&m, 3, 0, &p1, l1, &v1);
    tempo__qfit_amq(&two, 3, 0, &p2, l2, &v2);
    TAP_OK(fabs(p1 - p2) < 1e-8 && fabs(v1 - v2) <= 1e-12 * v1,
           "AMQ: two identical components fit like one (p %.12f vs %.12f)", p1, p2);
    tempo__qdist_free(&two);
    tempo__qdist_free(&m);
}

static void test_degenerate(void)
{
    /* A point mass (std 0), a component whose mass in [-1, 1] underflows, a very wide one. */
    double w[3] = {0.5, 0.25, 0.25}, mu[3] = {0.01, 50.0, 0.0}, sg[3] = {0.0, 0.01, 1e9};
    tempo__qdist_t d = {3, w, mu, sg};
    double lv[NLMAX], va = -1, vm = -1, p = -1;
    tempo_status_t sa = tempo__qfit_alq(&d, 3, 0, lv, &va);
    TAP_OK(sa == TEMPO_OK && table_ok(lv, 8, 0) && isfinite(va) && va >= 0,
           "degenerate components: ALQ fits (variance %.6g)", va);
    diag_levels("ALQ degenerate model", lv, 8);
    tempo_status_t sm = tempo__qfit_amq(&d, 3, 1, &p, lv, &vm);
    TAP_OK(sm == TEMPO_OK && table_ok(lv, 7, 1) && isfinite(vm) && vm >= 0,
           "degenerate components: AMQ fits (p %.6f, variance %.6g)", p, vm);
    /* The point mass at 0.01 alone: variance (hi - 0.01)(0.01 - lo) on any table. */
    double w1[1] = {1.0}, mu1[1] = {0.01}, s1[1] = {0.0};
    tempo__qdist_t pm = {1, w1, mu1, s1};
    const double tab[4] = {-1, -0.5, 0.5, 1};
    TAP_NEAR(tempo__qdist_var(&pm, tab, 4), (0.5 - 0.01) * (0.01 + 0.5), 1e-9,
             "a zero-std component is a point mass");
}

static void test_invalid(void)
{
    tempo__qdist_t m = model_normal(8192);
    double nanw[1] = {NAN}, one[1] = {1.0}, negs[1] = {-1.0}, zw[1] = {0.0};
    tempo__qdist_t bad_w = {1, nanw, one, one}, bad_s = {1, one, one, negs};
    tempo__qdist_t zero_w = {1, zw, one, one}, empty = {0, NULL, NULL, NULL};
    struct {
        const char *what;
        const tempo__qdist_t *d;
        int bits, zero, lv_null;
    } cases[] = {
        {"NULL model", NULL, 3, 0, 0},
        {"empty model", &empty, 3, 0, 0},
        {"NaN weight", &bad_w, 3, 0, 0},
        {"negative std", &bad_s, 3, 0, 0},
        {"weights summing to 0", &zero_w, 3, 0, 0},
        {"bits=0", &m, 0, 0, 0},
        {"bits=9", &m, 9, 0, 0},
        {"bits=1 with a zero level", &m, 1, 1, 0},
        {"zero=2", &m, 3, 2, 0},
        {"NULL levels", &m, 3, 0, 1},
    };
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(cases); i++) {
        double lv[NLMAX], var = 12345.0, p = 678.0;
        for (int k = 0; k < NLMAX; k++) {
            lv[k] = 99.0;
        }
        double *lvp = cases[i].lv_null ? NULL : lv;
        tempo_status_t sa = tempo__qfit_alq(cases[i].d, cases[i].bits, cases[i].zero, lvp, &var);
        tempo_status_t sm =
            tempo__qfit_amq(cases[i].d, cases[i].bits, cases[i].zero, &p, lvp, &var);
        int untouched = var == 12345.0 && p == 678.0;
        for (int k = 0; k < NLMAX; k++) {
            untouched &= lv[k] == 99.0;
        }
        TAP_OK(sa == TEMPO_ERR_INVALID && sm == TEMPO_ERR_INVALID && untouched,
               "ALQ and AMQ reject %s, outputs untouched (%d %d)", cases[i].what, (int)sa, (int)sm);
    }
    double obj[4], lv[NLMAX];
    TAP_EQ_INT(tempo__qfit_alq_run(&m, 3, 0, 3, 3, obj, NULL, lv), TEMPO_ERR_INVALID,
               "descent hook rejects an unknown start");
    tempo__qdist_free(&m);
}

/* A mixture like the reference's ImageNet setting: 350 buckets of 8192 with stds around
 * 1/sqrt(d), small means, spread norms. */
static void make_mixture(tempo__qdist_t *d, int k, uint64_t *rs)
{
    tempo__qbstat_t *b = calloc((size_t)k, sizeof(*b));
    for (int j = 0; j < k; j++) {
        double u1 = (double)(tu_rand64(rs) >> 11) / 9007199254740992.0;
        double u2 = (double)(tu_rand64(rs) >> 11) / 9007199254740992.0;
        double u3 = (double)(tu_rand64(rs) >> 11) / 9007199254740992.0;
        b[j].norm = 0.1 + 10.0 * u1;
        b[j].mean = (u2 - 0.5) * 2e-3;
        b[j].std = (0.6 + 0.8 * u3) / sqrt(8192.0);
    }
    if (tempo__qdist_build(d, TEMPO__QMODEL_MIXTURE, b, (size_t)k, k, 0.0, 0.0) != TEMPO_OK) {
        tap_diag("cannot build the mixture");
        exit(1);
    }
    free(b);
}

static void test_mixture_speed(void)
{
    uint64_t rs = 0x5eed5eed12345ull;
    tempo__qdist_t d = {0, NULL, NULL, NULL}, n = model_normal(8192);
    make_mixture(&d, 350, &rs);
    double lv[NLMAX], lv2[NLMAX], va, va2, vm, vm2, p, p2;

    double t0 = secs();
    tempo_status_t sa = tempo__qfit_alq(&d, 3, 0, lv, &va);
    double t1 = secs();
    tempo_status_t sm = tempo__qfit_amq(&d, 3, 0, &p, lv2, &vm);
    double t2 = secs();
    diag_levels("ALQ mixture k=350 3 bits", lv, 8);
    tap_diag("mixture k=350 3 bits: ALQ %.6f in %.1f ms; AMQ p=%.6f %.6f in %.1f ms", 8192 * va,
             (t1 - t0) * 1e3, p, 8192 * vm, (t2 - t1) * 1e3);
    TAP_OK(sa == TEMPO_OK && sm == TEMPO_OK && table_ok(lv, 8, 0) && table_ok(lv2, 8, 0),
           "mixture of 350 components: ALQ and AMQ fit");

    /* Bitwise repeatable. */
    tempo__qfit_alq(&d, 3, 0, lv2, &va2);
    TAP_OK(memcmp(lv, lv2, 8 * sizeof(double)) == 0 && memcmp(&va, &va2, sizeof(va)) == 0,
           "ALQ is bitwise repeatable");
    double lv3[NLMAX], lv4[NLMAX];
    tempo__qfit_amq(&d, 3, 0, &p, lv3, &vm);
    tempo__qfit_amq(&d, 3, 0, &p2, lv4, &vm2);
    TAP_OK(memcmp(lv3, lv4, 8 * sizeof(double)) == 0 && memcmp(&p, &p2, sizeof(p)) == 0 &&
               memcmp(&vm, &vm2, sizeof(vm)) == 0,
           "AMQ is bitwise repeatable");

    t0 = secs();
    tempo__qfit_alq(&n, 3, 0, lv, &va);
    t1 = secs();
    tempo__qfit_amq(&n, 3, 0, &p, lv, &vm);
    t2 = secs();
    tap_diag("normal model 3 bits: ALQ %.2f ms, AMQ %.2f ms", (t1 - t0) * 1e3, (t2 - t1) * 1e3);

    t0 = secs();
    tempo__qfit_alq(&d, 4, 0, lv, &va);
    t1 = secs();
    tempo__qfit_amq(&d, 4, 0, &p, lv, &vm);
    t2 = secs();
    tap_diag("mixture k=350 4 bits: ALQ %.6f in %.1f ms; AMQ %.6f in %.1f ms", 8192 * va,
             (t1 - t0) * 1e3, 8192 * vm, (t2 - t1) * 1e3);
    tempo__qdist_free(&d);
    tempo__qdist_free(&n);
}

/* ------------------------------------------------------------------------------------------ */
/* Monte Carlo                                                                                */
/* ------------------------------------------------------------------------------------------ */

static double gauss(uint64_t *rs)
{
    double u1 = ((double)(tu_rand64(rs) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(tu_rand64(rs) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Σ_i (hi - r_i)(r_i - lo) for r = v/||v|| of one Gaussian bucket. */
static double mc_bucket(const double *lv, int nl, int dim, uint64_t *rs, double *v)
{
    double n2 = 0.0, sum = 0.0;
    for (int i = 0; i < dim; i++) {
        v[i] = gauss(rs);
        n2 += v[i] * v[i];
    }
    double inv = 1.0 / sqrt(n2);
    for (int i = 0; i < dim; i++) {
        double r = v[i] * inv;
        int k = 1;
        while (k < nl - 1 && lv[k] < r) {
            k++;
        }
        sum += (lv[k] - r) * (r - lv[k - 1]);
    }
    return sum;
}

static void test_monte_carlo(void)
{
    const int dim = 8192;
    uint64_t seed = tu_seed(), rs = seed;
    tap_diag("Monte Carlo seed %llu (TEMPO_TEST_SEED=%llu replays it)", (unsigned long long)seed,
             (unsigned long long)seed);
    tempo__qdist_t m = model_normal(dim);
    double lv[NLMAX], var, p;
    double *v = malloc((size_t)dim * sizeof(double));
    tempo__qfit_alq(&m, 3, 0, lv, &var);
    /* One bucket is too noisy for a 5 % check: its sum is dominated by the ~6 coordinates beyond
     * the top inner level (3.4 std), and varies by ~4 % (std) from bucket to bucket. 64 buckets
     * bring that to 0.5 %; the check allows 3 % (6 std). */
    double one = mc_bucket(lv, 8, dim, &rs, v), sum = one, sum2 = one * one;
    for (int b = 1; b < 64; b++) {
        double x = mc_bucket(lv, 8, dim, &rs, v);
        sum += x;
        sum2 += x * x;
    }
    double mean = sum / 64, sd = sqrt((sum2 / 64 - mean * mean) * 64 / 63);
    tap_diag("ALQ 3 bits: model %.5f; one bucket %.5f; 64 buckets mean %.5f, per-bucket std %.5f "
             "(%.1f %%)",
             dim * var, one, mean, sd, 100 * sd / mean);
    TAP_NEAR(mean, dim * var, 0.03, "ALQ 3 bits: Gaussian buckets agree with the model");
    tempo__qfit_amq(&m, 3, 0, &p, lv, &var);
    sum = 0.0;
    for (int b = 0; b < 16; b++) {
        sum += mc_bucket(lv, 8, dim, &rs, v);
    }
    tap_diag("AMQ 3 bits: model %.5f, mean of 16 buckets %.5f", dim * var, sum / 16);
    TAP_NEAR(sum / 16, dim * var, 0.03, "AMQ 3 bits: Gaussian buckets agree with the model");
    free(v);
    tempo__qdist_free(&m);
}

int main(void)
{
    test_build();
    test_objective();
    test_targets();
    test_all_bits();
    test_paper_convention();
    test_monotone();
    test_converged();
    test_two_identical();
    test_degenerate();
    test_invalid();
    test_mixture_speed();
    test_monte_carlo();
    return tap_done();
}
