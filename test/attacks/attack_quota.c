/* Device memory on a shared host with the default flags (server/tenants.h):
 *
 *   device-memory-hog  a tenant declares nearly all of the device's free
 *                      memory in one session, then as much as it can get
 *                      in more sessions, and holds them. Its first ask must
 *                      be refused for its quota, all it holds must stay
 *                      within the default quota (the memory divided by
 *                      --expected-tenants), and another user must still get
 *                      a session of an eighth of the memory beside it
 *
 * The hog runs as nobody in this program run again; the other user is
 * daemon (runuser), so that both are tenants with limits (needs root). */
#include "attack.h"
#include "client_internal.h"
#include "sl_test.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define HOG_SESSIONS 16
/* salusd's default --expected-tenants */
#define EXPECTED_TENANTS 4

/* The device's capacity and free bytes (its largest free block) as c sees
 * them; false on error. */
static bool memory_of(salus_client *c, uint64_t *capacity, uint64_t *free_bytes)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep = NULL;
    if (sl_client_call(c, &req, &rep) != SALUS_OK)
        return false;
    bool ok = rep->body_case == SALUS__REPLY__BODY_STATUS && rep->status->memory;
    if (ok) {
        *capacity = rep->status->memory->capacity;
        *free_bytes = rep->status->memory->largest_free;
    }
    salus__reply__free_unpacked(rep, NULL);
    return ok;
}

/* ---- the tenants' parts ---------------------------------------------- */

/* hog URL HOLD_FILE REPORT: nearly all free memory in one session, then
 * whatever it can get, held until HOLD_FILE appears. Writes "hog first=<rc>
 * held=<bytes> sessions=<n> capacity=<bytes>" into REPORT (a new file);
 * exits 0 when it could run at all. */
static int tenant_hog(const char *url, const char *hold_file, const char *report)
{
    salus_client *c;
    uint64_t capacity, free_bytes;
    if (salus_connect(url, &c) != SALUS_OK || !memory_of(c, &capacity, &free_bytes))
        return 2;
    salus_session *s[HOG_SESSIONS] = {0};
    salus_session_opts o = {.name = "hog", .ephemeral_bytes = MIB};
    o.persistent_bytes = free_bytes - 2 * MIB;
    int first = salus_session_open(c, &o, &s[0]);
    bool for_quota = first == SALUS_EEXHAUSTED && strstr(salus_last_error(c), "memory quota");
    printf("tenant: session declaring %llu of the %llu bytes of the largest free block -> %s %s\n",
           (unsigned long long) o.persistent_bytes, (unsigned long long) free_bytes,
           sl_errname(first), first ? salus_last_error(c) : "");
    uint64_t held = first == SALUS_OK ? o.persistent_bytes + o.ephemeral_bytes : 0;
    int n = first == SALUS_OK;
    /* then as much as it can get: each ask halves until it fits */
    for (uint64_t ask = free_bytes / 2; n < HOG_SESSIONS && ask >= MIB;) {
        o.persistent_bytes = ask;
        if (salus_session_open(c, &o, &s[n]) == SALUS_OK) {
            held += ask + o.ephemeral_bytes;
            n++;
        } else {
            ask /= 2;
        }
    }
    printf("tenant: holds %llu bytes in %d sessions\n", (unsigned long long) held, n);
    fflush(stdout);
    FILE *f = fopen(report, "wx");
    if (!f)
        return 2;
    fprintf(f, "hog first=%d quota=%d held=%llu sessions=%d capacity=%llu\n", first, for_quota,
            (unsigned long long) held, n, (unsigned long long) capacity);
    fclose(f);
    for (int i = 0; i < 600 && access(hold_file, F_OK) != 0; i++)
        usleep(100 * 1000);
    salus_disconnect(c);
    return 0;
}

/* other URL: one session of an eighth of the memory; exits 0 when it
 * opened. */
