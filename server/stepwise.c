/* The executor's op-by-op half (exec.h): beside high-priority jobs, under a
 * policy with SL_POLICY_STEPWISE, the other jobs' iterations go op by op,
 * with at most one such step on the device at a time, device-wide; with
 * SL_POLICY_GAP_FILL a step is issued only when it fits the high-priority
 * jobs' predicted idle gaps (sched/gaps.h), and long ops go in parts that
 * fit (kernels/ops/ops.h sl_op_split). Parked iterations wait for the slot
 * or a gap; a timer re-checks them when a gap may open. */
#include "exec_internal.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

/* Longest a low-priority iteration waits for a gap its next op fits before
 * it is given one op in whatever gap there is. */
#define STARVE_NS (5 * 1000 * 1000ull)
/* A long op is split into at most this many parts, of at least this long
 * (shorter ones would be mostly launch and callback). */
#define MAX_PARTS 16
#define MIN_PART_NS (100 * 1000ull)

static void op_done(void *arg, int status);

/* Stepwise, the parts op k goes in: as many as bring each under the part
 * length by its predicted duration, when it splits (ops.h). The length is
 * the configured one, or half the room the shortest high-priority gap
 * leaves when that is less (but not under MIN_PART_NS). */
static uint32_t plan_parts(const sl_exec *ex, const sl_exec_task *t, uint32_t k)
{
    if (ex->cfg->no_gap_fill || !(sl_exec_caps(ex) & SL_POLICY_GAP_FILL))
        return 1;
    uint64_t op_ns = sl_gaps_lp_predict(&ex->gaps, &t->graph->lp, k);
    uint64_t part_ns = ex->cfg->op_part_ns ? ex->cfg->op_part_ns : SL_DEFAULT_OP_PART_NS;
    uint64_t half_room = sl_gaps_min_room(&ex->gaps) / 2;
    if (half_room < part_ns)
        part_ns = half_room > MIN_PART_NS ? half_room : MIN_PART_NS;
    if (op_ns <= part_ns || t->graph->ops[k].op == SL_OP_RESHAPE)
        return 1;
    sl_op_call call = sl_exec_op_call(ex, t, k);
    uint64_t parts = (op_ns + part_ns - 1) / part_ns, most = sl_op_split_max(&call);
    if (parts > MAX_PARTS)
        parts = MAX_PARTS;
    return (uint32_t) (parts < most ? parts : most);
}

/* The predicted duration of t's next step: its next op, or a part of it. */
static uint64_t next_step_ns(const sl_exec *ex, const sl_exec_task *t)
{
    uint64_t op_ns = sl_gaps_lp_predict(&ex->gaps, &t->graph->lp, t->next_op);
    uint32_t parts = t->parts ? t->parts : plan_parts(ex, t, t->next_op);
    return op_ns / parts;
}

/* Stepwise: submits t's next step (an op, or the next part of a long one)
 * and a callback after it (iteration_done after the last). An error stops
 * submission; the callback still comes. */
static int submit_step(sl_exec *ex, sl_exec_task *t)
{
    sl_stream *st = sl_exec_task_stream(ex, t);
    uint32_t k = t->next_op;
    if (t->parts == 0) {
        t->parts = t->status == SL_OK ? plan_parts(ex, t, k) : 1;
        t->part = 0;
        ex->stats.ops_split += t->parts > 1;
    }
    t->step_op = k;
    t->step_parts = t->parts;
    t->op_start_ns = sl_now_ns();
    int rc = t->status == SL_OK ? sl_exec_submit_op(ex, t, st, k, t->part, t->parts) : SL_OK;
    if (rc != SL_OK && t->status == SL_OK)
        t->status = rc;
    if (++t->part >= t->parts) {
        t->next_op++;
        t->parts = 0;
    }
    bool last = t->next_op >= t->graph->n_ops || t->status != SL_OK;
    rc = ex->dev->ops->host_callback(ex->dev, st, last ? sl_exec_iteration_done : op_done, t);
    if (rc == SL_OK && ++ex->stats.lp_in_flight > ex->stats.lp_in_flight_max)
        ex->stats.lp_in_flight_max = ex->stats.lp_in_flight;
    return rc;
}

void sl_exec_park(sl_exec *ex, sl_exec_task *t, uint64_t now)
{
    t->parked_ns = now;
    t->parked_next = NULL;
    sl_exec_task **pp = &ex->parked;
    while (*pp) /* oldest first: low-priority lanes take turns */
        pp = &(*pp)->parked_next;
    *pp = t;
}

