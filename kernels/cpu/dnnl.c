/* oneDNN primitives cached per stream.
 *
 * Creating a oneDNN primitive (descriptor, implementation choice, JIT code
 * generation) costs from tens of microseconds to milliseconds; a training
 * loop launches the same shapes every iteration. So each stream keeps a
 * small LRU cache of ready primitives, keyed by everything that determines
 * one: op, tensor dims, attributes and thread count (oneDNN fixes the
 * thread count of a primitive when it is created). The memory objects of a
 * cached primitive are re-pointed at each launch's tensors with
 * set_data_handle; nothing is copied unless the primitive wants a blocked
 * layout, in which case the tensor is reordered into the stream's scratch
 * buffer (measured: blocked-layout convolutions run about 3x faster here
 * than oneDNN's GEMM-based convolution on plain NCHW, reorders included).
 * The scratch buffer also holds oneDNN's own scratchpad (user scratchpad
 * mode), so a steady-state launch allocates nothing. When the stream has a
 * workspace (salusd: the lane's framework block) the scratch is that
 * workspace, and an op whose scratch does not fit in it fails with
 * SL_EEXHAUSTED instead of allocating.
 *
 * Weights whose tensor carries a version (sl_tensor_ref: persistent
 * tensors in salusd) are reordered once per (address, layout) and version
 * into a buffer of their own, kept across launches: a model served for
 * inference reorders its weights on the first call only (ResNet-18 at
 * batch 1 spent about a tenth of each inference re-reordering 46 MB of
 * weights that had not changed). A training step's new weights refresh the
 * same buffer in place. The buffers of a stream hold at most
 * WCACHE_BYTES; a weight that does not fit is reordered through the
 * scratch as before, so the bound costs speed, never correctness. */
#include "dnnl_cache.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <dnnl_debug.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Distinct (op, shapes, attrs, threads) kept per stream: a CNN's training
 * and inference graphs at two thread counts fit easily. */
#define CACHE_ENTRIES 64
/* Alignment of every buffer carved out of the scratch: a cache line, and
 * what oneDNN's vector loads like. */
#define SCRATCH_ALIGN 64
/* Reordered weights kept per stream: ResNet-50's 100 MB of weights fit,
 * and a salusd has a few streams per device. */
#define WCACHE_ENTRIES 256
#define WCACHE_BYTES (128ull << 20)

struct key {
    uint16_t op;
    uint16_t threads;
    uint32_t zero;
    int64_t dims[SL_OP_MAX_IN + 1][4]; /* inputs, then out[0] */
    uint8_t dtypes[SL_OP_MAX_IN + 1];  /* the same */
    int64_t attrs[SL_OP_MAX_IATTRS];
    float fattrs[SL_OP_MAX_FATTRS]; /* matmul_acc's factors are in its primitive */
};

struct arg {
    int arg, tensor;
    dnnl_memory_t user;       /* wraps the tensor itself */
    dnnl_memory_t inner;      /* NULL, or the primitive's layout in scratch */
    dnnl_primitive_t reorder; /* user -> inner (inputs), inner -> user (outputs) */
    size_t inner_off;
};

struct entry {
    struct key key;
    uint64_t hash, last_used;
    dnnl_primitive_t prim;
    unsigned n_args;
    struct arg args[SL_CPU_PRIM_MAX_ARGS];
    dnnl_memory_t scratchpad; /* NULL when the primitive needs none */
    size_t scratchpad_off, scratch_bytes;
    /* The scratch buffer the inner memories point into: re-pointing them
     * only when it moved spares oneDNN's zeroing of blocked padding. */
    void *scratch_set;
};

/* Weights at src, reordered into layout md, as they were at version. */
struct wcached {
    const void *src;
    uint64_t version;
    dnnl_memory_desc_t md;
    dnnl_memory_t mem; /* md over buf */
    void *buf;
    size_t bytes;
};

