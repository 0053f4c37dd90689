/* hp inference beside lp training: the jobs (colo.h). */
#include "colo.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

/* lp's ephemeral memory: the CSV's measured peak of that model and batch
 * less its parameters; 0 when the CSV has no such row. */
static uint64_t lp_ephemeral(const sl_eval_colo_config *cfg, uint64_t lp_p)
{
    sl_eval_workload *w;
    size_t n_w;
    uint64_t lp_e = 0;
    if (sl_eval_workloads_load(cfg->csv, &w, &n_w) != SL_OK)
        return 0;
    for (size_t i = 0; i < n_w; i++)
        if (!strcmp(w[i].model, cfg->lp_model) && w[i].batch == cfg->lp_batch &&
            w[i].peak_bytes > lp_p)
            lp_e = w[i].peak_bytes - lp_p;
    sl_free(w);
    return lp_e;
}

/* The timelines, their op lists and solo times, hp's need. */
static int build_models(const sl_eval_colo_config *cfg, const sl_sim_profile *gpu, sl_eval_colo *c)
{
    int rc = sl_eval_timeline_build(cfg->hp_model, 1, gpu, &c->ht);
    if (rc == SL_OK)
        rc = sl_eval_timeline_build(cfg->lp_model, cfg->lp_batch, gpu, &c->lt);
    if (rc != SL_OK)
        return rc;
    /* inference: the forward ops, everything before the loss */
    while (c->fwd < c->ht.n_ops && c->ht.ops[c->fwd].kind != SL_EVAL_LOSS)
        c->fwd++;
    if ((rc = sl_eval_op_list_from(&c->ht, c->fwd, &c->hp)) != SL_OK ||
        (rc = sl_eval_op_list_from(&c->lt, c->lt.n_ops, &c->lp)) != SL_OK)
        return rc;
    /* hp's declared need: of its forward ops (a view of the timeline's
     * first fwd ops) */
    sl_eval_part_granularity(gpu, &c->min_sms, &c->align);
    sl_eval_timeline hp_view = c->ht;
    hp_view.n_ops = c->fwd;
    c->need = sl_eval_timeline_need_sms_ex(&hp_view, gpu, c->min_sms, c->align, cfg->need_slack,
                                           cfg->launch);
    c->lp_op_ns = c->lp.ns;
    c->hp_ns = sl_eval_timeline_solo_ns(&hp_view, cfg->launch);
    c->lp_ns = sl_eval_timeline_solo_ns(&c->lt, cfg->launch);
    c->plan = sl_part_plan_config_default(gpu->sm_count, c->min_sms, c->align);
    return SL_OK;
}

int sl_eval_colo_build(const sl_eval_colo_config *cfg, const sl_sim_profile *gpu, sl_eval_colo *out)
{
    memset(out, 0, sizeof *out);
    if (cfg->lp_jobs > SL_EVAL_COLO_MAX_LP || cfg->n_req < 1 || !(cfg->qps > 0))
        return SL_EINVAL;
    int rc = build_models(cfg, gpu, out);
    if (rc != SL_OK)
        return rc;
    if (!(out->req = sl_calloc(cfg->n_req, sizeof *out->req)))
        return SL_ENOMEM;
    sl_eval_rng rng;
    sl_eval_rng_seed(&rng, cfg->seed);
    double t = 0;
    for (size_t i = 0; i < cfg->n_req; i++) {
        t += sl_eval_rng_exp(&rng, 1e9 / cfg->qps);
        out->req[i] = (uint64_t) t;
    }
    out->window = out->req[cfg->n_req - 1];
    uint64_t lp_iters = out->window / out->lp_ns * 2 + 8; /* outlasts the window slowed 2x */
    uint64_t lp_p = out->lt.params * 4, lp_e = lp_ephemeral(cfg, lp_p);
    out->jobs[0] = (sl_eval_job_spec){.id = 1,
                                      .iterations = cfg->n_req,
                                      .iteration_ns = out->hp_ns,
                                      .persistent_bytes = out->ht.params * 4,
                                      .priority = 10,
                                      .ops = out->hp.ops,
                                      .op_shapes = out->hp.shapes,
                                      .n_ops = out->hp.n,
                                      .request_ns = out->req};
    for (unsigned k = 0; k < cfg->lp_jobs; k++)
        out->jobs[1 + k] = (sl_eval_job_spec){.id = 2 + k,
                                              .iterations = lp_iters,
                                              .iteration_ns = out->lp_ns,
                                              .persistent_bytes = lp_p,
                                              .ephemeral_bytes = lp_e,
                                              .ops = out->lp.ops,
                                              .op_shapes = out->lp.shapes,
                                              .n_ops = out->lp.n};
    return SL_OK;
}

void sl_eval_colo_fini(sl_eval_colo *c)
{
    sl_free(c->req);
    c->req = NULL;
    sl_eval_op_list_fini(&c->hp);
    sl_eval_op_list_fini(&c->lp);
    sl_eval_timeline_fini(&c->ht);
    sl_eval_timeline_fini(&c->lt);
}

void sl_eval_colo_on_done(void *arg, unsigned gpu, uint64_t job_id, uint64_t iteration,
                          uint64_t request_ns, uint64_t now_ns)
{
    (void) gpu;
    (void) iteration;
    (void) request_ns;
    sl_eval_colo_count *r = arg;
    if (job_id != 1 && now_ns <= r->window_end)
        r->lp_iters++;
}
