/* Iteration graphs against a real salusd (server/replay.h): an iteration
 * seen twice with the same calls is recorded once and then replayed in one
 * launch; new calls (another set of fetches) record again; a lane moved to
 * another address records again; a recording the device refuses runs op by
 * op with the reason in status; a device reset records again; --no-graphs
 * launches op by op. A recording's memory is charged to its session's
 * framework class until the recording goes, and one that does not fit
 * runs op by op; under a tenant's memory quota, what the session's
 * persistent bytes do not hold counts against the quota, and a recording
 * beyond it runs op by op. The counts come from salusd's status.
 *   test_replay [--device SPEC]   (default sim:h200)
 * The sim device computes nothing; on cuda (the gpu suite, replay-cuda)
 * every run's fetches are also checked against what the graph computes, so
 * replays, re-recordings and fallbacks are shown to give op by op's
 * results. cuda injects only graph faults: the reset case is sim's. Skips
 * (exit 77) on cuda where the machine has no NVIDIA device. */
#include "salusd_ctl.h"
#include "sl_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OPS 60
#define N 256

static const int64_t dims[] = {N};

static const char *device = "sim:h200";
/* the device computes: fetches are checked */
static bool computes;

/* c += 1; y = x + c; y = 1 * y, OPS - 2 times. mid is op 30's output. */
typedef struct job {
    salus_session *s;
    salus_graph *g;
    uint64_t c;
    salus_value y, mid;
    int done; /* runs that succeeded: c's value */
} job;

/* The job in a session opened with opts (NULL: none). */
static void job_open_with(salus_client *cl, const salus_session_opts *opts, job *j)
{
    j->done = 0;
    assert_sl_ok(salus_session_open(cl, opts, &j->s));
    assert_sl_ok(salus_tensor_create(j->s, SALUS_F32, 1, dims, NULL, &j->c));
    j->g = salus_graph_new();
    salus_value x = salus_graph_input(j->g, SALUS_F32, 1, dims);
    salus_value c = salus_graph_param(j->g, j->c, SALUS_F32, 1, dims);
    const float one = 1.0f;
    (void) salus_graph_op(j->g, "add_scalar", 1, &c, 0, NULL, 1, &one);
    salus_value y = salus_graph_op(j->g, "add", 2, (salus_value[]){x, c}, 0, NULL, 0, NULL);
    for (int k = 2; k < OPS; k++) {
        y = salus_graph_op(j->g, "scale", 1, &y, 0, NULL, 1, &one);
        if (k == 30)
            j->mid = y;
    }
    j->y = y;
    assert_null(salus_graph_error(j->g));
    assert_sl_ok(salus_graph_register(j->s, j->g, NULL));
}

static void job_open(salus_client *cl, job *j)
{
    job_open_with(cl, NULL, j);
}

/* One run fetching y, and with mid also op 30's output; where the device
 * computes, both must be x + c after the run's increment. */
static int job_run(job *j, bool mid)
{
    float x[N], y[N], m[N];
    for (int i = 0; i < N; i++)
        x[i] = (float) i;
    salus_value f[2] = {j->y, j->mid};
    int rc = salus_run(j->s, j->g, (const void *[]){x}, mid ? 2 : 1, f, (void *[]){y, m});
    if (rc != SALUS_OK)
        return rc;
    j->done++;
    for (int i = 0; computes && i < N; i++) {
        if (y[i] != x[i] + (float) j->done || (mid && m[i] != y[i]))
            fail_msg("run %d: y[%d] = %g, mid %g; want %g", j->done, i, (double) y[i],
                     (double) (mid ? m[i] : y[i]), (double) (x[i] + (float) j->done));
    }
    return rc;
}

static void job_close(job *j)
{
    salus_graph_free(j->g);
    assert_sl_ok(salus_session_close(j->s));
}

/* The sum of the status JSON's numbers keyed key, over every session. */
static long long status_num(salus_client *c, const char *key)
{
    char *json = NULL, pat[64];
    assert_sl_ok(salus_status_json(c, &json));
    snprintf(pat, sizeof pat, "\"%s\":", key);
    long long v = 0;
    for (const char *p = json; (p = strstr(p, pat)); p += strlen(pat))
        v += strtoll(p + strlen(pat), NULL, 10);
    salus_free(json);
    return v;
}

