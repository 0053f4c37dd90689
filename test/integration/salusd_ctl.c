#include "salusd_ctl.h"
#include "status_call.h"

#include "client_internal.h"
#include "sl_test.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Servers spawned and not yet stopped: a failed assertion jumps out of a
 * test, and a salusd left behind would hold the test's output open. */
static pid_t live[64];

static void kill_live(void)
{
    for (int i = 0; i < 64; i++)
        if (live[i] > 0) {
            kill(live[i], SIGKILL);
            (void) waitpid(live[i], NULL, 0);
            live[i] = 0;
        }
}

static void track(pid_t pid, bool add)
{
    static bool registered;
    if (!registered) {
        atexit(kill_live);
        registered = true;
    }
    for (int i = 0; i < 64; i++)
        if (add ? live[i] == 0 : live[i] == pid) {
            live[i] = add ? pid : 0;
            return;
        }
}

const char *sl_ctl_path(const sl_test_server *srv, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", srv->dir, name);
    return buf;
}

void sl_ctl_prepare(sl_test_server *srv)
{
    if (sl_ts_salusd_prepare(srv, "test") != SL_OK)
        fail_msg("cannot make salusd's folder: %s", strerror(errno));
}

void sl_ctl_spawn(sl_test_server *srv, const char *const *args)
{
    if (sl_ts_salusd_spawn(srv, sl_test_program("SALUSD"), args, true) != SL_OK)
        fail_msg("cannot start salusd: %s", strerror(errno));
    track(srv->pid, true);
}

bool sl_ctl_wait_ready(sl_test_server *srv, const char *url, int timeout_s)
{
    return sl_ts_salusd_wait_ready(srv, url, timeout_s) == SL_OK;
}

void sl_ctl_start(sl_test_server *srv, const char *const *args)
{
    const char *all[40] = {"--listen", srv->url, "--log-level", "info"};
    int n = 4;
    for (; args && args[n - 4] && n < 39; n++)
        all[n] = args[n - 4];
    all[n] = NULL;
    sl_ctl_spawn(srv, all);
    if (!sl_ctl_wait_ready(srv, srv->url, 10)) {
        if (srv->pid > 0) {
            kill(srv->pid, SIGKILL);
            (void) waitpid(srv->pid, NULL, 0);
        }
        fail_msg("salusd did not come up on %s (log in %s)", srv->url, srv->dir);
    }
}

int sl_ctl_wait(sl_test_server *srv, int timeout_s)
{
    int st = sl_ts_wait(srv->pid, timeout_s); /* reaped (killed if need be) */
    track(srv->pid, false);
    return st;
}

int sl_ctl_stop(sl_test_server *srv)
{
    kill(srv->pid, SIGTERM);
    return sl_ctl_wait(srv, 15);
}

void sl_ctl_cleanup(sl_test_server *srv)
{
    sl_ts_tempdir_remove(srv->dir);
}

void sl_ctl_launch(sl_test_server *srv, const char *const *args)
{
    sl_ctl_prepare(srv);
    sl_ctl_start(srv, args);
}

void sl_ctl_finish(sl_test_server *srv)
{
    int status = sl_ctl_stop(srv);
    if (status != 0)
        fail_msg("salusd exited with status %d (log in %s)", status, srv->dir);
    sl_ctl_cleanup(srv);
}

bool sl_ctl_log_has(const sl_test_server *srv, const char *text)
{
    return sl_ts_salusd_log_find(srv, text, NULL, 0);
}

bool sl_ctl_log_last(const sl_test_server *srv, const char *text, char *line, size_t len)
{
    return sl_ts_salusd_log_find(srv, text, line, len);
}

void sl_ctl_fault(const sl_test_server *srv, const char *cmd)
{
    char path[400], tmp[420];
    sl_ctl_path(srv, "fault", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        fail_msg("cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "%s\n", cmd);
    fclose(f);
    if (rename(tmp, path) != 0)
        fail_msg("rename %s: %s", tmp, strerror(errno));
    kill(srv->pid, SIGUSR1);
    for (int i = 0; i < 500; i++) {
        if (access(path, F_OK) != 0)
            return;
        sl_ts_sleep_ms(10);
    }
    fail_msg("salusd did not take fault command '%s' within 5 s", cmd);
}

int sl_ctl_queued(salus_client *c, uint64_t session_id)
{
    Salus__Reply *rep = sl_test_status(c);
    int queued = -1;
    for (size_t i = 0; i < rep->status->n_sessions; i++)
        if (rep->status->sessions[i]->id == session_id)
            queued = (int) rep->status->sessions[i]->queued;
    salus__reply__free_unpacked(rep, NULL);
    return queued;
}

bool sl_ctl_running(salus_client *c, uint64_t session_id)
{
    Salus__Reply *rep = sl_test_status(c);
    const Salus__StatusReply *sr = rep->status;
    bool busy = false;
    for (size_t i = 0; i < sr->n_sessions; i++) {
        if (sr->sessions[i]->id != session_id)
            continue;
        for (size_t l = 0; l < sr->n_lanes; l++)
            if (sr->lanes[l]->id == sr->sessions[i]->lane)
                busy = sr->lanes[l]->busy;
    }
    salus__reply__free_unpacked(rep, NULL);
    return busy;
}

void sl_ctl_wait_running(salus_client *c, uint64_t session_id)
{
    for (int i = 0; i < 1000; i++) {
        if (sl_ctl_running(c, session_id))
            return;
        sl_ts_sleep_ms(5);
    }
    fail_msg("session %llu did not start running in 5 s", (unsigned long long) session_id);
}

int sl_ctl_free_port(void)
{
    int port = sl_ts_free_port();
    if (port < 0)
        fail_msg("no free port on 127.0.0.1: %s", strerror(errno));
    return port;
}
