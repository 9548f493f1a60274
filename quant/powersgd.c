/*
 * powersgd.c — the matrix kernels of PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019): the
 * square-ish matrix view of a flat tensor, P = M Q, Q = M^T P, Gram-Schmidt on the columns of P,
 * and the rank-r approximation P Q^T.
 *
 * What it is not: the PowerSGD step itself (the two all-reduces, the warm-started Q, the error
 * feedback against the aggregated approximation live in qcoll.c), nor a BLAS. No threads, no heap
 * memory; the work buffers are small stack tiles (at most 24 KiB).
 *
 * Layout: every matrix is row-major fp32: M (rows x cols), P (rows x r), Q (cols x r). The kernels
 * see a full rows x cols M; a flat tensor of count < rows * cols elements is zero-padded at the
 * end by the caller.
 *
 * Orthonormalization is Gram-Schmidt with a second projection pass per column, in double (see
 * there); a column with norm below 1e-30 after projection becomes zeros.
 *
 * Invariants: results are a deterministic function of the inputs (fixed loop order, fixed blocking,
 * no threads), so every rank running the same build that feeds the same P and Q gets bit-identical
 * outputs (a build that contracts a * b + c into FMA rounds differently, so mixed builds agree only
 * to rounding). Long sums run
 * in fp32 over short blocks (vectorizable) whose partial sums are added in double: 256 columns per
 * block in M Q, 64 rows per block in M^T P. M is streamed once per product for r <= 32.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "quant/quant.h"

#include <math.h>

#define PS_JBLOCK 256 /* M Q: columns summed in fp32 before the double flush */
#define PS_IBLOCK 64  /* M^T P: rows summed in fp32 before the double flush */
#define PS_TILE 2048  /* fp32 accumulators of a column tile (8 KiB) in M^T P and P Q^T */
#define PS_RCHUNK 32  /* M^T P: columns of P per pass over M (more re-stream M) */
#define PS_NORM_MIN 1e-30
#define PS_ORTH_CHUNK 64 /* earlier columns projected out per sweep in orthonormalize */

void tempo__psgd_shape(size_t count, size_t *rows_p, size_t *cols_p)
{
    /* cols = ceil(sqrt(count)), exactly (the double square root can be off by one near squares) */
    size_t c = (size_t)sqrt((double)count);
    while (c * c < count) {
        c++;
    }
    while (c > 1 && (c - 1) * (c - 1) >= count) {
        c--;
    }
    if (c == 0) {
        c = 1; /* count 0: a 0 x 1 matrix */
    }
    *cols_p = c;
    *rows_p = (count + c - 1) / c; /* rows <= cols and rows * cols - count < cols */
}

/* Four fp32 lanes (GCC/Clang vector extension: SSE on x86-64, scalar code where there is no
 * SIMD). Every lane is an independent sum, so the results do not depend on the vector width. */
typedef float ps_v4 __attribute__((vector_size(16)));

static inline ps_v4 ps_load4(const float *x)
{
    ps_v4 v;
    memcpy(&v, x, sizeof(v));
    return v;
}

static inline ps_v4 ps_bcast(float x)
{
    ps_v4 v = {x, x, x, x};
    return v;
}

/*
 * One row of M times columns l0 .. l0+W-1 of Q over the columns [j0, j1) of M, into 16 fp32 lanes
 * acc[0..3] (four independent chains hide the add latency) and tail[0..W) for the last columns.
 * Lane layout by W: 8: acc[2s + h] holds l = 4h .. 4h+3 of columns j+s (s = 0, 1); 4: acc[s] holds
 * l = 0..3 of column j+s; 2: acc[s] holds (l0, l1) of columns j+2s and j+2s+1; 1: acc[s] holds
 * columns j+4s .. j+4s+3. Inlined with a constant W, each case is a short fixed kernel.
 */