/* The number keyed key in the status of session id (-1: not found). */
static long long session_num(salus_client *c, uint64_t id, const char *key)
{
    char *json = NULL, pat[64], at[48];
    assert_sl_ok(salus_status_json(c, &json));
    snprintf(at, sizeof at, "\"id\":%llu,", (unsigned long long) id);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *s = strstr(json, at), *next = s ? strstr(s + strlen(at), "\"id\":") : NULL;
    const char *p = s ? strstr(s, pat) : NULL;
    long long v = p && (!next || p < next) ? strtoll(p + strlen(pat), NULL, 10) : -1;
    salus_free(json);
    return v;
}

/* Whether the status of session id holds text. */
static bool session_has(salus_client *c, uint64_t id, const char *text)
{
    char *json = NULL, at[48];
    assert_sl_ok(salus_status_json(c, &json));
    snprintf(at, sizeof at, "\"id\":%llu,", (unsigned long long) id);
    const char *s = strstr(json, at), *next = s ? strstr(s + strlen(at), "\"id\":") : NULL;
    const char *p = s ? strstr(s, text) : NULL;
    bool has = p && (!next || p < next);
    salus_free(json);
    return has;
}

static bool status_has(salus_client *c, const char *text)
{
    char *json = NULL;
    assert_sl_ok(salus_status_json(c, &json));
    bool has = strstr(json, text) != NULL;
    salus_free(json);
    return has;
}

static void start_limited(sl_test_server *srv, const char *limit, const char *extra)
{
    char fault[400];
    sl_ctl_prepare(srv);
    sl_ctl_path(srv, "fault", fault, sizeof fault);
    sl_ctl_start(srv, (const char *[]){"--device", device, "--memory-limit", limit,
                                       "--fault-inject", fault, extra, NULL});
}

static void start_with(sl_test_server *srv, const char *extra)
{
    start_limited(srv, "4G", extra);
}

/* A salusd (with one extra flag, or none), a client and a job of OPS ops. */
typedef struct env {
    sl_test_server srv;
    salus_client *cl;
    job j;
} env;

static void env_open(env *e, const char *extra)
{
    start_with(&e->srv, extra);
    e->cl = sl_test_connect(&e->srv);
    job_open(e->cl, &e->j);
}

static void env_close(env *e)
{
    job_close(&e->j);
    salus_disconnect(e->cl);
    sl_ctl_finish(&e->srv);
}

/* n runs of j (fetching y only), each succeeding. */
static void runs_job(job *j, int n)
{
    for (int i = 0; i < n; i++)
        assert_sl_ok(job_run(j, false));
}

/* n runs of the job, each succeeding. */
static void runs(env *e, int n, bool mid)
{
    for (int i = 0; i < n; i++)
        assert_sl_ok(job_run(&e->j, mid));
}

/* First sighting op by op, the second recorded and replayed, the rest
 * replayed; a new fetch cuts the iteration in two recorded segments. */
static void same_calls_replay_new_calls_record(void **state)
{
    (void) state;
    env e;
    env_open(&e, NULL);
    runs(&e, 6, false);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 1);
    assert_int_equal(status_num(e.cl, "graph_replays"), 5);
    assert_true(status_num(e.cl, "graph_bytes") > 0);
    assert_int_equal(status_num(e.cl, "graph_fallbacks"), 0);
    runs(&e, 3, true);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 2);
    assert_int_equal(status_num(e.cl, "graph_replays"), 7);
    env_close(&e);
}

/* The arena offset of the first lane in status (one session: its lane). */
static long long lane_offset(salus_client *c)
{
    char *json = NULL;
    assert_sl_ok(salus_status_json(c, &json));
    const char *lanes = strstr(json, "\"lanes\":");
    const char *off = lanes ? strstr(lanes, "\"offset\":") : NULL;
    assert_non_null(off);
    long long v = strtoll(off + strlen("\"offset\":"), NULL, 10);
    salus_free(json);
    return v;
}

