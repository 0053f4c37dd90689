/* Two tenants training side by side on one salusd, and the share of device
 * time each attains: what the tenant-share test (test/integration/
 * test_tenant_share.c) checks and the tenant_fairness benchmark measures.
 *
 * Each tenant is this program run again as a child ("--tenant-child", see
 * tl_child_main) under its own uid when we are root (nobody and daemon), with
 * N sessions, each on a thread of its own training the Fashion-MNIST MLP
 * shapes (784-256-128-10, batch 128, zeros: the cost is the same) until a
 * deadline. The
 * parent, salusd's operator, reads every session's attained device time from
 * the status twice and shares out the difference by owner. Header-only:
 * included by exactly one program each. */
#ifndef SL_TENANT_LOAD_H
#define SL_TENANT_LOAD_H

#include "sl_testsupport.h"

#include "sl_error.h"

#include <salus/salus.h>

#include <grp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The tenants' uids when we are root. */
#define TL_UID_A 65534u /* nobody */
#define TL_UID_B 1u     /* daemon */
#define TL_MAX_SESSIONS 16

typedef struct tl_session {
    const char *url;
    double deadline_s;
    int index;
    uint64_t iterations;
    int rc;
} tl_session;

static void *tl_session_main(void *arg)
{
    tl_session *t = arg;
    salus_client *c = NULL;
    salus_session *s = NULL;
    salus_model *m = salus_model_new(1, (int64_t[]){784});
    static float x[128 * 784];
    static int32_t y[128];
    char name[32];
    snprintf(name, sizeof name, "load%d", t->index);
    salus_optimizer opt = {.kind = SALUS_MOMENTUM, .lr = 0.01f, .momentum = 0.9f};
    /* declared, so that a tenant's memory quota holds all its sessions */
    salus_session_opts o = {.name = name, .persistent_bytes = 8 << 20, .ephemeral_bytes = 8 << 20};
    salus_model_dense(m, 256);
    salus_model_relu(m);
    salus_model_dense(m, 128);
    salus_model_relu(m);
    salus_model_dense(m, 10);
    t->rc = salus_connect(t->url, &c);
    if (!t->rc)
        t->rc = salus_session_open(c, &o, &s);
    if (!t->rc)
        t->rc = salus_model_compile(m, s, &opt, 128, 128, (unsigned) t->index + 1);
    while (!t->rc && sl_ts_now_s() < t->deadline_s) {
        t->rc = salus_model_train_step(m, x, y, NULL);
        t->iterations++;
    }
    if (t->rc)
        fprintf(stderr, "tenant session %d: %s: %s\n", t->index, salus_strerror(t->rc),
                c ? salus_last_error(c) : "");
    salus_model_free(m);
    if (s)
        (void) salus_session_close(s);
    salus_disconnect(c);
    return NULL;
}

/* The child: argv = self --tenant-child UID SESSIONS SECONDS URL. Becomes
 * UID when root, trains on SESSIONS sessions for SECONDS, returns 0 when
 * every session trained without an error. */
static int tl_child_main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    uid_t uid = (uid_t) strtoul(argv[2], NULL, 10);
    int n = atoi(argv[3]);
    double seconds = atof(argv[4]);
    if (n < 1 || n > TL_MAX_SESSIONS)
        return 2;
    if (geteuid() == 0 && uid != 0 &&
        (setgroups(0, NULL) != 0 || setgid((gid_t) uid) != 0 || setuid(uid) != 0)) {
        perror("tenant child: setuid");
        return 1;
    }
    tl_session t[TL_MAX_SESSIONS];
    pthread_t th[TL_MAX_SESSIONS];
    double deadline = sl_ts_now_s() + seconds;
    for (int i = 0; i < n; i++) {
        t[i] = (tl_session){.url = argv[5], .deadline_s = deadline, .index = i};
        if (pthread_create(&th[i], NULL, tl_session_main, &t[i]) != 0)
            return 1;
    }
    int failed = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        failed += t[i].rc != 0;
    }
    return failed ? 1 : 0;
}

/* Device time attained so far by the sessions of owner ("uid N") in a
 * status reply as JSON; -1 when the status has no sessions array. */
static double tl_owner_ns(const char *json, const char *owner)
{
    const char *p = strstr(json, "\"sessions\":[");
    if (!p)
        return -1;
    char want[64];
    snprintf(want, sizeof want, "\"owner\":\"%s\"", owner);
    double sum = 0;
    const char *end = strstr(p, "],\"iterations_total\"");
    for (const char *a = strstr(p, "\"attained_ns\":"); a && (!end || a < end);
         a = strstr(a + 1, "\"attained_ns\":")) {
        const char *next = strstr(a + 1, "\"attained_ns\":");
        const char *o = strstr(a, "\"owner\":\"");
        if (o && (!next || o < next) && strncmp(o, want, strlen(want)) == 0)
            sum += strtod(a + strlen("\"attained_ns\":"), NULL);
    }
    return sum;
}

