#include "attack.h"
#include "sl_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The victim: a small MLP training as fast as it can, one iteration about a
 * millisecond on the cpu backend. */
#define VICTIM_BATCH 32
#define VICTIM_IN 64
#define VICTIM_WARMUP 50
/* Baseline tolerances: a few descriptors for logs and NNG's own threads,
 * and allocator caches that a process rarely hands back. */
#define FD_SLACK 2
#define RSS_SLACK_MIN (64ull << 20)
#define SETTLE_S 10

int sl_attack_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int) pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

uint64_t sl_attack_rss(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
    return (uint64_t) sl_attack_proc_value(path, "VmRSS:") << 10;
}

long sl_attack_proc_value(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    char line[256];
    long v = 0;
    size_t len = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, len) == 0 && sscanf(line + len, "%ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

const char *sl_attack_socket_path(const sl_attack *a)
{
    return a->srv.url + strlen("ipc://");
}

bool sl_attack_cross_user(void)
{
    return geteuid() == 0;
}

int sl_attack_as_tenant(int (*fn)(void *arg), void *arg, int timeout_s)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (sl_attack_cross_user() &&
            (setgroups(0, NULL) != 0 || setgid(SL_ATTACK_UID) != 0 || setuid(SL_ATTACK_UID) != 0)) {
            fprintf(stderr, "attacker: cannot become uid %d: %s\n", SL_ATTACK_UID, strerror(errno));
            _exit(126);
        }
        /* changing credentials cleared the parent-death signal */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(fn(arg) & 0xff);
    }
    return sl_test_wait(pid, timeout_s);
}

int sl_attack_exec_tenant(const char *const *args, int timeout_s)
{
    return sl_test_wait(sl_attack_spawn_tenant(args), timeout_s);
}

