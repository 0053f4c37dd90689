/* Server life cycle: start-up in steps that unwind on failure, and a stop
 * that drains. Used by salusd's main and by anything that embeds a server
 * (benchmarks run one in-process over inproc://). */
#include "server.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <unistd.h>

/* Opens the device and carves its memory: [persistent | lane]. */
static int memory_init(sl_server *srv)
{
    sl_device *dev = srv->dev;
    uint64_t cap = srv->cfg.memory_limit;
    if (!cap)
        cap = dev->total_bytes - dev->total_bytes / 20;
    if (cap > dev->total_bytes) {
        sl_log_err("mem.limit", "--memory-limit %llu exceeds the device's %llu bytes",
                   (unsigned long long) cap, (unsigned long long) dev->total_bytes);
        return SL_EINVAL;
    }
    cap &= ~(uint64_t) 255;
    uint64_t lane = srv->cfg.lane_bytes ? srv->cfg.lane_bytes : cap / 4;
    lane = (lane + 255) & ~(uint64_t) 255;
    if (lane >= cap) {
        sl_log_err("mem.lane", "lane size %llu leaves no persistent memory in %llu bytes",
                   (unsigned long long) lane, (unsigned long long) cap);
        return SL_EINVAL;
    }
    int rc = dev->ops->mem_alloc(dev, cap, &srv->arena);
    if (rc) {
        sl_log_err("mem.arena", "cannot allocate %llu bytes of device memory: %s",
                   (unsigned long long) cap, sl_strerror(rc));
        return rc;
    }
    srv->capacity = cap;
    if ((rc = sl_mem_pool_create(0, cap - lane, 256, &srv->persistent)) != SL_OK)
        return rc;
    srv->lane.base = cap - lane;
    srv->lane.bytes = lane;
    if ((rc = dev->ops->stream_create(dev, 0, &srv->lane.stream)) != SL_OK)
        return rc;
    if ((rc = dev->ops->stream_create(dev, 0, &srv->copy_stream)) != SL_OK)
        return rc;
    sl_log_info("mem.init", "device memory %.1f MiB: persistent %.1f MiB, 1 lane of %.1f MiB",
                (double) cap / (1 << 20), (double) (cap - lane) / (1 << 20),
                (double) lane / (1 << 20));
    return SL_OK;
}

/* Frees everything; safe on a half-initialised server. */
void sl_server_fini(sl_server *srv)
{
    size_t i = 0;
    void *v;
    srv->stopped = true;
    if (!sl_transport_stop(srv)) {
        fflush(stderr);
        _exit(0); /* NNG still owns threads that may call into srv */
    }
    /* sessions left open at exit: their memory goes with the arena, but
     * their host-side records are freed for leak checkers */
    while (sl_map_next(&srv->sessions, &i, NULL, &v))
        sl_dispatch_session_free(srv, v);
    sl_map_fini(&srv->sessions);
    if (srv->dev) {
        if (srv->lane.stream)
            srv->dev->ops->stream_destroy(srv->dev, srv->lane.stream);
        if (srv->copy_stream)
            srv->dev->ops->stream_destroy(srv->dev, srv->copy_stream);
        if (srv->arena)
            srv->dev->ops->mem_free(srv->dev, srv->arena);
    }
    sl_mem_pool_destroy(srv->persistent);
    sl_sched_destroy(srv->sched);
    sl_dev_close(srv->dev);
    pthread_cond_destroy(&srv->idle_cond);
    pthread_mutex_destroy(&srv->lock);
}

int sl_server_start(sl_server *srv)
{
    int rc;
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->idle_cond, NULL);
    srv->start_ns = sl_now_ns();
    if ((rc = sl_dev_open(srv->cfg.device, &srv->dev)) != SL_OK) {
        sl_log_err("dev.open", "cannot open device '%s': %s", srv->cfg.device, sl_strerror(rc));
        return rc;
    }
    sl_log_info("dev.open", "device %s", srv->dev->description);
    if ((rc = memory_init(srv)) != SL_OK)
        return rc;
    const sl_policy_ops *policy = sl_sched_policy_find(srv->cfg.policy);
    if (!policy)
        return SL_EINVAL;
    if ((rc = sl_sched_create(policy, srv->cfg.strict, &srv->sched)) != SL_OK)
        return rc;
    if ((rc = sl_transport_start(srv)) != SL_OK)
        return rc;
    sl_log_info("srv.ready", "salusd %s ready: policy %s%s, %d contexts", SL_SERVER_VERSION,
                srv->cfg.policy, srv->cfg.strict ? " (strict)" : "", srv->cfg.contexts);
    return SL_OK;
}

void sl_server_stop(sl_server *srv)
{
    sl_dispatch_drain(srv);
    pthread_mutex_lock(&srv->lock);
    srv->stopped = true;
    pthread_mutex_unlock(&srv->lock);
    sl_log_info("srv.exit", "drained after %llu iterations; exiting",
                (unsigned long long) srv->iterations_total);
    sl_server_fini(srv);
}
