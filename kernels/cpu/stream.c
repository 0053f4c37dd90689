/* cpu streams: one worker thread per stream executing an in-order command
 * queue (workq.h); the worker runs each op or copy itself. */
#include "cpu.h"

#include "guard.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "workq.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum cmd_kind { CMD_OP, CMD_COPY, CMD_WORKSPACE };

/* The payload of a work command. */
struct cmd {
    enum cmd_kind kind;
    union {
        sl_op_call op;
        struct {
            void *dst;
            const void *src;
            size_t n;
            bool guarded; /* host memory that may be a client's */
        } copy;
        struct {
            void *ptr;
            size_t bytes;
        } workspace;
    } u;
};

struct sl_stream {
    sl_workq *q;
    int priority;     /* as created (device.h) */
    sl_cpu_exec exec; /* the worker's alone */
    /* the partition it is bound to (stream_bind; NULL = every core), and
     * what the worker last applied: the partition and its generation, or
     * NULL after leaving one (the worker then goes back to `home`) */
    _Atomic(sl_partition *) part;
    sl_partition *applied;
    unsigned applied_gen;
    /* a normal-priority stream also runs on lent cores (partition_lend):
     * how many of its cores are lent ones, the loans' generation it
     * applied, and whether its cores are every usable one (its ops may then
     * run on any thread, sl_workq_release) */
    int lent_cores;
    unsigned applied_lent_gen;
    bool everywhere;
    int home_max_threads; /* max_threads before any partition */
    cpu_set_t home;       /* the worker's own cores before any partition */
    bool home_set;
};

/* Before an op, on the worker: moves it (and its OpenMP team) to the
 * cores of the partition it is bound to, when that changed. */
static void follow_partition(sl_stream *s)
{
    /* a pointer compare needs no reference; applied is held */
    sl_partition *p = atomic_load(&s->part);
    if (!p && !s->applied)
        return;
    sl_cpu_shared *sh = s->exec.shared;
    bool borrow = s->priority >= 0;
    if (p && p == s->applied && atomic_load(&p->gen) == s->applied_gen &&
        (!borrow || atomic_load(&sh->lent_gen) == s->applied_lent_gen))
        return;
    cpu_set_t cores, lent;
    CPU_ZERO(&cores);
    s->applied_gen = sl_cpu_partition_follow(sh, &s->part, &s->applied, &cores, borrow, &lent,
                                             &s->applied_lent_gen);
    p = s->applied;
    s->lent_cores = CPU_COUNT(&lent);
    if (CPU_COUNT(&cores) > 0)
        CPU_OR(&cores, &cores, &lent);
    s->everywhere = p && CPU_COUNT(&cores) > 0 && CPU_EQUAL(&cores, &sh->usable);
    if (!s->home_set) {
        if (sched_getaffinity(0, sizeof s->home, &s->home) != 0)
            CPU_ZERO(&s->home);
        s->home_max_threads = s->exec.max_threads;
        s->home_set = true;
    }
    int team = sh->cores;
    if (p && CPU_COUNT(&cores) > 0) {
        s->exec.max_threads = sl_cpu_apply_cores(&cores, team);
    } else {
        /* unbound, or bound to a partition destroyed meanwhile */
        if (CPU_COUNT(&s->home) > 0)
            (void) sl_cpu_apply_cores(&s->home, team);
        s->exec.max_threads = s->home_max_threads;
    }
}

/* Runs one op with its share of the cores (see cpu.h): cores divided by
 * the streams running an op at this moment, this one included; in a
 * partition, the partition's cores (with those lent to it) by its streams
 * running an op. */
static int run_op(sl_stream *s, const sl_op_call *call)
{
    sl_cpu_exec *x = &s->exec;
    sl_cpu_shared *sh = x->shared;
    follow_partition(s);
    sl_partition *p = s->applied;
    atomic_int *counter = p ? &p->running : &sh->running;
    int cores = p ? atomic_load(&p->n_cores) : sh->cores;
    if (p && cores > 0)
        cores += s->lent_cores;
    if (cores < 1)
        cores = 1; /* destroyed under it: it keeps its cores for this op */
    int running = atomic_fetch_add(counter, 1) + 1;
    int forced = atomic_load(&sh->forced_threads), share = cores / running;
    x->threads = forced > 0 ? forced : share > 1 ? share : 1;
    if (x->max_threads && x->threads > x->max_threads)
        x->threads = x->max_threads;
    sl_cpu_op_begin();
    int rc = sl_cpu_run_op(x, call);
    sl_cpu_op_end();
    atomic_fetch_sub(counter, 1);
    return rc;
}

