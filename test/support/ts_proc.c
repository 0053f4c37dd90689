#include "sl_testsupport.h"

#include "sl_error.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

int sl_ts_tempdir(const char *tag, char *dir, size_t len)
{
    const char *base = getenv("SL_TEST_RUNDIR");
    int n = snprintf(dir, len, "%s/salus-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (n < 0 || (size_t) n >= len)
        return SL_EINVAL;
    return mkdtemp(dir) ? SL_OK : SL_EPERM;
}

void sl_ts_tempdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        char path[4096];
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            (void) unlink(path);
        }
        closedir(d);
    }
    (void) rmdir(dir);
}

int sl_ts_spawn(const char *const *argv, const char *log, pid_t *pid)
{
    fflush(NULL);
    pid_t child = fork();
    if (child < 0)
        return SL_EINTERNAL;
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        execv(argv[0], (char *const *) argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    *pid = child;
    return SL_OK;
}

int sl_ts_wait(pid_t pid, double timeout_s)
{
    uint64_t deadline = sl_ts_now_ns() + (uint64_t) (timeout_s * 1e9);
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, timeout_s < 0 ? 0 : WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0 && errno != EINTR)
            return -1;
        if (timeout_s >= 0 && sl_ts_now_ns() >= deadline)
            break;
        if (timeout_s >= 0)
            sl_ts_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    (void) waitpid(pid, NULL, 0);
    return -1;
}

bool sl_ts_exited(pid_t pid)
{
    return waitpid(pid, NULL, WNOHANG) == pid;
}

int sl_ts_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *) &a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *) &a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}
