/* The listener watchdog: a thread that replaces listeners NNG 1.5.2 stopped
 * (nanomsg/nng#1518), closes and sweeps the listeners it took out of
 * service, closes connections past their deadline and watches salusd's
 * descriptors. Why it works this way: transport.c's header. */
#include "transport_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* How often the watchdog reads NNG's listener statistics: a deaf listener
 * parks every connection that completes its handshake until it is
 * replaced, so this is the window in which a client can be caught. */
#define SL_WATCH_TICK_MS 20
/* After a replacement the next deafening is likely near (an attack comes in
 * storms): the statistics are read this often for SL_WATCH_FAST_MS. */
#define SL_WATCH_FAST_TICK_MS 2
#define SL_WATCH_FAST_MS 2000
/* A listener replaced this many times within this window keeps going deaf
 * (note_deafening). */
#define SL_DEAF_WARN_COUNT 20
#define SL_DEAF_WINDOW_MS 60000
/* How often connection deadlines and salusd's descriptors are checked. */
#define SL_WATCH_DEADLINE_MS 250
#define SL_WATCH_FDS_MS 1000
/* Waits after a failed replacement: the cause (an unwritable folder, no
 * descriptors left) is the operator's to fix, not gone in a tick. */
#define SL_WATCH_RETRY_MIN_MS 100
#define SL_WATCH_RETRY_MAX_MS 10000
/* A retired listener still hands over the connections its socket had queued
 * before the rename (within NNG's 100 ms back-off after an error); it is
 * closed once it has no pipes and this long has passed. */
#define SL_RETIRE_GRACE_MS 300
/* How long after closing a retired ipc:// listener its leftover
 * descriptors are swept: by then NNG's reaper has freed everything it ever
 * will (connections still negotiating are freed within milliseconds). */
#define SL_SWEEP_AFTER_MS 5000
/* A probe of a tcp:// or tls+tcp:// listener: how long it waits for the
 * listener to hang up on its bad handshake, then for the listener's
 * statistics to count it. Probing waits out NNG's 100 ms back-off first. */
#define SL_PROBE_HANGUP_MS 2000
#define SL_PROBE_COUNT_MS 200
#define SL_PROBE_BACKOFF_MS 120
/* Under descriptor pressure (above 3/4 of RLIMIT_NOFILE), idle connections
 * without a session are closed after this long instead of --idle-timeout. */
#define SL_PRESSURE_IDLE_MS 1000

static bool url_is_ipc(const char *url)
{
    return strncmp(url, "ipc://", 6) == 0;
}

/* Listener l's counters from a statistics snapshot: "other" (where NNG
 * 1.5.2 counts the error that stops a listener) and the sum of every
 * counter (anything the core listener saw). False when l has none. */
static nng_stat *find_listener(nng_stat *st, uint32_t id)
{
    /* nng_stat_find_listener of NNG 1.5.2 returns the first listener's
     * statistics whatever the id; a scope's value is its id */
    if (nng_stat_type(st) != NNG_STAT_SCOPE)
        return NULL;
    if (strcmp(nng_stat_name(st), "listener") == 0 && (uint32_t) nng_stat_value(st) == id)
        return st;
    for (nng_stat *c = nng_stat_child(st); c; c = nng_stat_next(c)) {
        nng_stat *found = find_listener(c, id);
        if (found)
            return found;
    }
    return NULL;
}

static bool listener_counters(nng_stat *root, nng_listener l, uint64_t *other, uint64_t *sum)
{
    nng_stat *ls = find_listener(root, (uint32_t) nng_listener_id(l));
    if (!ls)
        return false;
    *other = *sum = 0;
    for (nng_stat *c = nng_stat_child(ls); c; c = nng_stat_next(c)) {
        /* "pipes" goes down as connections close: not an event */
        if (nng_stat_type(c) != NNG_STAT_COUNTER || strcmp(nng_stat_name(c), "pipes") == 0)
            continue;
        *sum += nng_stat_value(c);
        if (strcmp(nng_stat_name(c), "other") == 0)
            *other = nng_stat_value(c);
    }
    return true;
}

static bool counters_now(nng_listener l, uint64_t *other, uint64_t *sum)
{
    nng_stat *st;
    if (nng_stats_get(&st) != 0)
        return false;
    bool ok = listener_counters(st, l, other, sum);
    nng_stats_free(st);
    return ok;
}

/* Where a probe connects for listener l: the bound tcp address with a
 * wildcard turned into loopback. */
