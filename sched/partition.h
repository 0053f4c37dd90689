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
 *   offline lanes a drained stream on cuda);
 * - with no need declared, a latency objective (MuxFlow's "+< 20 %"): the
 *   need is searched for on the device itself. The online partition starts
 *   at its largest, where the median time of an online iteration that ran
 *   alone there is the reference of its kind (a key the caller gives: one
 *   per model); then a binary search over the sizes the granularity allows
 *   finds the fewest units on which, over `samples` iteration times, the
 *   median of every kind's is within (1 + objective) of its reference, and
 *   that size plus headroom becomes the need. A kind seen for the first
 *   time once the search is over starts a new one (at most one per
 *   SL_PART_RESEARCH observations). Only iterations that ran alone count,
 *   so while online iterations always overlap the search waits, at the
 *   largest or the probed size: high-priority work keeps its units, the
 *   offline lanes wait for theirs. Time on the partition is what salusd
 *   measures; how it scales with units is what no device profile says for
 *   every model;
 * - with guard as well, partitions only where they serve the online work
 *   better than sharing: once the need is found and a window of
 *   SL_PART_WINDOW online requests per kind has run on it, the plan tries
 *   the whole device shared (p->shared: the caller removes the partitions).
 *   Requests are judged by latency (arrival to completion, queueing and
 *   overlap included, so the signal grows rather than vanishes when sharing
 *   makes requests queue), against the yardstick of the slowest of the same
 *   kind's window on the partitions (sized to keep the objective): a tail
 *   quantile near the p99 the objective is about (lower percentiles of a
 *   lightly loaded service sit where requests start to queue, and move with
 *   every burst). Sharing ends as soon as more than a twentieth of a window
 *   plus SL_PART_SLACK of some kind's requests exceed it (a window's slowest
 *   is exceeded by 1/65 of requests as fast as the partitions', so such a
 *   window ends sharing with a chance of 0.66 %, the yardstick's own spread
 *   included). A trial that fails waits SL_PART_RETRY requests before the
 *   next, and each further failure in a row doubles that (at most
 *   SL_PART_BACKOFF times): a service that sharing never suits pays for one
 *   more trial each time its request count doubles, not one per
 *   SL_PART_RETRY requests, so the tens of slow requests a failed trial
 *   costs fall further under the 1 % a p99 sees. A trial that held
 *   SL_PART_RETRY requests before failing waits SL_PART_RETRY again (the
 *   load changed), and a new search brings no trial forward. A retry also
 *   waits until requests come no more often than when the trial failed
 *   (gap_avg, the mean time between online boundaries over a window, back at
 *   fail_gap or above): sharing that held until the load rose is tried again
 *   once the load falls back, not while it is at its peak (at a steady open
 *   load the average soon crosses its mark again). The rate holds a retry
 *   back for at most SL_PART_RETRY << SL_PART_BACKOFF requests after the
 *   failure: a client that sends its next request when the last one returns
 *   comes less often while shared, so its mark may never be crossed on the
 *   partitions. While a trial holds, windows restart. Sharing gives the
 *   offline lanes every unit whenever the online ones are idle; partitions
 *   keep their blocks off the online units, which a service whose requests
 *   are as short as those blocks needs.
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
    /* with no need declared: the latency objective the need is searched
     * at (0.2 = online iterations within 20 % of their time on the largest
     * partition); 0 = no search, the need is the smallest partition */
    double objective;
    unsigned samples; /* iteration times per size in the search, 1..SL_PART_SAMPLES */
    bool guard;       /* after a search, share the device where that serves as well */
} sl_part_plan_config;

/* salusd's defaults for a device of the given granularity: headroom 10 %,
 * grow above 50 % busy, shrink below 20 %, EWMA 0.2, hold 8, objective
 * 20 % (MuxFlow's), 5 samples per size. */
sl_part_plan_config sl_part_plan_config_default(unsigned units, unsigned min_units, unsigned align);

#define SL_PART_SAMPLES 16   /* most iteration times kept per size */
#define SL_PART_KINDS 8      /* iteration kinds with a reference */
#define SL_PART_RESEARCH 256 /* observations between two searches */
#define SL_PART_WINDOW 64    /* guard: requests per kind in a latency window */
#define SL_PART_SLACK 3      /* guard: requests over a window's twentieth a trial allows */
#define SL_PART_RETRY 4096   /* guard: observations from a failed trial to the next */
#define SL_PART_BACKOFF 6    /* guard: doublings of SL_PART_RETRY at most */

enum sl_part_phase {
    SL_PART_SIZED,     /* the need is known (declared, or searched) */
    SL_PART_REFERENCE, /* at the largest partition: reference times */
    SL_PART_SEARCH,    /* probing a size of the binary search */
    SL_PART_SHARED,    /* guard: no partitions, latencies watched */
};

/* One kind of online iteration: its times on the largest partition while
 * the reference is taken, then their median; during a probe, its times
 * there over the reference. */
