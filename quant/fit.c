/*
 * fit.c — the distribution model of normalized coordinates r = v_i / ||v||_2, the expected
 * variance of unbiased rounding under it, and the ALQ and AMQ level fitters (Faghri et al.,
 * NeurIPS 2020; see /work/shared/reference/compression.md §1.3-1.5 and §6.4).
 *
 * What it is: the model (a weighted mixture of normals, each truncated to [-1, 1]), the objective
 * ∫ (hi(r) - r)(r - lo(r)) f(r) dr summed over the adjacent pairs of a signed table ("Eq 6"), ALQ
 * (coordinate descent over the levels with the closed-form update, "Eq 8", from three starts,
 * each epoch closed by a Newton step on the tridiagonal Hessian so that 7-8 bits converge too) and
 * AMQ (a scan and gradient descent over the multiplier p of the levels ±p^k). What it is not: the
 * statistics pass over a gradient (quant.c gathers bucket norms, means and stds) nor the
 * quantizer (levels.c). Unlike the reference code (scipy quad on a 50 000-bin histogram, finite
 * differences), it reaches the exact optimum of the model: see compression.md §1.4 and §6.4-6.5.
 *
 * No integration grid. With t = (r - mu)/s standardized, Φ and φ the standard normal cdf
 * and pdf, Z = Φ((1 - mu)/s) - Φ((-1 - mu)/s) the component's mass in [-1, 1], and an interval
 * [u, v] ⊂ [-1, 1] with standardized end points τu ≤ τv, D = Φ(τv) - Φ(τu), and a ≤ b any two
 * points with standardized α, β:
 *     ∫_u^v f            = D / Z
 *     ∫_u^v (r - a) f    = s (φ(τu) - φ(τv) - α D) / Z
 *     ∫_u^v (b - r) f    = s (β D - φ(τu) + φ(τv)) / Z
 *     ∫_u^v (b-r)(r-a) f = s² (-(1 + αβ) D + (α + β - τu) φ(τu) - (α + β - τv) φ(τv)) / Z
 * (from ∫ tφ = -φ and ∫ t²φ = Φ - tφ). Evaluating the model at one point costs one erfc and one
 * exp per component; the points of the current levels are cached. D is formed from the tails on
 * the same side of the mean (erfc), so an interval far in a tail keeps its relative precision;
 * intervals narrow next to a component's std use quadrature instead (see FIT_NARROW_*).
 *
 * Symmetric tables. ALQ and AMQ tables are symmetric: for those, the objective under f equals the
 * objective of the positive half under the folded density g(r) = f(r) + f(-r) on [0, 1] (the band
 * [-l1, l1] that straddles 0 in the no-zero convention costs ∫_0^l1 (l1² - r²) g). The fitters
 * work on g, which is again a mixture of truncated normals: each component and its mirror image
 * (mu -> -mu; one component of double weight when mu == 0). A model with a small nonzero mean is
 * thereby fitted with the best symmetric table, which is what the quantizer can use.
 *
 * Invariants:
 *   - fitted tables are symmetric (lv[i] == -lv[nl-1-i] exactly), strictly increasing, end at
 *     exactly -1 and 1, and have exactly 0 in the middle under the zero convention;
 *   - within one ALQ run the objective never increases: a level update is kept only if the two
 *     intervals it touches cost no more than before (each one-dimensional subproblem is convex, so
 *     this only ever rejects rounding noise), and a Newton step only if the total does not grow;
 *   - results are a pure function of the inputs (no threads, no randomness, fixed loop orders), so
 *     ranks that fit from the same statistics get bitwise the same table;
 *   - outputs are written only on success.
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tempo_int.h"
#include "quant/quant.h"

#define FIT_SIGMA_MIN 1e-12 /* a zero std is a point mass; keep t = (r - mu)/s finite */
#define FIT_SIGMA_MAX 1e6   /* wider than this is uniform on [-1, 1] to ~1e-12 anyway */
#define FIT_MASS_MIN 1e-200 /* a component with less mass in [-1, 1] moves to the nearest end */
#define FIT_T_MAX 40.0      /* beyond |t| = 40, φ(t) and the tail underflow: skip exp/erfc */
#define FIT_FALLBACK_MU 0.0 /* mixture with no usable bucket: one narrow centred component */
#define FIT_FALLBACK_SIGMA 1e-3
#define FIT_EPOCHS 200      /* ALQ: most epochs (sweep + Newton step) per start */
#define FIT_REL_TOL 1e-12   /* ALQ: stop when an epoch improves the objective by less (relative) */
#define FIT_X_TOL 1e-13     /* relative accuracy of a solved level */
#define FIT_SOLVE_ITERS 300 /* Newton takes a few; 300 halvings reach FIT_X_TOL above 1e-77 */
#define FIT_AMQ_SCAN 200    /* AMQ: points of the coarse scan over p */
#define FIT_AMQ_ITERS 200   /* AMQ: most descent steps per start */
#define FIT_AMQ_PMIN 0.001
#define FIT_AMQ_PMAX 0.999
#define FIT_AMQ_LEVEL_MIN 1e-30 /* AMQ: smallest level p^(s-1) kept at least this (fp32-safe) */
#define FIT_AMQ_P_NONE 0.5      /* AMQ with no free level (one positive level) reports this p */
#define FIT_MAX_COMP (INT_MAX / 4)

static const double fit_inv_sqrt2pi = 0.398942280401432677939946059934;
static const double fit_sqrt1_2 = 0.707106781186547524400844362105;

/* ---------------------------------------------------------------------------------------------- */
/* One truncated normal                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/** A point x seen from one component: t = (x - mu)/s, φ(t), and the smaller tail
 *  min(Φ(t), 1 - Φ(t)) = erfc(|t|/√2)/2. */
typedef struct fit_pt {
    double t, ph, q;
} fit_pt_t;

/** A component as the formulas use it: std clamped, mass guarded, and wz = weight / (Σw · Z), so
 *  that wz · D is the mixture's mass of an interval. */
typedef struct fit_comp {
    double mu, s, wz;
} fit_comp_t;

static inline void fit_point(double x, double mu, double s, fit_pt_t *p)
{
    double t = (x - mu) / s;
    p->t = t;
    if (fabs(t) > FIT_T_MAX) {
        p->ph = 0.0;
        p->q = 0.0;
    } else {
        p->ph = exp(-0.5 * t * t) * fit_inv_sqrt2pi;
        p->q = 0.5 * erfc(fabs(t) * fit_sqrt1_2);
    }
}

