/* Compaction: replanning where idle lanes sit, and rebuilding the pool to
 * match.
 *
 * Why a rebuild. The pool only allocates best fit; it cannot be told to
 * put a block at an address, and freeing an idle lane to re-allocate it
 * could, on a host allocation failure halfway, leave a lane without a
 * block. So a compaction plans every address first, builds a fresh pool in
 * address order, and swaps it in only when the whole layout is in place:
 * on any failure the old pool and every record are untouched. In a fresh
 * pool filled in address order the only free block is always the tail, and
 * an allocation takes the low end of the block it splits (pool.c; the pool
 * tests pin it), so each block lands where planned. Every address is
 * verified, so a pool that behaved otherwise would make compaction fail
 * safely, never corrupt the layout.
 *
 * The plan. Fixed blocks (persistent regions and blocks, busy lanes) cut
 * the arena into windows. Movable blocks (every idle lane, at its exact need, and the
 * requested block) are placed largest first, each at the low end of the
 * window with the least room that still holds it (first-fit decreasing
 * with best-fit windows): tight windows fill first and the largest free runs
 * survive. Deterministic: ties go to the request, then the lowest lane id,
 * and among windows to the lowest address.
 *
 * Cost: a plan is O(lanes x windows) against the sorted persistent layout,
 * which is cached until persistent memory changes (O(n log n) for n regions
 * and arena blocks to redo); applying one is O(n) pool operations.
 * Compaction only runs when a block found no contiguous space, or on
 * request; a failed plan changes nothing. */
#include <stdlib.h>

#include "mgr_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"

struct seg {
    uint64_t addr;         /* current address (fixed) or planned (movable) */
    uint64_t size;         /* block size in the pool */
    struct mgr_lane *lane; /* NULL: persistent memory or the request */
    uint64_t lane_size;    /* the lane's ephemeral size after the plan */
    bool request;
};

struct window {
    uint64_t start, end;
};

/* The persistent part of the arena (regions, blocks of sessions without
 * one) sorted by address, and the windows between, as of one
 * persistent_gen. Persistent memory holds data and never moves; lanes
 * change all the time (every iteration makes one busy and idle again), so
 * they are cut into the windows per plan, O(windows + lanes log lanes). The
 * pump retries queued sessions whenever a lane goes idle: without the cache
 * each retry would collect and sort every persistent block again. */
struct mgr_compact_cache {
    uint64_t gen;
    bool valid;
    struct seg *persistent;
    size_t n_persistent;
    struct window *win;
    size_t n_win;
};

void mgr_compact_fini(sl_mem_mgr *m)
{
    struct mgr_compact_cache *c = m->compact_cache;
    if (!c)
        return;
    sl_free(c->persistent);
    sl_free(c->win);
    sl_free(c);
    m->compact_cache = NULL;
}

