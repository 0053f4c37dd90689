/* The attack suite's frame (test/attacks/README.md): each attack runs
 * against a real salusd while a victim tenant trains beside it, and counts
 * as held only when
 *   - salusd is alive and still answers a new client,
 *   - the victim never waited longer than a bound for one iteration, and
 *     never got an error,
 *   - salusd's descriptors and memory came back to the baseline taken
 *     before the attack,
 *   - where the attack sets a bound, salusd's memory never rose more than
 *     that above the baseline while it ran (sampled every 10 ms).
 * Every attack prints "ATTACK <name> tried" when it starts and
 * "ATTACK <name> held" or "ATTACK <name> BROKEN: <why>" when it ends;
 * scripts/testsummary counts these lines into "ATTACKS tried=N held=N". An
 * attack that cannot be performed here prints "ATTACK <name> skipped: <why>"
 * instead and counts as neither.
 *
 * The attacker runs as another user than the victim and than salusd where
 * the test runs as root (sl_attack_as_tenant), as a hostile second tenant
 * on a shared host would. */
#ifndef SL_ATTACK_H
#define SL_ATTACK_H

#include "harness.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* The uid attackers run as when the test runs as root (nobody). */
#define SL_ATTACK_UID 65534
/* Default bound on one victim iteration during an attack: generous for a
 * loaded 2-core machine, far below the freezes the attacks cause when they
 * work (tens of seconds). */
#define SL_ATTACK_VICTIM_BOUND_MS 2000

typedef struct sl_attack {
    const char *name;
    sl_test_server srv;
    /* checks; set after sl_attack_begin, before sl_attack_end */
    uint64_t victim_bound_ms; /* longest acceptable victim iteration */
    int fd_slack;             /* descriptors above the baseline tolerated */
    uint64_t rss_slack;       /* bytes of RSS above the baseline tolerated */
    uint64_t rss_peak_bound;  /* 0, or bytes above the baseline RSS may reach during it */
    /* the baseline (after the victim's warm-up) */
    int fds0;
    uint64_t rss0;
    /* the victim */
    pthread_t victim;
    pthread_mutex_t lock;
    bool stop;
    uint64_t iterations;
    uint64_t worst_ns; /* longest iteration since sl_attack_begin returned */
    int error;         /* first error the victim got (SALUS_OK: none) */
    char error_text[256];
    uint64_t victim_session; /* its session id, once open */
    /* set by sl_attack_end: salusd removed its socket file as it exited */
    bool socket_removed;
    /* salusd's RSS, sampled from sl_attack_begin to sl_attack_end */
    pthread_t monitor;
    uint64_t rss_peak;
    /* set by the attack before sl_attack_end when it got through in a way
     * the frame cannot see (a file opened, a budget passed): why */
    char broken[256];
} sl_attack;

/* Starts salusd (ipc://, cpu backend, sockets mode 0666 so that other users'
 * tenants can connect, plus extra args, NULL-terminated, may be NULL) and
 * the victim, waits for the victim's warm-up and takes the baseline. Prints
 * "ATTACK <name> tried". */
void sl_attack_begin(sl_attack *a, const char *name, const char *const *extra_args);
/* sl_attack_begin with salusd's output (its log) in a file that
 * sl_attack_log_has reads; the file goes with sl_attack_end unless the
 * attack broke through. */
void sl_attack_begin_logged(sl_attack *a, const char *name, const char *const *extra_args);
/* Whether salusd's log (sl_attack_begin_logged) contains text; with
 * copy, the whole log (up to len bytes, NUL-terminated) goes there too. */
bool sl_attack_log_has(const sl_attack *a, const char *text, char *copy, size_t len);
/* Checks everything listed at the top, prints the verdict, stops salusd.
 * Returns true when the attack was held; `detail` (may be NULL) is added to
 * the verdict line (what was tried, how many times). */
bool sl_attack_end(sl_attack *a, const char *detail);
/* Records, before sl_attack_end, that the attack got through in a way the
 * frame cannot see (a file opened, a limit passed) unless ok: the verdict
 * is then BROKEN with `what`. The first such record wins. */
