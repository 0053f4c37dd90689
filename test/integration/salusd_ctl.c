#include "salusd_ctl.h"
#include "status_call.h"

#include "client_internal.h"
#include "sl_test.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
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

double sl_ctl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long) (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

const char *sl_ctl_path(const sl_test_server *srv, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", srv->dir, name);
    return buf;
}

void sl_ctl_prepare(sl_test_server *srv)
{
    memset(srv, 0, sizeof *srv);
    snprintf(srv->dir, sizeof srv->dir, "/tmp/salus-test-XXXXXX");
    if (!mkdtemp(srv->dir))
        fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(srv->url, sizeof srv->url, "ipc://%s/salus.sock", srv->dir);
}

void sl_ctl_spawn(sl_test_server *srv, const char *const *args)
{
    const char *path = getenv("SALUSD");
    if (!path || !*path)
        fail_msg("environment variable SALUSD (path of salusd) is not set");
    const char *argv[48] = {path};
    int n = 1, k = 0;
    /* salusd refuses root unasked; tests that drop privileges say --user */
    bool own_user = false;
    for (int i = 0; args && args[i]; i++)
        own_user |= strcmp(args[i], "--user") == 0 || strcmp(args[i], "--allow-root") == 0;
    if (geteuid() == 0 && !own_user)
        argv[n++] = "--allow-root";
    for (; args && args[k] && n < 47; n++, k++)
        argv[n] = args[k];
    argv[n] = NULL;
    char log[400];
    sl_ctl_path(srv, "salusd.log", log, sizeof log);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a test that died */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(path, (char *const *) argv);
        _exit(127);
    }
    srv->pid = pid;
    track(pid, true);
}

bool sl_ctl_wait_ready(const sl_test_server *srv, const char *url, int timeout_s)
{
    for (int i = 0; i < timeout_s * 50; i++) {
        salus_client *c;
        if (salus_connect(url, &c) == SALUS_OK) {
            salus_disconnect(c);
            return true;
        }
        if (waitpid(srv->pid, NULL, WNOHANG) == srv->pid)
            return false;
        nap_ms(20);
    }
    return false;
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
        kill(srv->pid, SIGKILL);
        (void) waitpid(srv->pid, NULL, 0);
        fail_msg("salusd did not come up on %s (log in %s)", srv->url, srv->dir);
    }
}

int sl_ctl_wait(sl_test_server *srv, int timeout_s)
{
    int st = sl_test_wait(srv->pid, timeout_s); /* reaped (killed if need be) */
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
    DIR *d = opendir(srv->dir);
    if (d) {
        struct dirent *e;
        char path[600];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", srv->dir, e->d_name);
            (void) unlink(path);
        }
        closedir(d);
    }
    (void) rmdir(srv->dir);
}

bool sl_ctl_log_has(const sl_test_server *srv, const char *text)
{
    char path[400];
    FILE *f = fopen(sl_ctl_path(srv, "salusd.log", path, sizeof path), "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    fclose(f);
    return found;
}

bool sl_ctl_log_last(const sl_test_server *srv, const char *text, char *line, size_t len)
{
    char path[400], buf[1024];
    FILE *f = fopen(sl_ctl_path(srv, "salusd.log", path, sizeof path), "r");
    if (!f)
        return false;
    bool found = false;
    while (fgets(buf, sizeof buf, f))
        if (strstr(buf, text)) {
            snprintf(line, len, "%s", buf);
            found = true;
        }
    fclose(f);
    return found;
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
        nap_ms(10);
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
        nap_ms(5);
    }
    fail_msg("session %llu did not start running in 5 s", (unsigned long long) session_id);
}

int sl_ctl_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        fail_msg("socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *) &a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *) &a, &len) != 0)
        fail_msg("bind 127.0.0.1:0: %s", strerror(errno));
    close(fd);
    return ntohs(a.sin_port);
}
