/* Slurm SPANK plugin: connects each job step that asks for it (srun
 * --salus) to the node's salusd.
 *
 * In slurmstepd (as root, an operator of salusd over ipc://) it registers
 * the step with salusd: the job's uid, a memory quota of shard_memory bytes
 * per `shard` GRES the job holds on the node, and a priority from the job's
 * QOS (qos=NAME:PRIO,...) lowered by its nice value. It exports SALUS_URL and
 * SALUS_JOB to the step's tasks, so that libsalusclient finds salusd and
 * names the step in every session it opens. When the step ends it tells
 * salusd, which closes every session the step left behind (a process that
 * escaped the step's process tracking included); at job end (the job
 * epilog) every step of the job is closed again, for steps whose slurmstepd
 * died.
 *
 * A step that asked for salus (--salus) and could not be registered does
 * not run: each of its tasks fails before its program starts (task_init),
 * with the reason on the step's stderr, so srun and a batch script see a
 * failed step (a failure in slurmstepd's own init is reported by srun as
 * "Plugin initialization failed" with exit status 0).
 *
 * The job's figures come from the controller (slurm_load_job), not from the
 * job's environment, which its user controls. The NNG client runs in a
 * forked child that exits once salusd answered: slurmstepd keeps no NNG
 * threads, sockets or descriptors of ours when it forks the tasks.
 *
 * plugstack.conf arguments (all optional):
 *   url=ipc:///run/salus/salus.sock   salusd's operator socket on this node
 *   shard_memory=SIZE                 bytes per shard (K, M, G, T suffixes);
 *                                     0 or unset: no quota of the job's own
 *   qos=NAME:PRIO,...                 priority per QOS (others: 0)
 *   server_uid=N                      salusd's uid when not root (the
 *                                     helper trusts it, SALUS_SERVER_UID)
 *   default=on                        connect steps without --salus too
 *   timeout=S                         seconds to wait for salusd (5)
 * srun options:
 *   --salus[=priority=N]              connect this step; optionally at a
 *                                     priority below what the job may have */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <slurm/slurm.h>
#include <slurm/spank.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <salus/salus.h>

SPANK_PLUGIN(salus, 1);

#ifndef P_PIDFD
#define P_PIDFD 3 /* waitid on a pidfd: Linux 5.4 */
#endif

#define DEFAULT_URL "ipc:///run/salus/salus.sock"
#define MAX_QOS 32
/* priorities stay in a range people reason about */
#define PRIORITY_MIN -1000000
#define PRIORITY_MAX 1000000

static struct {
    char url[512];
    uint64_t shard_memory;
    char qos_name[MAX_QOS][64];
    int qos_prio[MAX_QOS];
    int n_qos;
    char server_uid[24];
    bool default_on;
    int timeout_s;
} conf;

static bool asked;         /* --salus given */
static bool has_user_prio; /* --salus=priority=N */
static int user_prio;
static bool registered; /* this step is registered with salusd */
/* why a step that asked for salus cannot have it (its tasks fail) */
static char refusal[768];

static int opt_salus(int val, const char *optarg, int remote);

struct spank_option spank_options[] = {
    {"salus", "[priority=N]",
     "Run this step's salus clients on the node's salusd, under the job's quota (shard GRES) and "
     "priority (QOS, nice); priority=N asks for less",
     2, 0, opt_salus},
    SPANK_OPTIONS_TABLE_END,
};

static int opt_salus(int val, const char *optarg, int remote)
{
    (void) val;
    (void) remote;
    asked = true;
    if (!optarg || !*optarg)
        return 0;
    char *end;
    if (strncmp(optarg, "priority=", 9) != 0)
        goto out_bad;
    errno = 0;
    long p = strtol(optarg + 9, &end, 10);
    if (errno || *end || end == optarg + 9 || p < PRIORITY_MIN || p > PRIORITY_MAX)
        goto out_bad;
    has_user_prio = true;
    user_prio = (int) p;
    return 0;
out_bad:
    slurm_error("salus: --salus=%s: expected priority=N (an integer)", optarg);
    return -1;
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'K':
    case 'k':
        shift = 10;
        end++;
        break;
    case 'M':
    case 'm':
        shift = 20;
        end++;
        break;
    case 'G':
    case 'g':
        shift = 30;
        end++;
        break;
    case 'T':
    case 't':
        shift = 40;
        end++;
        break;
    default:
        break;
    }
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *out = (uint64_t) v << shift;
    return 0;
}

