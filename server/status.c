/* The status reply (status.h). */
#include "status.h"
#include "replay.h"
#include "server.h"
#include "sl_error.h"
#include "sl_time.h"

#include <stdlib.h>
#include <string.h>

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(Salus__SessionStatus *const *) a)->id;
    uint64_t y = (*(Salus__SessionStatus *const *) b)->id;
    return x < y ? -1 : x > y;
}

/* The caller's rights, limits and holdings. */
static Salus__TenantLimits *tenant_limits(sl_server *srv, const sl_peer *peer, sl_reply *r)
{
    Salus__TenantLimits *you = sl_reply_alloc(r, sizeof *you);
    char *name = sl_reply_alloc(r, 96);
    if (!you || !name)
        return NULL;
    salus__tenant_limits__init(you);
    uint64_t key = sl_tenant_key(peer);
    sl_tenant_name(key, name, 96);
    you->tenant = name;
    you->operator_ = peer->is_operator;
    if (!peer->is_operator) {
        sl_limits lim;
        sl_sessions_limits(&srv->sessions, peer, &lim);
        you->max_priority = lim.max_priority;
        you->max_weight = lim.max_weight;
        you->max_sessions = lim.max_sessions;
        you->memory = lim.memory;
    }
    sl_tenant_use use = sl_tenants_get(&srv->sessions.tenants, key);
    you->sessions = use.sessions;
    you->memory_used = use.memory;
    return you;
}

static const char *const mode_names[] = {
    [SL_PARTS_OFF] = "off",
    [SL_PARTS_FIXED] = "fixed",
    [SL_PARTS_AUTO] = "auto",
    [SL_PARTS_DEMAND] = "demand",
};

/* The compute partitions, field by field. */
static Salus__PartitionsStatus *partitions_detail(const sl_exec_parts *p, sl_reply *r)
{
    Salus__PartitionsStatus *d = sl_reply_alloc(r, sizeof *d);
    char *unit = sl_reply_alloc(r, sizeof p->caps.unit);
    char *note = sl_reply_alloc(r, sizeof p->caps.note);
    if (!d || !unit || !note)
        return NULL;
    salus__partitions_status__init(d);
    d->mode = (char *) mode_names[p->demand ? SL_PARTS_DEMAND : p->mode];
    d->on = p->mode != SL_PARTS_OFF && p->online;
    d->supported = p->caps_ok;
    d->declared = p->declared;
    d->resizes = p->resizes;
    d->spills = p->spills;
    d->unit = unit;
    d->note = note;
    unit[0] = note[0] = '\0';
    if (p->caps_ok) {
        /* copies: the reply is packed after the lock is released */
        memcpy(unit, p->caps.unit, sizeof p->caps.unit);
        memcpy(note, p->caps.note, sizeof p->caps.note);
        unit[sizeof p->caps.unit - 1] = note[sizeof p->caps.note - 1] = '\0';
        d->units = p->caps.units;
    }
    if (d->on) {
        d->online = p->plan.online;
        d->offline = p->offline_units;
        d->need = p->plan.need;
        d->lent = p->lent;
    }
    if (p->mode == SL_PARTS_AUTO) { /* the guard's sharing is not "on" */
        d->sizing = (char *) sl_parts_sizing(p);
        d->objective = p->plan.search ? p->plan.cfg.objective : 0;
        d->need = p->plan.need;
        d->trials = p->plan.trials;
        d->trials_ended = p->plan.breaks;
        double gap;
        if (sl_part_plan_retry(&p->plan, &d->retry_requests, &gap)) {
            d->retry_gap_ns = (uint64_t) gap;
            d->request_gap_ns = (uint64_t) p->plan.gap_avg;
        }
    }
    return d;
}

/* x->persistent_by_dtype: s's persistent bytes of each dtype it holds. */
static int by_dtype(sl_reply *r, const sl_session *s, Salus__SessionStatus *x)
{
    size_t n = 0;
    for (unsigned d = 0; d < SL_DTYPE_COUNT; d++)
        n += s->persistent_by_dtype[d] != 0;
    if (!n)
        return SL_OK;
    Salus__DTypeBytes **list = sl_reply_alloc(r, n * sizeof *list);
    if (!list)
        return SL_ENOMEM;
    x->n_persistent_by_dtype = 0;
    for (unsigned d = 0; d < SL_DTYPE_COUNT; d++) {
        if (!s->persistent_by_dtype[d])
            continue;
        Salus__DTypeBytes *e = sl_reply_alloc(r, sizeof *e);
        if (!e)
            return SL_ENOMEM;
        salus__dtype_bytes__init(e);
        e->dtype = (Salus__DType) d;
        e->bytes = s->persistent_by_dtype[d];
        list[x->n_persistent_by_dtype++] = e;
    }
    x->persistent_by_dtype = list;
    return SL_OK;
}