pid_t sl_attack_spawn_tenant(const char *const *args)
{
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        fail_msg("readlink /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    return sl_test_exec(self, "--attack-tenant", args);
}

bool sl_attack_tenant_start(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--attack-tenant") != 0)
        return false;
    if (sl_attack_cross_user() &&
        (setgroups(0, NULL) != 0 || setgid(SL_ATTACK_UID) != 0 || setuid(SL_ATTACK_UID) != 0)) {
        fprintf(stderr, "attacker: cannot become uid %d: %s\n", SL_ATTACK_UID, strerror(errno));
        exit(126);
    }
    return true;
}

static void victim_failed(sl_attack *a, int rc, const char *what, salus_client *c)
{
    pthread_mutex_lock(&a->lock);
    if (a->error == SALUS_OK) {
        a->error = rc;
        snprintf(a->error_text, sizeof a->error_text, "%s: %s (%s)", what, salus_strerror(rc),
                 c ? salus_last_error(c) : "");
    }
    pthread_mutex_unlock(&a->lock);
}

static void *victim_main(void *arg)
{
    sl_attack *a = arg;
    salus_client *c = NULL;
    salus_session *s = NULL;
    salus_model *m = NULL;
    int rc = salus_connect(a->srv.url, &c);
    if (rc != SALUS_OK) {
        victim_failed(a, rc, "connect", NULL);
        return NULL;
    }
    salus_session_opts opts = {.name = "victim"};
    const int64_t in[1] = {VICTIM_IN};
    if ((rc = salus_session_open(c, &opts, &s)) != SALUS_OK) {
        victim_failed(a, rc, "open session", c);
        goto out;
    }
    pthread_mutex_lock(&a->lock);
    a->victim_session = salus_session_id(s);
    pthread_mutex_unlock(&a->lock);
    m = salus_model_new(1, in);
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    if (!m || salus_model_dense(m, 64) || salus_model_relu(m) || salus_model_dense(m, 10) ||
        (rc = salus_model_compile(m, s, &sgd, VICTIM_BATCH, 1, 7)) != SALUS_OK) {
        victim_failed(a, rc ? rc : SALUS_EINVAL, "compile", c);
        goto out;
    }
    float x[VICTIM_BATCH * VICTIM_IN];
    int32_t y[VICTIM_BATCH];
    for (int i = 0; i < VICTIM_BATCH * VICTIM_IN; i++)
        x[i] = (float) (i % 17) / 17.0f;
    for (int i = 0; i < VICTIM_BATCH; i++)
        y[i] = i % 10;
    for (;;) {
        pthread_mutex_lock(&a->lock);
        bool stop = a->stop;
        pthread_mutex_unlock(&a->lock);
        if (stop)
            break;
        uint64_t t0 = sl_ts_now_ns();
        if ((rc = salus_model_train_step(m, x, y, NULL)) != SALUS_OK) {
            victim_failed(a, rc, "train step", c);
            break;
        }
        uint64_t dt = sl_ts_now_ns() - t0;
        pthread_mutex_lock(&a->lock);
        if (++a->iterations > VICTIM_WARMUP && dt > a->worst_ns)
            a->worst_ns = dt;
        pthread_mutex_unlock(&a->lock);
    }
out:
    salus_model_free(m);
    if (s)
        (void) salus_session_close(s);
    salus_disconnect(c);
    return NULL;
}

static uint64_t victim_iterations(sl_attack *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t n = a->error == SALUS_OK ? a->iterations : UINT64_MAX;
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* Samples salusd's RSS until the victim is told to stop. */
static void *monitor_main(void *arg)
{
    sl_attack *a = arg;
    for (;;) {
        uint64_t rss = sl_attack_rss(a->srv.pid);
        pthread_mutex_lock(&a->lock);
        bool stop = a->stop;
        if (rss > a->rss_peak)
            a->rss_peak = rss;
        pthread_mutex_unlock(&a->lock);
        if (stop)
            return NULL;
        sl_ts_sleep_ms(10);
    }
}

static void begin(sl_attack *a, const char *name, const char *const *extra_args, bool logged);

void sl_attack_begin(sl_attack *a, const char *name, const char *const *extra_args)
{
    begin(a, name, extra_args, false);
}

void sl_attack_begin_logged(sl_attack *a, const char *name, const char *const *extra_args)
{
    begin(a, name, extra_args, true);
}

bool sl_attack_log_has(const sl_attack *a, const char *text, char *copy, size_t len)
{
    static char buf[1 << 20];
    FILE *f = a->srv.log[0] ? fopen(a->srv.log, "r") : NULL;
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (copy && len) {
        size_t k = n < len - 1 ? n : len - 1;
        memcpy(copy, buf, k);
        copy[k] = '\0';
    }
    return strstr(buf, text) != NULL;
}

static void begin(sl_attack *a, const char *name, const char *const *extra_args, bool logged)
{
    memset(a, 0, sizeof *a);
    a->name = name;
    printf("ATTACK %s tried\n", name);
    fflush(stdout);
    const char *args[24] = {"--ipc-mode", "0666"};
    int n = 2;
    for (; extra_args && extra_args[n - 2] && n < 23; n++)
        args[n] = extra_args[n - 2];
    args[n] = NULL;
    if (logged)
        sl_test_server_start_logged(&a->srv, args);
    else
        sl_test_server_start(&a->srv, args);
    /* mkdtemp made the folder 0700; other users' tenants must reach the
     * socket in it */
    if (chmod(a->srv.dir, 0755) != 0)
        fail_msg("chmod %s: %s", a->srv.dir, strerror(errno));
    pthread_mutex_init(&a->lock, NULL);
    a->victim_bound_ms = SL_ATTACK_VICTIM_BOUND_MS;
    a->fd_slack = FD_SLACK;
    if (pthread_create(&a->victim, NULL, victim_main, a) != 0)
        fail_msg("cannot start the victim");
    uint64_t deadline = sl_ts_now_ns() + 30ull * 1000000000ull;
    uint64_t it;
    while ((it = victim_iterations(a)) < VICTIM_WARMUP && sl_ts_now_ns() < deadline)
        sl_ts_sleep_ms(10);
    if (it == UINT64_MAX || it < VICTIM_WARMUP)
        fail_msg("the victim did not warm up: %s", a->error_text);
    a->fds0 = sl_attack_fds(a->srv.pid);
    a->rss0 = sl_attack_rss(a->srv.pid);
    a->rss_slack = a->rss0 / 4 > RSS_SLACK_MIN ? a->rss0 / 4 : RSS_SLACK_MIN;
    a->rss_peak = a->rss0;
    if (pthread_create(&a->monitor, NULL, monitor_main, a) != 0)
        fail_msg("cannot start the memory monitor");
}

/* Polls up to SETTLE_S for salusd's descriptors and memory to come back. */
static bool settled(sl_attack *a, int *fds, uint64_t *rss)
{
    for (int i = 0; i < SETTLE_S * 10; i++) {
        *fds = sl_attack_fds(a->srv.pid);
        *rss = sl_attack_rss(a->srv.pid);
        if (*fds >= 0 && *fds <= a->fds0 + a->fd_slack && *rss <= a->rss0 + a->rss_slack)
            return true;
        sl_ts_sleep_ms(100);
    }
    return false;
}

bool sl_attack_end(sl_attack *a, const char *detail)
{
    char why[512] = "";
    int fds = -1;
    uint64_t rss = 0;
    bool alive = waitpid(a->srv.pid, NULL, WNOHANG) == 0;
    pthread_mutex_lock(&a->lock);
    uint64_t peak = a->rss_peak;
    pthread_mutex_unlock(&a->lock);
    if (!alive)
        snprintf(why, sizeof why, "salusd died");
    else if (a->rss_peak_bound && peak > a->rss0 + a->rss_peak_bound)
        snprintf(why, sizeof why,
                 "RSS reached %lu MiB during the attack (baseline %lu + bound %lu)",
                 (unsigned long) (peak >> 20), (unsigned long) (a->rss0 >> 20),
                 (unsigned long) (a->rss_peak_bound >> 20));
    else if (a->broken[0])
        snprintf(why, sizeof why, "%s", a->broken);
    else if (!settled(a, &fds, &rss))
        snprintf(why, sizeof why,
                 "did not settle: %d descriptors (baseline %d), RSS %lu MiB (baseline %lu MiB)",
                 fds, a->fds0, (unsigned long) (rss >> 20), (unsigned long) (a->rss0 >> 20));
    uint64_t before = victim_iterations(a);
    if (alive && !*why) { /* the victim still moves */
        uint64_t deadline = sl_ts_now_ns() + a->victim_bound_ms * 1000000ull;
        while (victim_iterations(a) == before && sl_ts_now_ns() < deadline)
            sl_ts_sleep_ms(5);
        if (victim_iterations(a) == before)
            snprintf(why, sizeof why, "the victim stopped training");
    }
    pthread_mutex_lock(&a->lock);
    a->stop = true;
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->victim, NULL);
    pthread_join(a->monitor, NULL);
    if (!*why && a->error != SALUS_OK)
        snprintf(why, sizeof why, "the victim got an error: %s", a->error_text);
    if (!*why && a->worst_ns > a->victim_bound_ms * 1000000ull)
        snprintf(why, sizeof why, "a victim iteration took %.0f ms (bound %lu ms)",
                 (double) a->worst_ns / 1e6, (unsigned long) a->victim_bound_ms);
    if (!*why) {
        salus_client *c = NULL;
        if (salus_connect(a->srv.url, &c) != SALUS_OK)
            snprintf(why, sizeof why, "a new client is not served");
        salus_disconnect(c);
    }
    int st = -1;
    if (alive) {
        st = sl_ts_salusd_stop(&a->srv, 10);
        struct stat sb;
        a->socket_removed = stat(sl_attack_socket_path(a), &sb) != 0;
    }
    a->srv.pid = 0; /* reaped: by the stop, or by the check that it lived */
    if (!*why && st != 0)
        snprintf(why, sizeof why, "salusd exited with %d", st);
    pthread_mutex_destroy(&a->lock);
    if (a->srv.log[0] && *why)
        fprintf(stderr, "salusd's log is kept in %s\n", a->srv.log);
    else
        sl_ts_tempdir_remove(a->srv.dir);
    printf("ATTACK %s %s%s%s (victim: %lu iterations, worst %.1f ms; salusd %d fds, %lu MiB, "
           "baseline %d, %lu MiB, peak %lu MiB)%s%s\n",
           a->name, *why ? "BROKEN: " : "held", why, "", (unsigned long) a->iterations,
           (double) a->worst_ns / 1e6, fds, (unsigned long) (rss >> 20), a->fds0,
           (unsigned long) (a->rss0 >> 20), (unsigned long) (peak >> 20), detail ? "; " : "",
           detail ? detail : "");
    fflush(stdout);
    return !*why;
}

void sl_attack_expect(sl_attack *a, bool ok, const char *what)
{
    if (!ok && !a->broken[0])
        snprintf(a->broken, sizeof a->broken, "%s", what);
}

void sl_attack_tried(const char *name)
{
    printf("ATTACK %s tried\n", name);
    fflush(stdout);
}

bool sl_attack_verdict(const char *name, const char *why, const char *detail)
{
    printf("ATTACK %s %s%s%s%s\n", name, why ? "BROKEN: " : "held", why ? why : "",
           detail ? "; " : "", detail ? detail : "");
    fflush(stdout);
    return !why;
}

void sl_attack_skip(const char *name, const char *why)
{
    printf("ATTACK %s skipped: %s\n", name, why);
    fflush(stdout);
}

bool sl_attack_may_run(const char *name, bool can, const char *why)
{
    if (!can)
        sl_attack_skip(name, why);
    return can;
}

/* Writes text to file; true on success. */
static bool put_file(const char *file, const char *text)
{
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t) strlen(text);
    return close(fd) == 0 && ok;
}

