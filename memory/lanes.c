/* Lanes: which lane a session shares, creating, resizing and reclaiming
 * lanes, and the public ephemeral-memory calls.
 *
 * A lane's size follows its sessions: it is created at exactly the need of
 * the session that opened it, grows only when a member's need outgrows it,
 * and shrinks back to the largest remaining need when that member leaves
 * (as soon as the lane is idle). Memory held by lanes is therefore always
 * the sum of one need per lane, which is what the churn benchmark measures.
 *
 * Moving or resizing an idle lane is zero copy: a lane holds no data
 * between iterations. A resize first tries to take a new block while the old
 * one is still held (a failure then leaves everything as it was), and only
 * when that finds no block does it rebuild the pool (compact.c). */
#include <string.h>

#include "mgr_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"

struct mgr_lane *mgr_lane_find(const sl_mem_mgr *m, uint32_t id)
{
    return id ? sl_map_get(&m->lane_ids, id) : NULL;
}

/* Sharing choice: among lanes that already hold need, the one with the
 * fewest sessions, then the smallest, then the lowest id. Joining a lane
 * that fits costs no memory at all, so the choice is about time: sessions
 * of one lane take turns, and the emptiest lane makes the fewest of them
 * wait. Among equally busy lanes the smallest keeps the big lanes for the
 * sessions only they can hold. Iterating in id order with strict
 * comparisons makes the tie-break the lowest id: deterministic. O(lanes). */
struct mgr_lane *mgr_lane_best_fit(const sl_mem_mgr *m, uint64_t need, const struct mgr_lane *skip)
{
    struct mgr_lane *best = NULL;
    for (size_t i = 0; i < m->n_lanes; i++) {
        struct mgr_lane *l = m->lanes[i];
        if (l == skip || l->size < need || l->exclusive)
            continue;
        if (!best || l->n_sessions < best->n_sessions ||
            (l->n_sessions == best->n_sessions && l->size < best->size))
            best = l;
    }
    return best;
}

/* The fallback when a new lane does not fit: growing the largest idle lane
 * that is too small costs need - size instead of need + framework. */
struct mgr_lane *mgr_lane_grow_candidate(const sl_mem_mgr *m, uint64_t need)
{
    struct mgr_lane *best = NULL;
    for (size_t i = 0; i < m->n_lanes; i++) {
        struct mgr_lane *l = m->lanes[i];
        if (!l->busy && !l->exclusive && l->size < need && (!best || l->size > best->size))
            best = l;
    }
    return best;
}

int mgr_place_block(sl_mem_mgr *m, uint64_t size, uint64_t *addr)
{
    int rc = sl_mem_pool_alloc(m->pool, size, addr);
    if (rc != SL_EEXHAUSTED)
        return rc;
    struct mgr_request req = {.size = size};
    size_t moved;
    rc = mgr_compact(m, &req, false, &moved);
    if (rc == SL_OK)
        *addr = req.addr;
    return rc;
}

/* The lowest id no lane holds: m->lanes is sorted by id, so it is one more
 * than the index of the first gap. O(lanes). */
static size_t lowest_free_slot(const sl_mem_mgr *m)
{
    size_t i = 0;
    while (i < m->n_lanes && m->lanes[i]->id == i + 1)
        i++;
    return i;
}

int mgr_lane_create(sl_mem_mgr *m, uint64_t size, struct mgr_lane **out)
{
    /* Ids are reused, lowest first, so every table indexed by lane id stays
     * as small as the most lanes that ever lived at once. What may outlive a
     * lane under its id (the server's per-lane records, the scheduler's lane
     * state) tells a reused id from the lane it knew by the serial, which is
     * never reused. */
    if (m->n_lanes >= UINT32_MAX || m->next_lane_serial == UINT64_MAX)
        return SL_ENOMEM;
    if (m->n_lanes == m->lanes_cap) {
        size_t cap = m->lanes_cap ? 2 * m->lanes_cap : 8;
        struct mgr_lane **grown = sl_reallocarray(m->lanes, cap, sizeof(*grown));
        if (!grown)
            return SL_ENOMEM;
        m->lanes = grown;
        m->lanes_cap = cap;
    }
    struct mgr_lane *l = sl_calloc(1, sizeof(*l));
    if (!l)
        return SL_ENOMEM;
    size_t slot = lowest_free_slot(m);
    l->id = (uint32_t) (slot + 1);
    int rc = sl_map_put(&m->lane_ids, l->id, l);
    if (rc != SL_OK)
        goto out_free_lane;
    /* The lane is not in m->lanes yet, so a compaction here does not see
     * it half made (and moves lanes without changing which ids exist, so
     * slot stays the first gap). */
    rc = mgr_place_block(m, m->framework + size, &l->addr);
    if (rc != SL_OK)
        goto out_unmap;
    l->size = size;
    l->serial = ++m->next_lane_serial;
    memmove(&m->lanes[slot + 1], &m->lanes[slot], (m->n_lanes - slot) * sizeof(*m->lanes));
    m->lanes[slot] = l;
    m->n_lanes++;
    m->lane_bytes += size;
    *out = l;
    return SL_OK;

out_unmap:
    (void) sl_map_del(&m->lane_ids, l->id);
out_free_lane:
    sl_free(l);
    return rc;
}