/** Φ(tb) - Φ(ta) for ta <= tb, from the tails on the same side so that tail intervals keep their
 *  relative precision. */
static inline double fit_d0(const fit_pt_t *a, const fit_pt_t *b)
{
    if (a->t >= 0.0) {
        return a->q - b->q;
    }
    if (b->t <= 0.0) {
        return b->q - a->q;
    }
    return 1.0 - a->q - b->q;
}

/*
 * Narrow intervals. The closed forms subtract terms of order 1 (times φ) to get results of order
 * w, w² and w³ for an interval of standardized width w (the mass, the first moments and the
 * interval cost), losing about 1/w, 1/w² and 1/w³ of relative precision. Below these widths the
 * three come instead from 6-point Gauss-Legendre quadrature of the moments about the interval's
 * midpoint, which has no cancellation and whose error is below ~1e-15 relative for w <= 0.5; the
 * closed forms are then good to ~1e-13 or better above them. Narrow intervals are the rule at 7-8
 * bits (levels a twentieth of a std apart) and for components much wider than the levels.
 */
#define FIT_NARROW_MASS 1e-3
#define FIT_NARROW_MOM 0.05
#define FIT_NARROW_COST 0.5

/** ∫_tu^tv (t - c)^k φ(t) dt for k = 0, 1, 2, with c = (tu + tv)/2. */
static void fit_gl(double tu, double tv, double *m0, double *m1, double *m2)
{
    static const double xi[3] = {0.2386191860831969086, 0.6612093864662645137,
                                 0.9324695142031520278};
    static const double om[3] = {0.4679139345726910473, 0.3607615730481386076,
                                 0.1713244923791703450};
    double c = 0.5 * (tu + tv), h = 0.5 * (tv - tu), a0 = 0.0, a1 = 0.0, a2 = 0.0;
    if (tu < FIT_T_MAX && tv > -FIT_T_MAX) { /* else the whole interval is far in a tail */
        for (int k = 0; k < 3; k++) {
            double u = h * xi[k], fp = exp(-0.5 * (c + u) * (c + u)),
                   fm = exp(-0.5 * (c - u) * (c - u));
            a0 += om[k] * (fp + fm);
            a1 += om[k] * u * (fp - fm);
            a2 += om[k] * u * u * (fp + fm);
        }
    }
    h *= fit_inv_sqrt2pi;
    *m0 = a0 * h;
    *m1 = a1 * h;
    *m2 = a2 * h;
}

/* The integrals of one standardized component over [pu, pv] (pu <= pv). */

/** ∫ φ */
static inline double fit_c_mass(const fit_pt_t *pu, const fit_pt_t *pv)
{
    if (pv->t - pu->t < FIT_NARROW_MASS) {
        double m0, m1, m2;
        fit_gl(pu->t, pv->t, &m0, &m1, &m2);
        return m0;
    }
    return fit_d0(pu, pv);
}

/** ∫ (be - t) φ */
static inline double fit_c_ehi(double be, const fit_pt_t *pu, const fit_pt_t *pv)
{
    if (pv->t - pu->t < FIT_NARROW_MOM) {
        double m0, m1, m2;
        fit_gl(pu->t, pv->t, &m0, &m1, &m2);
        return (be - 0.5 * (pu->t + pv->t)) * m0 - m1;
    }
    return be * fit_d0(pu, pv) - pu->ph + pv->ph;
}

/** ∫ (t - al) φ */
static inline double fit_c_elo(double al, const fit_pt_t *pu, const fit_pt_t *pv)
{
    if (pv->t - pu->t < FIT_NARROW_MOM) {
        double m0, m1, m2;
        fit_gl(pu->t, pv->t, &m0, &m1, &m2);
        return (0.5 * (pu->t + pv->t) - al) * m0 + m1;
    }
    return pu->ph - pv->ph - al * fit_d0(pu, pv);
}

/** ∫ (be - t)(t - al) φ */
static inline double fit_c_cost(double al, double be, const fit_pt_t *pu, const fit_pt_t *pv)
{
    if (pv->t - pu->t < FIT_NARROW_COST) {
        double m0, m1, m2, c = 0.5 * (pu->t + pv->t), x = be - c, y = c - al;
        fit_gl(pu->t, pv->t, &m0, &m1, &m2);
        return x * y * m0 + (x - y) * m1 - m2;
    }
    double sum = al + be;
    return -(1.0 + al * be) * fit_d0(pu, pv) + (sum - pu->t) * pu->ph - (sum - pv->t) * pv->ph;
}

/** Mass of N(mu, s) in [-1, 1]. */
static double fit_mass1(double mu, double s)
{
    fit_pt_t a, b;
    fit_point(-1.0, mu, s, &a);
    fit_point(1.0, mu, s, &b);
    return fit_c_mass(&a, &b);
}

/** Component j of d with the guards: the std is clamped to [FIT_SIGMA_MIN, FIT_SIGMA_MAX]; a
 *  component whose mass in [-1, 1] underflows (its mean lies many stds outside) is moved to the
 *  nearest end, mu = ±1, keeping its std: truncated, it concentrates at that end either way, and
 *  with mu = ±1 its mass is at least ~1e-6. */
static void fit_comp(const tempo__qdist_t *d, int j, double wsum, fit_comp_t *c)
{
    double s = d->sigma[j], mu = d->mu[j];
    s = s < FIT_SIGMA_MIN ? FIT_SIGMA_MIN : s > FIT_SIGMA_MAX ? FIT_SIGMA_MAX : s;
    double z = fit_mass1(mu, s);
    if (!(z >= FIT_MASS_MIN)) {
        mu = mu < 0.0 ? -1.0 : 1.0;
        z = fit_mass1(mu, s);
    }
    c->mu = mu;
    c->s = s;
    c->wz = d->w[j] / wsum / z;
}

/** Validate a model; *wsum_p receives Σ w (the weights are used divided by it, so a caller's
 *  unnormalized weights still describe a distribution). */
