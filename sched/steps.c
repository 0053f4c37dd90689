/* Op-level dispatch of lp iterations (steps.h). */
#include "steps.h"

#include "scheduler.h"
#include "sl_error.h"

#include <stddef.h>

bool sl_steps_wanted(unsigned policy_caps, bool ablated, const sl_gaps *gaps, bool job_hp)
{
    return (policy_caps & SL_POLICY_STEPWISE) && !ablated && gaps->n_hp > 0 && !job_hp;
}

void sl_steps_init(sl_steps *s, sl_gaps *gaps, const sl_steps_config *cfg)
{
    *s = (sl_steps){.gaps = gaps};
    s->cfg = cfg ? *cfg : (sl_steps_config){.gap_fill = true};
}

/* The parts op k goes in: as many as bring each under the part length by
 * its predicted duration, when it splits. The length is the configured
 * one or, for steps fitted into gaps (serial) and isolated ones, half the
 * room the hp jobs leave (sl_gaps_min_room) when less (but not under
 * SL_STEPS_MIN_PART_NS). Concurrent steps go whatever the gaps: parts cut
 * to short gaps would only cost them their width (wave quantisation) and
 * a launch each. */
static uint32_t plan_parts(const sl_steps *s, const sl_steps_task *t, uint32_t k,
                           const sl_steps_ops *ops, void *arg)
{
    if (!s->cfg.gap_fill)
        return 1;
    uint64_t op_ns = sl_gaps_lp_predict(s->gaps, t->lp, k);
    uint64_t part_ns = s->cfg.part_ns ? s->cfg.part_ns : SL_STEPS_PART_NS;
    bool by_room = !s->cfg.concurrent || s->cfg.isolated;
    uint64_t half_room = by_room ? sl_gaps_min_room(s->gaps) / 2 : UINT64_MAX;
    if (half_room < part_ns)
        part_ns = half_room > SL_STEPS_MIN_PART_NS ? half_room : SL_STEPS_MIN_PART_NS;
    if (op_ns <= part_ns)
        return 1;
    uint64_t parts = (op_ns + part_ns - 1) / part_ns, most = ops->split_max(arg, t, k);
    if (parts > SL_STEPS_MAX_PARTS)
        parts = SL_STEPS_MAX_PARTS;
    if (most < 1)
        most = 1;
    return (uint32_t) (parts < most ? parts : most);
}

/* Whether op k of t has a measured duration (a segment grows only over
 * those: an unmeasured op's prediction is a guess). */
static bool measured(const sl_steps_task *t, uint32_t k)
{
    return k < t->lp->n_ops && t->lp->ops[k].n > 0;
}

/* t's next step: ops [next_op, *end), in *parts parts when one op splits;
 * returns its predicted duration (a part's, when in parts). A failed task's
 * next step is its last, whatever is left. */
static uint64_t plan_step(const sl_steps *s, const sl_steps_task *t, const sl_steps_ops *ops,
                          void *arg, uint32_t *end, uint32_t *parts)
{
    uint32_t k = t->next_op;
    uint64_t op_ns = sl_gaps_lp_predict(s->gaps, t->lp, k);
    *end = k + 1;
    *parts = t->parts ? t->parts : 1;
    if (t->failed) {
        *end = t->n_ops;
        return op_ns;
    }
    if (!t->parts)
        *parts = plan_parts(s, t, k, ops, arg);
    if (*parts > 1)
        return op_ns / *parts;
    uint64_t sum = op_ns, bound = s->cfg.segment_ns;
    if (bound && sum <= bound && measured(t, k)) {
        while (*end < t->n_ops && measured(t, *end)) {
            uint64_t next = sl_gaps_lp_predict(s->gaps, t->lp, *end);
            if (sum + next > bound)
                break;
            sum += next;
            ++*end;
        }
    }
    return sum;
}

uint64_t sl_steps_next_ns(const sl_steps *s, const sl_steps_task *t, const sl_steps_ops *ops,
                          void *arg, uint32_t *end)
{
    uint32_t e, parts;
    uint64_t ns = plan_step(s, t, ops, arg, &e, &parts);
    if (end)
        *end = e;
    return ns;
}

void sl_steps_begin(sl_steps *s, sl_steps_task *t, uint64_t now)
{
    t->parked_ns = now;
    t->parked_next = NULL;
    sl_steps_task **pp = &s->parked;
    while (*pp) /* oldest first: lp lanes take turns */
        pp = &(*pp)->parked_next;
    *pp = t;
}

