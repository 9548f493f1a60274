/*
 * stats.c — tempo-train's step statistics (stats.h): the step's span and the dist counters
 * taken at its ends, their means over the job, and the lines and loss.csv fields that print them.
 *
 * Invariant: every number of a step is measured over that step's span. The counters are reset
 * at stats_begin, so whatever communicated between two steps (a validation's or a checkpoint's
 * all-gathers, the previous step's timer sums) is not counted in either: counted, it once made
 * the step after a ZeRO 3 checkpoint show its gathers' waits as communication, more than the
 * whole step (negative compute), and their bytes as the step's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "trainer/stats.h"
#include "util/helpers.h"

double stats_begin(dist_t *d)
{
    dist_counters_t c;
    d->counters_take(d, &c); /* what came before the step is not the step's */
    return util_now_s();
}

/* The sum of n doubles over the whole job: its DP group, TP group and pipeline line. */
static int job_sum(dist_t *d, double *x, int n)
{
    return d->sum_f64(d, x, n) || (d->tp_size > 1 && d->tp_sum_f64(d, x, n)) ||
                   (d->pp_size > 1 && d->pp_allreduce(d, DIST_PP_LINE, x, (size_t)n, 1))
               ? -1
               : 0;
}

int stats_end(dist_t *d, double t0, stats_step_t *st_p)
{
    const double step = util_now_s() - t0;
    dist_counters_t c;
    d->counters_take(d, &c);
    double x[2 + 2 * DIST_NDIMS] = {step, step}; /* step, compute, comm[], bytes[] */
    for (int k = 0; k < DIST_NDIMS; k++) {
        x[1] -= c.wait_s[k];
        x[2 + k] = c.wait_s[k];
        x[2 + DIST_NDIMS + k] = c.bytes_sent[k];
    }
    /* the waits are disjoint spans of [t0, now]: only rounding can take compute below 0 */
    x[1] = fmax(x[1], 0.0);
    if (job_sum(d, x, 2 + 2 * DIST_NDIMS)) {
        return -1;
    }
    const double n = d->world_size;
    stats_step_t st = {.step = x[0] / n, .compute = x[1] / n};
    for (int k = 0; k < DIST_NDIMS; k++) {
        st.comm[k] = x[2 + k] / n;
        st.bytes[k] = x[2 + DIST_NDIMS + k] / n;
    }
    *st_p = st;
    return 0;
}

static double comm_of(const stats_step_t *st)
{
    return st->comm[DIST_DP] + st->comm[DIST_TP] + st->comm[DIST_PP];
}

static double bytes_of(const stats_step_t *st)
{
    return st->bytes[DIST_DP] + st->bytes[DIST_TP] + st->bytes[DIST_PP];
}

void stats_print_step(FILE *f, const stats_step_t *st)
{
    fprintf(f,
            " | %7.1f ms (compute %.1f, comm %.1f: dp %.1f, tp %.1f, pp %.1f) | sent %.2f MB: "
            "dp %.2f, tp %.2f, pp %.2f",
            st->step * 1e3, st->compute * 1e3, comm_of(st) * 1e3, st->comm[DIST_DP] * 1e3,
            st->comm[DIST_TP] * 1e3, st->comm[DIST_PP] * 1e3, bytes_of(st) * 1e-6,
            st->bytes[DIST_DP] * 1e-6, st->bytes[DIST_TP] * 1e-6, st->bytes[DIST_PP] * 1e-6);
}

const char stats_csv_header[] =
    "step,loss,val_loss,lr,tokens_per_s,step_ms,compute_ms,comm_ms,bytes_sent,comm_dp_ms,"
    "comm_tp_ms,comm_pp_ms,bytes_dp,bytes_tp,bytes_pp\n";

void stats_csv_row(FILE *f, double tokens_per_s, const stats_step_t *st)
{
    fprintf(f, "%.1f,%.3f,%.3f,%.3f,%.0f,%.3f,%.3f,%.3f,%.0f,%.0f,%.0f\n", tokens_per_s,
            st->step * 1e3, st->compute * 1e3, comm_of(st) * 1e3, bytes_of(st),
            st->comm[DIST_DP] * 1e3, st->comm[DIST_TP] * 1e3, st->comm[DIST_PP] * 1e3,
            st->bytes[DIST_DP], st->bytes[DIST_TP], st->bytes[DIST_PP]);
}

void stats_csv_val(FILE *f, int step, double val)
{
    fprintf(f, "%d,,%.17g", step, val);
    int commas = 0;
    for (const char *c = stats_csv_header; *c; c++) {
        commas += *c == ',';
    }
    for (int i = 2; i < commas; i++) {
        fputc(',', f); /* the fields after val_loss, empty */
    }
    fputc('\n', f);
    fflush(f);
}

void stats_add(stats_run_t *r, int s, int first, const stats_step_t *st)
{
    if (s == first) {
        return;
    }
    if (!r->n) {
        r->first = s;
    }
    r->last = s;
    r->n++;
    r->sum.step += st->step;
    r->sum.compute += st->compute;
    for (int k = 0; k < DIST_NDIMS; k++) {
        r->sum.comm[k] += st->comm[k];
        r->sum.bytes[k] += st->bytes[k];
    }
}

void stats_print_run(const stats_run_t *r, double tokens)
{
    if (!r->n) {
        return;
    }
    const stats_step_t *s = &r->sum;
    const double n = r->n, comm = comm_of(s);
    printf("step time, mean of steps %d-%d: %.1f ms = compute %.1f + exposed communication %.1f "
           "(%.1f %%: dp %.1f, tp %.1f, pp %.1f); %.0f tokens/s; sent %.2f MB per step (dp %.2f, "
           "tp %.2f, pp %.2f)\n",
           r->first, r->last, s->step / n * 1e3, s->compute / n * 1e3, comm / n * 1e3,
           s->step > 0 ? 100 * comm / s->step : 0.0, s->comm[DIST_DP] / n * 1e3,
           s->comm[DIST_TP] / n * 1e3, s->comm[DIST_PP] / n * 1e3, tokens * n / s->step,
           bytes_of(s) / n * 1e-6, s->bytes[DIST_DP] / n * 1e-6, s->bytes[DIST_TP] / n * 1e-6,
           s->bytes[DIST_PP] / n * 1e-6);
}

/* kB of field ("VmHWM:") in /proc/self/status, or -1 where there is none. */
static double proc_status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    size_t n = strlen(field);
    while (f && kb < 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0) {
            kb = strtod(line + n, NULL);
        }
    }
    if (f) {
        fclose(f);
    }
    return kb;
}

void stats_print_rss(const dist_t *d)
{
    double hwm = proc_status_kb("VmHWM:"), rss = proc_status_kb("VmRSS:");
    if (hwm < 0) {
        struct rusage ru;
        hwm = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss : -1;
    }
    printf("memory of rank %d: peak RSS %.2f MB (VmHWM), RSS at exit %.2f MB (VmRSS)\n",
           d->world_rank, hwm * 1.024e-3, rss * 1.024e-3);
    fflush(stdout);
}