static tempo_status_t fit_check_dist(const tempo__qdist_t *d, double *wsum_p)
{
    if (!d || d->k < 1 || d->k > FIT_MAX_COMP || !d->w || !d->mu || !d->sigma) {
        return tempo__err(TEMPO_ERR_INVALID, "qfit: the distribution model is empty or has no "
                                             "arrays (build it with tempo__qdist_build)");
    }
    double wsum = 0.0;
    for (int j = 0; j < d->k; j++) {
        if (!isfinite(d->w[j]) || d->w[j] < 0.0 || !isfinite(d->mu[j]) || !isfinite(d->sigma[j]) ||
            d->sigma[j] < 0.0) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "qfit: model component %d has w=%g mu=%g sigma=%g; weights and "
                              "stds must be finite and >= 0, means finite",
                              j, d->w[j], d->mu[j], d->sigma[j]);
        }
        wsum += d->w[j];
    }
    if (!(wsum > 0.0) || !isfinite(wsum)) {
        return tempo__err(TEMPO_ERR_INVALID, "qfit: the model's weights sum to %g", wsum);
    }
    *wsum_p = wsum;
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Building the model                                                                             */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t fit_dist_alloc(tempo__qdist_t *d, int k)
{
    d->k = k;
    d->w = tempo__calloc((size_t)k, sizeof(double), "qdist weights");
    d->mu = tempo__calloc((size_t)k, sizeof(double), "qdist means");
    d->sigma = tempo__calloc((size_t)k, sizeof(double), "qdist stds");
    if (!d->w || !d->mu || !d->sigma) {
        tempo__qdist_free(d);
        return TEMPO_ERR_NOMEM;
    }
    return TEMPO_OK;
}

typedef struct fit_key {
    double norm;
    size_t idx;
} fit_key_t;

/* Largest norm first, ties by smaller index: a total order, so qsort is deterministic. */
static int fit_key_cmp(const void *pa, const void *pb)
{
    const fit_key_t *a = pa, *b = pb;
    if (a->norm != b->norm) {
        return a->norm > b->norm ? -1 : 1;
    }
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* d is overwritten, not freed: free a previous model first. */
tempo_status_t tempo__qdist_build(tempo__qdist_t *d, tempo__qmodel_t model,
                                  const tempo__qbstat_t *b, size_t nb, int keep, double mean,
                                  double pooled_var)
{
    tempo__qdist_t out = {0, NULL, NULL, NULL};
    tempo_status_t st;

    if (!d) {
        return tempo__err(TEMPO_ERR_INVALID, "qdist_build: NULL model");
    }
    if (model == TEMPO__QMODEL_NORMAL) {
        if (!isfinite(mean) || !isfinite(pooled_var) || pooled_var < 0.0) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "qdist_build: normal model needs a finite mean and a finite "
                              "pooled variance >= 0 (got mean=%g var=%g)",
                              mean, pooled_var);
        }
        TEMPO_CHECK(fit_dist_alloc(&out, 1));
        out.w[0] = 1.0;
        out.mu[0] = mean;
        out.sigma[0] = sqrt(pooled_var);
        *d = out;
        return TEMPO_OK;
    }
    if (model != TEMPO__QMODEL_MIXTURE) {
        return tempo__err(TEMPO_ERR_INVALID, "qdist_build: unknown model %d", (int)model);
    }
    if (nb > 0 && !b) {
        return tempo__err(TEMPO_ERR_INVALID, "qdist_build: %zu buckets but no statistics", nb);
    }
    for (size_t i = 0; i < nb; i++) {
        if (!isfinite(b[i].norm) || b[i].norm < 0.0 || !isfinite(b[i].mean) ||
            !isfinite(b[i].std) || b[i].std < 0.0) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "qdist_build: bucket %zu has norm=%g mean=%g std=%g; norms and "
                              "stds must be finite and >= 0, means finite",
                              i, b[i].norm, b[i].mean, b[i].std);
        }
    }
    size_t nk = (keep <= 0 || (size_t)keep > nb) ? nb : (size_t)keep;
    fit_key_t *key = NULL;
    if (nk > 0) {
        key = tempo__calloc(nb, sizeof(*key), "qdist bucket order");
        if (!key) {
            return TEMPO_ERR_NOMEM;
        }
        for (size_t i = 0; i < nb; i++) {
            key[i].norm = b[i].norm;
            key[i].idx = i;
        }
        if (nk < nb) {
            qsort(key, nb, sizeof(*key), fit_key_cmp);
        }
    }
    /* The kept buckets with a nonzero norm become components; norms are divided by the largest
     * before summing so that huge norms cannot overflow the sum. */
    double nmax = 0.0;
    size_t nz = 0;
    for (size_t i = 0; i < nk; i++) {
        nmax = key[i].norm > nmax ? key[i].norm : nmax;
        nz += key[i].norm > 0.0;
    }
    if (nz == 0) {
        /* No bucket carries information (no buckets, or every norm is 0, e.g. before the first
         * nonzero gradient): fall back to one narrow centred component. Any table is then about
         * as good as any other; this one keeps the fitters well defined. */
        tempo__free(key);
        TEMPO_CHECK(fit_dist_alloc(&out, 1));
        out.w[0] = 1.0;
        out.mu[0] = FIT_FALLBACK_MU;
        out.sigma[0] = FIT_FALLBACK_SIGMA;
        *d = out;
        return TEMPO_OK;
    }
    if (nz > FIT_MAX_COMP) {
        tempo__free(key);
        return tempo__err(TEMPO_ERR_INVALID, "qdist_build: %zu components (keep at most %d)", nz,
                          FIT_MAX_COMP);
    }
    st = fit_dist_alloc(&out, (int)nz);
    if (st < 0) {
        tempo__free(key);
        return st;
    }
    double sum = 0.0;
    int j = 0;
    for (size_t i = 0; i < nk; i++) {
        if (key[i].norm > 0.0) {
            const tempo__qbstat_t *bs = &b[key[i].idx];
            out.w[j] = key[i].norm / nmax;
            out.mu[j] = bs->mean;
            out.sigma[j] = bs->std;
            sum += out.w[j];
            j++;
        }
    }
    for (j = 0; j < out.k; j++) {
        out.w[j] /= sum; /* weight ∝ norm (not norm²), as the reference code */
    }
    tempo__free(key);
    *d = out;
    return TEMPO_OK;
}

