/* Clients that die: 100 client processes SIGKILLed mid-iteration, mid-upload
 * (a 16 MiB tensor_create in flight) and while waiting for admission (behind
 * a session that holds most of the memory), while survivors train one after
 * another with --check (mlp_regression compares every loss and the final
 * weights with a local double-precision reference). Every dead session must
 * vanish from the status, the survivors must exit 0, and at the end the
 * memory accounting is back at its start-up baseline. The victims of the
 * upload and admission kinds are this program re-executed in a child mode
 * (fork + exec before any NNG use in the child: NNG is not fork-safe). */
#include "client_internal.h"
#include "harness.h"
#include "status_call.h"
#include "sl_test.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILLS 100
#define UPLOAD_BYTES (16u << 20)

static sl_test_server server;

enum victim_kind { MID_ITERATION, MID_UPLOAD, WAITING };

/* ---- child mode: test_crash --child upload|wait URL NAME ---- */

static int child_main(const char *mode, const char *url, const char *name)
{
    salus_client *c;
    salus_session *s;
    if (salus_connect(url, &c) != SALUS_OK)
        return 3;
    salus_session_opts o = {.name = name};
    if (strcmp(mode, "wait") == 0) {
        o.persistent_bytes = 120u << 20; /* never fits beside the blocker */
        o.wait_for_admission = 1;
        (void) salus_session_open(c, &o, &s); /* blocks until killed */
        return 4;
    }
    if (salus_session_open(c, &o, &s) != SALUS_OK)
        return 5;
    float *data = calloc(UPLOAD_BYTES / sizeof(float), sizeof(float));
    if (!data)
        return 6;
    const int64_t dims[] = {UPLOAD_BYTES / sizeof(float)};
    for (int i = 0; i < 100000; i++) { /* until killed */
        uint64_t t;
        if (salus_tensor_create(s, SALUS_F32, 1, dims, data, &t) != SALUS_OK ||
            salus_tensor_free(s, t) != SALUS_OK)
            return 7;
    }
    return 0;
}

static pid_t spawn_self(const char *mode, const char *name)
{
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        execl("/proc/self/exe", "test_crash", "--child", mode, server.url, name, (char *) NULL);
        _exit(127);
    }
    return pid;
}

/* ---- the server's view ---- */

typedef struct seen {
    bool present;        /* an admitted session with this name */
    bool queued;         /* waiting for admission with this name */
    uint64_t iterations; /* of the named session */
    uint64_t tensors;
    size_t sessions, queue, lanes;
    uint64_t persistent_used, persistent_reserved, lane_bytes, free;
} seen;

static seen look(salus_client *c, const char *name)
{
    Salus__Reply *rep = sl_test_status(c);
    const Salus__StatusReply *r = rep->status;
    seen v = {.sessions = r->n_sessions,
              .queue = r->n_queue,
              .lanes = r->n_lanes,
              .persistent_used = r->memory->persistent_used,
              .persistent_reserved = r->memory->persistent_reserved,
              .lane_bytes = r->memory->ephemeral_lanes,
              .free = r->memory->free};
    for (size_t i = 0; name && i < r->n_sessions; i++)
        if (strcmp(r->sessions[i]->name, name) == 0) {
            v.present = true;
            v.iterations = r->sessions[i]->iterations;
            v.tensors = r->sessions[i]->n_tensors;
        }
    for (size_t i = 0; name && i < r->n_queue; i++)
        if (strcmp(r->queue[i]->name, name) == 0)
            v.queued = true;
    salus__reply__free_unpacked(rep, NULL);
    return v;
}

/* Polls every 2 ms (up to 10 s) until the victim reaches the state its kind
 * is killed in; false if it died first. */
static bool wait_for_victim(salus_client *c, pid_t pid, enum victim_kind kind, const char *name)
{
    for (int i = 0; i < 5000; i++) {
        seen v = look(c, name);
        if ((kind == MID_ITERATION && v.iterations >= 3) ||
            (kind == MID_UPLOAD && v.tensors >= 1) || (kind == WAITING && v.queued))
            return true;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            fail_msg("victim %s exited before it could be killed", name);
        sl_ts_sleep_ms(2);
    }
    return false;
}

