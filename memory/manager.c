/* The memory manager's core: creation, session release, persistent memory,
 * status and the invariant checker. Lanes live in lanes.c, compaction in
 * compact.c, admission and its queue in admission.c. */
#include "manager.h"

#include <stdlib.h>
#include <string.h>

#include "mgr_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"

const char *sl_mem_reason_name(int reason)
{
    switch (reason) {
    case SL_MEM_FITS:
        return "fits";
    case SL_MEM_QUOTA:
        return "quota";
    case SL_MEM_CAPACITY:
        return "capacity";
    case SL_MEM_FRAGMENTATION:
        return "fragmentation";
    default:
        return "unknown";
    }
}

/* ---- shared helpers ---- */

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

uint64_t mgr_need_with(const sl_mem_mgr *m, const struct mgr_session *s, uint64_t peak,
                       bool peak_set)
{
    (void) m;
    uint64_t rounded_peak = peak_set ? sl_align_up(peak, MGR_ALIGN) : 0;
    uint64_t need = s->declared_e ? max_u64(s->e, rounded_peak) : (peak_set ? rounded_peak : s->e);
    return max_u64(need, MGR_ALIGN);
}

uint64_t mgr_need(const sl_mem_mgr *m, const struct mgr_session *s)
{
    return mgr_need_with(m, s, s->peak, s->peak_set);
}

uint64_t mgr_outside(const struct mgr_session *s)
{
    return sl_align_up(s->framework - s->framework_region, MGR_ALIGN);
}

uint64_t mgr_held(const struct mgr_session *s)
{
    /* What the region holds of the charge is inside P already. Cannot
     * overflow: both terms are bounded by the quota. */
    return max_u64(s->p, s->used) + mgr_outside(s);
}

/* Bytes of s's region that neither its tensors nor its framework charge
 * hold (0 without a region). A multiple of 256 less the exact charge held:
 * whatever of it the region takes, used + align_up(framework_region)
 * stays within p. */
static uint64_t region_headroom(const struct mgr_session *s)
{
    return s->p ? s->p - s->used - s->framework_region : 0;
}

uint64_t mgr_reserved(const sl_mem_mgr *m)
{
    /* Cannot overflow: every term is bounded by capacity through the rule. */
    return m->persistent_reserved + m->lane_bytes + (uint64_t) m->n_lanes * m->framework +
           m->framework_charged;
}

bool mgr_rule_allows(const sl_mem_mgr *m, uint64_t delta)
{
    uint64_t reserved = mgr_reserved(m);
    return delta <= m->capacity && reserved <= m->capacity - delta;
}

void mgr_list_push(struct mgr_list *l, struct mgr_session *s)
{
    s->q_next = NULL;
    s->q_prev = l->tail;
    if (l->tail)
        l->tail->q_next = s;
    else
        l->head = s;
    l->tail = s;
    l->count++;
}

bool mgr_ranked_before(const struct mgr_session *a, const struct mgr_session *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->seq < b->seq);
}

void mgr_list_insert_ranked(struct mgr_list *l, struct mgr_session *s)
{
    struct mgr_session *after = l->tail;
    while (after && mgr_ranked_before(s, after))
        after = after->q_prev;
    s->q_prev = after;
    s->q_next = after ? after->q_next : l->head;
    if (s->q_next)
        s->q_next->q_prev = s;
    else
        l->tail = s;
    if (after)
        after->q_next = s;
    else
        l->head = s;
    l->count++;
}

void mgr_list_remove(struct mgr_list *l, struct mgr_session *s)
{
    if (s->q_prev)
        s->q_prev->q_next = s->q_next;
    else
        l->head = s->q_next;
    if (s->q_next)
        s->q_next->q_prev = s->q_prev;
    else
        l->tail = s->q_prev;
    s->q_prev = s->q_next = NULL;
    l->count--;
}

/* ---- create / destroy ---- */

