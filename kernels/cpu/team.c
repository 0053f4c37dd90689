/* Thread teams (cpu.h): the helpers that split one op of a stream across
 * cores. Why not OpenMP's team: GNU OpenMP's idle threads either spin
 * without bound (the default, which steals a core from other tenants and
 * from salusd's own transport) or sleep at once (OMP_WAIT_POLICY=PASSIVE,
 * what an operator sets on a shared machine), and then every parallel
 * region pays a futex wake-up: on this VM about as long as half of a
 * 128x256x784 GEMM, so splitting the MLP's GEMMs across two cores bought
 * nothing. A team's helpers spin for a bounded time after their last part
 * (SPIN_NS) and then sleep: the ops of one iteration reach them while they
 * still spin, and a helper sleeps whenever its stream waits for a client,
 * or at once when another thread runs an op (that thread needs the core
 * more).
 *
 * Each calling thread has its own team (thread-local, like an OpenMP
 * team), started from that thread, so its helpers inherit its affinity and
 * scheduling class: a low-priority stream's helpers run SCHED_IDLE as its
 * worker does, and sl_cpu_apply_cores moves them with the worker.
 *
 * A job is published as one 64-bit ticket: generation, part count and the
 * next part to claim. A helper claims a part by compare-and-swap on the
 * ticket, so it can never take a part of a job other than the one whose
 * generation it read, and the caller, which claims parts the same way,
 * never waits for a helper that has not started: it runs the parts nobody
 * took itself. */
#include "cpu.h"

#include "sl_alloc.h"
#include "sl_log.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef __SSE2__
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void) 0)
#endif

/* How long an idle helper spins before it sleeps. Waking a sleeping one
 * costs about 100 microseconds on this VM; a training client's turnaround
 * between two iterations (reply, next batch, request) took 190-275
 * microseconds through ipc:// (salusctl trace of bench/train_vs_torch's
 * MLP). Spinning past that keeps the team awake from one iteration to the
 * next; a stream idle for longer costs at most this much of one core. */
#define SPIN_NS 500000

/* At most this many helpers per team: more parts than that run on the
 * threads there are. */
#define MAX_HELPERS 63

#define TICKET(gen, parts, next) (((uint64_t) (gen) << 32) | ((uint64_t) (parts) << 16) | (next))
#define T_GEN(t) ((uint32_t) ((t) >> 32))
#define T_PARTS(t) ((uint32_t) ((t) >> 16) & 0xffffu)
#define T_NEXT(t) ((uint32_t) (t) &0xffffu)

typedef struct team {
    _Atomic uint64_t ticket;
    sl_cpu_part_fn fn; /* the job of the ticket's generation */
    void *arg;
    atomic_uint done;    /* parts of the current job finished */
    atomic_uint wake;    /* moves with every job: what sleepers wait on */
    atomic_int sleepers; /* helpers inside (or entering) futex_wait */
    atomic_bool stop;    /* set once, when the owning thread ends */
    atomic_int in_op;    /* 1 while the owning thread runs an op */
    atomic_int want;     /* helpers the latest job can use: the rest sleep at once */
    int n;               /* helpers started */
    bool start_failed;   /* a helper could not be started: no more tries */
    pthread_t helper[MAX_HELPERS];
    struct helper_arg {
        struct team *t;
        int index;
    } arg_of[MAX_HELPERS];
} team;

/* cpu ops running in this process (sl_cpu_op_begin) */
static atomic_int ops_running;

