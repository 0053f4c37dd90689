/* The executor (exec.h), its whole-iteration half (stepwise.c has the
 * other): when a lane is free, the scheduler's pick for it is
 * launched onto the lane's stream in one go (feed copies, ops, fetch copies,
 * a completion callback). Completion charges device time, hands the lane to
 * the next pick and reports through the done hook: no executor thread, no
 * polling. Lanes run concurrently, each on its own stream.
 *
 * Beside high-priority jobs, under a policy that asks for it
 * (SL_POLICY_STEPWISE), the other jobs' iterations go in steps, segments of
 * bounded work (stepwise.c, sched/steps.h): a high-priority request then
 * waits for at most the segments running when it arrives. */
#include "exec_internal.h"
#include "replay.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <string.h>

/* Lanes kicked at once from the stack; more go through the heap. */
#define KICK_STACK_LANES 64
/* The gap filler's host margin (sched/gaps.h) on a device made of the
 * host's own cores: a reply's way out to a local client, or a request's way
 * in, takes some tens of microseconds there (bench/rtt). */
#define HOST_MARGIN_NS (120 * 1000ull)
/* Iterations that measured at most this long run on the thread that
 * dispatched them when their lane's stream is idle (device.h
 * stream_hold): handing them to the stream's thread and the completion back
 * costs two thread wake-ups, most of a small iteration's round trip. The
 * bound keeps that (network) thread from being taken for long. */
#define RUN_HERE_MAX_NS 100000u
/* Launchers at most (launcher.h): lanes launching long iterations at once
 * beyond this wait for one to be free. */
#define LAUNCHERS_MAX 16u

unsigned sl_exec_caps(const sl_exec *ex)
{
    return sl_sched_policy(ex->sched)->caps;
}

/* Low-priority iterations go op by op while high-priority jobs exist,
 * when the policy asks for it; everything else runs whole. */
static bool is_stepwise(const sl_exec *ex, const sl_exec_job *j)
{
    return sl_steps_wanted(sl_exec_caps(ex), ex->cfg->no_stepwise, &ex->gaps, j->high_priority);
}

/* The stream class a job's iterations run in (device.h): above normal for
 * high-priority jobs, below normal for the others while high-priority jobs
 * exist, normal otherwise. */
static int stream_priority(const sl_exec *ex, const sl_exec_job *j)
{
    if (ex->cfg->no_stream_classes)
        return 0;
    if (j->high_priority)
        return 1;
    return ex->gaps.n_hp > 0 ? -1 : 0;
}

/* ---- lanes and their streams ---------------------------------------- */

static bool spare_reserve(sl_exec *ex)
{
    if (ex->n_spare < ex->cap_spare)
        return true;
    size_t cap = ex->cap_spare ? ex->cap_spare * 2 : 8;
    sl_spare_stream *s = sl_reallocarray(ex->spare, cap, sizeof *s);
    if (!s)
        return false;
    ex->spare = s;
    ex->cap_spare = cap;
    return true;
}

/* A stream of the given priority: a spare one, or a new one. */
static int stream_take(sl_exec *ex, int priority, sl_stream **out)
{
    for (size_t k = ex->n_spare; k-- > 0;) {
        if (ex->spare[k].priority == priority) {
            *out = ex->spare[k].stream;
            ex->spare[k] = ex->spare[--ex->n_spare];
            return SL_OK;
        }
    }
    return ex->dev->ops->stream_create(ex->dev, priority, out);
}

/* The record of manager lane info->id, created (with a stream of the given
 * priority) the first time the lane runs something. */
static sl_lane *lane_get(sl_exec *ex, const sl_mem_lane_info *info, int priority)
{
    sl_lane *l = sl_map_get(&ex->lanes, info->id);
    if (l)
        return l;
    l = sl_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->id = info->id;
    l->workspace_bytes = UINT64_MAX; /* a reused stream may hold another lane's */
    l->serial = info->serial;
    l->priority = priority;
    if (stream_take(ex, priority, &l->stream) != SL_OK)
        goto out_free;
    if (sl_map_put(&ex->lanes, info->id, l))
        goto out_stream;
    return l;

out_stream:
    ex->dev->ops->stream_destroy(ex->dev, l->stream); /* idle: returns at once */
out_free:
    sl_free(l);
    return NULL;
}

/* Gives an idle lane a stream of another priority (its jobs' class
 * changed), keeping the old one spare: a stream's priority is fixed when it
 * is created (on cpu, a thread cannot leave SCHED_IDLE unprivileged).
 * Without memory the lane stays in its old class. */
static void lane_restream(sl_exec *ex, sl_lane *l, int priority)
{
    sl_stream *st;
    if (!spare_reserve(ex) || stream_take(ex, priority, &st) != SL_OK)
        return;
    ex->spare[ex->n_spare++] = (sl_spare_stream){l->stream, l->priority};
    l->stream = st;
    l->priority = priority;
    l->workspace = NULL;
    l->workspace_bytes = UINT64_MAX; /* the new stream gets the lane's block */
}

/* Lanes the manager reclaimed give their stream back to the spare list,
 * also when their id already names a new lane (different serial). */
static void lanes_collect(sl_exec *ex)
{
    /* only records of lanes that no longer exist need collecting (a reused
     * id is taken over in kick_lane): cheap to rule out per iteration */
    if (ex->lanes.count <= sl_mem_lanes(ex->mem, NULL, 0))
        return;
    size_t i = 0;
    void *v;
    uint64_t gone[16];
    int n = 0;
    while (n < 16 && sl_map_next(&ex->lanes, &i, NULL, &v)) {
        sl_lane *l = v;
        sl_mem_lane_info info;
        if (!sl_lanes_busy(&ex->handoff, l->id) &&
            (sl_mem_lane_get(ex->mem, l->id, &info) != SL_OK || info.serial != l->serial))
            gone[n++] = l->id;
    }
    for (int k = 0; k < n; k++) {
        if (!spare_reserve(ex))
            return; /* keep the lane record; collected next time */
        sl_lane *l = sl_map_del(&ex->lanes, gone[k]);
        ex->spare[ex->n_spare++] = (sl_spare_stream){l->stream, l->priority};
        sl_free(l);
    }
}

/* Destroys every stream (nothing may run) and forgets the lanes. */
static void streams_destroy(sl_device *dev, sl_map *lanes, sl_spare_stream *spare, size_t n_spare)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(lanes, &i, NULL, &v)) {
        sl_lane *l = v;
        dev->ops->stream_destroy(dev, l->stream);
        sl_free(l);
    }
    sl_map_fini(lanes);
    for (size_t k = 0; k < n_spare; k++)
        dev->ops->stream_destroy(dev, spare[k].stream);
    sl_free(spare);
}

/* ---- submitting an iteration ---------------------------------------- */

static void *value_ptr(const sl_exec *ex, const sl_exec_task *t, uint32_t v)
{
    const sl_value *val = &t->graph->values[v];
    uint64_t addr = val->kind == SL_VALUE_PARAM ? val->tensor->addr : t->ephemeral_base + val->addr;
    return sl_exec_ptr(ex, addr);
}

