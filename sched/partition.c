/* Compute partition sizing (partition.h). */
#include "partition.h"

#include "sl_error.h"

#include <math.h>
#include <stddef.h>

sl_part_plan_config sl_part_plan_config_default(unsigned units, unsigned min_units, unsigned align)
{
    return (sl_part_plan_config){.units = units,
                                 .min_units = min_units,
                                 .align = align,
                                 .headroom = 0.10,
                                 .grow_load = 0.50,
                                 .shrink_load = 0.20,
                                 .ewma = 0.2,
                                 .hold = 8,
                                 .objective = 0.20,
                                 .samples = 5};
}

unsigned sl_part_round(const sl_part_plan_config *cfg, unsigned units)
{
    if (units < cfg->min_units)
        units = cfg->min_units;
    unsigned above = units - cfg->min_units;
    units = cfg->min_units + (above + cfg->align - 1) / cfg->align * cfg->align;
    return units < cfg->units ? units : cfg->units;
}

static unsigned min_offline(const sl_part_plan_config *cfg)
{
    return cfg->min_offline ? cfg->min_offline : cfg->min_units;
}

/* The most the online partition may have. */
static unsigned online_max(const sl_part_plan_config *cfg)
{
    unsigned most = cfg->units - min_offline(cfg);
    /* a size the granularity allows, not above most */
    if (most < cfg->min_units)
        return 0;
    return cfg->min_units + (most - cfg->min_units) / cfg->align * cfg->align;
}

/* The search runs over steps above min_units: size(k) = min_units + k align. */
static unsigned step_size(const sl_part_plan_config *cfg, unsigned k)
{
    return cfg->min_units + k * cfg->align;
}

/* The need with headroom, rounded, at most what the online partition may have. */
static unsigned with_headroom(const sl_part_plan_config *cfg, unsigned units)
{
    double want = ceil((double) units * (1.0 + cfg->headroom) - 1e-9);
    unsigned need = sl_part_round(cfg, want > cfg->units ? cfg->units : (unsigned) want);
    unsigned most = online_max(cfg);
    return need < most ? need : most;
}

static void set_online(sl_part_plan *p, unsigned units)
{
    if (units == p->online)
        return;
    p->online = units;
    p->since_change = 0;
    p->resizes++;
}

/* The reference times: at the largest partition, forgetting every kind's. */
static void search_start(sl_part_plan *p)
{
    for (unsigned i = 0; i < SL_PART_KINDS; i++)
        p->kinds[i] = (sl_part_kind){0};
    p->shared = false;
    p->phase = SL_PART_REFERENCE;
    p->n_probe = 0;
    set_online(p, online_max(&p->cfg));
}

/* v's n values (n <= SL_PART_SAMPLES) in s, ascending: an insertion sort. */
static void sort_into(const double *v, unsigned n, double *s)
{
    for (unsigned i = 0; i < n; i++) {
        unsigned j = i;
        for (; j > 0 && s[j - 1] > v[i]; j--)
            s[j] = s[j - 1];
        s[j] = v[i];
    }
}

