/* Device faults (DESIGN.md section 8, device.h "error classes").
 *
 * A per-request device error (bad data, a failed workspace allocation) just
 * fails its request: the completion paths reply with it and nothing else
 * changes. A device-lost error (SL_EDEVICERESET) goes through here:
 *
 *   1. sl_fault_handle, in the completion callback that first sees it,
 *      marks the device lost (the executor then starts no iteration), marks
 *      every session to be told, fails queued runs with DEVICE_RESET and
 *      wakes the fault thread. Running iterations fail on their own (the
 *      device fails all their remaining work) and reach the same hook.
 *   2. Session requests that arrive meanwhile are *held* (sl_fault_gate),
 *      not failed: a client that retries at once would only see the reset
 *      again. Even a close or a free is held: what it sets off (admissions,
 *      waiting registrations) must not reach a stream being replaced.
 *   3. The fault thread waits until nothing runs on the device (no lane
 *      busy, no control copy in flight, no completion sending replies), then
 *      destroys every stream and the arena, resets the device, allocates the
 *      arena again (same size: every tensor keeps its offset, id and shape;
 *      its contents are gone), reopens the copy stream (lane streams come
 *      back lazily), and dispatches the held requests again.
 *   4. A session's next request that reads or writes device data (not a
 *      close or a free) gets DEVICE_RESET once, with a message saying to
 *      re-upload (a session that already got DEVICE_RESET from a failed run
 *      or copy is not told twice).
 *
 * A reset that fails leaves the device dead: session requests get NO_DEVICE,
 * and cfg.device_dead is called (salusd then exits 3 for a restart: CUDA
 * documents its sticky errors as recoverable only by a new process).
 *
 * Fault injection (tests; sim backend only): salusd --fault-inject FILE, and
 * SIGUSR1 makes salusd read FILE, apply its commands and delete it. */
#include "server.h"
#include "sim/sim.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A session request held while the device is reset. */
struct sl_held {
    struct sl_held *next;
    sl_req *req;
    Salus__Request *msg;
    uint32_t pipe_id;
};

#define NOTICE                                                                                     \
    "tensors keep their ids and shapes but their contents are lost: re-upload persistent state "   \
    "(write every tensor) and retry"

/* How often the fault thread looks whether the device went idle (the
 * completion paths do not signal it: a reset is rare). */
#define IDLE_POLL_NS 2000000

static bool device_idle(const sl_server *srv)
{
    return !srv->lanes_busy && !srv->control_in_flight && !srv->completing;
}

/* Fails the queued (not started) run of every session still to be told.
 * Collected in rounds: finishing a run may close and free its session. */
static void fail_queued_runs(sl_server *srv, sl_outbox *box)
{
    for (;;) {
        uint64_t ids[64];
        int n = 0;
        size_t i = 0;
        void *v;
        while (n < 64 && sl_map_next(&srv->sessions, &i, NULL, &v)) {
            sl_session *s = v;
            if (s->reset_pending && s->head && s->job.n_queued && !s->job.running)
                ids[n++] = s->id;
        }
        if (!n)
            return;
        for (int k = 0; k < n; k++) {
            sl_session *s = sl_map_get(&srv->sessions, ids[k]);
            if (!s || !s->reset_pending || !s->job.n_queued || s->job.running)
                continue;
            /* the queued run is the session's head (its work runs in order) */
            (void) sl_sched_job_remove(srv->sched, &s->job);
            sl_sched_job_add(srv->sched, &s->job, sl_now_ns());
            s->reset_pending = false;
            sl_reply_error(
                s->head->reply, SL_EDEVICERESET,
                "the device was reset after a fault before this iteration started; " NOTICE);
            sl_session_work_done(srv, s, box);
        }
    }
}

static void *fault_main(void *arg);

