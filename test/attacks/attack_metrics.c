/* The metrics endpoint as a way to take salusd's descriptors: another user
 * opens 1100 connections to --metrics-listen and keeps them idle, a few of
 * them sending a request's headers one byte a second (slowloris). salusd
 * runs under the common default RLIMIT_NOFILE of 1024.
 *   - while it lasts, root's scrape is answered and a new tenant opens a
 *     session;
 *   - salusd's descriptors never rise more than the endpoint's budget (64)
 *     above the baseline;
 *   - the slow requests are dropped (within the request deadline, 10 s);
 *   - afterwards descriptors and memory come back (the frame). */
#include "attack.h"
#include "sl_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define NAME "metrics-idle-flood"
#define CONNECTIONS 1100
#define SLOW 16
#define HOLD_S 15
#define SALUSD_NOFILE 1024
/* the endpoint's budget (64), the connections it refused whose descriptors
 * NNG's reaper has yet to close, the scrape, the new tenant: a fifth of the
 * limit, the rest is the tenants' */
#define FD_BOUND (SALUSD_NOFILE / 5)

static int tcp_connect(int port, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {.tv_sec = timeout_s};
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t) port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *) &sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* root's scrape: true when /metrics answers 200 with salusd's metrics. */
static bool scrape(int port)
{
    int fd = tcp_connect(port, 5);
    if (fd < 0)
        return false;
    static const char req[] = "GET /metrics HTTP/1.0\r\nConnection: close\r\n\r\n";
    static char buf[1 << 20];
    size_t n = 0;
    if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t) sizeof req - 1) {
        ssize_t k;
        while (n < sizeof buf - 1 && (k = recv(fd, buf + n, sizeof buf - 1 - n, 0)) > 0)
            n += (size_t) k;
    }
    close(fd);
    buf[n] = '\0';
    return strncmp(buf, "HTTP/1.", 7) == 0 && strstr(buf, " 200 ") &&
           strstr(buf, "salus_uptime_seconds");
}

struct flood {
    int port;
    int ready[2]; /* the attacker holds its connections */
};

/* The attacker (as nobody): returns how many of its slow requests salusd
 * still kept open at the end. */
static int flood(void *arg)
{
    struct flood *f = arg;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < CONNECTIONS + 64) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        (void) setrlimit(RLIMIT_NOFILE, &rl);
    }
    static int fds[CONNECTIONS];
    int open_n = 0;
    uint64_t give_up = sl_ts_now_ms() + 40000;
    for (int i = 0; i < CONNECTIONS && sl_ts_now_ms() < give_up; i++)
        if ((fds[open_n] = tcp_connect(f->port, 2)) >= 0)
            open_n++;
    /* the slow ones: headers a byte at a time, never finished */
    static const char start[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < SLOW && i < open_n; i++)
        (void) send(fds[i], start, sizeof start - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    printf("attacker: %d connections open, %d of them slow\n", open_n, SLOW);
    fflush(stdout);
    (void) !write(f->ready[1], "r", 1);
    bool dropped[SLOW] = {false};
    for (int s = 0; s < HOLD_S; s++) {
        sl_ts_sleep_ms(1000);
        for (int i = 0; i < SLOW && i < open_n; i++)
            if (!dropped[i] && send(fds[i], "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                errno != EAGAIN)
                dropped[i] = true;
    }
    int kept = 0;
    for (int i = 0; i < SLOW && i < open_n; i++) {
        char c;
        /* a dropped one reads end-of-file (or a reset) at once */
        if (!dropped[i] && recv(fds[i], &c, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN)
            kept++;
    }
    for (int i = 0; i < open_n; i++)
        close(fds[i]);
    return kept;
}

struct flood_run {
    struct flood *f;
    int status;
};

static void *flood_thread(void *arg)
{
    struct flood_run *r = arg;
    r->status = sl_attack_as_tenant(flood, r->f, 120);
    return NULL;
}

/* A new tenant opens a session while the flood lasts. */
static bool new_tenant(const sl_attack *a)
{
    salus_client *c = NULL;
    salus_session *s = NULL;
    bool ok = salus_connect(a->srv.url, &c) == SALUS_OK &&
              salus_session_open(c, &(salus_session_opts){.name = "late"}, &s) == SALUS_OK;
    if (s)
        (void) salus_session_close(s);
    salus_disconnect(c);
    return ok;
}

static void metrics_idle_flood(void **state)
{
    (void) state;
    if (!sl_attack_may_run(NAME, sl_attack_cross_user(),
                           "needs root: the flood must come from another user than the scrape"))
        return;
    /* salusd inherits the limit most hosts give it */
    struct rlimit rl, saved;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    rl = saved;
    if (rl.rlim_max > SALUSD_NOFILE)
        rl.rlim_cur = SALUSD_NOFILE;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int port = sl_ts_free_port();
    assert_true(port > 0);
    char port_arg[16];
    snprintf(port_arg, sizeof port_arg, "%d", port);
    sl_attack a;
    sl_attack_begin(&a, NAME, (const char *const[]){"--metrics-listen", port_arg, NULL});
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    sl_attack_expect(&a, scrape(port), "no scrape before the attack");

    struct flood f = {.port = port};
    assert_int_equal(pipe(f.ready), 0);
    struct flood_run run = {.f = &f, .status = -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flood_thread, &run), 0);
    char c;
    bool ready = read(f.ready[0], &c, 1) == 1;
    /* while it holds them: the peak of salusd's descriptors, a scrape, a
     * new tenant */
    int peak = 0;
    bool scraped = false, tenant = false;
    uint64_t end = sl_ts_now_ms() + (HOLD_S - 2) * 1000;
    for (int i = 0; ready && sl_ts_now_ms() < end; i++) {
        int fds = sl_attack_fds(a.srv.pid);
        if (fds > peak)
            peak = fds;
        if (i == 20)
            scraped = scrape(port);
        if (i == 30)
            tenant = new_tenant(&a);
        sl_ts_sleep_ms(100);
    }
    pthread_join(t, NULL);
    close(f.ready[0]);
    close(f.ready[1]);
    char why[160];
    snprintf(why, sizeof why, "salusd held %d descriptors during the flood (baseline %d, bound %d)",
             peak, a.fds0, a.fds0 + FD_BOUND);
    sl_attack_expect(&a, ready, "the attacker could not open its connections");
    sl_attack_expect(&a, peak <= a.fds0 + FD_BOUND, why);
    sl_attack_expect(&a, scraped, "root's scrape failed during the flood");
    sl_attack_expect(&a, tenant, "a new tenant could not open a session during the flood");
    snprintf(why, sizeof why, "%d slow requests were still open after %d s", run.status, HOLD_S);
    sl_attack_expect(&a, run.status == 0, why);
    char detail[160];
    snprintf(detail, sizeof detail,
             "%d idle connections (%d slow) from uid %d; salusd peaked at %d descriptors",
             CONNECTIONS, SLOW, SL_ATTACK_UID, peak);
    assert_true(sl_attack_end(&a, detail));
}

SL_TEST_MAIN("attack metrics", NULL, NULL, cmocka_unit_test(metrics_idle_flood))