/* Whether value v must be copied out before the op of its last step runs:
 * that op writes its output over v's memory (in-place execution, graph.c).
 * Its own output shares the memory but is written by it, so it is not. */
static bool fetch_before_op(const sl_graph *g, uint32_t v)
{
    const sl_value *val = &g->values[v];
    if (val->kind == SL_VALUE_PARAM || val->last_step == 0)
        return false;
    const sl_graph_op *op = &g->ops[val->last_step - 1];
    return op->inplace_in >= 0 && v != op->out[0] &&
           g->values[op->in[op->inplace_in]].root == val->root;
}

/* Copies out every fetch whose value is final once `step` has run, or (with
 * before_op) those that step's op is about to overwrite in place. */
static int fetch_at(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t step, bool last,
                    bool before_op)
{
    for (size_t j = 0; j < t->n_fetches; j++) {
        const sl_value *val = &t->graph->values[t->fetches[j]];
        bool due =
            val->kind == SL_VALUE_PARAM
                ? last && !before_op /* params: after the whole iteration */
                : val->last_step == step && fetch_before_op(t->graph, t->fetches[j]) == before_op;
        if (!due)
            continue;
        int rc =
            ex->dev->ops->memcpy_d2h(ex->dev, st, t->fetch_dst[j], value_ptr(ex, t, t->fetches[j]),
                                     sl_shape_bytes(&val->shape));
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* The call of graph op k of t's iteration. */
sl_op_call sl_exec_op_call(const sl_exec *ex, const sl_exec_task *t, uint32_t k)
{
    const sl_graph *g = t->graph;
    const sl_graph_op *op = &g->ops[k];
    sl_op_call call = {
        .op = op->op, .n_in = op->n_in, .n_out = op->n_out, .math = t->math, .attrs = op->attrs};
    uint64_t version = atomic_load(&ex->param_version);
    for (unsigned i = 0; i < op->n_in; i++) {
        const sl_value *v = &g->values[op->in[i]];
        call.in[i] = (sl_tensor_ref){value_ptr(ex, t, op->in[i]), v->shape};
        call.in_version[i] = v->kind == SL_VALUE_PARAM ? version : 0;
    }
    for (unsigned o = 0; o < op->n_out; o++)
        call.out[o] = (sl_tensor_ref){value_ptr(ex, t, op->out[o]), g->values[op->out[o]].shape};
    return call;
}

/* Whether op writes a persistent tensor (an input it mutates is a param). */
static bool writes_param(const sl_graph *g, const sl_graph_op *op)
{
    unsigned mutates = sl_op_get(op->op)->mutates;
    for (unsigned i = 0; i < op->n_in; i++)
        if ((mutates >> i & 1) && g->values[op->in[i]].kind == SL_VALUE_PARAM)
            return true;
    return false;
}

static bool graph_writes_params(const sl_graph *g)
{
    for (uint32_t k = 0; k < g->n_ops; k++)
        if (writes_param(g, &g->ops[k]))
            return true;
    return false;
}

/* Submits part `part` of `parts` of op k (parts 1: the whole op), with the
 * fetches due before its first part and after its last. */
int sl_exec_submit_op(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t k, uint32_t part,
                      uint32_t parts)
{
    const sl_graph_op *op = &t->graph->ops[k];
    bool last_op = k + 1 == t->graph->n_ops;
    int rc = SL_OK;
    if (part == 0 && op->inplace_in >= 0)
        rc = fetch_at(ex, t, st, k + 1, last_op, true);
    if (rc == SL_OK && op->op != SL_OP_RESHAPE) { /* a view: nothing to run */
        sl_op_call call = sl_exec_op_call(ex, t, k), piece;
        if (parts > 1 && (rc = sl_op_split(&call, parts, part, &piece)) == SL_OK)
            call = piece;
        if (rc == SL_OK)
            rc = ex->dev->ops->launch(ex->dev, st, &call);
        /* ops submitted from now on see the param's new version */
        if (writes_param(t->graph, op))
            atomic_fetch_add(&ex->param_version, 1);
    }
    if (rc == SL_OK && part + 1 == parts)
        rc = fetch_at(ex, t, st, k + 1, last_op, false);
    return rc;
}

/* ---- iteration graphs (replay.h) ---- */

/* Whether fetch_at(step, last, before_op) would copy anything. */
static bool fetch_due(const sl_exec_task *t, uint32_t step, bool last, bool before_op)
{
    for (size_t j = 0; j < t->n_fetches; j++) {
        const sl_value *val = &t->graph->values[t->fetches[j]];
        if (val->kind == SL_VALUE_PARAM
                ? last && !before_op
                : val->last_step == step && fetch_before_op(t->graph, t->fetches[j]) == before_op)
            return true;
    }
    return false;
}

/* Whether a segment ends after op k: the last op, a fetch due after it,
 * or one due before the next op (which writes over it in place). */
static bool segment_ends(const sl_exec_task *t, uint32_t k)
{
    const sl_graph *g = t->graph;
    if (k + 1 == g->n_ops || fetch_due(t, k + 1, false, false))
        return true;
    return g->ops[k + 1].inplace_in >= 0 && fetch_due(t, k + 2, k + 2 == g->n_ops, true);
}

static bool replayable(const sl_exec *ex, const sl_exec_task *t)
{
    return ex->dev->ops->graph_begin && !ex->cfg->no_graphs && !t->trace_marks &&
           t->graph->replay && t->graph->n_ops > 0;
}

/* The key of ops [first, end) of t on st (replay.h): what their calls hold
 * that can change between iterations of one graph (the stream, where it
 * runs and its workspace, the math bits, every operand's address, the
 * resets and partition layouts so far); the ops, shapes and attributes are
 * the graph's own. *writes counts the ops that write params. */
static uint64_t range_key(const sl_exec *ex, const sl_exec_task *t, const sl_stream *st,
                          uint32_t first, uint32_t end, uint32_t *writes)
{
    const sl_graph *g = t->graph;
    uint64_t key = sl_replay_key_start(st);
    key = sl_replay_key_add(key, atomic_load(&ex->resets));
    key = sl_replay_key_add(key, atomic_load(&ex->binds));
    key = sl_replay_key_add(key, t->place);
    key = sl_replay_key_add(key, t->math);
    *writes = 0;
    for (uint32_t k = first; k < end; k++) {
        const sl_graph_op *op = &g->ops[k];
        if (op->op == SL_OP_RESHAPE)
            continue;
        for (unsigned i = 0; i < op->n_in; i++)
            key = sl_replay_key_add(key, (uint64_t) (uintptr_t) value_ptr(ex, t, op->in[i]));
        for (unsigned o = 0; o < op->n_out; o++)
            key = sl_replay_key_add(key, (uint64_t) (uintptr_t) value_ptr(ex, t, op->out[o]));
        *writes += writes_param(g, op);
    }
    return key;
}

/* Records ops [k, end) of t as one executable; *exec stays NULL for views
 * only. Runs nothing. */
static int record_segment(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t k, uint32_t end,
                          sl_dev_graph **exec, size_t *bytes, char *reason, size_t len)
{
    sl_device *dev = ex->dev;
    bool any = false;
    for (uint32_t j = k; j < end && !any; j++)
        any = t->graph->ops[j].op != SL_OP_RESHAPE;
    *exec = NULL;
    if (!any)
        return SL_OK;
    int rc = dev->ops->graph_begin(dev, st);
    if (rc != SL_OK) {
        snprintf(reason, len, "cannot start recording: %s", sl_strerror(rc));
        return rc;
    }
    for (uint32_t j = k; j < end && rc == SL_OK; j++) {
        if (t->graph->ops[j].op == SL_OP_RESHAPE)
            continue;
        sl_op_call call = sl_exec_op_call(ex, t, j);
        if ((rc = dev->ops->launch(dev, st, &call)) != SL_OK)
            snprintf(reason, len, "op %u (%s) cannot be recorded: %s", j, sl_op_get(call.op)->name,
                     sl_strerror(rc));
    }
    size_t b = 0;
    char why[96] = "";
    int end_rc = dev->ops->graph_end(dev, st, exec, &b, why, sizeof why);
    if (rc == SL_OK && end_rc != SL_OK) {
        rc = end_rc;
        snprintf(reason, len, "%s", why);
    } else if (rc != SL_OK && end_rc == SL_OK) {
        dev->ops->graph_destroy(dev, *exec);
        *exec = NULL;
    }
    if (rc == SL_OK)
        *bytes += b;
    return rc;
}

/* Charges r's recordings to t's session (replay.h, "Memory"), or gives
 * back what destroyed ones held. The manager and the tenants' counts
 * (the hooks) are the server lock's: taken here when a launcher submits
 * t, after r->lock was let go (the lock comes before r->lock), and held
 * only for these few O(1) calls. On a refusal why (when given) says so. */
static int graph_charge(sl_exec *ex, const sl_exec_task *t, sl_replay *r, char *why, size_t len)
{
    if (t->off_lock)
        pthread_mutex_lock(ex->lock);
    int reason = SL_MEM_FITS;
    uint64_t held = r->charged, want = sl_replay_bytes(r);
    /* what the session's persistent region cannot hold costs its tenant:
     * asked before the charge, with the lock held between */
    uint64_t outside =
        want > held ? sl_mem_framework_outside(ex->mem, t->job->sched.id, want - held) : 0;
    char tenant_why[sizeof r->reason] = "";
    if (outside && ex->hooks.recording_room &&
        !ex->hooks.recording_room(ex->hooks.arg, t->job, outside, tenant_why, sizeof tenant_why)) {
        if (why)
            snprintf(why, len, "%s", tenant_why);
        if (t->off_lock)
            pthread_mutex_unlock(ex->lock);
        return SL_EEXHAUSTED;
    }
    int rc = sl_replay_charge(r, ex->mem, t->job->sched.id, &reason);
    if (rc == SL_OK && want != held && ex->hooks.recordings_charged)
        ex->hooks.recordings_charged(ex->hooks.arg, t->job);
    if (rc != SL_OK && why) {
        /* refused: the recordings hold more than was charged */
        uint64_t want = sl_replay_bytes(r) - held;
        sl_mem_stats ms;
        sl_mem_get_stats(ex->mem, &ms);
        if (reason == SL_MEM_QUOTA)
            snprintf(why, len, "no memory for the graph: %llu bytes, beyond the session's quota",
                     (unsigned long long) want);
        else
            snprintf(why, len, "no memory for the graph: %llu bytes, %llu free",
                     (unsigned long long) want, (unsigned long long) ms.free);
    }
    if (t->off_lock)
        pthread_mutex_unlock(ex->lock);
    return rc;
}

/* Submits t's ops as r's recorded segments, each fetch between them as
 * it would go op by op. */
static int replay_segments(sl_exec *ex, sl_exec_task *t, sl_stream *st, const sl_replay *r)
{
    uint32_t n = t->graph->n_ops, k = 0;
    int rc = SL_OK;
    for (uint32_t i = 0; i < r->n_seg && rc == SL_OK; i++) {
        uint32_t end = r->seg_end[i];
        if (t->graph->ops[k].inplace_in >= 0)
            rc = fetch_at(ex, t, st, k + 1, k + 1 == n, true);
        if (rc == SL_OK && r->exec[i])
            rc = ex->dev->ops->graph_launch(ex->dev, st, r->exec[i]);
        if (rc == SL_OK)
            rc = fetch_at(ex, t, st, end, end == n, false);
        k = end;
    }
    return rc;
}

/* Ops [first, end) of stepwise t replayed, or recorded and replayed, as
 * one step (replay.h); *rc is the submission's result. Returns false when
 * they are to go op by op: no recording, or a fetch due between them. */
bool sl_exec_replay_range(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t first, uint32_t end,
                          int *rc)
{
    const sl_graph *g = t->graph;
    sl_replay *r = g->replay;
    if (!ex->dev->ops->graph_begin || ex->cfg->no_graphs || !r || end - first < 2)
        return false;
    for (uint32_t k = first; k + 1 < end; k++)
        if (segment_ends(t, k))
            return false; /* a fetch inside: op by op */
    uint32_t writes;
    uint64_t key = range_key(ex, t, st, first, end, &writes);
    pthread_mutex_lock(&r->lock);
    if (!r->steps) {
        r->steps = sl_calloc(g->n_ops, sizeof *r->steps);
        r->n_ops = r->steps ? g->n_ops : 0;
        r->dev = ex->dev;
    }
    sl_replay_step *s = r->steps ? &r->steps[first] : NULL;
    bool have = s && s->exec && s->end == end && s->key == key;
    if (!s || (!have && (key != s->seen_key || key == s->failed_key))) {
        if (s)
            s->seen_key = key; /* first sighting, or refused: op by op */
        pthread_mutex_unlock(&r->lock);
        return false;
    }
    if (!have) {
        if (s->exec)
            ex->dev->ops->graph_destroy(ex->dev, s->exec);
        s->exec = NULL;
        s->bytes = 0;
        int got =
            record_segment(ex, t, st, first, end, &s->exec, &s->bytes, r->reason, sizeof r->reason);
        char why[sizeof r->reason];
        if (got == SL_OK && s->exec) {
            pthread_mutex_unlock(&r->lock);
            got = graph_charge(ex, t, r, why, sizeof why);
            pthread_mutex_lock(&r->lock);
            if (got != SL_OK) {
                ex->dev->ops->graph_destroy(ex->dev, s->exec);
                s->exec = NULL;
                s->bytes = 0;
                memcpy(r->reason, why, sizeof why);
            }
        }
        if (got != SL_OK || !s->exec) {
            s->failed_key = key;
            r->fallbacks += got != SL_OK;
            if (got != SL_OK)
                sl_log_warn("exe.graph", "steps of graph %llu run op by op: %s",
                            (unsigned long long) g->id, r->reason);
            pthread_mutex_unlock(&r->lock);
            (void) graph_charge(ex, t, r, NULL, 0); /* what the old recording held */
            return false;
        }
        s->end = end;
        s->key = key;
        r->recordings++;
    }
    *rc = SL_OK;
    if (g->ops[first].inplace_in >= 0)
        *rc = fetch_at(ex, t, st, first + 1, first + 1 == g->n_ops, true);
    if (*rc == SL_OK)
        *rc = ex->dev->ops->graph_launch(ex->dev, st, s->exec);
    if (*rc == SL_OK)
        *rc = fetch_at(ex, t, st, end, end == g->n_ops, false);
    r->replays++;
    pthread_mutex_unlock(&r->lock);
    if (writes)
        atomic_fetch_add(&ex->param_version, writes);
    return true;
}

/* t's ops replayed, or recorded and replayed (replay.h). Returns false when
 * they are to go op by op instead (t->status untouched). */
static bool submit_replayed(sl_exec *ex, sl_exec_task *t, sl_stream *st)
{
    const sl_graph *g = t->graph;
    sl_replay *r = g->replay;
    uint32_t n_seg = 0, writes;
    uint64_t key = range_key(ex, t, st, 0, g->n_ops, &writes);
    for (uint32_t k = 0; k < g->n_ops; k++)
        if (segment_ends(t, k)) {
            key = sl_replay_key_add(key, k + 1);
            n_seg++;
        }
    pthread_mutex_lock(&r->lock);
    bool have = r->n_seg > 0 && r->key == key;
    if (!have && (key != r->seen_key || key == r->failed_key)) {
        r->seen_key = key; /* first sighting, or refused: op by op */
        pthread_mutex_unlock(&r->lock);
        return false;
    }
    if (!have) {
        sl_replay_drop(r);
        r->dev = ex->dev;
        r->exec = sl_calloc(n_seg, sizeof *r->exec);
        r->seg_end = sl_calloc(n_seg, sizeof *r->seg_end);
        int rc = r->exec && r->seg_end ? SL_OK : SL_ENOMEM;
        if (rc != SL_OK)
            snprintf(r->reason, sizeof r->reason, "out of host memory");
        for (uint32_t k = 0, from = 0; k < g->n_ops && rc == SL_OK; k++) {
            if (!segment_ends(t, k))
                continue;
            rc = record_segment(ex, t, st, from, k + 1, &r->exec[r->n_seg], &r->bytes, r->reason,
                                sizeof r->reason);
            r->seg_end[r->n_seg++] = k + 1;
            from = k + 1;
        }
        char why[sizeof r->reason];
        if (rc == SL_OK) {
            pthread_mutex_unlock(&r->lock);
            rc = graph_charge(ex, t, r, why, sizeof why);
            pthread_mutex_lock(&r->lock);
            if (rc != SL_OK)
                memcpy(r->reason, why, sizeof why);
        }
        if (rc != SL_OK) {
            sl_replay_drop(r);
            r->failed_key = key;
            r->fallbacks++;
            sl_log_warn("exe.graph", "graph %llu runs op by op: %s", (unsigned long long) g->id,
                        r->reason);
            pthread_mutex_unlock(&r->lock);
            (void) graph_charge(ex, t, r, NULL, 0); /* what the old recording held */
            return false;
        }
        r->key = key;
        r->recordings++;
        r->reason[0] = 0;
    }
    t->status = replay_segments(ex, t, st, r);
    r->replays++;
    pthread_mutex_unlock(&r->lock);
    /* ops submitted from now on see the params' new versions */
    if (writes)
        atomic_fetch_add(&ex->param_version, writes);
    return true;
}

sl_stream *sl_exec_task_stream(sl_exec *ex, const sl_exec_task *t)
{
    sl_lane *l = sl_map_get(&ex->lanes, t->lane);
    return l->stream;
}

/* Gives the lane's stream the lane's framework block as its workspace
 * (device.h), when it is not already its workspace: idle lanes move. */
static int lane_workspace(sl_exec *ex, sl_lane *l, const sl_mem_lane_info *info)
{
    void *ws = info->framework ? sl_exec_ptr(ex, info->framework_base) : NULL;
    if (ws == l->workspace && info->framework == l->workspace_bytes)
        return SL_OK;
    int rc = ex->dev->ops->stream_set_workspace(ex->dev, l->stream, ws, info->framework);
    if (rc == SL_OK) {
        l->workspace = ws;
        l->workspace_bytes = info->framework;
    }
    return rc;
}

/* Fixes, under the lock, everything t's submission reads (exec.h): the
 * lane's workspace, the stream, the math bits, the trace marks. An error
 * is kept in t->status (the submission then queues only the callback). */
static void launch_prepare(sl_exec *ex, sl_exec_task *t, sl_lane *l, const sl_mem_lane_info *info)
{
    t->status = lane_workspace(ex, l, info);
    t->stream = l->stream;
    t->place =
        sl_replay_key_add(sl_replay_key_start(l->bound), (uint64_t) (uintptr_t) l->workspace);
    t->place = sl_replay_key_add(t->place, l->workspace_bytes);
    t->failure[0] = 0;
    t->math = t->job->math;
    t->device_status = SL_OK;
    atomic_store(&t->launch_refs, 1); /* the device callback's */
    if (!t->stepwise && sl_obs_tracing(ex->obs))
        sl_exec_trace_marks_prepare(ex, t);
}

/* Submits the run's tensor writes and the feeds, then (whole iterations)
 * every op with its fetches and
 * the completion callback; the first error stops submission and stays in
 * t->status, the callback still being queued so the iteration finishes
 * through one path. Reads only what launch_prepare fixed: runs under the
 * lock or on a launcher without it. Returns the callback's queuing error
 * (stepwise: SL_OK; its steps come later). */
static int launch_submit(sl_exec *ex, sl_exec_task *t)
{
    sl_device *dev = ex->dev;
    sl_stream *st = t->stream;
    const sl_graph *g = t->graph;
    int rc = t->status;
    for (size_t i = 0; i < t->n_writes && rc == SL_OK; i++)
        rc = dev->ops->memcpy_h2d(dev, st, sl_exec_ptr(ex, t->writes[i].tensor->addr),
                                  t->writes[i].src, t->writes[i].bytes);
    /* ops submitted from now on see the written tensors' new version */
    if (t->n_writes)
        atomic_fetch_add(&ex->param_version, 1);
    for (uint32_t i = 0; i < g->n_inputs && rc == SL_OK; i++)
        rc = dev->ops->memcpy_h2d(dev, st, value_ptr(ex, t, i), t->feed_src[i],
                                  sl_shape_bytes(&g->values[i].shape));
    if (rc == SL_OK)
        rc = fetch_at(ex, t, st, 0, g->n_ops == 0, false);
    t->status = rc;
    if (t->stepwise)
        return SL_OK;
    if (t->trace_marks)
        sl_exec_trace_marks(ex, t, st, UINT32_MAX);
    bool replayed = t->status == SL_OK && replayable(ex, t) &&
                    !atomic_load_explicit(&ex->launch_stop, memory_order_relaxed) &&
                    submit_replayed(ex, t, st);
    for (uint32_t k = 0; !replayed && k < g->n_ops && t->status == SL_OK; k++) {
        /* a lost device fails everything anyway: stop queuing into it */
        if (atomic_load_explicit(&ex->launch_stop, memory_order_relaxed)) {
            t->status = SL_EDEVICERESET;
            break;
        }
        t->status = sl_exec_submit_op(ex, t, st, k, 0, 1);
        if (t->trace_marks && t->status == SL_OK)
            sl_exec_trace_marks(ex, t, st, k);
    }
    return dev->ops->host_callback(dev, st, sl_exec_iteration_done, t);
}

/* A stepwise iteration whose feeds are submitted waits for its first step
 * (sched/steps.h). Lock held. */
static void launch_steps(sl_exec *ex, sl_exec_task *t)
{
    t->step = (sl_steps_task){
        .lp = &t->graph->lp, .n_ops = t->graph->n_ops, .failed = t->status != SL_OK};
    sl_steps_begin(&ex->steps, &t->step, sl_now_ns());
    sl_exec_resume(ex, false);
}

/* How many submissions an iteration may make under the lock: a bound on
 * the lock's hold per iteration (about 5 us each through a GPU driver).
 * Longer iterations go to a launcher, paying its wake-up instead. */
#define LAUNCH_INLINE_MAX 32u

static bool launch_inline(const sl_exec_task *t)
{
    const sl_graph *g = t->graph;
    uint64_t n = (uint64_t) g->n_inputs + t->n_fetches + (t->stepwise ? 0 : g->n_ops);
    return n <= LAUNCH_INLINE_MAX;
}

static void iteration_end(sl_exec_task *t);

/* A launcher's job (launcher.h): t's submission without the lock. */
static void launch_off_lock(sl_launch_job *job)
{
    sl_exec_task *t = sl_container_of(job, sl_exec_task, launch_job);
    sl_exec *ex = t->ex;
    t->off_lock = true;
    int rc = launch_submit(ex, t);
    t->off_lock = false;
    if (t->stepwise) {
        /* its steps' completions end it: the launcher lets go now */
        atomic_fetch_sub(&t->launch_refs, 1);
        sl_outbox box = {0};
        pthread_mutex_lock(ex->lock);
        launch_steps(ex, t);
        ex->hooks.unlock_send(ex->hooks.arg, &box);
        return;
    }
    if (rc != SL_OK) {
        /* no callback will come: end it here, as the device would have */
        sl_log_err("exe.launch", "cannot queue the completion of an iteration of job %llu: %s",
                   (unsigned long long) t->job->sched.id, sl_strerror(rc));
        t->device_status = rc;
        iteration_end(t);
        return;
    }
    /* the last to let go of t ends it; t may be gone once this drops */
    if (atomic_fetch_sub(&t->launch_refs, 1) == 1)
        iteration_end(t);
}

/* Submits t now, under the lock, or hands it to a launcher (exec.h).
 * Errors (t then fails through fail_task): the callback's queuing, inline. */
static int launch(sl_exec *ex, sl_exec_task *t, sl_lane *l, const sl_mem_lane_info *info, bool here)
{
    launch_prepare(ex, t, l, info);
    if (!here && !launch_inline(t)) {
        atomic_store(&t->launch_refs, 2); /* the launcher's and the callback's */
        t->launch_job.run = launch_off_lock;
        if (sl_launchers_submit(&ex->launchers, &t->launch_job) == SL_OK)
            return SL_OK;
        atomic_store(&t->launch_refs, 1); /* no launcher: here after all */
    }
    int rc = launch_submit(ex, t);
    if (t->stepwise)
        launch_steps(ex, t);
    return rc;
}

/* ---- gap filling ------------------------------------------------------ */

/* Small by the registry's cost model: a few microseconds of work on one
 * core, whatever the load. The measured time alone is not enough: on a
 * saturated host an iteration's wall time includes waiting for a core, so
 * tiny iterations would stop qualifying exactly when hand-offs cost most. */
#define RUN_HERE_MAX_FLOPS (1u << 20)
#define RUN_HERE_MAX_BYTES (1u << 20)

static bool runs_here(const sl_exec *ex, const sl_exec_task *t)
{
    const sl_graph *g = t->graph;
    if (!ex->dev->ops->stream_hold || t->stepwise)
        return false;
    bool tiny = g->flops <= RUN_HERE_MAX_FLOPS && g->plan.peak <= RUN_HERE_MAX_BYTES;
    return tiny || (g->iter_ewma_ns && g->iter_ewma_ns <= RUN_HERE_MAX_NS);
}

/* What sort of iteration a graph's is, for the partition search's
 * references (sched/partition.h): sessions serving one model register
 * graphs of the same size, work and memory, and share one key. */
static uint64_t iteration_kind(const sl_graph *g)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    const uint64_t parts[3] = {g->n_ops, g->flops, g->plan.peak};
    for (int i = 0; i < 3; i++)
        h = (h ^ parts[i]) * 0x100000001b3ull;
    return h ? h : 1; /* 0 means no time */
}

/* Ends a task that never reached the device. */
static void fail_task(sl_exec *ex, sl_exec_task *t, int status, sl_outbox *box)
{
    sl_sched_complete(ex->sched, &t->job->sched, 0, sl_now_ns());
    if (t->online) { /* counted in the partition's load: no completion will end it */
        t->online = false;
        sl_exec_parts_hp_done(ex, sl_now_ns(), 0, 0);
    }
    /* an iteration whose completion could not be queued may still have op
     * marks queued on its stream: they are left (a trace's few bytes), not
     * freed under them */
    t->trace_marks = NULL;
    t->status = status;
    ex->hooks.done(ex->hooks.arg, t, status, false, box);
}

/* What a kick's start callback needs beside the pick. */
typedef struct kick_ctx {
    sl_exec *ex;
    sl_outbox *box;
    int rc; /* why the start failed */
} kick_ctx;

/* The start callback of the lane hand-off (sched/lanes.h): the pick goes
 * onto its lane's stream, in the stream class of its job. */
static int start_on_lane(void *arg, sl_lanes_start *st)
{
    kick_ctx *c = arg;
    sl_exec *ex = c->ex;
    sl_exec_task *t = sl_container_of(st->item, sl_exec_task, item);
    const sl_mem_lane_info *info = &st->info;
    int priority = stream_priority(ex, t->job);
    t->online = false; /* until it is counted in the partition's load */
    sl_lane *l = sl_map_get(&ex->lanes, info->id);
    if (l && l->serial != info->serial)
        l->serial = info->serial; /* a reclaimed lane's id reused: keep its (idle) stream */
    if (l && l->priority != priority)
        lane_restream(ex, l, priority);
    if (!l && !(l = lane_get(ex, info, priority))) {
        sl_log_err("exe.stream", "cannot start a stream for lane %u", info->id);
        return c->rc = SL_ENOMEM;
    }
    l->bound = sl_exec_parts_bind(ex, l->stream, t->job->high_priority);
    t->online = t->job->high_priority;
    if (t->online)
        sl_exec_parts_hp_start(ex, st->launched_ns, t->job->compute_units);
    t->start_ns = st->launched_ns;
    t->lane = info->id;
    t->stepwise = is_stepwise(ex, t->job) && t->graph->n_ops > 0;
    t->ephemeral_base = info->base;
    /* small iterations skip the thread hand-off (device.h stream_hold) */
    bool here = !c->box->run_here && runs_here(ex, t);
    if (here)
        ex->dev->ops->stream_hold(ex->dev, l->stream);
    int rc = launch(ex, t, l, info, here);
    if (here)
        c->box->run_here = l->stream;
    st->ready_ns = t->arrival_ns;
    st->launched_ns = sl_now_ns();
    if (sl_obs_tracing(ex->obs))
        sl_exec_trace_start(ex, t, st->launched_ns);
    if (rc != SL_OK)
        /* not even the completion callback could be queued: finish here */
        sl_log_err("exe.launch", "cannot submit an iteration of job %llu: %s",
                   (unsigned long long) st->job->id, sl_strerror(rc));
    return c->rc = rc;
}

/* What a hand-off decided, for the executor: a started iteration counts
 * as a busy lane; a pick that could not start fails. True if it started. */
static bool kicked(sl_exec *ex, sl_lanes_kicked k, const sl_lanes_start *st, const kick_ctx *c)
{
    if (k == SL_LANES_STARTED) {
        ex->stats.lanes_busy++;
        return true;
    }
    if (k == SL_LANES_FAILED)
        fail_task(ex, sl_container_of(st->item, sl_exec_task, item), c->rc, c->box);
    return false;
}

/* Starts lane's next pick if it is idle; true if it started one. */
static bool kick_lane(sl_exec *ex, uint32_t lane, uint64_t now, sl_outbox *box)
{
    if (ex->halted)
        return false;
    kick_ctx c = {ex, box, SL_OK};
    sl_lanes_start st;
    return kicked(ex, sl_lanes_kick(&ex->handoff, lane, now, start_on_lane, &c, &st), &st, &c);
}

/* Kicks one lane (a job there may have become ready). */
static void kick_one(sl_exec *ex, uint32_t lane, sl_outbox *box)
{
    (void) kick_lane(ex, lane, sl_now_ns(), box);
}

void sl_exec_kick_held(sl_exec *ex, sl_outbox *box)
{
    /* a start may release lanes held behind the starting tenant: go round
     * again while anything starts (each round starts one more at least) */
    bool started = true;
    while (started && sl_sched_held_lanes(ex->sched) && !ex->halted) {
        started = false;
        uint64_t now = sl_now_ns();
        uint32_t n = sl_sched_lane_capacity(ex->sched);
        for (uint32_t lane = 0; lane < n; lane++)
            if (sl_sched_lane_hold(ex->sched, lane) && kick_lane(ex, lane, now, box))
                started = true;
    }
    /* the gap timer also wakes the lanes held for a client between
     * iterations when its claim runs out (every hold left was just set
     * anew, in the future; a halted executor starts nothing) */
    uint64_t wake = sl_sched_hold_deadline(ex->sched);
    if (wake && !ex->halted && ex->timer_running &&
        (!ex->timer_deadline || wake < ex->timer_deadline)) {
        ex->timer_deadline = wake;
        pthread_cond_signal(&ex->timer_cond);
    }
}

void sl_exec_kick(sl_exec *ex, sl_outbox *box)
{
    sl_mem_lane_info stack[KICK_STACK_LANES], *lanes = stack;
    size_t n = sl_mem_lanes(ex->mem, stack, KICK_STACK_LANES);
    if (n > KICK_STACK_LANES) {
        sl_mem_lane_info *heap = sl_calloc(n, sizeof *heap);
        if (heap) {
            n = sl_mem_lanes(ex->mem, heap, n);
            lanes = heap;
        } else {
            n = KICK_STACK_LANES; /* the rest at their next completion or request */
        }
    }
    uint64_t now = sl_now_ns();
    for (size_t i = 0; i < n; i++)
        (void) kick_lane(ex, lanes[i].id, now, box);
    if (lanes != stack)
        sl_free(lanes);
}

void sl_exec_iteration_done(void *arg, int status)
{
    sl_exec_task *t = arg;
    sl_exec *ex = t->ex;
    /* the backend's reason, read on the stream's own thread (no op of it
     * runs now), before any lock */
    if (status != SL_OK && status != SL_EDEVICERESET && t->stream && !t->stepwise &&
        ex->dev->ops->stream_failure)
        ex->dev->ops->stream_failure(ex->dev, t->stream, t->failure, sizeof t->failure);
    t->device_status = status;
    /* its launcher may still be returning from queuing this callback: the
     * last of the two ends it (exec.h) */
    if (atomic_fetch_sub(&t->launch_refs, 1) == 1)
        iteration_end(t);
}

/* Ends iteration t (its device work done, its launcher gone): charges it,
 * hands its lane on, reports through the done hook. Takes the lock. */
static void iteration_end(sl_exec_task *t)
{
    sl_exec *ex = t->ex;
    sl_exec_job *j = t->job;
    int status = t->device_status;
    uint64_t now = sl_now_ns();
    sl_outbox box = {0};

    /* its in-place writes of params are done: the version moves past any
     * call that raced with them (exec.h) */
    if (graph_writes_params(t->graph))
        atomic_fetch_add(&ex->param_version, 1);
    pthread_mutex_lock(ex->lock);
    uint64_t device_ns = now - t->start_ns;
    ex->stats.lanes_busy--;
    ex->stats.iterations++;
    if (t->stepwise) {
        t->step.failed |= t->status != SL_OK || status != SL_OK;
        sl_steps_last_done(&ex->steps, &t->step, now);
    }
    if (sl_obs_tracing(ex->obs))
        sl_exec_trace_done(ex, t, now, true);
    sl_exec_trace_marks_free(t); /* its marks all ran: they were queued before this */
    if (t->status == SL_OK)
        t->status = status;
    if (t->status == SL_OK) {
        uint64_t *avg = &t->graph->iter_ewma_ns;
        *avg = *avg ? *avg - *avg / 8 + device_ns / 8 : device_ns;
        t->device_ns = device_ns;
        t->queue_ns = t->start_ns - t->item.enqueue_ns;
        if (ex->obs) {
            sl_obs_lane_busy(ex->obs, t->lane, device_ns);
            sl_hist_observe(&ex->obs->iterations, now - t->arrival_ns);
        }
    } else if (t->status == SL_EDEVICERESET) {
        sl_exec_halt(ex); /* the device is lost: start nothing more */
    }
    /* hot path first: charge, and hand the lane to the next pick before any
     * bookkeeping, so the device idles only for this (the switch cost) */
    kick_ctx c = {ex, &box, SL_OK};
    sl_lanes_start st;
    sl_lanes_start_fn start = ex->halted ? NULL : start_on_lane;
    (void) kicked(ex,
                  sl_lanes_done(&ex->handoff, &j->sched, t->lane, device_ns, now, start, &c, &st),
                  &st, &c);
    /* the charge may release lanes held for the share between tenants */
    sl_exec_kick_held(ex, &box);
    if (j->high_priority)
        sl_gaps_hp_complete(&ex->gaps, &j->hp, now);
    if (t->online)
        sl_exec_parts_hp_done(ex, now, iteration_kind(t->graph),
                              now > t->arrival_ns ? now - t->arrival_ns : 0);
    if (j->high_priority || t->stepwise)
        sl_exec_resume(ex, false);
    /* an idle lane may shrink or go, letting queued sessions in */
    bool lane_idle = sl_lanes_settle(&ex->handoff, t->lane);
    if (lane_idle)
        lanes_collect(ex);
    sl_exec_parts_settle(ex); /* a resize that waited for an idle device */
    /* the lane was handed on above; whatever the done hook queues kicks
     * its own lane */
    ex->hooks.done(ex->hooks.arg, t, t->status, lane_idle, &box);
    ex->hooks.unlock_send(ex->hooks.arg, &box);
}

/* ---- the contract ------------------------------------------------------ */

void sl_exec_run(sl_exec *ex, sl_exec_task *t, sl_outbox *box)
{
    t->ex = ex;
    t->status = SL_OK;
    if (t->job->high_priority)
        sl_gaps_hp_arrival(&ex->gaps, &t->job->hp, sl_now_ns());
    /* only its lane can have changed */
    kick_ctx c = {ex, box, SL_OK};
    sl_lanes_start st;
    sl_lanes_start_fn start = ex->halted ? NULL : start_on_lane;
    (void) kicked(
        ex, sl_lanes_ready(&ex->handoff, &t->job->sched, &t->item, sl_now_ns(), start, &c, &st),
        &st, &c);
    sl_exec_kick_held(ex, box); /* its start, or its hold, moves the share */
}

sl_exec_task *sl_exec_unqueue(sl_exec *ex, sl_exec_job *j)
{
    if (j->sched.running || !j->sched.n_queued)
        return NULL;
    sl_sched_item *items = sl_sched_job_drop_queued(ex->sched, &j->sched);
    return items ? sl_container_of(items, sl_exec_task, item) : NULL;
}

static void control_done(void *arg, int status)
{
    sl_exec_task *t = arg;
    sl_exec *ex = t->ex;
    sl_outbox box = {0};
    atomic_fetch_add(&ex->param_version, 1); /* a copy or fill of a tensor completed */
    pthread_mutex_lock(ex->lock);
    ex->stats.control_in_flight--;
    if (status == SL_EDEVICERESET)
        sl_exec_halt(ex);
    t->status = status;
    ex->hooks.done(ex->hooks.arg, t, status, false, &box);
    ex->hooks.unlock_send(ex->hooks.arg, &box);
}

int sl_exec_control(sl_exec *ex, sl_exec_task *t, int kind, uint64_t addr, void *host,
                    uint64_t bytes, const sl_shape *shape)
{
    sl_device *dev = ex->dev;
    if (ex->halted || !ex->copy_stream)
        return SL_ENODEV;
    t->ex = ex;
    t->status = SL_OK;
    int rc;
    if (kind == SL_EXEC_COPY_IN) {
        rc = dev->ops->memcpy_h2d(dev, ex->copy_stream, sl_exec_ptr(ex, addr), host, bytes);
    } else if (kind == SL_EXEC_COPY_OUT) {
        rc = dev->ops->memcpy_d2h(dev, ex->copy_stream, host, sl_exec_ptr(ex, addr), bytes);
    } else {
        sl_op_call fill = {.op = SL_OP_FILL, .n_in = 1, .n_out = 1};
        fill.in[0] = fill.out[0] = (sl_tensor_ref){sl_exec_ptr(ex, addr), *shape};
        rc = dev->ops->launch(dev, ex->copy_stream, &fill);
    }
    if (kind != SL_EXEC_COPY_OUT)
        atomic_fetch_add(&ex->param_version, 1);
    if (rc == SL_OK)
        rc = dev->ops->host_callback(dev, ex->copy_stream, control_done, t);
    if (rc == SL_OK)
        ex->stats.control_in_flight++;
    return rc;
}

int sl_exec_join(sl_exec *ex, sl_exec_job *j, uint64_t now)
{
    int rc = sl_lanes_join(&ex->handoff, &j->sched, now);
    if (rc)
        return rc;
    j->joined = true;
    sl_exec_update_class(ex, j, false);
    return SL_OK;
}

void sl_exec_leave(sl_exec *ex, sl_exec_job *j, sl_outbox *box)
{
    if (!j->joined)
        return;
    /* its class first: what its lane starts next runs in the new one */
    sl_exec_update_class(ex, j, true);
    j->joined = false;
    /* a strict policy may have kept its lane for it */
    kick_ctx c = {ex, box, SL_OK};
    sl_lanes_start st;
    sl_lanes_start_fn start = ex->halted ? NULL : start_on_lane;
    (void) kicked(ex, sl_lanes_leave(&ex->handoff, &j->sched, sl_now_ns(), start, &c, &st, NULL),
                  &st, &c);
    sl_exec_kick_held(ex, box); /* lanes may have been held for its tenant */
    sl_exec_resume(ex, false);  /* one fewer high-priority job to wait for */
}

int sl_exec_move(sl_exec *ex, sl_exec_job *j, uint32_t lane)
{
    return sl_lanes_move(&ex->handoff, &j->sched, lane);
}

void sl_exec_set_share(sl_exec *ex, sl_exec_job *j, const int *priority, const double *weight,
                       sl_outbox *box)
{
    if (priority)
        sl_sched_job_set_priority(ex->sched, &j->sched, *priority);
    if (weight)
        sl_sched_job_set_weight(ex->sched, &j->sched, *weight);
    sl_exec_update_class(ex, j, false);
    sl_exec_resume(ex, ex->gaps.n_hp == 0);
    kick_one(ex, j->sched.lane, box);
}

void sl_exec_set_policy(sl_exec *ex, const sl_policy_ops *policy, bool strict, sl_outbox *box)
{
    sl_sched_set_policy(ex->sched, policy, strict);
    for (sl_sched_job *sj = sl_sched_first_job(ex->sched); sj; sj = sl_sched_next_job(sj))
        sl_exec_update_class(ex, sl_container_of(sj, sl_exec_job, sched), false);
    sl_exec_parts_follow(ex); /* the policy's capabilities may have changed */
    sl_exec_resume(ex, ex->gaps.n_hp == 0);
    sl_exec_kick(ex, box); /* a work-conserving policy may start what a strict one held */
}

bool sl_exec_wants_exclusive(const sl_exec *ex, int priority)
{
    return priority > 0 && (sl_exec_caps(ex) & SL_POLICY_EXCLUSIVE_LANES) &&
           !ex->cfg->no_exclusive_lanes;
}

uint64_t sl_exec_wait_rank(const sl_exec *ex, const sl_exec_job *j)
{
    return sl_sched_wait_rank(ex->sched, &j->sched);
}

bool sl_exec_idle(const sl_exec *ex)
{
    return !ex->stats.lanes_busy && !ex->stats.control_in_flight;
}

void sl_exec_halt(sl_exec *ex)
{
    ex->halted = true;
    atomic_store(&ex->launch_stop, true);
}

int sl_exec_reset_device(sl_exec *ex)
{
    sl_device *dev = ex->dev;
    /* the partitions go with the streams (a cuda reset destroys their
     * green contexts); the operator turns them on again */
    sl_exec_parts_fini(ex);
    /* take everything device-side out first: nothing may find a stream that
     * is being destroyed */
    sl_map lanes = ex->lanes;
    sl_spare_stream *spare = ex->spare;
    size_t n_spare = ex->n_spare;
    sl_stream *copy = ex->copy_stream;
    void *arena = ex->arena;
    ex->lanes = (sl_map){0};
    ex->spare = NULL;
    ex->n_spare = ex->cap_spare = 0;
    ex->copy_stream = NULL;
    ex->arena = NULL;
    pthread_mutex_unlock(ex->lock);

    streams_destroy(dev, &lanes, spare, n_spare);
    if (copy)
        dev->ops->stream_destroy(dev, copy);
    if (arena)
        dev->ops->mem_free(dev, arena);
    arena = NULL;
    copy = NULL;
    int rc = dev->ops->reset ? dev->ops->reset(dev) : SL_ENODEV;
    atomic_fetch_add(&ex->resets, 1);
    if (rc == SL_OK)
        rc = dev->ops->mem_alloc(dev, ex->capacity, &arena);
    if (rc == SL_OK)
        rc = dev->ops->stream_create(dev, 0, &copy);

    pthread_mutex_lock(ex->lock);
    ex->arena = arena; /* also on failure: freed with the executor */
    ex->copy_stream = copy;
    if (rc == SL_OK) {
        ex->halted = false;
        atomic_store(&ex->launch_stop, false);
    }
    return rc;
}

int sl_exec_init(sl_exec *ex, const sl_config *cfg, sl_device *dev, sl_mem_mgr *mem,
                 uint64_t capacity, pthread_mutex_t *lock, const sl_exec_hooks *hooks)
{
    ex->lock = lock;
    atomic_store(&ex->param_version, 1);
    atomic_store(&ex->launch_stop, false);
    ex->cfg = cfg;
    ex->dev = dev;
    ex->mem = mem;
    ex->hooks = *hooks;
    int rc;
    const sl_policy_ops *policy = sl_sched_policy_find(cfg->policy);
    if (!policy)
        return SL_EINVAL;
    if ((rc = sl_sched_create(policy, cfg->strict, &ex->sched)) != SL_OK)
        return rc;
    if ((rc = sl_launchers_init(&ex->launchers, LAUNCHERS_MAX)) != SL_OK)
        return rc;
    sl_sched_set_anticipation(ex->sched,
                              cfg->anticipate_set ? cfg->anticipate_ns : SL_DEFAULT_ANTICIPATE_NS);
    sl_lanes_init(&ex->handoff, ex->sched, mem);
    if ((rc = dev->ops->mem_alloc(dev, capacity, &ex->arena)) != SL_OK) {
        sl_log_err("mem.arena", "cannot allocate %llu bytes of device memory: %s",
                   (unsigned long long) capacity, sl_strerror(rc));
        return rc;
    }
    ex->capacity = capacity;
    if ((rc = dev->ops->stream_create(dev, 0, &ex->copy_stream)) != SL_OK)
        return rc;
    sl_gaps_config gc = sl_gaps_config_default();
    if (dev->host_cores)
        gc.host_ns = HOST_MARGIN_NS;
    if (cfg->gap_margin_set)
        gc.fit_margin = cfg->gap_margin;
    if ((rc = sl_gaps_init(&ex->gaps, &gc)) != SL_OK)
        return rc;
    sl_steps_config sc = {
        .gap_fill = true,
        .part_ns = cfg->op_part_ns,
        .segment_ns = cfg->lp_segment_ns ? cfg->lp_segment_ns : SL_DEFAULT_LP_SEGMENT_NS,
        .concurrent = !cfg->lp_serial,
    };
    sl_steps_init(&ex->steps, &ex->gaps, &sc);
    if (sl_cond_init_monotonic(&ex->timer_cond) != 0)
        return SL_ENOMEM;
    if (pthread_create(&ex->timer, NULL, sl_exec_timer_main, ex) != 0) {
        pthread_cond_destroy(&ex->timer_cond);
        return SL_ENOMEM;
    }
    ex->timer_running = true;
    if (dev->ops->partition_caps) /* status shows the device's granularity, or why none */
        ex->parts.caps_ok =
            dev->ops->partition_caps(dev, &ex->parts.caps) == SL_OK || ex->parts.caps.note[0];
    /* no --partitions: on demand wherever the device has partitions */
    const char *parts = cfg->partitions            ? cfg->partitions
                        : dev->ops->partition_caps ? "demand"
                                                   : NULL;
    if (parts) {
        enum sl_parts_mode mode;
        unsigned units;
        if ((rc = sl_parts_parse(parts, &mode, &units)) != SL_OK)
            return rc;
        pthread_mutex_lock(lock);
        rc = sl_exec_set_partitions(ex, mode, units);
        pthread_mutex_unlock(lock);
        if (rc == SL_EUNSUPPORTED) {
            /* a driver too old for green contexts: lanes keep their
             * priority streams, and status says why (partitions.c); a
             * warning only where the operator asked for partitions */
            if (cfg->partitions)
                sl_log_warn("exe.parts",
                            "--partitions %s: this device has none (%s); running without", parts,
                            ex->parts.caps.note);
            else
                sl_log_info("exe.parts", "no compute partitions on this device (%s)",
                            ex->parts.caps.note);
            rc = SL_OK;
        } else if (rc != SL_OK) {
            sl_log_err("exe.parts", "cannot set --partitions %s: %s", parts, sl_strerror(rc));
            return rc;
        }
    }
    return SL_OK;
}

void sl_exec_fini(sl_exec *ex)
{
    if (ex->timer_running) {
        pthread_mutex_lock(ex->lock);
        ex->timer_stop = true;
        pthread_cond_signal(&ex->timer_cond);
        pthread_mutex_unlock(ex->lock);
        pthread_join(ex->timer, NULL);
        ex->timer_running = false;
        pthread_cond_destroy(&ex->timer_cond);
    }
    sl_launchers_fini(&ex->launchers); /* idle: nothing is launching */
    if (ex->dev) {
        sl_exec_parts_fini(ex);
        streams_destroy(ex->dev, &ex->lanes, ex->spare, ex->n_spare);
        ex->spare = NULL;
        ex->n_spare = ex->cap_spare = 0;
        if (ex->copy_stream)
            ex->dev->ops->stream_destroy(ex->dev, ex->copy_stream);
        if (ex->arena)
            ex->dev->ops->mem_free(ex->dev, ex->arena);
        ex->copy_stream = NULL;
        ex->arena = NULL;
    }
    sl_lanes_fini(&ex->handoff);
    sl_sched_destroy(ex->sched);
    ex->sched = NULL;
}

sl_exec_stats sl_exec_get_stats(const sl_exec *ex)
{
    sl_exec_stats st = ex->stats;
    st.ops_split = ex->steps.ops_split;
    st.lp_segments = ex->steps.segments;
    st.lp_in_flight = ex->steps.lp_in_flight;
    st.lp_in_flight_max = ex->steps.lp_in_flight_max;
    return st;
}