typedef struct sl_part_kind {
    bool used;
    uint64_t key;
    uint64_t seen; /* the observation that last saw it (replacement) */
    unsigned n;
    double v[SL_PART_SAMPLES];
    double ref_ns; /* 0 until the reference is taken */
    /* guard: latencies of the current window, and the yardstick: the
     * slowest request of the last full one on partitions (0 = none yet) */
    unsigned n_lat, over;
    double lat[SL_PART_WINDOW];
    double part_max;
} sl_part_kind;

typedef struct sl_part_plan {
    sl_part_plan_config cfg;
    unsigned need;         /* declared need with headroom, rounded */
    unsigned online;       /* the online partition's units now */
    double load;           /* busy fraction: busy_avg / window_avg */
    double busy_avg;       /* EWMA of busy time per observation, ns */
    double window_avg;     /* EWMA of window length per observation, ns */
    unsigned since_change; /* observations since the last change */
    uint64_t resizes;      /* changes made */
    /* the search for the need at the objective (none once one is declared) */
    bool search; /* no need declared: it is searched for */
    enum sl_part_phase phase;
    unsigned lo, hi;  /* the search's bounds: steps above min_units */
    unsigned n_probe; /* times taken at the probed size, every kind's */
    sl_part_kind kinds[SL_PART_KINDS];
    uint64_t observations; /* sl_part_plan_observe calls */
    uint64_t search_end;   /* the observation the last search ended at */
    uint64_t searches;     /* searches finished */
    /* guard: the device shared, no partitions (the caller's to remove);
     * p->online keeps the size they come back at */
    bool shared;
    uint64_t trial_at;   /* the observation from which sharing may be tried */
    uint64_t trial_from; /* the observation the current (or last) trial began at */
    unsigned backoff;    /* failed trials in a row, each doubling the wait (capped) */
    uint64_t trials;     /* times sharing was tried / ended */
    uint64_t breaks;
    double gap_avg;   /* EWMA over a window of the time between boundaries, ns */
    double fail_gap;  /* gap_avg when the last trial failed (0 = none failed) */
    uint64_t fail_at; /* the observation it failed at */
} sl_part_plan;

/* Guard: an online request of kind key took ns from its arrival to its
 * completion, partitioned or shared (every request, overlapping or not).
 * May change p->shared; call before sl_part_plan_observe at the same
 * boundary. */
void sl_part_plan_latency(sl_part_plan *p, uint64_t key, uint64_t ns);

/* Guard: what the next trial waits for after one that ended: *requests
 * more online requests, and the mean time between them back at *gap_ns
 * (0: that one does not hold it back); a window on the partitions for
 * each kind, as ever, besides. False when neither holds it back (no
 * trial ended, sharing now, or no guard). */
bool sl_part_plan_retry(const sl_part_plan *p, uint64_t *requests, double *gap_ns);

/* Rounds units up to the granularity (at least min_units, then steps of
 * align), at most cfg->units. */
unsigned sl_part_round(const sl_part_plan_config *cfg, unsigned units);

/* Starts a plan for an online lane needing need_units (before headroom);
 * need_units 0 with an objective starts the search at the largest
 * partition. Errors: SL_EINVAL (units 0, align 0, min_units above units,
 * loads not 0 <= shrink < grow <= 1, ewma outside (0, 1], objective below
 * 0, samples outside 1..SL_PART_SAMPLES with an objective, or no room for
 * both an online partition and min_offline units). */
int sl_part_plan_init(sl_part_plan *p, const sl_part_plan_config *cfg, unsigned need_units);

/* A need declared (need_units, before headroom, > 0) once the plan runs:
 * ends any search for good; the online partition takes the need when a
 * search was under way, else grows to it when it is smaller. Returns
 * p->online. */
unsigned sl_part_plan_declare(sl_part_plan *p, unsigned need_units);

/* The search's input: an online iteration of kind key ran ns alone (no
 * other online iteration beside it: sl_part_load_done) on a partition of
 * units (0: shared, no partitions). Times taken on another size than the
 * plan's now are ignored (a resize the caller applies later). May change
 * p->online (the next size to probe, or the need found); call before
 * sl_part_plan_observe at the same boundary. */
void sl_part_plan_time(sl_part_plan *p, uint64_t key, unsigned units, uint64_t ns);

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
    bool overlapped;       /* another started while the running ones ran */
    uint64_t busy_ns;      /* busy time completed (up to since_ns) */
    uint64_t since_ns;     /* when running last became nonzero */
    uint64_t mark_ns;      /* the previous observation */
    uint64_t mark_busy_ns; /* busy time up to it */
} sl_part_load;

/* Starts the meter's window at now (nothing before it counts). */
void sl_part_load_reset(sl_part_load *l, uint64_t now);
/* An online iteration went on the device / completed. done returns how
 * long it ran when it ran alone (no other online iteration on the device
 * at any time while it ran: sl_part_plan_time's input), else 0. */
void sl_part_load_start(sl_part_load *l, uint64_t now);
uint64_t sl_part_load_done(sl_part_load *l, uint64_t now);
/* Feeds the plan with the busy time and the window since the previous
 * observation (or reset) and starts the next window: at an online
 * iteration's boundary. Returns sl_part_plan_observe's. While a search
 * runs the load only feeds the averages: the size is the search's. */
unsigned sl_part_load_observe(sl_part_load *l, sl_part_plan *p, uint64_t now);

#endif
