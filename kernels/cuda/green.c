/* cuda compute partitions: one green context per partition, the lane
 * streams bound to it created inside it (cuGreenCtxStreamCreate), their
 * cuBLAS and cuDNN handles moved onto those streams.
 *
 * Layout. The driver splits an SM resource once: the groups of one split
 * may be combined into one context's descriptor, but what a split leaves
 * over cannot be split again before a context is made of it (CUDA_ERROR_
 * INVALID_RESOURCE_CONFIGURATION, seen on an H100 with driver 13.0). So
 * init splits the device once into equal groups of the smallest size the
 * driver allows (minSmPartitionSize rounded up to smCoscheduledAlignment,
 * 8 SMs on Hopper) and keeps them; a partition is a run of consecutive
 * groups, partitions in creation order. Changing one partition moves the
 * runs of every later one, whose contexts (and streams) are re-created;
 * the earlier ones keep theirs. The SMs past the last whole group (4 of an
 * H100's 132) belong to no partition; partition_caps counts only groups.
 *
 * Isolation. Kernels of the primary context are not kept off a green
 * context's SMs, so a stream left unbound competes with every partition:
 * salusd binds every lane's stream while partitions are on (device.h).
 *
 * The driver API comes through the runtime's entry-point lookup (cuda.h):
 * nothing here links libcuda. */
#include "cuda.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <cuda_driver.h> /* the driver API past this folder's cuda.h */
#include <stdio.h>
#include <string.h>

/* Green contexts appeared in driver 12.4, their streams in 12.5. */
#define GREEN_MIN_DRIVER 12050

typedef CUresult (*fn_get_device)(CUdevice *, int);
typedef CUresult (*fn_get_resource)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*fn_split)(CUdevResource *, unsigned int *, const CUdevResource *,
                             CUdevResource *, unsigned int, unsigned int);
typedef CUresult (*fn_gen_desc)(CUdevResourceDesc *, CUdevResource *, unsigned int);
typedef CUresult (*fn_ctx_create)(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned int);
typedef CUresult (*fn_ctx_destroy)(CUgreenCtx);
typedef CUresult (*fn_stream_create)(CUstream *, CUgreenCtx, unsigned int, int);

enum {
    FN_GET_DEVICE,
    FN_GET_RESOURCE,
    FN_SPLIT,
    FN_GEN_DESC,
    FN_CTX_CREATE,
    FN_CTX_DESTROY,
    FN_STREAM_CREATE,
    FN_COUNT
};

static const struct {
    const char *name;
    unsigned version;
} entry_points[FN_COUNT] = {
    [FN_GET_DEVICE] = {"cuDeviceGet", 2000},
    [FN_GET_RESOURCE] = {"cuDeviceGetDevResource", 12040},
    [FN_SPLIT] = {"cuDevSmResourceSplitByCount", 12040},
    [FN_GEN_DESC] = {"cuDevResourceGenerateDesc", 12040},
    [FN_CTX_CREATE] = {"cuGreenCtxCreate", 12040},
    [FN_CTX_DESTROY] = {"cuGreenCtxDestroy", 12040},
    [FN_STREAM_CREATE] = {"cuGreenCtxStreamCreate", 12050},
};

struct sl_partition {
    struct sl_partition *next;
    unsigned units; /* whole groups' SMs: what it has */
    CUgreenCtx ctx;
    sl_stream **streams; /* bound to it */
    unsigned n_streams, cap_streams;
};

/* The one translation of a driver status (the runtime's table does not
 * know driver codes): every failure is a per-request device error, the
 * driver's own name for it logged. */
static int drv(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return SL_OK;
    sl_log_err("cuda.green", "%s failed with CUresult %d", what, (int) r);
    return r == CUDA_ERROR_OUT_OF_MEMORY ? SL_EEXHAUSTED : SL_EDEVICE;
}