static int tenant_other(const char *url)
{
    salus_client *c;
    uint64_t capacity, free_bytes;
    if (salus_connect(url, &c) != SALUS_OK || !memory_of(c, &capacity, &free_bytes))
        return 2;
    salus_session *s;
    salus_session_opts o = {
        .name = "other", .persistent_bytes = capacity / 8 - MIB, .ephemeral_bytes = MIB};
    int rc = salus_session_open(c, &o, &s);
    printf(
        "other tenant (uid %d): session declaring %llu bytes (largest free block %llu) -> %s %s\n",
        (int) getuid(), (unsigned long long) (o.persistent_bytes + o.ephemeral_bytes),
        (unsigned long long) free_bytes, sl_errname(rc), rc ? salus_last_error(c) : "");
    salus_disconnect(c);
    return rc == SALUS_OK ? 0 : 1;
}

/* ---- the attack ------------------------------------------------------- */

static void device_memory_hog(void **state)
{
    (void) state;
    const char *name = "device-memory-hog";
    if (!sl_attack_may_run(name, sl_attack_cross_user() && access("/usr/sbin/runuser", X_OK) == 0,
                           "needs root and runuser: two tenants of other users than the operator"))
        skip();
    sl_attack a;
    sl_attack_begin(&a, name, NULL);
    char hold[] = "/tmp/salus-attack-hog-XXXXXX";
    int fd = mkstemp(hold);
    assert_true(fd >= 0);
    close(fd);
    unlink(hold);
    char out[sizeof hold + 8];
    snprintf(out, sizeof out, "%s.report", hold);
    pid_t hog = sl_attack_spawn_tenant((const char *[]){"hog", a.srv.url, hold, out, NULL});
    int first = -1, for_quota = 0, sessions = 0;
    unsigned long long held = 0, capacity = 0;
    bool reported = false;
    for (int i = 0; i < 300 && !reported; i++) {
        usleep(100 * 1000);
        FILE *f = fopen(out, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            if (sscanf(line, "hog first=%d quota=%d held=%llu sessions=%d capacity=%llu", &first,
                       &for_quota, &held, &sessions, &capacity) == 5)
                reported = true;
        }
        if (f)
            fclose(f);
    }
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    int other = -1;
    if (reported) {
        other = sl_test_wait(sl_test_exec("/usr/sbin/runuser", "-u",
                                          (const char *[]){"daemon", "--", self, "--attack-tenant",
                                                           "other", a.srv.url, NULL}),
                             60);
    }
    fd = open(hold, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
    int hog_rc = sl_test_wait(hog, 60);
    unlink(hold);
    unlink(out);
    uint64_t quota = capacity / EXPECTED_TENANTS;
    char detail[320];
    snprintf(detail, sizeof detail,
             "first ask (nearly all free memory) %s; the hog holds %llu bytes in %d sessions "
             "(default quota %llu of %llu); another user's session of an eighth %s",
             first == SALUS_EEXHAUSTED && for_quota ? "refused for its quota"
             : first == SALUS_OK                    ? "GRANTED"
                                                    : "refused, NOT FOR ITS QUOTA",
             held, sessions, (unsigned long long) quota, capacity,
             other == 0 ? "opened" : "REFUSED");
    sl_attack_expect(&a, reported && hog_rc == 0, "the hog did not run");
    sl_attack_expect(&a, first == SALUS_EEXHAUSTED && for_quota,
                     "the hog's ask for nearly all device memory was not refused for its quota");
    sl_attack_expect(&a, held <= quota, "the hog holds more than the default quota");
    sl_attack_expect(&a, other == 0, "another user got no session beside the hog");
    assert_true(sl_attack_end(&a, detail));
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv)) {
        const char *what = argc > 2 ? argv[2] : "";
        if (strcmp(what, "hog") == 0 && argc == 6)
            return tenant_hog(argv[3], argv[4], argv[5]);
        if (strcmp(what, "other") == 0 && argc == 4)
            return tenant_other(argv[3]);
        return 3;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(device_memory_hog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
