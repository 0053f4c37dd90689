/* The executor's stepwise half (exec.h): beside high-priority jobs, under a
 * policy with SL_POLICY_STEPWISE, the other jobs' iterations go in steps,
 * each a segment of ops of bounded predicted work (--lp-segment-us) or a
 * part of a long op (kernels/ops/ops.h sl_op_split), one per low-priority
 * iteration in flight while no high-priority work is pending (or one
 * device-wide with --lp-serial); with SL_POLICY_GAP_FILL a step is issued
 * only when it fits the high-priority jobs' predicted idle gaps
 * (sched/gaps.h). Parked iterations wait for a slot or a gap; a timer
 * re-checks them when a gap may open. Which step goes when is decided by
 * sched/steps.h (shared with the simulator); this file submits the steps
 * (long segments through a launcher, without the lock) and owns the
 * timer. */
#include "exec_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

/* The most ops a segment submits under the lock (as executor.c's whole
 * iterations: about 5 us each through a GPU driver); longer ones go to a
 * launcher. */
#define SEGMENT_INLINE_MAX 32u

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

/* Submits ops [first, end) of t onto st: replayed as one recorded step
 * (replay.h), or back to back, the first error stopping it. A lost device stops it too
 * (launch_stop), as a whole iteration's submission. */
static int submit_range(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t first, uint32_t end)
{
    int rc = SL_OK;
    if (atomic_load_explicit(&ex->launch_stop, memory_order_relaxed))
        return SL_EDEVICERESET;
    if (sl_exec_replay_range(ex, t, st, first, end, &rc))
        return rc;
    for (uint32_t k = first; k < end && rc == SL_OK; k++) {
        if (atomic_load_explicit(&ex->launch_stop, memory_order_relaxed))
            return SL_EDEVICERESET;
        rc = sl_exec_submit_op(ex, t, st, k, 0, 1);
    }
    return rc;
}

static int issue(void *arg, sl_steps_task *st, uint32_t first, uint32_t end, uint32_t part,
                 uint32_t parts)
{
    sl_exec *ex = arg;
    sl_exec_task *t = sl_container_of(st, sl_exec_task, step);
    /* ops of one iteration may change streams between steps: a step is
     * issued only once the one before it completed. The first step
     * follows the feeds on the lane's stream (partitions.c) */
    bool after_feeds = first == 0 && part == 0;
    sl_stream *spill = after_feeds ? NULL : sl_exec_parts_spill(ex, t, end - 1, part, parts);
    t->spilled = spill != NULL;
    if (sl_obs_tracing(ex->obs)) {
        t->trace_op_ns = sl_now_ns();
        t->trace_op_k = first;
    }
    sl_stream *s = spill ? spill : sl_exec_task_stream(ex, t);
    int rc;
    if (end - first > SEGMENT_INLINE_MAX) {
        /* finish hands it to a launcher, with its completion */
        t->seg_stream = s;
        t->seg_off_lock = true;
        return SL_OK;
    }
    if (end - first > 1)
        rc = submit_range(ex, t, s, first, end);
    else
        rc = sl_exec_submit_op(ex, t, s, first, part, parts);
    if (rc != SL_OK && t->status == SL_OK)
        t->status = rc;
    return rc;
}

/* A launcher's job (launcher.h): t's segment and its completion, without
 * the lock. If the completion cannot be queued it runs here, as the
 * device would have run it. */
static void segment_off_lock(sl_launch_job *job)
{
    sl_exec_task *t = sl_container_of(job, sl_exec_task, launch_job);
    sl_exec *ex = t->ex;
    sl_host_fn done = t->seg_last ? sl_exec_iteration_done : op_done;
    /* t's fields are fixed until its completion: no step of it is issued
     * before then, and its status is read by the completion, queued after
     * this write */
    t->off_lock = true;
    int rc = submit_range(ex, t, t->seg_stream, t->step.step_op, t->step.step_end);
    t->off_lock = false;
    if (rc != SL_OK && t->status == SL_OK)
        t->status = rc;
    rc = ex->dev->ops->host_callback(ex->dev, t->seg_stream, done, t);
    if (rc != SL_OK) {
        sl_log_err("exe.resume", "cannot queue the completion of a segment of job %llu: %s",
                   (unsigned long long) t->job->sched.id, sl_strerror(rc));
        done(t, rc);
    }
}

static int finish(void *arg, sl_steps_task *st, bool last)
{
    sl_exec *ex = arg;
    sl_exec_task *t = sl_container_of(st, sl_exec_task, step);
    if (t->seg_off_lock) {
        t->seg_off_lock = false;
        t->seg_last = last;
        t->launch_job.run = segment_off_lock;
        if (sl_launchers_submit(&ex->launchers, &t->launch_job) == SL_OK)
            return SL_OK; /* its completion comes from the launcher's job */
        /* no launcher: submitted here after all */
        int rc = submit_range(ex, t, t->seg_stream, st->step_op, st->step_end);
        if (rc != SL_OK && t->status == SL_OK)
            t->status = rc;
        st->failed |= rc != SL_OK;
    }
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
    bool low = !leaving && j->joined && !hp;
    if (hp == j->high_priority && low == j->low_priority)
        return;
    if (hp != j->high_priority) {
        if (hp)
            sl_gaps_hp_add(&ex->gaps, &j->hp);
        else
            sl_gaps_hp_remove(&ex->gaps, &j->hp);
        j->high_priority = hp;
    }
    if (low != j->low_priority) {
        if (low)
            ex->parts.n_low++;
        else
            ex->parts.n_low--;
        j->low_priority = low;
    }
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