/* Runs one command; returns its error. Called on the worker without the lock. */
static int execute(void *ctx, void *payload)
{
    sl_stream *s = ctx;
    struct cmd *c = payload;
    switch (c->kind) {
    case CMD_OP:
        return run_op(s, &c->u.op);
    case CMD_COPY:
        if (c->u.copy.guarded)
            return sl_guarded_copy(c->u.copy.dst, c->u.copy.src, c->u.copy.n);
        memmove(c->u.copy.dst, c->u.copy.src, c->u.copy.n);
        return SL_OK;
    case CMD_WORKSPACE:
        s->exec.workspace = c->u.workspace.ptr;
        s->exec.workspace_bytes = c->u.workspace.bytes;
        return SL_OK;
    }
    return SL_EINTERNAL;
}

/* A low-priority stream's worker moves itself to SCHED_IDLE and off the
 * first of the cores it may use before it runs anything; the OpenMP threads
 * it starts later for oneDNN inherit both. A normal thread waking next to it
 * then takes the core at once, where a nice-19 one may first wait out the
 * low one's time slice (measured with bench/priority: about a millisecond
 * at the tail), and the first core stays free for high-priority work and
 * the transport. A thread cannot leave SCHED_IDLE without CAP_SYS_NICE,
 * which is why a stream's priority is fixed when it is created; priorities
 * above normal would need that privilege too, so they run as normal. */
static void worker_start(void *ctx)
{
    sl_stream *s = ctx;
    if (s->priority >= 0)
        return;
    struct sched_param none = {0};
    if (sched_setscheduler(0, SCHED_IDLE, &none) != 0)
        sl_log_warn("cpu.stream.idle", "cannot lower a low-priority stream's thread: %s",
                    strerror(errno));
    cpu_set_t cores;
    if (sched_getaffinity(0, sizeof cores, &cores) != 0 || CPU_COUNT(&cores) < 2)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &cores)) {
            CPU_CLR(c, &cores);
            break;
        }
    }
    if (sched_setaffinity(0, sizeof cores, &cores) == 0)
        s->exec.max_threads = CPU_COUNT(&cores);
}

/* oneDNN state is freed by the thread that made it: its OpenMP pool
 * belongs to the worker thread too. */
static void worker_exit(void *ctx)
{
    sl_stream *s = ctx;
    sl_cpu_dnnl_free(s->exec.dnnl);
    s->exec.dnnl = NULL;
    sl_free(s->exec.half_buf);
    s->exec.half_buf = NULL;
    s->exec.half_bytes = 0;
    sl_cpu_trims_free(s->exec.trims);
    s->exec.trims = NULL;
    sl_free(s->exec.trim_buf);
    s->exec.trim_buf = NULL;
    s->exec.trim_bytes = 0;
}

/* A failure's reason lives until the host callback that reports its
 * status has run (the reader takes it there): never attached to a later
 * failure, possibly another session's, that gave none. Commands run one at
 * a time in order, so this never races the ops that set it. */
static void after_callback(void *ctx)
{
    sl_stream *s = ctx;
    s->exec.failure[0] = 0;
}

/* Copies, workspace changes and ops in C or GEMM (gemm.c: no state, one
 * thread) run on any thread; oneDNN's primitives need the worker, which
 * owns their state. */
static bool runs_anywhere(void *ctx, const void *payload)
{
    const sl_stream *s = ctx;
    const struct cmd *c = payload;
    /* a partitioned stream's ops run on its cores only: on any thread only
     * when those are every core and nothing changed since its worker
     * applied them (the worker is idle here: sl_workq_release). A stream
     * unbound since (p NULL, applied not) must go home on its own worker
     * first: follow_partition moves the thread that runs the op. */
    sl_partition *p = atomic_load(&s->part);
    if (c->kind == CMD_OP && p != s->applied)
        return false;
    if (c->kind == CMD_OP && p &&
        !(s->everywhere && atomic_load(&p->gen) == s->applied_gen &&
          atomic_load(&s->exec.shared->lent_gen) == s->applied_lent_gen))
        return false;
    return c->kind != CMD_OP || !sl_cpu_call_uses_dnnl(&c->u.op);
}

static const sl_workq_config cpu_workq = {
    .payload_size = sizeof(struct cmd),
    .exec = execute,
    .worker_start = worker_start,
    .after_callback = after_callback,
    .runs_anywhere = runs_anywhere,
    .worker_exit = worker_exit,
    .log_id = "cpu.stream",
    .lost_log_id = "cpu.stream.lost",
};