/* A lane moved (resized for a larger graph of its session: a new block)
 * holds the iteration's values at other addresses: the next sightings
 * record again rather than replay the old ones; results stay right. */
static void lane_move_records_again(void **state)
{
    (void) state;
    env e;
    env_open(&e, NULL);
    runs(&e, 3, false);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 1);
    assert_int_equal(status_num(e.cl, "graph_replays"), 2);
    long long before = lane_offset(e.cl);
    /* a graph with a 16 MiB peak: the lane grows, elsewhere */
    const int64_t big[] = {1 << 21};
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 1, big);
    salus_value y = salus_graph_op(g, "relu", 1, &x, 0, NULL, 0, NULL);
    (void) salus_graph_op(g, "relu", 1, &y, 0, NULL, 0, NULL);
    assert_null(salus_graph_error(g));
    assert_sl_ok(salus_graph_register(e.j.s, g, NULL));
    assert_true(lane_offset(e.cl) != before);
    /* the first sighting at the new addresses goes op by op, the second
     * records, the third replays */
    runs(&e, 3, false);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 2);
    assert_int_equal(status_num(e.cl, "graph_replays"), 4);
    assert_int_equal(status_num(e.cl, "graph_fallbacks"), 0);
    salus_graph_free(g);
    env_close(&e);
}

/* Partitions resized: the lane's stream may now run elsewhere (on cuda a
 * new context under the same stream), so the next sightings record again.
 * Skipped where the device has no partitions (cuda without green
 * contexts). */
static void partition_change_records_again(void **state)
{
    (void) state;
    env e;
    env_open(&e, NULL);
    int rc = salus_set_partitions(e.cl, "16");
    if (rc == SALUS_EUNSUPPORTED && computes) {
        env_close(&e);
        skip();
    }
    assert_sl_ok(rc);
    runs(&e, 3, false);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 1);
    assert_int_equal(status_num(e.cl, "graph_replays"), 2);
    assert_sl_ok(salus_set_partitions(e.cl, "32"));
    runs(&e, 3, false);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 2);
    assert_int_equal(status_num(e.cl, "graph_replays"), 4);
    env_close(&e);
}

/* A refused recording: the run still succeeds, op by op, the reason is in
 * status and the graph is not recorded again with the same calls. */
static void refused_recording_falls_back(void **state)
{
    (void) state;
    env e;
    env_open(&e, NULL);
    sl_ctl_fault(&e.srv, "graph 1");
    runs(&e, 4, false);
    assert_int_equal(status_num(e.cl, "graph_fallbacks"), 1);
    assert_int_equal(status_num(e.cl, "graph_replays"), 0);
    assert_true(status_has(e.cl, "\"graph_fallback_reason\":\"injected fault"));
    assert_true(sl_ctl_log_has(&e.srv, "runs op by op: injected fault"));
    /* new calls: recorded, and the reason is gone */
    runs(&e, 3, true);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 1);
    assert_int_equal(status_num(e.cl, "graph_replays"), 2);
    env_close(&e);
}

/* A lost device mid-replay fails that iteration; after the reset the graph
 * is recorded again, not replayed from a recording the reset destroyed. */
