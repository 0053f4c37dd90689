/* Giving up root (privileges.h). */
#include "privileges.h"
#include "metrics.h"
#include "sl_error.h"
#include "sl_log.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A uid or gid written as a number. */
static bool parse_id(const char *s, unsigned long *out)
{
    char *end;
    errno = 0;
    *out = strtoul(s, &end, 10);
    return *s && *s != '-' && !*end && !errno && *out < (unsigned long) UINT32_MAX;
}

int sl_priv_resolve(const char *user, const char *group, sl_run_as *out, char *why, size_t why_len)
{
    sl_run_as as = {.user = user};
    unsigned long id;
    struct passwd *pw = parse_id(user, &id) ? getpwuid((uid_t) id) : getpwnam(user);
    if (pw) {
        as.uid = pw->pw_uid;
        as.gid = pw->pw_gid;
    } else if (parse_id(user, &id)) {
        as.uid = (uid_t) id; /* a bare uid: its group must be given */
        if (!group) {
            snprintf(why, why_len, "uid %s has no passwd entry: give --group too", user);
            return SL_EINVAL;
        }
    } else {
        snprintf(why, why_len, "no user '%s'", user);
        return SL_EINVAL;
    }
    if (group) {
        struct group *gr = parse_id(group, &id) ? NULL : getgrnam(group);
        if (gr)
            as.gid = gr->gr_gid;
        else if (parse_id(group, &id))
            as.gid = (gid_t) id;
        else {
            snprintf(why, why_len, "no group '%s'", group);
            return SL_EINVAL;
        }
    }
    if (as.uid == 0) {
        snprintf(why, why_len, "--user %s is root: to stay root, say --allow-root instead", user);
        return SL_EINVAL;
    }
    *out = as;
    return SL_OK;
}

bool sl_priv_url_needs_bind(const char *url)
{
    if (strncmp(url, "tcp", 3) && strncmp(url, "tls+tcp", 7) && strncmp(url, "ws", 2))
        return false;
    const char *colon = strrchr(url, ':');
    const char *slash = strstr(url, "//");
    if (!colon || !slash || colon < slash)
        return false;
    long port = strtol(colon + 1, NULL, 10);
    return port > 0 && port < 1024;
}

static int last_cap(void)
{
    FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "r");
    int n = 63;
    if (f) {
        if (fscanf(f, "%d", &n) != 1 || n < 0 || n > 63)
            n = 63;
        fclose(f);
    }
    return n;
}

int sl_priv_drop_capabilities(bool keep_bind, char *why, size_t why_len)
{
    /* the bounding set first: dropping from it needs CAP_SETPCAP, which
     * goes next */
    for (int cap = 0; cap <= last_cap(); cap++) {
        if (keep_bind && cap == CAP_NET_BIND_SERVICE)
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
            snprintf(why, why_len, "cannot drop capability %d from the bounding set: %s", cap,
                     strerror(errno));
            return SL_EPERM;
        }
    }
    (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    data[0].effective = data[0].permitted = keep_bind ? 1u << CAP_NET_BIND_SERVICE : 0;
    if (syscall(SYS_capset, &hdr, data) != 0) {
        snprintf(why, why_len, "cannot drop capabilities: %s", strerror(errno));
        return SL_EPERM;
    }
    /* nothing this process could run would gain them back */
    (void) prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    return SL_OK;
}

/* Checks every thread's credentials in /proc: all of uid, no capability
 * left. */
