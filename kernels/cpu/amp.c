/* The loss-scaling ops of f16 mixed-precision training (ops_table.c),
 * plain C: they touch each gradient once per step, next to the optimiser's
 * own pass, and do so in the arithmetic PyTorch's GradScaler does (the
 * gradient times the scale's reciprocal, in f32). */
#include "cpu.h"

#include "sl_error.h"

#include <math.h>

int sl_cpu_amp_unscale(const sl_op_call *c)
{
    float *g = c->in[0].data, *found = c->in[2].data;
    const float inv = 1.0f / *(const float *) c->in[1].data;
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    int bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        bad |= !isfinite(g[i]);
        g[i] *= inv;
    }
    if (bad)
        *found = 1.0f;
    return SL_OK;
}

int sl_cpu_amp_commit(const sl_op_call *c)
{
    if (*(const float *) c->in[2].data != 0.0f)
        return SL_OK;
    float *dst = c->in[0].data;
    const float *src = c->in[1].data;
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    for (uint64_t i = 0; i < n; i++)
        dst[i] = src[i];
    return SL_OK;
}

int sl_cpu_amp_scale_update(const sl_op_call *c)
{
    float *scale = c->in[0].data, *growth = c->in[1].data, *skipped = c->in[2].data;
    const float found = *(const float *) c->in[3].data;
    const sl_op_attrs *a = &c->attrs;
    if (found != 0.0f) {
        *scale *= a->f[1];
        *growth = 0.0f;
        *skipped += 1.0f;
    } else if ((*growth += 1.0f) >= a->f[2]) {
        *scale *= a->f[0];
        *growth = 0.0f;
    }
    return SL_OK;
}
