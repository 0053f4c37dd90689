/* The simulated GPU's compute, whole or in two partitions: an online partition for high-priority
 * lanes and an offline one for the rest, each its own processor-sharing resource with stream
 * classes (kernels/sim sl_sim_psc), ops timed on their partition's SMs by
 * kernels/sim's partition model (sl_sim_part_work_ns: wave quantisation),
 * device-memory bandwidth shared by both (sl_sim_part_bw_share, taken when
 * an op is submitted from what the other partition's ops in flight draw).
 * Without partitions it is exactly the one sl_sim_psc the simulator always
 * had: the same calls, in the same order, so results do not move.
 *
 * Not thread-safe; part of one simulation (evsim.c). */
#ifndef SL_EVAL_PDEV_H
#define SL_EVAL_PDEV_H

#include "sim/sim.h"

#include <stdbool.h>
#include <stdint.h>

enum { SL_EVAL_PART_ONLINE = 0, SL_EVAL_PART_OFFLINE = 1 };

/* One op or iteration on the device: the psc job plus what the bandwidth
 * bookkeeping needs. Embedded in the simulator's job. */
typedef struct sl_eval_pdev_job {
    sl_sim_psc_job ps;
    double mem_frac; /* memory time over work time: its draw on the bandwidth */
    unsigned part;   /* the partition it runs in */
} sl_eval_pdev_job;

typedef void (*sl_eval_pdev_done_fn)(void *arg, sl_eval_pdev_job *job);

typedef struct sl_eval_pdev {
    sl_sim_psc ps[2];
    unsigned n_parts;          /* 1: the whole device; 2: online + offline */
    bool shared;               /* n_parts 2, partitions removed for now (sl_eval_pdev_share) */
    unsigned sm_count;         /* the device's SMs */
    unsigned units[2];         /* SMs of each partition */
    unsigned min_units, align; /* granularity: the offline one is rounded down to it */
    double mem_used[2];
    uint64_t synced_ns;
    uint64_t busy_ns;   /* time with anything on the device */
    double occupied_ns; /* integral of the SMs in use over sm_count */
    sl_eval_pdev_done_fn done_fn;
    void *arg;
} sl_eval_pdev;

/* A device of sm_count SMs (0 = no SM figure: only a whole device);
 * online_sms 0 = no partitions, else the online partition's SMs (the
 * offline one has the rest; online_sms < sm_count). done_fn(arg, job) is
 * called for each departure during sync. */
void sl_eval_pdev_init(sl_eval_pdev *d, unsigned sm_count, unsigned online_sms,
                       sl_eval_pdev_done_fn done_fn, void *arg);

/* Sets the granularity (as salusd's partitions: the offline partition
 * gets the rest rounded down to min_units + k x align); 0, 0 = any size.
 * Applies from the next init or resize. */
void sl_eval_pdev_granularity(sl_eval_pdev *d, unsigned min_units, unsigned align);

/* Gives the online partition online_sms (the offline one the rest), for
 * ops submitted from now on: ops in flight keep their rates, as a resize
 * between iterations leaves running kernels alone. Ignored without
 * partitions or for a size outside [1, sm_count). */
void sl_eval_pdev_resize(sl_eval_pdev *d, unsigned online_sms);

/* Removes the partitions for now (shared) or brings them back at their
 * sizes, for ops submitted from now on (salusd's guard: sched/partition.h).
 * Shared, every op runs on the whole device as without partitions; ops in
 * flight keep their rates and their partition until they end. */
void sl_eval_pdev_share(sl_eval_pdev *d, bool shared);

/* Advances both partitions to now (busy and occupancy accounting first). */
void sl_eval_pdev_sync(sl_eval_pdev *d, uint64_t now);

/* The next arrival or departure on either partition; UINT64_MAX if none. */
uint64_t sl_eval_pdev_next(const sl_eval_pdev *d);

/* Whether partition part (the whole device without partitions) has
 * nothing running or arriving. */
bool sl_eval_pdev_idle(const sl_eval_pdev *d, unsigned part);

/* An op's shape on the device: its work on the whole device split into
 * compute and memory time (0 and 0: all of work_ns is compute), its waves
 * (sl_sim_timing.waves; 0 = its occupancy), its occupancy and block. */
typedef struct sl_eval_pdev_op {
    uint64_t work_ns, compute_ns, memory_ns;
    double waves, occupancy;
    uint64_t block_ns;
} sl_eval_pdev_op;

/* Submits job onto partition part (ignored without partitions), arriving
 * at arrive_ns: its work recomputed for the partition's SMs and the
 * bandwidth the other partition's ops in flight leave it, then
 * sl_sim_psc_submit_prio with the partition's occupancy as cap. */
void sl_eval_pdev_submit(sl_eval_pdev *d, sl_eval_pdev_job *job, unsigned part, uint64_t arrive_ns,
                         const sl_eval_pdev_op *op, double launch_share, int priority);

/* How long op would take on partition part if submitted now: its work
 * there (its SMs, the bandwidth the other partition leaves) over the rate
 * it would get beside what runs there (the share left free, at least an
 * even split with the ops running). An estimate for placement decisions:
 * later arrivals and departures are not foreseen. */
double sl_eval_pdev_estimate_ns(const sl_eval_pdev *d, unsigned part, const sl_eval_pdev_op *op);

/* The block of op on partition part (its block_ns on the whole device
 * without partitions). */
uint64_t sl_eval_pdev_block_ns(const sl_eval_pdev *d, unsigned part, const sl_eval_pdev_op *op);

#endif