static int parse_qos(const char *list)
{
    char buf[2048];
    if (strlen(list) >= sizeof buf)
        return -1;
    strcpy(buf, list);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(item, ':'), *end;
        if (!colon || colon == item || conf.n_qos == MAX_QOS ||
            (size_t) (colon - item) >= sizeof conf.qos_name[0])
            return -1;
        errno = 0;
        long p = strtol(colon + 1, &end, 10);
        if (errno || *end || end == colon + 1 || p < PRIORITY_MIN || p > PRIORITY_MAX)
            return -1;
        snprintf(conf.qos_name[conf.n_qos], sizeof conf.qos_name[0], "%.*s", (int) (colon - item),
                 item);
        conf.qos_prio[conf.n_qos++] = (int) p;
    }
    return 0;
}

static int parse_args(int ac, char **av)
{
    snprintf(conf.url, sizeof conf.url, "%s", DEFAULT_URL);
    conf.timeout_s = 5;
    for (int i = 0; i < ac; i++) {
        const char *a = av[i];
        int bad = 0;
        if (strncmp(a, "url=", 4) == 0) {
            bad = strlen(a + 4) >= sizeof conf.url || !a[4];
            if (!bad)
                snprintf(conf.url, sizeof conf.url, "%s", a + 4);
        } else if (strncmp(a, "shard_memory=", 13) == 0) {
            bad = parse_size(a + 13, &conf.shard_memory) != 0;
        } else if (strncmp(a, "qos=", 4) == 0) {
            bad = parse_qos(a + 4) != 0;
        } else if (strncmp(a, "server_uid=", 11) == 0) {
            bad = strlen(a + 11) >= sizeof conf.server_uid ||
                  strspn(a + 11, "0123456789") != strlen(a + 11) || !a[11];
            if (!bad)
                snprintf(conf.server_uid, sizeof conf.server_uid, "%s", a + 11);
        } else if (strcmp(a, "default=on") == 0 || strcmp(a, "default=off") == 0) {
            conf.default_on = strcmp(a, "default=on") == 0;
        } else if (strncmp(a, "timeout=", 8) == 0) {
            conf.timeout_s = atoi(a + 8);
            bad = conf.timeout_s < 1 || conf.timeout_s > 300;
        } else {
            bad = 1;
        }
        if (bad) {
            slurm_error("salus: bad plugstack.conf argument '%s' (known: url=, shard_memory=, "
                        "qos=NAME:PRIO,..., server_uid=, default=on|off, timeout=S)",
                        a);
            return -1;
        }
    }
    return 0;
}

/* The count of the `shard` GRES in a list like "gpu:1,shard:2",
 * "gres:shard:2", "gres/shard:a100:2(IDX:0)"; 0 when it holds none. */
static uint64_t shards_in(const char *list)
{
    if (!list)
        return 0;
    uint64_t total = 0;
    const char *p = list;
    while ((p = strstr(p, "shard"))) {
        bool starts = p == list || p[-1] == ',' || p[-1] == ':' || p[-1] == '/' || p[-1] == ';';
        const char *end = p + strcspn(p, ",;(");
        p += 5;
        if (!starts || (*p != ':' && *p != '='))
            continue;
        const char *num = end;
        while (num > p && num[-1] >= '0' && num[-1] <= '9')
            num--;
        if (num < end && (num[-1] == ':' || num[-1] == '='))
            total += strtoull(num, NULL, 10);
        p = end;
    }
    return total;
}

