/* Rights and fair use (server/tenants.h): tenants that try to act as the
 * operator, to take more than their share, or to write into the operator's
 * terminal.
 *
 *   network-operator   an anonymous TLS client and a plain tcp client try
 *                      SetPolicy and SetSession on the victim's session;
 *                      a client of the operator listener may
 *   greedy-tenant      a tenant asks for priority INT32_MAX and weight
 *                      999999, raises them with SetSession, opens sessions
 *                      beyond its limit and a quota beyond its memory,
 *                      registers a graph whose peak passes the quota, and
 *                      trains flat out under the priority policy
 *   hostile-names      a session named with newlines and terminal escapes,
 *                      an op type likewise; and the tenant's Status must not
 *                      list the victim's session
 *
 * Each tenant part runs as nobody (when root) in this program run again
 * (sl_attack_exec_tenant), and exits 0 when salusd refused or clamped
 * everything it should. */
#include "attack.h"
#include "client_internal.h"
#include "sl_test.h"
#include "sl_testsupport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* how long the hostile-names tenant keeps its session open */
#define HOLD_S 4
#define EVIL_NAME                                                                                  \
    "evil\n2026-01-01T00:00:00.000Z INFO  srv.fake root logged in\x1b[2J\x1b]0;owned\x07"

/* ---- helpers for both sides ---------------------------------------- */

static Salus__Reply *status_of(salus_client *c)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep = NULL;
    if (sl_client_call(c, &req, &rep) != SALUS_OK)
        return NULL;
    if (rep->body_case != SALUS__REPLY__BODY_STATUS) {
        salus__reply__free_unpacked(rep, NULL);
        return NULL;
    }
    return rep;
}

static const Salus__SessionStatus *session_in(const Salus__StatusReply *st, uint64_t id)
{
    for (size_t i = 0; i < st->n_sessions; i++)
        if (st->sessions[i]->id == id)
            return st->sessions[i];
    return NULL;
}

/* Prints what a tenant saw, and whether it was what salusd should say. */
static bool expect(const char *what, int got, int want, salus_client *c)
{
    bool ok = got == want;
    printf("tenant: %s -> %s%s%s%s\n", what, sl_errname(got), ok ? "" : " (expected ",
           ok ? "" : sl_errname(want), ok ? "" : ")");
    if (got != SALUS_OK && c)
        printf("tenant:   message: %s\n", salus_last_error(c));
    return ok;
}

/* ---- the tenants' parts ---------------------------------------------- */

/* network URL VICTIM: operator requests from a network client. */
static int tenant_network(const char *url, uint64_t victim)
{
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc != SALUS_OK) {
        printf("tenant: %s refused the connection (%s): no rights either\n", url, sl_errname(rc));
        return 0;
    }
    bool ok = expect("SetPolicy fifo", salus_set_policy(c, "fifo", 1), SALUS_EPERM, c);
    ok &= expect("SetSession victim priority INT32_MAX",
                 salus_set_session(c, victim, 1, INT32_MAX, 0, 0), SALUS_EPERM, c);
    ok &= expect("SetSession victim weight 999999", salus_set_session(c, victim, 0, 0, 1, 999999),
                 SALUS_EPERM, c);
    /* and what it may do: open a session of its own, within the remote
     * tenant's limits */
    salus_session *s;
    salus_session_opts o = {.name = "net", .priority = INT32_MAX, .weight = 999999};
    ok &= expect("OpenSession priority INT32_MAX", salus_session_open(c, &o, &s), SALUS_OK, c);
    Salus__Reply *rep = status_of(c);
    const Salus__SessionStatus *mine =
        rep && s ? session_in(rep->status, salus_session_id(s)) : NULL;
    ok &= mine && mine->priority == 0 && mine->weight <= 1.0;
    ok &=
        rep && !session_in(rep->status, victim) && rep->status->you && !rep->status->you->operator_;
    printf("tenant: own session granted priority %d weight %g; sees %zu sessions\n",
           mine ? mine->priority : -1, mine ? mine->weight : -1.0,
           rep ? rep->status->n_sessions : 0);
    if (rep)
        salus__reply__free_unpacked(rep, NULL);
    salus_disconnect(c);
    return ok ? 0 : 1;
}