static int check_threads(uid_t uid, char *why, size_t why_len)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) {
        snprintf(why, why_len, "cannot list /proc/self/task: %s", strerror(errno));
        return SL_EPERM;
    }
    int rc = SL_OK;
    for (struct dirent *e; rc == SL_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread ended */
        while (rc == SL_OK && fgets(line, sizeof line, f)) {
            unsigned long r, eff, saved, fs;
            unsigned long long caps;
            if (sscanf(line, "Uid: %lu %lu %lu %lu", &r, &eff, &saved, &fs) == 4 &&
                (r != uid || eff != uid || saved != uid || fs != uid))
                rc = SL_EPERM;
            if ((sscanf(line, "CapEff: %llx", &caps) == 1 ||
                 sscanf(line, "CapPrm: %llx", &caps) == 1) &&
                caps)
                rc = SL_EPERM;
            if (rc)
                snprintf(why, why_len, "thread %s kept root's powers: %.*s", e->d_name,
                         (int) strcspn(line, "\n"), line);
        }
        fclose(f);
    }
    closedir(d);
    return rc;
}

int sl_priv_switch_user(const sl_config *cfg, const sl_run_as *as, char *why, size_t why_len)
{
    /* socket files were made by root: the user must be able to remove and
     * replace them */
    for (int i = 0; i < cfg->n_listen; i++) {
        const char *path = strncmp(cfg->listen[i], "ipc://", 6) == 0 ? cfg->listen[i] + 6 : NULL;
        if (path && chown(path, as->uid, as->gid) != 0)
            sl_log_warn("srv.user", "cannot hand %s to uid %u: %s", path, (unsigned) as->uid,
                        strerror(errno));
    }
    const char *metrics;
    if (sl_metrics_socket_path(cfg->metrics_listen, &metrics) &&
        chown(metrics, as->uid, as->gid) != 0)
        sl_log_warn("srv.user", "cannot hand %s to uid %u: %s", metrics, (unsigned) as->uid,
                    strerror(errno));
    struct passwd *pw = getpwuid(as->uid);
    int rv = pw ? initgroups(pw->pw_name, as->gid) : setgroups(1, &as->gid);
    if (rv != 0) {
        snprintf(why, why_len, "cannot set the groups of %s: %s", as->user, strerror(errno));
        return SL_EPERM;
    }
    /* glibc applies these to every thread (NNG's, the device's, the BLAS
     * pool's), and a switch from root to another uid clears each thread's
     * capabilities */
    if (setgid(as->gid) != 0 || setuid(as->uid) != 0) {
        snprintf(why, why_len, "cannot switch to uid %u gid %u: %s", (unsigned) as->uid,
                 (unsigned) as->gid, strerror(errno));
        return SL_EPERM;
    }
    if (getuid() != as->uid || geteuid() != as->uid || getgid() != as->gid ||
        getegid() != as->gid) {
        snprintf(why, why_len, "the switch to uid %u gid %u did not hold", (unsigned) as->uid,
                 (unsigned) as->gid);
        return SL_EPERM;
    }
    if (setuid(0) == 0 || seteuid(0) == 0) {
        snprintf(why, why_len, "root could be regained after the switch");
        return SL_EPERM;
    }
    if (check_threads(as->uid, why, why_len) != SL_OK)
        return SL_EPERM;
    (void) prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    for (int i = 0; i < cfg->n_listen; i++) {
        if (strncmp(cfg->listen[i], "ipc://", 6) != 0)
            continue;
        char dir[512];
        snprintf(dir, sizeof dir, "%s", cfg->listen[i] + 6);
        char *slash = strrchr(dir, '/');
        if (slash)
            *(slash == dir ? slash + 1 : slash) = '\0';
        /* NNG 1.5.2 stops an ipc:// listener whenever a peer hangs up in
         * its handshake (clients closing do); the watchdog then binds a
         * fresh one in this folder, which must therefore be the user's */
        if (access(slash ? dir : ".", W_OK | X_OK) != 0) {
            snprintf(why, why_len,
                     "%s is not writable by %s: salusd could not replace its socket there (nor "
                     "remove it at exit); give the user a folder of its own (e.g. install -d -o "
                     "%s /run/salus)",
                     slash ? dir : ".", as->user, as->user);
            return SL_EPERM;
        }
    }
    sl_log_info("srv.user", "running as uid %u gid %u (%s), no capabilities", (unsigned) as->uid,
                (unsigned) as->gid, as->user);
    return SL_OK;
}