int mgr_lane_resize(sl_mem_mgr *m, struct mgr_lane *l, uint64_t size)
{
    if (size == l->size)
        return SL_OK;
    uint64_t addr;
    int rc = sl_mem_pool_alloc(m->pool, m->framework + size, &addr);
    if (rc == SL_EEXHAUSTED) {
        /* No other block fits: shrink where it is, or grow by moving idle
         * lanes out of the way. Both update size and lane_bytes. */
        if (size < l->size)
            return mgr_shrink_in_place(m, l, size);
        struct mgr_request req = {.resize = l, .resize_to = size};
        size_t moved;
        return mgr_compact(m, &req, false, &moved);
    }
    if (rc != SL_OK)
        return rc;
    (void) sl_mem_pool_free(m->pool, l->addr);
    l->addr = addr;
    m->lane_bytes = m->lane_bytes - l->size + size;
    l->size = size;
    return SL_OK;
}

void mgr_lane_join(sl_mem_mgr *m, struct mgr_lane *l, struct mgr_session *s)
{
    s->lane = l;
    s->lane_prev = NULL;
    s->lane_next = l->sessions;
    if (l->sessions)
        l->sessions->lane_prev = s;
    l->sessions = s;
    l->n_sessions++;
    if (s->exclusive)
        l->exclusive = true;
    uint64_t need = mgr_need(m, s);
    if (need > l->max_need)
        l->max_need = need;
}

void mgr_lane_refresh(struct mgr_lane *l, const sl_mem_mgr *m)
{
    uint64_t max_need = 0;
    for (const struct mgr_session *s = l->sessions; s; s = s->lane_next) {
        uint64_t need = mgr_need(m, s);
        if (need > max_need)
            max_need = need;
    }
    l->max_need = max_need;
}

void mgr_lane_leave(sl_mem_mgr *m, struct mgr_session *s)
{
    struct mgr_lane *l = s->lane;
    if (s->lane_prev)
        s->lane_prev->lane_next = s->lane_next;
    else
        l->sessions = s->lane_next;
    if (s->lane_next)
        s->lane_next->lane_prev = s->lane_prev;
    s->lane = NULL;
    s->lane_prev = s->lane_next = NULL;
    l->n_sessions--;
    if (s->exclusive)
        l->exclusive = false;
    mgr_lane_refresh(l, m);
}

static void lane_reclaim(sl_mem_mgr *m, struct mgr_lane *l)
{
    size_t i = 0;
    while (m->lanes[i] != l)
        i++;
    memmove(&m->lanes[i], &m->lanes[i + 1], (m->n_lanes - i - 1) * sizeof(*m->lanes));
    m->n_lanes--;
    (void) sl_map_del(&m->lane_ids, l->id);
    (void) sl_mem_pool_free(m->pool, l->addr);
    m->lane_bytes -= l->size;
    sl_free(l);
}

void mgr_lane_tidy(sl_mem_mgr *m, struct mgr_lane *l)
{
    if (!l || l->busy)
        return;
    if (l->n_sessions == 0)
        lane_reclaim(m, l);
    else if (l->size > l->max_need)
        (void) mgr_lane_resize(m, l, l->max_need);
}

/* ---- public: ephemeral memory and lanes ---- */

static void set_peak(sl_mem_mgr *m, struct mgr_session *s, uint64_t peak)
{
    s->peak = peak;
    s->peak_set = true;
    mgr_lane_refresh(s->lane, m);
}

/* Moves s from its lane to `to` with its new peak; the old lane may shrink
 * or go. */
static void move_session(sl_mem_mgr *m, struct mgr_session *s, struct mgr_lane *to, uint64_t peak)
{
    struct mgr_lane *from = s->lane;
    mgr_lane_leave(m, s);
    s->peak = peak;
    s->peak_set = true;
    mgr_lane_join(m, to, s);
    mgr_lane_tidy(m, from);
}