int sl_mem_mgr_create(const sl_mem_config *cfg, sl_mem_mgr **out)
{
    if (!cfg || !out || cfg->capacity == 0 || (cfg->capacity & (MGR_ALIGN - 1)) != 0)
        return SL_EINVAL;
    uint64_t cap = cfg->capacity;
    if (cfg->framework_per_lane > cap || cfg->default_ephemeral > cap)
        return SL_EINVAL;
    uint64_t framework = sl_align_up(cfg->framework_per_lane, MGR_ALIGN);
    uint64_t default_e = max_u64(sl_align_up(cfg->default_ephemeral, MGR_ALIGN), MGR_ALIGN);
    if (framework > cap || default_e > cap - framework)
        return SL_EINVAL;

    sl_mem_mgr *m = sl_calloc(1, sizeof(*m));
    if (!m)
        return SL_ENOMEM;
    int rc = sl_mem_pool_create(0, cap, MGR_ALIGN, &m->pool);
    if (rc != SL_OK) {
        sl_free(m);
        return rc;
    }
    m->capacity = cap;
    m->quota = cfg->session_quota && cfg->session_quota < cap ? cfg->session_quota : cap;
    m->framework = framework;
    m->default_e = default_e;
    m->spread_limit = cfg->spread_limit;
    *out = m;
    return SL_OK;
}

static void free_session_record(struct mgr_session *s)
{
    sl_mem_pool_destroy(s->region_pool);
    struct mgr_block *b = s->blocks;
    while (b) {
        struct mgr_block *next = b->next;
        sl_free(b);
        b = next;
    }
    sl_free(s);
}

void sl_mem_mgr_destroy(sl_mem_mgr *m)
{
    if (!m)
        return;
    size_t i = 0;
    void *v;
    while (sl_map_next(&m->sessions, &i, NULL, &v))
        free_session_record(v);
    for (size_t l = 0; l < m->n_lanes; l++)
        sl_free(m->lanes[l]);
    sl_free(m->lanes);
    sl_map_fini(&m->sessions);
    sl_map_fini(&m->blocks);
    sl_map_fini(&m->lane_ids);
    mgr_compact_fini(m);
    sl_mem_pool_destroy(m->pool);
    sl_free(m);
}

/* ---- sessions ---- */

static struct mgr_session *find_admitted(const sl_mem_mgr *m, uint64_t id)
{
    struct mgr_session *s = id ? sl_map_get(&m->sessions, id) : NULL;
    return s && s->state != MGR_QUEUED ? s : NULL;
}

void sl_mem_release(sl_mem_mgr *m, uint64_t id)
{
    struct mgr_session *s = m && id ? sl_map_get(&m->sessions, id) : NULL;
    if (!s)
        return;
    if (s->state == MGR_QUEUED) {
        mgr_list_remove(&m->queue, s);
    } else {
        if (s->state == MGR_READY)
            mgr_list_remove(&m->ready, s);
        /* The records go with the memory, before the lane is tidied: a
         * compaction there must not see blocks that are no longer held. */
        struct mgr_block *b = s->blocks;
        while (b) {
            struct mgr_block *next = b->next;
            (void) sl_map_del(&m->blocks, b->addr + 1);
            if (!s->region_pool) {
                (void) sl_mem_pool_free(m->pool, b->addr);
                m->n_arena_blocks--;
            }
            sl_free(b);
            b = next;
        }
        s->blocks = NULL;
        if (s->region_pool) {
            /* its tensors go with the region's own pool */
            sl_mem_pool_destroy(s->region_pool);
            s->region_pool = NULL;
            (void) sl_mem_pool_free(m->pool, s->region);
        }
        m->persistent_gen++;
        m->persistent_used -= s->used;
        m->persistent_reserved -= max_u64(s->p, s->used);
        m->framework_charged -= mgr_outside(s);
        m->n_admitted--;
        struct mgr_lane *l = s->lane;
        mgr_lane_leave(m, s);
        mgr_lane_tidy(m, l);
    }
    (void) sl_map_del(&m->sessions, id);
    free_session_record(s);
    /* Freed memory, and a departed queued session may have been the one
     * whose bypass count held the others back. */
    mgr_pump(m);
}

/* ---- persistent memory ---- */

/* A persistent block lives in its session's region, or in the arena for a
 * session without one. */
static void free_block(sl_mem_mgr *m, struct mgr_session *s, uint64_t addr)
{
    if (s->region_pool) {
        (void) sl_mem_pool_free(s->region_pool, addr);
    } else {
        (void) sl_mem_pool_free(m->pool, addr);
        m->persistent_gen++;
    }
}

