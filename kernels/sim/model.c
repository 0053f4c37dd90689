/* The timing model in virtual time: the cost of ops and copies on a profile,
 * and the processor-sharing resource. Pure functions of their arguments; the
 * real-time device (stream.c) and bench/'s simulator share them. */
#include "sim.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <math.h>
#include <string.h>

/* Multiplications of Winograd F(2x2,3x3) versus direct 3x3 convolution:
 * 16 per 2x2 output tile instead of 36 (Lavin & Gray, CVPR 2016). */
#define WINOGRAD_3X3_GAIN 2.25

/* Occupancy (sim.h). GEMM-like ops are counted in output tiles of
 * GEMM_TILE x GEMM_TILE, one thread block each: the threadblock tile of
 * CUTLASS's default SGEMM (128x128x8, 256 threads; CUTLASS "Efficient GEMM
 * in CUDA" documentation), the size class cuBLAS and cuDNN's implicit-GEMM
 * kernels use for large fp32 problems. ASSUMPTION: GEMM_BLOCKS_PER_SM = 2
 * such blocks are resident per SM: 256 threads with 64 fp32 accumulators
 * each take ~128 registers per thread, 32 K of an SM's 64 K registers
 * (P100 through H100), so two fit, not three. Convolutions are implicit
 * GEMMs (M = batch x output pixels, N = output channels for the forward
 * pass; M = batch x input pixels, N = input channels for the input
 * gradient). The filter gradient's GEMM (M = output channels, N = input
 * channels x kernel extent) has a long K = batch x output pixels that
 * cuDNN splits across blocks; ASSUMPTION: one block per WGRAD_SPLIT_K of
 * K, so large-batch filter gradients fill the device as their time says
 * they do. Every other op (element-wise, normalisation, pooling, losses,
 * optimiser updates, device copies) is taken as one thread per element of
 * its largest tensor (ASSUMPTION: TensorFlow's Eigen kernels use one
 * thread per element or a grid-stride loop sized to the device, either way
 * this many threads are eligible), so its occupancy is elements /
 * (sm_count x threads_per_sm). Not modeled: registers or shared memory
 * limiting an element-wise kernel below full residency, tail effects of a
 * last partial wave. */
#define GEMM_TILE 128u
#define GEMM_BLOCKS_PER_SM 2u
#define WGRAD_SPLIT_K 4096u

/* Service below this many ns counts as done: absorbs floating-point rounding
 * of the departure time. */
#define PS_EPS_NS 1e-6

unsigned sl_sim_dtypes(const sl_sim_profile *p)
{
    unsigned dts = SL_DTS(SL_F32);
    if (p && p->peak_flops[SL_SIM_BF16_TC] > 0)
        dts |= SL_DTS(SL_BF16);
    if (p && p->peak_flops[SL_SIM_FP16_TC] > 0)
        dts |= SL_DTS(SL_F16);
    return dts;
}

/* The math bit that lets op's f32 form use TF32; 0 for an op that is no
 * GEMM on tensor cores. */
static unsigned tensor_core_bit(unsigned op)
{
    switch (op) {
    case SL_OP_MATMUL:
    case SL_OP_MATMUL_ACC:
    case SL_OP_BATCH_MATMUL:
        return SL_MATH_MATMUL_TF32;
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
        return SL_MATH_CONV_TF32;
    default:
        return 0;
    }
}

unsigned sl_sim_op_prec(const sl_sim_profile *p, unsigned op, unsigned dtype, unsigned math)
{
    unsigned bit = tensor_core_bit(op);
    if (!bit)
        return SL_SIM_FP32;
    if (dtype == SL_BF16)
        return SL_SIM_BF16_TC;
    if (dtype == SL_F16)
        return SL_SIM_FP16_TC;
    if ((math & bit) && p && p->peak_flops[SL_SIM_TF32_TC] > 0)
        return SL_SIM_TF32_TC;
    return SL_SIM_FP32;
}

/* The dtype an op computes in: its first float input's (the registry makes
 * every float input of an op share one, cast aside), f32 when it has none. */
static unsigned compute_dtype(const sl_op_def *d, const sl_shape *in)
{
    for (unsigned i = 0; i < d->n_in; i++)
        if (sl_dtype_is_float(in[i].dtype))
            return in[i].dtype;
    return SL_F32;
}

/* Whether p runs every float dtype among op's tensors (a cast's output
 * included). */
static bool runs_dtypes(const sl_sim_profile *p, const sl_op_def *d, const sl_shape *in,
                        const sl_shape *out)
{
    unsigned need = 0;
    for (unsigned i = 0; i < d->n_in; i++)
        if (sl_dtype_is_float(in[i].dtype))
            need |= SL_DTS(in[i].dtype);
    for (unsigned i = 0; out && i < d->n_out; i++)
        if (sl_dtype_is_float(out[i].dtype))
            need |= SL_DTS(out[i].dtype);
    return (need & ~sl_sim_dtypes(p)) == 0;
}

