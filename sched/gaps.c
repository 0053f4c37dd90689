/* Gap filling: the model is described in gaps.h. Why the choices:
 *  - the recorded distribution, not a summary of it: a summary (mean minus
 *    deviations) predicts ~0 for memoryless arrivals, whose deviation is
 *    their mean, and forbids the idle time lp could use at a small risk;
 *    a conditional frequency is right for regular, memoryless and mixed
 *    gaps (Poisson requests plus the short gaps of requests that waited
 *    behind the previous one) alike.
 *  - a ring (to forget the oldest) and a sorted copy (to count the gaps in
 *    a window by two binary searches): O(log n) per decision, O(n) per gap.
 *  - the service time S per iteration as the budget's unit: the hp latency
 *    the margin is a share of, measured, not configured.
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
        .fit_margin = 0.05,
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

/* Index of the first recorded gap > x in hp->sorted. */
static uint32_t first_above(const sl_gaps_hp *hp, uint64_t x)
{
    uint32_t lo = 0, hi = hp->n_hist;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (hp->sorted[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void sorted_remove(sl_gaps_hp *hp, uint64_t x)
{
    uint32_t i = first_above(hp, x) - 1; /* x is recorded: sorted[i] == x */
    memmove(&hp->sorted[i], &hp->sorted[i + 1], (hp->n_hist - 1 - i) * sizeof(uint64_t));
    hp->n_hist--;
}

static void sorted_insert(sl_gaps_hp *hp, uint64_t x)
{
    uint32_t i = first_above(hp, x);
    memmove(&hp->sorted[i + 1], &hp->sorted[i], (hp->n_hist - i) * sizeof(uint64_t));
    hp->sorted[i] = x;
    hp->n_hist++;
}

static void record_gap(sl_gaps_hp *hp, uint64_t x)
{
    if (hp->n_hist == SL_GAPS_HISTORY) { /* forget the oldest */
        uint64_t old = hp->ring[hp->head];
        sorted_remove(hp, old);
        hp->hist_sum_ns -= (double) old;
        hp->ring[hp->head] = x;
        hp->head = (hp->head + 1) % SL_GAPS_HISTORY;
    } else {
        hp->ring[hp->n_hist] = x;
    }
    sorted_insert(hp, x);
    hp->hist_sum_ns += (double) x;
}

static void gap_observe(const sl_gaps_config *c, sl_gaps_hp *hp, uint64_t gap_ns)
{
    record_gap(hp, gap_ns);
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
    if (hp->pending++ == 0) {
        g->n_pending++;
        hp->busy_since_ns = now;
        hp->busy_done = 0;
    }
}

void sl_gaps_hp_complete(sl_gaps *g, sl_gaps_hp *hp, uint64_t now)
{
    if (hp->pending == 0)
        return; /* a completion we never saw arrive: nothing to account */
    hp->busy_done++;
    if (--hp->pending == 0) {
        g->n_pending--;
        uint64_t busy = now > hp->busy_since_ns ? now - hp->busy_since_ns : 0;
        sl_gaps_ewma_observe(&hp->service, g->cfg.gap_alpha, busy / hp->busy_done);
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

uint64_t sl_gaps_hp_predicted_gap(const sl_gaps *g, const sl_gaps_hp *hp)
{
    return hp->gaps_seen ? (uint64_t) predicted_gap(&g->cfg, hp) : 0;
}

uint64_t sl_gaps_hp_service(const sl_gaps_hp *hp)
{
    return hp->service.n ? (uint64_t) hp->service.mean_ns : 0;
}

double sl_gaps_hp_risk(const sl_gaps *g, const sl_gaps_hp *hp)
{
    if (hp->n_hist == 0 || hp->service.n == 0)
        return 0;
    double m = hp->hist_sum_ns / hp->n_hist;
    if (!(m > 0))
        return 0; /* only zero-length gaps on record: every op risks a delay */
    return g->cfg.fit_margin * hp->service.mean_ns / m;
}

/* Longest recorded gap times the overdue factor: past it, hp is overdue. */
static double overdue_ns(const sl_gaps *g, const sl_gaps_hp *hp)
{
    return g->cfg.overdue_factor * (double) hp->sorted[hp->n_hist - 1];
}

sl_gaps_decision sl_gaps_decide(const sl_gaps *g, uint64_t now, uint64_t op_ns)
{
    if (g->n_pending > 0)
        return SL_GAPS_WAIT_PENDING;
    sl_gaps_decision d = SL_GAPS_ISSUE_FREE;
    uint64_t host = g->cfg.host_ns;
    for (const sl_gaps_hp *hp = g->first; hp; hp = hp->next) {
        if (!hp->idle)
            continue; /* never ran */
        uint64_t e = now > hp->idle_since_ns ? now - hp->idle_since_ns : 0;
        if (e < host)
            return SL_GAPS_WAIT_GAP; /* its reply is still on its way out */
        if (hp->n_hist == 0)
            continue; /* no record yet */
        uint32_t above = first_above(hp, e), n = hp->n_hist - above;
        if (n == 0) { /* longer than every recorded gap */
            if ((double) e > overdue_ns(g, hp))
                continue;
            return SL_GAPS_WAIT_GAP;
        }
        uint64_t end = e + op_ns + host;
        end = end < e ? UINT64_MAX : end; /* saturate */
        uint32_t k = first_above(hp, end) - above;
        if ((double) k > sl_gaps_hp_risk(g, hp) * (double) n)
            return SL_GAPS_WAIT_GAP;
        d = SL_GAPS_ISSUE_GAP;
    }
    return d;
}

uint64_t sl_gaps_min_room(const sl_gaps *g)
{
    double room = -1, host2 = 2.0 * (double) g->cfg.host_ns;
    for (const sl_gaps_hp *hp = g->first; hp; hp = hp->next) {
        if (hp->n_hist == 0)
            continue;
        uint32_t j = (uint32_t) (sl_gaps_hp_risk(g, hp) * hp->n_hist);
        double q = (double) hp->sorted[j < hp->n_hist ? j : hp->n_hist - 1];
        double memoryless = g->cfg.fit_margin * hp->service.mean_ns;
        double r = (q > memoryless ? q : memoryless) - host2;
        r = r > 0 ? r : 0;
        if (room < 0 || r < room)
            room = r;
    }
    return room < 0 ? UINT64_MAX : (uint64_t) room;
}

uint64_t sl_gaps_recheck_at(const sl_gaps *g, uint64_t now)
{
    uint64_t at = UINT64_MAX;
    for (const sl_gaps_hp *hp = g->first; hp; hp = hp->next) {
        if (!hp->idle)
            continue;
        uint64_t e = now > hp->idle_since_ns ? now - hp->idle_since_ns : 0, t;
        if (e < g->cfg.host_ns)
            t = hp->idle_since_ns + g->cfg.host_ns;
        else if (hp->n_hist == 0)
            continue;
        else {
            uint32_t above = first_above(hp, e);
            /* a recorded gap leaves the survivors just after e passes it */
            t = above < hp->n_hist ? hp->idle_since_ns + hp->sorted[above] + 1
                                   : hp->idle_since_ns + (uint64_t) overdue_ns(g, hp) + 1;
        }
        if (t > now && t < at)
            at = t;
    }
    return at;
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
