/* Admission: the rule, the lane a new session gets, and the queue (in rank
 * order, arrival order among equal ranks) with its bounded bypass.
 *
 * Decisions depend only on the calls made, in order (sizes, ids, arrival
 * order), never on addresses of host memory or on time: replaying the same
 * calls gives the same admissions, lanes and reasons.
 *
 * The queue is pumped eagerly: every call that may free memory ends by
 * admitting, in order, the queued sessions that fit now, and parks them in
 * a ready list that sl_mem_next_admitted drains. A new arrival therefore
 * only ever competes with sessions that did not fit, which is what makes a
 * bypass a bypass.
 *
 * Cost: an attempt is O(lanes) to pick a lane plus O(log n) to place a new
 * lane block (O(n log n) when that needs a compaction). A pump is one pass
 * over the queue per admission it makes, so O(queue x admissions) attempts,
 * and one attempt per queued session when nothing fits. */
#include "manager.h"

#include "mgr_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"

/* Gives s its persistent region: P in one piece (mgr_internal.h says why),
 * idle lanes compacted if that is what it takes. */
static int place_region(sl_mem_mgr *m, struct mgr_session *s)
{
    uint64_t base;
    int rc = mgr_place_block(m, s->p, &base);
    if (rc != SL_OK)
        return rc;
    rc = sl_mem_pool_create(base, s->p, MGR_ALIGN, &s->region_pool);
    if (rc != SL_OK) {
        (void) sl_mem_pool_free(m->pool, base);
        return rc;
    }
    s->region = base;
    m->persistent_gen++;
    return SL_OK;
}

static void drop_region(sl_mem_mgr *m, struct mgr_session *s)
{
    if (!s->region_pool)
        return;
    sl_mem_pool_destroy(s->region_pool);
    s->region_pool = NULL;
    (void) sl_mem_pool_free(m->pool, s->region);
    m->persistent_gen++;
}

/* Picks or makes s's lane. Lane choice, cheapest first in memory: share a
 * lane that already holds the need (free); else a new lane of exactly the
 * need (need + framework); else, when that breaks the rule or finds no
 * block, grow the idle lane that needs the least growth (need - size) and
 * share it. */
static int find_lane(sl_mem_mgr *m, struct mgr_session *s, struct mgr_lane **out, int *reason)
{
    uint64_t need = mgr_need(m, s);
    /* p + need + framework <= capacity was checked at admission (QUOTA), so
     * the sums below cannot overflow. */
    bool fragmented = false;
    /* an exclusive session gets a lane of its own; so does any session while
     * memory is plentiful (space sharing), below the spread limit */
    struct mgr_lane *lane = NULL;
    uint64_t held = mgr_reserved(m);
    bool spread = m->spread_limit && held <= m->spread_limit &&
                  s->p + need + m->framework <= m->spread_limit - held;
    if (spread && !s->exclusive && mgr_rule_allows(m, s->p + need + m->framework)) {
        int rc = mgr_lane_create(m, need, &lane);
        if (rc != SL_OK && rc != SL_EEXHAUSTED)
            return rc;
    }
    if (!lane && !s->exclusive)
        lane = mgr_lane_best_fit(m, need, NULL);
    if (!lane && mgr_rule_allows(m, s->p + need + m->framework)) {
        int rc = mgr_lane_create(m, need, &lane);
        if (rc != SL_OK && rc != SL_EEXHAUSTED)
            return rc;
        fragmented = rc == SL_EEXHAUSTED;
    }
    if (!lane && !s->exclusive) {
        struct mgr_lane *grow = mgr_lane_grow_candidate(m, need);
        if (grow && mgr_rule_allows(m, s->p + need - grow->size)) {
            int rc = mgr_lane_resize(m, grow, need);
            if (rc != SL_OK && rc != SL_EEXHAUSTED)
                return rc;
            if (rc == SL_OK)
                lane = grow;
            else
                fragmented = true;
        }
    }
    if (!lane) {
        *reason = fragmented ? SL_MEM_FRAGMENTATION : SL_MEM_CAPACITY;
        return SL_EEXHAUSTED;
    }
    *out = lane;
    return SL_OK;
}