struct sl_cpu_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_attr_t attr; /* user scratchpad mode */
    unsigned n;
    uint64_t clock;
    struct entry entries[CACHE_ENTRIES];
    void *scratch;
    size_t scratch_bytes;
    int omp_threads; /* what omp_set_num_threads last got on this worker */
    unsigned n_w;
    size_t w_bytes;
    struct wcached w[WCACHE_ENTRIES];
};

/* The one place oneDNN statuses become salus codes. */
static int from_dnnl(dnnl_status_t st, const char *what)
{
    static const struct {
        dnnl_status_t st;
        int code;
    } map[] = {
        {dnnl_success, SL_OK},
        {dnnl_out_of_memory, SL_ENOMEM},
        {dnnl_unimplemented, SL_EUNSUPPORTED},
    };
    int code = SL_EDEVICE;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].st == st)
            code = map[i].code;
    if (code != SL_OK)
        sl_log_err("cpu.dnnl", "oneDNN %s failed: %s", what, dnnl_status2str(st));
    return code;
}

dnnl_data_type_t sl_cpu_dnnl_dt(unsigned dtype)
{
    return dtype == SL_BF16 ? dnnl_bf16 : dtype == SL_F16 ? dnnl_f16 : dnnl_f32;
}

dnnl_status_t sl_cpu_plain_md(dnnl_memory_desc_t *md, int ndim, const int64_t *dims, unsigned dtype,
                              dnnl_format_tag_t tag)
{
    dnnl_dims_t d;
    for (int i = 0; i < ndim; i++)
        d[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, ndim, d, sl_cpu_dnnl_dt(dtype), tag);
}

unsigned sl_cpu_dnnl_count(const sl_cpu_dnnl *d)
{
    return d ? d->n : 0;
}

static void entry_clear(struct entry *e)
{
    for (unsigned i = 0; i < e->n_args; i++) {
        struct arg *a = &e->args[i];
        if (a->reorder)
            dnnl_primitive_destroy(a->reorder);
        if (a->inner)
            dnnl_memory_destroy(a->inner);
        if (a->user)
            dnnl_memory_destroy(a->user);
    }
    if (e->scratchpad)
        dnnl_memory_destroy(e->scratchpad);
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

static void wcached_clear(struct wcached *w)
{
    if (w->mem)
        dnnl_memory_destroy(w->mem);
    sl_free(w->buf);
    memset(w, 0, sizeof *w);
}

void sl_cpu_dnnl_free(sl_cpu_dnnl *d)
{
    if (!d)
        return;
    for (unsigned i = 0; i < d->n_w; i++)
        wcached_clear(&d->w[i]);
    for (unsigned i = 0; i < d->n; i++)
        entry_clear(&d->entries[i]);
    if (d->attr)
        dnnl_primitive_attr_destroy(d->attr);
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->engine)
        dnnl_engine_destroy(d->engine);
    sl_free(d->scratch);
    sl_free(d);
}

static int dnnl_new(sl_cpu_dnnl **out)
{
    sl_cpu_dnnl *d = sl_calloc(1, sizeof *d);
    if (!d)
        return SL_ENOMEM;
    int rc = from_dnnl(dnnl_engine_create(&d->engine, dnnl_cpu, 0), "engine_create");
    if (rc == SL_OK)
        rc = from_dnnl(dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags),
                       "stream_create");
    if (rc == SL_OK)
        rc = from_dnnl(dnnl_primitive_attr_create(&d->attr), "primitive_attr_create");
    if (rc == SL_OK)
        rc = from_dnnl(dnnl_primitive_attr_set_scratchpad_mode(d->attr, dnnl_scratchpad_mode_user),
                       "set_scratchpad_mode");
    if (rc != SL_OK) {
        sl_cpu_dnnl_free(d);
        return rc;
    }
    *out = d;
    return SL_OK;
}