static bool probe_address(nng_listener l, struct sockaddr_storage *ss, socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    nng_sockaddr sa;
    if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        return false;
    if (sa.s_family == NNG_AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *) ss;
        in->sin_family = AF_INET;
        in->sin_port = sa.s_in.sa_port; /* both in network order */
        in->sin_addr.s_addr = sa.s_in.sa_addr ? sa.s_in.sa_addr : htonl(INADDR_LOOPBACK);
        *len = sizeof *in;
        return true;
    }
    if (sa.s_family == NNG_AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = sa.s_in6.sa_port;
        memcpy(&in6->sin6_addr, sa.s_in6.sa_addr, sizeof in6->sin6_addr);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            in6->sin6_addr = in6addr_loopback;
        *len = sizeof *in6;
        return true;
    }
    return false;
}

/* Waits for fd to be ready for events until deadline_ns. */
static bool wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = sl_now_ns();
        if (now >= deadline_ns)
            return false;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int) ((deadline_ns - now) / 1000000 + 1));
        if (n > 0)
            return (p.revents & (events | POLLHUP | POLLERR)) != 0;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

enum probe_verdict { PROBE_UNKNOWN, PROBE_LISTENING, PROBE_DEAF };

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Whether listener l (tcp:// or tls+tcp://) still accepts: a connection
 * whose handshake fails on purpose (an SP header with reserved bytes set,
 * which a TLS listener cannot even decrypt), counted by the core listener
 * only while it listens. The probe waits for the listener to hang up, so it
 * never hangs up first (that is what stops listeners). */
static enum probe_verdict probe(nng_listener l)
{
    static const uint8_t bad_header[8] = {0, 'S', 'P', 0, 0, 0x30, 0xff, 0xff};
    struct sockaddr_storage ss;
    socklen_t len;
    uint64_t other, before, after;
    if (!probe_address(l, &ss, &len) || !counters_now(l, &other, &before))
        return PROBE_UNKNOWN;
    uint64_t deadline = sl_now_ns() + SL_PROBE_HANGUP_MS * 1000000ull;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return PROBE_UNKNOWN; /* out of descriptors: not the listener's fault */
    enum probe_verdict v = PROBE_UNKNOWN;
    if (connect(fd, (const struct sockaddr *) &ss, len) != 0) {
        int err = 0;
        socklen_t elen = sizeof err;
        if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT, deadline) ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)
            goto out_close;
    }
    if (send(fd, bad_header, sizeof bad_header, MSG_NOSIGNAL) != (ssize_t) sizeof bad_header)
        goto out_close;
    for (;;) {
        uint8_t buf[512];
        if (!wait_fd(fd, POLLIN, deadline))
            goto out_close; /* never hung up: unknown, try again later */
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            break;
    }
    v = PROBE_DEAF;
    for (int waited = 0; waited <= SL_PROBE_COUNT_MS; waited += 5) {
        if (counters_now(l, &other, &after) && after != before) {
            v = PROBE_LISTENING;
            break;
        }
        nap_ms(5);
    }
out_close:
    close(fd);
    return v;
}

static void retire(sl_transport *t, nng_listener l, const char *bound)
{
    if (t->n_retired == t->cap_retired) {
        int cap = t->cap_retired ? 2 * t->cap_retired : 8;
        sl_retired *grown = sl_reallocarray(t->retired, (size_t) cap, sizeof *grown);
        if (!grown) {
            /* cannot remember it: close it now (its clients reconnect) */
            nng_listener_close(l);
            return;
        }
        t->retired = grown;
        t->cap_retired = cap;
    }
    sl_retired *x = &t->retired[t->n_retired++];
    *x = (sl_retired){.l = l, .since_ns = sl_now_ns()};
    snprintf(x->bound, sizeof x->bound, "%s", bound);
}

