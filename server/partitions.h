/* The executor's compute partitions (docs/architecture.md, "Scheduling"): while on, the
 * device is cut in two, an online partition for high-priority lanes and an
 * offline one for every other lane, and every lane's stream is bound to
 * its class's partition when an iteration starts on it (an idle stream:
 * device.h). The online partition is sized from the operator's or the
 * sessions' declared need or, with none declared, from a search for the
 * fewest units that keep high-priority iterations within
 * --partition-objective of their time on the largest partition (timed at
 * their boundaries when they ran alone); in auto mode then from its
 * measured load (sched/partition.h, MuxFlow's dynamic sizing with
 * hysteresis). Low-priority steps beside high-priority work are isolated
 * (sched/steps.h): they wait only while high-priority work is pending.
 * Where the device lends a partition's units at once to higher-priority
 * work (device.h partition_lend: cpu) and low-priority streams run below
 * normal, the offline partition lends its units to the online lanes: the
 * online partition is theirs alone, and they still reach every unit the
 * offline lanes leave idle or fill with below-normal work.
 *
 * Changes (mode, sizes) are made at once on a backend whose partitions
 * change live (cpu: streams pick them up between ops); elsewhere (cuda)
 * only while no lane is busy: a mode change is then refused with SL_EBUSY
 * and an auto resize waits for an idle moment.
 *
 * Threads: every function is called with the server lock held (exec.h);
 * none blocks, but creating or resizing cuda green contexts takes
 * milliseconds under it (only at a change). */
#ifndef SL_SERVER_PARTITIONS_H
#define SL_SERVER_PARTITIONS_H

#include "device.h"
#include "partition.h"

#include <stdbool.h>
#include <stdint.h>

/* DEMAND, salusd's default wherever the device has partitions: auto
 * while a high-priority job is joined under a policy with exclusive
 * lanes, off otherwise (sl_exec_parts_follow). Where the offline
 * partition lends its units (cpu) high-priority work loses nothing to a
 * partition, it still reaches every core. Elsewhere (cuda, sim) it loses
 * up to the objective, so partitions go on only while a low-priority job
 * is joined too and once a high-priority iteration has run (one that
 * joined and waits would keep the largest online partition for the
 * search, and the low-priority work on the rest), and with the guard
 * (sched/partition.h): once the need is found they are removed while
 * high-priority requests fare as well on the shared device, and kept
 * where they keep the low-priority blocks off requests as short as those
 * blocks. */
enum sl_parts_mode { SL_PARTS_OFF = 0, SL_PARTS_FIXED, SL_PARTS_AUTO, SL_PARTS_DEMAND };

typedef struct sl_exec_parts {
    enum sl_parts_mode mode; /* what is in force: OFF, FIXED or AUTO */
    bool demand;             /* mode follows high-priority work (SL_PARTS_DEMAND) */
    unsigned declared;       /* the operator's declared need (--partitions auto:N, N), units */
    unsigned session_need;   /* the largest high-priority session's declaration seen */
    uint32_t n_low;          /* joined jobs that are not high-priority (DEMAND) */
    bool hp_ran;             /* DEMAND: a high-priority iteration completed since one joined */
    bool can_lend;           /* DEMAND: the device can lend (partition_lend) */
    bool demand_failed;      /* DEMAND: the last change failed, not for a busy device */
    bool used;               /* partitions were on once: streams may be bound */
    sl_partition_caps caps;
    bool caps_ok;
    sl_partition *online, *offline;
    unsigned offline_units; /* what the offline partition was given */
    bool lent;              /* the offline partition lends its cores (device.h partition_lend) */
    sl_part_plan plan;
    unsigned want;     /* online units asked for and not applied yet (0 = none) */
    sl_part_load load; /* the online partition's busy time (plan's input) */
    uint64_t resizes;
    uint64_t switches;  /* the guard's removals and returns of the partitions */
    bool switch_failed; /* the last of them failed (said once, tried again) */
    /* gap filling into the online partition: a below-normal stream bound
     * to it that a low-priority step may borrow while the online lanes are
     * idle (one step at a time); created the first time partitions go on,
     * kept for the executor's life */
    sl_stream *spill;
    bool spill_busy;
    uint64_t spills;
} sl_exec_parts;

