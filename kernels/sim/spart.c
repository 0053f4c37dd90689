/* Compute partitions of the real-time sim device (device.h): a partition
 * is a number of the profile's SMs with a processor-sharing resource of its
 * own (sl_sim_psc), so ops of different partitions never share SMs, and an
 * op on a partition is timed for its SMs (sl_sim_part_timing: wave
 * quantisation). Granularity: the green-context rule of the profile's
 * architecture (CUDA Driver API, "Green Contexts": 2 SMs in steps of 2 on
 * P100 and V100, 4 in steps of 2 on A100, 8 in steps of 8 on H100 and
 * H200). Not modelled here (eval/lib/pdev.h does): memory bandwidth shared
 * across partitions, and a launch path per partition (every stream still
 * launches through the device's one). A stream bound to none runs on the
 * whole device's resource, which does not see the partitions' load. */
#include "sim_dev.h"

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_time.h"

#include <stdio.h>
#include <string.h>

static void granularity(const sl_sim_profile *p, unsigned *min_sms, unsigned *align)
{
    *min_sms = 2;
    *align = 2;
    if (!strcmp(p->name, "h100") || !strcmp(p->name, "h200"))
        *min_sms = *align = 8;
    else if (!strncmp(p->name, "a100", 4))
        *min_sms = 4;
}

int sl_sim_partition_caps(sl_device *dev, sl_partition_caps *caps)
{
    struct sl_sim_dev *d = dev->priv;
    memset(caps, 0, sizeof *caps);
    caps->units = d->profile->sm_count;
    granularity(d->profile, &caps->min_units, &caps->align);
    snprintf(caps->unit, sizeof caps->unit, "SM");
    snprintf(caps->note, sizeof caps->note, "modelled SM partitions (green-context granularity)");
    return SL_OK;
}

static unsigned round_sms(const struct sl_sim_dev *d, unsigned units)
{
    unsigned min_sms, align;
    granularity(d->profile, &min_sms, &align);
    if (units < min_sms)
        units = min_sms;
    return min_sms + (units - min_sms + align - 1) / align * align;
}

int sl_sim_partition_create(sl_device *dev, unsigned units, sl_partition **out)
{
    struct sl_sim_dev *d = dev->priv;
    if (units == 0 || units > d->profile->sm_count)
        return SL_EINVAL;
    units = round_sms(d, units);
    sl_partition *p = sl_calloc(1, sizeof *p);
    if (!p)
        return SL_ENOMEM;
    pthread_mutex_lock(&d->model_lock);
    if (d->part_sms + units > d->profile->sm_count) {
        pthread_mutex_unlock(&d->model_lock);
        sl_free(p);
        return SL_EEXHAUSTED;
    }
    d->part_sms += units;
    pthread_mutex_unlock(&d->model_lock);
    p->dev = d;
    p->sms = units;
    sl_sim_psc_init(&p->ps, sl_now_ns());
    *out = p;
    return SL_OK;
}

int sl_sim_partition_resize(sl_device *dev, sl_partition *p, unsigned units)
{
    struct sl_sim_dev *d = dev->priv;
    if (units == 0 || units > d->profile->sm_count)
        return SL_EINVAL;
    units = round_sms(d, units);
    int rc = SL_OK;
    pthread_mutex_lock(&d->model_lock);
    if (d->part_sms - p->sms + units > d->profile->sm_count)
        rc = SL_EEXHAUSTED;
    else {
        d->part_sms = d->part_sms - p->sms + units;
        p->sms = units;
    }
    pthread_mutex_unlock(&d->model_lock);
    return rc;
}

void sl_sim_partition_destroy(sl_device *dev, sl_partition *p)
{
    struct sl_sim_dev *d = dev->priv;
    if (!p)
        return;
    pthread_mutex_lock(&d->model_lock);
    d->part_sms -= p->sms;
    pthread_mutex_unlock(&d->model_lock);
    sl_free(p);
}

unsigned sl_sim_partition_units(sl_device *dev, const sl_partition *p)
{
    struct sl_sim_dev *d = dev->priv;
    pthread_mutex_lock(&d->model_lock);
    unsigned sms = p->sms;
    pthread_mutex_unlock(&d->model_lock);
    return sms;
}
