#include "harness.h"
#include "sl_test.h"

#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *program(const char *env)
{
    const char *p = getenv(env);
    if (!p || !*p)
        fail_msg("environment variable %s (path of the program) is not set", env);
    return p;
}

pid_t sl_test_spawn(const char *env_program, const char *const *args)
{
    const char *path = program(env_program);
    const char *argv[32] = {path};
    int n = 1;
    for (; args && args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        /* a test that dies must not leave a server behind holding the test
         * runner's output pipe open */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(path, (char *const *) argv);
        fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    return pid;
}

int sl_test_wait(pid_t pid, int timeout_s)
{
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int i = 0; i < timeout_s * 100; i++) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        nanosleep(&nap, NULL);
    }
    kill(pid, SIGKILL);
    (void) waitpid(pid, NULL, 0);
    return -1;
}

void sl_test_server_start(sl_test_server *srv, const char *const *extra)
{
    /* SL_TEST_RUNDIR: a parent other than /tmp (a test that needs one only
     * root can write, as /run); SL_TEST_RUNDIR_OWNER=UID:GID: the socket's
     * folder belongs to that user (salusd --user) */
    const char *base = getenv("SL_TEST_RUNDIR"), *owner = getenv("SL_TEST_RUNDIR_OWNER");
    snprintf(srv->dir, sizeof srv->dir, "%s/salus-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(srv->dir))
        fail_msg("mkdtemp: %s", strerror(errno));
    unsigned uid, gid;
    if (owner && sscanf(owner, "%u:%u", &uid, &gid) == 2 &&
        chown(srv->dir, (uid_t) uid, (gid_t) gid) != 0)
        fail_msg("chown %s: %s", srv->dir, strerror(errno));
    snprintf(srv->url, sizeof srv->url, "ipc://%s/salus.sock", srv->dir);
    const char *args[24] = {"--listen", srv->url, "--memory-limit", "256M", "--log-level", "warn"};
    int n = 6, k = 0;
    /* salusd refuses root unasked; a test that drops privileges says --user */
    bool own_user = false;
    for (int i = 0; extra && extra[i]; i++)
        own_user |= strcmp(extra[i], "--user") == 0 || strcmp(extra[i], "--allow-root") == 0;
    if (geteuid() == 0 && !own_user)
        args[n++] = "--allow-root";
    for (; extra && extra[k] && n < 23; n++, k++)
        args[n] = extra[k];
    args[n] = NULL;
    srv->pid = sl_test_spawn("SALUSD", args);
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int i = 0; i < 500; i++) {
        salus_client *c;
        if (salus_connect(srv->url, &c) == SALUS_OK) {
            salus_disconnect(c);
            return;
        }
        if (waitpid(srv->pid, NULL, WNOHANG) == srv->pid)
            fail_msg("salusd exited during start-up");
        nanosleep(&nap, NULL);
    }
    kill(srv->pid, SIGKILL);
    fail_msg("salusd did not answer within 10 s");
}

int sl_test_server_stop(sl_test_server *srv)
{
    kill(srv->pid, SIGTERM);
    int st = sl_test_wait(srv->pid, 10);
    char path[400];
    snprintf(path, sizeof path, "%s/salus.sock", srv->dir);
    (void) unlink(path);
    (void) rmdir(srv->dir);
    return st;
}

salus_client *sl_test_connect(const sl_test_server *srv)
{
    salus_client *c = NULL;
    int rc = salus_connect(srv->url, &c);
    if (rc != SALUS_OK)
        fail_msg("connect %s: %s", srv->url, salus_strerror(rc));
    return c;
}

sl_test_server *sl_test_group;

int sl_test_group_start(void **state)
{
    (void) state;
    sl_test_server_start(sl_test_group, NULL);
    return 0;
}

int sl_test_group_stop(void **state)
{
    (void) state;
    int st = sl_test_server_stop(sl_test_group);
    if (st != 0)
        fprintf(stderr, "salusd exited with %d\n", st);
    return st == 0 ? 0 : -1;
}