static void make_key(const sl_op_call *c, int threads, struct key *k)
{
    memset(k, 0, sizeof *k);
    k->op = c->op;
    k->threads = (uint16_t) threads;
    for (unsigned i = 0; i < c->n_in; i++) {
        memcpy(k->dims[i], c->in[i].shape.dims, sizeof k->dims[i]);
        k->dtypes[i] = c->in[i].shape.dtype;
    }
    memcpy(k->dims[SL_OP_MAX_IN], c->out[0].shape.dims, sizeof k->dims[SL_OP_MAX_IN]);
    k->dtypes[SL_OP_MAX_IN] = c->out[0].shape.dtype;
    memcpy(k->attrs, c->attrs.i, sizeof k->attrs);
    memcpy(k->fattrs, c->attrs.f, sizeof k->fattrs);
}

/* FNV-1a over the key's bytes: a cheap first filter before memcmp. */
static uint64_t key_hash(const struct key *k)
{
    const unsigned char *p = (const unsigned char *) k;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Reserves an aligned region of `bytes` in the entry's scratch layout. */
static size_t carve(struct entry *e, size_t bytes)
{
    size_t off = sl_align_up(e->scratch_bytes, SCRATCH_ALIGN);
    e->scratch_bytes = off + bytes;
    return off;
}

/* Memory objects for one argument: the user's plain layout, and when the
 * primitive wants another, an inner memory in scratch plus the reorder. */
static int make_arg(sl_cpu_dnnl *d, struct entry *e, const sl_cpu_prim_arg *spec,
                    const_dnnl_primitive_desc_t pd)
{
    struct arg *a = &e->args[e->n_args++];
    a->arg = spec->arg;
    a->tensor = spec->tensor;
    int rc = from_dnnl(dnnl_memory_create(&a->user, &spec->user, d->engine, DNNL_MEMORY_NONE),
                       "memory_create");
    if (rc)
        return rc;
    const dnnl_memory_desc_t *want =
        dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, spec->arg);
    if (!want)
        return from_dnnl(dnnl_invalid_arguments, "query_md");
    if (dnnl_memory_desc_equal(want, &spec->user))
        return SL_OK;

    a->inner_off = carve(e, dnnl_memory_desc_get_size(want));
    rc = from_dnnl(dnnl_memory_create(&a->inner, want, d->engine, DNNL_MEMORY_NONE),
                   "memory_create");
    if (rc)
        return rc;
    bool output = spec->tensor < 0;
    const dnnl_memory_desc_t *from = output ? want : &spec->user, *to = output ? &spec->user : want;
    dnnl_primitive_desc_t rpd;
    rc = from_dnnl(dnnl_reorder_primitive_desc_create(&rpd, from, d->engine, to, d->engine, NULL),
                   "reorder_primitive_desc_create");
    if (rc)
        return rc;
    rc = from_dnnl(dnnl_primitive_create(&a->reorder, rpd), "reorder primitive_create");
    dnnl_primitive_desc_destroy(rpd);
    return rc;
}

/* Builds entry e for call c: descriptor, primitive, memory objects, scratch
 * layout. On failure e is cleared. */
static int build_entry(sl_cpu_dnnl *d, struct entry *e, const sl_op_call *c,
                       sl_cpu_prim_build build)
{
    sl_cpu_prim_spec spec;
    memset(&spec, 0, sizeof spec);
    int rc = from_dnnl(build(d->engine, d->attr, c, &spec), "primitive_desc_create");
    if (rc)
        return rc;
    rc = from_dnnl(dnnl_primitive_create(&e->prim, spec.pd), "primitive_create");
    for (unsigned i = 0; rc == SL_OK && i < spec.n_args; i++)
        rc = make_arg(d, e, &spec.args[i], spec.pd);
    if (rc == SL_OK) {
        const dnnl_memory_desc_t *sp =
            dnnl_primitive_desc_query_md(spec.pd, dnnl_query_scratchpad_md, 0);
        size_t bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
        if (bytes) {
            e->scratchpad_off = carve(e, bytes);
            rc = from_dnnl(dnnl_memory_create(&e->scratchpad, sp, d->engine, DNNL_MEMORY_NONE),
                           "memory_create");
        }
    }
    dnnl_primitive_desc_destroy(spec.pd);
    if (rc)
        entry_clear(e);
    return rc;
}

