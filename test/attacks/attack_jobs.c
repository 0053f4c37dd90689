/* Cluster job steps (server/jobs.h): what a tenant can get by being the
 * user of a registered step. The operator (this test, as root, doing what
 * the Slurm plugin does) registers a step of the tenant's uid with a small
 * memory quota and a priority above the tenant's own limit.
 *
 *   job-step-outsider  a process of the step's user that names no step
 *                      (no SALUS_JOB: it runs outside the job) opens a
 *                      session asking priority INT32_MAX. It must be the
 *                      user's own session: the user's priority limit (0),
 *                      its owner "uid N", not the step's; and it must
 *                      outlive the step (CloseJob closes none of it)
 *   job-step-alias     the tenant names step S + 2^31 of the job when only
 *                      S is registered: refused (PERMISSION_DENIED). The
 *                      operator then closes step S + 2^31: the session the
 *                      tenant opened under S stays open
 *
 * The tenant parts run as nobody in this program run again
 * (sl_attack_exec_tenant); they need root to run as another user than the
 * operator. */
#include "attack.h"
#include "client_internal.h"
#include "sl_test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define JOB 4242u
#define STEP 5u
#define STEP_PRIORITY 7
#define STEP_MEMORY (8ull << 20)
/* how long the outsider keeps its session open */
#define HOLD_S 6

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

/* The session named name in c's view: its priority and owner; false when
 * it is not there. */
static bool find_session(salus_client *c, const char *name, int *priority, char *owner, size_t len)
{
    Salus__Reply *rep = status_of(c);
    bool found = false;
    for (size_t i = 0; rep && i < rep->status->n_sessions && !found; i++) {
        const Salus__SessionStatus *s = rep->status->sessions[i];
        if (strcmp(s->name, name) != 0)
            continue;
        found = true;
        *priority = s->priority;
        snprintf(owner, len, "%s", s->owner);
    }
    if (rep)
        salus__reply__free_unpacked(rep, NULL);
    return found;
}

/* ---- the tenants' parts ---------------------------------------------- */

/* outsider URL: a session of the step's user with no step named, held
 * HOLD_S seconds; exits 0 when it was opened and is still open then. */
static int tenant_outsider(const char *url)
{
    unsetenv("SALUS_JOB");
    salus_client *c;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    salus_session *s;
    salus_session_opts o = {.name = "outsider",
                            .priority = INT32_MAX,
                            .persistent_bytes = 1 << 20,
                            .ephemeral_bytes = 1 << 20};
    int rc = salus_session_open(c, &o, &s);
    printf("tenant: OpenSession without SALUS_JOB -> %s %s\n", sl_errname(rc),
           rc ? salus_last_error(c) : "");
    if (rc)
        return 1;
    fflush(stdout);
    sleep(HOLD_S);
    int prio;
    char owner[96];
    bool alive = find_session(c, "outsider", &prio, owner, sizeof owner);
    printf("tenant: after %d s its session is %s\n", HOLD_S, alive ? "open" : "GONE");
    salus_disconnect(c);
    return alive ? 0 : 1;
}

/* alias URL HOLD_FILE: names step STEP + 2^31 (must be refused), then
 * opens a session under STEP and holds it until HOLD_FILE appears; exits
 * 0 when the alias was refused and the real step's session stayed open. */
static int tenant_alias(const char *url, const char *hold_file)
{
    char alias[48];
    snprintf(alias, sizeof alias, "%u.%u", JOB, STEP + (1u << 31));
    setenv("SALUS_JOB", alias, 1);
    salus_client *c;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    salus_session *s;
    salus_session_opts o = {.name = "alias",
                            .priority = INT32_MAX,
                            .persistent_bytes = 1 << 20,
                            .ephemeral_bytes = 1 << 20};
    int rc = salus_session_open(c, &o, &s);
    printf("tenant: OpenSession as step %s (only %u.%u is registered) -> %s %s\n", alias, JOB, STEP,
           sl_errname(rc), rc ? salus_last_error(c) : "");
    bool ok = rc == SALUS_EPERM;
    char real[48];
    snprintf(real, sizeof real, "%u.%u", JOB, STEP);
    setenv("SALUS_JOB", real, 1);
    o.name = "in-step";
    rc = salus_session_open(c, &o, &s);
    printf("tenant: OpenSession as step %s -> %s %s\n", real, sl_errname(rc),
           rc ? salus_last_error(c) : "");
    if (rc)
        return 1;
    fflush(stdout);
    for (int i = 0; i < 300 && access(hold_file, F_OK) != 0; i++)
        usleep(100 * 1000);
    int prio;
    char owner[96];
    bool alive = find_session(c, "in-step", &prio, owner, sizeof owner);
    printf("tenant: its session in step %s is %s\n", real, alive ? "open" : "GONE");
    salus_disconnect(c);
    return ok && alive ? 0 : 1;
}

