/* The simulated GPU's compute, whole or partitioned (pdev.h). */
#include "pdev.h"

#include <stddef.h>

static void forward_done(void *arg, sl_sim_psc_job *psj)
{
    sl_eval_pdev *d = arg;
    sl_eval_pdev_job *j = (sl_eval_pdev_job *) ((char *) psj - offsetof(sl_eval_pdev_job, ps));
    if (d->n_parts > 1) {
        d->mem_used[j->part] -= j->mem_frac;
        if (d->mem_used[j->part] < 1e-12)
            d->mem_used[j->part] = 0;
    }
    d->done_fn(d->arg, j);
}

void sl_eval_pdev_init(sl_eval_pdev *d, unsigned sm_count, unsigned online_sms,
                       sl_eval_pdev_done_fn done_fn, void *arg)
{
    *d = (sl_eval_pdev){.n_parts = 1, .sm_count = sm_count, .done_fn = done_fn, .arg = arg};
    sl_sim_psc_init(&d->ps[0], 0);
    sl_sim_psc_init(&d->ps[1], 0);
    d->units[0] = sm_count;
    if (sm_count > 1 && online_sms > 0 && online_sms < sm_count) {
        d->n_parts = 2;
        d->units[0] = online_sms;
        d->units[1] = sm_count - online_sms;
    }
}

void sl_eval_pdev_granularity(sl_eval_pdev *d, unsigned min_units, unsigned align)
{
    d->min_units = min_units;
    d->align = align;
}

/* The rest, rounded down to a size the granularity allows. */
static unsigned offline_units(const sl_eval_pdev *d, unsigned online)
{
    unsigned rest = d->sm_count - online;
    if (d->align == 0 || rest < d->min_units)
        return rest;
    return d->min_units + (rest - d->min_units) / d->align * d->align;
}

/* Partitions in force: ops are timed and placed on one of two. */
static bool split(const sl_eval_pdev *d)
{
    return d->n_parts > 1 && !d->shared;
}

void sl_eval_pdev_share(sl_eval_pdev *d, bool shared)
{
    d->shared = d->n_parts > 1 && shared;
}

void sl_eval_pdev_resize(sl_eval_pdev *d, unsigned online_sms)
{
    if (d->n_parts < 2 || online_sms == 0 || online_sms >= d->sm_count)
        return;
    d->units[0] = online_sms;
    d->units[1] = offline_units(d, online_sms);
}

void sl_eval_pdev_sync(sl_eval_pdev *d, uint64_t now)
{
    /* every departure is a sync, so each partition was busy for all of
     * (synced, now] or for none of it (as evsim.c's device_sync) */
    if (now > d->synced_ns) {
        double dt = (double) (now - d->synced_ns), used = 0;
        bool any = false;
        for (unsigned k = 0; k < d->n_parts; k++) {
            if (d->ps[k].n_active == 0)
                continue;
            any = true;
            /* shared, the first holds the whole device's ops (and the
             * partition's that were in flight, briefly) */
            double share = split(d) || (d->shared && k == 1)
                               ? (double) d->units[k] / (double) d->sm_count
                               : 1.0;
            used += share * sl_sim_psc_used(&d->ps[k]);
        }
        if (any) {
            d->busy_ns += now - d->synced_ns;
            d->occupied_ns += dt * used;
        }
        d->synced_ns = now;
    }
    for (unsigned k = 0; k < d->n_parts; k++)
        (void) sl_sim_psc_advance(&d->ps[k], now, forward_done, d);
}

uint64_t sl_eval_pdev_next(const sl_eval_pdev *d)
{
    uint64_t t = sl_sim_psc_next_event_ns(&d->ps[0]);
    if (d->n_parts > 1) {
        uint64_t u = sl_sim_psc_next_event_ns(&d->ps[1]);
        t = u < t ? u : t;
    }
    return t;
}

bool sl_eval_pdev_idle(const sl_eval_pdev *d, unsigned part)
{
    const sl_sim_psc *ps = &d->ps[split(d) && part < 2 ? part : 0];
    return ps->n_active == 0 && !ps->pending;
}

static uint64_t part_work(const sl_eval_pdev *d, unsigned part, const sl_eval_pdev_op *op,
                          double bw, double *occupancy, uint64_t *block)
{
    uint64_t compute = op->compute_ns, memory = op->memory_ns;
    if (compute == 0 && memory == 0)
        compute = op->work_ns;
    double waves = op->waves > 0 ? op->waves : op->occupancy > 0 ? op->occupancy : 1.0;
    return sl_sim_part_work_ns(d->sm_count, compute, memory, waves, d->units[part], bw, occupancy,
                               block);
}

double sl_eval_pdev_estimate_ns(const sl_eval_pdev *d, unsigned part, const sl_eval_pdev_op *op)
{
    part = split(d) && part < 2 ? part : 0;
    double bw = split(d) ? sl_sim_part_bw_share(d->mem_used[1 - part], 1) : 1.0;
    double occupancy = 1.0;
    uint64_t work = split(d) ? part_work(d, part, op, bw, &occupancy, NULL) : op->work_ns;
    const sl_sim_psc *ps = &d->ps[part];
    double free = 1.0 - sl_sim_psc_used(ps), even = 1.0 / (double) (ps->n_active + 1);
    double rate = free / occupancy;
    rate = rate < even ? even : rate > 1.0 ? 1.0 : rate;
    return (double) work / rate;
}

uint64_t sl_eval_pdev_block_ns(const sl_eval_pdev *d, unsigned part, const sl_eval_pdev_op *op)
{
    if (!split(d))
        return op->block_ns;
    uint64_t block = 0;
    (void) part_work(d, part, op, 1.0, NULL, &block);
    return block;
}

void sl_eval_pdev_submit(sl_eval_pdev *d, sl_eval_pdev_job *job, unsigned part, uint64_t arrive_ns,
                         const sl_eval_pdev_op *op, double launch_share, int priority)
{
    if (!split(d)) {
        job->part = 0;
        job->mem_frac = 0;
        double cap = op->occupancy > 0 ? op->occupancy : 1.0;
        sl_sim_psc_submit_prio(&d->ps[0], &job->ps, arrive_ns, op->work_ns, cap, launch_share,
                               priority, op->block_ns < op->work_ns ? op->block_ns : op->work_ns);
        return;
    }
    part = part < 2 ? part : SL_EVAL_PART_OFFLINE;
    double bw = sl_sim_part_bw_share(d->mem_used[1 - part], 1);
    double occupancy = 1.0;
    uint64_t block = 0;
    uint64_t work = part_work(d, part, op, bw, &occupancy, &block);
    job->part = part;
    job->mem_frac = work > 0 ? (double) op->memory_ns / (double) work : 0;
    if (job->mem_frac > 1)
        job->mem_frac = 1;
    d->mem_used[part] += job->mem_frac;
    sl_sim_psc_submit_prio(&d->ps[part], &job->ps, arrive_ns, work, occupancy, launch_share,
                           priority, block < work ? block : work);
}
