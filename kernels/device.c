/* Device specs and the backend-independent part of opening a device. */
#include "device.h"
#include "guard.h"
#include "sim/sim.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#define SPEC_MAX 64
#define INDEX_MAX 1023

struct spec {
    char backend[SPEC_MAX];
    char arg[SPEC_MAX];
    int index;
};

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* "backend[:arg][:index]": the last part is the index when it is all digits,
 * so "cuda:1" is index 1 and "sim:v100" is arg "v100" on index 0. No part may
 * be empty. */
static int parse_spec(const char *text, struct spec *sp)
{
    size_t len = text ? strlen(text) : 0;
    if (len == 0 || len >= SPEC_MAX)
        return SL_EINVAL;
    char buf[SPEC_MAX];
    memcpy(buf, text, len + 1);

    char *parts[3];
    unsigned n = 0;
    for (char *p = buf, *colon;; p = colon + 1) {
        if (n == 3)
            return SL_EINVAL;
        parts[n++] = p;
        colon = strchr(p, ':');
        if (!colon)
            break;
        *colon = '\0';
    }
    for (unsigned i = 0; i < n; i++)
        if (!*parts[i])
            return SL_EINVAL;

    sp->index = 0;
    if (n > 1 && all_digits(parts[n - 1])) {
        if (strlen(parts[n - 1]) > 4 || atoi(parts[n - 1]) > INDEX_MAX)
            return SL_EINVAL;
        sp->index = atoi(parts[n - 1]);
        n--;
    } else if (n == 3) {
        return SL_EINVAL; /* "sim:v100:x": the third part must be an index */
    }
    strcpy(sp->backend, parts[0]);
    strcpy(sp->arg, n == 2 ? parts[1] : "");
    return SL_OK;
}

int sl_dev_open(const char *spec, sl_device **out)
{
    struct spec sp;
    if (!out || parse_spec(spec, &sp) != SL_OK) {
        sl_log_err("dev.spec", "malformed device spec \"%s\" (want cpu, cuda[:N], sim:PROFILE[:N])",
                   spec ? spec : "(null)");
        return SL_EINVAL;
    }

    const sl_device_ops *ops;
    if (strcmp(sp.backend, "cpu") == 0) {
        ops = &sl_cpu_device_ops;
    } else if (strcmp(sp.backend, "cuda") == 0) {
        ops = sl_cuda_device_ops_ptr;
    } else if (strcmp(sp.backend, "sim") == 0) {
        ops = &sl_sim_device_ops;
    } else {
        sl_log_err("dev.backend", "unknown device backend \"%s\" in spec \"%s\"", sp.backend, spec);
        return SL_EINVAL;
    }
    if (!ops) {
        sl_log_err("dev.notbuilt", "device backend \"%s\" is not built into this binary",
                   sp.backend);
        return SL_EUNSUPPORTED;
    }

    /* before any stream can copy a client's memory */
    if (sl_guard_init() != SL_OK)
        sl_log_warn("dev.guard", "cannot install the SIGBUS/SIGSEGV guard: a client's shared "
                                 "memory that faults will kill salusd");

    /* Backend state follows the struct, aligned for any type. */
    size_t head = sl_align_up(sizeof(sl_device), alignof(max_align_t));
    sl_device *dev = sl_calloc(1, head + ops->priv_size);
    if (!dev)
        return SL_ENOMEM;
    dev->ops = ops;
    dev->index = sp.index;
    dev->priv = (char *) dev + head;

    int rc = ops->open(dev, sp.index, sp.arg);
    if (rc != SL_OK) {
        ops->close(dev); /* close is safe on a half-opened device */
        sl_free(dev);
        return rc;
    }
    *out = dev;
    return SL_OK;
}

void sl_dev_close(sl_device *dev)
{
    if (!dev)
        return;
    dev->ops->close(dev);
    sl_free(dev);
}

unsigned sl_dev_op_dtypes(sl_device *dev, unsigned op)
{
    const sl_op_def *d = sl_op_get(op);
    if (!d)
        return 0;
    unsigned own = d->dtypes ? d->dtypes : SL_DTS(SL_F32);
    unsigned backend = dev && dev->ops->op_dtypes ? dev->ops->op_dtypes(dev, op) : SL_DTS(SL_F32);
    return backend & own;
}
