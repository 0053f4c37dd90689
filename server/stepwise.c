/* The executor's op-by-op half (exec.h): beside high-priority jobs, under a
 * policy with SL_POLICY_STEPWISE, the other jobs' iterations go op by op,
 * with at most one such step on the device at a time, device-wide; with
 * SL_POLICY_GAP_FILL a step is issued only when it fits the high-priority
 * jobs' predicted idle gaps (sched/gaps.h), and long ops go in parts that
 * fit (kernels/ops/ops.h sl_op_split). Parked iterations wait for the slot
 * or a gap; a timer re-checks them when a gap may open. Which step goes
 * when is decided by sched/steps.h (shared with the simulator); this file
 * submits the steps and owns the timer. */
#include "exec_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

static void op_done(void *arg, int status);

/* The dispatcher's callbacks (sched/steps.h): how far op k of t's
 * iteration splits (ops.h), submitting a step, queuing its completion. */
static uint32_t split_max(void *arg, const sl_steps_task *st, uint32_t k)
{
    const sl_exec *ex = arg;
    const sl_exec_task *t = sl_container_of(st, const sl_exec_task, step);
    if (t->graph->ops[k].op == SL_OP_RESHAPE)
        return 1;
    sl_op_call call = sl_exec_op_call(ex, t, k);
    return sl_op_split_max(&call);
}

static int issue(void *arg, sl_steps_task *st, uint32_t k, uint32_t part, uint32_t parts)
{
    sl_exec *ex = arg;
    sl_exec_task *t = sl_container_of(st, sl_exec_task, step);
    /* ops of one iteration may change streams between steps: a step is
     * issued only once the one before it completed */
    sl_stream *spill = sl_exec_parts_spill(ex, t, k, part, parts);
    t->spilled = spill != NULL;
    if (sl_obs_tracing(ex->obs)) {
        t->trace_op_ns = sl_now_ns();
        t->trace_op_k = k;
    }
    int rc = sl_exec_submit_op(ex, t, spill ? spill : sl_exec_task_stream(ex, t), k, part, parts);
    if (rc != SL_OK && t->status == SL_OK)
        t->status = rc;
    return rc;
}

static int finish(void *arg, sl_steps_task *st, bool last)
{
    sl_exec *ex = arg;
    sl_exec_task *t = sl_container_of(st, sl_exec_task, step);
    sl_stream *s = t->spilled ? ex->parts.spill : sl_exec_task_stream(ex, t);
    int rc = ex->dev->ops->host_callback(ex->dev, s, last ? sl_exec_iteration_done : op_done, t);
    if (rc != SL_OK && t->spilled) {
        t->spilled = false;
        sl_exec_parts_spill_done(ex);
    }
    if (rc != SL_OK)
        sl_log_err("exe.resume", "cannot submit the next op of job %llu",
                   (unsigned long long) t->job->sched.id);
    return rc;
}

static const sl_steps_ops step_ops = {.split_max = split_max, .issue = issue, .finish = finish};

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
    sl_exec_parts_follow(ex);
}

/* Issues parked iterations' next steps while the one low-priority slot is
 * free and the gap model allows (all of them when force); arms the timer
 * for the rest. */
void sl_exec_resume(sl_exec *ex, bool force)
{
    ex->steps.cfg.gap_fill = !ex->cfg->no_gap_fill && (sl_exec_caps(ex) & SL_POLICY_GAP_FILL);
    uint64_t wake = sl_steps_resume(&ex->steps, sl_now_ns(), force, &step_ops, ex);
    if (wake && ex->timer_running && (!ex->timer_deadline || wake < ex->timer_deadline)) {
        ex->timer_deadline = wake;
        pthread_cond_signal(&ex->timer_cond);
    }
}

void sl_exec_finish_parked(sl_exec *ex)
{
    ex->steps.finishing = true;
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
        sl_exec_kick_held(ex, &box); /* claims between iterations that ran out */
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
    if (t->spilled) {
        t->spilled = false;
        sl_exec_parts_spill_done(ex);
    }
    if (status != SL_OK && t->status == SL_OK)
        t->status = status;
    t->step.failed |= t->status != SL_OK;
    if (sl_obs_tracing(ex->obs))
        sl_exec_trace_done(ex, t, sl_now_ns(), false);
    if (status == SL_EDEVICERESET)
        sl_exec_halt(ex);
    sl_steps_op_done(&ex->steps, &t->step, sl_now_ns());
    sl_exec_resume(ex, false);
    ex->hooks.unlock_send(ex->hooks.arg, &box);
}
