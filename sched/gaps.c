/* Gap filling: the model is described in gaps.h. Why the choices:
 *  - mean minus deviations, not the mean: a gap predicted too long lets an
 *    lp op overrun the hp arrival, which is the failure that matters; a gap
 *    predicted too short only wastes some idle time.
 *  - the deviation starts at half the first sample (as RFC 6298 starts
 *    RTTVAR), so the first predictions are cautious and tighten as the gaps
 *    prove regular.
 *  - doubles for the estimators: EWMA arithmetic on integers loses the small
 *    corrections that make it converge. */
#include "gaps.h"

#include <math.h>
#include <string.h>

#include "sl_error.h"

sl_gaps_config sl_gaps_config_default(void)
{
    return (sl_gaps_config){
        .gap_alpha = 0.125,
        .gap_beta = 0.25,
        .dev_k = 1.0,
        .overdue_factor = 2.0,
        .op_alpha = 0.25,
        .unknown_op_ns = 0,
    };
}

static bool weight_ok(double w)
{
    return w > 0 && w <= 1; /* false for NaN too */
}

int sl_gaps_init(sl_gaps *g, const sl_gaps_config *cfg)
{
    sl_gaps_config c = cfg ? *cfg : sl_gaps_config_default();
    if (!weight_ok(c.gap_alpha) || !weight_ok(c.gap_beta) || !weight_ok(c.op_alpha) ||
        !(c.dev_k >= 0) || !isfinite(c.dev_k) || !(c.overdue_factor >= 1) ||
        !isfinite(c.overdue_factor) || !(c.fit_margin >= 0 && c.fit_margin < 1))
        return SL_EINVAL;
    memset(g, 0, sizeof(*g));
    g->cfg = c;
    return SL_OK;
}

void sl_gaps_hp_add(sl_gaps *g, sl_gaps_hp *hp)
{
    memset(hp, 0, sizeof(*hp));
    hp->next = g->first;
    if (g->first)
        g->first->prev = hp;
    g->first = hp;
    g->n_hp++;
}

void sl_gaps_hp_remove(sl_gaps *g, sl_gaps_hp *hp)
{
    if (hp->prev)
        hp->prev->next = hp->next;
    else
        g->first = hp->next;
    if (hp->next)
        hp->next->prev = hp->prev;
    hp->prev = hp->next = NULL;
    if (hp->pending > 0)
        g->n_pending--;
    hp->pending = 0;
    g->n_hp--;
}

static void gap_observe(const sl_gaps_config *c, sl_gaps_hp *hp, uint64_t gap_ns)
{
    double x = (double) gap_ns;
    if (hp->gaps_seen == 0) {
        hp->gap_mean_ns = x;
        hp->gap_dev_ns = x / 2;
    } else {
        /* The deviation is measured against the old mean, as RFC 6298. */
        hp->gap_dev_ns += c->gap_beta * (fabs(x - hp->gap_mean_ns) - hp->gap_dev_ns);
        hp->gap_mean_ns += c->gap_alpha * (x - hp->gap_mean_ns);
    }
    hp->gaps_seen++;
}

void sl_gaps_hp_arrival(sl_gaps *g, sl_gaps_hp *hp, uint64_t now)
{
    if (hp->idle) {
        gap_observe(&g->cfg, hp, now > hp->idle_since_ns ? now - hp->idle_since_ns : 0);
        hp->idle = false;
    }
    if (hp->pending++ == 0)
        g->n_pending++;
}

void sl_gaps_hp_complete(sl_gaps *g, sl_gaps_hp *hp, uint64_t now)
{
    if (hp->pending == 0)
        return; /* a completion we never saw arrive: nothing to account */
    if (--hp->pending == 0) {
        g->n_pending--;
        hp->idle = true;
        hp->idle_since_ns = now;
    }
}

bool sl_gaps_hp_pending(const sl_gaps *g)
{
    return g->n_pending > 0;
}

static double predicted_gap(const sl_gaps_config *c, const sl_gaps_hp *hp)
{
    double gap = hp->gap_mean_ns - c->dev_k * hp->gap_dev_ns;
    return gap > 0 ? gap : 0;
}

/* The part of the predicted gap lp ops may use. */
static double usable_gap(const sl_gaps_config *c, const sl_gaps_hp *hp)
{
    return (1.0 - c->fit_margin) * predicted_gap(c, hp);
}