/* Replaces listener i, which stopped accepting (or may have). */
static void replace_listener(sl_transport *t, int i)
{
    const char *url = t->cfg->listen[i];
    nng_listener old = t->listeners[i], fresh;
    char old_bound[SL_SUN_PATH_MAX];
    snprintf(old_bound, sizeof old_bound, "%s", t->ipc_bound[i]);
    if (!url_is_ipc(url))
        nng_listener_close(old); /* its port cannot be bound twice */
    int rc = sl_listen_start_one(t, i, false, &fresh);
    if (rc != SL_OK) {
        /* logged; "other" is read again next tick, so force a retry */
        t->retry_ms[i] = t->retry_ms[i] ? t->retry_ms[i] * 2 : SL_WATCH_RETRY_MIN_MS;
        if (t->retry_ms[i] > SL_WATCH_RETRY_MAX_MS)
            t->retry_ms[i] = SL_WATCH_RETRY_MAX_MS;
        t->retry_at_ns[i] = sl_now_ns() + t->retry_ms[i] * 1000000ull;
        sl_log_err("net.watch", "cannot replace the listener on %s: %s; retrying in %llu ms", url,
                   sl_strerror(rc), (unsigned long long) t->retry_ms[i]);
        t->other_seen[i] = 0;
        if (!url_is_ipc(url))
            t->listeners[i] = old; /* closed: its counters are gone, next start retries */
        return;
    }
    if (url_is_ipc(url))
        retire(t, old, old_bound);
    t->listeners[i] = fresh;
    t->replaced++;
    t->retry_ms[i] = 0;
    /* not read from the new listener: it may already have been stopped */
    t->other_seen[i] = 0;
    sl_log_debug("net.watch", "listener on %s replaced (%llu so far)", url,
                 (unsigned long long) t->replaced);
}

/* Listener i was just replaced. A peer that hangs up before the handshake
 * (a client killed while connecting, a probe) deafens a listener now and
 * then in normal use, and the replacement makes that invisible to
 * clients: such a replacement is logged at debug level. A listener that
 * keeps going deaf (SL_DEAF_WARN_COUNT times within SL_DEAF_WINDOW_MS:
 * a storm of hang-ups, likely on purpose) is worth an operator's look:
 * one warning per window. A replacement that fails is logged as an error
 * where it fails. */
static void note_deafening(sl_transport *t, int i)
{
    const char *url = t->cfg->listen[i];
    uint64_t now = sl_now_ns();
    if (now - t->deaf_window_ns[i] >= SL_DEAF_WINDOW_MS * 1000000ull) {
        t->deaf_window_ns[i] = now;
        t->deaf_in_window[i] = 0;
    }
    if (++t->deaf_in_window[i] == SL_DEAF_WARN_COUNT) {
        sl_log_warn("net.deaf",
                    "listener on %s keeps going deaf: replaced %d times in %d s (peers hanging up "
                    "before the handshake, nanomsg/nng#1518 in NNG %s); %llu replacements so far",
                    url, SL_DEAF_WARN_COUNT, SL_DEAF_WINDOW_MS / 1000, nng_version(),
                    (unsigned long long) t->replaced);
        return;
    }
    sl_log_debug("net.deaf",
                 "listener on %s stopped accepting (a peer hung up before the handshake, "
                 "nanomsg/nng#1518 in NNG %s) or may have; replaced (%llu replacements so far)",
                 url, nng_version(), (unsigned long long) t->replaced);
}

/* Listener i's "other" counter rose: replace it when it may be deaf. */
static void suspect(sl_transport *t, int i)
{
    const char *url = t->cfg->listen[i];
    if (!url_is_ipc(url)) {
        /* one of NNG's 100 ms back-offs may be running: a listener in one
         * counts nothing yet */
        nap_ms(SL_PROBE_BACKOFF_MS);
        enum probe_verdict v = probe(t->listeners[i]);
        if (v == PROBE_DEAF) {
            nap_ms(SL_PROBE_BACKOFF_MS);
            v = probe(t->listeners[i]);
        }
        sl_log_debug("net.probe", "%s: %s", url,
                     v == PROBE_DEAF        ? "deaf"
                     : v == PROBE_LISTENING ? "still listening"
                                            : "no answer to the probe");
        if (v != PROBE_DEAF)
            return;
    }
    uint64_t replaced = t->replaced;
    replace_listener(t, i);
    if (t->replaced != replaced)
        note_deafening(t, i);
}

/* Closes the descriptors left behind by closed ipc:// listeners: NNG 1.5.2
 * parks the connections that complete their handshake on a stopped listener
 * and never frees them, nor (while they exist) the listening socket; closing
 * the listener only shuts them down. On a unix socket, getsockname names the
 * listener's bound path also for the connections it accepted, and every
 * listener is bound at a name of its own, so those descriptors are exactly
 * the sockets named after a listener closed long enough ago that NNG has
 * freed all it ever will. NNG never uses them again. */
