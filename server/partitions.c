/* The executor's compute partitions (partitions.h). */
#include "partitions.h"

#include "exec.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sl_parts_parse(const char *text, enum sl_parts_mode *mode, unsigned *units)
{
    if (!text)
        return SL_EINVAL;
    if (!strcmp(text, "off")) {
        *mode = SL_PARTS_OFF;
        *units = 0;
        return SL_OK;
    }
    if (!strcmp(text, "demand")) {
        *mode = SL_PARTS_DEMAND;
        *units = 0;
        return SL_OK;
    }
    enum sl_parts_mode m = SL_PARTS_FIXED;
    const char *num = text;
    if (!strcmp(text, "auto")) {
        *mode = SL_PARTS_AUTO;
        *units = 0;
        return SL_OK;
    }
    if (!strncmp(text, "auto:", 5)) {
        m = SL_PARTS_AUTO;
        num = text + 5;
    }
    char *end;
    unsigned long n = strtoul(num, &end, 10);
    if (end == num || *end != '\0' || num[0] == '-' || n == 0 || n > 1000000)
        return SL_EINVAL;
    *mode = m;
    *units = (unsigned) n;
    return SL_OK;
}

const char *sl_parts_sizing(const sl_exec_parts *p)
{
    if (p->plan.search && p->plan.shared)
        return "shared";
    if (p->plan.search)
        return p->plan.phase == SL_PART_SIZED ? "searched" : "searching";
    return p->declared || p->session_need || p->mode == SL_PARTS_FIXED ? "declared" : "smallest";
}

void sl_parts_describe(const sl_exec_parts *p, char *buf, size_t len)
{
    const char *demand = p->demand ? "on demand: " : "";
    if (p->mode == SL_PARTS_AUTO && !p->online && p->plan.shared) {
        snprintf(buf, len,
                 "%sshared (high-priority latency as good as on %u %s%s; %llu trials, %llu "
                 "ended), %llu resizes, %llu spills; %s",
                 demand, p->plan.online, p->caps.unit, p->plan.online == 1 ? "" : "s",
                 (unsigned long long) p->plan.trials, (unsigned long long) p->plan.breaks,
                 (unsigned long long) p->resizes, (unsigned long long) p->spills, p->caps.note);
        return;
    }
    if (p->mode == SL_PARTS_OFF || !p->online) {
        snprintf(buf, len, "%soff%s%s%s", demand,
                 !p->demand    ? ""
                 : p->can_lend ? " until a high-priority job joins"
                               : " until a high-priority job runs beside a low-priority one",
                 p->caps_ok ? "; device: " : "", p->caps_ok ? p->caps.note : "");
        return;
    }
    char need[96], trials[48] = "";
    if (p->plan.cfg.guard)
        snprintf(trials, sizeof trials, "; %llu trials, %llu ended",
                 (unsigned long long) p->plan.trials, (unsigned long long) p->plan.breaks);
    if (!p->plan.search)
        snprintf(need, sizeof need, "need %u", p->plan.need);
    else if (p->plan.phase != SL_PART_SIZED)
        snprintf(need, sizeof need, "searching at +%.0f %%", 100 * p->plan.cfg.objective);
    else
        snprintf(need, sizeof need, "need %u, searched at +%.0f %%%s", p->plan.need,
                 100 * p->plan.cfg.objective, trials);
    snprintf(buf, len,
             "%sonline %u %s%s (%s, %s), offline %u %s%s%s, %llu resizes, %llu spills; %s", demand,
             p->plan.online, p->caps.unit, p->plan.online == 1 ? "" : "s",
             p->mode == SL_PARTS_AUTO ? "auto" : "fixed", need, p->offline_units, p->caps.unit,
             p->offline_units == 1 ? "" : "s", p->lent ? " (lent to online work)" : "",
             (unsigned long long) p->resizes, (unsigned long long) p->spills, p->caps.note);
}