void sl_cuda_green_init(sl_cuda_green *g, int ordinal)
{
    memset(g, 0, sizeof *g);
    g->ordinal = ordinal;
    if (cudaDriverGetVersion(&g->driver_version) != cudaSuccess)
        g->driver_version = 0;
    if (g->driver_version < GREEN_MIN_DRIVER) {
        snprintf(g->note, sizeof g->note,
                 "none: driver %d.%d < 12.5 has no green-context streams (priority streams)",
                 g->driver_version / 1000, g->driver_version % 1000 / 10);
        return;
    }
    for (int i = 0; i < FN_COUNT; i++) {
        enum cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion(entry_points[i].name, &g->fn[i],
                                             entry_points[i].version, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !g->fn[i]) {
            snprintf(g->note, sizeof g->note, "none: driver lacks %.40s (priority streams)",
                     entry_points[i].name);
            return;
        }
    }
    CUdevice dev;
    CUdevResource sm;
    if (drv(((fn_get_device) g->fn[FN_GET_DEVICE])(&dev, ordinal), "cuDeviceGet") != SL_OK ||
        drv(((fn_get_resource) g->fn[FN_GET_RESOURCE])(dev, &sm, CU_DEV_RESOURCE_TYPE_SM),
            "cuDeviceGetDevResource") != SL_OK) {
        snprintf(g->note, sizeof g->note, "none: SM resource unreadable (priority streams)");
        return;
    }
    unsigned align = sm.sm.smCoscheduledAlignment ? sm.sm.smCoscheduledAlignment : 1;
    unsigned least = sm.sm.minSmPartitionSize > align ? sm.sm.minSmPartitionSize : align;
    least = (least + align - 1) / align * align;
    unsigned n = sm.sm.smCount / least;
    CUdevResource *groups = n >= 2 ? sl_calloc(n, sizeof *groups) : NULL;
    if (!groups) {
        snprintf(g->note, sizeof g->note,
                 "none: %u SMs make fewer than two groups of %u (priority streams)", sm.sm.smCount,
                 least);
        return;
    }
    if (drv(((fn_split) g->fn[FN_SPLIT])(groups, &n, &sm, NULL, 0, least),
            "cuDevSmResourceSplitByCount") != SL_OK ||
        n < 2) {
        sl_free(groups);
        snprintf(g->note, sizeof g->note, "none: the SMs could not be split (priority streams)");
        return;
    }
    g->groups = groups;
    g->n_groups = n;
    g->group_sms = groups[0].sm.smCount;
    g->sm_count = n * g->group_sms;
    if (pthread_mutex_init(&g->lock, NULL) != 0) {
        sl_free(g->groups);
        g->groups = NULL;
        snprintf(g->note, sizeof g->note, "none: out of memory");
        return;
    }
    g->lock_ready = true;
    snprintf(g->note, sizeof g->note, "green contexts (driver %d.%d, %u groups of %u SMs)",
             g->driver_version / 1000, g->driver_version % 1000 / 10, g->n_groups, g->group_sms);
    g->ready = true;
}

void sl_cuda_green_fini(sl_cuda_green *g)
{
    if (g->parts)
        sl_log_err("cuda.green", "device closed with partitions still alive");
    if (g->lock_ready)
        pthread_mutex_destroy(&g->lock);
    g->lock_ready = false;
    sl_free(g->groups);
    g->groups = NULL;
    g->ready = false;
}

int sl_cuda_partition_caps(sl_device *dev, sl_partition_caps *caps)
{
    sl_cuda_green *g = sl_cuda_green_of(dev);
    memset(caps, 0, sizeof *caps);
    snprintf(caps->unit, sizeof caps->unit, "SM");
    snprintf(caps->note, sizeof caps->note, "%s", g->note);
    if (!g->ready)
        return SL_EUNSUPPORTED;
    caps->units = g->sm_count;
    caps->min_units = g->group_sms;
    caps->align = g->group_sms;
    return SL_OK;
}

/* units rounded up to whole groups. */
static unsigned round_units(const sl_cuda_green *g, unsigned units)
{
    return (units + g->group_sms - 1) / g->group_sms * g->group_sms;
}