void tempo__qdist_free(tempo__qdist_t *d)
{
    if (!d) {
        return;
    }
    tempo__free(d->w);
    tempo__free(d->mu);
    tempo__free(d->sigma);
    d->w = d->mu = d->sigma = NULL;
    d->k = 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* The objective on a signed table                                                                */
/* ---------------------------------------------------------------------------------------------- */

/* Returns NaN (and sets the thread's error text) for an invalid model or table: the signature has
 * no status, and NaN cannot be mistaken for a variance. A table may extend beyond [-1, 1] (the
 * density is 0 there) but must cover it. */
double tempo__qdist_var(const tempo__qdist_t *d, const double *lv, int nl)
{
    double wsum = 0.0;
    if (fit_check_dist(d, &wsum) < 0) {
        return NAN;
    }
    if (!lv || nl < 2) {
        tempo__err(TEMPO_ERR_INVALID, "qdist_var: a table needs at least 2 levels (got %d)", nl);
        return NAN;
    }
    for (int i = 0; i < nl; i++) {
        if (!isfinite(lv[i]) || (i > 0 && lv[i] < lv[i - 1])) {
            tempo__err(TEMPO_ERR_INVALID, "qdist_var: level %d (%g) is not finite or descends", i,
                       lv[i]);
            return NAN;
        }
    }
    if (lv[0] > -1.0 || lv[nl - 1] < 1.0) {
        tempo__err(TEMPO_ERR_INVALID, "qdist_var: the table [%g, %g] does not cover [-1, 1]", lv[0],
                   lv[nl - 1]);
        return NAN;
    }
    double var = 0.0;
    for (int j = 0; j < d->k; j++) {
        if (d->w[j] == 0.0) {
            continue;
        }
        fit_comp_t c;
        fit_comp(d, j, wsum, &c);
        fit_pt_t pu, pv;
        fit_point(-1.0, c.mu, c.s, &pu); /* lv[0] <= -1: integrate from the support's start */
        double acc = 0.0, al = (lv[0] - c.mu) / c.s;
        for (int i = 1; i < nl; i++) {
            double x = lv[i] < -1.0 ? -1.0 : lv[i] > 1.0 ? 1.0 : lv[i];
            double be = (lv[i] - c.mu) / c.s;
            fit_point(x, c.mu, c.s, &pv);
            acc += fit_c_cost(al, be, &pu, &pv);
            pu = pv;
            al = be;
        }
        var += c.wz * c.s * c.s * acc;
    }
    return var;
}

/* ---------------------------------------------------------------------------------------------- */
/* The folded model and the fitters' working state                                                */
/* ---------------------------------------------------------------------------------------------- */

/** g(r) = f(r) + f(-r) on [0, 1] as a mixture: each component and its mirror. */
typedef struct fit_model {
    int n;
    fit_comp_t *c; /* (n) owned */
} fit_model_t;

/** Positive half of a symmetric table and the points of its levels, cached: a level update
 *  evaluates the model only at its trial points. */
typedef struct fit_work {
    fit_model_t m;
    int s;           /* positive levels, the end level 1 included */
    int zero;        /* 1: 0 is a level; 0: the band [-x1, x1] straddles 0 */
    double *x;       /* (s + 1) x[0] = 0, x[1..s] ascending, x[s] = 1 */
    fit_pt_t *rows;  /* (s + 1, n) point of x[i] seen from component j at [i * n + j] */
    fit_pt_t *trial; /* (n) point of a trial level */
    double *cost;    /* (s) cost[i] of [x[i], x[i+1]]; cost[0] is the band without a zero level */
    double *best;    /* (s + 1) best levels so far */
    /* The Newton step: a trial table (x2, rows2, cost2, swapped in when accepted) and the
     * gradient, Hessian diagonal and off-diagonal, and step over the free levels 1 .. s-1. */
    double *x2, *cost2;
    fit_pt_t *rows2;
    double *gr, *hd, *ho, *pv, *step; /* (s) each, index i for level i */
} fit_work_t;

static void fit_work_free(fit_work_t *w)
{
    tempo__free(w->m.c);
    tempo__free(w->x);
    tempo__free(w->rows);
    tempo__free(w->trial);
    tempo__free(w->cost);
    tempo__free(w->best);
    tempo__free(w->x2);
    tempo__free(w->cost2);
    tempo__free(w->rows2);
    tempo__free(w->gr);
    tempo__free(w->hd);
    tempo__free(w->ho);
    tempo__free(w->pv);
    tempo__free(w->step);
    memset(w, 0, sizeof(*w));
}

static tempo_status_t fit_check_args(const tempo__qdist_t *d, int bits, int zero, const double *lv,
                                     double *wsum_p)
{
    TEMPO_CHECK(fit_check_dist(d, wsum_p));
    if (bits < 1 || bits > 8) {
        return tempo__err(TEMPO_ERR_INVALID, "qfit: bits=%d out of range 1..8", bits);
    }
    if (zero != 0 && zero != 1) {
        return tempo__err(TEMPO_ERR_INVALID, "qfit: zero=%d must be 0 or 1", zero);
    }
    if (zero && bits < 2) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "qfit: zero=1 needs bits >= 2 (2^bits - 1 levels; bits=1 leaves one)");
    }
    if (!lv) {
        return tempo__err(TEMPO_ERR_INVALID, "qfit: NULL level output");
    }
    return TEMPO_OK;
}

static tempo_status_t fit_work_init(fit_work_t *w, const tempo__qdist_t *d, double wsum, int bits,
                                    int zero)
{
    memset(w, 0, sizeof(*w));
    int n = 0;
    for (int j = 0; j < d->k; j++) {
        n += d->w[j] == 0.0 ? 0 : d->mu[j] == 0.0 ? 1 : 2;
    }
    w->s = zero ? (1 << (bits - 1)) - 1 : 1 << (bits - 1);
    w->zero = zero;
    w->m.n = n;
    w->m.c = tempo__calloc((size_t)n, sizeof(fit_comp_t), "qfit model");
    w->x = tempo__calloc((size_t)w->s + 1, sizeof(double), "qfit levels");
    w->rows = tempo__calloc(((size_t)w->s + 1) * (size_t)n, sizeof(fit_pt_t), "qfit points");
    w->trial = tempo__calloc((size_t)n, sizeof(fit_pt_t), "qfit trial point");
    w->cost = tempo__calloc((size_t)w->s, sizeof(double), "qfit interval costs");
    w->best = tempo__calloc((size_t)w->s + 1, sizeof(double), "qfit best levels");
    w->x2 = tempo__calloc((size_t)w->s + 1, sizeof(double), "qfit trial levels");
    w->cost2 = tempo__calloc((size_t)w->s, sizeof(double), "qfit trial costs");
    w->rows2 = tempo__calloc(((size_t)w->s + 1) * (size_t)n, sizeof(fit_pt_t), "qfit trial points");
    w->gr = tempo__calloc((size_t)w->s, sizeof(double), "qfit gradient");
    w->hd = tempo__calloc((size_t)w->s, sizeof(double), "qfit hessian");
    w->ho = tempo__calloc((size_t)w->s, sizeof(double), "qfit hessian");
    w->pv = tempo__calloc((size_t)w->s, sizeof(double), "qfit pivots");
    w->step = tempo__calloc((size_t)w->s, sizeof(double), "qfit newton step");
    if (!w->m.c || !w->x || !w->rows || !w->trial || !w->cost || !w->best || !w->x2 || !w->cost2 ||
        !w->rows2 || !w->gr || !w->hd || !w->ho || !w->pv || !w->step) {
        fit_work_free(w);
        return TEMPO_ERR_NOMEM;
    }
    int i = 0;
    for (int j = 0; j < d->k; j++) {
        if (d->w[j] == 0.0) {
            continue;
        }
        fit_comp_t c;
        fit_comp(d, j, wsum, &c);
        if (c.mu == 0.0) {
            c.wz *= 2.0; /* its own mirror */
            w->m.c[i++] = c;
        } else {
            w->m.c[i++] = c;
            c.mu = -c.mu;
            w->m.c[i++] = c;
        }
    }
    w->m.n = i;
    return TEMPO_OK;
}