uint64_t sl_sim_work_ns(const sl_sim_profile *p, unsigned prec, uint64_t flops, uint64_t bytes,
                        bool *memory_bound)
{
    double compute_s = (double) flops / (p->peak_flops[prec] * p->eff_compute);
    double memory_s = (double) bytes / (p->mem_bw * p->eff_mem);
    if (memory_bound)
        *memory_bound = memory_s > compute_s;
    return (uint64_t) ceil(fmax(compute_s, memory_s) * 1e9);
}

/* Whether cuDNN would run this convolution (or one of its gradients) as
 * Winograd: 3x3 kernel, stride 1, no dilation, no groups. w is the filter. */
static bool winograd_3x3(const sl_op_attrs *a, const sl_shape *w)
{
    if (w->ndim != 4 || w->dims[2] != 3 || w->dims[3] != 3)
        return false;
    for (unsigned i = 0; i < 2; i++)
        if (a->i[i] > 1 || a->i[6 + i] > 1)
            return false;
    return a->i[8] <= 1;
}

static const sl_shape *conv_filter(unsigned op, const sl_shape *in, const sl_shape *out)
{
    switch (op) {
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
        return &in[1];
    case SL_OP_CONV2D_GRAD_FILTER:
        return &out[0];
    default:
        return NULL;
    }
}

/* blocks over the device's resident block slots, unclamped: above 1 it is
 * the number of waves the blocks run in. */
static double block_ratio(const sl_sim_profile *p, uint64_t blocks, unsigned per_sm)
{
    if (!p || p->sm_count == 0 || per_sm == 0)
        return 1.0;
    return (double) (blocks ? blocks : 1) / ((double) p->sm_count * (double) per_sm);
}

double sl_sim_occupancy(const sl_sim_profile *p, uint64_t blocks, unsigned per_sm)
{
    double o = block_ratio(p, blocks, per_sm);
    return o < 1.0 ? o : 1.0;
}

/* One block's duration: work_ns over the waves its blocks run in. */
static uint64_t block_ns(uint64_t work_ns, double ratio)
{
    double waves = ceil(ratio);
    return waves > 1.0 ? (uint64_t) ((double) work_ns / waves) : work_ns;
}

static uint64_t elements(const sl_shape *s)
{
    uint64_t n = 1;
    for (unsigned i = 0; i < s->ndim; i++)
        n *= s->dims[i] > 0 ? (uint64_t) s->dims[i] : 0;
    return n;
}

static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return (a + b - 1) / b;
}

static uint64_t gemm_tiles(uint64_t m, uint64_t n)
{
    return ceil_div(m, GEMM_TILE) * ceil_div(n, GEMM_TILE);
}

/* One validated op's blocks over the resident block slots (constants above):
 * its occupancy alone when below 1. */
static double op_block_ratio(const sl_sim_profile *p, const sl_op_def *d, unsigned op,
                             const sl_shape *in, const sl_shape *out)
{
    const sl_shape *c = NULL; /* a GEMM's output */
    switch (op) {
    case SL_OP_MATMUL:
        c = &out[0];
        break;
    case SL_OP_MATMUL_ACC:
        c = &in[2]; /* accumulated in place */
        break;
    case SL_OP_CONV2D:            /* y: batch, out channels, h, w */
    case SL_OP_CONV2D_GRAD_INPUT: /* dx: batch, in channels, h, w */
        if (out[0].ndim == 4) {
            const int64_t *y = out[0].dims;
            uint64_t m = (uint64_t) (y[0] * y[2] * y[3]), n = (uint64_t) y[1];
            return block_ratio(p, gemm_tiles(m, n), GEMM_BLOCKS_PER_SM);
        }
        break;
    case SL_OP_CONV2D_GRAD_FILTER: /* in[1] dy: batch, out channels, h, w */
        if (out[0].ndim == 4 && in[1].ndim == 4) {
            const int64_t *w = out[0].dims, *dy = in[1].dims;
            uint64_t k = (uint64_t) (dy[0] * dy[2] * dy[3]);
            uint64_t tiles = gemm_tiles((uint64_t) w[0], (uint64_t) (w[1] * w[2] * w[3]));
            return block_ratio(p, tiles * ceil_div(k ? k : 1, WGRAD_SPLIT_K), GEMM_BLOCKS_PER_SM);
        }
        break;
    default:
        break;
    }
    if (c && c->ndim >= 2) {
        uint64_t n = (uint64_t) c->dims[c->ndim - 1];
        uint64_t m = n ? elements(c) / n : 0;
        return block_ratio(p, gemm_tiles(m, n), GEMM_BLOCKS_PER_SM);
    }
    uint64_t most = 0;
    for (unsigned i = 0; i < d->n_in; i++)
        most = elements(&in[i]) > most ? elements(&in[i]) : most;
    for (unsigned i = 0; i < d->n_out; i++)
        most = elements(&out[i]) > most ? elements(&out[i]) : most;
    /* one thread per element: blocks of one thread, threads_per_sm per SM */
    return block_ratio(p, most, p->threads_per_sm);
}