static unsigned sum_units(const sl_cuda_green *g, const sl_partition *skip)
{
    unsigned n = 0;
    for (const sl_partition *p = g->parts; p; p = p->next)
        if (p != skip)
            n += p->units;
    return n;
}

/* A new stream in p's context at s's priority, swapped in for s's. */
static int rebind_stream(sl_device *dev, sl_cuda_green *g, sl_stream *s, CUgreenCtx ctx)
{
    CUstream fresh;
    int rc = drv(((fn_stream_create) g->fn[FN_STREAM_CREATE])(&fresh, ctx, CU_STREAM_NON_BLOCKING,
                                                              sl_cuda_stream_cuda_priority(s)),
                 "cuGreenCtxStreamCreate");
    if (rc != SL_OK)
        return rc;
    return sl_cuda_stream_swap(dev, s, (cudaStream_t) fresh);
}

/* Gives every partition from `from` on the context of its run of groups,
 * re-created with its streams. Under g->lock. On error the partitions from
 * `from` on may be left on their old contexts: their streams keep them
 * (still valid, as the old contexts are destroyed only once nothing uses
 * them). */
static int relayout(sl_device *dev, sl_cuda_green *g, const sl_partition *from)
{
    CUdevice cudev;
    int rc = drv(((fn_get_device) g->fn[FN_GET_DEVICE])(&cudev, g->ordinal), "cuDeviceGet");
    CUdevResource *groups = g->groups;
    unsigned first = 0; /* the next partition's first group */
    bool rebuilding = false;
    for (sl_partition *p = g->parts; p && rc == SL_OK; p = p->next) {
        unsigned n = p->units / g->group_sms, at = first;
        first += n;
        rebuilding = rebuilding || p == from;
        if (!rebuilding)
            continue;
        CUdevResourceDesc desc;
        CUgreenCtx ctx;
        rc = drv(((fn_gen_desc) g->fn[FN_GEN_DESC])(&desc, groups + at, n),
                 "cuDevResourceGenerateDesc");
        if (rc == SL_OK)
            rc = drv(((fn_ctx_create) g->fn[FN_CTX_CREATE])(&ctx, desc, cudev,
                                                            CU_GREEN_CTX_DEFAULT_STREAM),
                     "cuGreenCtxCreate");
        if (rc != SL_OK)
            break;
        for (unsigned i = 0; i < p->n_streams && rc == SL_OK; i++)
            rc = rebind_stream(dev, g, p->streams[i], ctx);
        if (rc != SL_OK) {
            (void) drv(((fn_ctx_destroy) g->fn[FN_CTX_DESTROY])(ctx), "cuGreenCtxDestroy");
            break;
        }
        if (p->ctx)
            (void) drv(((fn_ctx_destroy) g->fn[FN_CTX_DESTROY])(p->ctx), "cuGreenCtxDestroy");
        p->ctx = ctx;
    }
    return rc;
}

int sl_cuda_partition_create(sl_device *dev, unsigned units, sl_partition **out)
{
    sl_cuda_green *g = sl_cuda_green_of(dev);
    if (!g->ready)
        return SL_EUNSUPPORTED;
    if (units == 0 || units > g->sm_count)
        return SL_EINVAL;
    units = round_units(g, units);
    sl_partition *p = sl_calloc(1, sizeof *p);
    if (!p)
        return SL_ENOMEM;
    p->units = units;
    pthread_mutex_lock(&g->lock);
    if (sum_units(g, NULL) + units > g->sm_count) {
        pthread_mutex_unlock(&g->lock);
        sl_free(p);
        return SL_EEXHAUSTED;
    }
    sl_partition **link = &g->parts;
    while (*link)
        link = &(*link)->next;
    *link = p;
    int rc = relayout(dev, g, p);
    if (rc != SL_OK)
        *link = NULL;
    pthread_mutex_unlock(&g->lock);
    if (rc != SL_OK) {
        sl_free(p);
        return rc;
    }
    *out = p;
    return SL_OK;
}