/* The session's iteration graphs (replay.h), summed over its graphs. */
static int graph_replays(sl_reply *r, const sl_session *s, Salus__SessionStatus *x)
{
    sl_replay_sums sum = {0};
    size_t i = 0;
    void *v;
    while (sl_map_next(&s->graphs, &i, NULL, &v))
        sl_replay_add(((const sl_graph *) v)->replay, &sum);
    x->graph_replays = sum.replays;
    x->graph_recordings = sum.recordings;
    x->graph_fallbacks = sum.fallbacks;
    x->graph_bytes = sum.bytes;
    if (sum.reason[0]) {
        char *why = sl_reply_alloc(r, sizeof sum.reason);
        if (!why)
            return SL_ENOMEM;
        memcpy(why, sum.reason, sizeof sum.reason);
        x->graph_fallback_reason = why;
    }
    return SL_OK;
}

int sl_status_build(sl_server *srv, const sl_peer *peer, sl_reply *r)
{
    Salus__StatusReply *st = sl_reply_alloc(r, sizeof *st);
    Salus__MemoryStatus *mem = sl_reply_alloc(r, sizeof *mem);
    size_t n = srv->sessions.table.count;
    Salus__SessionStatus **list = sl_reply_alloc(r, n * sizeof *list);
    if (!st || !mem || (n && !list))
        return SL_ENOMEM;
    salus__status_reply__init(st);
    if (!(st->you = tenant_limits(srv, peer, r)))
        return SL_ENOMEM;
    salus__memory_status__init(mem);
    st->server_version = (char *) SL_SERVER_VERSION;
    st->device = srv->dev->description;
    st->policy = (char *) sl_sched_policy(srv->exec.sched)->name;
    char *parts = sl_reply_alloc(r, 256);
    if (!parts)
        return SL_ENOMEM;
    sl_parts_describe(&srv->exec.parts, parts, 256);
    st->partitions = parts;
    st->uptime_ns = sl_now_ns() - srv->start_ns;
    st->requests_total = atomic_load(&srv->requests);
    st->errors_total = atomic_load(&srv->sender.errors);
    st->repeats_total = atomic_load(&srv->repeats.seen);
    st->decoded_bytes = atomic_load(&srv->decoder.held);
    st->decode_refusals = atomic_load(&srv->decoder.refused);
    st->metadata_bytes = srv->sessions.host_bytes;
    st->iterations_total = sl_exec_get_stats(&srv->exec).iterations;
    st->strict = sl_sched_strict(srv->exec.sched);
    st->switch_same_p50_ns = sl_sched_gap_quantile(srv->exec.sched, true, 0.5);
    st->switch_same_p99_ns = sl_sched_gap_quantile(srv->exec.sched, true, 0.99);
    st->switch_other_p50_ns = sl_sched_gap_quantile(srv->exec.sched, false, 0.5);
    st->switch_other_p99_ns = sl_sched_gap_quantile(srv->exec.sched, false, 0.99);

    sl_mem_stats ms;
    sl_mem_get_stats(srv->mem, &ms);
    mem->capacity = ms.capacity;
    mem->persistent_capacity = ms.capacity;
    mem->persistent_used = ms.persistent_used;
    mem->persistent_reserved = ms.persistent_reserved;
    mem->ephemeral_lanes = ms.lanes;
    mem->framework = ms.framework;
    mem->free = ms.free;
    mem->largest_free = ms.largest_free;
    mem->fragmentation = ms.fragmentation;
    /* every session holds max(P, used), so this never underflows */
    mem->reserved_unused = ms.persistent_reserved - ms.persistent_used;
    st->memory = mem;
    if (!(st->partitions_detail = partitions_detail(&srv->exec.parts, r)))
        return SL_ENOMEM;

    size_t i = 0, k = 0;
    void *v;
    while (sl_map_next(&srv->sessions.table, &i, NULL, &v) && k < n) {
        const sl_session *s = v;
        if (!s->admitted)
            continue; /* listed in the admission queue */
        if (!peer->is_operator && !sl_session_owned_by(s, peer))
            continue; /* other tenants' jobs are theirs to know */
        Salus__SessionStatus *x = sl_reply_alloc(r, sizeof *x);
        char *name = sl_reply_alloc(r, sizeof s->name);
        char *owner = sl_reply_alloc(r, 96);
        if (!x || !name || !owner)
            return SL_ENOMEM;
        salus__session_status__init(x);
        memcpy(name, s->name, sizeof s->name);
        sl_tenant_name(s->tenant, owner, 96);
        x->id = s->id;
        x->name = name;
        x->owner = owner;
        x->limited = s->limited;
        x->persistent_bytes = s->persistent_bytes;
        x->n_tensors = s->tensors.count;
        x->n_graphs = s->graphs.count;
        x->host_bytes = s->host_bytes;
        x->iterations = s->job.sched.iterations_done;
        x->attained_ns = s->job.sched.attained_ns;
        x->queued = s->job.sched.n_queued;
        x->lane = s->job.sched.lane;
        x->priority = s->job.sched.priority;
        x->weight = s->job.sched.weight;
        x->ephemeral_peak = s->ephemeral_peak;
        x->declared_persistent = s->declared_persistent;
        x->declared_ephemeral = s->declared_ephemeral;
        x->queue_delay_ns = s->job.sched.queue_sum_ns;
        x->switches = s->job.sched.switches;
        x->mean_iteration_ns = sl_sched_job_mean_iteration_ns(&s->job.sched);
        x->slowdown = sl_sched_job_slowdown(&s->job.sched);
        x->skipped_steps = s->skipped_steps;
        if (graph_replays(r, s, x) != SL_OK)
            return SL_ENOMEM;
        sl_mem_session_info mi;
        if (sl_mem_session_get(srv->mem, s->id, &mi) == SL_OK) {
            x->persistent_reserved = mi.region_size > mi.used ? mi.region_size : mi.used;
            x->framework_bytes = mi.framework;
        }
        x->math_matmul = s->job.math & SL_MATH_MATMUL_TF32 ? SALUS__MATH_MODE__MATH_TF32
                                                           : SALUS__MATH_MODE__MATH_EXACT;
        x->math_conv = s->job.math & SL_MATH_CONV_TF32 ? SALUS__MATH_MODE__MATH_TF32
                                                       : SALUS__MATH_MODE__MATH_EXACT;
        if (by_dtype(r, s, x) != SL_OK)
            return SL_ENOMEM;
        list[k++] = x;
    }
    qsort(list, k, sizeof *list, by_id);
    st->n_sessions = k;
    st->sessions = list;

    size_t nl = sl_mem_lanes(srv->mem, NULL, 0);
    sl_mem_lane_info *lanes = sl_reply_alloc(r, nl * sizeof *lanes);
    st->lanes = sl_reply_alloc(r, nl * sizeof *st->lanes);
    if (nl && (!lanes || !st->lanes))
        return SL_ENOMEM;
    nl = sl_mem_lanes(srv->mem, lanes, nl);
    for (size_t j = 0; j < nl; j++) {
        Salus__LaneStatus *l = sl_reply_alloc(r, sizeof *l);
        if (!l)
            return SL_ENOMEM;
        salus__lane_status__init(l);
        l->id = lanes[j].id;
        l->offset = lanes[j].base;
        l->size = lanes[j].size;
        l->framework = lanes[j].framework;
        l->sessions = lanes[j].n_sessions;
        l->max_peak = lanes[j].max_peak;
        l->busy = lanes[j].busy;
        st->lanes[st->n_lanes++] = l;
    }

    sl_mem_session_info queue[64];
    size_t nq = sl_mem_queue(srv->mem, queue, 64);
    nq = nq < 64 ? nq : 64;
    st->queue = sl_reply_alloc(r, nq * sizeof *st->queue);
    if (nq && !st->queue)
        return SL_ENOMEM;
    uint64_t now = sl_now_ns();
    for (size_t j = 0; j < nq; j++) {
        const sl_session *s = sl_map_get(&srv->sessions.table, queue[j].id);
        if (!peer->is_operator && (!s || !sl_session_owned_by(s, peer)))
            continue;
        Salus__QueuedSession *q = sl_reply_alloc(r, sizeof *q);
        if (!q)
            return SL_ENOMEM;
        salus__queued_session__init(q);
        q->id = queue[j].id;
        /* a copy: the reply is packed after the lock is released, and a
         * waiting session can be freed meanwhile (its client died) */
        char *name = sl_reply_alloc(r, sizeof s->name);
        if (!name)
            return SL_ENOMEM;
        if (s)
            memcpy(name, s->name, sizeof s->name);
        q->name = name;
        q->persistent = queue[j].declared_p;
        q->ephemeral = queue[j].declared_e;
        q->reason = (char *) sl_mem_reason_name(queue[j].reason);
        q->waited_ns = s ? now - s->open_ns : 0;
        st->queue[st->n_queue++] = q;
    }
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_STATUS;
    sl_reply_msg(r)->status = st;
    return SL_OK;
}