static int addr_order(const void *pa, const void *pb)
{
    const struct seg *a = pa, *b = pb;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* Persistent memory: regions whole, blocks of sessions without one. Walks
 * sessions, not the block map, so tensors inside regions cost nothing:
 * O(sessions + arena blocks), then the sort. */
static int collect_persistent(const sl_mem_mgr *m, struct seg **out, size_t *n_out)
{
    size_t n = m->n_arena_blocks + m->sessions.count + 1;
    struct seg *segs = sl_malloc(n * sizeof(*segs));
    if (!segs)
        return SL_ENOMEM;
    size_t k = 0, i = 0;
    void *v;
    while (sl_map_next(&m->sessions, &i, NULL, &v)) {
        const struct mgr_session *s = v;
        if (s->region_pool) {
            segs[k++] = (struct seg){.addr = s->region, .size = s->p};
            continue;
        }
        for (const struct mgr_block *b = s->blocks; b; b = b->next)
            segs[k++] = (struct seg){.addr = b->addr, .size = b->size};
    }
    qsort(segs, k, sizeof(*segs), addr_order);
    *out = segs;
    *n_out = k;
    return SL_OK;
}

/* The cache, valid for the current persistent_gen. */
static int persistent_layout(sl_mem_mgr *m, struct mgr_compact_cache **out)
{
    struct mgr_compact_cache *c = m->compact_cache;
    if (!c) {
        if (!(c = sl_calloc(1, sizeof(*c))))
            return SL_ENOMEM;
        m->compact_cache = c;
    }
    if (c->valid && c->gen == m->persistent_gen) {
        *out = c;
        return SL_OK;
    }
    c->valid = false;
    sl_free(c->persistent);
    sl_free(c->win);
    c->persistent = NULL;
    c->win = NULL;
    int rc = collect_persistent(m, &c->persistent, &c->n_persistent);
    if (rc != SL_OK)
        return rc;
    if (!(c->win = sl_calloc(c->n_persistent + 1, sizeof(*c->win))))
        return SL_ENOMEM;
    c->n_win = 0;
    uint64_t end = 0;
    for (size_t i = 0; i < c->n_persistent; i++) {
        if (c->persistent[i].addr > end)
            c->win[c->n_win++] = (struct window){end, c->persistent[i].addr};
        end = c->persistent[i].addr + c->persistent[i].size;
    }
    if (end < m->capacity)
        c->win[c->n_win++] = (struct window){end, m->capacity};
    c->gen = m->persistent_gen;
    c->valid = true;
    *out = c;
    return SL_OK;
}

/* Lanes as segments: the busy ones where they are (fixed), or all of them
 * with resize at size resize_to; sorted by address. */
static size_t collect_lanes(const sl_mem_mgr *m, bool all, const struct mgr_lane *resize,
                            uint64_t resize_to, struct seg *out)
{
    size_t k = 0;
    for (size_t l = 0; l < m->n_lanes; l++) {
        struct mgr_lane *lane = m->lanes[l];
        if (!all && !lane->busy)
            continue;
        uint64_t size = lane == resize ? resize_to : lane->size;
        out[k++] = (struct seg){
            .addr = lane->addr, .size = m->framework + size, .lane = lane, .lane_size = size};
    }
    qsort(out, k, sizeof(*out), addr_order);
    return k;
}

/* Placement order: largest first, the request before a lane of its size,
 * then by lane id. */
static int plan_order(const void *pa, const void *pb)
{
    const struct seg *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    if (a->request != b->request)
        return a->request ? -1 : 1;
    return a->lane->id < b->lane->id ? -1 : a->lane->id > b->lane->id;
}

/* The movable blocks: every idle lane at its exact need (or req's new
 * size), and the request, in placement order. */
static size_t collect_movable(const sl_mem_mgr *m, const struct mgr_request *req, struct seg *items)
{
    size_t k = 0;
    for (size_t l = 0; l < m->n_lanes; l++) {
        struct mgr_lane *lane = m->lanes[l];
        if (lane->busy)
            continue;
        uint64_t size = lane->size;
        if (lane == req->resize)
            size = req->resize_to;
        else if (lane->max_need && lane->max_need < size)
            size = lane->max_need;
        items[k++] = (struct seg){.size = m->framework + size, .lane = lane, .lane_size = size};
    }
    if (req->size)
        items[k++] = (struct seg){.size = req->size, .request = true};
    qsort(items, k, sizeof(*items), plan_order);
    return k;
}

/* The cached windows cut by the busy lanes (sorted; each lies inside one
 * window, since lanes never overlap persistent memory). */
static size_t cut_windows(const struct mgr_compact_cache *c, const struct seg *busy, size_t n_busy,
                          struct window *out)
{
    size_t k = 0, b = 0;
    for (size_t w = 0; w < c->n_win; w++) {
        uint64_t start = c->win[w].start;
        for (; b < n_busy && busy[b].addr < c->win[w].end; b++) {
            if (busy[b].addr > start)
                out[k++] = (struct window){start, busy[b].addr};
            start = busy[b].addr + busy[b].size;
        }
        if (start < c->win[w].end)
            out[k++] = (struct window){start, c->win[w].end};
    }
    return k;
}

/* Gives every item an address in the windows: each, largest first, at the
 * low end of the window with the least room left that holds it. Uses
 * win[].start as the cursor. */
static int plan(struct window *win, size_t n_win, struct seg *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t best = n_win;
        for (size_t w = 0; w < n_win; w++) {
            uint64_t room = win[w].end - win[w].start;
            if (room >= items[i].size && (best == n_win || room < win[best].end - win[best].start))
                best = w;
        }
        if (best == n_win)
            return SL_EEXHAUSTED;
        items[i].addr = win[best].start;
        win[best].start += items[i].size;
    }
    return SL_OK;
}