static inline fit_pt_t *fit_row_of(fit_pt_t *rows, int n, int i)
{
    return rows + (size_t)i * (size_t)n;
}

static inline fit_pt_t *fit_row(const fit_work_t *w, int i)
{
    return fit_row_of(w->rows, w->m.n, i);
}

static void fit_eval(const fit_model_t *m, double x, fit_pt_t *row)
{
    for (int j = 0; j < m->n; j++) {
        fit_point(x, m->c[j].mu, m->c[j].s, &row[j]);
    }
}

/* Partial integrals of g between two cached points ra <= rb (levels a <= b). */

static double fit_mass(const fit_model_t *m, const fit_pt_t *ra, const fit_pt_t *rb)
{
    double acc = 0.0;
    for (int j = 0; j < m->n; j++) {
        acc += m->c[j].wz * fit_c_mass(&ra[j], &rb[j]);
    }
    return acc;
}

/* ∫_a^b (b - r) g */
static double fit_ehi(const fit_model_t *m, const fit_pt_t *ra, const fit_pt_t *rb)
{
    double acc = 0.0;
    for (int j = 0; j < m->n; j++) {
        acc += m->c[j].wz * m->c[j].s * fit_c_ehi(rb[j].t, &ra[j], &rb[j]);
    }
    return acc;
}

/* ∫_a^b (r - a) g */
static double fit_elo(const fit_model_t *m, const fit_pt_t *ra, const fit_pt_t *rb)
{
    double acc = 0.0;
    for (int j = 0; j < m->n; j++) {
        acc += m->c[j].wz * m->c[j].s * fit_c_elo(ra[j].t, &ra[j], &rb[j]);
    }
    return acc;
}

/* ∫_a^b (b - r)(r - a) g: the cost of one interval between adjacent levels. */
static double fit_icost(const fit_model_t *m, const fit_pt_t *ra, const fit_pt_t *rb)
{
    double acc = 0.0;
    for (int j = 0; j < m->n; j++) {
        double s = m->c[j].s;
        acc += m->c[j].wz * s * s * fit_c_cost(ra[j].t, rb[j].t, &ra[j], &rb[j]);
    }
    return acc;
}

/* ∫_0^l (l² - r²) g = ∫_{-l}^{l} (l - r)(r + l) f: the band straddling 0 (r0 the point 0, rl the
 * point l). */
static double fit_band(const fit_model_t *m, double l, const fit_pt_t *r0, const fit_pt_t *rl)
{
    double acc = 0.0;
    for (int j = 0; j < m->n; j++) {
        double s = m->c[j].s, al = (-l - m->c[j].mu) / s;
        acc += m->c[j].wz * s * s * fit_c_cost(al, rl[j].t, &r0[j], &rl[j]);
    }
    return acc;
}

/* g(x) */
static double fit_pdf(const fit_model_t *m, const fit_pt_t *r)
{
    double acc = 0.0;
    for (int j = 0; j < m->n; j++) {
        acc += m->c[j].wz * r[j].ph / m->c[j].s;
    }
    return acc;
}

/** Every interval's cost from the cached points. */
static void fit_costs(fit_work_t *w)
{
    const fit_model_t *m = &w->m;
    w->cost[0] = w->zero ? fit_icost(m, fit_row(w, 0), fit_row(w, 1))
                         : fit_band(m, w->x[1], fit_row(w, 0), fit_row(w, 1));
    for (int i = 1; i < w->s; i++) {
        w->cost[i] = fit_icost(m, fit_row(w, i), fit_row(w, i + 1));
    }
}

/** The objective of the current table: the cached costs, summed in a fixed order. */
static double fit_obj(const fit_work_t *w)
{
    double v = 0.0;
    for (int i = 0; i < w->s; i++) {
        v += w->cost[i];
    }
    return v;
}

/*
 * ∂V/∂x[i] for a free level 1 <= i < s (the integrands of the neighbouring intervals vanish at
 * r = x[i], so only their weights move):
 *     ∫_a^x (r - a) g - ∫_x^b (b - r) g               between a = x[i-1] and b = x[i+1]
 *     2x G(0, x) - ∫_x^b (b - r) g                    the smallest level without a zero level,
 * where the band [-x, x] costs ∫_0^x (x² - r²) g, whose derivative is 2x G(0, x).
 */
static double fit_grad(const fit_work_t *w, int i)
{
    const fit_model_t *m = &w->m;
    double right = fit_ehi(m, fit_row(w, i), fit_row(w, i + 1));
    if (!w->zero && i == 1) {
        return 2.0 * w->x[1] * fit_mass(m, fit_row(w, 0), fit_row(w, 1)) - right;
    }
    return fit_elo(m, fit_row(w, i - 1), fit_row(w, i)) - right;
}

/* ---------------------------------------------------------------------------------------------- */
/* One-dimensional solves                                                                         */
/* ---------------------------------------------------------------------------------------------- */

enum {
    FIT_MASS = 0, /* G(a, x) - target = 0: G increasing, G' = g(x) */
    FIT_BAND = 1  /* h(x) = 2x G(0, x) - ∫_x^b (b - r) g = 0 (the no-zero l1 update, see below) */
};

/*
 * Root of an increasing function on [lo, hi] that is <= 0 at lo and >= 0 at hi: Newton from x,
 * with bisection whenever a step leaves the current bracket. Stops when a step is below FIT_X_TOL
 * relative; the returned x has its points in row. ra is the point of lo (FIT_MASS: the lower end
 * of the mass integral; FIT_BAND: the point 0), rb the point of hi (FIT_BAND only).
 */