/* greedy URL: more than its share, every way it can ask. */
static int tenant_greedy(const char *url)
{
    salus_client *c;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    salus_session *s[4] = {0};
    salus_session_opts o = {.name = "greedy",
                            .priority = INT32_MAX,
                            .weight = 999999,
                            .persistent_bytes = 8 << 20,
                            .ephemeral_bytes = 4 << 20};
    bool ok = expect("OpenSession priority INT32_MAX weight 999999",
                     salus_session_open(c, &o, &s[0]), SALUS_OK, c);
    if (!ok)
        return 1;
    uint64_t id = salus_session_id(s[0]);
    Salus__Reply *rep = status_of(c);
    const Salus__SessionStatus *mine = rep ? session_in(rep->status, id) : NULL;
    ok &= mine && mine->priority == 0 && mine->weight == 2.0;
    const Salus__TenantLimits *you = rep ? rep->status->you : NULL;
    printf("tenant: granted priority %d weight %g (limits: priority %d weight %g sessions %u "
           "memory %llu)\n",
           mine ? mine->priority : -1, mine ? mine->weight : -1.0, you ? you->max_priority : -1,
           you ? you->max_weight : -1.0, you ? you->max_sessions : 0,
           you ? (unsigned long long) you->memory : 0ull);
    if (rep)
        salus__reply__free_unpacked(rep, NULL);
    ok &= expect("SetSession own priority INT32_MAX", salus_set_session(c, id, 1, INT32_MAX, 0, 0),
                 SALUS_EPERM, c);
    ok &= expect("SetSession own weight 999999", salus_set_session(c, id, 0, 0, 1, 999999),
                 SALUS_EPERM, c);
    ok &= expect("SetSession own weight 1.5 (within)", salus_set_session(c, id, 0, 0, 1, 1.5),
                 SALUS_OK, c);
    salus_session_opts small = {
        .name = "more", .persistent_bytes = 1 << 20, .ephemeral_bytes = 1 << 20};
    ok &= expect("second session", salus_session_open(c, &small, &s[1]), SALUS_OK, c);
    ok &= expect("third session", salus_session_open(c, &small, &s[2]), SALUS_OK, c);
    ok &= expect("fourth session (limit 3)", salus_session_open(c, &small, &s[3]), SALUS_EEXHAUSTED,
                 c);
    ok &= strstr(salus_last_error(c), "too many sessions for uid") != NULL;
    (void) salus_session_close(s[2]);
    s[2] = NULL;
    salus_session_opts big = {.name = "big", .persistent_bytes = 200ull << 20};
    ok &= expect("session declaring 200 MiB (quota 64 MiB)", salus_session_open(c, &big, &s[2]),
                 SALUS_EEXHAUSTED, c);
    ok &= strstr(salus_last_error(c), "memory quota") != NULL;
    /* a small session whose graph then needs more ephemeral memory than
     * the quota has left */
    salus_session_opts grow = {
        .name = "grow", .persistent_bytes = 4 << 20, .ephemeral_bytes = 1 << 20};
    ok &= expect("small session", salus_session_open(c, &grow, &s[2]), SALUS_OK, c);
    salus_model *wide = salus_model_new(1, (const int64_t[]){16});
    salus_optimizer plain = {.kind = SALUS_SGD, .lr = 0.01f};
    if (s[2] && wide && !salus_model_dense(wide, 16384))
        ok &= expect("its graph with a 64 MiB peak",
                     salus_model_compile(wide, s[2], &plain, 1024, 1, 3), SALUS_EEXHAUSTED, c) &&
              strstr(salus_last_error(c), "memory quota") != NULL;
    salus_model_free(wide);

    /* flat out for a few seconds at whatever priority it was given: at
     * INT32_MAX under the priority policy this would starve the victim */
    salus_model *m = salus_model_new(1, (const int64_t[]){256});
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    if (!m || salus_model_dense(m, 512) || salus_model_relu(m) || salus_model_dense(m, 10) ||
        salus_model_compile(m, s[0], &sgd, 128, 1, 3) != SALUS_OK) {
        printf("tenant: cannot build its model: %s\n", salus_last_error(c));
        return 1;
    }
    static float x[128 * 256];
    static int32_t y[128];
    for (int i = 0; i < 128; i++)
        y[i] = i % 10;
    int steps = 0;
    for (time_t t0 = time(NULL); time(NULL) - t0 < 4; steps++)
        if (salus_model_train_step(m, x, y, NULL) != SALUS_OK)
            break;
    printf("tenant: trained %d steps at its granted priority\n", steps);
    salus_model_free(m);
    salus_disconnect(c);
    return ok ? 0 : 1;
}

