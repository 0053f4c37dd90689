/* What salusd records for operators beside its own bookkeeping: latency
 * histograms, per-lane busy time, fault counts, and the trace ring behind
 * `salusctl trace`. The metrics endpoint (metrics.h) and the Trace request
 * read them.
 *
 * Cost. Histograms and counters are relaxed atomics (one add each, no
 * lock). Trace points cost one relaxed atomic load while tracing is off;
 * while on, each event takes the ring's own lock, a leaf taken with the
 * server lock held or not, held only to copy one event in or the ring out.
 *
 * Memory. The ring is SL_TRACE_EVENTS events (about 3 MiB), allocated the
 * first time a trace starts and kept; when full the oldest events are
 * overwritten and counted as dropped. Nothing here grows with clients. */
#ifndef SL_OBSERVE_H
#define SL_OBSERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Histogram bucket upper bounds, in seconds (the +Inf bucket is extra). */
#define SL_HIST_BUCKETS 24
extern const double sl_hist_bounds[SL_HIST_BUCKETS];

typedef struct sl_hist {
    _Atomic uint64_t bucket[SL_HIST_BUCKETS + 1]; /* not cumulative; last = +Inf */
    _Atomic uint64_t sum_ns;
} sl_hist;

/* Adds one observation of ns nanoseconds. Any thread, no lock. */
void sl_hist_observe(sl_hist *h, uint64_t ns);

enum {
    SL_TRACE_ITERATION = 1, /* an iteration on its lane */
    SL_TRACE_OP = 2,        /* one op of an op-by-op iteration (arg: op index) */
    SL_TRACE_SWITCH = 3,    /* the lane went from session arg to session */
    SL_TRACE_ADMISSION = 4, /* a session's wait for admission */
    SL_TRACE_QUEUED = 5,    /* an iteration's wait from its Run to its start */
};

typedef struct sl_trace_event {
    uint64_t ts_ns, dur_ns, session, arg;
    uint32_t kind, lane;
    int32_t priority;
} sl_trace_event;

#define SL_TRACE_EVENTS (1u << 16)
/* Lanes whose busy time is kept (manager lane ids are small and reused;
 * higher ones are not counted). */
#define SL_OBS_LANES 256
/* Reasons an admission wait is counted under (manager.h's reasons, FITS
 * to FRAGMENTATION, by value). */
#define SL_OBS_WAIT_REASONS 4

typedef struct sl_obs {
    _Atomic bool tracing;
    pthread_mutex_t ring_lock; /* leaf: guards ring, written, start/end */
    sl_trace_event *ring;
    uint64_t written; /* events ever written since the start */
    uint64_t start_ns, end_ns;
    sl_hist requests;   /* request received to reply handed to the transport */
    sl_hist iterations; /* Run received to its iteration done */
    /* Sessions' waits for admission, by the memory manager's reason the
     * wait began with (manager.h's enum sl_mem_reason; only CAPACITY and
     * FRAGMENTATION wait). Written under the server lock. */
    sl_hist admission_wait[SL_OBS_WAIT_REASONS];             /* waits that ended admitted */
    _Atomic uint64_t admission_wait_ns[SL_OBS_WAIT_REASONS]; /* every ended wait */
    _Atomic uint64_t lane_busy_ns[SL_OBS_LANES];
    _Atomic uint64_t lane_iterations[SL_OBS_LANES];
    /* the session last started on each lane, for switch events (written
     * under the server lock) */
    uint64_t lane_last[SL_OBS_LANES];
    /* when each lane last had a whole iteration timed op by op (sampling,
     * exec_trace.c) */
    _Atomic uint64_t lane_timed_ns[SL_OBS_LANES];
    _Atomic uint64_t faults; /* device-lost errors seen */
} sl_obs;

/* Errors: SL_ENOMEM (no mutex). */
int sl_obs_init(sl_obs *o);
/* Frees the ring. No thread may use o any more. */
void sl_obs_fini(sl_obs *o);

static inline bool sl_obs_tracing(sl_obs *o)
{
    return o && atomic_load_explicit(&o->tracing, memory_order_relaxed);
}
/* Records e when tracing (check sl_obs_tracing first to skip building it). */
void sl_obs_record(sl_obs *o, const sl_trace_event *e);
/* Clears the ring and starts recording. Errors: SL_ENOMEM (no ring). */
int sl_obs_trace_start(sl_obs *o, uint64_t now);
/* Stops recording and copies the ring, oldest first, into out (room for
 * SL_TRACE_EVENTS). Returns the number copied; *dropped counts events
 * overwritten, *start and *end the recording's bounds (0 when none ran). */
size_t sl_obs_trace_stop(sl_obs *o, uint64_t now, sl_trace_event *out, uint64_t *dropped,
                         uint64_t *start, uint64_t *end);
/* Adds a finished iteration's device time to its lane. */
static inline void sl_obs_lane_busy(sl_obs *o, uint32_t lane, uint64_t ns)
{
    if (o && lane < SL_OBS_LANES) {
        atomic_fetch_add_explicit(&o->lane_busy_ns[lane], ns, memory_order_relaxed);
        atomic_fetch_add_explicit(&o->lane_iterations[lane], 1, memory_order_relaxed);
    }
}

#endif
