/* Compute partition sizing (partition.h). */
#include "partition.h"

#include "sl_error.h"

#include <math.h>

sl_part_plan_config sl_part_plan_config_default(unsigned units, unsigned min_units, unsigned align)
{
    return (sl_part_plan_config){.units = units,
                                 .min_units = min_units,
                                 .align = align,
                                 .headroom = 0.10,
                                 .grow_load = 0.50,
                                 .shrink_load = 0.20,
                                 .ewma = 0.2,
                                 .hold = 8};
}

unsigned sl_part_round(const sl_part_plan_config *cfg, unsigned units)
{
    if (units < cfg->min_units)
        units = cfg->min_units;
    unsigned above = units - cfg->min_units;
    units = cfg->min_units + (above + cfg->align - 1) / cfg->align * cfg->align;
    return units < cfg->units ? units : cfg->units;
}

static unsigned min_offline(const sl_part_plan_config *cfg)
{
    return cfg->min_offline ? cfg->min_offline : cfg->min_units;
}

/* The most the online partition may have. */
static unsigned online_max(const sl_part_plan_config *cfg)
{
    unsigned most = cfg->units - min_offline(cfg);
    /* a size the granularity allows, not above most */
    if (most < cfg->min_units)
        return 0;
    return cfg->min_units + (most - cfg->min_units) / cfg->align * cfg->align;
}

int sl_part_plan_init(sl_part_plan *p, const sl_part_plan_config *cfg, unsigned need_units)
{
    if (!p || !cfg || cfg->units == 0 || cfg->align == 0 || cfg->min_units == 0 ||
        cfg->min_units > cfg->units || !(cfg->shrink_load >= 0) ||
        !(cfg->shrink_load < cfg->grow_load) || !(cfg->grow_load <= 1) || !(cfg->ewma > 0) ||
        !(cfg->ewma <= 1) || !(cfg->headroom >= 0) || min_offline(cfg) >= cfg->units ||
        online_max(cfg) == 0)
        return SL_EINVAL;
    *p = (sl_part_plan){.cfg = *cfg};
    double want = ceil((double) need_units * (1.0 + cfg->headroom) - 1e-9);
    unsigned need = sl_part_round(cfg, want > cfg->units ? cfg->units : (unsigned) want);
    unsigned most = online_max(cfg);
    p->need = need < most ? need : most;
    p->online = p->need;
    return SL_OK;
}

unsigned sl_part_plan_observe(sl_part_plan *p, uint64_t busy_ns, uint64_t window_ns)
{
    const sl_part_plan_config *c = &p->cfg;
    if (window_ns > 0) {
        /* the ratio of the averages, not the average of the ratios: a
         * short busy window and a long idle one weigh by their lengths, or
         * bursts of back-to-back requests would read as a busy partition
         * at any load */
        double busy = (double) (busy_ns < window_ns ? busy_ns : window_ns);
        p->busy_avg = c->ewma * busy + (1 - c->ewma) * p->busy_avg;
        p->window_avg = c->ewma * (double) window_ns + (1 - c->ewma) * p->window_avg;
        p->load = p->busy_avg / p->window_avg;
    }
    p->since_change++;
    if (p->since_change < c->hold)
        return p->online;
    unsigned next = p->online;
    if (p->load > c->grow_load && p->online + c->align <= online_max(c))
        next = p->online + c->align;
    else if (p->load < c->shrink_load && p->online >= p->need + c->align)
        next = p->online - c->align;
    if (next != p->online) {
        p->online = next;
        p->since_change = 0;
        p->resizes++;
    }
    return p->online;
}

unsigned sl_part_plan_offline(const sl_part_plan *p)
{
    return p->cfg.units - p->online;
}

/* Busy time up to now, the running stretch included. */
static uint64_t load_busy(const sl_part_load *l, uint64_t now)
{
    return l->busy_ns + (l->running && now > l->since_ns ? now - l->since_ns : 0);
}

void sl_part_load_reset(sl_part_load *l, uint64_t now)
{
    if (l->running) { /* only busy time from now on counts */
        l->busy_ns += now > l->since_ns ? now - l->since_ns : 0;
        l->since_ns = now;
    }
    l->mark_ns = now;
    l->mark_busy_ns = l->busy_ns;
}

void sl_part_load_start(sl_part_load *l, uint64_t now)
{
    if (l->running++ == 0)
        l->since_ns = now;
}

void sl_part_load_done(sl_part_load *l, uint64_t now)
{
    if (l->running && --l->running == 0)
        l->busy_ns += now > l->since_ns ? now - l->since_ns : 0;
}

unsigned sl_part_load_observe(sl_part_load *l, sl_part_plan *p, uint64_t now)
{
    uint64_t busy = load_busy(l, now);
    /* callers read their clock before their lock: a reset in between may
     * leave now behind the mark (an empty window, then) */
    uint64_t busy_ns = busy > l->mark_busy_ns ? busy - l->mark_busy_ns : 0;
    uint64_t window_ns = now > l->mark_ns ? now - l->mark_ns : 0;
    l->mark_ns = now > l->mark_ns ? now : l->mark_ns;
    l->mark_busy_ns = busy > l->mark_busy_ns ? busy : l->mark_busy_ns;
    return sl_part_plan_observe(p, busy_ns, window_ns);
}