int sl_sim_op_timing_math(const sl_sim_profile *p, unsigned op, const sl_op_attrs *attrs,
                          unsigned math, const sl_shape *in, const sl_shape *out, sl_sim_timing *t)
{
    static const sl_op_attrs zero_attrs;
    const sl_op_def *d = sl_op_get(op);
    if (!p || !in || !t || !d)
        return SL_EINVAL;
    if (!d->cost || !d->name)
        return SL_EUNSUPPORTED;
    if (!attrs)
        attrs = &zero_attrs;
    if (!runs_dtypes(p, d, in, out))
        return SL_EUNSUPPORTED;
    unsigned prec = sl_sim_op_prec(p, op, compute_dtype(d, in), math);
    if (!(p->peak_flops[prec] > 0))
        return SL_EUNSUPPORTED;

    sl_op_cost c = {0, 0};
    d->cost(attrs, in, out, &c);
    const sl_shape *w = conv_filter(op, in, out);
    if (w && winograd_3x3(attrs, w))
        c.flops = (uint64_t) ((double) c.flops / WINOGRAD_3X3_GAIN);

    sl_sim_timing r = {.launch_ns = p->launch_ns,
                       .resource = SL_SIM_RES_DEVICE,
                       .flops = c.flops,
                       .bytes = c.bytes,
                       .prec = (uint8_t) prec};
    double ratio = op_block_ratio(p, d, op, in, out);
    r.occupancy = ratio < 1.0 ? ratio : 1.0;
    r.work_ns = sl_sim_work_ns(p, prec, c.flops, c.bytes, &r.memory_bound);
    r.block_ns = block_ns(r.work_ns, ratio);
    r.waves = ratio;
    *t = r;
    return SL_OK;
}

int sl_sim_op_timing(const sl_sim_profile *p, unsigned op, const sl_op_attrs *attrs,
                     const sl_shape *in, const sl_shape *out, sl_sim_timing *t)
{
    return sl_sim_op_timing_math(p, op, attrs, 0, in, out, t);
}

int sl_sim_op_time_ns(const sl_sim_profile *p, unsigned op, const sl_op_attrs *attrs,
                      const sl_shape *in, const sl_shape *out, uint64_t *ns)
{
    sl_sim_timing t;
    int rc = sl_sim_op_timing(p, op, attrs, in, out, &t);
    if (rc == SL_OK && !ns)
        rc = SL_EINVAL;
    if (rc == SL_OK)
        *ns = t.launch_ns + t.work_ns;
    return rc;
}

void sl_sim_copy_timing(const sl_sim_profile *p, unsigned kind, uint64_t bytes, sl_sim_timing *t)
{
    sl_sim_timing r = {
        .launch_ns = p->launch_ns, .bytes = bytes, .memory_bound = true, .occupancy = 1.0};
    if (kind == SL_SIM_COPY_D2D) {
        /* an element-wise kernel over the 4-byte words copied */
        double ratio = block_ratio(p, bytes / 4, p->threads_per_sm);
        r.occupancy = ratio < 1.0 ? ratio : 1.0;
        /* Reads and writes device memory: the SMs' resource. */
        r.resource = SL_SIM_RES_DEVICE;
        r.bytes = 2 * bytes;
        r.work_ns = sl_sim_work_ns(p, SL_SIM_FP32, 0, r.bytes, NULL);
        r.block_ns = block_ns(r.work_ns, ratio);
        r.waves = ratio;
    } else {
        r.resource = kind == SL_SIM_COPY_H2D ? SL_SIM_RES_H2D : SL_SIM_RES_D2H;
        r.work_ns = (uint64_t) ceil((double) bytes / p->pcie_bw * 1e9);
    }
    *t = r;
}

/* ---- processor sharing ---- */

void sl_sim_ps_init(sl_sim_ps *ps, uint64_t start_ns)
{
    memset(ps, 0, sizeof *ps);
    ps->now_ns = start_ns;
}

void sl_sim_ps_submit(sl_sim_ps *ps, sl_sim_ps_job *job, uint64_t arrive_ns, uint64_t work_ns)
{
    job->done = false;
    job->done_ns = 0;
    job->work_ns = work_ns;
    job->arrive_ns = arrive_ns < ps->now_ns ? ps->now_ns : arrive_ns;
    /* Keep pending sorted by arrival; equal arrivals in submission order. */
    sl_sim_ps_job **link = &ps->pending;
    while (*link && (*link)->arrive_ns <= job->arrive_ns)
        link = &(*link)->next;
    job->next = *link;
    *link = job;
}

