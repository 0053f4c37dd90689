/* The sim device: open/close, memory as address space, and the ops table.
 *
 * Device memory is address space only. Regions are handed out by a counter
 * in a range of addresses that no host mapping can ever occupy
 * (SIM_ADDR_BASE), so a region of any size costs nothing
 * (an 80 GiB device on a 24 GiB machine, under valgrind as well), the
 * addresses never alias host memory, and an accidental dereference faults at
 * once instead of silently reading host bytes. Nothing in the sim ever
 * dereferences a device address; callers only compute arena + offset. */
#include "sim_dev.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stdio.h>
#include <string.h>

/* Start of the fake device address range and the alignment of every region
 * (the contract asks for 256 bytes). 0x4080... is non-canonical on x86-64
 * with 4- or 5-level paging, and on arm64 (which ignores the top byte of
 * data addresses) it reads as 2^55, above any user virtual address. */
#define SIM_ADDR_BASE ((uintptr_t) 0x4080000000000000ull)
#define SIM_ADDR_ALIGN 65536u
_Static_assert(sizeof(uintptr_t) == 8, "sim device addresses need 64-bit pointers");

/* The option after the profile's name ("h200,host-launch"): a launch
 * occupies the thread that submits it (sl_sim_device_ops). */
#define HOST_LAUNCH_OPT ",host-launch"

static int sim_open(sl_device *dev, int index, const char *arg)
{
    struct sl_sim_dev *d = dev->priv;
    char names[128], profile[64];
    if (!arg || arg[0] == '\0') {
        sl_log_err("sim.open.arg", "the sim backend needs a profile, e.g. sim:v100 (profiles: %s)",
                   sl_sim_profile_names(names, sizeof names));
        return SL_EINVAL;
    }
    size_t len = strlen(arg), opt = strlen(HOST_LAUNCH_OPT);
    d->host_launch = len > opt && strcmp(arg + len - opt, HOST_LAUNCH_OPT) == 0;
    if (d->host_launch)
        len -= opt;
    snprintf(profile, sizeof profile, "%.*s", (int) len, arg);
    if (sl_sim_profile_find(profile, &d->profile) != SL_OK) {
        sl_log_err("sim.open.profile", "unknown sim profile \"%s\" (profiles: %s)", arg,
                   sl_sim_profile_names(names, sizeof names));
        return SL_EINVAL;
    }
    if (index < 0 || index >= SL_SIM_MAX_DEVICES) {
        sl_log_err("sim.open.index", "sim device index %d out of range [0, %d)", index,
                   SL_SIM_MAX_DEVICES);
        return SL_ENODEV;
    }
    if (pthread_mutex_init(&d->mem_lock, NULL) != 0)
        return SL_ENOMEM;
    d->mem_lock_ready = true;
    atomic_init(&d->fail_ops, 0);
    atomic_init(&d->fail_code, SL_OK);
    atomic_init(&d->lost, false);
    atomic_init(&d->slowdown, 1);
    atomic_init(&d->reset_fails, false);

    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return SL_ENOMEM;
    int rc = SL_ENOMEM;
    if (pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0)
        goto out_destroy_attr;
    if (pthread_mutex_init(&d->model_lock, NULL) != 0)
        goto out_destroy_attr;
    if (pthread_cond_init(&d->model_cv, &attr) != 0) {
        pthread_mutex_destroy(&d->model_lock);
        goto out_destroy_attr;
    }
    d->model_ready = true;
    uint64_t now = sl_now_ns();
    for (unsigned r = 0; r < SL_SIM_RES_COUNT; r++)
        sl_sim_psc_init(&d->res[r], now);
    d->launch_free_ns = now;

    dev->total_bytes = d->profile->capacity;
    dev->workspace_hint = 64ull << 20; /* cuBLAS's 32 MiB (Hopper) + cuDNN's */
    snprintf(dev->description, sizeof dev->description, "%s%s", d->profile->description,
             d->host_launch ? " (launches take host time)" : "");
    rc = SL_OK;
out_destroy_attr:
    pthread_condattr_destroy(&attr);
    return rc;
}