/* This process's cgroup folder in the hierarchy mounted at mount: v2's
 * ("0::PATH") when v1_memory is false, else v1's memory controller's. */
static bool own_cgroup(const char *mount, bool v1_memory, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
        if (!path)
            continue;
        *path++ = '\0';
        ctl++;
        bool match = v1_memory ? strstr(ctl, "memory") != NULL : strcmp(line, "0") == 0 && !*ctl;
        if (match)
            found = (size_t) snprintf(out, len, "%s%s", mount, path) < len;
    }
    if (f)
        fclose(f);
    return found;
}

/* Makes a child of this process's cgroup limited to limit and moves this
 * process into it. */
static bool real_cgroup(sl_attack_cgroup *cg, bool v1, uint64_t limit)
{
    const char *mount = v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
    char file[700], text[32], me[32];
    if (!own_cgroup(mount, v1, cg->parent, sizeof cg->parent))
        return false;
    if ((size_t) snprintf(cg->dir, sizeof cg->dir, "%.400s/salus-attack-%d", cg->parent,
                          (int) getpid()) >= sizeof cg->dir ||
        mkdir(cg->dir, 0755) != 0)
        return false;
    snprintf(text, sizeof text, "%llu", (unsigned long long) limit);
    snprintf(file, sizeof file, "%s/%s", cg->dir, v1 ? "memory.limit_in_bytes" : "memory.max");
    bool ok = put_file(file, text);
    /* no swapping around the limit, where swap is accounted */
    snprintf(file, sizeof file, "%s/%s", cg->dir,
             v1 ? "memory.memsw.limit_in_bytes" : "memory.swap.max");
    if (ok && access(file, F_OK) == 0)
        (void) put_file(file, v1 ? text : "0");
    snprintf(file, sizeof file, "%s/cgroup.procs", cg->dir);
    snprintf(me, sizeof me, "%d", (int) getpid());
    if (!ok || !put_file(file, me)) {
        rmdir(cg->dir);
        return false;
    }
    cg->real = true;
    cg->version = v1 ? "v1" : "v2";
    return true;
}