/* Measures t's step in flight, which took `took`. */
static void observe(sl_steps *s, sl_steps_task *t, uint64_t took)
{
    if (t->step_end - t->step_op <= 1) {
        sl_gaps_lp_observe(s->gaps, t->lp, t->step_op, took * t->step_parts);
        return;
    }
    /* one completion for the segment: each op gets the share its
     * prediction had (every op of a segment was measured before) */
    double sum = 0;
    for (uint32_t k = t->step_op; k < t->step_end; k++)
        sum += (double) sl_gaps_lp_predict(s->gaps, t->lp, k) + 1;
    for (uint32_t k = t->step_op; k < t->step_end; k++) {
        double share = ((double) sl_gaps_lp_predict(s->gaps, t->lp, k) + 1) / sum;
        sl_gaps_lp_observe(s->gaps, t->lp, k, (uint64_t) ((double) took * share + 0.5));
    }
}

void sl_steps_op_done(sl_steps *s, sl_steps_task *t, uint64_t now)
{
    s->lp_in_flight--;
    observe(s, t, now - t->op_start_ns);
    sl_steps_begin(s, t, now);
}

void sl_steps_last_done(sl_steps *s, sl_steps_task *t, uint64_t now)
{
    s->lp_in_flight--;
    if (!t->failed)
        observe(s, t, now - t->op_start_ns);
}

/* Whether an lp step of op_ns may be issued now: (gap filling) it fits the
 * hp jobs' gaps, or (without) no hp work is pending. */
static sl_gaps_decision decide(const sl_steps *s, uint64_t now, uint64_t op_ns)
{
    /* isolated steps cannot delay an hp iteration by holding its SMs: the
     * gaps' risk test is moot, only pending hp work makes them wait.
     * Concurrent ones bound an hp request's wait by one segment's time
     * instead of by the gaps' risk (steps.h) */
    if (!s->cfg.gap_fill || s->cfg.isolated || s->cfg.concurrent)
        return sl_gaps_hp_pending(s->gaps) ? SL_GAPS_WAIT_PENDING : SL_GAPS_ISSUE_FREE;
    return sl_gaps_decide(s->gaps, now, op_ns);
}

/* Issues t's next step (a segment, or the next part of a long op) and the
 * completion after it. */
static void issue_step(sl_steps *s, sl_steps_task *t, uint64_t now, const sl_steps_ops *ops,
                       void *arg)
{
    uint32_t k = t->next_op, end, parts;
    (void) plan_step(s, t, ops, arg, &end, &parts);
    if (t->parts == 0) {
        t->parts = parts;
        t->part = 0;
        s->ops_split += t->parts > 1;
    }
    t->step_op = k;
    t->step_end = end;
    s->segments += end - k > 1 && !t->failed;
    t->step_parts = t->parts;
    t->op_start_ns = now;
    if (!t->failed && ops->issue(arg, t, k, end, t->part, t->parts) != SL_OK)
        t->failed = true;
    if (++t->part >= t->parts) {
        t->next_op = end;
        t->parts = 0;
    }
    bool last = t->next_op >= t->n_ops || t->failed;
    if (ops->finish(arg, t, last) == SL_OK && ++s->lp_in_flight > s->lp_in_flight_max)
        s->lp_in_flight_max = s->lp_in_flight;
}

uint64_t sl_steps_resume(sl_steps *s, uint64_t now, bool force, const sl_steps_ops *ops, void *arg)
{
    uint64_t wake = 0;
    uint64_t starve = s->cfg.starve_ns ? s->cfg.starve_ns : SL_STEPS_STARVE_NS;
    sl_steps_task **pp = &s->parked;
    bool several = s->cfg.isolated || s->cfg.concurrent;
    force |= s->finishing;
    while (*pp) {
        sl_steps_task *t = *pp;
        if (!force && s->lp_in_flight > 0 && !several)
            return 0; /* its completion resumes the rest */
        sl_gaps_decision d = decide(s, now, sl_steps_next_ns(s, t, ops, arg, NULL));
        if (!force && s->lp_in_flight > 0 && d != SL_GAPS_ISSUE_FREE)
            return 0; /* several: only while no hp work is pending (a
                       * completion resumes the rest) */
        /* starvation guard: a task that waited a whole starve period for a
         * gap its next op fits gets one step anyway when no hp work is
         * pending (the bound of one step still holds) */
        bool starved = d == SL_GAPS_WAIT_GAP && now - t->parked_ns > starve;
        if (force || starved || t->failed || d == SL_GAPS_ISSUE_FREE || d == SL_GAPS_ISSUE_GAP) {
            *pp = t->parked_next;
            issue_step(s, t, now, ops, arg);
            continue;
        }
        if (d == SL_GAPS_WAIT_GAP) {
            /* re-check when the gap filler's decision may turn, or when the
             * task starves, whichever first */
            uint64_t at = sl_gaps_recheck_at(s->gaps, now);
            uint64_t starved_at = t->parked_ns + starve + 1;
            at = starved_at < at ? starved_at : at;
            if (!wake || at < wake)
                wake = at;
        }
        pp = &t->parked_next;
    }
    return wake;
}