/* The cached entry for (c, threads), building it (evicting the least
 * recently used entry when full) on a miss. */
static int lookup(sl_cpu_dnnl *d, const sl_op_call *c, int threads, sl_cpu_prim_build build,
                  struct entry **out)
{
    struct key k;
    make_key(c, threads, &k);
    uint64_t h = key_hash(&k);
    struct entry *victim = NULL;
    for (unsigned i = 0; i < d->n; i++) {
        struct entry *e = &d->entries[i];
        if (e->hash == h && memcmp(&e->key, &k, sizeof k) == 0) {
            e->last_used = ++d->clock;
            *out = e;
            return SL_OK;
        }
        if (!victim || e->last_used < victim->last_used)
            victim = e;
    }
    struct entry *e;
    if (d->n < CACHE_ENTRIES) {
        e = &d->entries[d->n++];
    } else {
        e = victim;
        entry_clear(e);
    }
    int rc = build_entry(d, e, c, build);
    if (rc) {
        /* e is cleared: keep the used range dense. */
        struct entry *last = &d->entries[--d->n];
        if (e != last) {
            *e = *last;
            memset(last, 0, sizeof *last);
        }
        return rc;
    }
    e->key = k;
    e->hash = h;
    e->last_used = ++d->clock;
    *out = e;
    return SL_OK;
}

static int ensure_scratch(sl_cpu_dnnl *d, size_t bytes)
{
    if (bytes <= d->scratch_bytes)
        return SL_OK;
    void *p = sl_aligned_alloc(SCRATCH_ALIGN, sl_align_up(bytes, SCRATCH_ALIGN));
    if (!p)
        return SL_ENOMEM;
    sl_free(d->scratch);
    d->scratch = p;
    d->scratch_bytes = bytes;
    return SL_OK;
}

int sl_cpu_scratch(sl_cpu_exec *x, size_t bytes, void **out)
{
    int rc;
    if (x->workspace) {
        if (bytes > x->workspace_bytes) {
            sl_log_err("cpu.scratch.ws",
                       "an op needs %zu bytes of scratch; the stream's workspace has %zu (salusd "
                       "--framework-per-lane)",
                       bytes, x->workspace_bytes);
            snprintf(x->failure, sizeof x->failure,
                     "an op needs %zu bytes of scratch; the lane's workspace has %zu (salusd "
                     "--framework-per-lane)",
                     bytes, x->workspace_bytes);
            return SL_EEXHAUSTED;
        }
        *out = x->workspace;
        return SL_OK;
    }
    if (!x->dnnl && (rc = dnnl_new(&x->dnnl)) != SL_OK)
        return rc;
    if ((rc = ensure_scratch(x->dnnl, bytes)) != SL_OK)
        return rc;
    *out = x->dnnl->scratch;
    return SL_OK;
}

int sl_cpu_front_region(sl_cpu_exec *x, const sl_op_call *c, const char *what, size_t bytes,
                        void **own, size_t *own_bytes, char **out)
{
    if (x->workspace) {
        if (bytes > x->workspace_bytes) {
            const char *name = sl_op_get(c->op)->name;
            sl_log_err("cpu.region.ws",
                       "%s needs %zu bytes for %s; the stream's workspace has %zu (salusd "
                       "--framework-per-lane)",
                       name, bytes, what, x->workspace_bytes);
            snprintf(x->failure, sizeof x->failure,
                     "%s needs %zu bytes for %s; the lane's workspace has %zu (salusd "
                     "--framework-per-lane)",
                     name, bytes, what, x->workspace_bytes);
            return SL_EEXHAUSTED;
        }
        *out = x->workspace;
        return SL_OK;
    }
    if (bytes > *own_bytes) {
        /* the workspace's own alignment (the device contract's), which
         * callers keep for what follows the region */
        void *p = sl_aligned_alloc(256, sl_align_up(bytes, 256));
        if (!p)
            return SL_ENOMEM;
        sl_free(*own);
        *own = p;
        *own_bytes = bytes;
    }
    *out = *own;
    return SL_OK;
}