static void sweep(sl_transport *t, const char *const *names, int n_names)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d), swept = 0;
    int fds[256], n_fds = 0;
    for (struct dirent *e; (e = readdir(d)) && n_fds < 256;) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == self)
            continue;
        struct sockaddr_un sa;
        socklen_t len = sizeof sa;
        memset(&sa, 0, sizeof sa);
        if (getsockname(fd, (struct sockaddr *) &sa, &len) != 0 || sa.sun_family != AF_UNIX ||
            len <= offsetof(struct sockaddr_un, sun_path))
            continue;
        for (int k = 0; k < n_names; k++)
            if (strncmp(sa.sun_path, names[k], sizeof sa.sun_path) == 0) {
                fds[n_fds++] = fd;
                break;
            }
    }
    closedir(d);
    for (int k = 0; k < n_fds; k++)
        swept += close(fds[k]) == 0;
    if (swept)
        sl_log_debug("net.sweep",
                     "closed %d descriptor(s) NNG left behind on %d stopped listener(s)", swept,
                     n_names);
    (void) t;
}

/* Closes retired listeners that no connection uses any more, and sweeps
 * the closed ones later. */
static void close_retired(sl_transport *t)
{
    uint64_t now = sl_now_ns();
    const char *names[64];
    int n_names = 0;
    for (int r = 0; r < t->n_retired; r++) {
        sl_retired *x = &t->retired[r];
        if (!x->closed && now - x->since_ns >= SL_RETIRE_GRACE_MS * 1000000ull &&
            sl_transport_listener_pipes(t, (uint32_t) nng_listener_id(x->l)) == 0) {
            nng_listener_close(x->l);
            x->closed = true;
            x->since_ns = now;
        }
        if (x->closed && now - x->since_ns >= SL_SWEEP_AFTER_MS * 1000000ull && n_names < 64) {
            names[n_names++] = x->bound;
            x->swept = true;
        }
    }
    if (!n_names)
        return;
    sweep(t, names, n_names);
    for (int r = 0; r < t->n_retired;) {
        if (t->retired[r].swept)
            t->retired[r] = t->retired[--t->n_retired];
        else
            r++;
    }
}

/* Whether connection pipe_id has a request in hand. */
static bool pipe_busy(sl_transport *t, uint32_t pipe_id)
{
    for (int i = 0; i < t->n_reqs; i++)
        if (atomic_load(&t->reqs[i].state) == REQ_WAIT &&
            atomic_load(&t->reqs[i].pipe_id) == pipe_id)
            return true;
    return false;
}

/* Closes connections that completed no request for idle_ns and hold no
 * session and no request. */
static void enforce_deadlines(sl_transport *t, uint64_t idle_ns)
{
    enum { BATCH = 256 };
    nng_pipe idle[BATCH];
    int n = 0;
    uint64_t now = sl_now_ns();
    pthread_mutex_lock(&t->peers_lock);
    size_t cursor = 0;
    void *v;
    while (n < BATCH && sl_map_next(&t->peers, &cursor, NULL, &v)) {
        sl_conn *p = v;
        uint64_t last = atomic_load(&p->last_ns);
        if (now > last && now - last >= idle_ns) {
            idle[n++] = p->pipe;
            /* looked at again only after another idle period */
            atomic_store(&p->last_ns, now);
        }
    }
    pthread_mutex_unlock(&t->peers_lock);
    int closed = 0;
    for (int k = 0; k < n; k++) {
        uint32_t id = (uint32_t) nng_pipe_id(idle[k]);
        if (pipe_busy(t, id))
            continue;
        bool holds = false;
        if (t->hooks.pipe_holds && sl_transport_hook_enter(t))
            holds = t->hooks.pipe_holds(t->hooks.arg, id);
        sl_transport_hook_leave(t);
        if (!holds && nng_pipe_close(idle[k]) == 0)
            closed++;
    }
    if (closed)
        sl_log_info("net.idle",
                    "closed %d connection(s) that held no session and completed no request for "
                    "%llu ms",
                    closed, (unsigned long long) (idle_ns / 1000000));
}

/* salusd's open descriptors and their limit. */
static bool fd_pressure(sl_transport *t)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return false;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return false;
    uint64_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    bool high = n * 4 > (uint64_t) rl.rlim_cur * 3;
    uint64_t now = sl_now_ns();
    if (high && now - t->pressure_logged_ns > 10ull * 1000000000ull) {
        t->pressure_logged_ns = now;
        sl_log_warn("net.fds",
                    "%llu of %llu descriptors in use: closing idle connections without a "
                    "session after %d ms",
                    (unsigned long long) n, (unsigned long long) rl.rlim_cur, SL_PRESSURE_IDLE_MS);
    }
    return high;
}

