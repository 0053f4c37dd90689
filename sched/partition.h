/* Compute partition sizing: how many of the device's compute units (SMs,
 * cores) the online (high-priority) lane's partition gets, the offline
 * lanes sharing the rest. MuxFlow's dynamic SM allocation (Zhao et al.,
 * "MuxFlow: Efficient and Safe GPU Sharing in Large-Scale Production Deep
 * Learning Clusters", 2023, section 4.2), with salus's own inputs:
 *
 * - need: the units the online lane's sessions declare (or that their op
 *   timelines imply: the fewest units on which an iteration runs within a
 *   small slack of its time on the whole device; kernels/sim's wave
 *   model), times (1 + headroom), rounded up to the device's granularity;
 * - measured load: the online partition's busy fraction (device time of its
 *   iterations over wall time) over recent iteration boundaries: EWMAs of
 *   busy time and of window length, divided (so windows weigh by their
 *   length). Above
 *   grow_load the partition grows one step (queueing: requests wait for
 *   each other, more units shorten them); below shrink_load it shrinks one
 *   step, never under need;
 * - hysteresis: a change waits hold observations since the previous one,
 *   and growing and shrinking thresholds are apart, so a load near one
 *   threshold does not resize at every boundary (each resize costs the
 *   offline lanes a drained stream on cuda).
 * Offline lanes always keep min_offline units. The plan changes only when
 * sl_part_plan_observe is called, at an online iteration's boundary; the
 * caller applies it when the streams concerned are idle (device.h).
 *
 * A pure library: no I/O, no clock, no threads; the caller serialises. */
#ifndef SL_SCHED_PARTITION_H
#define SL_SCHED_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_part_plan_config {
    unsigned units;       /* the device's (partition_caps) */
    unsigned min_units;   /* smallest partition */
    unsigned align;       /* step above min_units */
    unsigned min_offline; /* units always left to offline lanes (0 = min_units) */
    double headroom;      /* on top of the need; 0.1 = 10 % */
    double grow_load;     /* busy fraction above which the online partition grows */
    double shrink_load;   /* below which it shrinks towards its need */
    double ewma;          /* weight of a new observation in (0, 1] */
    unsigned hold;        /* observations between two changes */
} sl_part_plan_config;

/* salusd's defaults for a device of the given granularity: headroom 10 %,
 * grow above 50 % busy, shrink below 20 %, EWMA 0.2, hold 8. */
sl_part_plan_config sl_part_plan_config_default(unsigned units, unsigned min_units, unsigned align);

typedef struct sl_part_plan {
    sl_part_plan_config cfg;
    unsigned need;         /* declared need with headroom, rounded */
    unsigned online;       /* the online partition's units now */
    double load;           /* busy fraction: busy_avg / window_avg */
    double busy_avg;       /* EWMA of busy time per observation, ns */
    double window_avg;     /* EWMA of window length per observation, ns */
    unsigned since_change; /* observations since the last change */
    uint64_t resizes;      /* changes made */
} sl_part_plan;

/* Rounds units up to the granularity (at least min_units, then steps of
 * align), at most cfg->units. */
unsigned sl_part_round(const sl_part_plan_config *cfg, unsigned units);

/* Starts a plan for an online lane needing need_units (before headroom).
 * Errors: SL_EINVAL (units 0, align 0, min_units above units, loads not
 * 0 <= shrink < grow <= 1, ewma outside (0, 1], or no room for both an
 * online partition and min_offline units). */
int sl_part_plan_init(sl_part_plan *p, const sl_part_plan_config *cfg, unsigned need_units);

/* One online iteration boundary: the partition was busy busy_ns of the
 * window_ns since the previous call. Returns the units the online
 * partition should have now (p->online, changed at most one step). */
unsigned sl_part_plan_observe(sl_part_plan *p, uint64_t busy_ns, uint64_t window_ns);

/* The offline lanes' units: what the online partition leaves. */
unsigned sl_part_plan_offline(const sl_part_plan *p);

/* The measured load's input, as salusd takes it: the online partition is
 * busy while some online (high-priority) iteration is on the device, from
 * its launch to its completion, overlapping ones counted once. Whatever
 * else runs there (a low-priority step spilled into an idle online
 * partition) does not count: the load says how much of the partition the
 * online lanes use, not how much the spills fill. */
typedef struct sl_part_load {
    uint32_t running;      /* online iterations on the device */
    uint64_t busy_ns;      /* busy time completed (up to since_ns) */
    uint64_t since_ns;     /* when running last became nonzero */
    uint64_t mark_ns;      /* the previous observation */
    uint64_t mark_busy_ns; /* busy time up to it */
} sl_part_load;

/* Starts the meter's window at now (nothing before it counts). */
void sl_part_load_reset(sl_part_load *l, uint64_t now);
/* An online iteration went on the device / completed. */
void sl_part_load_start(sl_part_load *l, uint64_t now);
void sl_part_load_done(sl_part_load *l, uint64_t now);
/* Feeds the plan with the busy time and the window since the previous
 * observation (or reset) and starts the next window: at an online
 * iteration's boundary. Returns sl_part_plan_observe's. */
unsigned sl_part_load_observe(sl_part_load *l, sl_part_plan *p, uint64_t now);

#endif