/* Allocates [addr, addr + size) in a pool being filled in address order. */
static int claim(sl_mem_pool *p, uint64_t addr, uint64_t size)
{
    uint64_t got;
    int rc = sl_mem_pool_alloc(p, size, &got);
    return rc == SL_OK && got != addr ? SL_EINTERNAL : rc;
}

/* Builds a pool holding exactly segs (sorted by address) and swaps it in. */
static int rebuild(sl_mem_mgr *m, const struct seg *segs, size_t n)
{
    uint64_t *gaps = sl_calloc(n + 1, sizeof(*gaps));
    if (!gaps)
        return SL_ENOMEM;
    sl_mem_pool *fresh = NULL;
    int rc = sl_mem_pool_create(0, m->capacity, MGR_ALIGN, &fresh);
    if (rc != SL_OK)
        goto out_free_gaps;
    size_t n_gaps = 0;
    uint64_t cursor = 0;
    for (size_t i = 0; i < n; i++) {
        /* Gaps are claimed too, so that the next block starts where it
         * must, and given back at the end. */
        if (segs[i].addr > cursor) {
            if ((rc = claim(fresh, cursor, segs[i].addr - cursor)) != SL_OK)
                goto out_destroy;
            gaps[n_gaps++] = cursor;
        }
        if ((rc = claim(fresh, segs[i].addr, segs[i].size)) != SL_OK)
            goto out_destroy;
        cursor = segs[i].addr + segs[i].size;
    }
    for (size_t g = 0; g < n_gaps; g++)
        (void) sl_mem_pool_free(fresh, gaps[g]);
    sl_mem_pool_destroy(m->pool);
    m->pool = fresh;
    sl_free(gaps);
    return SL_OK;

out_destroy:
    sl_mem_pool_destroy(fresh);
out_free_gaps:
    sl_free(gaps);
    return rc;
}

/* Records the new layout of every lane in segs; returns how many moved. */
static size_t commit(sl_mem_mgr *m, const struct seg *segs, size_t n, struct mgr_request *req)
{
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) {
        struct mgr_lane *l = segs[i].lane;
        if (segs[i].request)
            req->addr = segs[i].addr;
        if (!l)
            continue;
        moved += l->addr != segs[i].addr;
        m->lane_bytes = m->lane_bytes - l->size + segs[i].lane_size;
        l->addr = segs[i].addr;
        l->size = segs[i].lane_size;
    }
    return moved;
}

/* Whether the plan is worth applying without a request: a larger free run
 * than now, or memory given back by shrinking. segs are sorted by address. */
static bool plan_is_better(const sl_mem_mgr *m, const struct seg *segs, size_t n)
{
    uint64_t largest = 0, cursor = 0;
    bool shrinks = false;
    for (size_t i = 0; i < n; i++) {
        if (segs[i].addr - cursor > largest)
            largest = segs[i].addr - cursor;
        cursor = segs[i].addr + segs[i].size;
        shrinks |= segs[i].lane && segs[i].lane_size < segs[i].lane->size;
    }
    if (m->capacity - cursor > largest)
        largest = m->capacity - cursor;
    sl_mem_pool_stats ps;
    sl_mem_pool_get_stats(m->pool, &ps);
    return shrinks || largest > ps.largest_free;
}

