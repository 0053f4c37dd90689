/* Integration-test harness over sl_testsupport.h: starts a real salusd on
 * ipc:// in a fresh temp folder, waits until it answers, and stops it with
 * SIGTERM, checking that it drained and exited 0; every failure fails the
 * test. Paths of the programs come from the environment that meson sets
 * (SALUSD, MLP_REGRESSION). */
#ifndef SL_TEST_HARNESS_H
#define SL_TEST_HARNESS_H

#include "sl_testsupport.h"

#include <salus/salus.h>
#include <sys/types.h>

typedef sl_ts_salusd sl_test_server;

/* The path in environment variable env (set by meson); fails the test when
 * it is not set. */
const char *sl_test_program(const char *env);

/* Starts $SALUSD with "--memory-limit 256M --log-level warn" and extra args
 * (NULL-terminated, may be NULL) and waits up to 10 s for it to answer a
 * handshake. Fails the test on error. $SL_TEST_RUNDIR_OWNER=UID:GID gives
 * the folder to that user (salusd --user). */
void sl_test_server_start(sl_test_server *srv, const char *const *extra_args);
/* The same with salusd's output in srv->log (sl_ts_salusd_log_find). */
void sl_test_server_start_logged(sl_test_server *srv, const char *const *extra_args);
/* SIGTERM, then waits up to 10 s; returns salusd's exit status (-1 if it had
 * to be killed or died by a signal). Removes the temp folder. */
int sl_test_server_stop(sl_test_server *srv);
/* cmocka group fixtures for a suite around one salusd: point sl_test_group
 * at the suite's server before cmocka_run_group_tests. Setup starts it with
 * no extra args; teardown stops it and fails the group (printing the status)
 * unless salusd drained and exited 0. */
extern sl_test_server *sl_test_group;
int sl_test_group_start(void **state);
int sl_test_group_stop(void **state);
/* main() of a suite around one salusd, srv (a sl_test_server): points
 * sl_test_group at it and runs the tests (as SL_TEST_GROUP) with setup
 * (sl_test_group_start, or one that starts srv its own way) and
 * sl_test_group_stop. */
#define SL_TEST_SERVER_MAIN(srv, name, setup, ...)                                                 \
    static SL_TEST_GROUP(sl_test_run_group_, name, setup, sl_test_group_stop, __VA_ARGS__) int     \
    main(void)                                                                                     \
    {                                                                                              \
        sl_test_group = &(srv);                                                                    \
        return sl_test_run_group_();                                                               \
    }
/* Connects a client to srv; fails the test on error. */
salus_client *sl_test_connect(const sl_test_server *srv);

/* Connects a client to srv (*c) and opens a session with default options;
 * fails the test on error. */
salus_session *sl_test_session(const sl_test_server *srv, salus_client **c);

/* A client with one open session, for tests that need no more. */
typedef struct sl_test_env {
    salus_client *c;
    salus_session *s;
} sl_test_env;
/* Connects to srv and opens a session with default options (fails the
 * test otherwise). */
void sl_test_env_open(const sl_test_server *srv, sl_test_env *e);
/* Closes the session (fails the test if that fails) and disconnects. */
void sl_test_env_close(sl_test_env *e);
/* Registers in s the f32 graph relu(op(x, p)): x an input of x_ndim dims
 * x_dims, p the tensor param (p_ndim dims p_dims), op a binary op such as
 * "add" or "matmul". Returns the graph (the caller frees it) with its input
 * in *x and its output in *y; fails the test on error. */
salus_graph *sl_test_relu_graph(salus_session *s, const char *op, int x_ndim, const int64_t *x_dims,
                                uint64_t param, int p_ndim, const int64_t *p_dims, salus_value *x,
                                salus_value *y);
/* Spawns program (env var name, e.g. "MLP_REGRESSION") with args; returns
 * its pid. */
pid_t sl_test_spawn(const char *env_program, const char *const *args);
/* Spawns path with first (when not NULL) and then args (NULL-terminated,
 * may be NULL); returns its pid. Fails the test when fork fails. */
pid_t sl_test_exec(const char *path, const char *first, const char *const *args);
/* Spawns two $MLP_REGRESSION clients of srv that train steps steps each
 * and --check against the reference: "a" (seed 1) into *a and "b" (seed 2,
 * 32 hidden units) into *b. */
void sl_test_spawn_mlp_pair(const sl_test_server *srv, const char *steps, pid_t *a, pid_t *b);
/* Waits for pid up to timeout_s; returns its exit status or -1. */
int sl_test_wait(pid_t pid, int timeout_s);

#endif
