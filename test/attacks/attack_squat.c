/* The socket path: another user takes it first, answers salus clients
 * itself, or races salusd's listener replacement.
 *  - salusd refuses to put its socket where another user can write (a
 *    world-writable directory with the attacker's socket already in it), and
 *    refuses to start without a private default place;
 *  - a client refuses a server of another uid (an impostor listening in its
 *    own directory) before sending it anything, unless SALUS_SERVER_UID
 *    names that uid;
 *  - while the listener is replaced, the path never disappears (rename, no
 *    unlink window) and an attacker's bind loop on it never succeeds. */
#include "attack.h"
#include "sl_test.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int listen_at(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* ---- a world-writable directory, the attacker's socket already there ---- */

static int squat(void *arg)
{
    int fd = listen_at(arg);
    if (fd < 0)
        return 2;
    (void) chmod(arg, 0777);
    /* holds it while salusd tries (at most 10 s), then goes */
    struct timespec hold = {12, 0};
    nanosleep(&hold, NULL);
    close(fd);
    return 0;
}

static void shared_directory(void **state)
{
    (void) state;
    const char *name = "socket-squat-shared-dir";
    sl_attack_tried(name);
    char dir[] = "/tmp/salus-squat-XXXXXX", path[128], url[160];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 01777), 0); /* like /tmp */
    snprintf(path, sizeof path, "%s/salus.sock", dir);
    snprintf(url, sizeof url, "ipc://%s", path);
    pid_t squatter = fork();
    if (squatter == 0)
        _exit(sl_attack_as_tenant(squat, path, 60) & 0xff);
    for (int i = 0; i < 200 && access(path, F_OK) != 0; i++) {
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    struct stat before;
    assert_int_equal(lstat(path, &before), 0);
    pid_t srv = sl_test_spawn("SALUSD",
                              (const char *const[]){"--listen", url, "--log-level", "error", NULL});
    int st = sl_test_wait(srv, 10);
    struct stat after;
    bool untouched = lstat(path, &after) == 0 && after.st_ino == before.st_ino;
    kill(squatter, SIGKILL);
    (void) waitpid(squatter, NULL, 0);
    (void) unlink(path);
    (void) rmdir(dir);
    const char *why = st == 0 || st == -1 ? "salusd started in a directory others can write"
                      : !untouched        ? "salusd replaced the other user's socket"
                                          : NULL;
    char detail[96];
    snprintf(detail, sizeof detail, "salusd exited %d without touching the squatter's socket", st);
    assert_true(sl_attack_verdict(name, why, detail));
}

/* ---- no private default place ---- */

static int start_default(void *arg)
{
    (void) arg;
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("SALUS_URL");
    pid_t srv = sl_test_spawn("SALUSD", (const char *const[]){"--log-level", "error", NULL});
    return sl_test_wait(srv, 10);
}

static void no_private_default(void **state)
{
    (void) state;
    const char *name = "socket-squat-default-path";
    if (!sl_attack_may_run(name, sl_attack_cross_user(),
                           "needs root to run salusd as another user"))
        return;
    sl_attack_tried(name);
    /* as nobody, without XDG_RUNTIME_DIR: the old default was /tmp */
    int st = sl_attack_as_tenant(start_default, NULL, 20);
    char detail[64];
    snprintf(detail, sizeof detail, "salusd as uid %d exited %d", SL_ATTACK_UID, st);
    assert_true(sl_attack_verdict(
        name, st == 2 ? NULL : "salusd started without a private place for its socket", detail));
}

/* ---- an impostor server ---- */

struct impostor {
    char path[128];
    int ready[2];  /* the impostor says it listens */
    int report[2]; /* how many request bytes it received */
};

static int impostor(void *arg)
{
    struct impostor *imp = arg;
    static const uint8_t rep_header[8] = {0, 'S', 'P', 0, 0, 0x31, 0, 0};
    int lfd = listen_at(imp->path);
    if (lfd < 0)
        return 2;
    (void) chmod(imp->path, 0777);
    (void) !write(imp->ready[1], "r", 1);
    long got = 0;
    uint64_t end = sl_ts_now_ms() + 8000;
    while (sl_ts_now_ms() < end) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        uint8_t buf[4096];
        ssize_t n;
        (void) !write(fd, rep_header, sizeof rep_header);
        /* the client's SP header, then whatever it sends: a request */
        uint64_t until = sl_ts_now_ms() + 1000;
        while (sl_ts_now_ms() < until) {
            struct pollfd q = {.fd = fd, .events = POLLIN};
            if (poll(&q, 1, 50) <= 0)
                continue;
            if ((n = recv(fd, buf, sizeof buf, 0)) <= 0)
                break;
            got += n;
        }
        close(fd);
    }
    got = got > 8 ? got - 8 : 0; /* one SP header per connection is fine */
    (void) !write(imp->report[1], &got, sizeof got);
    return 0;
}