static inline __attribute__((always_inline)) void ps_row_block(const float *mrow, size_t j0,
                                                               size_t j1, const float *q, size_t r,
                                                               size_t l0, const int W, ps_v4 *acc,
                                                               float *tail)
{
    const size_t step = (size_t)(16 / W); /* columns of M per iteration */
    size_t j = j0;
    for (; j + step <= j1; j += step) {
        if (W == 8) {
            for (size_t s = 0; s < 2; s++) {
                const float *qr = q + (j + s) * r + l0;
                ps_v4 mv = ps_bcast(mrow[j + s]);
                acc[2 * s] += mv * ps_load4(qr);
                acc[2 * s + 1] += mv * ps_load4(qr + 4);
            }
        } else if (W == 4) {
            for (size_t s = 0; s < 4; s++) {
                acc[s] += ps_bcast(mrow[j + s]) * ps_load4(q + (j + s) * r + l0);
            }
        } else if (W == 2) {
            for (size_t s = 0; s < 4; s++) {
                const float *qa = q + (j + 2 * s) * r + l0, *qb = qa + r;
                const float ma = mrow[j + 2 * s], mb = mrow[j + 2 * s + 1];
                ps_v4 mv = {ma, ma, mb, mb}, qv = {qa[0], qa[1], qb[0], qb[1]};
                acc[s] += mv * qv;
            }
        } else if (r == 1) {
            for (size_t s = 0; s < 4; s++) {
                acc[s] += ps_load4(mrow + j + 4 * s) * ps_load4(q + j + 4 * s);
            }
        } else {
            for (size_t s = 0; s < 4; s++) {
                const float *qc = q + (j + 4 * s) * r + l0;
                ps_v4 qv = {qc[0], qc[r], qc[2 * r], qc[3 * r]};
                acc[s] += ps_load4(mrow + j + 4 * s) * qv;
            }
        }
    }
    for (; j < j1; j++) {
        const float mv = mrow[j];
        const float *qr = q + j * r + l0;
        for (int l = 0; l < W; l++) {
            tail[l] += mv * qr[l];
        }
    }
}

/* d[0..W) += the lanes of acc and tail that belong to each column of Q, in a fixed order. */
static inline __attribute__((always_inline)) void ps_flush(const ps_v4 *acc, const float *tail,
                                                           const int W, double *d)
{
    for (int l = 0; l < W; l++) {
        double t = 0.0;
        if (W == 8) {
            t = (double)acc[l / 4][l % 4] + (double)acc[2 + l / 4][l % 4];
        } else if (W == 4) {
            t = ((double)acc[0][l] + acc[1][l]) + ((double)acc[2][l] + acc[3][l]);
        } else {
            for (int s = 0; s < 4; s++) {
                if (W == 2) {
                    t += (double)acc[s][l] + acc[s][2 + l];
                } else {
                    t += ((double)acc[s][0] + acc[s][1]) + ((double)acc[s][2] + acc[s][3]);
                }
            }
        }
        d[l] += t + tail[l];
    }
}

void tempo__psgd_mul_p(const float *m, size_t rows, size_t cols, const float *q, int r, float *p)
{
    const size_t R = (size_t)r;
    for (size_t i = 0; i < rows; i++) {
        const float *mrow = m + i * cols;
        /* Q's columns in chunks of 8, 4, 2, 1: the row is re-read from cache for each chunk */
        for (size_t l0 = 0; l0 < R;) {
            size_t rem = R - l0;
            const int W = rem >= 8 ? 8 : rem >= 4 ? 4 : rem >= 2 ? 2 : 1;
            double d[8] = {0};
            for (size_t j0 = 0; j0 < cols; j0 += PS_JBLOCK) {
                size_t j1 = TEMPO_MIN(cols, j0 + PS_JBLOCK);
                ps_v4 acc[4] = {{0}};
                float tail[8] = {0};
                switch (W) {
                case 8:
                    ps_row_block(mrow, j0, j1, q, R, l0, 8, acc, tail);
                    ps_flush(acc, tail, 8, d);
                    break;
                case 4:
                    ps_row_block(mrow, j0, j1, q, R, l0, 4, acc, tail);
                    ps_flush(acc, tail, 4, d);
                    break;
                case 2:
                    ps_row_block(mrow, j0, j1, q, R, l0, 2, acc, tail);
                    ps_flush(acc, tail, 2, d);
                    break;
                default:
                    ps_row_block(mrow, j0, j1, q, R, l0, 1, acc, tail);
                    ps_flush(acc, tail, 1, d);
                    break;
                }
            }
            for (int l = 0; l < W; l++) {
                p[i * R + l0 + (size_t)l] = (float)d[l];
            }
            l0 += (size_t)W;
        }
    }
}