static double fit_solve(const fit_work_t *w, int mode, const fit_pt_t *ra, const fit_pt_t *rb,
                        double lo, double hi, double target, double x, fit_pt_t *row)
{
    const fit_model_t *m = &w->m;
    double b = hi;
    if (!(x > lo && x < hi)) {
        x = 0.5 * (lo + hi);
    }
    for (int it = 0; it < FIT_SOLVE_ITERS; it++) {
        double f, df;
        fit_eval(m, x, row);
        if (mode == FIT_MASS) {
            f = fit_mass(m, ra, row) - target;
            df = fit_pdf(m, row);
        } else {
            double g0 = fit_mass(m, ra, row);
            f = 2.0 * x * g0 - fit_ehi(m, row, rb);
            df = 2.0 * g0 + (x + b) * fit_pdf(m, row);
        }
        if (f < 0.0) {
            lo = x;
        } else if (f > 0.0) {
            hi = x;
        } else {
            break;
        }
        double xn = x - f / df;
        if (!(df > 0.0) || !(xn > lo && xn < hi)) {
            xn = 0.5 * (lo + hi);
        }
        if (fabs(xn - x) <= FIT_X_TOL * x || hi - lo <= FIT_X_TOL * hi) {
            break;
        }
        x = xn;
    }
    return x;
}

/* ---------------------------------------------------------------------------------------------- */
/* ALQ                                                                                            */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Update level i (1 <= i < s) to the exact minimizer of the objective in x[i] alone.
 *
 * Interior level between a < x < b: only C(a, x) + C(x, b) depends on x, with C(a, b) =
 * ∫_a^b (b - r)(r - a) g. Its derivative is ∫_a^x (r - a) g - ∫_x^b (b - r) g (the integrands
 * vanish at r = x) and its second derivative (b - a) g(x) >= 0, so it is convex and the stationary
 * point is the minimum: G(a, x) = ∫_a^b (b - r) g / (b - a), the same as the paper's
 * x = G⁻¹(G(b) - (1/(b - a)) ∫_a^b (r - a) dG) since ∫ (b - r) = (b - a) G(a, b) - ∫ (r - a);
 * solved for the mass from a so that tail levels keep their precision.
 *
 * Smallest level without a zero level: its left neighbour is -x1 and the band costs
 * B(x1) = ∫_0^x1 (x1² - r²) g, with B' = 2 x1 G(0, x1). With C(x1, b) as above, the condition is
 * h(x1) = 2 x1 G(0, x1) - ∫_x1^b (b - r) g = 0, and h' = 2 G(0, x1) + (x1 + b) g(x1) >= 0: convex
 * again, h(0) <= 0 <= h(b), and the root is the exact one-dimensional minimizer.
 */
static void fit_update(fit_work_t *w, int i)
{
    const fit_model_t *m = &w->m;
    fit_pt_t *ra = fit_row(w, i - 1), *rx = fit_row(w, i), *rb = fit_row(w, i + 1);
    double a = w->x[i - 1], b = w->x[i + 1], x = w->x[i], xn, left, right;

    if (!w->zero && i == 1) {
        xn = fit_solve(w, FIT_BAND, ra, rb, 0.0, b, 0.0, x, w->trial);
        left = fit_band(m, xn, ra, w->trial);
    } else {
        double mass = fit_mass(m, ra, rb), target = fit_ehi(m, ra, rb) / (b - a);
        if (!(mass > 0.0) || !(target > 0.0)) {
            return; /* no mass between the neighbours: the objective is flat in x; leave it */
        }
        xn = fit_solve(w, FIT_MASS, ra, rb, a, b, target, x, w->trial);
        left = fit_icost(m, ra, w->trial);
    }
    right = fit_icost(m, w->trial, rb);
    /* Strictly inside the neighbours, and no worse: the subproblem is convex, so this only
     * rejects rounding noise (and keeps the per-epoch objective non-increasing). */
    if (xn > a && xn < b && left + right <= w->cost[i - 1] + w->cost[i]) {
        w->x[i] = xn;
        w->cost[i - 1] = left;
        w->cost[i] = right;
        memcpy(rx, w->trial, (size_t)m->n * sizeof(fit_pt_t));
    }
}

enum { FIT_START_QUANTILE = 0, FIT_START_UNIFORM = 1, FIT_START_EXP = 2, FIT_NSTARTS = 3 };

/** Set the levels of a start and their points; 0 if the start is degenerate (not strictly
 *  increasing, e.g. quantiles of a model with a gap). */
static int fit_start(fit_work_t *w, int start)
{
    const fit_model_t *m = &w->m;
    int s = w->s;
    double *x = w->x;
    x[0] = 0.0;
    x[s] = 1.0;
    fit_eval(m, 0.0, fit_row(w, 0));
    fit_eval(m, 1.0, fit_row(w, s));
    for (int i = 1; i < s; i++) {
        switch (start) {
        case FIT_START_QUANTILE: {
            /* The positive half of the signed quantiles at k/(nl - 1) of the reference code:
             * folded cdf (2i - 1)/(2s - 1) without a zero level, i/s with one. */
            double total = fit_mass(m, fit_row(w, 0), fit_row(w, s));
            double frac = w->zero ? (double)i / s : (double)(2 * i - 1) / (2 * s - 1);
            x[i] = fit_solve(w, FIT_MASS, fit_row(w, 0), NULL, x[i - 1], 1.0, frac * total, -1.0,
                             w->trial);
            break;
        }
        case FIT_START_UNIFORM:
            x[i] = w->zero ? (double)i / s : (double)(2 * i - 1) / (2 * s - 1);
            break;
        default:
            x[i] = ldexp(1.0, i - s); /* p = 0.5: 2^-(s-i) */
            break;
        }
    }
    for (int i = 1; i <= s; i++) {
        if (!(x[i] > x[i - 1])) {
            return 0;
        }
    }
    for (int i = 1; i < s; i++) {
        fit_eval(m, x[i], fit_row(w, i));
    }
    fit_costs(w);
    return 1;
}

static void fit_swap_trial(fit_work_t *w)
{
    double *x = w->x, *c = w->cost;
    fit_pt_t *r = w->rows;
    w->x = w->x2;
    w->x2 = x;
    w->cost = w->cost2;
    w->cost2 = c;
    w->rows = w->rows2;
    w->rows2 = r;
}

/** Solve (H + lambda I) d = -gr for the tridiagonal H (Thomas); 0 if a pivot is not positive,
 *  i.e. H + lambda I is not positive definite. */
