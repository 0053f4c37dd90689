/* Cluster job steps against a real salusd, without a cluster manager: the
 * test (root, an operator) registers a step for uid nobody, as the Slurm
 * plugin does, and a client running as nobody opens sessions for it.
 * Checks: the step's memory quota and priority hold, a session cannot
 * claim a step that is not registered or not its uid's, a tenant cannot
 * register or close steps, and CloseJob closes the step's sessions while
 * their connection stays open. A step of one shard whose quota is one
 * default lane (shard_memory = memory limit / 8, as plugstack.conf
 * advises) runs a session that declares nothing. Needs root (SKIP
 * otherwise). */
#include "salusd_ctl.h"
#include "sl_test.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOBODY 65534
#define MIB (1ull << 20)

/* Reads one int the child wrote (10 s at most). */
static int read_code(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int v = 0;
    if (poll(&p, 1, 10000) != 1 || read(fd, &v, sizeof v) != (ssize_t) sizeof v)
        fail_msg("the nobody client did not answer");
    return v;
}

static void put(int fd, int v)
{
    if (write(fd, &v, sizeof v) != (ssize_t) sizeof v)
        _exit(3);
}

/* The client as nobody: reports a code for each step of the script, waits
 * for the parent's go (one byte) before the last one. */
static void nobody_client(const char *url, int out, int go)
{
    if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
        _exit(3);
    salus_client *c;
    if (salus_connect(url, &c))
        _exit(4);
    salus_session *a = NULL, *b = NULL, *x = NULL;
    salus_session_opts o = {
        .name = "in-job", .persistent_bytes = 3 * MIB, .ephemeral_bytes = 1 * MIB};
    setenv("SALUS_JOB", "77.0", 1);
    put(out, salus_session_open(c, &o, &a)); /* fits the 4 MiB quota */
    o.persistent_bytes = 1 * MIB;
    put(out, salus_session_open(c, &o, &b)); /* beyond it */
    setenv("SALUS_JOB", "78.0", 1);
    put(out, salus_session_open(c, &o, &x)); /* not registered */
    setenv("SALUS_JOB", "79.0", 1);
    put(out, salus_session_open(c, &o, &x)); /* another uid's */
    setenv("SALUS_JOB", "77.x", 1);
    put(out, salus_session_open(c, &o, &x));                /* malformed */
    put(out, salus_job_register(c, 80, 0, NOBODY, 0, 100)); /* not an operator */
    put(out, salus_job_close(c, 77, 0, 0, NULL));
    char byte;
    if (read(go, &byte, 1) != 1)
        _exit(5);
    uint64_t t;
    put(out, a ? salus_tensor_create(a, 0, 1, (int64_t[]){4}, NULL, &t) : -1);
    (void) salus_session_close(a);
    salus_disconnect(c);
    _exit(0);
}