void tempo__psgd_mul_q(const float *m, size_t rows, size_t cols, const float *p, int r, float *q)
{
    const size_t R = (size_t)r;
    /* Q's rows are sums over all of M's rows: M is walked in column tiles whose accumulators,
     * kept transposed (acc[l][j]) so the inner loop is a contiguous axpy, stay in L1 */
    float acc[PS_TILE];
    double dacc[PS_TILE];
    for (size_t l0 = 0; l0 < R; l0 += PS_RCHUNK) {
        size_t w = TEMPO_MIN((size_t)PS_RCHUNK, R - l0);
        size_t jt_max = PS_TILE / w; /* >= 64 columns: 256-byte runs of each row at least */
        for (size_t j0 = 0; j0 < cols; j0 += jt_max) {
            size_t jt = TEMPO_MIN(jt_max, cols - j0);
            memset(dacc, 0, w * jt * sizeof(*dacc));
            for (size_t i0 = 0; i0 < rows; i0 += PS_IBLOCK) {
                size_t i1 = TEMPO_MIN(rows, i0 + PS_IBLOCK);
                memset(acc, 0, w * jt * sizeof(*acc));
                size_t i = i0;
                /* four rows per update: a quarter of the loads and stores of the accumulators */
                for (; i + 4 <= i1; i += 4) {
                    const float *m0 = m + i * cols + j0, *m1 = m0 + cols, *m2 = m1 + cols,
                                *m3 = m2 + cols;
                    const float *prow = p + i * R + l0;
                    for (size_t l = 0; l < w; l++) {
                        const float p0 = prow[l], p1 = prow[R + l], p2 = prow[2 * R + l],
                                    p3 = prow[3 * R + l];
                        float *a = acc + l * jt;
                        for (size_t j = 0; j < jt; j++) {
                            a[j] += m0[j] * p0 + m1[j] * p1 + m2[j] * p2 + m3[j] * p3;
                        }
                    }
                }
                for (; i < i1; i++) {
                    const float *mseg = m + i * cols + j0;
                    const float *prow = p + i * R + l0;
                    for (size_t l = 0; l < w; l++) {
                        const float pl = prow[l];
                        float *a = acc + l * jt;
                        for (size_t j = 0; j < jt; j++) {
                            a[j] += mseg[j] * pl;
                        }
                    }
                }
                for (size_t t = 0; t < w * jt; t++) {
                    dacc[t] += acc[t];
                }
            }
            for (size_t j = 0; j < jt; j++) {
                for (size_t l = 0; l < w; l++) {
                    q[(j0 + j) * R + l0 + l] = (float)dacc[l * jt + j];
                }
            }
        }
    }
}

void tempo__psgd_orthonormalize(float *p, size_t rows, int r)
{
    const size_t R = (size_t)r;
    /* Gram-Schmidt with reorthogonalization: two passes per column, each projecting out all the
     * earlier columns at once from dot products taken in double, the difference formed in double
     * and rounded once per pass. One rounding per pass keeps the error relative to what is left
     * of the column, not to what it was: a column nearly in the span of the earlier ones (P of a
     * tensor of rank below r, or a random Q nearly orthogonal to M's rows) would otherwise come
     * out as mostly rounding error. The second pass makes the remainder orthogonal to working
     * precision ("twice is enough": Giraud, Langou, Rozloznik 2005), so P^T P = I holds and
     * P P^T M loses nothing. Columns go in chunks of PS_ORTH_CHUNK dots (stack). */
    for (size_t l = 0; l < R; l++) {
        for (int pass = 0; pass < 2; pass++) {
            for (size_t c0 = 0; c0 < l; c0 += PS_ORTH_CHUNK) {
                size_t nc = TEMPO_MIN((size_t)PS_ORTH_CHUNK, l - c0);
                double d[PS_ORTH_CHUNK] = {0};
                for (size_t i = 0; i < rows; i++) {
                    const float *row = p + i * R + c0;
                    const double v = p[i * R + l];
                    for (size_t c = 0; c < nc; c++) {
                        d[c] += (double)row[c] * v;
                    }
                }
                for (size_t i = 0; i < rows; i++) {
                    const float *row = p + i * R + c0;
                    double v = p[i * R + l];
                    for (size_t c = 0; c < nc; c++) {
                        v -= d[c] * (double)row[c];
                    }
                    p[i * R + l] = (float)v;
                }
            }
        }
        double nn = 0.0;
        for (size_t i = 0; i < rows; i++) {
            nn += (double)p[i * R + l] * (double)p[i * R + l];
        }
        double norm = sqrt(nn);
        if (norm < PS_NORM_MIN) {
            /* nothing left of this column: zero it (every rank does the same), never divide */
            for (size_t i = 0; i < rows; i++) {
                p[i * R + l] = 0.0f;
            }
            continue;
        }
        double inv = 1.0 / norm;
        for (size_t i = 0; i < rows; i++) {
            p[i * R + l] = (float)((double)p[i * R + l] * inv);
        }
    }
}

