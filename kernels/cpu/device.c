/* The cpu device: host memory posing as device memory, and the ops table.
 *
 * Regions come from mmap(MAP_NORESERVE): an arena of many GiB costs nothing
 * until its pages are touched, like address space on a real device. The
 * device reports half of the host memory salusd may use (physical RAM, or
 * its cgroup's memory limit when lower: a container's) as its capacity and
 * refuses to hand out more than that in total; the other half is the
 * host's and salusd's own (graphs, messages, the OS). */
#include "cpu.h"

#include "sl_alloc.h"
#include "sl_cgroup.h"
#include "sl_error.h"
#include "sl_log.h"

#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

struct region {
    struct region *next;
    void *base;
    size_t bytes;
};

struct cpu_dev {
    sl_cpu_shared shared;
    pthread_mutex_t lock; /* guards regions and used */
    bool lock_ready;
    struct region *regions;
    uint64_t used;
};

static int cpu_open(sl_device *dev, int index, const char *arg)
{
    struct cpu_dev *d = dev->priv;
    if (arg[0] != '\0') {
        sl_log_err("cpu.open.arg", "the cpu backend takes no argument, got \"%s\"", arg);
        return SL_EINVAL;
    }
    if (index != 0) {
        sl_log_err("cpu.open.index", "the cpu backend has only device 0, got %d", index);
        return SL_ENODEV;
    }
    if (pthread_mutex_init(&d->lock, NULL) != 0)
        return SL_ENOMEM;
    d->lock_ready = true;

    uint64_t host = sl_host_memory();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    dev->total_bytes = host ? host / 2 : 1ull << 30;
    d->shared.cores = cores > 0 ? (int) cores : 1;
    /* oneDNN scratch of a small CNN at batch 128 (blocked layouts of the
     * largest activation, reorders, scratchpad) with room to spare */
    dev->workspace_hint = 32ull << 20;
    dev->host_cores = true;
    atomic_init(&d->shared.running, 0);
    atomic_init(&d->shared.forced_threads, 0);
    if (sl_cpu_partitions_init(&d->shared) != SL_OK)
        return SL_ENOMEM;
    snprintf(dev->description, sizeof dev->description,
             "cpu (%d cores; GEMM: %s, convolutions: oneDNN)", d->shared.cores,
             sl_cpu_gemm_name(sl_cpu_gemm_chosen()));
#ifdef OPENBLAS_VERSION
    /* Every stream is its own worker thread: one BLAS thread per stream keeps
     * lanes from oversubscribing the cores. */
    openblas_set_num_threads(1);
#endif
    return SL_OK;
}

static void cpu_close(sl_device *dev)
{
    struct cpu_dev *d = dev->priv;
    for (struct region *r = d->regions, *next; r; r = next) {
        next = r->next;
        sl_log_warn("cpu.leak", "device closed with %zu bytes still allocated at %p", r->bytes,
                    r->base);
        munmap(r->base, r->bytes);
        sl_free(r);
    }
    d->regions = NULL;
    sl_cpu_partitions_fini(&d->shared);
    if (d->lock_ready)
        pthread_mutex_destroy(&d->lock);
    d->lock_ready = false;
}

static int cpu_mem_alloc(sl_device *dev, size_t bytes, void **out)
{
    struct cpu_dev *d = dev->priv;
    if (bytes == 0)
        return SL_EINVAL;
    struct region *r = sl_malloc(sizeof *r);
    if (!r)
        return SL_ENOMEM;

    pthread_mutex_lock(&d->lock);
    if (bytes > dev->total_bytes - d->used) {
        pthread_mutex_unlock(&d->lock);
        sl_free(r);
        return SL_EEXHAUSTED;
    }
    d->used += bytes; /* reserved now, so concurrent allocations cannot overshoot */
    pthread_mutex_unlock(&d->lock);

    /* Page-aligned, which satisfies the contract's 256 bytes. */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    pthread_mutex_lock(&d->lock);
    if (p == MAP_FAILED) {
        d->used -= bytes;
        pthread_mutex_unlock(&d->lock);
        sl_free(r);
        return SL_EEXHAUSTED;
    }
    *r = (struct region){.next = d->regions, .base = p, .bytes = bytes};
    d->regions = r;
    pthread_mutex_unlock(&d->lock);
    *out = p;
    return SL_OK;
}

static void cpu_mem_free(sl_device *dev, void *ptr)
{
    struct cpu_dev *d = dev->priv;
    if (!ptr)
        return;
    pthread_mutex_lock(&d->lock);
    struct region **link = &d->regions;
    while (*link && (*link)->base != ptr)
        link = &(*link)->next;
    struct region *r = *link;
    if (r) {
        *link = r->next;
        d->used -= r->bytes;
    }
    pthread_mutex_unlock(&d->lock);
    if (!r) {
        sl_log_err("cpu.free", "mem_free of %p, which mem_alloc did not return", ptr);
        return;
    }
    munmap(r->base, r->bytes);
    sl_free(r);
}

/* Host memory cannot be lost: no cpu error is SL_EDEVICERESET (device.h), so
 * there is nothing to recover. */
static int cpu_reset(sl_device *dev)
{
    (void) dev;
    return SL_OK;
}

sl_cpu_shared *sl_cpu_shared_of(sl_device *dev)
{
    return &((struct cpu_dev *) dev->priv)->shared;
}

void sl_cpu_force_threads(sl_device *dev, int threads)
{
    atomic_store(&sl_cpu_shared_of(dev)->forced_threads, threads > 0 ? threads : 0);
}

const sl_device_ops sl_cpu_device_ops = {
    .name = "cpu",
    .priv_size = sizeof(struct cpu_dev),
    .open = cpu_open,
    .close = cpu_close,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .stream_create = sl_cpu_stream_create,
    .stream_destroy = sl_cpu_stream_destroy,
    .memcpy_h2d = sl_cpu_memcpy_host,
    .memcpy_d2h = sl_cpu_memcpy_host,
    .memcpy_d2d = sl_cpu_memcpy,
    .launch = sl_cpu_launch,
    .op_dtypes = sl_cpu_op_dtypes,
    .stream_set_workspace = sl_cpu_stream_set_workspace,
    .host_callback = sl_cpu_host_callback,
    .stream_failure = sl_cpu_stream_failure,
    .synchronize = sl_cpu_synchronize,
    .stream_hold = sl_cpu_stream_hold,
    .stream_release = sl_cpu_stream_release,
    .reset = cpu_reset,
    .partition_caps = sl_cpu_partition_caps,
    .partition_create = sl_cpu_partition_create,
    .partition_resize = sl_cpu_partition_resize,
    .partition_destroy = sl_cpu_partition_destroy,
    .partition_units = sl_cpu_partition_units,
    .partition_lend = sl_cpu_partition_lend,
    .stream_bind = sl_cpu_stream_bind,
};