/* First sight of a lost device. Lock held. */
static void device_lost(sl_server *srv, sl_outbox *box)
{
    sl_fault_state *f = &srv->fault;
    f->lost = true;
    sl_log_err("dev.lost",
               "device lost (sticky device error): running iterations fail with DEVICE_RESET; "
               "resetting once nothing runs");
    size_t i = 0;
    void *v;
    while (sl_map_next(&srv->sessions, &i, NULL, &v)) {
        sl_session *s = v;
        s->reset_pending = s->admitted;
    }
    if (!f->thread_started) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&f->cond, &ca);
        pthread_condattr_destroy(&ca);
        if (pthread_create(&f->thread, NULL, fault_main, srv) != 0) {
            pthread_cond_destroy(&f->cond);
            sl_log_err("dev.lost", "cannot start the reset thread: the device stays lost");
            f->dead = true;
        } else {
            f->thread_started = true;
        }
    }
    if (f->thread_started)
        pthread_cond_signal(&f->cond);
    /* iterations parked between ops (gap filling) run on, and fail fast */
    sl_exec_resume(srv, true, box);
}

void sl_fault_handle(sl_server *srv, sl_session *s, int status, sl_reply *r, sl_outbox *box)
{
    if (status != SL_EDEVICERESET)
        return;
    if (r)
        sl_reply_error(r, SL_EDEVICERESET,
                       "the device failed (sticky device error) and is being "
                       "reset; this request did not complete; " NOTICE);
    if (!srv->fault.lost && !srv->fault.dead)
        device_lost(srv, box);
    if (s)
        s->reset_pending = false; /* told by this reply */
    fail_queued_runs(srv, box);
}

/* Requests that read or write no device memory. */
static bool touches_no_device(const Salus__Request *msg)
{
    return msg->body_case == SALUS__REQUEST__BODY_CLOSE_SESSION ||
           msg->body_case == SALUS__REQUEST__BODY_FREE_TENSOR ||
           msg->body_case == SALUS__REQUEST__BODY_FREE_GRAPH;
}

int sl_fault_gate(sl_server *srv, sl_session *s, sl_req *req, Salus__Request *msg, uint32_t pipe_id,
                  sl_reply *r)
{
    sl_fault_state *f = &srv->fault;
    if (f->dead && !touches_no_device(msg)) {
        sl_reply_error(r, SL_ENODEV, "the device was lost and could not be reset; restart salusd");
        return SL_FAULT_ANSWERED;
    }
    if (f->lost) {
        struct sl_held *h = sl_malloc(sizeof *h);
        if (!h) {
            sl_reply_error(r, SL_EDEVICERESET, "the device is being reset; " NOTICE);
            s->reset_pending = false;
            return SL_FAULT_ANSWERED;
        }
        *h = (struct sl_held){.req = req, .msg = msg, .pipe_id = pipe_id};
        if (f->held_tail)
            f->held_tail->next = h;
        else
            f->held = h;
        f->held_tail = h;
        return SL_FAULT_HELD;
    }
    if (s->reset_pending && !touches_no_device(msg)) {
        s->reset_pending = false;
        sl_reply_error(r, SL_EDEVICERESET,
                       "the device was reset after a fault (session %llu); " NOTICE,
                       (unsigned long long) s->id);
        return SL_FAULT_ANSWERED;
    }
    return SL_FAULT_PASS;
}

/* Destroys every stream and the arena, resets the device and brings the
 * arena and the copy stream back. Lock held on entry and on return; dropped
 * while the device works. Returns the reset's result. */