static void sim_close(sl_device *dev)
{
    struct sl_sim_dev *d = dev->priv;
    for (struct sl_sim_region *r = d->regions, *next; r; r = next) {
        next = r->next;
        sl_log_warn("sim.leak", "device closed with %zu bytes still allocated at %p", r->bytes,
                    r->base);
        sl_free(r);
    }
    d->regions = NULL;
    if (d->model_ready) {
        pthread_cond_destroy(&d->model_cv);
        pthread_mutex_destroy(&d->model_lock);
    }
    d->model_ready = false;
    if (d->mem_lock_ready)
        pthread_mutex_destroy(&d->mem_lock);
    d->mem_lock_ready = false;
}

static int sim_mem_alloc(sl_device *dev, size_t bytes, void **out)
{
    struct sl_sim_dev *d = dev->priv;
    if (bytes == 0 || !out)
        return SL_EINVAL;
    struct sl_sim_region *r = sl_malloc(sizeof *r);
    if (!r)
        return SL_ENOMEM;

    pthread_mutex_lock(&d->mem_lock);
    if (bytes > dev->total_bytes - d->used) {
        pthread_mutex_unlock(&d->mem_lock);
        sl_free(r);
        return SL_EEXHAUSTED;
    }
    d->used += bytes;
    /* Addresses are not reused: a stale device pointer never names a newer
     * region. The range has 2^55 bytes, thousands of full-capacity arenas. */
    uintptr_t base = SIM_ADDR_BASE + d->next_addr;
    d->next_addr += sl_align_up(bytes, SIM_ADDR_ALIGN);
    *r = (struct sl_sim_region){.next = d->regions, .base = (void *) base, .bytes = bytes};
    d->regions = r;
    pthread_mutex_unlock(&d->mem_lock);
    *out = r->base;
    return SL_OK;
}

static void sim_mem_free(sl_device *dev, void *ptr)
{
    struct sl_sim_dev *d = dev->priv;
    if (!ptr)
        return;
    pthread_mutex_lock(&d->mem_lock);
    struct sl_sim_region **link = &d->regions;
    while (*link && (*link)->base != ptr)
        link = &(*link)->next;
    struct sl_sim_region *r = *link;
    if (r) {
        *link = r->next;
        d->used -= r->bytes;
    }
    pthread_mutex_unlock(&d->mem_lock);
    if (!r) {
        sl_log_err("sim.free", "mem_free of %p, which mem_alloc did not return", ptr);
        return;
    }
    sl_free(r);
}

/* ---- fault injection ---- */

int sl_sim_take_fault(struct sl_sim_dev *d, bool is_op)
{
    if (atomic_load(&d->lost))
        return SL_EDEVICERESET;
    if (!is_op)
        return SL_OK;
    unsigned n = atomic_load(&d->fail_ops);
    while (n > 0 && !atomic_compare_exchange_weak(&d->fail_ops, &n, n - 1)) {
    }
    if (n == 0)
        return SL_OK;
    int code = atomic_load(&d->fail_code);
    if (code == SL_EDEVICERESET)
        atomic_store(&d->lost, true);
    return code;
}

int sl_sim_fail_next_ops(sl_device *dev, unsigned n, int code)
{
    if (!dev || dev->ops != &sl_sim_device_ops || code <= SL_OK || code >= SL_E_COUNT)
        return SL_EINVAL;
    struct sl_sim_dev *d = dev->priv;
    atomic_store(&d->fail_ops, 0); /* never a count paired with the old code */
    atomic_store(&d->fail_code, code);
    atomic_store(&d->fail_ops, n);
    return SL_OK;
}

/* Launches reserved so far no longer stand (sim_dev.h launch_epoch). */
static void rebase_launches(struct sl_sim_dev *d)
{
    pthread_mutex_lock(&d->model_lock);
    uint64_t now = sl_now_ns();
    d->launch_epoch++;
    if (d->launch_free_ns > now)
        d->launch_free_ns = now;
    pthread_mutex_unlock(&d->model_lock);
}

int sl_sim_set_slowdown(sl_device *dev, unsigned factor)
{
    if (!dev || dev->ops != &sl_sim_device_ops || factor < 1 || factor > 1000000)
        return SL_EINVAL;
    struct sl_sim_dev *d = dev->priv;
    atomic_store(&d->slowdown, factor);
    rebase_launches(d);
    return SL_OK;
}