/* The job's shards, QOS and nice from the controller. */
static int job_figures(uint32_t job_id, uint64_t *shards, int *priority)
{
    job_info_msg_t *msg = NULL;
    if (slurm_load_job(&msg, job_id, SHOW_DETAIL) != SLURM_SUCCESS || !msg ||
        msg->record_count < 1) {
        slurm_error("salus: cannot read job %u from the controller: %s", job_id,
                    slurm_strerror(slurm_get_errno()));
        if (msg)
            slurm_free_job_info_msg(msg);
        return -1;
    }
    slurm_job_info_t *j = &msg->job_array[0];
    /* per node; the job's total is per node only when it has one node */
    *shards = shards_in(j->tres_per_node);
    if (!*shards && j->num_nodes == 1)
        *shards = shards_in(j->gres_total);
    int prio = 0;
    for (int i = 0; j->qos && i < conf.n_qos; i++)
        if (strcmp(j->qos, conf.qos_name[i]) == 0)
            prio = conf.qos_prio[i];
    /* nice lowers the priority; a negative nice (root only) does not raise it */
    int64_t nice = (int64_t) j->nice - (int64_t) NICE_OFFSET;
    if (nice > 0)
        prio -= nice > PRIORITY_MAX ? PRIORITY_MAX : (int) nice;
    if (prio < PRIORITY_MIN)
        prio = PRIORITY_MIN;
    *priority = prio;
    slurm_free_job_info_msg(msg);
    return 0;
}

enum call { CALL_REGISTER, CALL_CLOSE_STEP, CALL_CLOSE_JOB };

/* A descriptor for the child pid, or -1 (a kernel before 5.3). The child
 * must not be able to exit yet: it waits for the caller's go, so that pid
 * is still the child's and no recycled number. */
static int child_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int) syscall(SYS_pidfd_open, pid, 0);
#else
    (void) pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Ends the helper that pidfd names: SIGKILL when it has not answered
 * (kill), then reaps it unless slurmstepd did. Through the descriptor
 * only: slurmstepd waits for any child, so the helper's pid may already be
 * reaped and given to another process, one of the step's tasks even, which
 * a kill(pid) or waitpid(pid) would hit. Without a descriptor the helper
 * is left to exit by itself (its own timeouts bound it) and to
 * slurmstepd's reaping. */
static void end_helper(int pidfd, bool kill_it)
{
    if (pidfd < 0)
        return;
#ifdef SYS_pidfd_send_signal
    if (kill_it)
        (void) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
#else
    (void) kill_it;
#endif
    /* readable once it exited; a second at most after it answered */
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    int pr;
    do
        pr = poll(&pfd, 1, 1000);
    while (pr < 0 && errno == EINTR);
    siginfo_t info;
    /* ECHILD: slurmstepd reaped it first */
    while (waitid((idtype_t) P_PIDFD, (id_t) pidfd, &info, WEXITED | WNOHANG) < 0 && errno == EINTR)
        ;
    close(pidfd);
}

/* Runs one call to salusd in a child process; 0 on success, else -1 with
 * salusd's or the client library's reason in why. */