/* The rule is checked before any block is sought, so a refusal says
 * CAPACITY when the bytes are not there and FRAGMENTATION only when they
 * are but not in one piece, even after compacting idle lanes. The region
 * comes first: a lane found or made for a session that then gets no region
 * would have to be undone, a region is just freed. */
int mgr_try_place(sl_mem_mgr *m, struct mgr_session *s, int *reason)
{
    if (!mgr_rule_allows(m, s->p)) {
        *reason = SL_MEM_CAPACITY;
        return SL_EEXHAUSTED;
    }
    if (s->p) {
        int rc = place_region(m, s);
        if (rc == SL_EEXHAUSTED)
            *reason = SL_MEM_FRAGMENTATION;
        if (rc != SL_OK)
            return rc;
    }
    struct mgr_lane *lane;
    int rc = find_lane(m, s, &lane, reason);
    if (rc != SL_OK) {
        drop_region(m, s);
        return rc;
    }
    mgr_lane_join(m, lane, s);
    m->persistent_reserved += s->p;
    m->n_admitted++;
    *reason = SL_MEM_FITS;
    return SL_OK;
}

/* Every session in [head, stop) waited while a later one got in. */
static void count_bypass(struct mgr_session *head, const struct mgr_session *stop)
{
    for (struct mgr_session *q = head; q != stop; q = q->q_next)
        q->bypassed++;
}

/* Session a just got in: every waiting session that arrived before it was
 * overtaken. One overtaken SL_MEM_MAX_OVERTAKEN times moves to the front
 * (rank 0 for good, arrival order among such). True if one moved. */
static bool count_overtaken(sl_mem_mgr *m, const struct mgr_session *a)
{
    bool moved = false;
    for (struct mgr_session *q = m->queue.head, *next; q; q = next) {
        next = q->q_next;
        if (q->seq > a->seq || ++q->overtaken < SL_MEM_MAX_OVERTAKEN || q->aged)
            continue;
        q->aged = true;
        q->rank = 0;
        mgr_list_remove(&m->queue, q);
        mgr_list_insert_ranked(&m->queue, q);
        moved = true;
    }
    return moved;
}

void mgr_pump(sl_mem_mgr *m)
{
    bool admitted = true;
    while (admitted && m->queue.head) {
        admitted = false;
        /* Largest bypass count among the sessions still waiting ahead of
         * the one considered: at SL_MEM_MAX_BYPASS nobody behind may pass. */
        uint32_t ahead_max = 0;
        bool ahead = false;
        struct mgr_session *q = m->queue.head;
        while (q) {
            struct mgr_session *next = q->q_next;
            if (ahead && ahead_max >= SL_MEM_MAX_BYPASS) {
                for (; q; q = q->q_next)
                    q->reason = SL_MEM_CAPACITY;
                break;
            }
            int reason;
            int rc = mgr_try_place(m, q, &reason);
            if (rc == SL_OK) {
                mgr_list_remove(&m->queue, q);
                q->state = MGR_READY;
                q->reason = SL_MEM_FITS;
                mgr_list_push(&m->ready, q);
                count_bypass(m->queue.head, next);
                ahead_max += ahead;
                admitted = true;
                if (count_overtaken(m, q))
                    break; /* the order changed: start again from the head */
            } else if (rc == SL_EEXHAUSTED) {
                q->reason = reason;
                ahead = true;
                if (q->bypassed > ahead_max)
                    ahead_max = q->bypassed;
            } else {
                return; /* host memory: the next pump tries again */
            }
            q = next;
        }
    }
}

int sl_mem_admit(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, bool wait, int *reason,
                 uint32_t *lane)
{
    return sl_mem_admit_ex(m, id, p, e, wait ? SL_MEM_ADMIT_WAIT : 0, reason, lane);
}

