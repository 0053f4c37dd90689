#include "sl_testsupport.h"

#include "sl_error.h"

#include <salus/salus.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ARGS 60
#define START_TIMEOUT_S 10

int sl_ts_salusd_prepare(sl_ts_salusd *s, const char *tag)
{
    memset(s, 0, sizeof *s);
    int rc = sl_ts_tempdir(tag, s->dir, sizeof s->dir);
    if (rc != SL_OK)
        return rc;
    snprintf(s->url, sizeof s->url, "ipc://%s/salus.sock", s->dir);
    return SL_OK;
}

int sl_ts_salusd_spawn(sl_ts_salusd *s, const char *path, const char *const *args, bool logged)
{
    const char *argv[MAX_ARGS + 3] = {path};
    size_t n = 1;
    bool own_user = false;
    for (size_t i = 0; args && args[i]; i++)
        own_user |= strcmp(args[i], "--user") == 0 || strcmp(args[i], "--allow-root") == 0;
    if (geteuid() == 0 && !own_user)
        argv[n++] = "--allow-root";
    for (size_t i = 0; args && args[i]; i++) {
        if (n > MAX_ARGS)
            return SL_EINVAL;
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    if (logged)
        snprintf(s->log, sizeof s->log, "%s/salusd.log", s->dir);
    else
        s->log[0] = '\0';
    return sl_ts_spawn(argv, logged ? s->log : NULL, &s->pid);
}

int sl_ts_salusd_wait_ready(sl_ts_salusd *s, const char *url, double timeout_s)
{
    uint64_t deadline = sl_ts_now_ns() + (uint64_t) (timeout_s * 1e9);
    do {
        salus_client *c;
        if (salus_connect(url, &c) == SALUS_OK) {
            salus_disconnect(c);
            return SL_OK;
        }
        if (s->pid > 0 && sl_ts_exited(s->pid)) {
            s->pid = 0;
            return SL_ESHUTDOWN;
        }
        sl_ts_sleep_ms(20);
    } while (sl_ts_now_ns() < deadline);
    return SL_ETIMEDOUT;
}

int sl_ts_salusd_start(sl_ts_salusd *s, const char *path, const char *tag, const char *const *args,
                       bool logged)
{
    int rc = sl_ts_salusd_prepare(s, tag);
    if (rc != SL_OK)
        return rc;
    const char *all[MAX_ARGS + 1] = {"--listen", s->url};
    size_t n = 2;
    for (size_t i = 0; args && args[i]; i++) {
        if (n >= MAX_ARGS) {
            rc = SL_EINVAL;
            goto out_remove;
        }
        all[n++] = args[i];
    }
    all[n] = NULL;
    if ((rc = sl_ts_salusd_spawn(s, path, all, logged)) != SL_OK)
        goto out_remove;
    if ((rc = sl_ts_salusd_wait_ready(s, s->url, START_TIMEOUT_S)) != SL_OK)
        goto out_kill;
    return SL_OK;

out_kill:
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        (void) waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
out_remove:
    if (!logged)
        sl_ts_tempdir_remove(s->dir);
    return rc;
}

int sl_ts_salusd_stop(sl_ts_salusd *s, double timeout_s)
{
    if (s->pid <= 0)
        return -1;
    kill(s->pid, SIGTERM);
    int st = sl_ts_wait(s->pid, timeout_s);
    s->pid = 0;
    return st;
}

void sl_ts_salusd_cleanup(sl_ts_salusd *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        (void) waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->dir[0])
        sl_ts_tempdir_remove(s->dir);
}

bool sl_ts_salusd_log_find(const sl_ts_salusd *s, const char *text, char *last, size_t len)
{
    FILE *f = s->log[0] ? fopen(s->log, "r") : NULL;
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, text)) {
            found = true;
            if (!last || !len)
                break;
            snprintf(last, len, "%s", line);
        }
    fclose(f);
    return found;
}