static int fit_thomas(fit_work_t *w, double lambda)
{
    int s = w->s;
    double *gr = w->gr, *hd = w->hd, *ho = w->ho, *pv = w->pv, *d = w->step;
    for (int i = 1; i < s; i++) {
        pv[i] = hd[i] + lambda;
        d[i] = -gr[i];
        if (i > 1) {
            double f = ho[i - 1] / pv[i - 1];
            pv[i] -= f * ho[i - 1];
            d[i] -= f * d[i - 1];
        }
        if (!(pv[i] > 0.0) || !isfinite(pv[i])) {
            return 0;
        }
    }
    for (int i = s - 1; i >= 1; i--) {
        d[i] = (d[i] - (i + 1 < s ? ho[i] * d[i + 1] : 0.0)) / pv[i];
    }
    return 1;
}

/*
 * One Newton step on all free levels together. The sweep alone converges like Gauss-Seidel on a
 * chain (each level is coupled to its neighbours only), with a rate 1 - O(1/s²) per sweep: at
 * 7-8 bits, 200 sweeps leave the objective 35 % to 2x above its minimum. The Hessian is
 * tridiagonal, with the curvatures of the update above on the diagonal and
 *     ∂²V/∂x[i]∂x[i+1] = -G(x[i], x[i+1])
 * off it, so the step costs one Thomas solve. Far from the minimum (levels crowded where the
 * density falls steeply) H can be indefinite; then the smallest shift H + λI (λ growing tenfold
 * from 1e-6 of the largest curvature) that is positive definite gives a descent direction
 * (Levenberg). The step is halved until the levels stay strictly increasing inside (0, 1) and the
 * objective does not increase, and dropped otherwise.
 */
static void fit_newton(fit_work_t *w)
{
    const fit_model_t *m = &w->m;
    int s = w->s;
    double *gr = w->gr, *hd = w->hd, *ho = w->ho, *d = w->step;
    for (int i = 1; i < s; i++) {
        double g = fit_pdf(m, fit_row(w, i));
        gr[i] = fit_grad(w, i);
        if (!w->zero && i == 1) {
            hd[i] = 2.0 * fit_mass(m, fit_row(w, 0), fit_row(w, 1)) + (w->x[1] + w->x[2]) * g;
        } else {
            hd[i] = (w->x[i + 1] - w->x[i - 1]) * g;
        }
        ho[i] = i + 1 < s ? -fit_mass(m, fit_row(w, i), fit_row(w, i + 1)) : 0.0;
    }
    if (!fit_thomas(w, 0.0)) {
        double hmax = 0.0, lambda;
        for (int i = 1; i < s; i++) {
            hmax = fabs(hd[i]) > hmax ? fabs(hd[i]) : hmax;
        }
        int k = 0;
        for (lambda = 1e-6 * hmax; k < 16 && !fit_thomas(w, lambda); k++) {
            lambda *= 10.0;
        }
        if (k == 16 || !(hmax > 0.0)) {
            return; /* leave it to the sweeps */
        }
    }
    double v = fit_obj(w), t = 1.0;
    for (int h = 0; h < 20; h++, t *= 0.5) {
        int ok = 1;
        w->x2[0] = 0.0;
        w->x2[s] = 1.0;
        for (int i = 1; i < s && ok; i++) {
            w->x2[i] = w->x[i] + t * d[i];
            ok = w->x2[i] > w->x2[i - 1] && isfinite(w->x2[i]);
        }
        if (!ok || !(w->x2[s - 1] < 1.0)) {
            continue;
        }
        fit_swap_trial(w); /* evaluate the trial in place; swap back if rejected */
        memcpy(fit_row(w, 0), fit_row_of(w->rows2, m->n, 0), (size_t)m->n * sizeof(fit_pt_t));
        memcpy(fit_row(w, s), fit_row_of(w->rows2, m->n, s), (size_t)m->n * sizeof(fit_pt_t));
        for (int i = 1; i < s; i++) {
            fit_eval(m, w->x[i], fit_row(w, i));
        }
        fit_costs(w);
        if (fit_obj(w) <= v) {
            return;
        }
        fit_swap_trial(w);
    }
}

/** Descent from the current levels: epochs of one sweep of closed-form updates over
 *  i = 1 .. s-1 and one Newton step, until an epoch improves the objective by less than
 *  FIT_REL_TOL relative, or max_epochs. obj (max_epochs + 1, may be NULL) receives the objective
 *  before the first epoch and after each. Returns the epochs run. */
static int fit_descend(fit_work_t *w, int max_epochs, double *obj)
{
    double v = fit_obj(w);
    int e = 0;
    if (obj) {
        obj[0] = v;
    }
    while (w->s > 1 && e < max_epochs) {
        for (int i = 1; i < w->s; i++) {
            fit_update(w, i);
        }
        fit_newton(w);
        double vn = fit_obj(w);
        if (obj) {
            obj[e + 1] = vn;
        }
        e++;
        int done = !(v - vn > FIT_REL_TOL * v);
        v = vn;
        if (done) {
            break;
        }
    }
    return e;
}

/* The signed table of the positive half x[1..s]. */
static void fit_table(const fit_work_t *w, const double *x, double *lv)
{
    int s = w->s, off = w->zero ? 1 : 0;
    for (int i = 0; i < s; i++) {
        lv[s - 1 - i] = -x[i + 1];
        lv[s + off + i] = x[i + 1];
    }
    if (w->zero) {
        lv[s] = 0.0;
    }
}

tempo_status_t tempo__qfit_alq(const tempo__qdist_t *d, int bits, int zero, double *lv,
                               double *var_p)
{
    double wsum = 0.0, tab[256], best = INFINITY;
    fit_work_t w;
    TEMPO_CHECK(fit_check_args(d, bits, zero, lv, &wsum));
    TEMPO_CHECK(fit_work_init(&w, d, wsum, bits, zero));
    for (int start = 0; start < FIT_NSTARTS; start++) {
        if (!fit_start(&w, start)) {
            continue;
        }
        fit_descend(&w, FIT_EPOCHS, NULL);
        double v = fit_obj(&w);
        if (v < best) { /* strict: ties keep the earlier start */
            best = v;
            memcpy(w.best, w.x, ((size_t)w.s + 1) * sizeof(double));
        }
    }
    if (!(best < INFINITY)) { /* the uniform start is never degenerate: a NaN got in */
        fit_work_free(&w);
        return tempo__err(TEMPO_ERR_INTERNAL, "qfit: ALQ found no finite objective");
    }
    int nl = tempo__qnlevels(bits, zero);
    fit_table(&w, w.best, tab);
    fit_work_free(&w);
    double var = tempo__qdist_var(d, tab, nl);
    memcpy(lv, tab, (size_t)nl * sizeof(double));
    if (var_p) {
        *var_p = var;
    }
    return TEMPO_OK;
}