/* The order of attempts follows cost: staying (free), moving to a lane that
 * already fits (free), growing the session's own lane (need - size), and
 * last a new lane (need + framework), which only helps where growing found
 * no contiguous block and others still need the old lane. */
static int set_ephemeral(sl_mem_mgr *m, struct mgr_session *s, uint64_t peak, int *reason)
{
    if (peak > m->capacity)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    uint64_t need = mgr_need_with(m, s, peak, true);
    uint64_t held = mgr_held(s);
    if (held > m->quota || need > m->quota - held || need > m->capacity - m->framework)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    struct mgr_lane *l = s->lane;
    if (l->size >= need) {
        set_peak(m, s, peak);
        mgr_lane_tidy(m, l);
        return SL_OK;
    }
    if (l->busy)
        return SL_EBUSY;
    struct mgr_lane *to = s->exclusive ? NULL : mgr_lane_best_fit(m, need, l);
    if (to) {
        move_session(m, s, to, peak);
        return SL_OK;
    }
    bool fragmented = false;
    if (mgr_rule_allows(m, need - l->size)) {
        int rc = mgr_lane_resize(m, l, need);
        if (rc == SL_OK) {
            set_peak(m, s, peak);
            return SL_OK;
        }
        if (rc != SL_EEXHAUSTED)
            return rc;
        fragmented = true;
    }
    if (fragmented && l->n_sessions > 1 && mgr_rule_allows(m, need + m->framework)) {
        int rc = mgr_lane_create(m, need, &to);
        if (rc == SL_OK) {
            move_session(m, s, to, peak);
            return SL_OK;
        }
        if (rc != SL_EEXHAUSTED)
            return rc;
    }
    return sl_mem_refuse(reason, fragmented ? SL_MEM_FRAGMENTATION : SL_MEM_CAPACITY);
}

int sl_mem_set_ephemeral(sl_mem_mgr *m, uint64_t id, uint64_t peak, uint32_t *lane, int *reason)
{
    struct mgr_session *s = m && id ? sl_map_get(&m->sessions, id) : NULL;
    if (!s || s->state == MGR_QUEUED)
        return SL_ENOTFOUND;
    int rc = set_ephemeral(m, s, peak, reason);
    if (rc == SL_OK) {
        if (lane)
            *lane = s->lane->id;
        if (reason)
            *reason = SL_MEM_FITS;
    }
    /* A lower peak, a move or a compaction may all have freed memory. */
    mgr_pump(m);
    return rc;
}

void sl_mem_lane_busy(sl_mem_mgr *m, uint32_t lane)
{
    struct mgr_lane *l = m ? mgr_lane_find(m, lane) : NULL;
    if (l)
        l->busy = true;
}

void sl_mem_lane_idle(sl_mem_mgr *m, uint32_t lane)
{
    struct mgr_lane *l = m ? mgr_lane_find(m, lane) : NULL;
    if (!l)
        return;
    l->busy = false;
    /* Work deferred while it ran: reclaim or shrink. */
    mgr_lane_tidy(m, l);
    mgr_pump(m);
}

static void lane_info(const sl_mem_mgr *m, const struct mgr_lane *l, sl_mem_lane_info *out)
{
    memset(out, 0, sizeof(*out));
    out->id = l->id;
    out->serial = l->serial;
    out->framework_base = l->addr;
    out->framework = m->framework;
    out->base = l->addr + m->framework;
    out->size = l->size;
    out->n_sessions = l->n_sessions;
    out->max_peak = l->max_need;
    out->busy = l->busy;
}

int sl_mem_lane_get(const sl_mem_mgr *m, uint32_t id, sl_mem_lane_info *out)
{
    const struct mgr_lane *l = m ? mgr_lane_find(m, id) : NULL;
    if (!l || !out)
        return SL_ENOTFOUND;
    lane_info(m, l, out);
    return SL_OK;
}

size_t sl_mem_lanes(const sl_mem_mgr *m, sl_mem_lane_info *out, size_t max)
{
    if (!m)
        return 0;
    for (size_t i = 0; i < m->n_lanes && i < max && out; i++)
        lane_info(m, m->lanes[i], &out[i]);
    return m->n_lanes;
}

size_t sl_mem_compact(sl_mem_mgr *m)
{
    if (!m)
        return 0;
    struct mgr_request none = {0};
    size_t moved = 0;
    if (mgr_compact(m, &none, true, &moved) != SL_OK)
        moved = 0;
    mgr_pump(m);
    return moved;
}
