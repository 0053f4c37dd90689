/* Stalled messages on connections that hold a session: another tenant
 * opens CONNECTIONS connections, opens a session on each (so that no idle
 * timeout may drop it), then announces a large request on each, sends most
 * of it and stalls. NNG allocates the announced size as the header arrives
 * and holds it until the rest comes, and nothing tells such a connection
 * from an idle one. salusd runs under a memory limit of LIMIT (a real
 * memory cgroup where one can be made here); the attack holds when salusd
 * lives, serves the victim and a new client throughout, and its memory
 * never rose more than its per-user receiving budget (an eighth of the
 * limit) plus slack above the baseline. */
#include "attack.h"
#include "salus.pb-c.h"
#include "sl_test.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CONNECTIONS 24
#define ANNOUNCED (60ull << 20) /* within the default --max-message (64M) */
#define SENT (50ull << 20)
#define LIMIT (1ull << 30)
#define BUDGET (LIMIT / 8) /* salusd's default --max-receiving-per-user */
#define SLACK (64ull << 20)

static bool send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t) n;
    }
    return true;
}

static bool recv_all(int fd, void *buf, size_t len, int timeout_ms)
{
    uint8_t *p = buf;
    while (len) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, timeout_ms) <= 0)
            return false;
        ssize_t n = recv(fd, p, len, 0);
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t) n;
    }
    return true;
}

/* ipc:// framing: a type byte, then the length big-endian. */
static void frame(uint8_t head[9], uint64_t len)
{
    head[0] = 1;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t) (len >> (56 - 8 * i));
}

/* A REQ peer by hand on ipc:// path: the SP handshake, then OpenSession.
 * Returns the connection (-1: refused or failed) and whether a session was
 * granted in *session. */
static int peer_with_session(const char *path, bool *session)
{
    static const uint8_t req_header[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    uint8_t got[8];
    *session = false;
    if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        !send_all(fd, req_header, sizeof req_header) || !recv_all(fd, got, 8, 5000)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__OpenSession open = SALUS__OPEN_SESSION__INIT;
    req.seq = 1;
    req.body_case = SALUS__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &open;
    uint8_t msg[9 + 4 + 64];
    size_t len = salus__request__pack(&req, msg + 13);
    frame(msg, 4 + len);
    msg[9] = 0x80; /* the REQ request id, high bit set */
    msg[10] = msg[11] = 0;
    msg[12] = 1;
    uint8_t head[9], body[512];
    if (!send_all(fd, msg, 13 + len) || !recv_all(fd, head, 9, 10000)) {
        close(fd);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n = n << 8 | head[1 + i];
    if (n < 4 || n > sizeof body || !recv_all(fd, body, n, 10000)) {
        close(fd);
        return -1;
    }
    Salus__Reply *rep = salus__reply__unpack(NULL, n - 4, body + 4);
    *session = rep && rep->code == SALUS__CODE__OK;
    if (rep)
        salus__reply__free_unpacked(rep, NULL);
    return fd;
}

/* Announces ANNOUNCED bytes on fd and sends SENT of them; false when
 * salusd hung up meanwhile. */
static bool stall_on(int fd)
{
    uint8_t head[9];
    frame(head, ANNOUNCED);
    if (!send_all(fd, head, sizeof head))
        return false;
    static uint8_t chunk[1 << 20];
    memset(chunk, 0x5a, sizeof chunk);
    for (uint64_t sent = 0; sent < SENT; sent += sizeof chunk)
        if (!send_all(fd, chunk, sizeof chunk))
            return false;
    return true;
}

/* The tenant: PATH READY_FD GO_FD. Writes to READY_FD one byte, how many
 * connections stalled with a session, once all are stalled (or refused);
 * holds them until GO_FD is written. */
static int tenant(const char *path, int ready, int go)
{
    int fds[CONNECTIONS], stalled = 0, sessions = 0, refused = 0;
    for (int i = 0; i < CONNECTIONS; i++) {
        bool session;
        fds[i] = peer_with_session(path, &session);
        sessions += session;
        if (fds[i] < 0 || !session || !stall_on(fds[i]))
            refused++;
        else
            stalled++;
    }
    printf("  tenant: %d connections: %d sessions, %d stalled a %llu MiB message with %llu MiB "
           "sent, %d refused or dropped\n",
           CONNECTIONS, sessions, stalled, ANNOUNCED >> 20, SENT >> 20, refused);
    fflush(stdout);
    uint8_t n = (uint8_t) stalled;
    (void) !write(ready, &n, 1);
    char b;
    (void) !read(go, &b, 1);
    for (int i = 0; i < CONNECTIONS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return 0;
}

static void stalled_sessions(void **state)
{
    (void) state;
    if (!sl_attack_may_run("stalled-sessions", sl_attack_cross_user(),
                           "needs root (the tenant must be another user than salusd)"))
        return;
    sl_attack_cgroup cg;
    sl_attack_cgroup_enter(&cg, LIMIT);
    sl_attack a;
    sl_attack_begin(&a, "stalled-sessions", NULL);
    sl_attack_cgroup_started(&cg);
    a.rss_peak_bound = BUDGET + SLACK;
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    char rfd[16], gfd[16];
    snprintf(rfd, sizeof rfd, "%d", ready[1]);
    snprintf(gfd, sizeof gfd, "%d", go[0]);
    pid_t pid =
        sl_attack_spawn_tenant((const char *const[]){sl_attack_socket_path(&a), rfd, gfd, NULL});
    close(ready[1]);
    close(go[0]);
    uint8_t stalled = 0;
    bool attacking = read(ready[0], &stalled, 1) == 1;
    /* held a while: a bound that only holds for a moment is none */
    sl_ts_sleep_ms(3000);
    salus_client *c = NULL;
    bool served = salus_connect(a.srv.url, &c) == SALUS_OK;
    salus_disconnect(c);
    (void) !write(go[1], "g", 1);
    int rc = sl_test_wait(pid, 60);
    close(ready[0]);
    close(go[1]);
    char detail[256];
    snprintf(detail, sizeof detail,
             "%d connections each opening a session, then stalling a %llu MiB message (%llu MiB "
             "sent): %d stalled; salusd under %llu MiB (%s), RSS bound %llu MiB above baseline",
             CONNECTIONS, ANNOUNCED >> 20, SENT >> 20, stalled, LIMIT >> 20, cg.version,
             (BUDGET + SLACK) >> 20);
    sl_attack_expect(&a, attacking && rc == 0, "the tenant could not set the attack up");
    sl_attack_expect(&a, served, "a new client was not served during the attack");
    bool held = sl_attack_end(&a, detail);
    int kills = sl_attack_cgroup_remove(&cg);
    if (kills)
        printf("  the OOM killer acted %d times in salusd's cgroup\n", kills);
    assert_true(held);
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv))
        return argc == 5 ? tenant(argv[2], atoi(argv[3]), atoi(argv[4])) : 126;
    const struct CMUnitTest tests[] = {cmocka_unit_test(stalled_sessions)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
