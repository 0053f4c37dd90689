/* An hp inference service beside lp training on one GPU, op by op: the
 * jobs the FIKIT and spatial-sharing experiments (eval/drivers/fikit.c,
 * spatial.c) run under their configurations. hp is batch-1 inference of
 * hp_model (the forward ops of its training timeline, graphs.h) with
 * Poisson requests; lp is lp_jobs copies of lp_model training at
 * lp_batch, long enough to outlast the requests even slowed 2x. */
#ifndef SL_EVAL_COLO_H
#define SL_EVAL_COLO_H

#include "evsim.h"
#include "graphs.h"
#include "partition.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_EVAL_COLO_MAX_LP 64

typedef struct sl_eval_colo_config {
    const char *hp_model, *lp_model;
    unsigned lp_batch, lp_jobs; /* lp_jobs <= SL_EVAL_COLO_MAX_LP */
    size_t n_req;               /* >= 1 */
    double qps;                 /* > 0 */
    uint64_t seed;
    enum sl_eval_launch launch; /* how solo times launch (graphs.h) */
    double need_slack;          /* hp's declared need: within this of the whole device */
    const char *csv;            /* the Salus workloads: lp's ephemeral memory (measured peak) */
} sl_eval_colo_config;

typedef struct sl_eval_colo {
    sl_eval_timeline ht, lt; /* hp's (training: its first fwd ops serve a request), lp's */
    size_t fwd;
    sl_eval_op_list hp, lp;
    uint64_t hp_ns, lp_ns;         /* solo times, launched as configured */
    uint64_t lp_op_ns;             /* the sum of lp's ops (serial), for its mean op */
    unsigned min_sms, align, need; /* partition granularity; the SMs hp declares */
    sl_part_plan_config plan;
    uint64_t *req, window;                          /* hp's request times; the last */
    sl_eval_job_spec jobs[1 + SL_EVAL_COLO_MAX_LP]; /* hp, then lp_jobs lp */
} sl_eval_colo;

/* Builds the jobs on gpu into *out (zeroed first). Errors: SL_EINVAL (a
 * model graphs.c does not build, lp_jobs or n_req out of range),
 * SL_EUNSUPPORTED, SL_ENOMEM; *out is then safe to sl_eval_colo_fini. A
 * missing CSV leaves lp's ephemeral memory 0. Never blocks. */
int sl_eval_colo_build(const sl_eval_colo_config *cfg, const sl_sim_profile *gpu,
                       sl_eval_colo *out);

/* The lp iterations completed up to window_end (hp is job 1): cfg.arg of
 * an evsim.h on_done hook sl_eval_colo_on_done. */
typedef struct sl_eval_colo_count {
    uint64_t window_end;
    uint64_t lp_iters;
} sl_eval_colo_count;
void sl_eval_colo_on_done(void *arg, unsigned gpu, uint64_t job_id, uint64_t iteration,
                          uint64_t request_ns, uint64_t now_ns);

/* Frees what sl_eval_colo_build allocated; safe on a zeroed object. */
void sl_eval_colo_fini(sl_eval_colo *c);

#endif