void sl_exec_update_class(sl_exec *ex, sl_exec_job *j, bool leaving)
{
    bool hp = !leaving && j->joined && sl_sched_job_high_priority(ex->sched, &j->sched);
    if (hp == j->high_priority)
        return;
    if (hp)
        sl_gaps_hp_add(&ex->gaps, &j->hp);
    else
        sl_gaps_hp_remove(&ex->gaps, &j->hp);
    j->high_priority = hp;
}

/* Whether a low-priority step of op_ns may be issued now: no other one is
 * on the device, and (gap filling) it fits the high-priority jobs' gaps. */
static sl_gaps_decision decide(const sl_exec *ex, uint64_t now, uint64_t op_ns)
{
    if (ex->cfg->no_gap_fill || !(sl_exec_caps(ex) & SL_POLICY_GAP_FILL))
        return sl_gaps_hp_pending(&ex->gaps) ? SL_GAPS_WAIT_PENDING : SL_GAPS_ISSUE_FREE;
    return sl_gaps_decide(&ex->gaps, now, op_ns);
}

/* Issues parked iterations' next steps while the one low-priority slot is
 * free and the gap model allows (all of them when force); arms the timer
 * for the rest. */
void sl_exec_resume(sl_exec *ex, bool force)
{
    uint64_t now = sl_now_ns(), wake = 0;
    sl_exec_task **pp = &ex->parked;
    force |= ex->finishing;
    while (*pp) {
        sl_exec_task *t = *pp;
        if (!force && ex->stats.lp_in_flight > 0)
            return; /* its completion resumes the rest */
        sl_gaps_decision d = decide(ex, now, next_step_ns(ex, t));
        /* starvation guard: a low-priority iteration that waited a whole
         * starve period for a gap its next op fits gets one op anyway when no
         * high-priority work is pending (the bound of one op still holds) */
        bool starved = d == SL_GAPS_WAIT_GAP && now - t->parked_ns > STARVE_NS;
        if (force || starved || t->status != SL_OK || d == SL_GAPS_ISSUE_FREE ||
            d == SL_GAPS_ISSUE_GAP) {
            *pp = t->parked_next;
            if (submit_step(ex, t) != SL_OK)
                sl_log_err("exe.resume", "cannot submit the next op of job %llu",
                           (unsigned long long) t->job->sched.id);
            continue;
        }
        if (d == SL_GAPS_WAIT_GAP) {
            /* re-check when the host margin ends, or a little later: when
             * the predicted gap would be overdue at the latest */
            uint64_t host = sl_gaps_host_wait(&ex->gaps, now);
            uint64_t at = now + (host ? host : 1000000); /* 1 ms: cheap and bounded */
            if (!wake || at < wake)
                wake = at;
        }
        pp = &t->parked_next;
    }
    if (wake && ex->timer_running && (!ex->timer_deadline || wake < ex->timer_deadline)) {
        ex->timer_deadline = wake;
        pthread_cond_signal(&ex->timer_cond);
    }
}

void sl_exec_finish_parked(sl_exec *ex)
{
    ex->finishing = true;
    sl_exec_resume(ex, true);
}

void *sl_exec_timer_main(void *arg)
{
    sl_exec *ex = arg;
    pthread_mutex_lock(ex->lock);
    while (!ex->timer_stop) {
        if (!ex->timer_deadline) {
            pthread_cond_wait(&ex->timer_cond, ex->lock);
            continue;
        }
        if (sl_now_ns() < ex->timer_deadline) {
            (void) sl_cond_wait_until(&ex->timer_cond, ex->lock, ex->timer_deadline);
            continue;
        }
        ex->timer_deadline = 0;
        sl_outbox box = {0};
        sl_exec_resume(ex, false);
        ex->hooks.unlock_send(ex->hooks.arg, &box);
        pthread_mutex_lock(ex->lock);
    }
    pthread_mutex_unlock(ex->lock);
    return NULL;
}

static void op_done(void *arg, int status)
{
    sl_exec_task *t = arg;
    sl_exec *ex = t->ex;
    sl_outbox box = {0};
    pthread_mutex_lock(ex->lock);
    uint64_t now = sl_now_ns();
    ex->stats.lp_in_flight--;
    /* a part stands for its whole op: parts are even shares of its rows */
    sl_gaps_lp_observe(&ex->gaps, &t->graph->lp, t->step_op,
                       (now - t->op_start_ns) * t->step_parts);
    if (status != SL_OK && t->status == SL_OK)
        t->status = status;
    if (status == SL_EDEVICERESET)
        ex->halted = true;
    sl_exec_park(ex, t, now);
    sl_exec_resume(ex, false);
    ex->hooks.unlock_send(ex->hooks.arg, &box);
}