/* Binds every stream the executor holds (lanes' and spare ones) to none. */
static int unbind_all(sl_exec *ex)
{
    const sl_device_ops *ops = ex->dev->ops;
    atomic_fetch_add(&ex->binds, 1);
    int rc = SL_OK;
    size_t i = 0;
    void *v;
    while (sl_map_next(&ex->lanes, &i, NULL, &v)) {
        int r = ops->stream_bind(ex->dev, ((sl_lane *) v)->stream, NULL);
        rc = rc == SL_OK ? r : rc;
    }
    for (size_t k = 0; k < ex->n_spare; k++) {
        int r = ops->stream_bind(ex->dev, ex->spare[k].stream, NULL);
        rc = rc == SL_OK ? r : rc;
    }
    if (ex->copy_stream) {
        int r = ops->stream_bind(ex->dev, ex->copy_stream, NULL);
        rc = rc == SL_OK ? r : rc;
    }
    if (ex->parts.spill) {
        int r = ops->stream_bind(ex->dev, ex->parts.spill, NULL);
        rc = rc == SL_OK ? r : rc;
    }
    return rc;
}

static void destroy_both(sl_exec *ex)
{
    sl_exec_parts *p = &ex->parts;
    ex->dev->ops->partition_destroy(ex->dev, p->online);
    ex->dev->ops->partition_destroy(ex->dev, p->offline);
    p->online = p->offline = NULL;
}

/* Gives the online partition `online` units and the offline one the rest,
 * shrinking first so the growing one finds the units free. */
static int apply_sizes(sl_exec *ex, unsigned online)
{
    sl_exec_parts *p = &ex->parts;
    const sl_device_ops *ops = ex->dev->ops;
    /* the rest, rounded down to a size the granularity allows (132 SMs
     * in steps of 8 leave 4 to neither) */
    unsigned offline = p->caps.units - online;
    if (offline < p->caps.min_units)
        return SL_EINVAL;
    offline = p->caps.min_units + (offline - p->caps.min_units) / p->caps.align * p->caps.align;
    p->offline_units = offline;
    /* streams bound to either partition may move to other units (cuda
     * swaps them onto new contexts), also when this fails halfway */
    atomic_fetch_add(&ex->binds, 1);
    if (!p->online) {
        int rc = ops->partition_create(ex->dev, online, &p->online);
        if (rc == SL_OK && (rc = ops->partition_create(ex->dev, offline, &p->offline)) != SL_OK) {
            ops->partition_destroy(ex->dev, p->online);
            p->online = NULL;
        }
        return rc;
    }
    unsigned cur = ops->partition_units(ex->dev, p->online);
    int rc;
    if (online < cur) {
        if ((rc = ops->partition_resize(ex->dev, p->online, online)) != SL_OK)
            return rc;
        return ops->partition_resize(ex->dev, p->offline, offline);
    }
    if ((rc = ops->partition_resize(ex->dev, p->offline, offline)) != SL_OK)
        return rc;
    return ops->partition_resize(ex->dev, p->online, online);
}

/* Whether the offline partition lends its units to the online lanes: the
 * device hands them over at once and low-priority streams run below
 * normal (stream classes on); with stream classes off they would share
 * them as equals, so the partitions stay strict (as they do when asked). */
static bool lends(const sl_exec *ex)
{
    return ex->dev->ops->partition_lend && !ex->cfg->no_stream_classes &&
           !ex->cfg->strict_partitions;
}

/* Removes both partitions (every stream unbound first), leaving the
 * mode: off, or the guard's sharing. Nothing may run on a backend without
 * live changes. */
static int detach(sl_exec *ex)
{
    sl_exec_parts *p = &ex->parts;
    int rc = unbind_all(ex);
    if (rc != SL_OK)
        return rc;
    destroy_both(ex);
    p->lent = false;
    p->want = 0;
    ex->steps.cfg.isolated = false;
    return SL_OK;
}

/* After apply_sizes created the partitions: low-priority steps isolated,
 * the spill stream on the online partition, control copies on the offline
 * one, and the offline units lent where the device can. */
