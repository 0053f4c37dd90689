/* Server life cycle (server.h): start-up in steps that unwind on failure,
 * the hooks that tie the parts together, and a stop that drains. */
#include "server.h"
#include "gate.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>

/* ---- hooks: how completion and faults reach back up ---- */

static void exec_done(void *arg, sl_exec_task *t, int status, bool lane_idle, sl_outbox *box)
{
    sl_server *srv = arg;
    sl_sessions_task_done(&srv->sessions, t, status, lane_idle, box);
}

static void exec_unlock_send(void *arg, sl_outbox *box)
{
    sl_server *srv = arg;
    sl_sender_unlock_send(&srv->sender, box);
}

static bool exec_recording_room(void *arg, const sl_exec_job *job, uint64_t outside, char *why,
                                size_t len)
{
    sl_server *srv = arg;
    return sl_sessions_recording_room(&srv->sessions, job, outside, why, len);
}

static void exec_recordings_charged(void *arg, sl_exec_job *job)
{
    sl_server *srv = arg;
    sl_sessions_recordings_charged(&srv->sessions, job);
}

static bool fault_idle(void *arg)
{
    sl_server *srv = arg;
    return sl_exec_idle(&srv->exec) && sl_sender_quiet(&srv->sender);
}

static void fault_recovered(void *arg, bool dead)
{
    sl_server *srv = arg;
    sl_outbox box = {0};
    if (!dead) /* the reset destroyed every recording */
        sl_sessions_device_reset(&srv->sessions);
    sl_sessions_fail_queued_runs(&srv->sessions, &box); /* runs queued meanwhile */
    if (!dead) {
        sl_sessions_memory_changed(&srv->sessions, &box); /* the recordings' memory */
        sl_exec_kick(&srv->exec, &box);                   /* sessions opened during the reset */
    }
    sl_sender_unlock_send(&srv->sender, &box);
    pthread_mutex_lock(&srv->lock);
}

/* ---- start and stop ---- */

/* The memory manager over the whole memory limit: persistent regions, and
 * lanes with their framework part (every lane's stream takes its
 * workspaces from the lane's framework block). */
static int memory_init(sl_server *srv, uint64_t *capacity)
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
    /* by default what the backend suggests, bounded so that small memory
     * limits still hold several lanes */
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
    srv->sessions.capacity = cap;
    srv->sessions.tenants.default_memory = sl_tenant_default_memory(cap, srv->cfg.expected_tenants);
    srv->sessions.quota = mc.session_quota && mc.session_quota < cap ? mc.session_quota : cap;
    srv->sessions.default_ephemeral = mc.default_ephemeral;
    srv->sessions.framework_per_lane = mc.framework_per_lane;
    sl_log_info("mem.init",
                "device memory %.1f MiB; default lane %.1f MiB, framework %.1f MiB per lane",
                (double) cap / (1 << 20), (double) mc.default_ephemeral / (1 << 20),
                (double) mc.framework_per_lane / (1 << 20));
    *capacity = cap;
    return SL_OK;
}

bool sl_server_fini(sl_server *srv)
{
    atomic_store(&srv->stopping, true);
    sl_metrics_stop(srv->metrics); /* a scrape reads everything below */
    srv->metrics = NULL;
    sl_fault_fini(&srv->fault); /* before the transport: held requests are answered */
    bool closed = sl_transport_stop(srv->transport);
    srv->transport = NULL;
    sl_shm_socket_stop(srv->shm_socket); /* from here segments unmap at once */
    srv->shm_socket = NULL;
    sl_exec_fini(&srv->exec); /* stops the gap timer, frees streams and the arena */
    /* sessions left open: their memory went with the arena, their host-side
     * records go now */
    sl_sessions_fini(&srv->sessions);
    sl_shm_plane_fini(&srv->shm);
    sl_mem_mgr_destroy(srv->mem);
    srv->mem = NULL;
    sl_dev_close(srv->dev);
    srv->dev = NULL;
    sl_sender_fini(&srv->sender);
    if (srv->obs_ready) {
        sl_obs_fini(&srv->obs);
        srv->obs_ready = false;
    }
    if (srv->lock_ready) {
        sl_repeats_fini(&srv->repeats);
        pthread_mutex_destroy(&srv->lock);
        srv->lock_ready = false;
    }
    return closed;
}

/* The transport's question before it closes an idle connection. */
static bool pipe_holds(void *arg, uint32_t pipe_id)
{
    sl_server *srv = arg;
    pthread_mutex_lock(&srv->lock);
    bool holds = sl_sessions_pipe_holds(&srv->sessions, pipe_id);
    pthread_mutex_unlock(&srv->lock);
    return holds;
}

