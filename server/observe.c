/* Histograms and the trace ring (observe.h). */
#include "observe.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

/* From 50 us (a small inference's round trip) to an hour (a session's wait
 * for admission behind a long job); about two buckets per factor of ten
 * below 1 s, then the steps people read waits in: 5 s, 10 s, 30 s, 1, 2, 5,
 * 10, 30 and 60 minutes. */
const double sl_hist_bounds[SL_HIST_BUCKETS] = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
    0.5,     1,      2.5,     5,      10,    30,     60,    120,  300,   600,  1800, 3600};

void sl_hist_observe(sl_hist *h, uint64_t ns)
{
    double s = (double) ns / 1e9;
    unsigned i = 0;
    while (i < SL_HIST_BUCKETS && s > sl_hist_bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, ns, memory_order_relaxed);
}

int sl_obs_init(sl_obs *o)
{
    memset(o, 0, sizeof *o);
    return pthread_mutex_init(&o->ring_lock, NULL) == 0 ? SL_OK : SL_ENOMEM;
}

void sl_obs_fini(sl_obs *o)
{
    sl_free(o->ring);
    o->ring = NULL;
    pthread_mutex_destroy(&o->ring_lock);
}

void sl_obs_record(sl_obs *o, const sl_trace_event *e)
{
    pthread_mutex_lock(&o->ring_lock);
    if (atomic_load_explicit(&o->tracing, memory_order_relaxed) && o->ring)
        o->ring[o->written++ % SL_TRACE_EVENTS] = *e;
    pthread_mutex_unlock(&o->ring_lock);
}

int sl_obs_trace_start(sl_obs *o, uint64_t now)
{
    pthread_mutex_lock(&o->ring_lock);
    if (!o->ring)
        o->ring = sl_calloc(SL_TRACE_EVENTS, sizeof *o->ring);
    bool ok = o->ring != NULL;
    if (ok) {
        o->written = 0;
        o->start_ns = now;
        o->end_ns = 0;
        atomic_store(&o->tracing, true);
    }
    pthread_mutex_unlock(&o->ring_lock);
    return ok ? SL_OK : SL_ENOMEM;
}

size_t sl_obs_trace_stop(sl_obs *o, uint64_t now, sl_trace_event *out, uint64_t *dropped,
                         uint64_t *start, uint64_t *end)
{
    pthread_mutex_lock(&o->ring_lock);
    if (atomic_load(&o->tracing))
        o->end_ns = now;
    atomic_store(&o->tracing, false);
    size_t n = 0;
    *dropped = 0;
    if (o->ring) {
        uint64_t w = o->written;
        uint64_t first = w > SL_TRACE_EVENTS ? w - SL_TRACE_EVENTS : 0;
        *dropped = first;
        for (uint64_t i = first; i < w; i++)
            out[n++] = o->ring[i % SL_TRACE_EVENTS];
    }
    *start = o->start_ns;
    *end = o->end_ns;
    pthread_mutex_unlock(&o->ring_lock);
    return n;
}
