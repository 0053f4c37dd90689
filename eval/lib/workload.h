/* Job profiles and traces for the simulator (evsim.h).
 *
 * Profiles come from the Salus artifact's measurements (eval/data/
 * salus-workloads.csv: TensorFlow 1.x tf_cnn_benchmarks on the paper's
 * P100-class GPU), one per (model, batch, length class) row:
 * - iteration_ns: jct_s / iterations of the same model and batch's
 *   10-minute row (the one where start-up weighs least); measured;
 * - iterations: the row's own; measured;
 * - persistent_bytes: the model's parameter count (published, cited in
 *   workload.c) x 4 bytes (fp32 weights; tf_cnn_benchmarks' default
 *   optimizer is plain SGD, which keeps no per-parameter state); derived;
 * - ephemeral_bytes: peak_mb (MiB) - persistent_bytes: everything else at
 *   the peak is what one iteration creates; derived.
 * sl_eval_workloads_compute replaces the measured timing with one computed
 * from the model's op list (eval/lib/graphs.h) on any sim profile, for the
 * models whose op set allows it. */
#ifndef SL_EVAL_WORKLOAD_H
#define SL_EVAL_WORKLOAD_H

#include "evsim.h"
#include "graphs.h"
#include "sim/profiles.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_eval_workload {
    char name[40];  /* "resnet50_50_5min" */
    char model[24]; /* "resnet50" */
    unsigned batch;
    unsigned length_min; /* 1, 5 or 10: the class, from jct_s (the name is wrong once upstream) */
    double jct_s;        /* measured, running alone */
    uint64_t iterations;
    uint64_t iteration_ns;
    uint64_t persistent_bytes;
    uint64_t ephemeral_bytes;
    uint64_t peak_bytes; /* measured peak_mb, in bytes */
    bool computed;       /* iteration_ns and persistent_bytes from the op list */
    /* Solo device utilisation (evsim.h): 0 (= 1, the device filled) as
     * loaded, since the CSV measures none; from the op list after
     * sl_eval_workloads_compute or sl_eval_workloads_utilisation. */
    double utilisation;
} sl_eval_workload;

/* Reads the Salus workload CSV at path. On success *out (sl_free) holds *n
 * workloads in file order. Errors: SL_ENOTFOUND (cannot open), SL_EINVAL (a
 * malformed row, a model without a published parameter count, a model and
 * batch without a 10-minute row, a peak below the parameters), SL_ENOMEM.
 * Reads a file; does not block otherwise. */
int sl_eval_workloads_load(const char *path, sl_eval_workload **out, size_t *n);

/* Computed profiles on profile p: keeps the workloads whose model
 * eval/lib/graphs.c builds (VGG-11/16/19, ResNet-50/101/152: 54 of the 99
 * rows), in order, and for each sets iteration_ns to the modeled time of
 * one training iteration on p at the row's batch, utilisation to its op
 * list's (sl_eval_workloads_utilisation), persistent_bytes to the
 * op list's parameters x 4 bytes, ephemeral_bytes to the measured peak
 * minus that, and computed. iterations stay the measured ones (a job is a
 * number of iterations; its length follows the GPU). *n is updated.
 * Errors: SL_EINVAL (no workload left, a peak below the parameters),
 * SL_EUNSUPPORTED, SL_ENOMEM (graphs.h); on error w may be partly
 * rewritten. */
int sl_eval_workloads_compute(sl_eval_workload *w, size_t *n, const sl_sim_profile *p);

/* Sets the utilisation of every workload whose model eval/lib/graphs.c builds
 * to that of its training iteration's op list on profile p at its batch
 * (sl_eval_timeline_utilisation); leaves the others as they are. The
 * timing stays what it was (measured or computed). Errors: as
 * sl_eval_timeline_build. */
int sl_eval_workloads_utilisation(sl_eval_workload *w, size_t n, const sl_sim_profile *p);

