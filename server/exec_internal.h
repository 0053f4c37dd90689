/* What the executor's two halves (executor.c: lanes and whole iterations;
 * stepwise.c: op by op and gap filling) share. Private to them. */
#ifndef SL_EXEC_INTERNAL_H
#define SL_EXEC_INTERNAL_H

#include "exec.h"

/* The current policy's capabilities (SL_POLICY_*). */
unsigned sl_exec_caps(const sl_exec *ex);
/* The stream of the lane task t runs on. */
sl_stream *sl_exec_task_stream(sl_exec *ex, const sl_exec_task *t);
/* The call of graph op k of t's iteration. */
sl_op_call sl_exec_op_call(const sl_exec *ex, const sl_exec_task *t, uint32_t k);
/* Ops [first, end) of stepwise iteration t as one recorded step
 * (replay.h), with their fetches; false when they go op by op instead
 * (*rc untouched). */
bool sl_exec_replay_range(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t first, uint32_t end,
                          int *rc);
/* Submits part `part` of `parts` of op k onto st, with its fetches. */
int sl_exec_submit_op(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t k, uint32_t part,
                      uint32_t parts);
/* The device callback that ends an iteration (once its launcher, if any,
 * let go of it too: exec.h). */
void sl_exec_iteration_done(void *arg, int status);
/* Trace events of an iteration starting on its lane at now (its wait, and
 * a switch when the lane last ran another session). Lock held; tracing on. */
void sl_exec_trace_start(sl_exec *ex, sl_exec_task *t, uint64_t now);
/* While tracing, whether t's whole iteration is the one of its lane to
 * time op by op: if so allocates t->trace_marks (without memory the ops go
 * untimed). Lock held, before t is handed to a launcher. */
void sl_exec_trace_marks_prepare(sl_exec *ex, sl_exec_task *t);
/* With t->trace_marks: k UINT32_MAX (first, after the feeds) queues the
 * clock's start on st, k an op queues its end. Touches only t's marks and
 * the stream: t's launcher calls it, with or without the lock. */
void sl_exec_trace_marks(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t k);
/* Frees t's marks, once none is queued any more. */
void sl_exec_trace_marks_free(sl_exec_task *t);
/* Trace events of t's op in flight (op by op) and, when iteration, of the
 * whole iteration ending at now. Lock held; tracing on. */
void sl_exec_trace_done(sl_exec *ex, const sl_exec_task *t, uint64_t now, bool iteration);

/* Kicks every lane the scheduler held (sl_sched_lane_hold) and arms the
 * timer for the earliest hold deadline. Lock held. */
void sl_exec_kick_held(sl_exec *ex, sl_outbox *box);
/* Job j's gap-filling class follows its priority and the policy. */
void sl_exec_update_class(sl_exec *ex, sl_exec_job *j, bool leaving);
/* Issues parked steps that may go now (all of them when force). */
void sl_exec_resume(sl_exec *ex, bool force);
/* The gap timer thread. */
void *sl_exec_timer_main(void *arg);

#endif