int sl_mem_alloc(sl_mem_mgr *m, uint64_t id, uint64_t bytes, uint64_t *addr, int *reason)
{
    if (!m || !addr || bytes == 0)
        return SL_EINVAL;
    struct mgr_session *s = find_admitted(m, id);
    if (!s)
        return SL_ENOTFOUND;
    /* Larger than the arena can never fit; this also keeps the rounding and
     * the sums below from overflowing. */
    if (bytes > m->capacity)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    uint64_t size = sl_align_up(bytes, MGR_ALIGN);
    uint64_t after = s->used + size;
    /* without a region, what it holds grows by the block (its framework
     * charge beside it) */
    uint64_t held = mgr_held(s) - s->used + after;
    /* in a region, the bytes its recorded graphs hold there are taken */
    if (s->p ? after > s->p - sl_align_up(s->framework_region, MGR_ALIGN)
             : held > m->quota || mgr_need(m, s) > m->quota - held)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    uint64_t delta = max_u64(s->p, after) - max_u64(s->p, s->used);
    if (!mgr_rule_allows(m, delta))
        return sl_mem_refuse(reason, SL_MEM_CAPACITY);

    struct mgr_block *b = sl_calloc(1, sizeof(*b));
    if (!b)
        return SL_ENOMEM;
    int rc = s->region_pool ? sl_mem_pool_alloc(s->region_pool, size, &b->addr)
                            : mgr_place_block(m, size, &b->addr);
    if (rc == SL_EEXHAUSTED) {
        sl_free(b);
        /* The bytes are free (in its region, or by the rule in the arena):
         * they are just not in one piece, even with the idle lanes out of
         * the way. */
        return sl_mem_refuse(reason, SL_MEM_FRAGMENTATION);
    }
    if (rc != SL_OK)
        goto out_free_block;
    rc = sl_map_put(&m->blocks, b->addr + 1, b);
    if (rc != SL_OK) {
        free_block(m, s, b->addr);
        goto out_free_block;
    }
    b->size = size;
    b->owner = s;
    b->next = s->blocks;
    if (s->blocks)
        s->blocks->prev = b;
    s->blocks = b;
    s->used = after;
    if (!s->region_pool) {
        m->n_arena_blocks++;
        m->persistent_gen++;
    }
    m->persistent_used += size;
    m->persistent_reserved += delta;
    *addr = b->addr;
    if (reason)
        *reason = SL_MEM_FITS;
    /* A compaction on the way may have shrunk idle lanes. */
    mgr_pump(m);
    return SL_OK;

out_free_block:
    sl_free(b);
    mgr_pump(m);
    return rc;
}

int sl_mem_free(sl_mem_mgr *m, uint64_t id, uint64_t addr)
{
    if (!m)
        return SL_EINVAL;
    struct mgr_session *s = find_admitted(m, id);
    if (!s)
        return SL_ENOTFOUND;
    struct mgr_block *b = addr < m->capacity ? sl_map_get(&m->blocks, addr + 1) : NULL;
    if (!b || b->owner != s)
        return SL_EINVAL;
    (void) sl_map_del(&m->blocks, addr + 1);
    free_block(m, s, addr);
    m->n_arena_blocks -= !s->region_pool;
    if (b->prev)
        b->prev->next = b->next;
    else
        s->blocks = b->next;
    if (b->next)
        b->next->prev = b->prev;
    uint64_t before = max_u64(s->p, s->used);
    s->used -= b->size;
    m->persistent_used -= b->size;
    m->persistent_reserved -= before - max_u64(s->p, s->used);
    sl_free(b);
    mgr_pump(m);
    return SL_OK;
}

/* ---- framework memory of a session ---- */

uint64_t sl_mem_framework_outside(const sl_mem_mgr *m, uint64_t id, uint64_t bytes)
{
    const struct mgr_session *s = m ? find_admitted(m, id) : NULL;
    uint64_t room = s ? region_headroom(s) : 0;
    return bytes > room ? bytes - room : 0;
}