void sl_attack_expect(sl_attack *a, bool ok, const char *what);
/* For attacks that need no running victim (salusd refusing to start, a
 * client refusing a server): prints "ATTACK <name> tried" now, and
 * sl_attack_verdict prints "ATTACK <name> held" or "... BROKEN: <why>"
 * (why NULL: held) and returns whether it held. */
void sl_attack_tried(const char *name);
bool sl_attack_verdict(const char *name, const char *why, const char *detail);
/* Prints "ATTACK <name> skipped: <why>". */
void sl_attack_skip(const char *name, const char *why);
/* For an attack that can run only where can holds: true when it can,
 * otherwise prints the skip line (sl_attack_skip) and returns false. */
bool sl_attack_may_run(const char *name, bool can, const char *why);

/* Runs fn(arg) in a child process as SL_ATTACK_UID (when root; as the
 * current user otherwise) and returns fn's result as the exit status, or -1
 * if the child died by a signal or ran past timeout_s. */
int sl_attack_as_tenant(int (*fn)(void *arg), void *arg, int timeout_s);
/* Attacks whose tenant uses NNG (libsalusclient): a child forked from a
 * process whose NNG threads run cannot use NNG, so the tenant is this
 * program run again, "--attack-tenant" then args (NULL-terminated), which
 * main hands to sl_attack_tenant_start before anything else. Returns its
 * exit status, or -1 (killed by a signal, or past timeout_s). */
int sl_attack_exec_tenant(const char *const *args, int timeout_s);
/* sl_attack_exec_tenant without the wait: returns the tenant's pid (for
 * sl_test_wait), so the test can look at salusd while the tenant holds
 * what it made. */
pid_t sl_attack_spawn_tenant(const char *const *args);
/* First thing in main: when argv asks for the tenant part, becomes
 * SL_ATTACK_UID (when root) and returns true; the tenant's arguments start
 * at argv[2]. False otherwise (the test itself). */
bool sl_attack_tenant_start(int argc, char **argv);

/* A memory cgroup for salusd (sl_attack_cgroup_enter). */
typedef struct sl_attack_cgroup {
    bool real;           /* the kernel enforces the limit */
    char dir[512];       /* real: the cgroup's folder; else the fake tree's */
    char parent[512];    /* real: the folder this process came from */
    const char *version; /* "v2", "v1" or "a fake tree" */
} sl_attack_cgroup;

/* Makes the salusd that sl_attack_begin starts next live under a memory
 * limit of limit bytes: in a real memory cgroup, a child of this process's
 * own (cgroup v2, else v1's memory hierarchy), when this process may make
 * one (root, a writable hierarchy); this process moves into it until
 * sl_attack_cgroup_started. Otherwise salusd is pointed by
 * $SALUS_TEST_CGROUP_ROOT at a fake tree holding that limit: its budgets
 * follow it, but the kernel enforces nothing (the attack must check RSS
 * itself). Prints which. */
void sl_attack_cgroup_enter(sl_attack_cgroup *cg, uint64_t limit);
/* Right after sl_attack_begin: this process leaves the cgroup (salusd
 * stays) and the environment goes back as it was. */
void sl_attack_cgroup_started(sl_attack_cgroup *cg);
/* After sl_attack_end (salusd gone): removes the cgroup or the fake tree.
 * Returns how many times the kernel's OOM killer acted in it (0 for a fake
 * tree). */
int sl_attack_cgroup_remove(sl_attack_cgroup *cg);

/* True when attackers really run as another user (the test runs as root). */
bool sl_attack_cross_user(void);

/* The number after `key` (e.g. "VmRSS:") in a /proc file such as
 * /proc/PID/status or /proc/meminfo; 0 when the file or the key is missing. */
long sl_attack_proc_value(const char *path, const char *key);
/* salusd's open descriptors and resident bytes right now. */
int sl_attack_fds(pid_t pid);
uint64_t sl_attack_rss(pid_t pid);
/* The path of salusd's ipc socket (srv.url without "ipc://"). */
const char *sl_attack_socket_path(const sl_attack *a);

#endif
