/* Device faults (fault.h): the fault thread, requests held during a reset,
 * and fault injection through the device contract. */
#include "fault.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A session request held while the device is reset. */
struct sl_held {
    struct sl_held *next;
    sl_req *req;
    Salus__Request *msg;
};

/* How often the fault thread looks whether the device went idle (the
 * completion paths do not signal it: a reset is rare). */
#define IDLE_POLL_NS 2000000

static void *fault_main(void *arg);

void sl_fault_init(sl_fault *f, const sl_config *cfg, sl_exec *ex, pthread_mutex_t *lock,
                   const sl_fault_hooks *hooks)
{
    f->cfg = cfg;
    f->ex = ex;
    f->lock = lock;
    f->hooks = *hooks;
}

bool sl_fault_lost(sl_fault *f)
{
    if (f->lost || f->dead)
        return false;
    f->lost = true;
    f->faults++;
    sl_exec_halt(f->ex);
    sl_log_err("dev.lost",
               "device lost (sticky device error): running iterations fail with DEVICE_RESET; "
               "resetting once nothing runs");
    if (!f->thread_started) {
        if (sl_cond_init_monotonic(&f->cond) != 0) {
            sl_log_err("dev.lost", "cannot start the reset thread: the device stays lost");
            f->dead = true;
            return true;
        }
        if (pthread_create(&f->thread, NULL, fault_main, f) != 0) {
            pthread_cond_destroy(&f->cond);
            sl_log_err("dev.lost", "cannot start the reset thread: the device stays lost");
            f->dead = true;
            return true;
        }
        f->thread_started = true;
    }
    pthread_cond_signal(&f->cond);
    return true;
}

bool sl_fault_hold(sl_fault *f, sl_req *req, Salus__Request *msg)
{
    struct sl_held *h = sl_malloc(sizeof *h);
    if (!h)
        return false;
    *h = (struct sl_held){.req = req, .msg = msg};
    if (f->held_tail)
        f->held_tail->next = h;
    else
        f->held = h;
    f->held_tail = h;
    return true;
}

/* Hands every held request to hooks.release, in order. Lock held on entry
 * and return, dropped meanwhile. */
static void release_held(sl_fault *f, bool dropping)
{
    struct sl_held *h = f->held;
    f->held = f->held_tail = NULL;
    if (!h)
        return;
    pthread_mutex_unlock(f->lock);
    while (h) {
        struct sl_held *next = h->next;
        f->hooks.release(f->hooks.arg, h->req, h->msg, dropping);
        sl_free(h);
        h = next;
    }
    pthread_mutex_lock(f->lock);
}

static void reset(sl_fault *f)
{
    uint64_t t0 = sl_now_ns();
    int rc = sl_exec_reset_device(f->ex);
    if (rc != SL_OK) {
        sl_log_err("dev.reset", "device reset failed: %s; session requests get NO_DEVICE",
                   sl_strerror(rc));
        f->dead = true;
        if (f->cfg->device_dead)
            f->cfg->device_dead();
    } else {
        f->resets++;
        unsigned held = 0;
        for (const struct sl_held *h = f->held; h; h = h->next)
            held++;
        sl_log_warn("dev.reset",
                    "device reset #%llu done in %.1f ms (%u request(s) held meanwhile); "
                    "sessions re-upload their state",
                    (unsigned long long) f->resets, (double) (sl_now_ns() - t0) / 1e6, held);
    }
    f->lost = false;
    f->hooks.recovered(f->hooks.arg, f->dead);
}

static void *fault_main(void *arg)
{
    sl_fault *f = arg;
    pthread_mutex_lock(f->lock);
    while (!f->thread_stop) {
        if (!f->lost || f->dead) {
            pthread_cond_wait(&f->cond, f->lock);
            continue;
        }
        if (!f->hooks.idle(f->hooks.arg)) {
            (void) sl_cond_wait_until(&f->cond, f->lock, sl_now_ns() + IDLE_POLL_NS);
            continue;
        }
        reset(f);
        release_held(f, false);
    }
    pthread_mutex_unlock(f->lock);
    return NULL;
}

void sl_fault_fini(sl_fault *f)
{
    if (f->thread_started) {
        pthread_mutex_lock(f->lock);
        f->thread_stop = true;
        pthread_cond_signal(&f->cond);
        pthread_mutex_unlock(f->lock);
        pthread_join(f->thread, NULL);
        pthread_cond_destroy(&f->cond);
        f->thread_started = false;
    }
    if (f->lock && f->held) {
        pthread_mutex_lock(f->lock);
        release_held(f, true);
        pthread_mutex_unlock(f->lock);
    }
}

/* ---- fault injection ---- */

/* Applies one command line. Returns SL_OK, SL_EINVAL or SL_EUNSUPPORTED. */
static int inject(sl_fault *f, const char *line)
{
    static const struct {
        const char *name;
        int kind;
        bool takes_n;
    } cmds[] = {
        {"alloc", SL_FAULT_ALLOC, true},  {"sticky", SL_FAULT_STICKY, false},
        {"fatal", SL_FAULT_FATAL, false}, {"slow", SL_FAULT_SLOW, true},
        {"clear", SL_FAULT_CLEAR, false}, {"graph", SL_FAULT_GRAPH, true},
    };
    sl_device *dev = f->ex->dev;
    char cmd[32] = "";
    unsigned long n = 1;
    int got = sscanf(line, "%31s %lu", cmd, &n);
    if (got < 1)
        return SL_OK; /* blank line */
    if (!dev->ops->inject_fault) {
        sl_log_err("flt.cmd", "fault injection: device %s injects no faults (use sim)",
                   dev->description);
        return SL_EUNSUPPORTED;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        if (strcmp(cmd, cmds[i].name) != 0 || (!cmds[i].takes_n && got == 2) ||
            (cmds[i].kind == SL_FAULT_SLOW && got != 2) || n > 1000000)
            continue;
        int rc = dev->ops->inject_fault(dev, cmds[i].kind, (unsigned) n);
        if (rc == SL_OK) {
            sl_log_warn("flt.inject", "fault injection: %s %lu", cmd, cmds[i].takes_n ? n : 0);
            return SL_OK;
        }
        if (rc == SL_EUNSUPPORTED) {
            sl_log_err("flt.cmd", "fault injection: device %s does not inject '%s' (use sim)",
                       dev->description, cmd);
            return rc;
        }
        break;
    }
    sl_log_err("flt.cmd",
               "fault injection: bad command '%s' (alloc [N] | sticky | fatal | slow N | clear | "
               "graph [N])",
               cmd);
    return SL_EINVAL;
}

int sl_fault_inject_file(sl_fault *f)
{
    const char *path = f->cfg->fault_file;
    if (!path)
        return SL_EINVAL;
    FILE *fp = fopen(path, "r");
    if (!fp) {
        sl_log_err("flt.file", "fault injection: cannot read %s: %s", path, strerror(errno));
        return SL_ENOTFOUND;
    }
    int rc = SL_OK;
    char line[128];
    while (fgets(line, sizeof line, fp)) {
        int one = inject(f, line);
        if (one != SL_OK)
            rc = one;
    }
    fclose(fp);
    if (unlink(path) != 0)
        sl_log_warn("flt.file", "fault injection: cannot remove %s: %s", path, strerror(errno));
    return rc;
}