/* Both tenants' attained device time now, through c. */
static int tl_sample(salus_client *c, const char *owner_a, const char *owner_b, double *a,
                     double *b)
{
    char *json = NULL;
    int rc = salus_status_json(c, &json);
    if (rc)
        return rc;
    *a = tl_owner_ns(json, owner_a);
    *b = tl_owner_ns(json, owner_b);
    salus_free(json);
    return *a < 0 || *b < 0 ? SALUS_EPROTO : 0;
}

/* One round: a salusd (path, with args: NULL-terminated, up to 40), tenant A
 * with n_a sessions and tenant B with n_b, warm_s of warm-up, then the
 * device time each attains over window_s. *share_a = A's share of the
 * two. Returns 0, or -1 with the reason on stderr. Needs root (tl_can_split):
 * otherwise both children are one tenant. */
static int tl_round(const char *self, const char *salusd, const char *const *args, int n_a, int n_b,
                    double warm_s, double window_s, double *share_a)
{
    const char *all[48] = {"--ipc-mode", "0666", "--device", "cpu"};
    size_t k = 4;
    for (; args && args[k - 4] && k < 44; k++)
        all[k] = args[k - 4];
    all[k] = NULL;
    sl_ts_salusd srv;
    if (sl_ts_salusd_start(&srv, salusd, "tenants", all, false) != SL_OK) {
        fprintf(stderr, "cannot start salusd\n");
        return -1;
    }
    int status = -1;
    salus_client *c = NULL;
    pid_t pa = 0, pb = 0;
    if (chmod(srv.dir, 0755) != 0) { /* the tenants' users reach the socket */
        perror("chmod");
        goto out;
    }
    char secs[32], na[8], nb[8], ua[16], ub[16];
    snprintf(secs, sizeof secs, "%.3f", warm_s + window_s + 1.0);
    snprintf(na, sizeof na, "%d", n_a);
    snprintf(nb, sizeof nb, "%d", n_b);
    snprintf(ua, sizeof ua, "%u", TL_UID_A);
    snprintf(ub, sizeof ub, "%u", TL_UID_B);
    const char *argv_a[] = {self, "--tenant-child", ua, na, secs, srv.url, NULL};
    const char *argv_b[] = {self, "--tenant-child", ub, nb, secs, srv.url, NULL};
    if (sl_ts_spawn(argv_a, NULL, &pa) != SL_OK || sl_ts_spawn(argv_b, NULL, &pb) != SL_OK) {
        fprintf(stderr, "cannot start the tenants\n");
        goto out;
    }
    if (salus_connect(srv.url, &c) != SALUS_OK) {
        fprintf(stderr, "cannot connect to salusd\n");
        goto out;
    }
    char owner_a[32], owner_b[32];
    snprintf(owner_a, sizeof owner_a, "uid %u", TL_UID_A);
    snprintf(owner_b, sizeof owner_b, "uid %u", TL_UID_B);
    double a0, b0, a1, b1;
    sl_ts_sleep_ms((long) (warm_s * 1000));
    if (tl_sample(c, owner_a, owner_b, &a0, &b0) != 0)
        goto out_status;
    sl_ts_sleep_ms((long) (window_s * 1000));
    if (tl_sample(c, owner_a, owner_b, &a1, &b1) != 0)
        goto out_status;
    if (a1 - a0 + b1 - b0 <= 0) {
        fprintf(stderr, "no device time attained in the window\n");
        goto out;
    }
    *share_a = (a1 - a0) / (a1 - a0 + b1 - b0);
    status = 0;
    goto out;
out_status:
    fprintf(stderr, "cannot read the status\n");
out:
    salus_disconnect(c);
    int ra = pa ? sl_ts_wait(pa, 60) : 0, rb = pb ? sl_ts_wait(pb, 60) : 0;
    if (status == 0 && (ra != 0 || rb != 0)) {
        fprintf(stderr, "a tenant failed (exit %d and %d)\n", ra, rb);
        status = -1;
    }
    (void) sl_ts_salusd_stop(&srv, 10);
    sl_ts_tempdir_remove(srv.dir);
    return status;
}

/* Whether the two tenants can be told apart: only root can run them as two
 * users. */
static bool tl_can_split(void)
{
    return geteuid() == 0;
}

#endif