/* Whether a plan could change anything: something must be able to move.
 * Without a movable lane the request alone would go best fit into the
 * existing gaps, which the pool already found wanting. */
static bool anything_movable(const sl_mem_mgr *m, const struct mgr_request *req)
{
    if (req->resize)
        return true;
    for (size_t l = 0; l < m->n_lanes; l++)
        if (!m->lanes[l]->busy)
            return true;
    return false;
}

/* persistent and lanes, both sorted by address, into one list. */
static struct seg *merge(const struct seg *persistent, size_t n_persistent, const struct seg *lanes,
                         size_t n_lanes)
{
    struct seg *all = sl_malloc((n_persistent + n_lanes + 1) * sizeof(*all));
    if (!all)
        return NULL;
    size_t p = 0, l = 0, k = 0;
    while (p < n_persistent || l < n_lanes)
        all[k++] = l == n_lanes || (p < n_persistent && persistent[p].addr < lanes[l].addr)
                       ? persistent[p++]
                       : lanes[l++];
    return all;
}

int mgr_compact(sl_mem_mgr *m, struct mgr_request *req, bool apply_if_better, size_t *moved)
{
    *moved = 0;
    if (!anything_movable(m, req))
        return apply_if_better ? SL_OK : SL_EEXHAUSTED;
    struct mgr_compact_cache *c;
    int rc = persistent_layout(m, &c);
    if (rc != SL_OK)
        return rc;
    /* lanes[0, n_busy): the busy ones, then the movable ones */
    struct seg *lanes = sl_malloc((m->n_lanes + 1) * sizeof(*lanes));
    struct window *win = sl_malloc((c->n_win + m->n_lanes + 1) * sizeof(*win));
    struct seg *all = NULL;
    if (!lanes || !win) {
        rc = SL_ENOMEM;
        goto out_free;
    }
    size_t n_busy = collect_lanes(m, false, NULL, 0, lanes);
    size_t n_win = cut_windows(c, lanes, n_busy, win);
    size_t n_items = collect_movable(m, req, lanes + n_busy);
    if ((rc = plan(win, n_win, lanes + n_busy, n_items)) != SL_OK)
        goto out_free;
    qsort(lanes, n_busy + n_items, sizeof(*lanes), addr_order);
    size_t n = c->n_persistent + n_busy + n_items;
    if (!(all = merge(c->persistent, c->n_persistent, lanes, n_busy + n_items))) {
        rc = SL_ENOMEM;
        goto out_free;
    }
    if (!(apply_if_better && !plan_is_better(m, all, n)) && (rc = rebuild(m, all, n)) == SL_OK)
        *moved = commit(m, all, n, req);

out_free:
    sl_free(all);
    sl_free(win);
    sl_free(lanes);
    return rc;
}

int mgr_shrink_in_place(sl_mem_mgr *m, struct mgr_lane *l, uint64_t size)
{
    struct mgr_request req = {.resize = l, .resize_to = size};
    struct mgr_compact_cache *c;
    int rc = persistent_layout(m, &c);
    if (rc != SL_OK)
        return rc;
    struct seg *lanes = sl_malloc((m->n_lanes + 1) * sizeof(*lanes));
    if (!lanes)
        return SL_ENOMEM;
    size_t n_lanes = collect_lanes(m, true, l, size, lanes);
    struct seg *all = merge(c->persistent, c->n_persistent, lanes, n_lanes);
    rc = all ? rebuild(m, all, c->n_persistent + n_lanes) : SL_ENOMEM;
    if (rc == SL_OK)
        (void) commit(m, all, c->n_persistent + n_lanes, &req);
    sl_free(all);
    sl_free(lanes);
    return rc;
}