int sl_cuda_partition_resize(sl_device *dev, sl_partition *p, unsigned units)
{
    sl_cuda_green *g = sl_cuda_green_of(dev);
    if (!g->ready)
        return SL_EUNSUPPORTED;
    if (units == 0 || units > g->sm_count)
        return SL_EINVAL;
    units = round_units(g, units);
    pthread_mutex_lock(&g->lock);
    int rc = SL_OK;
    if (sum_units(g, p) + units > g->sm_count)
        rc = SL_EEXHAUSTED;
    unsigned old = p->units;
    if (rc == SL_OK && units != old) {
        p->units = units;
        if ((rc = relayout(dev, g, p)) != SL_OK)
            p->units = old;
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void sl_cuda_partition_destroy(sl_device *dev, sl_partition *p)
{
    if (!p)
        return;
    sl_cuda_green *g = sl_cuda_green_of(dev);
    pthread_mutex_lock(&g->lock);
    if (p->n_streams)
        sl_log_err("cuda.green", "partition destroyed with %u streams bound", p->n_streams);
    sl_partition **link = &g->parts;
    while (*link && *link != p)
        link = &(*link)->next;
    if (*link)
        *link = p->next;
    /* the partitions after it may now be split differently: give them
     * their new groups (failure leaves them on their old contexts) */
    if (p->next)
        (void) relayout(dev, g, p->next);
    pthread_mutex_unlock(&g->lock);
    if (p->ctx)
        (void) drv(((fn_ctx_destroy) g->fn[FN_CTX_DESTROY])(p->ctx), "cuGreenCtxDestroy");
    sl_free(p->streams);
    sl_free(p);
}

unsigned sl_cuda_partition_units(sl_device *dev, const sl_partition *p)
{
    (void) dev;
    return p->units;
}

static void unlist(sl_partition *p, sl_stream *s)
{
    for (unsigned i = 0; i < p->n_streams; i++) {
        if (p->streams[i] == s) {
            p->streams[i] = p->streams[--p->n_streams];
            return;
        }
    }
}

int sl_cuda_stream_bind(sl_device *dev, sl_stream *s, sl_partition *p)
{
    sl_cuda_green *g = sl_cuda_green_of(dev);
    if (!g->ready)
        return SL_EUNSUPPORTED;
    sl_partition **bound = sl_cuda_stream_partition(s);
    if (*bound == p)
        return SL_OK;
    pthread_mutex_lock(&g->lock);
    int rc = SL_OK;
    if (p && p->n_streams == p->cap_streams) {
        unsigned cap = p->cap_streams ? p->cap_streams * 2 : 4;
        sl_stream **grown = sl_reallocarray(p->streams, cap, sizeof *grown);
        if (!grown)
            rc = SL_ENOMEM;
        else {
            p->streams = grown;
            p->cap_streams = cap;
        }
    }
    if (rc == SL_OK) {
        if (p) {
            rc = rebind_stream(dev, g, s, p->ctx);
        } else {
            /* back to the primary context, at the stream's priority */
            cudaStream_t fresh;
            rc = SL_CUDA_RT("cuda.bind",
                            cudaStreamCreateWithPriority(&fresh, cudaStreamNonBlocking,
                                                         sl_cuda_stream_cuda_priority(s)));
            if (rc == SL_OK)
                rc = sl_cuda_stream_swap(dev, s, fresh);
        }
    }
    if (rc == SL_OK) {
        if (*bound)
            unlist(*bound, s);
        if (p)
            p->streams[p->n_streams++] = s;
        *bound = p;
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

void sl_cuda_stream_unbind_dying(sl_device *dev, sl_stream *s)
{
    sl_cuda_green *g = sl_cuda_green_of(dev);
    sl_partition **bound = sl_cuda_stream_partition(s);
    if (!*bound || !g->lock_ready)
        return;
    pthread_mutex_lock(&g->lock);
    unlist(*bound, s);
    *bound = NULL;
    pthread_mutex_unlock(&g->lock);
}