static void reset_records_again(void **state)
{
    (void) state;
    if (strncmp(device, "sim", 3) != 0)
        skip(); /* only sim loses a device on cue */
    env e;
    env_open(&e, NULL);
    runs(&e, 3, false);
    assert_int_equal(status_num(e.cl, "graph_replays"), 2);
    sl_ctl_fault(&e.srv, "sticky");
    assert_sl_err(job_run(&e.j, false), SALUS_EDEVICERESET);
    for (int i = 0; i < 200 && !sl_ctl_log_has(&e.srv, "device reset #1"); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_true(sl_ctl_log_has(&e.srv, "device reset #1"));
    /* the reset destroyed the recording: its memory is given back */
    assert_int_equal(status_num(e.cl, "graph_bytes"), 0);
    assert_int_equal(status_num(e.cl, "framework_bytes"), 0);
    long long before = status_num(e.cl, "graph_recordings");
    int ok = 0;
    for (int i = 0; i < 6 && ok < 3; i++)
        ok += job_run(&e.j, false) == SALUS_OK; /* the first may carry the reset's notice */
    assert_int_equal(ok, 3);
    assert_int_equal(status_num(e.cl, "graph_recordings"), before + 1);
    assert_true(status_num(e.cl, "graph_bytes") > 0);
    assert_int_equal(status_num(e.cl, "framework_bytes"), status_num(e.cl, "graph_bytes"));
    env_close(&e);
}

/* A recording's memory is charged to its session's framework class: the
 * session's framework_bytes rise by graph_bytes and the free memory drops
 * by as much; recording again swaps the charge, and freeing the graph or
 * closing the session gives it back. (The sim device reports a modelled
 * size: 256 bytes a node, as the cuda backend does.) */
static void recording_memory_is_charged(void **state)
{
    (void) state;
    sl_test_server srv;
    start_with(&srv, NULL);
    salus_client *cl = sl_test_connect(&srv);
    long long free0 = status_num(cl, "free"), framework0 = status_num(cl, "framework");
    job j;
    job_open(cl, &j);
    assert_sl_ok(job_run(&j, false)); /* first sighting: op by op */
    long long free1 = status_num(cl, "free"), framework1 = status_num(cl, "framework");
    assert_int_equal(status_num(cl, "framework_bytes"), 0);
    assert_sl_ok(job_run(&j, false)); /* recorded */
    long long bytes = status_num(cl, "graph_bytes");
    assert_true(bytes > 0);
    assert_int_equal(status_num(cl, "framework_bytes"), bytes);
    assert_int_equal(status_num(cl, "free"), free1 - bytes);
    /* the memory status's framework holds it (and each lane's part) */
    assert_int_equal(status_num(cl, "framework"), framework1 + bytes);
    assert_sl_ok(job_run(&j, false)); /* replayed: no new charge */
    assert_int_equal(status_num(cl, "free"), free1 - bytes);
    /* new calls record again: the new recording's bytes replace the old */
    assert_sl_ok(job_run(&j, true));
    assert_sl_ok(job_run(&j, true));
    assert_int_equal(status_num(cl, "graph_recordings"), 2);
    long long bytes2 = status_num(cl, "graph_bytes");
    assert_true(bytes2 > 0);
    assert_int_equal(status_num(cl, "framework_bytes"), bytes2);
    assert_int_equal(status_num(cl, "free"), free1 - bytes2);
    /* freeing the graph gives it back, and so does closing the session */
    salus_graph_free(j.g);
    assert_int_equal(status_num(cl, "framework_bytes"), 0);
    assert_int_equal(status_num(cl, "free"), free1);
    assert_sl_ok(salus_session_close(j.s));
    assert_int_equal(status_num(cl, "free"), free0);
    assert_int_equal(status_num(cl, "framework"), framework0);
    job_open(cl, &j);
    runs_job(&j, 3);
    assert_true(status_num(cl, "framework_bytes") > 0);
    job_close(&j);
    assert_int_equal(status_num(cl, "free"), free0);
    salus_disconnect(cl);
    sl_ctl_finish(&srv);
}

/* Memory so tight that no recording fits: the runs still succeed, op by
 * op, and status says why. With 16K the recording's 15K does not fit the
 * session's quota (all of the memory); with 32K it would, but another
 * session holds 16K of it: then the capacity refuses it. */
static void no_memory_for(const char *limit, uint64_t other, const char *why)
{
    sl_test_server srv;
    start_limited(&srv, limit, NULL);
    salus_client *cl = sl_test_connect(&srv);
    salus_session *hog = NULL;
    if (other) {
        salus_session_opts opts = {.name = "hog", .persistent_bytes = other};
        assert_sl_ok(salus_session_open(cl, &opts, &hog));
    }
    job j;
    job_open(cl, &j);
    assert_sl_ok(job_run(&j, false));
    long long free1 = status_num(cl, "free");
    runs_job(&j, 3);
    assert_int_equal(status_num(cl, "graph_fallbacks"), 1);
    assert_int_equal(status_num(cl, "graph_recordings"), 0);
    assert_int_equal(status_num(cl, "graph_replays"), 0);
    assert_int_equal(status_num(cl, "graph_bytes"), 0);
    assert_int_equal(status_num(cl, "framework_bytes"), 0);
    assert_int_equal(status_num(cl, "free"), free1);
    assert_true(status_has(cl, "\"graph_fallback_reason\":\"no memory for the graph: "));
    char line[512];
    assert_true(
        sl_ctl_log_last(&srv, "runs op by op: no memory for the graph: ", line, sizeof line));
    fprintf(stderr, "replay: %s\n", line);
    assert_non_null(strstr(line, why));
    job_close(&j);
    if (hog)
        assert_sl_ok(salus_session_close(hog));
    salus_disconnect(cl);
    sl_ctl_finish(&srv);
}

static void no_memory_for_the_graph_runs_op_by_op(void **state)
{
    (void) state;
    no_memory_for("16K", 0, "bytes, beyond the session's quota");
    no_memory_for("32K", 16 * 1024, " free");
}

/* A tenant's recordings live within its memory quota, however many
 * sessions it opens. The tenant is "remote" (clients of a plain tcp://
 * listener, never operators) with memory=256K; the operator over ipc://
 * reads every session's status. (a) A session declaring persistent bytes
 * with room holds its recording inside them: the tenant's count does not
 * move. (b) Sessions declaring just their tensor hold their recordings
 * beside it, counted against the quota, until it has no room: that
 * session's iterations run op by op, correctly, with a reason that names
 * the quota and what to do. (c) Closing a session, or freeing a graph,
 * gives its bytes back, and the refused graph records once its calls
 * change. A session declaring nothing gets the rest of the quota as its
 * persistent bytes, and its recording is held there. (d) A device reset
 * gives a recording's bytes back until it records again. (e) A tensor
 * that needs the bytes of P a recording holds moves them beside P. Sim
 * only: the figures are its modelled sizes. */
static void tenant_quota_holds_recordings(void **state)
{
    (void) state;
    if (strncmp(device, "sim", 3) != 0)
        skip(); /* the sizes below are sim's model (256 bytes a node) */
    char url[64], fault[400];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", sl_ctl_free_port());
    sl_test_server srv;
    sl_ctl_prepare(&srv);
    sl_ctl_path(&srv, "fault", fault, sizeof fault);
    sl_ctl_start(&srv,
                 (const char *[]){"--device", device, "--memory-limit", "4G", "--listen", url,
                                  "--allow-plain-tcp", "--user-limits",
                                  "remote:memory=256K,sessions=16", "--fault-inject", fault, NULL});
    salus_client *op = sl_test_connect(&srv), *cl;
    assert_sl_ok(salus_connect(url, &cl));
    const long long quota = 256 * 1024;

    /* (a) P = 64K: its tensor (1K) and its recording (15K) fit */
    salus_session_opts roomy = {
        .name = "roomy", .persistent_bytes = 64 * 1024, .ephemeral_bytes = 64 * 1024};
    job a;
    job_open_with(cl, &roomy, &a);
    long long used = status_num(cl, "memory_used");
    assert_int_equal(used, 128 * 1024);
    runs_job(&a, 3);
    uint64_t ida = salus_session_id(a.s);
    long long bytes = session_num(op, ida, "graph_bytes");
    assert_true(bytes > 0 && bytes < 32 * 1024);
    assert_int_equal(session_num(op, ida, "graph_recordings"), 1);
    assert_int_equal(session_num(op, ida, "framework_bytes"), (bytes + 255) / 256 * 256);
    assert_int_equal(status_num(cl, "memory_used"), used);

    /* (b) P = its tensor only: each recording is counted beside it */
    salus_session_opts tight = {
        .name = "tight", .persistent_bytes = 1024, .ephemeral_bytes = 31 * 1024};
    job b[4];
    int n = 0, refused = -1;
    for (; n < 4; n++) {
        salus_session *probe = NULL;
        if (status_num(cl, "memory_used") + 32 * 1024 > quota) {
            /* no room to open another: the quota refuses it */
            assert_sl_err(salus_session_open(cl, &tight, &probe), SALUS_EEXHAUSTED);
            break;
        }
        job_open_with(cl, &tight, &b[n]);
        used = status_num(cl, "memory_used");
        runs_job(&b[n], 4); /* op by op, recorded, then replayed or op by op */
        uint64_t id = salus_session_id(b[n].s);
        assert_int_equal(session_num(op, id, "graph_bytes") > 0,
                         session_num(op, id, "graph_recordings") == 1);
        if (session_num(op, id, "graph_recordings") == 1) {
            assert_int_equal(session_num(op, id, "graph_bytes"), bytes);
            assert_int_equal(status_num(cl, "memory_used"), used + bytes);
            continue;
        }
        /* refused for the quota: op by op, nothing charged, and the
         * reason names the quota and what to do */
        refused = n;
        assert_int_equal(session_num(op, id, "graph_fallbacks"), 1);
        assert_int_equal(session_num(op, id, "graph_replays"), 0);
        assert_int_equal(session_num(op, id, "framework_bytes"), 0);
        assert_int_equal(status_num(cl, "memory_used"), used);
        assert_true(session_has(op, id, "left of the memory quota of remote"));
        assert_true(session_has(op, id, "declare persistent bytes with room for recorded graphs"));
        assert_true(session_has(op, id, "ask the operator for more"));
        assert_int_equal(b[n].done, 4);
        char line[512];
        assert_true(
            sl_ctl_log_last(&srv, "runs op by op: no memory for the graph", line, sizeof line));
        fprintf(stderr, "replay: %s\n", line);
    }
    /* 128K + 2 x (32K + 15K) + 32K: the third tight session's recording
     * has 2K left */
    assert_int_equal(refused, 2);
    assert_int_equal(n, 3);
    assert_true(status_num(cl, "memory_used") <= quota);

    /* (c) a freed graph and a closed session give their bytes back */
    used = status_num(cl, "memory_used");
    salus_graph_free(b[1].g);
    b[1].g = NULL;
    assert_int_equal(status_num(cl, "memory_used"), used - bytes);
    assert_sl_ok(salus_session_close(b[1].s));
    assert_int_equal(status_num(cl, "memory_used"), used - bytes - 32 * 1024);
    used = status_num(cl, "memory_used");
    job_close(&b[0]);
    assert_int_equal(status_num(cl, "memory_used"), used - bytes - 32 * 1024);
    /* the refused graph records once its calls change, now that there is
     * room */
    uint64_t id2 = salus_session_id(b[2].s);
    used = status_num(cl, "memory_used");
    for (int i = 0; i < 3; i++)
        assert_sl_ok(job_run(&b[2], true));
    assert_int_equal(session_num(op, id2, "graph_recordings"), 1);
    long long bytes2 = session_num(op, id2, "graph_bytes");
    assert_true(bytes2 > 0);
    assert_int_equal(status_num(cl, "memory_used"), used + bytes2);
    job_close(&b[2]);
    job_close(&a);
    assert_int_equal(status_num(cl, "memory_used"), 0);

    /* declaring nothing: the rest of the quota is its P, which holds the
     * recording */
    job d;
    job_open(cl, &d);
    used = status_num(cl, "memory_used");
    assert_true(used <= quota);
    runs_job(&d, 3);
    assert_int_equal(status_num(op, "graph_recordings"), 1);
    assert_int_equal(status_num(op, "graph_fallbacks"), 0);
    assert_int_equal(status_num(cl, "memory_used"), used);
    job_close(&d);

    /* (d) a device reset destroys the recordings: what they held beyond
     * P goes back to the tenant, and is counted again once the graph
     * records anew */
    job e;
    job_open_with(cl, &tight, &e);
    used = status_num(cl, "memory_used");
    runs_job(&e, 3);
    uint64_t ide = salus_session_id(e.s);
    assert_int_equal(session_num(op, ide, "graph_recordings"), 1);
    assert_int_equal(status_num(cl, "memory_used"), used + bytes);
    sl_ctl_fault(&srv, "sticky");
    assert_sl_err(job_run(&e, false), SALUS_EDEVICERESET);
    for (int i = 0; i < 200 && !sl_ctl_log_has(&srv, "device reset #1"); i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    assert_true(sl_ctl_log_has(&srv, "device reset #1"));
    assert_int_equal(status_num(cl, "memory_used"), used);
    long long recordings = session_num(op, ide, "graph_recordings");
    int ok = 0;
    for (int i = 0; i < 6 && ok < 3; i++)
        ok += job_run(&e, false) == SALUS_OK; /* the first may carry the reset's notice */
    assert_int_equal(ok, 3);
    assert_int_equal(session_num(op, ide, "graph_recordings"), recordings + 1);
    assert_int_equal(status_num(cl, "memory_used"), used + bytes);
    job_close(&e);
    assert_int_equal(status_num(cl, "memory_used"), 0);

    /* (e) a tensor that needs bytes of P a recording holds moves them
     * beside P, counted against the tenant as a recording is */
    salus_session_opts snug = {
        .name = "snug", .persistent_bytes = 17 * 1024, .ephemeral_bytes = 31 * 1024};
    job f;
    job_open_with(cl, &snug, &f);
    used = status_num(cl, "memory_used");
    runs_job(&f, 3);
    assert_int_equal(session_num(op, salus_session_id(f.s), "graph_recordings"), 1);
    assert_int_equal(status_num(cl, "memory_used"), used); /* held in P */
    const int64_t wide[] = {2048};
    uint64_t extra;
    assert_sl_ok(salus_tensor_create(f.s, SALUS_F32, 1, wide, NULL, &extra));
    /* P 17K: 1K + 8K of tensors leave the recording 8K of it */
    assert_int_equal(status_num(cl, "memory_used"), used + bytes - 8 * 1024);
    job_close(&f);
    assert_int_equal(status_num(cl, "memory_used"), 0);
    salus_disconnect(cl);
    salus_disconnect(op);
    sl_ctl_finish(&srv);
}

/* Beside a high-priority session, a low-priority iteration goes in steps
 * (segments of ops); a segment seen twice is recorded and replayed. */
static void low_priority_segments_replay(void **state)
{
    (void) state;
    env e;
    env_open(&e, "--policy=priority");
    salus_session_opts hp_opts = {.name = "hp", .priority = 10};
    salus_session *hp;
    assert_sl_ok(salus_session_open(e.cl, &hp_opts, &hp));
    runs(&e, 10, false);
    assert_true(status_num(e.cl, "graph_recordings") >= 1);
    assert_true(status_num(e.cl, "graph_replays") >= 1);
    assert_int_equal(status_num(e.cl, "graph_fallbacks"), 0);
    /* the steps' recordings are charged as a whole iteration's are */
    assert_true(status_num(e.cl, "graph_bytes") > 0);
    assert_int_equal(status_num(e.cl, "framework_bytes"), status_num(e.cl, "graph_bytes"));
    assert_sl_ok(salus_session_close(hp));
    env_close(&e);
}

static void no_graphs_launches_op_by_op(void **state)
{
    (void) state;
    env e;
    env_open(&e, "--no-graphs");
    runs(&e, 4, false);
    assert_int_equal(status_num(e.cl, "graph_recordings"), 0);
    assert_int_equal(status_num(e.cl, "graph_replays"), 0);
    env_close(&e);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--device") == 0)
        device = argv[2];
    computes = strncmp(device, "sim", 3) != 0;
    if (strncmp(device, "cuda", 4) == 0 && access("/dev/nvidiactl", F_OK) != 0) {
        fprintf(stderr, "replay: SKIP: no NVIDIA device here\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_calls_replay_new_calls_record),
        cmocka_unit_test(lane_move_records_again),
        cmocka_unit_test(partition_change_records_again),
        cmocka_unit_test(refused_recording_falls_back),
        cmocka_unit_test(reset_records_again),
        cmocka_unit_test(recording_memory_is_charged),
        cmocka_unit_test(no_memory_for_the_graph_runs_op_by_op),
        cmocka_unit_test(tenant_quota_holds_recordings),
        cmocka_unit_test(low_priority_segments_replay),
        cmocka_unit_test(no_graphs_launches_op_by_op),
    };
    return cmocka_run_group_tests_name("replay", tests, NULL, NULL);
}