static void *tensor_data(const sl_op_call *c, int tensor)
{
    return tensor >= 0 ? c->in[tensor].data : c->out[-1 - tensor].data;
}

/* The kept copy of the weights at src in a's layout, current as of version
 * (reordered now when it is not), or *out NULL: not kept (no version, or
 * no room; the caller reorders through the scratch). */
static int wcache_get(sl_cpu_dnnl *d, const struct arg *a, const void *src, uint64_t version,
                      dnnl_memory_t *out)
{
    *out = NULL;
    const dnnl_memory_desc_t *md;
    int rc = from_dnnl(dnnl_memory_get_memory_desc(a->inner, &md), "get_memory_desc");
    if (rc)
        return rc;
    struct wcached *w = NULL;
    for (unsigned i = 0; i < d->n_w && !w; i++)
        if (d->w[i].src == src && dnnl_memory_desc_equal(&d->w[i].md, md))
            w = &d->w[i];
    if (w && w->version == version) {
        *out = w->mem;
        return SL_OK;
    }
    if (!w) {
        /* when full, copies older than this version make room: no call will
         * carry their version again (a tensor written since, or freed) */
        size_t bytes = sl_align_up(dnnl_memory_desc_get_size(md), SCRATCH_ALIGN);
        for (unsigned i = 0;
             i < d->n_w && (d->n_w == WCACHE_ENTRIES || bytes > WCACHE_BYTES - d->w_bytes);)
            if (d->w[i].version < version) {
                d->w_bytes -= d->w[i].bytes;
                wcached_clear(&d->w[i]);
                d->w[i] = d->w[--d->n_w];
                memset(&d->w[d->n_w], 0, sizeof d->w[d->n_w]);
            } else {
                i++;
            }
        if (d->n_w == WCACHE_ENTRIES || bytes > WCACHE_BYTES - d->w_bytes)
            return SL_OK;
        w = &d->w[d->n_w];
        *w = (struct wcached){.src = src, .md = *md, .bytes = bytes};
        w->buf = sl_aligned_alloc(SCRATCH_ALIGN, bytes);
        if (!w->buf || dnnl_memory_create(&w->mem, md, d->engine, w->buf) != dnnl_success) {
            wcached_clear(w);
            return SL_OK; /* no room after all: the scratch path still works */
        }
        d->n_w++;
        d->w_bytes += bytes;
    }
    w->version = 0; /* until the reorder below succeeded */
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, w->mem}};
    if ((rc = from_dnnl(dnnl_primitive_execute(a->reorder, d->stream, 2, r), "reorder")))
        return rc;
    w->version = version;
    *out = w->mem;
    return SL_OK;
}