static void step_quota_priority_and_close(void **state)
{
    (void) state;
    sl_test_server srv;
    sl_ctl_prepare(&srv);
    assert_int_equal(chmod(srv.dir, 0755), 0); /* nobody passes through to the socket */
    /* the child first: NNG refuses to run in a child forked after it started */
    int to_child[2], from_child[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(from_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(to_child[1]);
        close(from_child[0]);
        /* waits for the registration first */
        char byte;
        if (read(to_child[0], &byte, 1) != 1)
            _exit(5);
        nobody_client(srv.url, from_child[1], to_child[0]);
    }
    close(to_child[0]);
    close(from_child[1]);
    sl_ctl_start(&srv, (const char *[]){"--ipc-mode", "0666", "--memory-limit", "256M", NULL});
    salus_client *op = sl_test_connect(&srv);
    assert_sl_ok(salus_job_register(op, 77, 0, NOBODY, 4 * MIB, 3));
    assert_sl_ok(salus_job_register(op, 79, 0, 1, 4 * MIB, 3));
    assert_sl_err(salus_job_register(op, 79, 0, NOBODY, 0, 0), SL_EINVAL); /* uid 1's step */
    assert_int_equal(write(to_child[1], "g", 1), 1);

    assert_sl_ok(read_code(from_child[0]));
    assert_sl_err(read_code(from_child[0]), SL_EEXHAUSTED);
    assert_sl_err(read_code(from_child[0]), SL_EPERM);
    assert_sl_err(read_code(from_child[0]), SL_EPERM);
    assert_sl_err(read_code(from_child[0]), SL_EINVAL);
    assert_sl_err(read_code(from_child[0]), SL_EPERM);
    assert_sl_err(read_code(from_child[0]), SL_EPERM);

    char *text;
    assert_sl_ok(salus_status_text(op, &text));
    char *line = strstr(text, "in-job");
    assert_non_null(line);
    int lane, prio;
    assert_int_equal(sscanf(line, "in-job %d %d", &lane, &prio), 2);
    assert_int_equal(prio, 3); /* the step's priority, by default */
    assert_non_null(strstr(line, "job 77.0"));
    salus_free(text);

    uint32_t closed = 0;
    assert_sl_ok(salus_job_close(op, 77, 0, 1, &closed));
    assert_int_equal(closed, 1);
    assert_sl_ok(salus_job_close(op, 77, 0, 1, &closed)); /* gone already: no error */
    assert_int_equal(closed, 0);
    assert_int_equal(write(to_child[1], "g", 1), 1);
    assert_sl_err(read_code(from_child[0]), SL_ESESSIONLOST);
    assert_int_equal(sl_test_wait(pid, 10), 0);
    assert_true(sl_ctl_log_has(&srv, "its job ended; closing it"));
    salus_disconnect(op);
    close(to_child[1]);
    close(from_child[0]);
    sl_ctl_finish(&srv);
}

/* A one-shard step's client as nobody: a session that declares nothing
 * trains a small model, then a second session of the step is refused. */
static void one_shard_client(const char *url, int out)
{
    if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
        _exit(3);
    salus_client *c;
    if (salus_connect(url, &c))
        _exit(4);
    setenv("SALUS_JOB", "81.0", 1);
    salus_session *s = NULL, *t = NULL;
    salus_session_opts o = {.name = "one-shard"};
    put(out, salus_session_open(c, &o, &s));
    enum { B = 8, D = 16, C = 4 };
    salus_model *m = salus_model_new(1, (const int64_t[]){D});
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    int rc = !s || !m || salus_model_dense(m, 32) || salus_model_relu(m) || salus_model_dense(m, C)
                 ? -1
                 : salus_model_compile(m, s, &sgd, B, B, 7);
    static float x[B * D];
    static int32_t y[B];
    for (int i = 0; i < B; i++)
        y[i] = i % C;
    for (int k = 0; k < 5 && rc == 0; k++)
        rc = salus_model_train_step(m, x, y, NULL);
    put(out, rc);
    put(out, salus_session_open(c, &o, &t));
    const char *why = salus_last_error(c);
    /* the refusal names the step's quota and the remedy, not a salusd flag */
    put(out, strstr(why, "memory quota of job 81.0") && strstr(why, "srun --gres=shard:N") &&
                 !strstr(why, "--tenant-limits"));
    salus_model_free(m);
    (void) salus_session_close(s);
    salus_disconnect(c);
    _exit(0);
}

static void one_shard_step_runs(void **state)
{
    (void) state;
    sl_test_server srv;
    sl_ctl_prepare(&srv);
    assert_int_equal(chmod(srv.dir, 0755), 0);
    int go[2], from_child[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(from_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(go[1]);
        close(from_child[0]);
        char byte, fd[16];
        if (read(go[0], &byte, 1) != 1)
            _exit(5);
        /* a fresh process: NNG has run in this one (the test before) and
         * refuses to in a child forked after that */
        snprintf(fd, sizeof fd, "%d", from_child[1]);
        execl("/proc/self/exe", "test_jobs", "one-shard-client", srv.url, fd, (char *) NULL);
        _exit(6);
    }
    close(go[0]);
    close(from_child[1]);
    /* a default lane of 32 MiB, and a step of one 32 MiB shard */
    sl_ctl_start(&srv, (const char *[]){"--ipc-mode", "0666", "--memory-limit", "256M",
                                        "--lane-size", "32M", NULL});
    salus_client *op = sl_test_connect(&srv);
    assert_sl_ok(salus_job_register(op, 81, 0, NOBODY, 32 * MIB, 0));
    assert_int_equal(write(go[1], "g", 1), 1);
    assert_sl_ok(read_code(from_child[0]));                 /* opened */
    assert_sl_ok(read_code(from_child[0]));                 /* trained */
    assert_sl_err(read_code(from_child[0]), SL_EEXHAUSTED); /* a second session */
    assert_int_equal(read_code(from_child[0]), 1);          /* ...told why */
    assert_int_equal(sl_test_wait(pid, 10), 0);
    salus_disconnect(op);
    close(go[1]);
    close(from_child[0]);
    sl_ctl_finish(&srv);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "one-shard-client") == 0)
        one_shard_client(argv[2], atoi(argv[3]));
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: needs root (a client runs as nobody, the test as an operator)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(step_quota_priority_and_close),
        cmocka_unit_test(one_shard_step_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