static uint64_t next_departure(const sl_sim_ps *ps)
{
    if (ps->n_active == 0)
        return UINT64_MAX;
    double min_finish = INFINITY;
    for (const sl_sim_ps_job *j = ps->active; j; j = j->next)
        min_finish = fmin(min_finish, j->finish_v);
    double dt = (min_finish - ps->v) * (double) ps->n_active;
    if (dt <= PS_EPS_NS)
        return ps->now_ns;
    /* Integer time plus a rounded-up step: exact however large now_ns is. */
    double step = ceil(dt - PS_EPS_NS);
    if (step >= (double) (UINT64_MAX - 1 - ps->now_ns))
        return UINT64_MAX - 1;
    return ps->now_ns + (uint64_t) step;
}

uint64_t sl_sim_ps_next_event_ns(const sl_sim_ps *ps)
{
    uint64_t dep = next_departure(ps);
    uint64_t arr = ps->pending ? ps->pending->arrive_ns : UINT64_MAX;
    return dep < arr ? dep : arr;
}

/* Moves the state's clock to t (>= now); active jobs gain service. */
static void progress(sl_sim_ps *ps, uint64_t t)
{
    if (ps->n_active)
        ps->v += (double) (t - ps->now_ns) / (double) ps->n_active;
    ps->now_ns = t;
}

/* Completes every active job whose service is reached; returns how many. */
static unsigned depart(sl_sim_ps *ps, sl_sim_ps_done_fn done_fn, void *arg)
{
    sl_sim_ps_job *gone = NULL, **link = &ps->active;
    while (*link) {
        sl_sim_ps_job *j = *link;
        if (j->finish_v <= ps->v + PS_EPS_NS) {
            *link = j->next;
            j->next = gone;
            gone = j;
            ps->n_active--;
        } else {
            link = &j->next;
        }
    }
    if (ps->n_active == 0)
        ps->v = 0; /* an idle resource starts the next busy period afresh */
    unsigned n = 0;
    for (sl_sim_ps_job *j = gone, *next; j; j = next, n++) {
        next = j->next; /* done_fn may resubmit j */
        j->next = NULL;
        j->done = true;
        j->done_ns = ps->now_ns;
        if (done_fn)
            done_fn(arg, j);
    }
    return n;
}

unsigned sl_sim_ps_advance(sl_sim_ps *ps, uint64_t t_ns, sl_sim_ps_done_fn done_fn, void *arg)
{
    if (t_ns < ps->now_ns)
        return 0;
    unsigned n = 0;
    for (;;) {
        uint64_t dep = next_departure(ps);
        uint64_t arr = ps->pending ? ps->pending->arrive_ns : UINT64_MAX;
        uint64_t at = dep <= arr ? dep : arr;
        if (at == UINT64_MAX || at > t_ns)
            break;
        progress(ps, at);
        if (dep <= arr) {
            n += depart(ps, done_fn, arg);
        } else {
            sl_sim_ps_job *j = ps->pending;
            ps->pending = j->next;
            j->finish_v = ps->v + (double) j->work_ns;
            j->next = ps->active;
            ps->active = j;
            ps->n_active++;
        }
    }
    /* Busy: service accrues up to t. Idle: the state stays at its last event,
     * so a job arriving back-to-back after a departure is not pushed later by
     * whenever the caller happened to look. */
    if (ps->n_active)
        progress(ps, t_ns);
    return n;
}

int sl_sim_ps_schedule(unsigned n, const uint64_t *arrive_ns, const uint64_t *work_ns,
                       uint64_t *done_ns)
{
    if (n == 0)
        return SL_OK;
    if (!arrive_ns || !work_ns || !done_ns)
        return SL_EINVAL;
    sl_sim_ps_job *jobs = sl_calloc(n, sizeof *jobs);
    if (!jobs)
        return SL_ENOMEM;
    uint64_t start = UINT64_MAX;
    for (unsigned i = 0; i < n; i++)
        start = arrive_ns[i] < start ? arrive_ns[i] : start;
    sl_sim_ps ps;
    sl_sim_ps_init(&ps, start);
    for (unsigned i = 0; i < n; i++)
        sl_sim_ps_submit(&ps, &jobs[i], arrive_ns[i], work_ns[i]);
    (void) sl_sim_ps_advance(&ps, UINT64_MAX - 1, NULL, NULL);
    for (unsigned i = 0; i < n; i++)
        done_ns[i] = jobs[i].done_ns;
    sl_free(jobs);
    return SL_OK;
}
