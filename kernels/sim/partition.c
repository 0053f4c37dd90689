/* The partition model (sim.h, "compute partitions"): wave quantisation of
 * an op's compute on fewer SMs, and its memory time at the share of the
 * bandwidth the other partitions leave. */
#include "sim.h"

#include "sl_error.h"

#include <math.h>

/* Ratios within this of a whole number of SM-waves count as that number:
 * 0.5 x 132 is 66 SM-waves, not 66.000000001. */
#define WAVE_EPS 1e-9

static double waves_on(double sm_waves, unsigned sms)
{
    double q = ceil(sm_waves / (double) sms - WAVE_EPS);
    return q < 1.0 ? 1.0 : q;
}

uint64_t sl_sim_part_work_ns(unsigned sm_count, uint64_t compute_ns, uint64_t memory_ns,
                             double waves, unsigned sms, double bw_share, double *occupancy,
                             uint64_t *block_ns)
{
    if (sm_count == 0)
        sm_count = 1;
    if (sms == 0 || sms > sm_count)
        sms = sm_count;
    if (!(bw_share > 0 && bw_share <= 1))
        bw_share = 1.0;
    if (!(waves > 0))
        waves = 1.0;
    double sm_waves = waves * (double) sm_count; /* W: SMs x waves it needs */
    double q_whole = waves_on(sm_waves, sm_count), q = waves_on(sm_waves, sms);
    double compute = (double) compute_ns * q / q_whole;
    double memory = (double) memory_ns / bw_share;
    uint64_t work = (uint64_t) ceil(fmax(compute, memory) - WAVE_EPS);
    if (occupancy) {
        double o = sm_waves / (double) sms;
        *occupancy = o < 1.0 ? o : 1.0;
    }
    if (block_ns)
        *block_ns = q > 1.0 ? (uint64_t) ((double) work / q) : work;
    return work;
}

int sl_sim_part_timing(const sl_sim_profile *p, const sl_sim_timing *whole, unsigned sms,
                       double bw_share, sl_sim_timing *out)
{
    if (!p || !whole || !out)
        return SL_EINVAL;
    sl_sim_timing r = *whole;
    if (whole->resource != SL_SIM_RES_DEVICE) {
        *out = r;
        return SL_OK;
    }
    unsigned prec = whole->prec < SL_SIM_PREC_COUNT && p->peak_flops[whole->prec] > 0 ? whole->prec
                                                                                      : SL_SIM_FP32;
    uint64_t compute = sl_sim_work_ns(p, prec, whole->flops, 0, NULL);
    uint64_t memory = sl_sim_work_ns(p, SL_SIM_FP32, 0, whole->bytes, NULL);
    double waves = whole->waves;
    if (!(waves > 0)) /* a timing made elsewhere: its waves from its blocks */
        waves = whole->occupancy < 1.0 || whole->block_ns == 0
                    ? whole->occupancy
                    : round((double) whole->work_ns / (double) whole->block_ns);
    r.work_ns = sl_sim_part_work_ns(p->sm_count, compute, memory, waves, sms, bw_share,
                                    &r.occupancy, &r.block_ns);
    r.memory_bound = (double) memory / (bw_share > 0 && bw_share <= 1 ? bw_share : 1.0) >=
                     (double) r.work_ns - 0.5;
    *out = r;
    return SL_OK;
}

double sl_sim_part_bw_share(double used, unsigned others)
{
    if (!(used > 0))
        return 1.0;
    double left = 1.0 - used, floor = 1.0 / (1.0 + (double) others);
    return left > floor ? left : floor;
}
