/* The configuration file as a way in:
 *   - config-file-writable: a file another user owns, or one that others
 *     may write, given to salusd with --config (it could give that user an
 *     operator listener and a priority of 1000000): salusd refuses to start
 *     (exit 2) and says why, naming the file;
 *   - config-file-echo: a file root can read and the user cannot
 *     (/etc/shadow, and a root-only file of the test's) given as the
 *     configuration: salusd's error names the line, never its content. */
#include "attack.h"
#include "sl_test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Runs salusd --config path (plus a private socket) and returns its exit
 * status (-1: still running after 10 s, then killed); its output goes to
 * out. */
static int run_salusd(const char *dir, const char *path, char *out, size_t len)
{
    char url[200], log[200];
    snprintf(url, sizeof url, "ipc://%s/s.sock", dir);
    snprintf(log, sizeof log, "%s/salusd.log", dir);
    (void) unlink(log);
    const char *argv[] = {
        sl_test_program("SALUSD"), "--config", path, "--listen", url, "--allow-root", NULL};
    pid_t pid;
    assert_int_equal(sl_ts_spawn(argv, log, &pid), 0);
    int st = sl_ts_wait(pid, 10);
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(out, 1, len - 1, f) : 0;
    if (f)
        fclose(f);
    out[n] = '\0';
    return st;
}

static void writable_config(void **state)
{
    (void) state;
    const char *name = "config-file-writable";
    if (!sl_attack_may_run(name, sl_attack_cross_user(), "needs root to give a file to nobody"))
        return;
    sl_attack_tried(name);
    char dir[] = "/tmp/salus-cfg-XXXXXX", path[128], out[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/salusd.conf", dir);
    const char *why = NULL;
    /* what another user would write there */
    static const char body[] = "operator-listen = tcp://127.0.0.1:19463\nallow-plain-tcp = true\n"
                               "tenant-limits = priority=1000000\n";
    const struct {
        uid_t owner;
        mode_t mode;
        const char *what;
    } cases[] = {{SL_ATTACK_UID, 0644, "owned by nobody"},
                 {0, 0666, "writable by everyone"},
                 {0, 0620, "writable by its group"}};
    char detail[256] = "";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !why; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(body, f);
        fclose(f);
        assert_int_equal(chown(path, cases[i].owner, cases[i].owner ? SL_ATTACK_UID : 0), 0);
        assert_int_equal(chmod(path, cases[i].mode), 0);
        int st = run_salusd(dir, path, out, sizeof out);
        if (st != 2)
            why = cases[i].what;
        else if (!strstr(out, path) || !strstr(out, "refusing"))
            why = "salusd refused it without naming the file and why";
        size_t k = strlen(detail);
        snprintf(detail + k, sizeof detail - k, "%s%s: exit %d", k ? "; " : "", cases[i].what, st);
    }
    char broke[200];
    if (why && strncmp(why, "salusd", 6) != 0) {
        snprintf(broke, sizeof broke, "salusd started with a configuration file %s", why);
        why = broke;
    }
    if (why)
        fprintf(stderr, "salusd said: %s\n", out);
    (void) unlink(path);
    char log[200];
    snprintf(log, sizeof log, "%s/salusd.log", dir);
    (void) unlink(log);
    (void) rmdir(dir);
    assert_true(sl_attack_verdict(name, why, detail));
}

/* The first line of path (root can read it), or "" when it cannot. */
static void first_line(const char *path, char *line, size_t len)
{
    line[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f && fgets(line, (int) len, f))
        line[strcspn(line, "\r\n")] = '\0';
    if (f)
        fclose(f);
}

/* Whether out repeats any 8 bytes in a row of secret. */
static bool leaks(const char *out, const char *secret)
{
    size_t n = strlen(secret);
    for (size_t i = 0; i + 8 <= n; i++) {
        char piece[9];
        memcpy(piece, secret + i, 8);
        piece[8] = '\0';
        if (strstr(out, piece))
            return true;
    }
    return false;
}

static void echoed_config(void **state)
{
    (void) state;
    const char *name = "config-file-echo";
    sl_attack_tried(name);
    char dir[] = "/tmp/salus-cfg-XXXXXX", own[128], out[4096], line[512];
    assert_non_null(mkdtemp(dir));
    /* a file of root's alone, whose first line is a secret */
    snprintf(own, sizeof own, "%s/secret", dir);
    int fd = open(own, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    static const char secret[] = "hunter2-correct-horse-battery-staple\nsecond line\n";
    assert_int_equal(write(fd, secret, sizeof secret - 1), (ssize_t) sizeof secret - 1);
    close(fd);
    const char *files[] = {"/etc/shadow", own};
    const char *why = NULL;
    char detail[256] = "";
    for (size_t i = 0; i < 2 && !why; i++) {
        first_line(files[i], line, sizeof line);
        if (strlen(line) < 8)
            continue; /* nothing to leak (no /etc/shadow here) */
        int st = run_salusd(dir, files[i], out, sizeof out);
        if (leaks(out, line))
            why = "salusd's error repeated the file's first line";
        else if (st != 2)
            why = "salusd did not refuse the file";
        size_t k = strlen(detail);
        snprintf(detail + k, sizeof detail - k, "%s%s: exit %d, content not shown", k ? "; " : "",
                 files[i], st);
    }
    if (why)
        fprintf(stderr, "salusd said: %s\n", out);
    (void) unlink(own);
    char log[200];
    snprintf(log, sizeof log, "%s/salusd.log", dir);
    (void) unlink(log);
    (void) rmdir(dir);
    assert_true(sl_attack_verdict(name, why, detail));
}

SL_TEST_MAIN("attack config", NULL, NULL, cmocka_unit_test(writable_config),
             cmocka_unit_test(echoed_config))