int sl_mem_charge_framework(sl_mem_mgr *m, uint64_t id, uint64_t bytes, int *reason,
                            uint64_t *outside)
{
    if (!m)
        return SL_EINVAL;
    struct mgr_session *s = find_admitted(m, id);
    if (!s)
        return SL_ENOTFOUND;
    /* Beyond the arena it can never fit; this also keeps the sums below
     * from overflowing. */
    if (bytes > m->capacity || s->framework > m->capacity - bytes)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    uint64_t room = region_headroom(s);
    uint64_t in_region = bytes < room ? bytes : room;
    /* the quota and the rule see only what the region does not hold: the
     * region's bytes it holds stand for the rest, as the arena's free
     * bytes stand for the part outside */
    uint64_t out_before = mgr_outside(s);
    uint64_t out_after =
        sl_align_up(s->framework + bytes - s->framework_region - in_region, MGR_ALIGN);
    uint64_t held = mgr_held(s) - out_before + out_after;
    if (held > m->quota || mgr_need(m, s) > m->quota - held)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    if (!mgr_rule_allows(m, out_after - out_before))
        return sl_mem_refuse(reason, SL_MEM_CAPACITY);
    s->framework += bytes;
    s->framework_region += in_region;
    m->framework_charged += out_after - out_before;
    if (reason)
        *reason = SL_MEM_FITS;
    if (outside)
        *outside = bytes - in_region;
    return SL_OK;
}

uint64_t sl_mem_framework_blocking(const sl_mem_mgr *m, uint64_t id, uint64_t bytes)
{
    const struct mgr_session *s = m ? find_admitted(m, id) : NULL;
    if (!s || !s->p || !s->framework_region || bytes > m->capacity)
        return 0;
    uint64_t after = s->used + sl_align_up(bytes, MGR_ALIGN);
    if (after > s->p)
        return 0; /* beyond P: no move makes it fit */
    /* p - after is a multiple of 256, so the region may keep that much */
    uint64_t keep = s->p - after;
    return s->framework_region > keep ? s->framework_region - keep : 0;
}

int sl_mem_framework_move_out(sl_mem_mgr *m, uint64_t id, uint64_t bytes, int *reason)
{
    if (!m)
        return SL_EINVAL;
    struct mgr_session *s = find_admitted(m, id);
    if (!s)
        return SL_ENOTFOUND;
    if (bytes > s->framework_region)
        return SL_EINVAL;
    uint64_t out_before = mgr_outside(s);
    uint64_t out_after = sl_align_up(s->framework - (s->framework_region - bytes), MGR_ALIGN);
    uint64_t held = mgr_held(s) - out_before + out_after;
    if (held > m->quota || mgr_need(m, s) > m->quota - held)
        return sl_mem_refuse(reason, SL_MEM_QUOTA);
    if (!mgr_rule_allows(m, out_after - out_before))
        return sl_mem_refuse(reason, SL_MEM_CAPACITY);
    s->framework_region -= bytes;
    m->framework_charged += out_after - out_before;
    if (reason)
        *reason = SL_MEM_FITS;
    return SL_OK;
}

void sl_mem_uncharge_framework(sl_mem_mgr *m, uint64_t id, uint64_t bytes)
{
    struct mgr_session *s = m ? find_admitted(m, id) : NULL;
    if (!s)
        return;
    uint64_t before = mgr_outside(s);
    if (bytes > s->framework)
        bytes = s->framework;
    /* what is held beside P goes first: it is what costs a quota */
    uint64_t outside = s->framework - s->framework_region;
    uint64_t from_outside = bytes < outside ? bytes : outside;
    s->framework_region -= bytes - from_outside;
    s->framework -= bytes;
    m->framework_charged -= before - mgr_outside(s);
    mgr_pump(m);
}

/* ---- status ---- */

void sl_mem_get_stats(const sl_mem_mgr *m, sl_mem_stats *st)
{
    if (!m || !st)
        return;
    sl_mem_pool_stats ps;
    sl_mem_pool_get_stats(m->pool, &ps);
    memset(st, 0, sizeof(*st));
    st->capacity = m->capacity;
    st->persistent_used = m->persistent_used;
    st->persistent_reserved = m->persistent_reserved;
    st->lanes = m->lane_bytes;
    st->framework = (uint64_t) m->n_lanes * m->framework + m->framework_charged;
    st->framework_sessions = m->framework_charged;
    /* the charges hold no block, so the pool's free space holds them too
     * (the rule keeps it at least that large) */
    st->free = ps.free - m->framework_charged;
    st->largest_free = ps.largest_free < st->free ? ps.largest_free : st->free;
    st->fragmentation = st->free ? 1.0 - (double) st->largest_free / (double) st->free : 0.0;
    st->n_lanes = (uint32_t) m->n_lanes;
    st->n_sessions = m->n_admitted;
    st->n_queued = m->queue.count;
}