static void attached(sl_exec *ex)
{
    sl_exec_parts *p = &ex->parts;
    const sl_device_ops *ops = ex->dev->ops;
    p->used = true;
    ex->steps.cfg.isolated = true;
    /* the spill stream: below normal, on the online partition */
    if (!p->spill && ops->stream_create(ex->dev, -1, &p->spill) != SL_OK)
        p->spill = NULL;
    if (p->spill && ops->stream_bind(ex->dev, p->spill, p->online) != SL_OK) {
        sl_log_warn("exe.parts.bind", "no gap filling into the online partition");
        ops->stream_destroy(ex->dev, p->spill); /* new and idle: returns at once */
        p->spill = NULL;
    }
    /* control copies and fills are tenants' work too: on the offline
     * partition, never on the online one's SMs (the copy stream is idle
     * between control tasks; a live backend takes it at its next one) */
    if (ex->copy_stream && (p->caps.live || ex->stats.control_in_flight == 0)) {
        int brc = ops->stream_bind(ex->dev, ex->copy_stream, p->offline);
        if (brc != SL_OK)
            sl_log_warn("exe.parts.bind", "control stream left unpartitioned: %s",
                        sl_strerror(brc));
    }
    /* the offline lanes' streams run below normal while high-priority
     * work exists (stream classes): where the device hands their units
     * over at once, the online lanes may also use them (lends) */
    p->lent = false;
    if (lends(ex)) {
        int lrc = ops->partition_lend(ex->dev, p->offline, true);
        p->lent = lrc == SL_OK;
        if (lrc != SL_OK)
            sl_log_warn("exe.parts", "the offline partition lends nothing: %s", sl_strerror(lrc));
    }
}

/* Puts mode (OFF, FIXED or AUTO) in force with the declared need units,
 * AUTO with the sharing guard when guard (sched/partition.h); errors as
 * sl_exec_set_partitions. */
static int set_mode(sl_exec *ex, enum sl_parts_mode mode, unsigned units, bool guard)
{
    sl_exec_parts *p = &ex->parts;
    const sl_device_ops *ops = ex->dev->ops;
    if (mode == SL_PARTS_OFF) {
        if (!p->online) {
            p->mode = SL_PARTS_OFF;
            return SL_OK;
        }
        if (!p->caps.live && ex->stats.lanes_busy > 0)
            return SL_EBUSY;
        int rc = detach(ex);
        if (rc != SL_OK)
            return rc;
        p->mode = SL_PARTS_OFF;
        sl_log_info("exe.parts", "compute partitions off");
        return SL_OK;
    }
    if (!ops->partition_caps)
        return SL_EUNSUPPORTED;
    int rc = ops->partition_caps(ex->dev, &p->caps);
    p->caps_ok = true;
    if (rc != SL_OK) {
        sl_log_warn("exe.parts", "the device has no compute partitions: %s", p->caps.note);
        return SL_EUNSUPPORTED;
    }
    if (!p->caps.live && ex->stats.lanes_busy > 0)
        return SL_EBUSY;
    sl_part_plan_config pc =
        sl_part_plan_config_default(p->caps.units, p->caps.min_units, p->caps.align);
    if (mode == SL_PARTS_FIXED)
        pc.headroom = 0; /* the operator's figure as it is */
    /* where the offline partition lends its units the online lanes reach
     * them anyway: nothing to search for, the smallest partition does */
    if (lends(ex))
        pc.objective = 0;
    else if (ex->cfg->partition_objective_set)
        pc.objective = ex->cfg->partition_objective;
    pc.guard = guard && mode == SL_PARTS_AUTO;
    sl_part_plan plan;
    unsigned need = units ? units : pc.objective > 0 ? 0 : p->caps.min_units;
    if ((rc = sl_part_plan_init(&plan, &pc, need)) != SL_OK)
        return rc;
    if (units && sl_part_round(&pc, units) > plan.online && mode == SL_PARTS_FIXED)
        return SL_EINVAL; /* no room left for the offline lanes */
    if ((rc = apply_sizes(ex, plan.online)) != SL_OK)
        return rc;
    uint64_t resizes = p->resizes;
    p->plan = plan;
    p->resizes = resizes;
    p->mode = mode;
    p->declared = units;
    p->session_need = 0;
    p->want = 0;
    sl_part_load_reset(&p->load, sl_now_ns());
    attached(ex);
    char line[256];
    sl_parts_describe(p, line, sizeof line);
    sl_log_info("exe.parts", "compute partitions: %s", line);
    return SL_OK;
}

/* What DEMAND mode wants now: partitions while a high-priority job is
 * joined under a policy that gives such jobs lanes of their own. Where
 * the device can lend the offline partition's units, only while it does
 * (else the high-priority lanes would lose the units they reach without
 * partitions); elsewhere only while a low-priority job is joined too:
 * the objective is what they give for being kept apart from its blocks. */