void sl_attack_cgroup_enter(sl_attack_cgroup *cg, uint64_t limit)
{
    memset(cg, 0, sizeof *cg);
    if (!real_cgroup(cg, false, limit) && !real_cgroup(cg, true, limit)) {
        char file[700], text[32];
        snprintf(cg->dir, sizeof cg->dir, "/tmp/salus-cgroup-XXXXXX");
        if (!mkdtemp(cg->dir))
            fail_msg("mkdtemp: %s", strerror(errno));
        static const char *const dirs[] = {"proc", "proc/self", "sys", "sys/fs", "sys/fs/cgroup"};
        for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
            snprintf(file, sizeof file, "%s/%s", cg->dir, dirs[i]);
            if (mkdir(file, 0755) != 0)
                fail_msg("mkdir %s: %s", file, strerror(errno));
        }
        snprintf(text, sizeof text, "%llu\n", (unsigned long long) limit);
        FILE *f;
        snprintf(file, sizeof file, "%s/proc/self/cgroup", cg->dir);
        if (!(f = fopen(file, "w")) || fputs("0::/\n", f) < 0 || fclose(f) != 0)
            fail_msg("cannot write %s", file);
        snprintf(file, sizeof file, "%s/sys/fs/cgroup/memory.max", cg->dir);
        if (!(f = fopen(file, "w")) || fputs(text, f) < 0 || fclose(f) != 0)
            fail_msg("cannot write %s", file);
        setenv("SALUS_TEST_CGROUP_ROOT", cg->dir, 1);
        cg->version = "a fake tree";
    }
    if (cg->real)
        printf("  salusd runs in a real memory cgroup (%s) limited to %llu MiB\n", cg->version,
               (unsigned long long) (limit >> 20));
    else
        printf("  no memory cgroup can be made here: salusd reads a limit of %llu MiB from a "
               "fake tree ($SALUS_TEST_CGROUP_ROOT), which its budgets follow and the kernel "
               "does not enforce\n",
               (unsigned long long) (limit >> 20));
    fflush(stdout);
}

