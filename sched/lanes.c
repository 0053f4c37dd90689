/* The lane hand-off (lanes.h). The records are indexed by the manager's
 * lane id and grown only when a job joins or moves, so a kick never
 * allocates: a lane beyond them has no job that could be picked. */
#include "lanes.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

void sl_lanes_init(sl_lanes *L, sl_sched *sched, sl_mem_mgr *mem)
{
    memset(L, 0, sizeof *L);
    L->sched = sched;
    L->mem = mem;
}

void sl_lanes_fini(sl_lanes *L)
{
    size_t i = 0;
    void *t;
    while (sl_map_next(&L->tenants, &i, NULL, &t))
        sl_free(t);
    sl_map_fini(&L->tenants);
    sl_free(L->recs);
    L->recs = NULL;
    L->n_recs = 0;
}

/* Lanes [0, n) usable here and in the scheduler. */
static int reserve(sl_lanes *L, uint32_t n)
{
    int rc = sl_sched_reserve_lanes(L->sched, n);
    if (rc != SL_OK || n <= L->n_recs)
        return rc;
    uint32_t cap = L->n_recs ? L->n_recs : 8;
    while (cap < n)
        cap *= 2;
    sl_lanes_rec *r = sl_reallocarray(L->recs, cap, sizeof *r);
    if (!r)
        return SL_ENOMEM;
    memset(r + L->n_recs, 0, (cap - L->n_recs) * sizeof *r);
    L->recs = r;
    L->n_recs = cap;
    return SL_OK;
}

int sl_lanes_join(sl_lanes *L, sl_sched_job *job, uint64_t now)
{
    int rc = reserve(L, job->lane + 1);
    if (rc != SL_OK)
        return rc;
    if (job->tenant_key) {
        sl_sched_tenant *t = sl_map_get(&L->tenants, job->tenant_key);
        if (!t) {
            if (!(t = sl_calloc(1, sizeof *t)))
                return SL_ENOMEM;
            t->key = job->tenant_key;
            if (sl_map_put(&L->tenants, t->key, t) != SL_OK) {
                sl_free(t);
                return SL_ENOMEM;
            }
        }
        t->weight = job->tenant_weight; /* the latest word on it */
        job->tenant = t;
    }
    sl_sched_job_add(L->sched, job, now);
    return SL_OK;
}

int sl_lanes_move(sl_lanes *L, sl_sched_job *job, uint32_t lane)
{
    if (lane == job->lane)
        return SL_OK;
    int rc = reserve(L, lane + 1);
    if (rc == SL_OK)
        sl_sched_job_set_lane(L->sched, job, lane);
    return rc;
}

bool sl_lanes_busy(const sl_lanes *L, uint32_t lane)
{
    return lane < L->n_recs && L->recs[lane].busy;
}

sl_lanes_kicked sl_lanes_kick(sl_lanes *L, uint32_t lane, uint64_t now, sl_lanes_start_fn start,
                              void *arg, sl_lanes_start *out)
{
    if (!start || lane >= L->n_recs || L->recs[lane].busy)
        return SL_LANES_NONE;
    sl_mem_lane_info info;
    if (sl_mem_lane_get(L->mem, lane, &info) != SL_OK) {
        sl_sched_lane_unhold(L->sched, lane); /* reclaimed: nobody waits there */
        return SL_LANES_NONE;
    }
    sl_lanes_rec *r = &L->recs[lane];
    out->new_serial = r->serial != info.serial;
    if (out->new_serial) {
        /* a reclaimed lane's id reused: nobody ran on this lane yet */
        r->serial = info.serial;
        r->last_job_id = 0;
    }
    out->prev_job_id = r->last_job_id;
    /* the same for the scheduler's lane statistics; a no-op once bound */
    sl_sched_lane_bind(L->sched, lane, info.serial);
    uint64_t idle_since = sl_sched_lane_idle_since(L->sched, lane);
    if (!sl_sched_next(L->sched, lane, now, &out->job, &out->item))
        return SL_LANES_NONE;
    r->busy = true;
    L->n_busy++;
    sl_mem_lane_busy(L->mem, lane);
    /* idle lanes move (compaction): the base counts only once it is busy */
    if (sl_mem_lane_get(L->mem, lane, &out->info) != SL_OK)
        out->info = info;
    out->ready_ns = out->item->enqueue_ns;
    out->launched_ns = now;
    if (start(arg, out) != SL_OK) {
        r->busy = false;
        L->n_busy--;
        sl_mem_lane_idle(L->mem, lane);
        return SL_LANES_FAILED;
    }
    /* the switch cost: how long the lane sat idle, from the previous
     * iteration's completion (or this one's arrival, if later) until this
     * one's work is on its way */
    if (r->last_job_id) {
        uint64_t from = idle_since > out->ready_ns ? idle_since : out->ready_ns;
        uint64_t end = out->launched_ns;
        sl_sched_note_gap(L->sched, lane, end > from ? end - from : 0,
                          r->last_job_id == out->job->id);
    }
    r->last_job_id = out->job->id;
    return SL_LANES_STARTED;
}

sl_lanes_kicked sl_lanes_ready(sl_lanes *L, sl_sched_job *job, sl_sched_item *item, uint64_t now,
                               sl_lanes_start_fn start, void *arg, sl_lanes_start *out)
{
    sl_sched_enqueue(L->sched, job, item, now);
    return sl_lanes_kick(L, job->lane, now, start, arg, out);
}

sl_lanes_kicked sl_lanes_done(sl_lanes *L, sl_sched_job *job, uint32_t lane, uint64_t device_ns,
                              uint64_t now, sl_lanes_start_fn start, void *arg, sl_lanes_start *out)
{
    sl_sched_complete(L->sched, job, device_ns, now);
    if (lane < L->n_recs && L->recs[lane].busy) {
        L->recs[lane].busy = false;
        L->n_busy--;
    }
    return sl_lanes_kick(L, lane, now, start, arg, out);
}

bool sl_lanes_settle(sl_lanes *L, uint32_t lane)
{
    if (sl_lanes_busy(L, lane))
        return false;
    sl_mem_lane_idle(L->mem, lane);
    return true;
}

sl_lanes_kicked sl_lanes_leave(sl_lanes *L, sl_sched_job *job, uint64_t now,
                               sl_lanes_start_fn start, void *arg, sl_lanes_start *out,
                               sl_sched_item **dropped)
{
    sl_sched_item *items = sl_sched_job_remove(L->sched, job);
    if (dropped)
        *dropped = items;
    sl_sched_tenant *t = job->tenant_key ? job->tenant : NULL;
    if (t && !t->n_jobs) {
        sl_free(sl_map_del(&L->tenants, t->key));
        job->tenant = NULL;
    }
    return sl_lanes_kick(L, job->lane, now, start, arg, out);
}
