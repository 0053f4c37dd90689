/* Lingering sockets through the descriptor socket: another tenant hands
 * salusd hundreds of TCP sockets, each lingering LINGER_S seconds on
 * unsent data that its peer never reads, and lets go of its own copies, so
 * that salusd's close of each is the last and would wait out the linger.
 * They are refused (not memfds); the attack holds when
 *   - a good segment handed over right after goes through within
 *     HANDOVER_BOUND_MS (a closer that falls behind must never make the
 *     descriptor socket's thread close them itself and block);
 *   - salusd, stopped while the tenant still keeps them lingering, exits
 *     within the frame's 10 s (its exit never waits on a tenant's close);
 *   - the victim trains on and salusd's descriptors come back. */
#include "attack.h"
#include "shm_stage.h"
#include "sl_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define N_SOCKETS 506 /* two full SCM_RIGHTS messages */
#define PER_MESSAGE 253
#define LINGER_S 120
#define HANDOVER_BOUND_MS 1000

/* A TCP socket connected to listener lst (never accepted, never read),
 * its buffers full and lingering LINGER_S seconds; -1 on failure. */
static int lingering_socket(const struct sockaddr_in *sa)
{
    int small = 4096, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    if (connect(fd, (const struct sockaddr *) sa, sizeof *sa) != 0) {
        close(fd);
        return -1;
    }
    (void) fcntl(fd, F_SETFL, O_NONBLOCK);
    static char junk[1 << 16];
    while (send(fd, junk, sizeof junk, MSG_NOSIGNAL) > 0)
        ;
    (void) fcntl(fd, F_SETFL, 0);
    struct linger lg = {1, LINGER_S};
    (void) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    return fd;
}

/* Sends n descriptors in one StageShm message over the descriptor socket
 * of ipc:// path sock and closes them; waits for the answer. 0 when it
 * came. */
static int send_fds(const char *sock, uint64_t id, uint64_t token, const int *fds, int n)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct timeval tv = {30, 0};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s.fd", sock);
    (void) setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (s < 0 || connect(s, (struct sockaddr *) &sa, sizeof sa) != 0)
        return -1;
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__StageShm m = SALUS__STAGE_SHM__INIT;
    m.size = 4096;
    req.seq = 1;
    req.session_id = id;
    req.token = token;
    req.body_case = SALUS__REQUEST__BODY_STAGE_SHM;
    req.stage_shm = &m;
    uint8_t buf[256], answer[512];
    size_t len = salus__request__pack(&req, buf);
    union {
        struct cmsghdr align;
        char bytes[CMSG_SPACE(PER_MESSAGE * sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct iovec iov = {buf, len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control.bytes,
                        .msg_controllen = CMSG_SPACE((size_t) n * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN((size_t) n * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, (size_t) n * sizeof(int));
    bool sent = sendmsg(s, &mh, MSG_NOSIGNAL) == (ssize_t) len;
    for (int i = 0; i < n; i++)
        close(fds[i]); /* salusd's copies are the last */
    int rc = sent && recv(s, answer, sizeof answer, 0) > 0 ? 0 : -1;
    close(s);
    return rc;
}

/* The tenant: URL READY_FD GO_FD. Hands over N_SOCKETS lingering sockets,
 * then a good segment, timed; writes 'y' (it went through within the
 * bound) or 'n' to READY_FD and keeps the sockets lingering (its listener
 * open) until GO_FD is written. Exit 0: 'y'; 1: 'n'; others: the attack
 * could not be set up. */
static int tenant(const char *url, int ready, int go)
{
    const char *sock = url + strlen("ipc://");
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < N_SOCKETS + 64) {
        rl.rlim_cur = rl.rlim_max;
        (void) setrlimit(RLIMIT_NOFILE, &rl);
    }
    salus_client *c;
    salus_session *s;
    if (salus_connect(url, &c) != SALUS_OK || salus_session_open(c, NULL, &s) != SALUS_OK)
        return 100;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int small = 4096, lst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    (void) setsockopt(lst, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    if (lst < 0 || bind(lst, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        listen(lst, N_SOCKETS + 16) != 0 || getsockname(lst, (struct sockaddr *) &sa, &len) != 0)
        return 101;
    static int fds[N_SOCKETS];
    for (int i = 0; i < N_SOCKETS; i++)
        if ((fds[i] = lingering_socket(&sa)) < 0)
            return 102;
    uint64_t t0 = sl_ts_now_ms();
    for (int i = 0; i < N_SOCKETS; i += PER_MESSAGE)
        if (send_fds(sock, s->id, s->token, fds + i, PER_MESSAGE) != 0)
            printf("  tenant: no answer to a message of %d lingering sockets\n", PER_MESSAGE);
    printf("  tenant: %d lingering sockets handed over in %llu ms\n", N_SOCKETS,
           (unsigned long long) (sl_ts_now_ms() - t0));
    int fd = memfd_create("after-flood", MFD_ALLOW_SEALING | MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0 || fallocate(fd, 0, 0, 1 << 20) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
        return 103;
    char msg[300];
    uint64_t ticket = 0;
    t0 = sl_ts_now_ms();
    int rc = sl_test_stage_shm(sock, s->id, s->token, fd, 1 << 20, &ticket, msg, sizeof msg);
    uint64_t took = sl_ts_now_ms() - t0;
    printf("  tenant: a good segment right after: %s in %llu ms (%s)\n", salus_strerror(rc),
           (unsigned long long) took, msg);
    fflush(stdout);
    close(fd);
    /* the session goes; the sockets linger on as long as lst is open */
    (void) salus_session_close(s);
    salus_disconnect(c);
    bool ok = rc == SL_OK && took <= HANDOVER_BOUND_MS;
    (void) !write(ready, ok ? "y" : "n", 1);
    char b;
    (void) !read(go, &b, 1);
    close(lst);
    return ok ? 0 : 1;
}

static void lingering_flood(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "lingering-flood", NULL);
    int ready[2], go[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(go), 0);
    char rfd[16], gfd[16];
    snprintf(rfd, sizeof rfd, "%d", ready[1]);
    snprintf(gfd, sizeof gfd, "%d", go[0]);
    pid_t pid = sl_attack_spawn_tenant((const char *const[]){a.srv.url, rfd, gfd, NULL});
    close(ready[1]);
    close(go[0]);
    char b = 0;
    bool attacking = read(ready[0], &b, 1) == 1;
    char detail[200];
    snprintf(detail, sizeof detail,
             "%d TCP sockets lingering %d s on unsent data, handed over in %d messages", N_SOCKETS,
             LINGER_S, N_SOCKETS / PER_MESSAGE);
    sl_attack_expect(&a, attacking, "the tenant could not set the attack up");
    sl_attack_expect(&a, b == 'y', "a good segment right after the flood was held up or refused");
    /* stopped while the sockets still linger: the exit must not wait */
    uint64_t t0 = sl_ts_now_ms();
    bool held = sl_attack_end(&a, detail);
    uint64_t stop_ms = sl_ts_now_ms() - t0;
    (void) !write(go[1], "g", 1);
    int rc = sl_test_wait(pid, 30);
    close(ready[0]);
    close(go[1]);
    printf("  salusd checked and stopped in %llu ms; tenant exit %d\n",
           (unsigned long long) stop_ms, rc);
    assert_true(held);
    assert_int_equal(rc, 0);
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv))
        return argc == 5 ? tenant(argv[2], atoi(argv[3]), atoi(argv[4])) : 126;
    const struct CMUnitTest tests[] = {cmocka_unit_test(lingering_flood)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