int sl_cpu_stream_create(sl_device *dev, int priority, sl_stream **out)
{
    sl_stream *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    s->priority = priority;
    atomic_init(&s->part, NULL);
    s->exec.shared = sl_cpu_shared_of(dev);
    s->exec.threads = 1;
    char name[16];
    snprintf(name, sizeof name, "sl-cpu%d-%s", dev->index, priority < 0 ? "bg" : "s");
    int rc = sl_workq_create(&cpu_workq, s, name, &s->q);
    if (rc != SL_OK) {
        sl_free(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

void sl_cpu_stream_destroy(sl_device *dev, sl_stream *s)
{
    (void) dev;
    if (!s)
        return;
    sl_workq_destroy(s->q);
    sl_cpu_partition_unref(s->exec.shared, s->applied);
    sl_free(s);
}

static int copy(sl_stream *s, void *dst, const void *src, size_t n, bool guarded)
{
    if (n == 0)
        return SL_OK;
    if (!dst || !src)
        return SL_EINVAL;
    int rc;
    struct cmd *c = sl_workq_begin(s->q, &rc);
    if (!c)
        return rc;
    c->kind = CMD_COPY;
    c->u.copy.dst = dst;
    c->u.copy.src = src;
    c->u.copy.n = n;
    c->u.copy.guarded = guarded;
    return sl_workq_commit(s->q, c);
}

/* Host buffers of copies in and out may be a client's shared memory
 * (server/shm.c): a fault there fails the copy, not the server. */
int sl_cpu_memcpy_host(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    (void) dev;
    return copy(s, dst, src, n, true);
}

int sl_cpu_memcpy(sl_device *dev, sl_stream *s, void *dst, const void *src, size_t n)
{
    (void) dev;
    return copy(s, dst, src, n, false);
}

int sl_cpu_launch(sl_device *dev, sl_stream *s, const sl_op_call *call)
{
    (void) dev;
    int rc = sl_cpu_op_check(call);
    if (rc != SL_OK)
        return rc;
    struct cmd *c = sl_workq_begin(s->q, &rc);
    if (!c)
        return rc;
    /* Copy only the used tensor refs: most of an sl_op_call is spare slots. */
    sl_op_call *op = &c->u.op;
    c->kind = CMD_OP;
    op->op = call->op;
    op->n_in = call->n_in;
    op->n_out = call->n_out;
    op->attrs = call->attrs;
    memcpy(op->in, call->in, call->n_in * sizeof call->in[0]);
    memcpy(op->in_version, call->in_version, call->n_in * sizeof call->in_version[0]);
    memcpy(op->out, call->out, call->n_out * sizeof call->out[0]);
    return sl_workq_commit(s->q, c);
}

/* In stream order: the worker alone reads the workspace, between ops. */
int sl_cpu_stream_set_workspace(sl_device *dev, sl_stream *s, void *ptr, size_t bytes)
{
    (void) dev;
    if ((!ptr && bytes) || ((uintptr_t) ptr & 255))
        return SL_EINVAL;
    int rc;
    struct cmd *c = sl_workq_begin(s->q, &rc);
    if (!c)
        return rc;
    c->kind = CMD_WORKSPACE;
    c->u.workspace.ptr = bytes ? ptr : NULL;
    c->u.workspace.bytes = bytes;
    return sl_workq_commit(s->q, c);
}

int sl_cpu_host_callback(sl_device *dev, sl_stream *s, sl_host_fn fn, void *arg)
{
    (void) dev;
    if (!fn)
        return SL_EINVAL;
    return sl_workq_host_callback(s->q, fn, arg);
}

/* Called from a host callback of s: commands of s run one at a time, in
 * order, so no op of s touches the exec state meanwhile. */
size_t sl_cpu_stream_failure(sl_device *dev, sl_stream *s, char *buf, size_t len)
{
    (void) dev;
    if (!len)
        return 0;
    size_t n = strnlen(s->exec.failure, sizeof s->exec.failure);
    n = n < len - 1 ? n : len - 1;
    memcpy(buf, s->exec.failure, n);
    buf[n] = 0;
    s->exec.failure[0] = 0;
    return n;
}

int sl_cpu_synchronize(sl_device *dev, sl_stream *s)
{
    (void) dev;
    return sl_workq_synchronize(s->q);
}

void sl_cpu_stream_hold(sl_device *dev, sl_stream *s)
{
    (void) dev;
    sl_workq_hold(s->q);
}

void sl_cpu_stream_release(sl_device *dev, sl_stream *s, bool run_here)
{
    (void) dev;
    sl_workq_release(s->q, run_here);
}

int sl_cpu_inject_error(sl_stream *s, int code)
{
    if (code <= SL_OK || code >= SL_E_COUNT)
        return SL_EINVAL;
    return sl_workq_inject_error(s->q, code);
}

unsigned sl_cpu_cached_prims(sl_stream *s)
{
    sl_workq_lock(s->q);
    unsigned n = sl_cpu_dnnl_count(s->exec.dnnl);
    sl_workq_unlock(s->q);
    return n;
}

/* The worker reads the binding before each op; the caller guarantees the
 * stream is idle, so no op is running while it changes. */
int sl_cpu_stream_bind(sl_device *dev, sl_stream *s, sl_partition *p)
{
    if (p && p->shared != sl_cpu_shared_of(dev))
        return SL_EINVAL;
    sl_cpu_partition_bind(p ? p->shared : sl_cpu_shared_of(dev), &s->part, p);
    return SL_OK;
}