void sl_attack_cgroup_started(sl_attack_cgroup *cg)
{
    if (!cg->real) {
        unsetenv("SALUS_TEST_CGROUP_ROOT");
        return;
    }
    char file[700], me[32];
    snprintf(file, sizeof file, "%s/cgroup.procs", cg->parent);
    snprintf(me, sizeof me, "%d", (int) getpid());
    if (!put_file(file, me))
        fail_msg("cannot move back out of %s: %s", cg->dir, strerror(errno));
}

int sl_attack_cgroup_remove(sl_attack_cgroup *cg)
{
    if (!cg->real) {
        static const char *const files[] = {"sys/fs/cgroup/memory.max",
                                            "proc/self/cgroup",
                                            "sys/fs/cgroup",
                                            "sys/fs",
                                            "sys",
                                            "proc/self",
                                            "proc"};
        char file[700];
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(file, sizeof file, "%s/%s", cg->dir, files[i]);
            (void) remove(file);
        }
        (void) rmdir(cg->dir);
        return 0;
    }
    char file[700];
    long kills = 0;
    if (strcmp(cg->version, "v2") == 0) {
        snprintf(file, sizeof file, "%s/memory.events", cg->dir);
        kills = sl_attack_proc_value(file, "oom_kill ");
    } else {
        snprintf(file, sizeof file, "%s/memory.oom_control", cg->dir);
        kills = sl_attack_proc_value(file, "oom_kill ");
    }
    for (int i = 0; i < 50 && rmdir(cg->dir) != 0 && errno == EBUSY; i++)
        sl_ts_sleep_ms(100);
    return (int) kills;
}