static int salus_call(enum call what, uint32_t job, uint32_t step, uint32_t uid, uint64_t memory,
                      int priority, char *why, size_t why_len)
{
    int fds[2], go[2];
    if (pipe(fds) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe(go) != 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        close(go[0]);
        close(go[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        close(go[1]);
        /* the parent's go: it holds a descriptor of this process first */
        char byte;
        while (read(go[0], &byte, 1) < 0 && errno == EINTR)
            ;
        close(go[0]);
        if (conf.server_uid[0])
            setenv("SALUS_SERVER_UID", conf.server_uid, 1);
        char ms[16];
        snprintf(ms, sizeof ms, "%d", conf.timeout_s * 1000);
        setenv("SALUS_CONNECT_TIMEOUT_MS", ms, 1);
        salus_client *c;
        int rc = salus_connect(conf.url, &c);
        char msg[512];
        if (rc) {
            snprintf(msg, sizeof msg, "ERR cannot reach salusd at %.200s: %.250s", conf.url,
                     salus_last_error(NULL));
        } else {
            uint32_t closed = 0;
            if (what == CALL_REGISTER)
                rc = salus_job_register(c, job, step, uid, memory, priority);
            else
                rc = salus_job_close(c, job, step, what == CALL_CLOSE_JOB, &closed);
            if (rc)
                snprintf(msg, sizeof msg, "ERR %s", salus_last_error(c));
            else
                snprintf(msg, sizeof msg, "OK %u", closed);
            salus_disconnect(c);
        }
        ssize_t n = write(fds[1], msg, strlen(msg));
        _exit(n > 0 && rc == 0 ? 0 : 1);
    }
    close(fds[1]);
    close(go[0]);
    /* the child cannot have exited: it waits on go */
    int pidfd = child_pidfd(pid);
    close(go[1]);
    /* the answer comes through the pipe: slurmstepd may reap the child
     * itself (it waits for any child), so its exit status is not ours to
     * rely on */
    char buf[512];
    size_t got = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int left_ms = (conf.timeout_s + 2) * 1000;
    while (got < sizeof buf - 1 && left_ms > 0) {
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pfd, 1, left_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        ssize_t n = read(fds[0], buf + got, sizeof buf - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t) n;
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        left_ms = (conf.timeout_s + 2) * 1000 -
                  (int) ((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
    }
    buf[got] = '\0';
    close(fds[0]);
    /* an answer, OK or ERR, means the helper is exiting by itself; only a
     * helper stuck on salusd is killed, so that it does not outlive the step */
    bool answered = strncmp(buf, "OK", 2) == 0 || strncmp(buf, "ERR", 3) == 0;
    end_helper(pidfd, !answered);
    if (strncmp(buf, "OK", 2) == 0)
        return 0;
    snprintf(why, why_len, "%s", got > 4 ? buf + 4 : "salusd did not answer in time");
    return -1;
}

/* Every callback gets the plugstack.conf arguments, and Slurm calls
 * slurm_spank_init in some contexts only (not before the job epilog). */
static int configure(int ac, char **av)
{
    static bool done;
    if (done)
        return 0;
    done = true;
    return parse_args(ac, av);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void) sp;
    return configure(ac, av);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void) ac;
    (void) av;
    if (!spank_remote(sp) || !(asked || conf.default_on))
        return 0;
    uint32_t job, step;
    uid_t uid;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
        slurm_error("salus: cannot read the job's id, step or uid");
        return -1;
    }
    uint64_t shards = 0;
    int prio = 0;
    if (job_figures(job, &shards, &prio) != 0) {
        if (asked)
            snprintf(refusal, sizeof refusal,
                     "job step %u.%u: cannot read the job from the controller", job, step);
        return 0; /* default=on: the step runs, without salus */
    }
    if (has_user_prio && user_prio < prio)
        prio = user_prio;
    uint64_t memory = conf.shard_memory && shards ? shards * conf.shard_memory : 0;
    char why[512];
    if (salus_call(CALL_REGISTER, job, step, (uint32_t) uid, memory, prio, why, sizeof why) != 0) {
        slurm_error("salus: job step %u.%u: %s", job, step, why);
        /* asked for salus: the step cannot run without it (task_init) */
        if (asked)
            snprintf(refusal, sizeof refusal, "job step %u.%u: %s", job, step, why);
        return 0;
    }
    registered = true;
    char id[32];
    snprintf(id, sizeof id, "%u.%u", job, step);
    if (spank_setenv(sp, "SALUS_URL", conf.url, 1) != ESPANK_SUCCESS ||
        spank_setenv(sp, "SALUS_JOB", id, 1) != ESPANK_SUCCESS) {
        slurm_error("salus: cannot set SALUS_URL/SALUS_JOB for step %s", id);
        return -1;
    }
    slurm_info("salus: step %s registered (uid %u, %" PRIu64 " shards, quota %" PRIu64
               " bytes, priority %d)",
               id, (unsigned) uid, shards, memory, prio);
    return 0;
}

/* In each task, before its program: a step that asked for salus and was
 * refused fails here, so that srun exits non-zero. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void) ac;
    (void) av;
    if (!spank_remote(sp) || !refusal[0])
        return 0;
    slurm_error("salus: %s; the step asked for salus (srun --salus) and does not run without it: "
                "start salusd on this node (systemctl start salusd), check that plugstack.conf's "
                "url= (%s) names its --listen socket, or run the step without --salus",
                refusal, conf.url);
    return -1;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void) ac;
    (void) av;
    if (!spank_remote(sp) || !registered)
        return 0;
    uint32_t job, step;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
        return 0;
    char why[512];
    if (salus_call(CALL_CLOSE_STEP, job, step, 0, 0, 0, why, sizeof why) != 0)
        slurm_error("salus: closing job step %u.%u: %s", job, step, why);
    registered = false;
    return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    if (configure(ac, av) != 0)
        return 0;
    uint32_t job;
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return 0;
    char why[512];
    /* salusd may not run on every node: a job that never used it is no error */
    if (salus_call(CALL_CLOSE_JOB, job, 0, 0, 0, 0, why, sizeof why) != 0)
        slurm_debug("salus: closing job %u: %s", job, why);
    return 0;
}
