/* Server life cycle: start-up in steps that unwind on failure, and a stop
 * that drains. Used by salusd's main and by anything that embeds a server
 * (benchmarks run one in-process over inproc://). */
#include "server.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

/* Opens the arena: the whole memory limit, managed by the memory manager
 * (persistent regions, lanes with their framework part). */
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
    /* every lane's stream takes its workspaces from the lane's framework
     * block (executor.c): by default what the backend suggests, bounded so
     * that small memory limits still hold several lanes */
    uint64_t framework = dev->workspace_hint < cap / 16 ? dev->workspace_hint : cap / 16;
    if (srv->cfg.framework_set)
        framework = srv->cfg.framework_per_lane;
    sl_mem_config mc = {
        .capacity = cap,
        .session_quota = srv->cfg.session_quota,
        .framework_per_lane = framework & ~(uint64_t) 255,
        .default_ephemeral = srv->cfg.lane_bytes ? srv->cfg.lane_bytes : cap / 8,
        /* lanes of their own while at most half is held, unless told */
        .spread_limit = srv->cfg.spread_set ? srv->cfg.spread_limit : cap / 2,
    };
    int rc = sl_mem_mgr_create(&mc, &srv->mem);
    if (rc) {
        sl_log_err("mem.config",
                   "invalid memory configuration: capacity %llu, default lane %llu, framework per "
                   "lane %llu",
                   (unsigned long long) cap, (unsigned long long) mc.default_ephemeral,
                   (unsigned long long) mc.framework_per_lane);
        return rc;
    }
    if ((rc = dev->ops->mem_alloc(dev, cap, &srv->arena)) != SL_OK) {
        sl_log_err("mem.arena", "cannot allocate %llu bytes of device memory: %s",
                   (unsigned long long) cap, sl_strerror(rc));
        return rc;
    }
    srv->capacity = cap;
    if ((rc = dev->ops->stream_create(dev, 0, &srv->copy_stream)) != SL_OK)
        return rc;
    sl_log_info("mem.init",
                "device memory %.1f MiB; default lane %.1f MiB, framework %.1f MiB per lane",
                (double) cap / (1 << 20), (double) mc.default_ephemeral / (1 << 20),
                (double) mc.framework_per_lane / (1 << 20));
    return SL_OK;
}

/* Session ids start at a random point in [2^39, 2^40) per server instance:
 * a client of a previous instance (salusd restarted) gets SESSION_LOST for
 * its old session, never PERMISSION_DENIED for someone else's session that
 * happens to have the same number. */
static uint64_t session_id_base(void)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t) sizeof r)
        r = (uint32_t) sl_now_ns();
    return ((uint64_t) (r & 0x7fffff) | (1u << 23)) << 16;
}

/* Frees everything; safe on a half-initialised server. */
void sl_server_fini(sl_server *srv)
{
    size_t i = 0;
    void *v;
    srv->stopped = true;
    sl_fault_fini(srv); /* before the transport: held requests get SHUTTING_DOWN */
    if (!sl_transport_stop(srv)) {
        fflush(stderr);
        _exit(0); /* NNG still owns threads that may call into srv */
    }
    /* sessions left open at exit: their memory goes with the arena, but
     * their host-side records are freed for leak checkers */
    sl_exec_timer_stop(srv);
    while (sl_map_next(&srv->sessions, &i, NULL, &v))
        sl_dispatch_session_free(srv, v);
    sl_map_fini(&srv->sessions);
    if (srv->dev) {
        sl_exec_lanes_fini(srv);
        if (srv->copy_stream)
            srv->dev->ops->stream_destroy(srv->dev, srv->copy_stream);
        if (srv->arena)
            srv->dev->ops->mem_free(srv->dev, srv->arena);
    }
    sl_mem_mgr_destroy(srv->mem);
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
    srv->next_session_id = session_id_base();
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
    if ((rc = sl_exec_timer_start(srv)) != SL_OK)
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