static int reset_device(sl_server *srv)
{
    sl_device *dev = srv->dev;
    /* take everything device-side out of the server first: nothing may find
     * a stream that is being destroyed */
    sl_map lanes = srv->lanes;
    sl_spare_stream *spare = srv->spare_streams;
    size_t n_spare = srv->n_spare;
    sl_stream *copy = srv->copy_stream;
    void *arena = srv->arena;
    srv->lanes = (sl_map){0};
    srv->spare_streams = NULL;
    srv->n_spare = srv->cap_spare = 0;
    srv->copy_stream = NULL;
    srv->arena = NULL;
    uint64_t t0 = sl_now_ns();
    pthread_mutex_unlock(&srv->lock);

    size_t i = 0;
    void *v;
    while (sl_map_next(&lanes, &i, NULL, &v)) {
        sl_lane *l = v;
        dev->ops->stream_destroy(dev, l->stream);
        sl_free(l);
    }
    sl_map_fini(&lanes);
    for (size_t k = 0; k < n_spare; k++)
        dev->ops->stream_destroy(dev, spare[k].stream);
    sl_free(spare);
    if (copy)
        dev->ops->stream_destroy(dev, copy);
    if (arena)
        dev->ops->mem_free(dev, arena);
    arena = NULL;
    copy = NULL;
    int rc = dev->ops->reset ? dev->ops->reset(dev) : SL_ENODEV;
    if (rc == SL_OK)
        rc = dev->ops->mem_alloc(dev, srv->capacity, &arena);
    if (rc == SL_OK)
        rc = dev->ops->stream_create(dev, 0, &copy);

    pthread_mutex_lock(&srv->lock);
    srv->arena = arena; /* also on failure: freed with the server */
    srv->copy_stream = copy;
    if (rc != SL_OK) {
        sl_log_err("dev.reset", "device reset failed: %s; session requests get NO_DEVICE",
                   sl_strerror(rc));
        return rc;
    }
    srv->fault.resets++;
    unsigned held = 0;
    for (const struct sl_held *h = srv->fault.held; h; h = h->next)
        held++;
    sl_log_warn("dev.reset",
                "device reset #%llu done in %.1f ms (%u request(s) held meanwhile); sessions "
                "re-upload their state",
                (unsigned long long) srv->fault.resets, (double) (sl_now_ns() - t0) / 1e6, held);
    return SL_OK;
}

/* After a reset: the held requests go through dispatch again, in order. */
static void replay_held(sl_server *srv)
{
    sl_fault_state *f = &srv->fault;
    struct sl_held *h = f->held;
    f->held = f->held_tail = NULL;
    if (!h)
        return;
    srv->completing++; /* a drain waits until these are answered */
    pthread_mutex_unlock(&srv->lock);
    while (h) {
        struct sl_held *next = h->next;
        sl_dispatch(srv, h->req, h->msg, h->pipe_id);
        sl_free(h);
        h = next;
    }
    pthread_mutex_lock(&srv->lock);
    srv->completing--;
    if (srv->draining)
        pthread_cond_broadcast(&srv->idle_cond);
}