static pthread_key_t team_key;
static bool team_key_ok; /* written once, under team_once */
static pthread_once_t team_once = PTHREAD_ONCE_INIT;
static _Thread_local team *my_team;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static void futex_wait(atomic_uint *addr, unsigned seen)
{
    (void) syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr)
{
    (void) syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims and runs parts of the ticket's job until none is left; returns
 * how many it ran. */
static unsigned run_parts(team *t)
{
    unsigned ran = 0;
    uint64_t tk = atomic_load(&t->ticket);
    for (;;) {
        if (T_NEXT(tk) >= T_PARTS(tk))
            return ran;
        if (!atomic_compare_exchange_weak(&t->ticket, &tk, tk + 1))
            continue;
        /* the job cannot end before this part does: fn and arg are its */
        t->fn(t->arg, (int) T_NEXT(tk), (int) T_PARTS(tk));
        atomic_fetch_add(&t->done, 1);
        ran++;
        tk = atomic_load(&t->ticket);
    }
}

/* Whether an op runs on another thread than the team's owner. */
static bool others_busy(team *t)
{
    return atomic_load(&ops_running) > atomic_load(&t->in_op);
}

static bool claimable(team *t)
{
    uint64_t tk = atomic_load(&t->ticket);
    return T_NEXT(tk) < T_PARTS(tk);
}

static void *helper_main(void *arg)
{
    const struct helper_arg *a = arg;
    team *t = a->t;
    while (!atomic_load(&t->stop)) {
        unsigned seen = atomic_load(&t->wake);
        if (run_parts(t))
            continue;
        /* spin while nothing else wants the core, then sleep; a helper the
         * latest job had no part for (the team's cores shrank) sleeps at
         * once rather than compete with its owner. The spin yields the core
         * now and then: between two iterations the client and the
         * transport's threads need it (on the 2-core VM, yielding made the
         * MLP's training steps 4.7 % faster, 9 of 10 interleaved runs) */
        uint64_t until = a->index < atomic_load(&t->want) ? now_ns() + SPIN_NS : 0;
        bool found = false;
        for (unsigned i = 0; !found; i++) {
            found = claimable(t) || atomic_load(&t->stop);
            if (!found && (i & 63) == 63) {
                if (now_ns() > until || others_busy(t))
                    break;
                sched_yield();
            }
            cpu_relax();
        }
        if (found)
            continue;
        atomic_fetch_add(&t->sleepers, 1);
        if (!claimable(t) && !atomic_load(&t->stop))
            futex_wait(&t->wake, seen);
        atomic_fetch_sub(&t->sleepers, 1);
    }
    return NULL;
}

static void team_end(void *arg)
{
    team *t = arg;
    atomic_store(&t->stop, true);
    atomic_fetch_add(&t->wake, 1);
    futex_wake_all(&t->wake);
    for (int i = 0; i < t->n; i++)
        pthread_join(t->helper[i], NULL);
    sl_free(t);
    my_team = NULL; /* a later destructor of this thread may still run ops */
}

static void make_key(void)
{
    team_key_ok = pthread_key_create(&team_key, team_end) == 0;
    if (!team_key_ok)
        sl_log_warn("cpu.team", "no thread key: ops run without helper threads");
}

/* The calling thread's team with at least `helpers` helpers (fewer when a
 * thread cannot be started); NULL when it has none. */
static team *team_get(int helpers)
{
    team *t = my_team;
    if (!t) {
        pthread_once(&team_once, make_key);
        if (!team_key_ok) /* a team nobody could reclaim when its thread ends */
            return NULL;
        t = sl_calloc(1, sizeof *t);
        if (!t)
            return NULL;
        my_team = t;
        (void) pthread_setspecific(team_key, t);
    }
    if (helpers > MAX_HELPERS)
        helpers = MAX_HELPERS;
    while (t->n < helpers && !t->start_failed) {
        t->arg_of[t->n] = (struct helper_arg){t, t->n};
        int rc = pthread_create(&t->helper[t->n], NULL, helper_main, &t->arg_of[t->n]);
        if (rc != 0) {
            sl_log_warn("cpu.team", "cannot start a helper thread: %s; %d are all this team gets",
                        strerror(rc), t->n);
            t->start_failed = true;
            break;
        }
        char name[16];
        snprintf(name, sizeof name, "sl-cpu-team%d", (t->n + 1) % 100);
        (void) pthread_setname_np(t->helper[t->n], name);
        t->n++;
    }
    return t->n ? t : NULL;
}

void sl_cpu_parallel(int parts, sl_cpu_part_fn fn, void *arg)
{
    /* a ticket counts parts in 16 bits */
    team *t = parts > 1 && parts <= 0xffff ? team_get(parts - 1) : NULL;
    if (!t) {
        for (int p = 0; p < parts; p++)
            fn(arg, p, parts);
        return;
    }
    t->fn = fn;
    t->arg = arg;
    atomic_store(&t->want, parts - 1);
    atomic_store(&t->done, 0);
    uint32_t gen = T_GEN(atomic_load(&t->ticket)) + 1;
    atomic_store(&t->ticket, TICKET(gen, parts, 0));
    atomic_fetch_add(&t->wake, 1);
    if (atomic_load(&t->sleepers) > 0)
        futex_wake_all(&t->wake);
    run_parts(t);
    /* the parts helpers took are running now: wait for them */
    for (unsigned i = 0; atomic_load(&t->done) < (unsigned) parts; i++) {
        if (i < 4096)
            cpu_relax();
        else
            sched_yield();
    }
}

void sl_cpu_team_set_cores(const cpu_set_t *cores)
{
    team *t = my_team;
    for (int i = 0; t && i < t->n; i++)
        (void) pthread_setaffinity_np(t->helper[i], sizeof *cores, cores);
}

void sl_cpu_op_begin(void)
{
    atomic_fetch_add(&ops_running, 1);
    if (my_team)
        atomic_store(&my_team->in_op, 1);
}

void sl_cpu_op_end(void)
{
    if (my_team)
        atomic_store(&my_team->in_op, 0);
    atomic_fetch_sub(&ops_running, 1);
}

struct units_job {
    const sl_op_call *c;
    sl_cpu_units_fn fn;
    uint64_t n;
};

static void units_part(void *arg, int part, int parts)
{
    const struct units_job *j = arg;
    uint64_t u0 = j->n * (uint64_t) part / (uint64_t) parts;
    uint64_t u1 = j->n * (uint64_t) (part + 1) / (uint64_t) parts;
    if (u0 < u1)
        j->fn(j->c, u0, u1);
}

void sl_cpu_run_units(const sl_op_call *c, sl_cpu_units_fn fn, uint64_t n, uint64_t work,
                      uint64_t min_work, int threads)
{
    int parts = (uint64_t) threads < n ? threads : (int) n;
    if (parts > 1 && work >= min_work) {
        struct units_job j = {c, fn, n};
        sl_cpu_parallel(parts, units_part, &j);
    } else if (n > 0) {
        fn(c, 0, n);
    }
}