static bool demand_wanted(const sl_exec *ex)
{
    if (ex->gaps.n_hp == 0 || !sl_exec_wants_exclusive(ex, 1))
        return false;
    /* elsewhere also only once a high-priority iteration has run: a job
     * that joined and waits would hold the largest online partition for
     * the search, and the low-priority work to the rest, for as long */
    return ex->parts.can_lend ? lends(ex) : ex->parts.n_low > 0 && ex->parts.hp_ran;
}

/* DEMAND wants the partitions on while they are off, or off while on. */
static bool demand_change(const sl_exec *ex)
{
    return demand_wanted(ex) != (ex->parts.mode != SL_PARTS_OFF);
}

int sl_exec_set_partitions(sl_exec *ex, enum sl_parts_mode mode, unsigned units)
{
    sl_exec_parts *p = &ex->parts;
    if (mode != SL_PARTS_DEMAND) {
        int rc = set_mode(ex, mode, units, false);
        if (rc == SL_OK)
            p->demand = false;
        return rc;
    }
    const sl_device_ops *ops = ex->dev->ops;
    if (!ops->partition_caps || ops->partition_caps(ex->dev, &p->caps) != SL_OK)
        return SL_EUNSUPPORTED;
    p->caps_ok = true;
    p->can_lend = ops->partition_lend != NULL;
    bool was = p->demand;
    p->demand = true;
    int rc = set_mode(ex, demand_wanted(ex) ? SL_PARTS_AUTO : SL_PARTS_OFF, 0, !lends(ex));
    if (rc != SL_OK)
        p->demand = was;
    return rc;
}

void sl_exec_parts_follow(sl_exec *ex)
{
    sl_exec_parts *p = &ex->parts;
    /* an iteration counts only while both kinds of job are joined */
    if (ex->gaps.n_hp == 0 || p->n_low == 0)
        p->hp_ran = false;
    if (!p->demand || !demand_change(ex))
        return;
    bool on = p->mode == SL_PARTS_OFF;
    int rc = set_mode(ex, on ? SL_PARTS_AUTO : SL_PARTS_OFF, 0, !lends(ex));
    /* a device that changes only while idle: sl_exec_parts_settle tries
     * again then; any other failure waits for the next join or leave */
    p->demand_failed = rc != SL_OK && rc != SL_EBUSY;
    if (rc == SL_EBUSY)
        sl_log_debug("exe.parts", "partitions %s on demand at the next idle moment",
                     on ? "on" : "off");
    else if (rc != SL_OK)
        sl_log_warn("exe.parts", "cannot turn the partitions %s on demand: %s", on ? "on" : "off",
                    sl_strerror(rc));
}

const sl_partition *sl_exec_parts_bind(sl_exec *ex, sl_stream *s, bool high_priority)
{
    sl_exec_parts *p = &ex->parts;
    if (!p->used)
        return NULL;
    sl_partition *target = !p->online ? NULL : high_priority ? p->online : p->offline;
    int rc = ex->dev->ops->stream_bind(ex->dev, s, target);
    if (rc != SL_OK) {
        atomic_fetch_add(&ex->binds, 1);
        sl_log_warn("exe.parts.bind", "a lane's stream stays where it was: %s", sl_strerror(rc));
    }
    return target;
}

void sl_exec_parts_hp_start(sl_exec *ex, uint64_t now, uint32_t declared)
{
    sl_exec_parts *p = &ex->parts;
    sl_part_load_start(&p->load, now);
    if (p->mode != SL_PARTS_AUTO || p->declared || (!p->online && !p->plan.shared) ||
        declared <= p->session_need)
        return;
    p->session_need = declared;
    unsigned before = p->plan.online;
    unsigned next = sl_part_plan_declare(&p->plan, declared);
    if (next != before)
        p->want = next; /* applied at this iteration's boundary */
}