int sl_mem_admit_ex(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, unsigned flags, int *reason,
                    uint32_t *lane)
{
    return sl_mem_admit_ranked(m, id, p, e, flags, 0, reason, lane);
}

int sl_mem_admit_ranked(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, unsigned flags,
                        uint64_t rank, int *reason, uint32_t *lane)
{
    bool wait = flags & SL_MEM_ADMIT_WAIT;
    if (!m || id == 0 || sl_map_get(&m->sessions, id))
        return SL_EINVAL;
    /* QUOTA: can never fit, whatever else leaves. The bounds first keep the
     * rounding from overflowing. */
    if (p > m->capacity || e > m->capacity)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    struct mgr_session probe = {.declared_e = e,
                                .e = e ? sl_align_up(e, MGR_ALIGN) : m->default_e,
                                .p = sl_align_up(p, MGR_ALIGN)};
    uint64_t need = mgr_need(m, &probe);
    if (probe.p > m->quota || need > m->quota - probe.p ||
        m->framework > m->capacity - probe.p - need)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);

    struct mgr_session *s = sl_calloc(1, sizeof(*s));
    if (!s)
        return SL_ENOMEM;
    *s = probe;
    s->id = id;
    s->exclusive = flags & SL_MEM_ADMIT_EXCLUSIVE;
    s->declared_p = p;
    s->rank = rank;
    s->seq = ++m->next_seq;
    int rc = sl_map_put(&m->sessions, id, s);
    if (rc != SL_OK)
        goto out_free_session;

    /* the queued sessions ranked before s: admitting s passes them */
    struct mgr_session *behind = m->queue.head;
    uint32_t ahead_max = 0;
    for (; behind && mgr_ranked_before(behind, s); behind = behind->q_next)
        if (behind->bypassed > ahead_max)
            ahead_max = behind->bypassed;
    int why = SL_MEM_CAPACITY;
    if (ahead_max < SL_MEM_MAX_BYPASS) {
        rc = mgr_try_place(m, s, &why);
        if (rc == SL_OK) {
            s->state = MGR_ADMITTED;
            count_bypass(m->queue.head, behind);
            (void) count_overtaken(m, s);
            if (reason)
                *reason = SL_MEM_FITS;
            if (lane)
                *lane = s->lane->id;
            return SL_OK;
        }
        if (rc != SL_EEXHAUSTED)
            goto out_unmap;
    }
    if (wait) {
        s->state = MGR_QUEUED;
        s->reason = why;
        mgr_list_insert_ranked(&m->queue, s);
        return sl_mem_refuse(reason, why);
    }
    rc = sl_mem_refuse(reason, why);

out_unmap:
    (void) sl_map_del(&m->sessions, id);
out_free_session:
    sl_free(s);
    return rc;
}

bool sl_mem_next_admitted(sl_mem_mgr *m, uint64_t *id, uint32_t *lane)
{
    if (!m)
        return false;
    mgr_pump(m);
    struct mgr_session *s = m->ready.head;
    if (!s)
        return false;
    mgr_list_remove(&m->ready, s);
    s->state = MGR_ADMITTED;
    if (id)
        *id = s->id;
    if (lane)
        *lane = s->lane->id;
    return true;
}

int sl_mem_set_rank(sl_mem_mgr *m, uint64_t id, uint64_t rank)
{
    struct mgr_session *s = m ? sl_map_get(&m->sessions, id) : NULL;
    if (!s)
        return SL_ENOTFOUND;
    s->rank = s->aged ? 0 : rank;
    if (s->state == MGR_QUEUED) {
        mgr_list_remove(&m->queue, s);
        mgr_list_insert_ranked(&m->queue, s);
    }
    return SL_OK;
}

size_t sl_mem_queue(const sl_mem_mgr *m, sl_mem_session_info *out, size_t max)
{
    if (!m)
        return 0;
    size_t n = 0;
    for (const struct mgr_session *q = m->queue.head; q; q = q->q_next, n++)
        if (out && n < max)
            mgr_session_info(m, q, &out[n]);
    return n;
}