static int execute(sl_cpu_dnnl *d, struct entry *e, const sl_op_call *c, char *scratch)
{
    dnnl_exec_arg_t args[SL_CPU_PRIM_MAX_ARGS + 1];
    int n = 0, rc = SL_OK;
    for (unsigned i = 0; rc == SL_OK && i < e->n_args; i++) {
        struct arg *a = &e->args[i];
        rc = from_dnnl(dnnl_memory_set_data_handle(a->user, tensor_data(c, a->tensor)),
                       "set_data_handle");
        if (rc == SL_OK && a->inner && e->scratch_set != scratch)
            rc = from_dnnl(dnnl_memory_set_data_handle(a->inner, scratch + a->inner_off),
                           "set_data_handle");
        dnnl_memory_t kept = NULL;
        if (rc == SL_OK && a->inner && a->arg == DNNL_ARG_WEIGHTS && a->tensor >= 0 &&
            c->in_version[a->tensor])
            rc = wcache_get(d, a, c->in[a->tensor].data, c->in_version[a->tensor], &kept);
        if (rc == SL_OK && a->inner && a->tensor >= 0 && !kept) {
            dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->inner}};
            rc = from_dnnl(dnnl_primitive_execute(a->reorder, d->stream, 2, r), "reorder");
        }
        args[n++] = (dnnl_exec_arg_t){a->arg, kept ? kept : a->inner ? a->inner : a->user};
    }
    if (rc == SL_OK && e->scratchpad) {
        if (e->scratch_set != scratch)
            rc = from_dnnl(dnnl_memory_set_data_handle(e->scratchpad, scratch + e->scratchpad_off),
                           "set_data_handle");
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratchpad};
    }
    e->scratch_set = rc == SL_OK ? scratch : NULL;
    if (rc == SL_OK)
        rc = from_dnnl(dnnl_primitive_execute(e->prim, d->stream, n, args), "primitive_execute");
    for (unsigned i = 0; rc == SL_OK && i < e->n_args; i++) {
        struct arg *a = &e->args[i];
        if (a->inner && a->tensor < 0) {
            dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->inner}, {DNNL_ARG_TO, a->user}};
            rc = from_dnnl(dnnl_primitive_execute(a->reorder, d->stream, 2, r), "reorder");
        }
    }
    /* The cpu stream runs in order on this thread; wait is a formality that
     * the API asks for before reading results. */
    if (rc == SL_OK)
        rc = from_dnnl(dnnl_stream_wait(d->stream), "stream_wait");
    return rc;
}

/* The flop count the registry gives c. */
static uint64_t op_flops(const sl_op_call *c)
{
    sl_shape in[SL_OP_MAX_IN], out[SL_OP_MAX_OUT];
    for (unsigned i = 0; i < c->n_in; i++)
        in[i] = c->in[i].shape;
    for (unsigned i = 0; i < c->n_out; i++)
        out[i] = c->out[i].shape;
    sl_op_cost cost = {0, 0};
    sl_op_get(c->op)->cost(&c->attrs, in, out, &cost);
    return cost.flops;
}

int sl_cpu_dnnl_run(sl_cpu_exec *x, const sl_op_call *c, sl_cpu_prim_build build)
{
    int rc;
    if (!x->dnnl && (rc = dnnl_new(&x->dnnl)) != SL_OK)
        return rc;
    sl_cpu_dnnl *d = x->dnnl;
    int threads = x->threads > 1 && op_flops(c) >= SL_CPU_PARALLEL_MIN_FLOPS ? x->threads : 1;
    /* The OpenMP team size is per calling thread: this worker's setting
     * reaches the primitive built (and run) below and no other lane. */
    if (d->omp_threads != threads) {
        omp_set_num_threads(threads);
        d->omp_threads = threads;
    }
    struct entry *e;
    if ((rc = lookup(d, c, threads, build, &e)) != SL_OK)
        return rc;
    if (!x->workspace) {
        if ((rc = ensure_scratch(d, e->scratch_bytes)) != SL_OK)
            return rc;
        return execute(d, e, c, d->scratch);
    }
    /* framework memory of the lane: never more than it, never elsewhere */
    if (e->scratch_bytes > x->workspace_bytes) {
        sl_log_err("cpu.dnnl.ws",
                   "%s needs %zu bytes of oneDNN scratch; the stream's workspace has %zu (salusd "
                   "--framework-per-lane)",
                   sl_op_get(c->op)->name, e->scratch_bytes, x->workspace_bytes);
        snprintf(x->failure, sizeof x->failure,
                 "%s needs %zu bytes of oneDNN scratch (its scratchpad and layout copies); the "
                 "lane's workspace has %zu (salusd --framework-per-lane; or run a smaller batch)",
                 sl_op_get(c->op)->name, e->scratch_bytes, x->workspace_bytes);
        return SL_EEXHAUSTED;
    }
    return execute(d, e, c, x->workspace);
}