int sl_server_start(sl_server *srv)
{
    int rc;
    if (pthread_mutex_init(&srv->lock, NULL) != 0)
        return SL_ENOMEM;
    if (sl_repeats_init(&srv->repeats) != SL_OK) {
        pthread_mutex_destroy(&srv->lock);
        return SL_ENOMEM;
    }
    srv->lock_ready = true;
    if ((rc = sl_obs_init(&srv->obs)) != SL_OK)
        return rc;
    srv->obs_ready = true;
    sl_decoder_init(&srv->decoder, srv->cfg.max_decoding);
    srv->start_ns = sl_now_ns();
    if ((rc = sl_dev_open(srv->cfg.device, &srv->dev)) != SL_OK) {
        sl_log_err("dev.open", "cannot open device '%s': %s", srv->cfg.device, sl_strerror(rc));
        return rc;
    }
    sl_log_info("dev.open", "device %s", srv->dev->description);
    if ((rc = sl_sender_init(&srv->sender, &srv->lock, srv->dev, &srv->repeats)) != SL_OK)
        return rc;
    srv->sender.latency = &srv->obs.requests;
    uint64_t capacity;
    if ((rc = memory_init(srv, &capacity)) != SL_OK)
        return rc;
    const sl_exec_hooks eh = {.arg = srv,
                              .done = exec_done,
                              .unlock_send = exec_unlock_send,
                              .recording_room = exec_recording_room,
                              .recordings_charged = exec_recordings_charged};
    if ((rc = sl_exec_init(&srv->exec, &srv->cfg, srv->dev, srv->mem, capacity, &srv->lock, &eh)) !=
        SL_OK)
        return rc;
    /* under the lock: the executor's timer thread runs already */
    pthread_mutex_lock(&srv->lock);
    srv->exec.obs = &srv->obs;
    pthread_mutex_unlock(&srv->lock);
    const sl_fault_hooks fh = {
        .arg = srv, .idle = fault_idle, .recovered = fault_recovered, .release = sl_gate_release};
    sl_fault_init(&srv->fault, &srv->cfg, &srv->exec, &srv->lock, &fh);
    if ((rc = sl_shm_plane_init(&srv->shm, srv->dev, srv->cfg.shm_session_bytes,
                                srv->cfg.shm_total_bytes)) != SL_OK)
        return rc;
    sl_sessions_init(&srv->sessions, &srv->cfg, &srv->exec, &srv->fault, srv->mem, &srv->shm);
    const sl_transport_hooks th = {.arg = srv,
                                   .request = sl_gate_request,
                                   .pipe_gone = sl_gate_pipe_gone,
                                   .pipe_holds = pipe_holds};
    if ((rc = sl_transport_start(&srv->cfg, &th, &srv->transport)) != SL_OK)
        return rc;
    /* after the ipc:// listeners: their paths are then known to be free */
    if ((rc = sl_shm_socket_start(&srv->cfg, &srv->lock, &srv->sessions, &srv->shm,
                                  &srv->shm_socket)) != SL_OK)
        return rc;
    if (srv->cfg.metrics_listen &&
        (rc = sl_metrics_start(srv, srv->cfg.metrics_listen, &srv->metrics)) != SL_OK)
        return rc;
    sl_log_info("srv.ready", "salusd %s ready: policy %s%s, %d contexts", SL_SERVER_VERSION,
                srv->cfg.policy, srv->cfg.strict ? " (strict)" : "", srv->cfg.contexts);
    return SL_OK;
}

void sl_server_stop(sl_server *srv)
{
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    sl_sessions_drain(&srv->sessions, &box);
    atomic_store(&srv->sender.draining, true);
    pthread_mutex_unlock(&srv->lock);
    sl_sender_send(&srv->sender, &box);
    /* no reset, and no held request replayed, from here on */
    sl_fault_fini(&srv->fault);

    pthread_mutex_lock(&srv->lock);
    while (!sl_exec_idle(&srv->exec) || !sl_sender_quiet(&srv->sender))
        pthread_cond_wait(&srv->sender.idle, &srv->lock);
    pthread_mutex_unlock(&srv->lock);
    sl_log_info("srv.exit", "drained after %llu iterations; exiting",
                (unsigned long long) sl_exec_get_stats(&srv->exec).iterations);
    (void) sl_server_fini(srv);
}

int sl_server_inject_faults(sl_server *srv)
{
    return sl_fault_inject_file(&srv->fault);
}

void sl_server_get_counters(sl_server *srv, sl_server_counters *out)
{
    pthread_mutex_lock(&srv->lock);
    *out = (sl_server_counters){
        .requests = atomic_load(&srv->requests),
        .replies = atomic_load(&srv->sender.replies),
        .errors = atomic_load(&srv->sender.errors),
        .repeats = atomic_load(&srv->repeats.seen),
        .exec = sl_exec_get_stats(&srv->exec),
        .sessions = srv->sessions.table.count,
    };
    pthread_mutex_unlock(&srv->lock);
}