/* ---- the attacks ------------------------------------------------------ */

/* The operator's client, and the tenant's step registered. */
static salus_client *register_step(sl_attack *a)
{
    salus_client *op = NULL;
    assert_int_equal(salus_connect(a->srv.url, &op), SALUS_OK);
    assert_int_equal(salus_job_register(op, JOB, STEP, SL_ATTACK_UID, STEP_MEMORY, STEP_PRIORITY),
                     SALUS_OK);
    return op;
}

static void step_outsider(void **state)
{
    (void) state;
    const char *name = "job-step-outsider";
    if (!sl_attack_may_run(name, sl_attack_cross_user(),
                           "needs root: the tenant must be another user than the operator"))
        skip();
    sl_attack a;
    sl_attack_begin(&a, name, NULL);
    salus_client *op = register_step(&a);
    pid_t tenant = sl_attack_spawn_tenant((const char *[]){"outsider", a.srv.url, NULL});
    int prio = -1;
    char owner[96] = "";
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        seen = find_session(op, "outsider", &prio, owner, sizeof owner);
        if (!seen)
            usleep(50 * 1000);
    }
    char own[32];
    snprintf(own, sizeof own, "uid %u", SL_ATTACK_UID);
    /* the step ends while the outsider still runs */
    uint32_t closed = 99;
    int close_rc = salus_job_close(op, JOB, STEP, 0, &closed);
    int rc = sl_test_wait(tenant, 60);
    salus_disconnect(op);
    char detail[256];
    snprintf(detail, sizeof detail,
             "outsider session %s, priority %d (user limit 0, step %d), owner '%s'; CloseJob of "
             "the step closed %u; the outsider %s",
             seen ? "opened" : "NOT OPENED", prio, STEP_PRIORITY, owner, closed,
             rc == 0 ? "kept its session" : "LOST ITS SESSION");
    sl_attack_expect(&a, seen, "the outsider's session did not open");
    sl_attack_expect(&a, prio == 0, "the outsider got the step's priority");
    sl_attack_expect(&a, strcmp(owner, own) == 0, "the outsider was counted under the step");
    sl_attack_expect(&a, close_rc == SALUS_OK && closed == 0,
                     "closing the step closed the outsider's session");
    sl_attack_expect(&a, rc == 0, "the outsider lost its session");
    assert_true(sl_attack_end(&a, detail));
}

static void step_alias(void **state)
{
    (void) state;
    const char *name = "job-step-alias";
    if (!sl_attack_may_run(name, sl_attack_cross_user(),
                           "needs root: the tenant must be another user than the operator"))
        skip();
    sl_attack a;
    sl_attack_begin(&a, name, NULL);
    salus_client *op = register_step(&a);
    char hold[] = "/tmp/salus-attack-alias-XXXXXX";
    int fd = mkstemp(hold);
    assert_true(fd >= 0);
    close(fd);
    unlink(hold);
    pid_t tenant = sl_attack_spawn_tenant((const char *[]){"alias", a.srv.url, hold, NULL});
    int prio = -1;
    char owner[96] = "";
    bool seen = false;
    for (int i = 0; i < 100 && !seen; i++) {
        seen = find_session(op, "in-step", &prio, owner, sizeof owner);
        if (!seen)
            usleep(50 * 1000);
    }
    int aprio;
    char aowner[96] = "";
    bool alias_open = find_session(op, "alias", &aprio, aowner, sizeof aowner);
    /* what the plugin would send at the end of a step S + 2^31 */
    uint32_t closed = 99;
    (void) salus_job_close(op, JOB, STEP + (1u << 31), 0, &closed);
    fd = open(hold, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
    int rc = sl_test_wait(tenant, 60);
    unlink(hold);
    salus_disconnect(op);
    char detail[256];
    snprintf(detail, sizeof detail,
             "session as step %u.%u %s; closing step %u.%u closed %u of step %u.%u's sessions; "
             "tenant %s",
             JOB, STEP + (1u << 31), alias_open ? "OPENED" : "refused", JOB, STEP + (1u << 31),
             closed, JOB, STEP, rc == 0 ? "held" : "GOT THROUGH OR LOST ITS SESSION");
    sl_attack_expect(&a, seen, "the session in the real step did not open");
    sl_attack_expect(&a, !alias_open, "a session opened as an unregistered step's alias");
    sl_attack_expect(&a, closed == 0, "closing the alias step closed the real step's session");
    sl_attack_expect(&a, rc == 0, "the tenant got through or lost its session");
    assert_true(sl_attack_end(&a, detail));
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv)) {
        const char *what = argc > 2 ? argv[2] : "";
        if (strcmp(what, "outsider") == 0 && argc == 4)
            return tenant_outsider(argv[3]);
        if (strcmp(what, "alias") == 0 && argc == 5)
            return tenant_alias(argv[3], argv[4]);
        return 3;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(step_outsider),
        cmocka_unit_test(step_alias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