static void *watch_main(void *arg)
{
    sl_transport *t = arg;
    uint64_t next_deadlines = 0, next_fds = 0, fast_until = 0;
    bool pressure = false;
    pthread_mutex_lock(&t->watch_lock);
    while (!t->watch_stop) {
        uint64_t tick_ms = sl_now_ns() < fast_until ? SL_WATCH_FAST_TICK_MS : SL_WATCH_TICK_MS;
        uint64_t until = sl_now_ns() + tick_ms * 1000000ull;
        while (!t->watch_stop &&
               sl_cond_wait_until(&t->watch_cond, &t->watch_lock, until) != ETIMEDOUT)
            ;
        if (t->watch_stop)
            break;
        pthread_mutex_unlock(&t->watch_lock);
        bool rose[SL_MAX_LISTEN] = {false}, gone[SL_MAX_LISTEN] = {false};
        nng_stat *st;
        if (nng_stats_get(&st) == 0) {
            for (int i = 0; i < t->n_listeners; i++) {
                uint64_t other, sum;
                if (!listener_counters(st, t->listeners[i], &other, &sum))
                    gone[i] = true; /* closed after a failed replacement */
                else if (other > t->other_seen[i])
                    rose[i] = true, t->other_seen[i] = other;
            }
            nng_stats_free(st);
        }
        uint64_t replaced = t->replaced;
        for (int i = 0; i < t->n_listeners; i++) {
            if ((gone[i] || rose[i]) && sl_now_ns() < t->retry_at_ns[i]) {
                t->other_seen[i] = 0; /* seen again, and retried, once the wait is over */
                continue;
            }
            if (gone[i])
                replace_listener(t, i);
            else if (rose[i])
                suspect(t, i);
        }
        if (t->replaced != replaced)
            fast_until = sl_now_ns() + SL_WATCH_FAST_MS * 1000000ull;
        close_retired(t);
        uint64_t now = sl_now_ns();
        if (now >= next_fds) {
            next_fds = now + SL_WATCH_FDS_MS * 1000000ull;
            pressure = fd_pressure(t);
        }
        if (now >= next_deadlines) {
            next_deadlines = now + SL_WATCH_DEADLINE_MS * 1000000ull;
            uint64_t idle_ms = pressure ? SL_PRESSURE_IDLE_MS : t->cfg->idle_timeout_ms;
            if (idle_ms)
                enforce_deadlines(t, idle_ms * 1000000ull);
        }
        pthread_mutex_lock(&t->watch_lock);
    }
    pthread_mutex_unlock(&t->watch_lock);
    return NULL;
}

void sl_listen_watch_start(sl_transport *t)
{
    /* other_seen starts at zero, as the listeners' counters did: one
     * stopped before the watchdog runs is still noticed */
    nng_stat *st;
    if (nng_stats_get(&st) != 0)
        sl_log_warn("net.watch",
                    "NNG %s keeps no statistics: a listener it stops (nanomsg/nng#1518) will "
                    "not be noticed",
                    nng_version());
    else
        nng_stats_free(st);
    if (sl_cond_init_monotonic(&t->watch_cond) != 0)
        goto out_fail;
    if (pthread_mutex_init(&t->watch_lock, NULL) != 0)
        goto out_cond;
    if (pthread_create(&t->watch_thread, NULL, watch_main, t) != 0)
        goto out_lock;
    t->watch_started = true;
    return;

out_lock:
    pthread_mutex_destroy(&t->watch_lock);
out_cond:
    pthread_cond_destroy(&t->watch_cond);
out_fail:
    sl_log_warn("net.watch", "cannot start the listener watchdog: a listener that NNG stops "
                             "(nanomsg/nng#1518) will not be replaced, and idle connections "
                             "are never closed");
}

void sl_listen_watch_stop(sl_transport *t)
{
    if (!t->watch_started)
        return;
    pthread_mutex_lock(&t->watch_lock);
    t->watch_stop = true;
    pthread_cond_signal(&t->watch_cond);
    pthread_mutex_unlock(&t->watch_lock);
    (void) pthread_join(t->watch_thread, NULL);
    pthread_cond_destroy(&t->watch_cond);
    pthread_mutex_destroy(&t->watch_lock);
    t->watch_started = false;
}