int sl_sim_break_next_reset(sl_device *dev)
{
    if (!dev || dev->ops != &sl_sim_device_ops)
        return SL_EINVAL;
    struct sl_sim_dev *d = dev->priv;
    atomic_store(&d->reset_fails, true);
    return SL_OK;
}

static int sim_inject_fault(sl_device *dev, int kind, unsigned n)
{
    int rc;
    switch (kind) {
    case SL_FAULT_ALLOC:
        return n >= 1 && n <= 1000000 ? sl_sim_fail_next_ops(dev, n, SL_EEXHAUSTED) : SL_EINVAL;
    case SL_FAULT_STICKY:
        return sl_sim_fail_next_ops(dev, 1, SL_EDEVICERESET);
    case SL_FAULT_FATAL:
        rc = sl_sim_break_next_reset(dev);
        return rc == SL_OK ? sl_sim_fail_next_ops(dev, 1, SL_EDEVICERESET) : rc;
    case SL_FAULT_SLOW:
        return sl_sim_set_slowdown(dev, n);
    case SL_FAULT_GRAPH:
        if (n < 1 || n > 1000000)
            return SL_EINVAL;
        atomic_store(&((struct sl_sim_dev *) dev->priv)->fail_graphs, n);
        return SL_OK;
    case SL_FAULT_CLEAR:
        rc = sl_sim_fail_next_ops(dev, 0, SL_EDEVICE);
        return rc == SL_OK ? sl_sim_set_slowdown(dev, 1) : rc;
    default:
        return SL_EINVAL;
    }
}

/* A lost sim device recovers at once; the caller has destroyed its streams
 * and freed its memory (device.h). An injected slowdown stays: a reset does
 * not make a slow device fast. */
static int sim_reset(sl_device *dev)
{
    struct sl_sim_dev *d = dev->priv;
    if (atomic_exchange(&d->reset_fails, false)) {
        sl_log_err("sim.reset", "injected fault: the device does not come back");
        return SL_ENODEV;
    }
    atomic_store(&d->fail_ops, 0);
    atomic_store(&d->lost, false);
    rebase_launches(d);
    return SL_OK;
}

/* Every op is only timed, never computed, so an op runs in every float
 * dtype of the profile (within the op's own, sl_dev_op_dtypes): a cast
 * included. */
static unsigned sim_op_dtypes(sl_device *dev, unsigned op)
{
    (void) op;
    const struct sl_sim_dev *d = dev->priv;
    return sl_sim_dtypes(d->profile);
}

const sl_sim_profile *sl_sim_device_profile(const sl_device *dev)
{
    if (!dev || dev->ops != &sl_sim_device_ops)
        return NULL;
    const struct sl_sim_dev *d = dev->priv;
    return d->profile;
}

const sl_device_ops sl_sim_device_ops = {
    .name = "sim",
    .priv_size = sizeof(struct sl_sim_dev),
    .open = sim_open,
    .close = sim_close,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .stream_create = sl_sim_stream_create,
    .stream_destroy = sl_sim_stream_destroy,
    .memcpy_h2d = sl_sim_memcpy_h2d,
    .memcpy_d2h = sl_sim_memcpy_d2h,
    .memcpy_d2d = sl_sim_memcpy_d2d,
    .launch = sl_sim_launch,
    .graph_begin = sl_sim_graph_begin,
    .graph_end = sl_sim_graph_end,
    .graph_launch = sl_sim_graph_launch,
    .graph_destroy = sl_sim_graph_destroy,
    .op_dtypes = sim_op_dtypes,
    .stream_set_workspace = sl_sim_stream_set_workspace,
    .host_callback = sl_sim_host_callback,
    .synchronize = sl_sim_synchronize,
    .reset = sim_reset,
    .inject_fault = sim_inject_fault,
    .partition_caps = sl_sim_partition_caps,
    .partition_create = sl_sim_partition_create,
    .partition_resize = sl_sim_partition_resize,
    .partition_destroy = sl_sim_partition_destroy,
    .partition_units = sl_sim_partition_units,
    .stream_bind = sl_sim_stream_bind,
};
