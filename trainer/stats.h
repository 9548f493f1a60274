/*
 * stats.h — what tempo-train says about a step's time and traffic, the same for every layout:
 * train.c's DP x TP steps and pp_train.c's pipelines print their step lines, loss.csv rows, the
 * run's summary and each rank's measured memory at the end through these functions.
 *
 * A step's numbers, each the mean over the job's ranks of that rank's own:
 *   step      its time from stats_begin to stats_end (the step's work, not the validation or
 *             checkpoint after it);
 *   comm[k]   the time it spent blocked in dimension k's communication (DIST_DP, DIST_TP,
 *             DIST_PP) within that span: dist.h's dist_counters_t wait_s, exposed communication
 *             (overlapped traffic is not counted; a wait includes the peers' lateness);
 *   compute   step less the three comm: everything else (the kernels, the optimizer, the
 *             loader, posting). Never negative: the counters start at stats_begin and the waits
 *             are disjoint spans of the step on the rank's one calling thread;
 *   bytes[k]  the bytes it sent in dimension k within that span (dist_counters_t bytes_sent).
 *
 * Not here: the bubble of a pipeline (pp_train.c adds it to the line).
 */
#ifndef TEMPO_TRAINER_STATS_H
#define TEMPO_TRAINER_STATS_H

#include <stdio.h>

#include "trainer/dist.h"

typedef struct {
    double step, compute;    /* seconds */
    double comm[DIST_NDIMS]; /* seconds, by dimension */
    double bytes[DIST_NDIMS];
} stats_step_t;

/* The sums of the steps that the run's mean is over: those after the run's first (its first
 * carries the start-up: the first touch of buffers, connections). */
typedef struct {
    stats_step_t sum;
    int n, first, last; /* steps summed, the first and last of them (1-based) */
} stats_run_t;

/* The start of a step: the counters start again from 0; returns the time (stats_end's t0). */
double stats_begin(dist_t *d);

/* The end of the step that began at t0: this rank's numbers, averaged over the job (collective
 * over every rank of the job: the DP group, then TP, then the pipeline line). 0, or -1 with the
 * reason in dist_error. */
int stats_end(dist_t *d, double t0, stats_step_t *st_p);

/* The step line's time and traffic fields:
 * " | 13.3 ms (compute 10.1, comm 3.2: dp 2.1, tp 1.1, pp 0.0) | sent 1.23 MB: dp 0.00, ..." */
void stats_print_step(FILE *f, const stats_step_t *st);

/* loss.csv's header and the fields of a row after step,loss,val_loss,lr (tokens_per_s, step_ms,
 * compute_ms, comm_ms, bytes_sent, then comm_dp_ms, comm_tp_ms, comm_pp_ms, bytes_dp, bytes_tp,
 * bytes_pp), with its newline. */
extern const char stats_csv_header[];
void stats_csv_row(FILE *f, double tokens_per_s, const stats_step_t *st);
/* A row of the validation loss val alone at step (the start of a run: before any training step,
 * so no loss, rate or time; plotted as the validation curve's first point). */
void stats_csv_val(FILE *f, int step, double val);

/* Step s (1-based) of a run whose first step is `first`: summed unless it is the first. */
void stats_add(stats_run_t *r, int s, int first, const stats_step_t *st);

/* The run's summary line (nothing when no step was summed): "step time, mean of steps 2-20:
 * 13.3 ms = compute 10.1 + exposed communication 3.2 (24.1 %: dp 2.1, tp 1.1, pp 0.0); 19245
 * tokens/s; sent 1.23 MB per step (dp 0.00, tp 1.23, pp 0.00)". tokens: per step, global. */
void stats_print_run(const stats_run_t *r, double tokens);

/* Every rank at the end of its run, with its training state still allocated: its measured peak
 * resident memory (VmHWM, or getrusage's ru_maxrss without /proc) and its resident memory now
 * (VmRSS). Measured, so it includes what the memory lines leave out: the program, the C and
 * OpenMP runtimes, tempo's transports and buffers, start-up transients. */
void stats_print_rss(const dist_t *d);

#endif /* TEMPO_TRAINER_STATS_H */