uint64_t sl_gaps_hp_predicted_gap(const sl_gaps *g, const sl_gaps_hp *hp)
{
    return hp->gaps_seen ? (uint64_t) predicted_gap(&g->cfg, hp) : 0;
}

sl_gaps_decision sl_gaps_decide(const sl_gaps *g, uint64_t now, uint64_t op_ns)
{
    if (g->n_pending > 0)
        return SL_GAPS_WAIT_PENDING;
    sl_gaps_decision d = SL_GAPS_ISSUE_FREE;
    double host = (double) g->cfg.host_ns;
    for (const sl_gaps_hp *hp = g->first; hp; hp = hp->next) {
        if (!hp->idle)
            continue; /* never ran */
        double elapsed = now > hp->idle_since_ns ? (double) (now - hp->idle_since_ns) : 0;
        if (elapsed < host)
            return SL_GAPS_WAIT_GAP; /* its reply is still on its way out */
        if (hp->gaps_seen == 0)
            continue; /* no prediction yet */
        double overdue = g->cfg.overdue_factor * (hp->gap_mean_ns + g->cfg.dev_k * hp->gap_dev_ns);
        if (elapsed > overdue)
            continue;
        if (usable_gap(&g->cfg, hp) - elapsed - host <= (double) op_ns)
            return SL_GAPS_WAIT_GAP;
        d = SL_GAPS_ISSUE_GAP;
    }
    return d;
}

uint64_t sl_gaps_min_room(const sl_gaps *g)
{
    double room = -1, host2 = 2.0 * (double) g->cfg.host_ns;
    for (const sl_gaps_hp *hp = g->first; hp; hp = hp->next) {
        if (hp->gaps_seen == 0)
            continue;
        double r = usable_gap(&g->cfg, hp) - host2;
        r = r > 0 ? r : 0;
        if (room < 0 || r < room)
            room = r;
    }
    return room < 0 ? UINT64_MAX : (uint64_t) room;
}

uint64_t sl_gaps_host_wait(const sl_gaps *g, uint64_t now)
{
    uint64_t wait = 0;
    for (const sl_gaps_hp *hp = g->first; hp; hp = hp->next) {
        if (!hp->idle || now >= hp->idle_since_ns + g->cfg.host_ns)
            continue;
        uint64_t left = hp->idle_since_ns + g->cfg.host_ns - now;
        if (left > wait)
            wait = left;
    }
    return wait;
}

bool sl_gaps_may_issue_low_op(const sl_gaps *g, uint64_t now, uint64_t op_ns)
{
    sl_gaps_decision d = sl_gaps_decide(g, now, op_ns);
    return d == SL_GAPS_ISSUE_FREE || d == SL_GAPS_ISSUE_GAP;
}

void sl_gaps_ewma_observe(sl_gaps_ewma *e, double alpha, uint64_t sample_ns)
{
    double x = (double) sample_ns;
    e->mean_ns = e->n == 0 ? x : e->mean_ns + alpha * (x - e->mean_ns);
    e->n++;
}

void sl_gaps_lp_init(sl_gaps_lp *lp, sl_gaps_ewma *ops, uint32_t n_ops)
{
    memset(&lp->job, 0, sizeof(lp->job));
    lp->ops = ops;
    lp->n_ops = ops ? n_ops : 0;
    if (ops && n_ops)
        memset(ops, 0, (size_t) n_ops * sizeof(*ops));
}

/* Rounds up: an op predicted a fraction of a nanosecond short could be
 * admitted into a gap it does not fit. */
static uint64_t ns_up(double ns)
{
    if (!(ns > 0))
        return 0;
    if (ns >= 18446744073709551615.0)
        return UINT64_MAX;
    return (uint64_t) ceil(ns);
}

uint64_t sl_gaps_lp_predict(const sl_gaps *g, const sl_gaps_lp *lp, uint32_t op)
{
    if (op < lp->n_ops && lp->ops[op].n > 0)
        return ns_up(lp->ops[op].mean_ns);
    if (lp->job.n > 0)
        return ns_up(lp->job.mean_ns);
    return g->cfg.unknown_op_ns;
}

void sl_gaps_lp_observe(const sl_gaps *g, sl_gaps_lp *lp, uint32_t op, uint64_t duration_ns)
{
    if (op < lp->n_ops)
        sl_gaps_ewma_observe(&lp->ops[op], g->cfg.op_alpha, duration_ns);
    sl_gaps_ewma_observe(&lp->job, g->cfg.op_alpha, duration_ns);
}
