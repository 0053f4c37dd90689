/* privilege-drop: salusd started as root with --user runs as that user,
 * in every thread, with no capability left and no way back to root, still
 * serves the victim and other tenants, and removes its socket file as it
 * exits. A tenant (nobody) that is not salusd's new user still gets no
 * operator rights.
 *
 * The user is a dedicated one made here when missing (salus-attack, a
 * system user without a home or shell): with nobody, every nobody process
 * on the host would share salusd's uid and so be an operator. */
#include "attack.h"
#include "sl_test.h"

#include <dirent.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN_USER "salus-attack"

/* The tenant: SetPolicy must still be refused to it. */
static int tenant_operator(const char *url)
{
    salus_client *c;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    int rc = salus_set_policy(c, "fifo", 0);
    printf("tenant: SetPolicy -> %s (%s)\n", sl_errname(rc), salus_last_error(c));
    salus_disconnect(c);
    return rc == SALUS_EPERM ? 0 : 1;
}

/* Every thread of pid: all uids want_uid, no capability; why says the
 * first thread that differs. */
static bool all_threads_dropped(pid_t pid, uid_t want_uid, char *why, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int) pid);
    DIR *d = opendir(path);
    if (!d) {
        snprintf(why, len, "cannot list %s", path);
        return false;
    }
    int threads = 0;
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char file[128], line[256];
        snprintf(file, sizeof file, "/proc/%d/task/%.20s/status", (int) pid, e->d_name);
        FILE *f = fopen(file, "r");
        if (!f)
            continue;
        threads++;
        while (ok && fgets(line, sizeof line, f)) {
            unsigned long r, ef, sv, fs;
            unsigned long long caps;
            if (sscanf(line, "Uid: %lu %lu %lu %lu", &r, &ef, &sv, &fs) == 4)
                ok = r == want_uid && ef == want_uid && sv == want_uid && fs == want_uid;
            else if (sscanf(line, "CapEff: %llx", &caps) == 1 ||
                     sscanf(line, "CapPrm: %llx", &caps) == 1)
                ok = caps == 0;
            if (!ok)
                snprintf(why, len, "thread %.20s: %.*s", e->d_name, (int) strcspn(line, "\n"),
                         line);
        }
        fclose(f);
    }
    closedir(d);
    if (ok)
        snprintf(why, len, "%d threads as uid %u, CapEff 0", threads, (unsigned) want_uid);
    return ok && threads > 0;
}

static void privilege_drop(void **state)
{
    (void) state;
    if (!sl_attack_cross_user()) {
        sl_attack_skip("privilege-drop", "needs root to start salusd as root");
        skip();
    }
    if (!getpwnam(RUN_USER) &&
        system("useradd --system --no-create-home --shell /usr/sbin/nologin " RUN_USER
               " >/dev/null 2>&1") != 0) {
        sl_attack_skip("privilege-drop", "cannot create the user " RUN_USER);
        skip();
    }
    struct passwd *pw = getpwnam(RUN_USER);
    assert_non_null(pw);
    uid_t uid = pw->pw_uid;
    gid_t gid = pw->pw_gid;
    sl_attack a;
    /* as a deployment would give it /run/salus: a folder of its own that
     * root made (in a directory only root can write), so that it can
     * remove its socket at exit and clients trust it as the folder's owner
     * (client.c) */
    char owner[32];
    snprintf(owner, sizeof owner, "%u:%u", (unsigned) uid, (unsigned) gid);
    setenv("SL_TEST_RUNDIR", "/run", 1);
    setenv("SL_TEST_RUNDIR_OWNER", owner, 1);
    sl_attack_begin(&a, "privilege-drop", (const char *[]){"--user", RUN_USER, NULL});
    unsetenv("SL_TEST_RUNDIR");
    unsetenv("SL_TEST_RUNDIR_OWNER");
    char why[256];
    bool dropped = all_threads_dropped(a.srv.pid, uid, why, sizeof why);
    int rc = sl_attack_exec_tenant((const char *[]){"operator", a.srv.url, NULL}, 60);
    char detail[400];
    snprintf(detail, sizeof detail, "salusd %s (%s); tenant %s", dropped ? "dropped" : "KEPT ROOT",
             why, rc == 0 ? "still no operator" : "GOT OPERATOR RIGHTS");
    sl_attack_expect(&a, dropped, "salusd kept root");
    sl_attack_expect(&a, rc == 0, "the tenant got operator rights");
    bool held = sl_attack_end(&a, detail);
    printf("privilege-drop: socket file %s at exit\n",
           a.socket_removed ? "removed" : "LEFT BEHIND");
    assert_true(held);
    assert_true(dropped);
    assert_int_equal(rc, 0);
    assert_true(a.socket_removed);
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv))
        return argc == 4 && strcmp(argv[2], "operator") == 0 ? tenant_operator(argv[3]) : 3;
    const struct CMUnitTest tests[] = {cmocka_unit_test(privilege_drop)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