/* names URL VICTIM: hostile text, and a look at the others' sessions. */
static int tenant_names(const char *url, uint64_t victim)
{
    salus_client *c;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    salus_session *s;
    salus_session_opts o = {.name = EVIL_NAME};
    bool ok = expect("OpenSession with a hostile name", salus_session_open(c, &o, &s), SALUS_OK, c);
    if (!ok)
        return 1;
    Salus__Reply *rep = status_of(c);
    const Salus__SessionStatus *mine = rep ? session_in(rep->status, salus_session_id(s)) : NULL;
    ok &= mine && !strpbrk(mine->name, "\n\x1b\x07");
    ok &= rep && rep->status->n_sessions == 1 && !session_in(rep->status, victim);
    printf("tenant: its name reads back as '%s'; it sees %zu session(s), the victim's %s\n",
           mine ? mine->name : "?", rep ? rep->status->n_sessions : 0,
           rep && session_in(rep->status, victim) ? "INCLUDED" : "not");
    if (rep)
        salus__reply__free_unpacked(rep, NULL);

    /* an op type that is a terminal escape: the refusal quotes it escaped */
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
    Salus__Graph g = SALUS__GRAPH__INIT;
    Salus__Op op = SALUS__OP__INIT;
    Salus__Op *ops[1] = {&op};
    op.type = "\x1b]0;owned\x07\nrelu";
    g.n_ops = 1;
    g.ops = ops;
    rg.graph = &g;
    req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req.register_graph = &rg;
    Salus__Reply *r2 = NULL;
    int rc = sl_client_session_call(s, &req, &r2);
    const char *msg = salus_last_error(c);
    ok &= rc == SALUS_EINVAL && !strpbrk(msg, "\n\x1b\x07");
    printf("tenant: hostile op type -> %s: %s\n", sl_errname(rc), msg);
    if (rc == SALUS_OK)
        salus__reply__free_unpacked(r2, NULL);
    /* the session stays open while the operator looks at salusctl status */
    printf("tenant: holding its session\n");
    fflush(stdout);
    sleep(HOLD_S);
    salus_disconnect(c);
    return ok ? 0 : 1;
}

/* ---- the attacks ------------------------------------------------------ */

/* The victim's share as the operator sees it; false if it changed. */
static bool victim_unchanged(sl_attack *a, const char *policy, char *why, size_t len)
{
    salus_client *c = NULL;
    if (salus_connect(a->srv.url, &c) != SALUS_OK) {
        snprintf(why, len, "cannot connect as the operator");
        return false;
    }
    Salus__Reply *rep = status_of(c);
    const Salus__SessionStatus *v = rep ? session_in(rep->status, a->victim_session) : NULL;
    bool ok = v && v->priority == 0 && v->weight == 1.0 && strcmp(rep->status->policy, policy) == 0;
    snprintf(why, len, "victim priority %d weight %g, policy %s", v ? v->priority : -1,
             v ? v->weight : -1.0, rep ? rep->status->policy : "?");
    if (rep)
        salus__reply__free_unpacked(rep, NULL);
    salus_disconnect(c);
    return ok;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *) &sa, &len) != 0)
        fail_msg("no free port");
    close(fd);
    return ntohs(sa.sin_port);
}

/* A CA and server certificate for 127.0.0.1, and an operator CA with one
 * operator client certificate, in dir (readable by the tenant). */