static double median(const double *v, unsigned n)
{
    double s[SL_PART_SAMPLES];
    sort_into(v, n, s);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

/* The next size to probe, or the end of the search: hi is a size known to
 * meet the objective (the largest does by definition), lo the smallest
 * not yet ruled out. */
static void search_probe(sl_part_plan *p)
{
    p->n_probe = 0;
    for (unsigned i = 0; i < SL_PART_KINDS; i++)
        p->kinds[i].n = 0;
    if (p->lo >= p->hi) {
        p->phase = SL_PART_SIZED;
        p->need = with_headroom(&p->cfg, step_size(&p->cfg, p->hi));
        p->search_end = p->observations;
        if (p->trial_at < p->observations)
            p->trial_at = p->observations; /* a failed trial's wait holds */
        p->searches++;
        set_online(p, p->need);
        return;
    }
    p->phase = SL_PART_SEARCH;
    set_online(p, step_size(&p->cfg, (p->lo + p->hi) / 2));
}

/* Kinds with at least half the samples get their median as reference;
 * the others are forgotten (they start a new search once it is over). */
static void reference_taken(sl_part_plan *p)
{
    for (unsigned i = 0; i < SL_PART_KINDS; i++) {
        sl_part_kind *k = &p->kinds[i];
        if (k->used && k->n * 2 >= p->cfg.samples)
            k->ref_ns = median(k->v, k->n);
        else
            *k = (sl_part_kind){0};
    }
    p->lo = 0;
    p->hi = (online_max(&p->cfg) - p->cfg.min_units) / p->cfg.align;
    search_probe(p);
}

static sl_part_kind *kind_find(sl_part_plan *p, uint64_t key)
{
    for (unsigned i = 0; i < SL_PART_KINDS; i++)
        if (p->kinds[i].used && p->kinds[i].key == key)
            return &p->kinds[i];
    return NULL;
}

/* A slot for a new kind: an empty one, else the one seen longest ago. */
static sl_part_kind *kind_add(sl_part_plan *p, uint64_t key)
{
    sl_part_kind *slot = &p->kinds[0];
    for (unsigned i = 0; i < SL_PART_KINDS && slot->used; i++)
        if (!p->kinds[i].used || p->kinds[i].seen < slot->seen)
            slot = &p->kinds[i];
    *slot = (sl_part_kind){.used = true, .key = key};
    return slot;
}

int sl_part_plan_init(sl_part_plan *p, const sl_part_plan_config *cfg, unsigned need_units)
{
    if (!p || !cfg || cfg->units == 0 || cfg->align == 0 || cfg->min_units == 0 ||
        cfg->min_units > cfg->units || !(cfg->shrink_load >= 0) ||
        !(cfg->shrink_load < cfg->grow_load) || !(cfg->grow_load <= 1) || !(cfg->ewma > 0) ||
        !(cfg->ewma <= 1) || !(cfg->headroom >= 0) || !(cfg->objective >= 0) ||
        (cfg->objective > 0 && (cfg->samples == 0 || cfg->samples > SL_PART_SAMPLES)) ||
        min_offline(cfg) >= cfg->units || online_max(cfg) == 0)
        return SL_EINVAL;
    *p = (sl_part_plan){.cfg = *cfg};
    p->need = with_headroom(cfg, need_units);
    p->online = p->need;
    if (need_units == 0 && cfg->objective > 0) {
        p->need = cfg->min_units; /* the floor until the search says more */
        p->search = true;
        search_start(p);
        p->resizes = 0; /* starting large is no resize */
    }
    return SL_OK;
}

unsigned sl_part_plan_declare(sl_part_plan *p, unsigned need_units)
{
    bool probing = p->phase != SL_PART_SIZED && p->phase != SL_PART_SHARED;
    p->search = false;
    p->shared = false;
    p->phase = SL_PART_SIZED;
    p->need = with_headroom(&p->cfg, need_units);
    if (probing || p->online < p->need)
        set_online(p, p->need);
    return p->online;
}

void sl_part_plan_time(sl_part_plan *p, uint64_t key, unsigned units, uint64_t ns)
{
    if (!p->search)
        return;
    sl_part_kind *k = kind_find(p, key);
    if (p->phase == SL_PART_SIZED || p->phase == SL_PART_SHARED) {
        /* a kind without a reference: its time on the need is unknown */
        if (!k && p->observations >= p->search_end + SL_PART_RESEARCH)
            search_start(p);
        return;
    }
    if (units != p->online || ns == 0)
        return;
    if (p->phase == SL_PART_REFERENCE) {
        if (!k)
            k = kind_add(p, key);
        k->seen = p->observations;
        if (k->n < SL_PART_SAMPLES)
            k->v[k->n++] = (double) ns;
        if (k->n >= p->cfg.samples)
            reference_taken(p);
        return;
    }
    if (!k || !k->ref_ns)
        return; /* a kind seen too rarely for a reference: no yardstick */
    k->seen = p->observations;
    k->v[k->n++] = (double) ns / k->ref_ns; /* k->n <= n_probe < SL_PART_SAMPLES */
    p->n_probe++;
    /* a median of half the samples at least for every kind seen here, so
     * one slow iteration moves no kind's; a kind too rare for that is
     * not judged once the buffers are full */
    unsigned half = (p->cfg.samples + 1) / 2;
    bool full = p->n_probe >= SL_PART_SAMPLES;
    for (unsigned i = 0; i < SL_PART_KINDS && !full; i++)
        if (p->kinds[i].n && p->kinds[i].n < half)
            return;
    if (p->n_probe < p->cfg.samples)
        return;
    /* the size passes when it keeps every kind within the objective */
    bool within = true;
    for (unsigned i = 0; i < SL_PART_KINDS; i++) {
        const sl_part_kind *q = &p->kinds[i];
        if (q->n >= half && median(q->v, q->n) > 1.0 + p->cfg.objective)
            within = false;
    }
    unsigned mid = (p->lo + p->hi) / 2;
    if (within)
        p->hi = mid;
    else
        p->lo = mid + 1;
    search_probe(p);
}

/* Guard: requests still come more often than when the last trial failed,
 * for at most the longest count wait since. */
static bool rate_holds(const sl_part_plan *p)
{
    return p->gap_avg < p->fail_gap &&
           p->observations - p->fail_at < ((uint64_t) SL_PART_RETRY << SL_PART_BACKOFF);
}

/* Guard: every kind with a yardstick, and none still short of a window on
 * partitions, once the retry time has come. */
static bool trial_due(const sl_part_plan *p)
{
    if (p->observations < p->trial_at || rate_holds(p))
        return false;
    bool any = false;
    for (unsigned i = 0; i < SL_PART_KINDS; i++) {
        const sl_part_kind *k = &p->kinds[i];
        if (k->used && k->ref_ns && !k->part_max)
            return false;
        any |= k->used && k->part_max > 0;
    }
    return any;
}

/* Every kind's window restarts; `fresh` also forgets the yardsticks, so
 * the next trial compares with a window at that time's load. */
static void guard_windows_reset(sl_part_plan *p, bool fresh)
{
    for (unsigned i = 0; i < SL_PART_KINDS; i++) {
        p->kinds[i].n_lat = p->kinds[i].over = 0;
        if (fresh)
            p->kinds[i].part_max = 0;
    }
}

/* Requests of a shared window slower than the yardstick that end a trial. */
#define OVER_LIMIT (SL_PART_WINDOW / 20 + SL_PART_SLACK)

static void trial_start(sl_part_plan *p)
{
    guard_windows_reset(p, false);
    p->phase = SL_PART_SHARED;
    p->shared = true;
    p->trials++;
    p->trial_from = p->observations;
}

void sl_part_plan_latency(sl_part_plan *p, uint64_t key, uint64_t ns)
{
    if (!p->search || !p->cfg.guard || (p->phase != SL_PART_SIZED && p->phase != SL_PART_SHARED))
        return;
    sl_part_kind *k = kind_find(p, key);
    if (!k || !k->ref_ns)
        return;
    if (p->phase == SL_PART_SIZED) {
        k->lat[k->n_lat++] = (double) ns;
        if (k->n_lat == SL_PART_WINDOW) {
            double slowest = 0;
            for (unsigned i = 0; i < SL_PART_WINDOW; i++)
                slowest = k->lat[i] > slowest ? k->lat[i] : slowest;
            k->part_max = slowest;
            k->n_lat = 0;
        }
        if (trial_due(p))
            trial_start(p);
        return;
    }
    if (!k->part_max)
        return;
    k->n_lat++;
    if ((double) ns > k->part_max && ++k->over > OVER_LIMIT) {
        /* worse than the partitions: back on them, the next trial later */
        guard_windows_reset(p, true);
        p->phase = SL_PART_SIZED;
        p->shared = false;
        p->since_change = 0;
        if (p->observations - p->trial_from >= SL_PART_RETRY)
            p->backoff = 0; /* sharing served that long: the load changed */
        p->trial_at = p->observations + ((uint64_t) SL_PART_RETRY << p->backoff);
        if (p->backoff < SL_PART_BACKOFF)
            p->backoff++;
        p->breaks++;
        p->fail_gap = p->gap_avg;
        p->fail_at = p->observations;
        return;
    }
    if (k->n_lat == SL_PART_WINDOW)
        k->n_lat = k->over = 0; /* as good a window as the partitions': another */
}

bool sl_part_plan_retry(const sl_part_plan *p, uint64_t *requests, double *gap_ns)
{
    *requests = 0;
    *gap_ns = 0;
    if (!p->search || !p->cfg.guard || p->phase == SL_PART_SHARED || !p->breaks)
        return false;
    if (p->trial_at > p->observations)
        *requests = p->trial_at - p->observations;
    if (rate_holds(p))
        *gap_ns = p->fail_gap;
    return *requests || *gap_ns;
}

unsigned sl_part_plan_observe(sl_part_plan *p, uint64_t busy_ns, uint64_t window_ns)
{
    const sl_part_plan_config *c = &p->cfg;
    if (window_ns > 0) {
        /* the ratio of the averages, not the average of the ratios: a
         * short busy window and a long idle one weigh by their lengths, or
         * bursts of back-to-back requests would read as a busy partition
         * at any load */
        double busy = (double) (busy_ns < window_ns ? busy_ns : window_ns);
        p->busy_avg = c->ewma * busy + (1 - c->ewma) * p->busy_avg;
        p->window_avg = c->ewma * (double) window_ns + (1 - c->ewma) * p->window_avg;
        p->load = p->busy_avg / p->window_avg;
        p->gap_avg = p->gap_avg ? p->gap_avg + ((double) window_ns - p->gap_avg) / SL_PART_WINDOW
                                : (double) window_ns;
    }
    p->observations++;
    p->since_change++;
    if (p->phase != SL_PART_SIZED || p->since_change < c->hold)
        return p->online;
    unsigned next = p->online;
    if (p->load > c->grow_load && p->online + c->align <= online_max(c))
        next = p->online + c->align;
    else if (p->load < c->shrink_load && p->online >= p->need + c->align)
        next = p->online - c->align;
    set_online(p, next);
    return p->online;
}

unsigned sl_part_plan_offline(const sl_part_plan *p)
{
    return p->cfg.units - p->online;
}

/* Busy time up to now, the running stretch included. */
static uint64_t load_busy(const sl_part_load *l, uint64_t now)
{
    return l->busy_ns + (l->running && now > l->since_ns ? now - l->since_ns : 0);
}

void sl_part_load_reset(sl_part_load *l, uint64_t now)
{
    if (l->running) { /* only busy time from now on counts */
        l->busy_ns += now > l->since_ns ? now - l->since_ns : 0;
        l->since_ns = now;
        l->overlapped = true; /* what runs now is timed from here: no sample */
    }
    l->mark_ns = now;
    l->mark_busy_ns = l->busy_ns;
}

void sl_part_load_start(sl_part_load *l, uint64_t now)
{
    l->overlapped = l->running > 0;
    if (l->running++ == 0)
        l->since_ns = now;
}

uint64_t sl_part_load_done(sl_part_load *l, uint64_t now)
{
    if (!l->running || --l->running > 0)
        return 0;
    uint64_t ran = now > l->since_ns ? now - l->since_ns : 0;
    l->busy_ns += ran;
    /* the stretch since running became nonzero held this iteration alone */
    return l->overlapped ? 0 : ran;
}

unsigned sl_part_load_observe(sl_part_load *l, sl_part_plan *p, uint64_t now)
{
    uint64_t busy = load_busy(l, now);
    /* callers read their clock before their lock: a reset in between may
     * leave now behind the mark (an empty window, then) */
    uint64_t busy_ns = busy > l->mark_busy_ns ? busy - l->mark_busy_ns : 0;
    uint64_t window_ns = now > l->mark_ns ? now - l->mark_ns : 0;
    l->mark_ns = now > l->mark_ns ? now : l->mark_ns;
    l->mark_busy_ns = busy > l->mark_busy_ns ? busy : l->mark_busy_ns;
    return sl_part_plan_observe(p, busy_ns, window_ns);
}