void mgr_session_info(const sl_mem_mgr *m, const struct mgr_session *s, sl_mem_session_info *out)
{
    memset(out, 0, sizeof(*out));
    out->id = s->id;
    out->declared_p = s->declared_p;
    out->declared_e = s->declared_e;
    out->used = s->used;
    out->framework = sl_align_up(s->framework, MGR_ALIGN);
    out->framework_region = s->framework_region;
    out->framework_outside = s->framework - s->framework_region;
    out->peak = s->peak;
    out->need = mgr_need(m, s);
    out->lane = s->lane ? s->lane->id : 0;
    out->region_base = s->region_pool ? s->region : 0;
    out->region_size = s->region_pool ? s->p : 0;
    out->queued = s->state == MGR_QUEUED;
    out->reason = s->state == MGR_QUEUED ? s->reason : SL_MEM_FITS;
}

int sl_mem_session_get(const sl_mem_mgr *m, uint64_t id, sl_mem_session_info *out)
{
    const struct mgr_session *s = m && id ? sl_map_get(&m->sessions, id) : NULL;
    if (!s || !out)
        return SL_ENOTFOUND;
    mgr_session_info(m, s, out);
    return SL_OK;
}

/* ---- invariant checker ---- */

struct span {
    uint64_t addr, size;
};