static void *fault_main(void *arg)
{
    sl_server *srv = arg;
    sl_fault_state *f = &srv->fault;
    pthread_mutex_lock(&srv->lock);
    while (!f->thread_stop) {
        if (!f->lost || f->dead || srv->draining) {
            pthread_cond_wait(&f->cond, &srv->lock);
            continue;
        }
        if (!device_idle(srv)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t at =
                (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec + IDLE_POLL_NS;
            ts.tv_sec = (time_t) (at / 1000000000ull);
            ts.tv_nsec = (long) (at % 1000000000ull);
            (void) pthread_cond_timedwait(&f->cond, &srv->lock, &ts);
            continue;
        }
        if (reset_device(srv) != SL_OK) {
            f->dead = true;
            if (srv->cfg.device_dead)
                srv->cfg.device_dead();
        }
        f->lost = false;
        sl_outbox box = {0};
        fail_queued_runs(srv, &box); /* runs queued behind other work meanwhile */
        if (!f->dead)
            sl_exec_kick(srv, &box); /* sessions opened during the reset */
        if (box.head || box.run_here) {
            srv->completing++;
            pthread_mutex_unlock(&srv->lock);
            sl_outbox_flush(srv, &box);
            pthread_mutex_lock(&srv->lock);
            srv->completing--;
        }
        if (!srv->draining)
            replay_held(srv);
    }
    pthread_mutex_unlock(&srv->lock);
    return NULL;
}

void sl_fault_fini(sl_server *srv)
{
    sl_fault_state *f = &srv->fault;
    if (f->thread_started) {
        pthread_mutex_lock(&srv->lock);
        f->thread_stop = true;
        pthread_cond_signal(&f->cond);
        pthread_mutex_unlock(&srv->lock);
        pthread_join(f->thread, NULL);
        pthread_cond_destroy(&f->cond);
        f->thread_started = false;
    }
    struct sl_held *h = f->held;
    f->held = f->held_tail = NULL;
    while (h) {
        struct sl_held *next = h->next;
        sl_reply *r = sl_reply_new(h->msg->seq);
        if (r)
            sl_reply_error(r, SL_ESHUTDOWN, "server is shutting down");
        salus__request__free_unpacked(h->msg, NULL);
        sl_transport_reply(srv, h->req, r);
        sl_free(h);
        h = next;
    }
}

/* ---- fault injection ---- */

/* Applies one command line. Returns SL_OK or SL_EINVAL. */
static int inject(sl_server *srv, const char *line)
{
    char cmd[32] = "";
    unsigned long n = 1;
    int got = sscanf(line, "%31s %lu", cmd, &n);
    if (got < 1)
        return SL_OK; /* blank line */
    int rc = SL_EINVAL;
    if (strcmp(cmd, "alloc") == 0 && n >= 1 && n <= 1000000) {
        rc = sl_sim_fail_next_ops(srv->dev, (unsigned) n, SL_EEXHAUSTED);
        if (rc == SL_OK)
            sl_log_warn("flt.alloc", "fault injection: the next %lu op(s) fail to allocate", n);
    } else if (strcmp(cmd, "sticky") == 0 && got == 1) {
        rc = sl_sim_fail_next_ops(srv->dev, 1, SL_EDEVICERESET);
        if (rc == SL_OK)
            sl_log_warn("flt.sticky", "fault injection: the next op loses the device");
    } else if (strcmp(cmd, "slow") == 0 && got == 2 && n >= 1 && n <= 1000000) {
        rc = sl_sim_set_slowdown(srv->dev, (unsigned) n);
        if (rc == SL_OK)
            sl_log_warn("flt.slow", "fault injection: device %lux slower", n);
    } else if (strcmp(cmd, "fatal") == 0 && got == 1) {
        rc = sl_sim_break_next_reset(srv->dev);
        if (rc == SL_OK)
            rc = sl_sim_fail_next_ops(srv->dev, 1, SL_EDEVICERESET);
        if (rc == SL_OK)
            sl_log_warn("flt.fatal", "fault injection: the next op loses the device for good");
    } else if (strcmp(cmd, "clear") == 0 && got == 1) {
        rc = sl_sim_fail_next_ops(srv->dev, 0, SL_EDEVICE);
        if (rc == SL_OK)
            rc = sl_sim_set_slowdown(srv->dev, 1);
        if (rc == SL_OK)
            sl_log_warn("flt.clear", "fault injection: cleared");
    }
    if (rc != SL_OK)
        sl_log_err(
            "flt.cmd",
            "fault injection: bad command '%s' (alloc [N] | sticky | fatal | slow N | clear)", cmd);
    return rc;
}

int sl_fault_inject_file(sl_server *srv)
{
    const char *path = srv->cfg.fault_file;
    if (!path)
        return SL_EINVAL;
    FILE *fp = fopen(path, "r");
    if (!fp) {
        sl_log_err("flt.file", "fault injection: cannot read %s: %s", path, strerror(errno));
        return SL_ENOTFOUND;
    }
    int rc = SL_OK;
    char line[128];
    while (fgets(line, sizeof line, fp))
        if (inject(srv, line) != SL_OK)
            rc = SL_EINVAL;
    fclose(fp);
    if (unlink(path) != 0)
        sl_log_warn("flt.file", "fault injection: cannot remove %s: %s", path, strerror(errno));
    return rc;
}