void sl_exec_parts_hp_done(sl_exec *ex, uint64_t now, uint64_t kind, uint64_t latency_ns)
{
    sl_exec_parts *p = &ex->parts;
    uint64_t alone_ns = sl_part_load_done(&p->load, now);
    if (p->demand && !p->can_lend && !p->hp_ran && kind && p->n_low > 0) {
        /* the first to complete: the partitions may go on now, and this
         * iteration, which ran without them, tells the plan nothing */
        p->hp_ran = true;
        sl_exec_parts_follow(ex);
        return;
    }
    if (p->mode != SL_PARTS_AUTO || (!p->online && !p->plan.shared))
        return;
    unsigned before = p->plan.online;
    if (kind && alone_ns) /* timed where it ran, which a late change may not have left yet */
        sl_part_plan_time(&p->plan, kind,
                          p->online ? ex->dev->ops->partition_units(ex->dev, p->online) : 0,
                          alone_ns);
    if (kind)
        sl_part_plan_latency(&p->plan, kind, latency_ns);
    unsigned next = sl_part_load_observe(&p->load, &p->plan, now);
    if (next != before)
        p->want = next;
    sl_exec_parts_settle(ex);
}

void sl_exec_parts_settle(sl_exec *ex)
{
    sl_exec_parts *p = &ex->parts;
    if (p->demand && !p->demand_failed && demand_change(ex)) {
        /* a change on demand that found the device busy */
        if (p->caps.live || sl_exec_idle(ex))
            sl_exec_parts_follow(ex);
        return;
    }
    if (p->mode != SL_PARTS_AUTO)
        return;
    bool drop = p->plan.shared && p->online, restore = !p->plan.shared && !p->online;
    if (!drop && !restore && (!p->want || !p->online))
        return;
    if (!p->caps.live && !sl_exec_idle(ex))
        return;            /* applied at an idle moment */
    if (drop || restore) { /* the guard's change */
        int rc = drop ? detach(ex) : apply_sizes(ex, p->plan.online);
        if (rc == SL_OK && restore)
            attached(ex);
        if (rc == SL_OK)
            p->switches++;
        else if (!p->switch_failed) /* tried again at every end: said once */
            sl_log_warn("exe.parts", "cannot %s the partitions: %s", drop ? "remove" : "bring back",
                        sl_strerror(rc));
        p->switch_failed = rc != SL_OK;
        p->want = 0;
        return;
    }
    int rc = apply_sizes(ex, p->want);
    if (rc == SL_OK) {
        p->resizes++;
        sl_log_debug("exe.parts", "online partition now %u %s", p->want, p->caps.unit);
    } else {
        sl_log_warn("exe.parts", "cannot resize the partitions: %s", sl_strerror(rc));
        p->plan.online = ex->dev->ops->partition_units(ex->dev, p->online);
    }
    p->want = 0;
}

sl_stream *sl_exec_parts_spill(sl_exec *ex, sl_exec_task *t, uint32_t k, uint32_t part,
                               uint32_t parts)
{
    sl_exec_parts *p = &ex->parts;
    if (p->mode == SL_PARTS_OFF || !p->online || !p->spill || p->spill_busy || p->load.running ||
        sl_gaps_hp_pending(&ex->gaps) || ex->steps.lp_in_flight == 0)
        return NULL;
    if (k + 1 >= t->graph->n_ops && part + 1 >= parts)
        return NULL;
    /* the first step follows the feeds' copies on the lane's stream, with
     * no completion between them: it stays there. Every later step follows
     * a completed one, so whatever stream ran that has nothing pending */
    if (k == 0 && part == 0)
        return NULL;
    sl_lane *l = sl_map_get(&ex->lanes, t->lane);
    if (!l)
        return NULL;
    /* the lane's block, in stream order: the spill stream is idle */
    bool has = l->workspace_bytes != UINT64_MAX;
    if (ex->dev->ops->stream_set_workspace(ex->dev, p->spill, has ? l->workspace : NULL,
                                           has ? l->workspace_bytes : 0) != SL_OK)
        return NULL;
    p->spill_busy = true;
    p->spills++;
    return p->spill;
}

void sl_exec_parts_spill_done(sl_exec *ex)
{
    ex->parts.spill_busy = false;
}

void sl_exec_parts_fini(sl_exec *ex)
{
    sl_exec_parts *p = &ex->parts;
    if (p->spill) {
        /* nothing runs (the caller's precondition): returns at once */
        ex->dev->ops->stream_destroy(ex->dev, p->spill);
        p->spill = NULL;
        p->spill_busy = false;
    }
    if (p->online) {
        (void) unbind_all(ex);
        destroy_both(ex);
    }
    /* also when the guard had them removed: nothing brings them back */
    p->mode = SL_PARTS_OFF;
    p->lent = false;
    p->want = 0;
    ex->steps.cfg.isolated = false;
}