static void impostor_server(void **state)
{
    (void) state;
    const char *name = "socket-squat-impostor";
    if (!sl_attack_may_run(name, sl_attack_cross_user(),
                           "needs root to run the impostor as another user"))
        return;
    sl_attack_tried(name);
    char dir[] = "/tmp/salus-impostor-XXXXXX", url[160];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chown(dir, SL_ATTACK_UID, SL_ATTACK_UID), 0);
    struct impostor imp;
    snprintf(imp.path, sizeof imp.path, "%s/salus.sock", dir);
    snprintf(url, sizeof url, "ipc://%s", imp.path);
    assert_int_equal(pipe(imp.ready), 0);
    assert_int_equal(pipe(imp.report), 0);
    pid_t pid = fork();
    if (pid == 0)
        _exit(sl_attack_as_tenant(impostor, &imp, 30) & 0xff);
    char c;
    assert_int_equal(read(imp.ready[0], &c, 1), 1);
    salus_client *cl = NULL;
    int refused = salus_connect(url, &cl);
    char why_text[512];
    snprintf(why_text, sizeof why_text, "%s", salus_last_error(NULL));
    salus_disconnect(cl);
    /* the uid named in SALUS_SERVER_UID is trusted: then only the missing
     * answer stops the client */
    char uid[16];
    snprintf(uid, sizeof uid, "%d", SL_ATTACK_UID);
    setenv("SALUS_SERVER_UID", uid, 1);
    setenv("SALUS_CONNECT_TIMEOUT_MS", "300", 1);
    cl = NULL;
    int trusted = salus_connect(url, &cl);
    salus_disconnect(cl);
    unsetenv("SALUS_SERVER_UID");
    unsetenv("SALUS_CONNECT_TIMEOUT_MS");
    long got = -1;
    assert_int_equal(read(imp.report[0], &got, sizeof got), (ssize_t) sizeof got);
    (void) sl_test_wait(pid, 20);
    (void) unlink(imp.path);
    (void) rmdir(dir);
    const char *why = refused != SALUS_EPERM   ? "the client accepted a server of another uid"
                      : trusted == SALUS_EPERM ? "SALUS_SERVER_UID did not make the uid trusted"
                                               : NULL;
    char detail[700];
    snprintf(detail, sizeof detail,
             "client: %s (%s); with SALUS_SERVER_UID: %s; request bytes "
             "the impostor got: %ld (from the trusting client only)",
             salus_strerror(refused), why_text, salus_strerror(trusted), got);
    assert_true(sl_attack_verdict(name, why, detail));
}

/* ---- racing the replacement ---- */

static volatile int binds_won;

static int bind_loop(void *arg)
{
    const char *path = arg;
    int won = 0;
    uint64_t end = sl_ts_now_ms() + 3000;
    while (sl_ts_now_ms() < end) {
        (void) unlink(path);
        int fd = listen_at(path);
        if (fd >= 0) {
            won++;
            close(fd);
        }
    }
    return won > 100 ? 100 : won;
}

static void replacement_race(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "socket-squat-rebind-race", NULL);
    const char *path = sl_attack_socket_path(&a);
    pid_t pid = fork();
    if (pid == 0)
        _exit(sl_attack_as_tenant(bind_loop, (void *) path, 20) & 0xff);
    /* deafen the listener over and over (as root: the attacker's loop runs
     * meanwhile) and watch the path: it must never be missing */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int missing = 0, deafened = 0, foreign = 0;
    uint64_t end = sl_ts_now_ms() + 2500;
    while (sl_ts_now_ms() < end) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0)
            deafened++;
        if (fd >= 0)
            close(fd);
        for (int i = 0; i < 50; i++) {
            struct stat st;
            if (lstat(path, &st) != 0)
                missing++;
            else if (st.st_uid != 0 && sl_attack_cross_user())
                foreign++;
        }
    }
    int st = 0;
    (void) waitpid(pid, &st, 0);
    int won = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char detail[200];
    snprintf(
        detail, sizeof detail,
        "%d hang-ups forcing replacements; path missing %d times, another user's %d times; the "
        "attacker's bind loop won %d times",
        deafened, missing, foreign, won);
    bool held = sl_attack_end(&a, detail);
    assert_int_equal(missing, 0);
    assert_int_equal(foreign, 0);
    assert_int_equal(won, 0);
    assert_true(held);
}

SL_TEST_MAIN("attack squat", NULL, NULL, cmocka_unit_test(shared_directory),
             cmocka_unit_test(no_private_default), cmocka_unit_test(impostor_server),
             cmocka_unit_test(replacement_race))