static int by_addr(const void *pa, const void *pb)
{
    const struct span *a = pa, *b = pb;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* The session-side invariants; adds its arena blocks (its region, or its
 * blocks when it has none) to spans and counts its blocks. */
static bool check_session(const sl_mem_mgr *m, const struct mgr_session *s, struct span *spans,
                          size_t *n_spans, size_t max_spans, size_t *n_blocks)
{
    uint64_t used = 0, count = 0;
    const struct mgr_block *prev = NULL;
    for (const struct mgr_block *b = s->blocks; b; prev = b, b = b->next) {
        if (b->prev != prev || b->owner != s || sl_map_get(&m->blocks, b->addr + 1) != b)
            return false;
        if (!sl_add_ok(used, b->size, &used))
            return false;
        count++;
        if (s->region_pool) {
            /* inside its region, exactly as the region's pool holds it */
            if (b->addr < s->region || b->size > s->p || b->addr - s->region > s->p - b->size ||
                sl_mem_pool_block_size(s->region_pool, b->addr) != b->size)
                return false;
        } else {
            if (*n_spans == max_spans)
                return false;
            spans[(*n_spans)++] = (struct span){b->addr, b->size};
        }
    }
    *n_blocks += count;
    if (used != s->used || (s->p && used > s->p))
        return false;
    /* The region holds part of the charge only in bytes its tensors do not
     * use, and a session without one holds none there. */
    if (s->framework_region > s->framework ||
        (s->p ? sl_align_up(s->framework_region, MGR_ALIGN) > s->p - used
              : s->framework_region != 0))
        return false;
    if (s->state == MGR_QUEUED)
        return !s->lane && !s->blocks && !s->region_pool && !s->framework &&
               s->reason > SL_MEM_FITS && s->reason <= SL_MEM_FRAGMENTATION;
    /* A session that declared P holds it in one region from admission. */
    if ((s->p != 0) != (s->region_pool != NULL))
        return false;
    if (s->region_pool) {
        sl_mem_pool_stats rs;
        sl_mem_pool_get_stats(s->region_pool, &rs);
        if (sl_mem_pool_check(s->region_pool) != SL_OK || rs.capacity != s->p || rs.used != used ||
            rs.n_allocated != count || *n_spans == max_spans)
            return false;
        spans[(*n_spans)++] = (struct span){s->region, s->p};
    }
    const struct mgr_lane *l = s->lane;
    uint64_t need = mgr_need(m, s);
    if (!l || mgr_lane_find(m, l->id) != l || l->size < need)
        return false;
    /* A session never holds more than its quota. */
    uint64_t held = mgr_held(s);
    return held <= m->quota && need <= m->quota - held;
}

static bool check_lane(const sl_mem_mgr *m, const struct mgr_lane *l)
{
    uint32_t n = 0;
    uint64_t max_need = 0;
    const struct mgr_session *prev = NULL;
    for (const struct mgr_session *s = l->sessions; s; prev = s, s = s->lane_next) {
        if (s->lane != l || s->lane_prev != prev || s->state == MGR_QUEUED)
            return false;
        n++;
        max_need = max_u64(max_need, mgr_need(m, s));
    }
    if (n != l->n_sessions || max_need != l->max_need || l->size < l->max_need)
        return false;
    /* Idle empty lanes are reclaimed at once. */
    if (!l->busy && n == 0)
        return false;
    return ((l->addr | l->size) & (MGR_ALIGN - 1)) == 0 && l->size >= MGR_ALIGN;
}

static bool check_list(const struct mgr_list *l, enum mgr_state state)
{
    uint32_t n = 0;
    const struct mgr_session *prev = NULL;
    for (const struct mgr_session *s = l->head; s; prev = s, s = s->q_next, n++)
        if (s->state != state || s->q_prev != prev ||
            (state == MGR_QUEUED && prev && !mgr_ranked_before(prev, s)))
            return false;
    return prev == l->tail && n == l->count;
}

static bool check_all(const sl_mem_mgr *m, struct span *spans, size_t max_spans)
{
    size_t n_spans = 0, n_blocks = 0, n_regions = 0;
    uint64_t used = 0, reserved = 0, lane_bytes = 0, charged = 0;
    uint32_t admitted = 0, queued = 0, ready = 0;
    size_t i = 0;
    void *v;
    while (sl_map_next(&m->sessions, &i, NULL, &v)) {
        const struct mgr_session *s = v;
        if (sl_map_get(&m->sessions, s->id) != s ||
            !check_session(m, s, spans, &n_spans, max_spans, &n_blocks))
            return false;
        if (s->state == MGR_QUEUED) {
            queued++;
            continue;
        }
        ready += s->state == MGR_READY;
        n_regions += s->region_pool != NULL;
        admitted++;
        used += s->used;
        reserved += max_u64(s->p, s->used);
        charged += mgr_outside(s);
    }
    if (n_blocks != m->blocks.count || n_spans != m->n_arena_blocks + n_regions ||
        used != m->persistent_used || reserved != m->persistent_reserved ||
        charged != m->framework_charged || admitted != m->n_admitted)
        return false;
    if (!check_list(&m->queue, MGR_QUEUED) || !check_list(&m->ready, MGR_READY) ||
        queued != m->queue.count || ready != m->ready.count)
        return false;

    if (m->lane_ids.count != m->n_lanes)
        return false;
    for (size_t l = 0; l < m->n_lanes; l++) {
        const struct mgr_lane *lane = m->lanes[l];
        if ((l > 0 && m->lanes[l - 1]->id >= lane->id) || mgr_lane_find(m, lane->id) != lane ||
            !check_lane(m, lane) || n_spans == max_spans)
            return false;
        lane_bytes += lane->size;
        spans[n_spans++] = (struct span){lane->addr, m->framework + lane->size};
    }
    if (lane_bytes != m->lane_bytes)
        return false;

    /* The admission rule. */
    if (reserved > m->capacity || charged > m->capacity - reserved ||
        lane_bytes + m->n_lanes * m->framework > m->capacity - reserved - charged)
        return false;

    /* Geometry: disjoint, inside the arena, and exactly what the pool holds. */
    qsort(spans, n_spans, sizeof(*spans), by_addr);
    uint64_t end = 0, pool_used = 0;
    for (size_t k = 0; k < n_spans; k++) {
        if (spans[k].addr < end || spans[k].size > m->capacity - spans[k].addr)
            return false;
        if (sl_mem_pool_block_size(m->pool, spans[k].addr) != spans[k].size)
            return false;
        end = spans[k].addr + spans[k].size;
        pool_used += spans[k].size;
    }
    sl_mem_pool_stats ps;
    sl_mem_pool_get_stats(m->pool, &ps);
    /* Regions hold P, blocks without one their size: the arena holds exactly
     * the left side of the admission rule, less the sessions' framework
     * charges (they hold no block). */
    return ps.used == pool_used && ps.n_allocated == n_spans && ps.capacity == m->capacity &&
           pool_used == reserved + lane_bytes + m->n_lanes * m->framework;
}

int sl_mem_check(const sl_mem_mgr *m)
{
    if (!m)
        return SL_EINVAL;
    if (sl_mem_pool_check(m->pool) != SL_OK)
        return SL_EINTERNAL;
    size_t max_spans = m->blocks.count + m->sessions.count + m->n_lanes;
    struct span *spans = sl_calloc(max_spans ? max_spans : 1, sizeof(*spans));
    if (!spans)
        return SL_ENOMEM;
    bool ok = check_all(m, spans, max_spans);
    sl_free(spans);
    return ok ? SL_OK : SL_EINTERNAL;
}
