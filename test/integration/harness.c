#include "harness.h"
#include "sl_test.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *sl_test_program(const char *env)
{
    const char *p = getenv(env);
    if (!p || !*p)
        fail_msg("environment variable %s (path of the program) is not set", env);
    return p;
}

pid_t sl_test_spawn(const char *env_program, const char *const *args)
{
    return sl_test_exec(sl_test_program(env_program), NULL, args);
}

pid_t sl_test_exec(const char *path, const char *first, const char *const *args)
{
    const char *argv[32] = {path};
    int n = 1;
    if (first)
        argv[n++] = first;
    for (int k = 0; args && args[k] && n < 31; k++)
        argv[n++] = args[k];
    argv[n] = NULL;
    pid_t pid;
    if (sl_ts_spawn(argv, NULL, &pid) != SL_OK)
        fail_msg("fork: %s", strerror(errno));
    return pid;
}

void sl_test_spawn_mlp_pair(const sl_test_server *srv, const char *steps, pid_t *a, pid_t *b)
{
    const char *args_a[] = {"--url", srv->url,  "--name", "a",       "--seed",
                            "1",     "--steps", steps,    "--check", NULL};
    const char *args_b[] = {"--url",   srv->url, "--name",   "b",  "--seed",  "2",
                            "--steps", steps,    "--hidden", "32", "--check", NULL};
    *a = sl_test_spawn("MLP_REGRESSION", args_a);
    *b = sl_test_spawn("MLP_REGRESSION", args_b);
}

int sl_test_wait(pid_t pid, int timeout_s)
{
    return sl_ts_wait(pid, timeout_s);
}

static void start(sl_test_server *srv, const char *const *extra, bool logged)
{
    const char *owner = getenv("SL_TEST_RUNDIR_OWNER");
    int rc = sl_ts_salusd_prepare(srv, "test");
    if (rc != SL_OK)
        fail_msg("cannot make salusd's folder: %s", strerror(errno));
    unsigned uid, gid;
    if (owner && sscanf(owner, "%u:%u", &uid, &gid) == 2 &&
        chown(srv->dir, (uid_t) uid, (gid_t) gid) != 0)
        fail_msg("chown %s: %s", srv->dir, strerror(errno));
    const char *args[24] = {"--listen", srv->url, "--memory-limit", "256M", "--log-level", "warn"};
    int n = 6;
    for (int k = 0; extra && extra[k] && n < 23; n++, k++)
        args[n] = extra[k];
    args[n] = NULL;
    if (sl_ts_salusd_spawn(srv, sl_test_program("SALUSD"), args, logged) != SL_OK)
        fail_msg("fork: %s", strerror(errno));
    rc = sl_ts_salusd_wait_ready(srv, srv->url, 10);
    if (rc == SL_ESHUTDOWN)
        fail_msg("salusd exited during start-up");
    if (rc != SL_OK) {
        sl_ts_salusd_cleanup(srv);
        fail_msg("salusd did not answer within 10 s");
    }
}

void sl_test_server_start(sl_test_server *srv, const char *const *extra)
{
    start(srv, extra, false);
}

void sl_test_server_start_logged(sl_test_server *srv, const char *const *extra)
{
    start(srv, extra, true);
}

int sl_test_server_stop(sl_test_server *srv)
{
    int st = sl_ts_salusd_stop(srv, 10);
    sl_ts_tempdir_remove(srv->dir);
    return st;
}

salus_graph *sl_test_relu_graph(salus_session *s, const char *op, int x_ndim, const int64_t *x_dims,
                                uint64_t param, int p_ndim, const int64_t *p_dims, salus_value *x,
                                salus_value *y)
{
    salus_graph *g = salus_graph_new();
    *x = salus_graph_input(g, SALUS_F32, x_ndim, x_dims);
    salus_value p = salus_graph_param(g, param, SALUS_F32, p_ndim, p_dims);
    salus_value v = salus_graph_op(g, op, 2, (salus_value[]){*x, p}, 0, NULL, 0, NULL);
    *y = salus_graph_op(g, "relu", 1, &v, 0, NULL, 0, NULL);
    if (salus_graph_error(g))
        fail_msg("graph relu(%s(x, p)): %s", op, salus_graph_error(g));
    assert_sl_ok(salus_graph_register(s, g, NULL));
    return g;
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

salus_session *sl_test_session(const sl_test_server *srv, salus_client **c)
{
    salus_session *s;
    *c = sl_test_connect(srv);
    assert_int_equal(salus_session_open(*c, NULL, &s), SALUS_OK);
    return s;
}

void sl_test_env_open(const sl_test_server *srv, sl_test_env *e)
{
    e->s = sl_test_session(srv, &e->c);
}

void sl_test_env_close(sl_test_env *e)
{
    assert_int_equal(salus_session_close(e->s), SALUS_OK);
    salus_disconnect(e->c);
}