static bool make_pki(const char *dir)
{
    return sl_ts_pki_ca(dir, "ca", "attack-ca") == SL_OK &&
           sl_ts_pki_ca(dir, "opca", "attack-op-ca") == SL_OK &&
           sl_ts_pki_cert(dir, "server", "127.0.0.1", "ca", "127.0.0.1") == SL_OK &&
           sl_ts_pki_cert(dir, "op", "operator", "opca", NULL) == SL_OK;
}

static void network_operator(void **state)
{
    (void) state;
    char dir[] = "/tmp/salus-attack-pki-XXXXXX";
    if (!sl_ts_have_openssl() || !mkdtemp(dir) || chmod(dir, 0755) || !make_pki(dir)) {
        sl_attack_skip("network-operator", "openssl is not available to make certificates");
        skip();
    }
    char tls[64], tcp[64], op[64], crt[400], key[400], ca[400], opca[400], opcrt[400], opkey[400];
    snprintf(tls, sizeof tls, "tls+tcp://127.0.0.1:%d", free_port());
    snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", free_port());
    snprintf(op, sizeof op, "tls+tcp://127.0.0.1:%d", free_port());
    snprintf(crt, sizeof crt, "%s/server.crt", dir);
    snprintf(key, sizeof key, "%s/server.key", dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    snprintf(opca, sizeof opca, "%s/opca.crt", dir);
    snprintf(opcrt, sizeof opcrt, "%s/op.crt", dir);
    snprintf(opkey, sizeof opkey, "%s/op.key", dir);
    sl_attack a;
    sl_attack_begin(&a, "network-operator",
                    (const char *[]){"--listen", tls, "--listen", tcp, "--allow-plain-tcp",
                                     "--tls-cert", crt, "--tls-key", key,
                                     /* the weakest ordinary listener: anyone may connect */
                                     "--tls-allow-anonymous", "--operator-listen", op,
                                     "--operator-tls-ca", opca, NULL});
    char victim[32], why[160] = "";
    snprintf(victim, sizeof victim, "%llu", (unsigned long long) a.victim_session);
    setenv("SALUS_TLS_CA", ca, 1); /* the tenant verifies the server, shows no certificate */
    int rc_tls = sl_attack_exec_tenant((const char *[]){"network", tls, victim, NULL}, 60);
    int rc_tcp = sl_attack_exec_tenant((const char *[]){"network", tcp, victim, NULL}, 60);
    bool unchanged = victim_unchanged(&a, "fair", why, sizeof why);

    /* the operator's own certificate on the operator listener works */
    setenv("SALUS_TLS_CERT", opcrt, 1);
    setenv("SALUS_TLS_KEY", opkey, 1);
    salus_client *c = NULL;
    int op_rc = salus_connect(op, &c);
    if (op_rc == SALUS_OK)
        op_rc = salus_set_session(c, a.victim_session, 0, 0, 1, 1.0);
    salus_disconnect(c);
    /* without it the operator listener lets nobody in */
    unsetenv("SALUS_TLS_CERT");
    unsetenv("SALUS_TLS_KEY");
    int anon_op = sl_attack_exec_tenant((const char *[]){"network", op, victim, NULL}, 60);
    unsetenv("SALUS_TLS_CA");

    char detail[320];
    snprintf(detail, sizeof detail,
             "anonymous TLS tenant %s, plain tcp tenant %s, anonymous on the operator listener "
             "%s; %s; operator certificate %s",
             rc_tls == 0 ? "refused" : "GOT THROUGH", rc_tcp == 0 ? "refused" : "GOT THROUGH",
             anon_op == 0 ? "refused" : "GOT THROUGH", why, sl_errname(op_rc));
    sl_attack_expect(&a, rc_tls == 0, "an anonymous TLS tenant got through");
    sl_attack_expect(&a, rc_tcp == 0, "a plain tcp tenant got through");
    sl_attack_expect(&a, anon_op == 0, "an anonymous client got through the operator listener");
    sl_attack_expect(&a, unchanged, "the victim's share or the policy changed");
    sl_attack_expect(&a, op_rc == SALUS_OK, "the operator certificate was refused");
    bool held = sl_attack_end(&a, detail);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    (void) !system(rm);
    assert_true(held);
    assert_int_equal(rc_tls, 0);
    assert_int_equal(rc_tcp, 0);
    assert_int_equal(anon_op, 0);
    assert_true(unchanged);
    assert_sl_ok(op_rc);
}

static void greedy_tenant(void **state)
{
    (void) state;
    sl_attack a;
    /* the victim (root) is an operator: the limits are the tenant's */
    sl_attack_begin(&a, "greedy-tenant",
                    (const char *[]){"--policy", "priority", "--tenant-limits",
                                     "priority=0,weight=2,sessions=3,memory=64M", NULL});
    char why[160];
    int rc = sl_attack_exec_tenant((const char *[]){"greedy", a.srv.url, NULL}, 90);
    bool unchanged = victim_unchanged(&a, "priority", why, sizeof why);
    char detail[256];
    snprintf(detail, sizeof detail, "tenant %s; %s",
             rc == 0 ? "clamped and refused as configured" : "GOT MORE THAN ITS LIMITS", why);
    sl_attack_expect(&a, rc == 0, "the tenant got more than its limits");
    sl_attack_expect(&a, unchanged, "the victim's share changed");
    assert_true(sl_attack_end(&a, detail));
    assert_int_equal(rc, 0);
    assert_true(unchanged);
}

static void hostile_names(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin_logged(&a, "hostile-names", (const char *[]){"--log-level", "info", NULL});
    char victim[32];
    snprintf(victim, sizeof victim, "%llu", (unsigned long long) a.victim_session);
    pid_t tenant = sl_attack_spawn_tenant((const char *[]){"names", a.srv.url, victim, NULL});

    /* the operator's view while the tenant holds its session: the name is
     * there, escaped */
    salus_client *c = NULL;
    bool status_ok = false;
    if (salus_connect(a.srv.url, &c) == SALUS_OK) {
        for (int i = 0; i < HOLD_S * 10 && !status_ok; i++) {
            char *text = NULL;
            (void) salus_status_text(c, &text);
            status_ok = text && strstr(text, "evil\\n2026") && !strpbrk(text, "\x1b\x07");
            if (status_ok)
                printf("%s", text);
            salus_free(text);
            usleep(100 * 1000);
        }
    }
    salus_disconnect(c);
    int rc = sl_test_wait(tenant, 60);
    static char log[1 << 20];
    bool logged = sl_attack_log_has(&a, "evil\\n2026-01-01", log, sizeof log);
    bool log_ok = logged && !strpbrk(log, "\x1b\x07") && !strstr(log, "\n2026-01-01T00:00:00");
    char detail[256];
    snprintf(detail, sizeof detail, "tenant %s; status %s; log %s",
             rc == 0 ? "saw only its own session, escaped" : "SAW TOO MUCH OR RAW TEXT",
             status_ok ? "escaped" : "RAW OR MISSING",
             log_ok   ? "escaped"
             : logged ? "RAW"
                      : "MISSING");
    sl_attack_expect(&a, rc == 0, "the tenant saw another's session or raw text");
    sl_attack_expect(&a, status_ok, "status showed the name raw (or not at all)");
    sl_attack_expect(&a, log_ok, "the log has the name raw (or not at all)");
    assert_true(sl_attack_end(&a, detail));
    assert_int_equal(rc, 0);
    assert_true(status_ok);
    assert_true(log_ok);
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv)) {
        const char *what = argc > 2 ? argv[2] : "";
        if (strcmp(what, "network") == 0 && argc == 5)
            return tenant_network(argv[3], strtoull(argv[4], NULL, 10));
        if (strcmp(what, "greedy") == 0 && argc == 4)
            return tenant_greedy(argv[3]);
        if (strcmp(what, "names") == 0 && argc == 5)
            return tenant_names(argv[3], strtoull(argv[4], NULL, 10));
        return 3;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(network_operator),
        cmocka_unit_test(greedy_tenant),
        cmocka_unit_test(hostile_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