/* Polls until no session or queued session has this name (5 s). */
static void wait_gone(salus_client *c, const char *name)
{
    for (int i = 0; i < 2500; i++) {
        seen v = look(c, name);
        if (!v.present && !v.queued)
            return;
        sl_ts_sleep_ms(2);
    }
    fail_msg("session %s still on the server 5 s after its client was killed", name);
}

static pid_t spawn_survivor(int k)
{
    char name[32], seed[16];
    snprintf(name, sizeof name, "survivor-%d", k);
    snprintf(seed, sizeof seed, "%d", 100 + k);
    const char *args[] = {"--url", server.url, "--name", name,      "--seed",
                          seed,    "--steps",  "150",    "--check", NULL};
    return sl_test_spawn("MLP_REGRESSION", args);
}

static void killed_clients_leave_nothing_behind(void **state)
{
    (void) state;
    salus_client *c = sl_test_connect(&server);
    seen base = look(c, NULL);

    /* the blocker holds most of the memory, so a 120 MiB session waits */
    salus_session *blocker;
    salus_session_opts bo = {
        .name = "blocker", .persistent_bytes = 150u << 20, .ephemeral_bytes = 1 << 20};
    assert_sl_ok(salus_session_open(c, &bo, &blocker));

    int survivors_done = 0, k = 0;
    pid_t survivor = spawn_survivor(k++);
    double t0 = sl_ts_now_s();
    for (int i = 0; i < KILLS; i++) {
        int st;
        if (waitpid(survivor, &st, WNOHANG) == survivor) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                fail_msg("survivor %d failed (status %d) while clients were killed", k - 1, st);
            survivors_done++;
            survivor = spawn_survivor(k++);
        }
        enum victim_kind kind = (enum victim_kind)(i % 3);
        char name[32];
        snprintf(name, sizeof name, "victim-%d", i);
        pid_t pid;
        if (kind == MID_ITERATION) {
            const char *args[] = {"--url",   server.url, "--name", name, "--steps",
                                  "1000000", "--hidden", "128",    NULL};
            pid = sl_test_spawn("MLP_REGRESSION", args);
        } else {
            pid = spawn_self(kind == MID_UPLOAD ? "upload" : "wait", name);
        }
        if (!wait_for_victim(c, pid, kind, name))
            fail_msg("victim %s never reached the state it is killed in", name);
        if (kind == MID_UPLOAD)
            sl_ts_sleep_ms(i / 3 % 8); /* somewhere inside an upload */
        kill(pid, SIGKILL);
        assert_int_equal(sl_test_wait(pid, 10), -1);
        wait_gone(c, name);
    }
    double seconds = sl_ts_now_s() - t0;
    int st = sl_test_wait(survivor, 60);
    if (st != 0)
        fail_msg("the last survivor exited with %d", st);
    survivors_done++;
    printf("%d clients killed in %.1f s while %d survivors trained with --check\n", KILLS, seconds,
           survivors_done);

    assert_sl_ok(salus_session_close(blocker));
    seen v = look(c, NULL);
    for (int i = 0; i < 500 && (v.sessions || v.queue || v.persistent_used ||
                                v.persistent_reserved != base.persistent_reserved ||
                                v.lane_bytes != base.lane_bytes || v.free != base.free);
         i++) {
        sl_ts_sleep_ms(10);
        v = look(c, NULL);
    }
    assert_int_equal(v.sessions, 0);
    assert_int_equal(v.queue, 0);
    assert_int_equal(v.lanes, base.lanes);
    assert_int_equal(v.persistent_used, 0);
    assert_int_equal(v.persistent_reserved, base.persistent_reserved);
    assert_int_equal(v.lane_bytes, base.lane_bytes);
    assert_int_equal(v.free, base.free);
    salus_disconnect(c);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], argv[3], argv[4]);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(killed_clients_leave_nothing_behind),
    };
    sl_test_group = &server;
    return cmocka_run_group_tests_name("crash", tests, sl_test_group_start, sl_test_group_stop);
}