/* Profiles computed from the client's nn helpers on a simulated GPU
 * (eval/profiles --out FILE: a header, then lines "model,batch,
 * iteration_ns,persistent_bytes,ephemeral_bytes"): keeps the workloads
 * that have a line for their model and batch, in order, and sets their
 * iteration_ns, persistent_bytes and ephemeral_bytes from it, and
 * computed. iterations stay the measured ones (a job is a number of
 * iterations). *n is updated. Errors: SL_ENOTFOUND (cannot open),
 * SL_EINVAL (a malformed line, a zero field, no workload left); on error w
 * may be partly rewritten. Reads a file; does not block otherwise. */
int sl_eval_workloads_profiles(sl_eval_workload *w, size_t *n, const char *path);

/* A small deterministic generator (splitmix64): traces depend on the seed
 * alone, on every platform. */
typedef struct sl_eval_rng {
    uint64_t state;
} sl_eval_rng;
void sl_eval_rng_seed(sl_eval_rng *r, uint64_t seed);
uint64_t sl_eval_rng_next(sl_eval_rng *r);
/* Uniform in [0, 1). */
double sl_eval_rng_uniform(sl_eval_rng *r);
/* Exponential with the given mean. */
double sl_eval_rng_exp(sl_eval_rng *r, double mean);
/* Log-normal with the given median and log-space sigma (Box-Muller from
 * two uniforms). */
double sl_eval_rng_lognormal(sl_eval_rng *r, double median, double sigma);

/* The Salus section 5.1 trace: n_jobs jobs, each a workload drawn uniformly
 * from w[0..n_w) (so the length mix is the CSV's: a third each of 1, 5 and
 * 10 minutes), arriving as a Poisson process of the given mean
 * inter-arrival time (the first at 0). Job i gets id i + 1, declares its
 * length (the paper's SRTF knows job lengths) and its memory, and has its
 * workload's utilisation. Writes
 * out[0..n_jobs). Errors: SL_EINVAL (n_w 0, mean < 0). */
int sl_eval_trace_salus(const sl_eval_workload *w, size_t n_w, size_t n_jobs,
                        double mean_interarrival_s, uint64_t seed, sl_eval_job_spec *out);

/* Redraws the lengths of a trace's jobs, keeping their workloads (iteration
 * time, memory) and arrivals: each job runs alone for a log-normal time of
 * the given sigma whose mean is the mean length of w's rows (what the
 * uniform draws of sl_eval_trace_salus give on average), so the offered
 * work is that of the CSV's mix on average (a given trace's total varies
 * with the draws: at sigma 1.5 by about 30 % over 100 jobs) and only the
 * shape of the lengths changes. At least one iteration each. Its own generator, from seed.
 * Errors: SL_EINVAL (n_w 0, sigma outside [0, 5]). */
int sl_eval_trace_lognormal_lengths(const sl_eval_workload *w, size_t n_w, double sigma,
                                    uint64_t seed, sl_eval_job_spec *jobs, size_t n_jobs);

/* A job's ops for op-by-op execution (evsim.h sl_eval_job_spec ops,
 * op_shapes, n_ops), from a timeline (graphs.h). */
typedef struct sl_eval_op_list {
    sl_eval_op *ops;          /* n entries: launch, work, split, occupancy, block */
    sl_eval_op_shape *shapes; /* n entries: for the partition model */
    uint32_t n;
    uint64_t ns; /* the sum of the ops' serial times (launch + work) */
} sl_eval_op_list;

/* The first n_ops ops of t (n_ops <= t->n_ops: the forward part of a
 * training timeline is an inference request) into *out. Errors: SL_ENOMEM,
 * *out then empty. sl_eval_op_list_fini frees it. */
int sl_eval_op_list_from(const sl_eval_timeline *t, size_t n_ops, sl_eval_op_list *out);
/* Frees the list's ops; safe on a zeroed list. */
void sl_eval_op_list_fini(sl_eval_op_list *l);

#endif
