/* Partial messages: another tenant's connections each announce a large
 * request, send most of it and stall. NNG allocates the announced size as
 * the header arrives and holds it until the rest comes; salusd must drop
 * such connections after --idle-timeout (2 s here) and its memory must
 * come back. */
#include "attack.h"
#include "sl_test.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_PEERS 4
#define ANNOUNCED (120ull << 20) /* bytes each peer announces */
#define SENT (100ull << 20)      /* and sends before stalling */
#define DROP_BOUND_S 10          /* idle timeout 2 s, checked every 250 ms */

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

/* One REQ peer that announces ANNOUNCED bytes and sends SENT of them. */
static int stalled_peer(const char *path)
{
    static const uint8_t req_header[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    uint8_t got[8];
    if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        !send_all(fd, req_header, sizeof req_header) || recv(fd, got, 8, MSG_WAITALL) != 8)
        return -1;
    /* ipc:// framing: a type byte, then the length big-endian */
    uint8_t head[9] = {1};
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t) (ANNOUNCED >> (56 - 8 * i));
    if (!send_all(fd, head, sizeof head))
        return -1;
    static uint8_t chunk[1 << 20];
    memset(chunk, 0x5a, sizeof chunk);
    for (uint64_t sent = 0; sent < SENT; sent += sizeof chunk)
        if (!send_all(fd, chunk, sizeof chunk))
            return -1;
    return fd;
}

static int stall(void *arg)
{
    const char *path = arg;
    int fds[N_PEERS];
    for (int i = 0; i < N_PEERS; i++)
        if ((fds[i] = stalled_peer(path)) < 0)
            return 2;
    /* every peer must be cut off in time */
    uint64_t deadline = sl_ts_now_ms() + DROP_BOUND_S * 1000;
    int dropped = 0;
    for (int i = 0; i < N_PEERS; i++) {
        for (;;) {
            uint64_t now = sl_ts_now_ms();
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            if (now >= deadline || poll(&p, 1, (int) (deadline - now)) <= 0)
                break;
            char c;
            ssize_t n = recv(fds[i], &c, 1, MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                dropped++;
                break;
            }
        }
        close(fds[i]);
    }
    return dropped == N_PEERS ? 0 : 1;
}

static void partial_messages(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "partial-messages",
                    (const char *const[]){"--idle-timeout", "2", "--max-message", "256M", NULL});
    uint64_t t0 = sl_ts_now_ms(), peak = 0;
    pid_t pid = fork();
    if (pid == 0)
        _exit(sl_attack_as_tenant(stall, (void *) sl_attack_socket_path(&a), 60) & 0xff);
    int st = 0;
    pid_t done;
    while ((done = waitpid(pid, &st, WNOHANG)) == 0 && sl_ts_now_ms() - t0 < 60000) {
        uint64_t rss = sl_attack_rss(a.srv.pid);
        peak = rss > peak ? rss : peak;
        struct timespec nap = {0, 20 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    int rc = done == pid ? (WIFEXITED(st) ? WEXITSTATUS(st) : -1) : sl_test_wait(pid, 10);
    char detail[200];
    snprintf(detail, sizeof detail,
             "%d peers announced %llu MiB and sent %llu MiB each; salusd peaked at %llu MiB; "
             "%s within %d s",
             N_PEERS, ANNOUNCED >> 20, SENT >> 20, (unsigned long long) (peak >> 20),
             rc == 0 ? "all dropped" : "NOT all dropped", DROP_BOUND_S);
    bool held = sl_attack_end(&a, detail);
    assert_int_equal(rc, 0);
    assert_true(held);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(partial_messages)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