tempo_status_t tempo__qfit_alq_run(const tempo__qdist_t *d, int bits, int zero, int start,
                                   int max_epochs, double *obj, int *nep_p, double *lv)
{
    double wsum = 0.0, tab[256];
    fit_work_t w;
    TEMPO_CHECK(fit_check_args(d, bits, zero, lv, &wsum));
    if (start < 0 || start >= FIT_NSTARTS || max_epochs < 0 || !obj) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "qfit_alq_run: needs start 0..2 (got %d), max_epochs >= 0 (got %d) and "
                          "an objective array",
                          start, max_epochs);
    }
    TEMPO_CHECK(fit_work_init(&w, d, wsum, bits, zero));
    if (!fit_start(&w, start)) {
        fit_work_free(&w);
        return tempo__err(TEMPO_ERR_INVALID, "qfit_alq_run: start %d is degenerate for this model",
                          start);
    }
    int nep = fit_descend(&w, max_epochs, obj);
    fit_table(&w, w.x, tab);
    memcpy(lv, tab, (size_t)tempo__qnlevels(bits, zero) * sizeof(double));
    if (nep_p) {
        *nep_p = nep;
    }
    fit_work_free(&w);
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* AMQ                                                                                            */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Objective and derivative at multiplier p: x[i] = p^(s-i). The derivative is the chain rule over
 * the levels, dV/dp = Σ_i ∂V/∂x[i] · (s-i) p^(s-i-1) (fit_grad): the exact derivative of the full
 * objective, band included (the reference code selects between starts by the positive levels'
 * variance alone; we do not).
 */
static double fit_amq_eval(fit_work_t *w, double p, double *g_p)
{
    const fit_model_t *m = &w->m;
    int s = w->s;
    for (int i = 1; i < s; i++) {
        w->x[i] = pow(p, s - i);
        fit_eval(m, w->x[i], fit_row(w, i));
    }
    fit_costs(w);
    double v = fit_obj(w), g = 0.0;
    for (int i = 1; i < s; i++) {
        g += fit_grad(w, i) * (s - i) * pow(p, s - i - 1);
    }
    *g_p = g;
    return v;
}

/*
 * Gradient descent on p in [lo, hi] from p: the step is -eta·V'(p) with eta from the last two
 * gradients (Barzilai-Borwein: for a quadratic it is the Newton step), halved until the step
 * lowers V, or keeps V within rounding while shrinking |V'| (near the minimum V is flat to within
 * its rounding, and the derivative still points to the minimizer). Stops when a step is below
 * 1e-12 or none is accepted.
 */
static double fit_amq_descend(fit_work_t *w, double p, double lo, double hi, double *v_p)
{
    double g, v = fit_amq_eval(w, p, &g);
    double eta = g != 0.0 ? 0.01 / fabs(g) : 0.0; /* first step moves p by 0.01 */
    for (int it = 0; it < FIT_AMQ_ITERS && g != 0.0; it++) {
        double pn = p, vn = v, gn = g;
        int ok = 0;
        for (int h = 0; h < 60 && !ok; h++, eta *= 0.5) {
            pn = p - eta * g;
            pn = pn < lo ? lo : pn > hi ? hi : pn;
            if (pn == p) {
                break;
            }
            vn = fit_amq_eval(w, pn, &gn);
            ok = vn < v || (vn <= v + 1e-13 * fabs(v) && fabs(gn) < fabs(g));
            if (ok) {
                break;
            }
        }
        if (!ok) {
            break;
        }
        double dp = pn - p, dg = gn - g;
        eta = dp * dg > 0.0 ? dp / dg : 2.0 * eta;
        p = pn;
        v = vn;
        g = gn;
        if (fabs(dp) <= 1e-12) {
            break;
        }
    }
    *v_p = v;
    return p;
}

tempo_status_t tempo__qfit_amq(const tempo__qdist_t *d, int bits, int zero, double *p_p, double *lv,
                               double *var_p)
{
    static const double starts[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.8, 0.9}; /* the reference's */
    double wsum = 0.0, tab[256], best_p = FIT_AMQ_P_NONE;
    fit_work_t w;
    TEMPO_CHECK(fit_check_args(d, bits, zero, lv, &wsum));
    TEMPO_CHECK(fit_work_init(&w, d, wsum, bits, zero));
    int s = w.s;
    w.x[0] = 0.0;
    w.x[s] = 1.0;
    fit_eval(&w.m, 0.0, fit_row(&w, 0));
    fit_eval(&w.m, 1.0, fit_row(&w, s));
    if (s > 1) {
        /* Keep the smallest level p^(s-1) >= FIT_AMQ_LEVEL_MIN: at 7-8 bits small p would put
         * levels below what fp32 tables (and any real coordinate) resolve. */
        double lo = pow(FIT_AMQ_LEVEL_MIN, 1.0 / (s - 1)), hi = FIT_AMQ_PMAX, g, v;
        lo = lo > FIT_AMQ_PMIN ? lo : FIT_AMQ_PMIN;
        double scan_p = lo, scan_v = INFINITY, best_v = INFINITY;
        for (int k = 0; k < FIT_AMQ_SCAN; k++) {
            double p = lo + (hi - lo) * k / (FIT_AMQ_SCAN - 1);
            v = fit_amq_eval(&w, p, &g);
            if (v < scan_v) {
                scan_v = v;
                scan_p = p;
            }
        }
        for (size_t k = 0; k <= TEMPO_ARRAY_SIZE(starts); k++) {
            double p0 = k < TEMPO_ARRAY_SIZE(starts) ? starts[k] : scan_p;
            p0 = p0 < lo ? lo : p0 > hi ? hi : p0;
            double p = fit_amq_descend(&w, p0, lo, hi, &v);
            if (v < best_v) {
                best_v = v;
                best_p = p;
            }
        }
        for (int i = 1; i < s; i++) {
            w.x[i] = pow(best_p, s - i);
        }
    }
    int nl = tempo__qnlevels(bits, zero);
    fit_table(&w, w.x, tab);
    fit_work_free(&w);
    double var = tempo__qdist_var(d, tab, nl);
    memcpy(lv, tab, (size_t)nl * sizeof(double));
    if (p_p) {
        *p_p = best_p;
    }
    if (var_p) {
        *var_p = var;
    }
    return TEMPO_OK;
}
