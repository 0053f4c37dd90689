/* Randomised property test for the memory manager.
 *
 * Thousands of random sequences (fixed seeds) of open (admit, waiting or
 * not), allocate, free, register (set_ephemeral), run (lane busy / idle),
 * compact and close (release), each against a random configuration. A
 * shadow model built only from the public API's results is checked after
 * every step, together with sl_mem_check:
 *   - no two live blocks (persistent blocks, lane blocks with their
 *     framework part) overlap, all inside the arena;
 *   - accounting is exact per class (stats), per session (session_get) and
 *     per lane (lane infos), and the admission rule holds;
 *   - every admitted session's lane holds its need; idle lanes are exactly
 *     the largest need of their sessions, and never empty;
 *   - every refusal has the right reason: QUOTA and CAPACITY are predicted
 *     exactly from the model, FRAGMENTATION only when the rule allowed it,
 *     and a session whose need fits an existing lane is never refused when
 *     its persistent reservation fits (SymbioticLab/Salus#27);
 *   - the queue is served in order: no queued session is bypassed more than
 *     SL_MEM_MAX_BYPASS times;
 *   - closing every session returns everything: 0 used, 0 lanes, 0
 *     sessions, one free block of the whole capacity.
 * The same seeds replayed give the same trace (determinism). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager.h"
#include "sl_alloc.h"
#include "sl_test.h"
#include "test_memory.h"

#define MAX_SESSIONS 48
#define MAX_BLOCKS 24
#define MAX_LANES 64
#define N_SEQUENCES 2000

/* How often each outcome happened over all sequences: the test asserts that
 * the workload reaches every one of them. */
enum {
    C_ADMIT,
    C_QUOTA,
    C_CAPACITY,
    C_FRAGMENTATION,
    C_BLOCKED,
    C_QUEUE_ADMIT,
    C_BYPASS,
    C_SHARED,
    C_ALLOC,
    C_ALLOC_CAPACITY,
    C_ALLOC_FRAGMENTATION,
    C_EPH_MOVED,
    C_EPH_BUSY,
    C_EPH_REFUSED,
    C_COMPACT_MOVED,
    C_AUTO_MOVED,
    C_COUNT
};
static const char *const counter_names[C_COUNT] = {
    "admit",
    "quota",
    "capacity",
    "fragmentation",
    "bypass-blocked",
    "queue-admit",
    "bypass",
    "shared-lane",
    "alloc",
    "alloc-capacity",
    "alloc-fragmentation",
    "ephemeral-moved",
    "ephemeral-busy",
    "ephemeral-refused",
    "compact-moved",
    "auto-compact-moved",
};
static uint64_t counters[C_COUNT];
static uint64_t enomem_results; /* calls that failed for host memory */

struct mblock {
    uint64_t addr, size;
};

enum { GONE, QUEUED, ADMITTED };

struct msession {
    int state;
    uint64_t p, e; /* declared */
    uint64_t peak;
    bool peak_set;
    uint64_t used;
    struct mblock blocks[MAX_BLOCKS];
    int n_blocks;
    uint32_t lane;
    uint32_t bypassed;
    uint64_t region; /* base of its region when it declared P */
};

struct model {
    sl_mem_mgr *m;
    uint64_t cap, quota, fw, def;    /* quota: effective; fw, def: rounded */
    struct msession s[MAX_SESSIONS]; /* id = index + 1, arrival order */
    int n;
    uint32_t busy[MAX_LANES];
    int n_busy;
    uint64_t rng;
    uint64_t trace;
    uint64_t seed;
    int step;
    uint64_t p_zero; /* % of sessions that declare P = 0: physical = reserved */
    bool inject;     /* host allocations fail now and then */
    sl_mem_lane_info lanes[MAX_LANES];
    size_t n_lanes;
};

#define CHECK(md, cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail_msg("seed %llu step %d: %s (line %d)", (unsigned long long) (md)->seed,           \
                     (md)->step, #cond, __LINE__);                                                 \
    } while (0)

static int reset_alloc_failures(void **state)
{
    (void) state;
    sl_alloc_fail_after(0);
    return 0;
}