/* Parses a mode: "off", "demand", "auto" (the need: the smallest
 * partition), "auto:N" or "N" (fixed, N units for the online partition).
 * Errors: SL_EINVAL (anything else, N 0 or above 1000000). */
int sl_parts_parse(const char *text, enum sl_parts_mode *mode, unsigned *units);

/* How the need was set: "declared", "searching", "searched", "shared"
 * (searched, and the guard has the partitions removed) or "smallest"
 * (static text). */
const char *sl_parts_sizing(const sl_exec_parts *p);

/* Writes a one-line description into buf ("off", or "online 1 core
 * (auto, need 1), offline 1 core, 0 resizes [core sets ...]"). */
void sl_parts_describe(const sl_exec_parts *p, char *buf, size_t len);

struct sl_exec;

/* Switches to mode with the declared need units (0 = the smallest
 * partition); DEMAND takes no units and applies at once what
 * sl_exec_parts_follow would. Errors: SL_EUNSUPPORTED (the device has no partitions: the
 * reason is logged), SL_EINVAL (units leave no room for the offline
 * partition), SL_EBUSY (a backend without live changes, lanes busy), the
 * device's. On error nothing changed. */
int sl_exec_set_partitions(struct sl_exec *ex, enum sl_parts_mode mode, unsigned units);

/* In DEMAND mode, after the joined jobs, their classes or the policy
 * changed: turns the partitions on (auto) when a high-priority job is
 * joined, the policy gives such jobs exclusive lanes and (where the
 * offline partition would not lend its units) a low-priority job is
 * joined too; off otherwise. A change the device refuses is logged; the
 * next call tries again. */
void sl_exec_parts_follow(struct sl_exec *ex);

/* Before an iteration of a job of that class starts on an idle lane: binds
 * the lane's stream to its partition (or to none) and returns that
 * partition (NULL: none, or partitions never used). Errors: the device's
 * (the iteration then runs where the stream was: logged, not fatal, and
 * counted in ex->binds since salusd no longer knows where that is). */
const sl_partition *sl_exec_parts_bind(struct sl_exec *ex, sl_stream *s, bool high_priority);

/* A high-priority iteration started / completed at now: the online
 * partition's busy time, and in auto mode the plan's observation and a
 * resize when it asks for one. declared: the units its session declared
 * (0 = none): in auto mode without the operator's figure, the largest
 * declaration seen becomes the need (with the plan's headroom, ending any
 * search), and the online partition grows to it at the next boundary.
 * kind: what sort of iteration completed (one key per model: the search's
 * references), 0 for one that never ran (no time to learn from);
 * latency_ns: its request's time from arrival to completion (the guard's). */
void sl_exec_parts_hp_start(struct sl_exec *ex, uint64_t now, uint32_t declared);
void sl_exec_parts_hp_done(struct sl_exec *ex, uint64_t now, uint64_t kind, uint64_t latency_ns);

/* Applies a change the plan asked for and could not have yet (a resize,
 * or the guard's removal or return of the partitions): on a backend
 * without live changes only while nothing runs (no lane busy, no control
 * copy), which under a busy low-priority trainer is the end of one of its
 * iterations with no high-priority one running; so every iteration's
 * completion tries (after its lane settled). */
void sl_exec_parts_settle(struct sl_exec *ex);

struct sl_exec_task;

/* The stream a low-priority step of t (op k, part `part` of `parts`)
 * goes to: the spill stream when the online partition is idle (no
 * high-priority iteration on it, none pending, no other step spilled),
 * another low-priority step keeps the offline partition busy, and this
 * is not the iteration's last step (whose completion ends the iteration
 * on its lane's stream); else NULL (its lane's stream). Marks the spill
 * stream busy and gives it the lane's workspace. Never the first step
 * (the feeds' copies before it on the lane's stream have no completion
 * to wait for). A high-priority
 * iteration arriving meanwhile is not held back: the spill stream is
 * below normal (cpu: SCHED_IDLE, preempted at once; cuda: lower stream
 * priority, a running block finishes first). */
sl_stream *sl_exec_parts_spill(struct sl_exec *ex, struct sl_exec_task *t, uint32_t k,
                               uint32_t part, uint32_t parts);
/* A spilled step completed: the spill stream is free again. */
void sl_exec_parts_spill_done(struct sl_exec *ex);

/* Frees the partitions (every stream unbound first). Nothing may run. */
void sl_exec_parts_fini(struct sl_exec *ex);

#endif