void tempo__psgd_approx(const float *p, const float *q, size_t rows, size_t cols, int r, float *out)
{
    const size_t R = (size_t)r;
    if (R == 0) {
        for (size_t i = 0; i < rows; i++) {
            memset(out + i * cols, 0, cols * sizeof(float));
        }
        return;
    }
    /* out[i][j] = sum over l ascending of p[i][l] q[j][l], in fp32. Q is transposed tile by tile
     * into qt[l][j] so the inner loop is a contiguous axpy over a row segment of out. */
    float qt[PS_TILE];
    size_t jt_max = TEMPO_MAX((size_t)1, PS_TILE / R);
    if (R > PS_TILE) {
        for (size_t i = 0; i < rows; i++) {
            for (size_t j = 0; j < cols; j++) {
                float s = 0.0f;
                for (size_t l = 0; l < R; l++) {
                    s += p[i * R + l] * q[j * R + l];
                }
                out[i * cols + j] = s;
            }
        }
        return;
    }
    for (size_t j0 = 0; j0 < cols; j0 += jt_max) {
        size_t jt = TEMPO_MIN(jt_max, cols - j0);
        for (size_t j = 0; j < jt; j++) {
            for (size_t l = 0; l < R; l++) {
                qt[l * jt + j] = q[(j0 + j) * R + l];
            }
        }
        for (size_t i = 0; i < rows; i++) {
            const float *prow = p + i * R;
            float *o = out + i * cols + j0;
            /* up to four terms per pass over the row segment; C evaluates a + b + c left to
             * right, so the sum is the plain sequential one over l whatever the grouping */
            for (size_t l = 0; l < R; l += 4) {
                const float *t0 = qt + l * jt, *t1 = t0 + jt, *t2 = t1 + jt, *t3 = t2 + jt;
                const float a0 = prow[l];
                switch (TEMPO_MIN(R - l, (size_t)4) + (l == 0 ? 4 : 0)) {
                case 8: {
                    const float a1 = prow[1], a2 = prow[2], a3 = prow[3];
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = a0 * t0[j] + a1 * t1[j] + a2 * t2[j] + a3 * t3[j];
                    }
                    break;
                }
                case 7: {
                    const float a1 = prow[1], a2 = prow[2];
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = a0 * t0[j] + a1 * t1[j] + a2 * t2[j];
                    }
                    break;
                }
                case 6: {
                    const float a1 = prow[1];
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = a0 * t0[j] + a1 * t1[j];
                    }
                    break;
                }
                case 5:
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = a0 * t0[j];
                    }
                    break;
                case 4: {
                    const float a1 = prow[l + 1], a2 = prow[l + 2], a3 = prow[l + 3];
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = o[j] + a0 * t0[j] + a1 * t1[j] + a2 * t2[j] + a3 * t3[j];
                    }
                    break;
                }
                case 3: {
                    const float a1 = prow[l + 1], a2 = prow[l + 2];
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = o[j] + a0 * t0[j] + a1 * t1[j] + a2 * t2[j];
                    }
                    break;
                }
                case 2: {
                    const float a1 = prow[l + 1];
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = o[j] + a0 * t0[j] + a1 * t1[j];
                    }
                    break;
                }
                default:
                    for (size_t j = 0; j < jt; j++) {
                        o[j] = o[j] + a0 * t0[j];
                    }
                    break;
                }
            }
        }
    }
}