static uint64_t r256(uint64_t x)
{
    return (x + 255) & ~255ull;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

static uint64_t rnd(struct model *md, uint64_t lo, uint64_t hi)
{
    return test_rng_range(&md->rng, lo, hi);
}

static void mix(struct model *md, uint64_t v)
{
    md->trace = (md->trace ^ v) * 0x100000001B3ull;
}

/* The model's own statement of the need rule (manager.h, "Ephemeral
 * need"). */
static uint64_t need_of(const struct model *md, const struct msession *s, uint64_t peak,
                        bool peak_set)
{
    uint64_t need;
    if (s->e)
        need = max64(r256(s->e), peak_set ? r256(peak) : 0);
    else
        need = peak_set ? r256(peak) : md->def;
    return max64(need, 256);
}

static uint64_t need_now(const struct model *md, const struct msession *s)
{
    return need_of(md, s, s->peak, s->peak_set);
}

static uint64_t reserved_persistent(const struct model *md)
{
    uint64_t r = 0;
    for (int i = 0; i < md->n; i++)
        if (md->s[i].state == ADMITTED)
            r += max64(r256(md->s[i].p), md->s[i].used);
    return r;
}

static void load_lanes(struct model *md)
{
    md->n_lanes = sl_mem_lanes(md->m, md->lanes, MAX_LANES);
    CHECK(md, md->n_lanes <= MAX_LANES);
}

static uint64_t lanes_total(const struct model *md)
{
    uint64_t t = 0;
    for (size_t i = 0; i < md->n_lanes; i++)
        t += md->lanes[i].size + md->lanes[i].framework;
    return t;
}

static const sl_mem_lane_info *lane_by_id(const struct model *md, uint32_t id)
{
    for (size_t i = 0; i < md->n_lanes; i++)
        if (md->lanes[i].id == id)
            return &md->lanes[i];
    return NULL;
}

static bool is_busy(const struct model *md, uint32_t id)
{
    for (int i = 0; i < md->n_busy; i++)
        if (md->busy[i] == id)
            return true;
    return false;
}

static bool any_blocked(const struct model *md)
{
    for (int i = 0; i < md->n; i++)
        if (md->s[i].state == QUEUED && md->s[i].bypassed >= SL_MEM_MAX_BYPASS)
            return true;
    return false;
}

/* Session idx was admitted: every earlier session still waiting was
 * bypassed once more, and never beyond the bound. */
static void admitted(struct model *md, int idx, uint32_t lane)
{
    for (int i = 0; i < idx; i++) {
        if (md->s[i].state != QUEUED)
            continue;
        counters[C_BYPASS]++;
        md->s[i].bypassed++;
        CHECK(md, md->s[i].bypassed <= SL_MEM_MAX_BYPASS);
    }
    md->s[idx].state = ADMITTED;
    md->s[idx].lane = lane;
    sl_mem_session_info si;
    CHECK(md, sl_mem_session_get(md->m, (uint64_t) idx + 1, &si) == SL_OK);
    md->s[idx].region = si.region_base;
}

static void drain(struct model *md)
{
    uint64_t id;
    uint32_t lane;
    while (sl_mem_next_admitted(md->m, &id, &lane)) {
        CHECK(md, id >= 1 && id <= (uint64_t) md->n);
        CHECK(md, md->s[id - 1].state == QUEUED);
        CHECK(md, lane != 0);
        mix(md, id * 31 + lane);
        counters[C_QUEUE_ADMIT]++;
        admitted(md, (int) id - 1, lane);
    }
}

struct span {
    uint64_t addr, size;
};

static int span_cmp(const void *pa, const void *pb)
{
    const struct span *a = pa, *b = pb;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static void verify(struct model *md)
{
    CHECK(md, sl_mem_check(md->m) == SL_OK);
    load_lanes(md);
    sl_mem_stats st;
    sl_mem_get_stats(md->m, &st);

    static struct span spans[MAX_SESSIONS * MAX_BLOCKS + MAX_LANES];
    size_t n_spans = 0;
    uint64_t used = 0, reserved = 0, lane_bytes = 0;
    uint32_t n_admitted = 0, n_queued = 0;
    for (int i = 0; i < md->n; i++) {
        const struct msession *s = &md->s[i];
        sl_mem_session_info si;
        if (s->state == GONE) {
            CHECK(md, sl_mem_session_get(md->m, (uint64_t) i + 1, &si) == SL_ENOTFOUND);
            continue;
        }
        CHECK(md, sl_mem_session_get(md->m, (uint64_t) i + 1, &si) == SL_OK);
        CHECK(md, si.queued == (s->state == QUEUED));
        CHECK(md, si.used == s->used);
        CHECK(md, si.need == need_now(md, s));
        if (s->state == QUEUED) {
            CHECK(md, si.lane == 0 && s->used == 0);
            CHECK(md, si.reason == SL_MEM_CAPACITY || si.reason == SL_MEM_FRAGMENTATION);
            n_queued++;
            continue;
        }
        n_admitted++;
        CHECK(md, si.lane == s->lane);
        const sl_mem_lane_info *l = lane_by_id(md, s->lane);
        CHECK(md, l != NULL);
        CHECK(md, l->size >= need_now(md, s));
        /* A declared P is one region holding all its blocks. */
        CHECK(md, si.region_size == (s->p ? r256(s->p) : 0));
        CHECK(md, !s->p || si.region_base == s->region);
        if (s->p)
            spans[n_spans++] = (struct span){s->region, r256(s->p)};
        uint64_t block_sum = 0;
        for (int b = 0; b < s->n_blocks; b++) {
            const struct mblock *blk = &s->blocks[b];
            if (s->p) {
                CHECK(md,
                      blk->addr >= s->region && blk->addr + blk->size <= s->region + r256(s->p));
                for (int c = 0; c < b; c++)
                    CHECK(md, blk->addr + blk->size <= s->blocks[c].addr ||
                                  s->blocks[c].addr + s->blocks[c].size <= blk->addr);
            } else {
                spans[n_spans++] = (struct span){blk->addr, blk->size};
            }
            block_sum += blk->size;
        }
        CHECK(md, block_sum == s->used);
        uint64_t held = max64(r256(s->p), s->used);
        if (s->p)
            CHECK(md, s->used <= r256(s->p));
        CHECK(md, held + need_now(md, s) <= md->quota);
        used += s->used;
        reserved += held;
    }
    for (size_t k = 0; k < md->n_lanes; k++) {
        const sl_mem_lane_info *l = &md->lanes[k];
        CHECK(md, k == 0 || md->lanes[k - 1].id < l->id);
        CHECK(md, l->framework == md->fw && l->base == l->framework_base + md->fw);
        uint32_t members = 0;
        uint64_t max_need = 0;
        for (int i = 0; i < md->n; i++) {
            if (md->s[i].state == ADMITTED && md->s[i].lane == l->id) {
                members++;
                max_need = max64(max_need, need_now(md, &md->s[i]));
            }
        }
        CHECK(md, members == l->n_sessions);
        CHECK(md, max_need == l->max_peak);
        CHECK(md, l->size >= max_need);
        CHECK(md, l->busy == is_busy(md, l->id));
        /* A shrink that ran out of host memory leaves a lane larger. */
        if (!l->busy)
            CHECK(md, members > 0 && (md->inject || l->size == max_need));
        spans[n_spans++] = (struct span){l->framework_base, l->framework + l->size};
        lane_bytes += l->size;
    }
    for (int i = 0; i < md->n_busy; i++)
        CHECK(md, lane_by_id(md, md->busy[i]) != NULL);

    CHECK(md, st.capacity == md->cap);
    CHECK(md, st.persistent_used == used);
    CHECK(md, st.persistent_reserved == reserved);
    CHECK(md, st.lanes == lane_bytes);
    CHECK(md, st.framework == md->n_lanes * md->fw);
    CHECK(md, st.n_lanes == md->n_lanes);
    CHECK(md, st.n_sessions == n_admitted && st.n_queued == n_queued);
    CHECK(md, reserved + lane_bytes + st.framework <= md->cap);
    CHECK(md, st.free == md->cap - reserved - lane_bytes - st.framework);
    CHECK(md, st.largest_free <= st.free);

    qsort(spans, n_spans, sizeof(*spans), span_cmp);
    uint64_t end = 0;
    for (size_t k = 0; k < n_spans; k++) {
        CHECK(md, spans[k].addr >= end && spans[k].addr % 256 == 0);
        CHECK(md, spans[k].size <= md->cap - spans[k].addr);
        end = spans[k].addr + spans[k].size;
    }

    static sl_mem_session_info q[MAX_SESSIONS];
    size_t nq = sl_mem_queue(md->m, q, MAX_SESSIONS);
    CHECK(md, nq == n_queued);
    size_t k = 0;
    for (int i = 0; i < md->n; i++)
        if (md->s[i].state == QUEUED)
            CHECK(md, q[k++].id == (uint64_t) i + 1);
}

/* A random admitted (or, with queued_too, live) session, or -1. */
static int pick_session(struct model *md, bool queued_too)
{
    int live[MAX_SESSIONS], n = 0;
    for (int i = 0; i < md->n; i++)
        if (md->s[i].state == ADMITTED || (queued_too && md->s[i].state == QUEUED))
            live[n++] = i;
    return n ? live[rnd(md, 0, (uint64_t) n - 1)] : -1;
}

static void op_open(struct model *md)
{
    if (md->n == MAX_SESSIONS)
        return;
    int idx = md->n++;
    struct msession *s = &md->s[idx];
    memset(s, 0, sizeof(*s));
    uint64_t dice = rnd(md, 0, 99);
    s->p = dice < md->p_zero ? 0 : rnd(md, 1, md->cap / 3);
    s->e = rnd(md, 0, 99) < 30 ? 0 : rnd(md, 1, md->cap / 4);
    if (rnd(md, 0, 99) < 5)
        s->p = rnd(md, md->cap / 2, md->cap + md->cap / 4);
    bool wait = rnd(md, 0, 1);

    uint64_t p_r = r256(s->p), need = need_now(md, s);
    bool quota = s->p > md->cap || s->e > md->cap || p_r > md->quota || need > md->quota - p_r ||
                 p_r + need + md->fw > md->cap;
    bool blocked = any_blocked(md);
    uint64_t room = md->cap - lanes_total(md) - reserved_persistent(md);
    const sl_mem_lane_info *share = NULL, *grow = NULL;
    for (size_t k = 0; k < md->n_lanes; k++) {
        const sl_mem_lane_info *l = &md->lanes[k];
        if (l->size >= need)
            share = l;
        else if (!l->busy && (!grow || l->size > grow->size))
            grow = l;
    }
    bool new_fits = !quota && p_r + need + md->fw <= room;
    bool grow_fits = !quota && grow && p_r + need - grow->size <= room;

    int reason = -1;
    uint32_t lane = 0;
    int rc = sl_mem_admit(md->m, (uint64_t) idx + 1, s->p, s->e, wait, &reason, &lane);
    mix(md, (uint64_t) rc * 7 + (uint64_t) reason * 3 + lane);
    if (rc == SL_ENOMEM) {
        CHECK(md, md->inject);
        enomem_results++;
        s->state = GONE;
        return;
    }
    if (quota) {
        CHECK(md, rc == SL_EEXHAUSTED && reason == SL_MEM_QUOTA);
        counters[C_QUOTA]++;
        s->state = GONE;
        return;
    }
    if (rc == SL_OK) {
        CHECK(md, !blocked && reason == SL_MEM_FITS && lane != 0);
        counters[C_ADMIT]++;
        counters[C_SHARED] += lane_by_id(md, lane) != NULL;
        admitted(md, idx, lane);
        return;
    }
    CHECK(md, rc == SL_EEXHAUSTED);
    counters[blocked ? C_BLOCKED : reason == SL_MEM_CAPACITY ? C_CAPACITY : C_FRAGMENTATION]++;
    if (blocked) {
        CHECK(md, reason == SL_MEM_CAPACITY);
    } else {
        /* a lane that fits and a reservation that fits: admitted, unless
         * its P cannot be had in one piece */
        if (share && p_r <= room)
            CHECK(md, reason == SL_MEM_FRAGMENTATION && p_r > 0);
        if (reason == SL_MEM_CAPACITY)
            CHECK(md, p_r > room || (!share && !new_fits && !grow_fits));
        else
            CHECK(md, reason == SL_MEM_FRAGMENTATION && p_r <= room &&
                          (p_r > 0 || new_fits || grow_fits));
    }
    s->state = wait ? QUEUED : GONE;
}

static void op_alloc(struct model *md)
{
    int idx = pick_session(md, false);
    if (idx < 0 || md->s[idx].n_blocks == MAX_BLOCKS)
        return;
    struct msession *s = &md->s[idx];
    /* Mostly small blocks between a few large ones: frees then leave holes. */
    uint64_t dice = rnd(md, 0, 99);
    uint64_t bytes = dice < 3    ? rnd(md, md->cap / 2, md->cap * 2)
                     : dice < 70 ? rnd(md, 1, md->cap / 40)
                                 : rnd(md, md->cap / 40, md->cap / 6);
    uint64_t p_r = r256(s->p), need = need_now(md, s);
    bool quota = bytes > md->cap;
    uint64_t size = quota ? 0 : r256(bytes), after = s->used + size;
    if (!quota)
        quota = p_r ? after > p_r : after > md->quota || need > md->quota - after;
    uint64_t delta = quota ? 0 : max64(p_r, after) - max64(p_r, s->used);
    bool capacity = !quota && reserved_persistent(md) + delta > md->cap - lanes_total(md);

    /* In a region, best fit succeeds exactly when one of its gaps holds the
     * block: the model knows the gaps from its own blocks. */
    bool region_fits = false;
    if (s->p && !quota) {
        struct span gaps[MAX_BLOCKS];
        for (int b = 0; b < s->n_blocks; b++)
            gaps[b] = (struct span){s->blocks[b].addr, s->blocks[b].size};
        qsort(gaps, (size_t) s->n_blocks, sizeof(*gaps), span_cmp);
        uint64_t at = s->region, end = s->region + r256(s->p);
        for (int b = 0; b < s->n_blocks; b++) {
            region_fits |= gaps[b].addr - at >= size;
            at = gaps[b].addr + gaps[b].size;
        }
        region_fits |= end - at >= size;
    }
    uint64_t addr = UINT64_MAX;
    int reason = -1;
    int rc = sl_mem_alloc(md->m, (uint64_t) idx + 1, bytes, &addr, &reason);
    mix(md, (uint64_t) rc * 5 + (uint64_t) reason + addr);
    if (rc == SL_ENOMEM) {
        CHECK(md, md->inject && !quota && !capacity);
        enomem_results++;
        return;
    }
    if (quota) {
        CHECK(md, rc == SL_EEXHAUSTED && reason == SL_MEM_QUOTA);
    } else if (capacity) {
        CHECK(md, rc == SL_EEXHAUSTED && reason == SL_MEM_CAPACITY);
        counters[C_ALLOC_CAPACITY]++;
    } else if (rc == SL_OK) {
        counters[C_ALLOC]++;
        CHECK(md, !s->p || region_fits);
        CHECK(md, addr % 256 == 0 && addr <= md->cap - size);
        s->blocks[s->n_blocks++] = (struct mblock){addr, size};
        s->used = after;
    } else {
        CHECK(md, rc == SL_EEXHAUSTED && reason == SL_MEM_FRAGMENTATION);
        counters[C_ALLOC_FRAGMENTATION]++;
        if (s->p) {
            CHECK(md, !region_fits);
        } else {
            sl_mem_stats st;
            sl_mem_get_stats(md->m, &st);
            CHECK(md, st.free >= size && st.largest_free < size);
        }
    }
}

static void op_free(struct model *md)
{
    int idx = pick_session(md, false);
    if (idx < 0 || md->s[idx].n_blocks == 0)
        return;
    struct msession *s = &md->s[idx];
    int b = (int) rnd(md, 0, (uint64_t) s->n_blocks - 1);
    /* Another session may not free it. */
    int other = pick_session(md, false);
    if (other >= 0 && other != idx)
        CHECK(md, sl_mem_free(md->m, (uint64_t) other + 1, s->blocks[b].addr) == SL_EINVAL);
    CHECK(md, sl_mem_free(md->m, (uint64_t) idx + 1, s->blocks[b].addr) == SL_OK);
    s->used -= s->blocks[b].size;
    s->blocks[b] = s->blocks[--s->n_blocks];
}

static void op_set_ephemeral(struct model *md)
{
    int idx = pick_session(md, false);
    if (idx < 0)
        return;
    struct msession *s = &md->s[idx];
    uint64_t dice = rnd(md, 0, 99);
    uint64_t peak = dice < 15 ? 0 : rnd(md, 1, md->cap / 3);
    if (dice >= 97)
        peak = rnd(md, md->cap, md->cap * 2);
    uint64_t held = max64(r256(s->p), s->used);
    bool quota = peak > md->cap;
    uint64_t need = quota ? 0 : need_of(md, s, peak, true);
    if (!quota)
        quota = held + need > md->quota || need + md->fw > md->cap;
    const sl_mem_lane_info *l = lane_by_id(md, s->lane);
    bool other_fits = false;
    for (size_t k = 0; k < md->n_lanes; k++)
        other_fits |= md->lanes[k].id != s->lane && md->lanes[k].size >= need;

    uint32_t lane = 0;
    int reason = -1;
    int rc = sl_mem_set_ephemeral(md->m, (uint64_t) idx + 1, peak, &lane, &reason);
    mix(md, (uint64_t) rc * 11 + (uint64_t) reason + lane);
    if (rc == SL_ENOMEM) {
        CHECK(md, md->inject && !quota);
        enomem_results++;
        return;
    }
    if (quota) {
        CHECK(md, rc == SL_EEXHAUSTED && reason == SL_MEM_QUOTA);
        return;
    }
    if (rc == SL_OK) {
        counters[C_EPH_MOVED] += lane != s->lane;
        s->peak = peak;
        s->peak_set = true;
        s->lane = lane;
        return;
    }
    CHECK(md, l->size < need);
    if (rc == SL_EBUSY) {
        CHECK(md, l->busy);
        counters[C_EPH_BUSY]++;
        return;
    }
    counters[C_EPH_REFUSED]++;
    CHECK(md, rc == SL_EEXHAUSTED && !l->busy && !other_fits);
    CHECK(md, reason == SL_MEM_CAPACITY || reason == SL_MEM_FRAGMENTATION);
}

static void op_run(struct model *md)
{
    if (md->n_lanes == 0)
        return;
    uint32_t id = md->lanes[rnd(md, 0, md->n_lanes - 1)].id;
    if (is_busy(md, id)) {
        for (int i = 0; i < md->n_busy; i++)
            if (md->busy[i] == id)
                md->busy[i] = md->busy[--md->n_busy];
        sl_mem_lane_idle(md->m, id);
    } else {
        md->busy[md->n_busy++] = id;
        sl_mem_lane_busy(md->m, id);
    }
}

static void op_release(struct model *md)
{
    int idx = pick_session(md, true);
    if (idx < 0)
        return;
    sl_mem_release(md->m, (uint64_t) idx + 1);
    md->s[idx].state = GONE;
    md->s[idx].n_blocks = 0;
    md->s[idx].used = 0;
}

/* Lanes that kept their size but not their place were moved by a
 * compaction. */
static void count_moves(struct model *md, const sl_mem_lane_info *before, size_t n_before)
{
    for (size_t i = 0; i < n_before; i++) {
        const sl_mem_lane_info *now = lane_by_id(md, before[i].id);
        if (now && now->size == before[i].size && now->base != before[i].base)
            counters[C_AUTO_MOVED]++;
    }
}

static void step(struct model *md)
{
    static sl_mem_lane_info before[MAX_LANES];
    size_t n_before = md->n_lanes;
    memcpy(before, md->lanes, n_before * sizeof(*before));
    uint64_t op = rnd(md, 0, 99);
    if (md->inject && rnd(md, 0, 99) < 20)
        sl_alloc_fail_after((long) rnd(md, 1, 12));
    if (op < 20)
        op_open(md);
    else if (op < 45)
        op_alloc(md);
    else if (op < 58)
        op_free(md);
    else if (op < 72)
        op_set_ephemeral(md);
    else if (op < 84)
        op_run(md);
    else if (op < 96)
        op_release(md);
    else {
        size_t moved = sl_mem_compact(md->m);
        counters[C_COMPACT_MOVED] += moved > 0;
        mix(md, moved);
    }
    sl_alloc_fail_after(0);
    drain(md);
    verify(md);
    if (op < 96)
        count_moves(md, before, n_before);
}

/* One sequence; returns its trace. */
static uint64_t run_sequence(uint64_t seed, bool inject)
{
    static struct model md;
    memset(&md, 0, sizeof(md));
    md.seed = seed;
    md.inject = inject;
    md.rng = seed * 0x9E3779B97F4A7C15ull + 1;
    md.trace = 0xcbf29ce484222325ull;
    md.cap = rnd(&md, 32, 512) * 256 * (rnd(&md, 0, 3) == 0 ? 64 : 1);
    md.fw = rnd(&md, 0, 99) < 40 ? 0 : r256(rnd(&md, 1, md.cap / 16));
    md.def = max64(r256(rnd(&md, 1, md.cap / 8)), 256);
    md.p_zero = rnd(&md, 20, 95);
    uint64_t quota = rnd(&md, 0, 1) ? 0 : rnd(&md, md.cap / 4, md.cap);
    md.quota = quota ? quota : md.cap;
    sl_mem_config cfg = {.capacity = md.cap,
                         .session_quota = quota,
                         .framework_per_lane = md.fw,
                         .default_ephemeral = md.def};
    assert_sl_ok(sl_mem_mgr_create(&cfg, &md.m));
    verify(&md);

    int steps = (int) rnd(&md, 20, 120);
    for (md.step = 0; md.step < steps; md.step++)
        step(&md);

    /* Close everything, in random order, and let running iterations end. */
    for (;;) {
        int idx = pick_session(&md, true);
        if (idx < 0)
            break;
        op_release(&md);
        drain(&md);
        verify(&md);
        md.step++;
    }
    while (md.n_busy > 0) {
        uint32_t id = md.busy[--md.n_busy];
        sl_mem_lane_idle(md.m, id);
        verify(&md);
    }
    sl_mem_stats st;
    sl_mem_get_stats(md.m, &st);
    CHECK(&md, st.persistent_used == 0 && st.persistent_reserved == 0);
    CHECK(&md, st.lanes == 0 && st.framework == 0 && st.n_lanes == 0);
    CHECK(&md, st.n_sessions == 0 && st.n_queued == 0);
    CHECK(&md, st.free == md.cap && st.largest_free == md.cap);
    sl_mem_mgr_destroy(md.m);
    return md.trace;
}

static void test_random_sequences(void **state)
{
    (void) state;
    memset(counters, 0, sizeof(counters));
    for (uint64_t seed = 1; seed <= N_SEQUENCES; seed++)
        (void) run_sequence(seed, false);
    for (int c = 0; c < C_COUNT; c++) {
        print_message("  %-20s %llu\n", counter_names[c], (unsigned long long) counters[c]);
        assert_true(counters[c] > 0);
    }
}

static void test_deterministic(void **state)
{
    (void) state;
    for (uint64_t seed = 1; seed <= 50; seed++)
        assert_int_equal(run_sequence(seed, false), run_sequence(seed, false));
}

/* Host allocations fail at random points: every call either succeeds or
 * fails with SL_ENOMEM leaving a consistent manager, and closing everything
 * still returns every byte. */
static void test_random_host_failures(void **state)
{
    (void) state;
    enomem_results = 0;
    for (uint64_t seed = 100001; seed <= 100400; seed++)
        (void) run_sequence(seed, true);
    print_message("  %llu calls failed with SL_ENOMEM\n", (unsigned long long) enomem_results);
    assert_true(enomem_results > 100);
}

int test_manager_prop_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_sequences),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test_teardown(test_random_host_failures, reset_alloc_failures),
    };
    return cmocka_run_group_tests_name("memory/manager_prop", tests, NULL, NULL);
}
