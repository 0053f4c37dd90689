/* The sim backend: a GPU *timing model*. Internal header for kernels/ and for
 * other modules that need the model without a device (eval/'s discrete-event
 * simulator, tests). No CUDA type appears here.
 *
 * Two clocks share one model:
 * - virtual time: the pure functions below (sl_sim_op_timing, the
 *   processor-sharing resource sl_sim_ps) take time as an argument, never
 *   sleep and start no threads;
 * - real time: sl_sim_device_ops, a device whose streams are worker threads
 *   that sleep for the modeled durations (kernels/sim/stream.c), so salusd
 *   runs GPU-shaped workloads with `--device sim:v100`.
 *
 * The cost of one op is
 *     launch_ns + max(flops / (peak[prec] * eff_compute), bytes / (mem_bw * eff_mem))
 * with flops and bytes from the op registry's cost() (bytes in each
 * tensor's dtype: a bf16 tensor moves half an f32 one's), prec the op's
 * precision (sl_sim_op_prec: tensor cores for half-precision matmuls and
 * convolutions, and for f32 ones the session lets use TF32), except that 3x3
 * stride-1 convolutions are charged 1/2.25 of their direct FLOPs: cuDNN runs
 * them as Winograd F(2x2,3x3) (Lavin & Gray, "Fast Algorithms for
 * Convolutional Neural Networks", CVPR 2016), and without this no efficiency
 * factor fits VGG-class networks (they run faster than direct convolution at
 * peak FLOP/s would allow). Copies cost launch_ns + bytes / pcie_bw (host
 * link) or launch_ns + 2 * bytes / (mem_bw * eff_mem) (device to device).
 *
 * Occupancy. An op alone may not fill the device: a batch-1 convolution has
 * too few output tiles, a small element-wise op too few elements, to give
 * every SM work. Its occupancy o in (0, 1] is the fraction of the SMs its
 * thread blocks can keep busy, estimated from its shapes (sl_sim_occupancy):
 *     o = min(1, blocks / (sm_count * resident blocks per SM))
 * with GEMM-like ops (matmul, the convolutions as implicit GEMM) in output
 * tiles and every other op at one element per thread (model.c gives every
 * constant's source). The op's time alone is the formula above (calibrated,
 * unchanged); o says how much of the device it leaves to ops of other
 * streams: a device shared with caps (sl_sim_psc) runs ops whose
 * occupancies sum to at most 1 side by side at full speed. */
#ifndef SL_SIM_H
#define SL_SIM_H

#include "device.h"
#include "profiles.h"

#include <stdbool.h>
#include <stdint.h>

/* The shared resources of one device, each a processor-sharing server: the
 * SMs with device memory (ops and device-to-device copies), and the host link
 * in each direction (copy engines run beside the SMs, so an upload does not
 * slow a kernel down, but two uploads share the link). */
enum sl_sim_resource { SL_SIM_RES_DEVICE = 0, SL_SIM_RES_H2D, SL_SIM_RES_D2H, SL_SIM_RES_COUNT };

enum sl_sim_copy_kind { SL_SIM_COPY_H2D = 0, SL_SIM_COPY_D2H, SL_SIM_COPY_D2D };

/* The model of one op or copy on a profile. */
typedef struct sl_sim_timing {
    uint64_t launch_ns;    /* fixed part: on the device's launch path, shared by its streams */
    uint64_t work_ns;      /* time with the whole resource to itself */
    uint8_t resource;      /* enum sl_sim_resource that work_ns is spent on */
    bool memory_bound;     /* bytes, not flops, decided work_ns */
    uint64_t flops, bytes; /* what was charged (flops after the Winograd rule) */
    /* fraction of its resource it occupies alone, (0, 1] (header comment);
     * 1 for host-link copies, which own their resource */
    double occupancy;
    /* duration of one of its thread blocks (work_ns / its waves of blocks;
     * work_ns when one wave holds them all): how long a higher-priority
     * stream's op waits for the SMs this op's running blocks hold (block
     * schedulers do not preempt blocks). 0 for host-link copies. */
    uint64_t block_ns;
    /* blocks over the device's resident block slots, unclamped: occupancy
     * below 1, the number of waves its blocks run in above (partitions,
     * sl_sim_part_timing); 0 = unknown (taken from occupancy and block_ns) */
    double waves;
    /* enum sl_sim_prec the flops were charged at (SL_SIM_FP32 for copies) */
    uint8_t prec;
} sl_sim_timing;

/* The float dtypes (SL_DTS bits) a profile runs: f32 always, f16 and bf16
 * where it has a peak for them (sl_sim_profile.peak_flops). A GPU without
 * BF16 (P100, V100) has no bf16 arithmetic for cuBLAS or cuDNN to use, so
 * the sim device refuses bf16 there as the real one would, rather than
 * inventing a rate; the sim device's op_dtypes is this set. Never blocks. */
unsigned sl_sim_dtypes(const sl_sim_profile *p);

/* The precision op runs at on p when its float inputs are of dtype (enum
 * sl_dtype; i32 counts as f32) under the session's math (enum sl_math
 * bits), the rule the cost model charges flops by:
 * - matmul, matmul_acc, batch_matmul and the three convolutions are GEMMs
 *   on tensor cores (cuBLAS, cuDNN): bf16 at SL_SIM_BF16_TC, f16 at
 *   SL_SIM_FP16_TC; f32 at SL_SIM_TF32_TC when math has the op's TF32 bit
 *   (SL_MATH_MATMUL_TF32 for the matmuls, SL_MATH_CONV_TF32 for the
 *   convolutions) and p has TF32, else SL_SIM_FP32 (cuBLAS ignores the TF32
 *   math mode before Ampere);
 * - every other op computes in f32 on the CUDA cores whatever its dtype
 *   (half-precision element-wise kernels, PyTorch's among them, load,
 *   compute in f32 and store): SL_SIM_FP32; its half-precision gain is in
 *   its bytes.
 * Does not say whether p runs dtype at all (sl_sim_dtypes). Pure. */
unsigned sl_sim_op_prec(const sl_sim_profile *p, unsigned op, unsigned dtype, unsigned math);

/* Models one op with validated shapes (sl_op_infer accepted in/attrs and
 * produced out), its f32 matmuls and convolutions exact (math 0).
 * attrs NULL means all zero. Pure; never blocks.
 * Errors: SL_EINVAL (p, in or t NULL, or unknown op id), SL_EUNSUPPORTED (the
 * registry has no cost for this op, or a float dtype of its inputs or
 * outputs is not in sl_sim_dtypes(p)). */
int sl_sim_op_timing(const sl_sim_profile *p, unsigned op, const sl_op_attrs *attrs,
                     const sl_shape *in, const sl_shape *out, sl_sim_timing *t);

/* sl_sim_op_timing under the session's math (enum sl_math bits, as in
 * sl_op_call.math): what the real-time device charges a launched op.
 * Same preconditions and errors. */
int sl_sim_op_timing_math(const sl_sim_profile *p, unsigned op, const sl_op_attrs *attrs,
                          unsigned math, const sl_shape *in, const sl_shape *out, sl_sim_timing *t);

/* The occupancy of `blocks` thread blocks of which `per_sm` fit on one SM
 * at once: min(1, blocks / (p->sm_count * per_sm)); 1 when p has no SM
 * count. blocks 0 is taken as 1 (a launch runs at least one block). */
double sl_sim_occupancy(const sl_sim_profile *p, uint64_t blocks, unsigned per_sm);

/* launch + work of one op running alone: the formula in the header comment.
 * Same preconditions and errors as sl_sim_op_timing; *ns written on success. */
int sl_sim_op_time_ns(const sl_sim_profile *p, unsigned op, const sl_op_attrs *attrs,
                      const sl_shape *in, const sl_shape *out, uint64_t *ns);

/* Models a copy of `bytes` bytes (kind: enum sl_sim_copy_kind). Pure. */
void sl_sim_copy_timing(const sl_sim_profile *p, unsigned kind, uint64_t bytes, sl_sim_timing *t);

/* work_ns of charged flops and bytes at precision prec: max of the compute
 * and the memory time, rounded up to whole ns (0 when both are 0). Sets
 * *memory_bound when memory_bound is not NULL. peak[prec] must be > 0. */
uint64_t sl_sim_work_ns(const sl_sim_profile *p, unsigned prec, uint64_t flops, uint64_t bytes,
                        bool *memory_bound);

/* ---- processor sharing (virtual or real time) ----
 *
 * One resource shared by every job in it: while k jobs are active, each
 * progresses at 1/k of the resource's rate, so a job needing w ns alone takes
 * k*w while k stays constant. This is how a GPU's block scheduler treats
 * kernels from different streams that each fill the device: blocks of both
 * are dispatched as SMs free up, neither runs ahead, and the total throughput
 * is that of one kernel (no free speed-up from concurrency). Jobs can be
 * submitted with a future arrival time (an op's launch latency runs before
 * it reaches the SMs). Departure times are exact, whenever advance is called:
 * a late caller (a thread that overslept) never stretches anyone's job.
 *
 * Not thread-safe: the caller serialises access (the device's model lock). */
typedef struct sl_sim_ps_job {
    struct sl_sim_ps_job *next; /* private */
    uint64_t arrive_ns;         /* private: when it joins */
    uint64_t work_ns;           /* private: service it needs */
    double finish_v;            /* private: per-job service level at which it departs */
    uint64_t done_ns;           /* completion time, valid once done */
    bool done;
    void *user; /* caller's, untouched */
} sl_sim_ps_job;

typedef struct sl_sim_ps {
    sl_sim_ps_job *pending; /* submitted, arrival in the future, by arrive_ns */
    sl_sim_ps_job *active;
    unsigned n_active;
    double v;        /* service each active job received since the resource was idle, ns */
    uint64_t now_ns; /* the time the state describes; idle: the last departure */
} sl_sim_ps;

/* Callback of sl_sim_ps_advance for each job that completed. */
typedef void (*sl_sim_ps_done_fn)(void *arg, sl_sim_ps_job *job);

/* An idle resource at time start_ns. */
void sl_sim_ps_init(sl_sim_ps *ps, uint64_t start_ns);

/* Adds job, needing work_ns of the whole resource, arriving at arrive_ns
 * (an earlier time than the state's now is taken as now: the past cannot be
 * rewritten). work_ns 0 completes at arrival. job is owned by the caller and
 * must stay valid and untouched until it is done. Never blocks. */
void sl_sim_ps_submit(sl_sim_ps *ps, sl_sim_ps_job *job, uint64_t arrive_ns, uint64_t work_ns);

/* Advances the state to t_ns, processing arrivals and departures in time
 * order; each departing job gets done = true and its exact done_ns, then
 * done_fn(arg, job) if done_fn is not NULL (the job may be resubmitted from
 * there). Returns the number of jobs completed. A t_ns at or before the
 * state's time changes nothing. */
unsigned sl_sim_ps_advance(sl_sim_ps *ps, uint64_t t_ns, sl_sim_ps_done_fn done_fn, void *arg);

/* The time of the next arrival or departure if nothing else is submitted;
 * UINT64_MAX when the resource is idle with nothing pending. */
uint64_t sl_sim_ps_next_event_ns(const sl_sim_ps *ps);

/* Convenience for simulators and tests: completion times of n jobs that
 * arrive at arrive_ns[i] needing work_ns[i] on one resource that is idle
 * before the first arrival. Writes done_ns[i]. Errors: SL_EINVAL (a NULL
 * array), SL_ENOMEM. */
int sl_sim_ps_schedule(unsigned n, const uint64_t *arrive_ns, const uint64_t *work_ns,
                       uint64_t *done_ns);

/* ---- processor sharing with per-job rate caps (virtual time) ----
 *
 * sl_sim_ps for jobs that do not fill the device alone: a job with cap u in
 * (0, 1] uses at most the fraction u of the resource (an op's occupancy,
 * or a whole iteration's solo device utilisation, e.g. sum(work x
 * occupancy) / sum(launch + work) of its ops: launch gaps on its stream and
 * SMs its kernels cannot fill are left to others). Rates are water-filled:
 * with level L the solution of sum_i min(u_i, L) = min(1, sum_i u_i), job i
 * progresses at min(u_i, L). So a job never runs faster than alone, jobs
 * whose caps sum to at most 1 all run as if alone, and jobs that together
 * want more than the device share it fairly, each capped at its own u.
 * A job is given by its solo duration: alone it takes exactly solo_ns.
 *
 * With every cap 1 this computes what sl_sim_ps computes, operation for
 * operation (same active-list order, same floating-point expressions, same
 * departure order), so results are bit-identical to sl_sim_ps's. The
 * real-time sim device (stream.c) shares each resource this way, every op
 * capped at its occupancy.
 *
 * Stream priorities (sl_sim_psc_submit_prio), as CUDA's block scheduler
 * with stream priorities: when SMs free up it dispatches the blocks of the
 * highest-priority stream first. Jobs carry one of three classes
 * (priority > 0, 0, < 0); the highest class is water-filled first over the
 * whole device (each job up to its effective cap), the next one over what
 * that class leaves, and so on (a class whose jobs want more than its share
 * leaves nothing below it). Blocks are not preempted: a job arriving while
 * the SMs it needs (its cap) are not free and lower-class jobs run is
 * charged a wait of the longest block_ns among those running lower-class
 * jobs before it joins (each one's block_ns, or its solo time left when
 * less; a full block: the upper bound, the mean residual would be half). Not modelled: during that
 * wait it does not use the SMs that were free. With every job at priority 0 everything is exactly
 * as above, to the bit.
 *
 * Cost: O(active jobs) per arrival, departure and advance. Not thread-safe. */
typedef struct sl_sim_psc_job {
    struct sl_sim_psc_job *next; /* private */
    uint64_t arrive_ns;          /* private: when it joins */
    uint64_t solo_ns;            /* private: its duration alone */
    double cap;                  /* private: rate cap u */
    double launch;               /* private: launch share l in [0, 1), 0 = none */
    double rho;                  /* private: the launch server's bound on its speed, (0, 1] */
    double finish_v;             /* private, uncapped: service level at which it departs */
    double left;                 /* private, capped: solo ns left (it runs at its cap) */
    bool capped;                 /* private: runs at its cap (else at the level) */
    unsigned cls;                /* private: class, 0 = highest priority */
    uint64_t block_ns;           /* private: duration of one of its blocks */
    bool waited;                 /* private: the block wait was charged */
    uint64_t done_ns;            /* completion time, valid once done */
    bool done;
    void *user; /* caller's, untouched */
} sl_sim_psc_job;

#define SL_SIM_PSC_CLASSES 3

/* One priority class's share of the resource (private). */
typedef struct sl_sim_psc_class {
    unsigned n_active;
    unsigned n_uncapped; /* its active jobs at its level */
    double capped_sum;   /* sum of the caps of its capped jobs */
    double avail;        /* the share the classes above leave it */
    double v;            /* service each uncapped job received since the class was idle */
} sl_sim_psc_class;

typedef struct sl_sim_psc {
    sl_sim_psc_job *pending; /* arrival in the future, by arrive_ns */
    sl_sim_psc_job *active;  /* by effective cap (cap x rho), ascending */
    unsigned n_active;
    unsigned n_launching;                     /* active jobs with a launch share */
    sl_sim_psc_class cls[SL_SIM_PSC_CLASSES]; /* by priority, highest first */
    uint64_t block_waits;                     /* jobs charged a block wait */
    uint64_t block_wait_ns;                   /* and the waits' sum */
    uint64_t now_ns;
} sl_sim_psc;

typedef void (*sl_sim_psc_done_fn)(void *arg, sl_sim_psc_job *job);

/* An idle resource at time start_ns. */
void sl_sim_psc_init(sl_sim_psc *ps, uint64_t start_ns);

/* Adds job, taking solo_ns alone at rate cap, arriving at arrive_ns (earlier
 * than the state's time is taken as now). cap outside (0, 1] (or NaN) is
 * taken as 1. solo_ns 0 completes at arrival. job is the caller's and stays
 * valid and untouched until done. */
void sl_sim_psc_submit(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns, uint64_t solo_ns,
                       double cap);

/* The launch path. A job run as whole iterations whose launches keep the
 * launch path busy for the share l = sum(launch) / (its solo time) of its
 * solo time
 * also needs the device's launch path: one server per device (the host
 * driver and the GPU's front end, shared by every stream of salusd's one
 * context) that sustains one launch per launch_ns in all (kernels/sim
 * profiles.c). At speed r (fraction of its solo speed) the job occupies
 * r x l of it, so the active jobs must keep sum(r_i x l_i) <= 1. Launches
 * are shared by water-filling too: with M the solution of
 * sum min(l_i, M) = min(1, sum l_i), job i may run at most at
 * rho_i = min(1, M / l_i) of its solo speed (the fluid limit of one FIFO
 * launch queue fed by streams that each have one launch outstanding: round
 * robin, so equal launch throughput for every stream that wants more than
 * its share, all of it for one that wants less). The device then
 * water-fills on the effective caps u_i x rho_i, and a job at its
 * effective cap runs at rho_i of its solo speed. Two resources are
 * filled one after the other (launches first), not jointly: launch share
 * a device-bound job cannot use is not handed to the others, which errs
 * on the slow side for mixes (exact for identical jobs). launch 0 (every
 * job of sl_sim_psc_submit) leaves everything as above, to the bit.
 * launch outside [0, 1) (or NaN) is taken as 0. */
void sl_sim_psc_submit_ex(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns, uint64_t solo_ns,
                          double cap, double launch);

/* As sl_sim_psc_submit_ex, in the class of `priority` (> 0 above normal,
 * 0 normal, < 0 below: device.h's stream priorities), with block_ns the
 * duration of one of its blocks (0 = never makes a higher class wait). */
void sl_sim_psc_submit_prio(sl_sim_psc *ps, sl_sim_psc_job *job, uint64_t arrive_ns,
                            uint64_t solo_ns, double cap, double launch, int priority,
                            uint64_t block_ns);

/* The share of the resource in use now, in [0, 1]: 1 while some job runs
 * at a level below its cap, else the sum of the running caps. */
double sl_sim_psc_used(const sl_sim_psc *ps);

/* As sl_sim_ps_advance: arrivals and departures up to t_ns in time order,
 * done_fn (may resubmit) for each departure. Returns how many departed. */
unsigned sl_sim_psc_advance(sl_sim_psc *ps, uint64_t t_ns, sl_sim_psc_done_fn done_fn, void *arg);

/* The next arrival or departure if nothing else is submitted; UINT64_MAX
 * when idle with nothing pending. */
uint64_t sl_sim_psc_next_event_ns(const sl_sim_psc *ps);

/* Completion times of n jobs (arrive_ns[i], solo_ns[i], cap[i]) on one
 * resource idle before the first arrival. Errors: SL_EINVAL (a NULL array),
 * SL_ENOMEM. */
int sl_sim_psc_schedule(unsigned n, const uint64_t *arrive_ns, const uint64_t *solo_ns,
                        const double *cap, uint64_t *done_ns);

/* ---- compute partitions (virtual time) ----
 *
 * An op on a partition of s of the device's S SMs. Three effects, each from
 * how a GPU runs a kernel:
 *
 * 1. Wave quantisation. A kernel's blocks run in waves of (SMs x resident
 *    blocks per SM); its time is proportional to the number of waves, not
 *    to blocks / SMs (NVIDIA, "Matrix Multiplication Background User's
 *    Guide", section "Wave Quantization"; CUDA C++ Best Practices Guide,
 *    "Occupancy"). With W = waves x S the SM-waves it needs (waves being
 *    sl_sim_timing.waves, occupancy x S SMs for a kernel under one wave),
 *    its compute time on s SMs is compute_ns(S) x ceil(W/s) / ceil(W/S):
 *    a kernel with fewer blocks than the partition's slots runs exactly as
 *    on the whole device (more SMs would idle), and a big one slows by the
 *    waves it gains (132 -> 66 SMs: twice the waves, twice the time; 132 ->
 *    100: ceil(1.32) = 2 waves for what took one, the tail effect).
 * 2. Processor sharing inside a partition: the partition is one
 *    sl_sim_psc of its own (each op capped at min(1, W/s), its occupancy
 *    of the partition), as the whole device is without partitions: SMs of
 *    one green context are handed out by the same block scheduler.
 * 3. Device-memory bandwidth is not partitioned (green contexts split SMs
 *    only, CUDA Driver API "Green Contexts"; MPS clients likewise share
 *    DRAM bandwidth, the interference that Orion (Strati et al.,
 *    EuroSys'24) and LithOS (SOSP'25) schedule around): an op's memory
 *    time is memory_ns / bw_share, bw_share being the fraction of the
 *    bandwidth the other partitions' running ops leave it (the caller's
 *    estimate, sl_sim_part_bw_share).
 * Its time is then max(compute on s SMs, memory at bw_share), plus launch.
 * Not modelled: that a few SMs cannot issue enough loads to draw the
 * whole bandwidth (a small partition's memory-bound op is modelled as fast
 * as on the whole device, which favours small partitions), L2 sharing. */

/* The work of an op on sms SMs of sm_count: compute_ns and memory_ns its
 * compute and memory times on the whole device (sl_sim_work_ns with only
 * flops or only bytes), waves its unclamped block ratio (> 0), bw_share in
 * (0, 1] its share of the memory bandwidth. Writes, when not NULL, its
 * occupancy of the partition (min(1, W/sms)) and one block's duration on
 * it. sms 0 or above sm_count is taken as sm_count; bw_share outside
 * (0, 1] as 1. Pure. */
uint64_t sl_sim_part_work_ns(unsigned sm_count, uint64_t compute_ns, uint64_t memory_ns,
                             double waves, unsigned sms, double bw_share, double *occupancy,
                             uint64_t *block_ns);

/* whole (an op timed on the whole device by sl_sim_op_timing or
 * sl_sim_copy_timing) on a partition of sms SMs with bw_share of the
 * bandwidth: work_ns, occupancy and block_ns recomputed as above, the rest
 * copied. Host-link copies do not change. Errors: SL_EINVAL (a NULL
 * argument). */
int sl_sim_part_timing(const sl_sim_profile *p, const sl_sim_timing *whole, unsigned sms,
                       double bw_share, sl_sim_timing *out);

/* The bandwidth share an op may draw while others use `used` of it (the
 * sum over the other partitions' running ops of memory_ns / work_ns x
 * their rate): what they leave, but never below an even split with them
 * (floor 1 / (1 + others)), as DRAM serves concurrent streams of requests
 * about evenly. used <= 0 gives 1. */
double sl_sim_part_bw_share(double used, unsigned others);

/* ---- the real-time device ---- */

/* The sim backend's ops table: sl_dev_open("sim:PROFILE[:N]") opens it.
 * arg is the profile name; N in [0, SL_SIM_MAX_DEVICES). "PROFILE,host-launch"
 * makes each submission (op or copy) hold the calling thread until its
 * launch has gone through the device's launch path (stream.c), the host
 * cost of a GPU driver's launch call; without it submission returns at
 * once and only the device's timeline pays the launch. Memory is address
 * space only; d2h copies zero-fill their host destination. It runs every
 * op in the float dtypes of its profile (op_dtypes: sl_sim_dtypes). */
extern const sl_device_ops sl_sim_device_ops;
#define SL_SIM_MAX_DEVICES 8

/* The profile of an open sim device (NULL if dev is not a sim device). */
const sl_sim_profile *sl_sim_device_profile(const sl_device *dev);

/* For tests that must tell modeled times apart without trusting the host's
 * scheduling: the modeled completion time (sl_now_ns clock) of the last
 * work that ran on s. Call only after synchronize(s) returned and before
 * anything new is submitted to s. A late worker thread never moves it
 * (sl_sim_psc departure times are exact). */
uint64_t sl_sim_stream_modeled_ns(sl_stream *s);

/* Fault injection: enqueues on s a command that fails with `code` (an SL_E*
 * code other than SL_OK) when it executes, as a failing kernel would: it
 * becomes s's sticky error. Errors: SL_EINVAL (code out of range),
 * SL_ESHUTDOWN, SL_ENOMEM. Never blocks on device work. */
int sl_sim_inject_error(sl_stream *s, int code);

/* Fault injection on a whole device (salusd --fault-inject, tests): the next
 * n ops to execute, on any stream, fail with `code` instead of running, as a
 * failing kernel would (the error becomes that stream's sticky error). With
 * code SL_EEXHAUSTED this is a failed workspace allocation: a per-request
 * error. With SL_EDEVICERESET the device is lost (device.h): from the failing
 * op on, every op and copy on every stream fails with SL_EDEVICERESET until
 * reset(). n 0 disarms. Errors: SL_EINVAL (not a sim device, code out of
 * range). Never blocks. */
int sl_sim_fail_next_ops(sl_device *dev, unsigned n, int code);

/* Makes the device `factor` times slower: every op and copy that starts from
 * now on takes factor times its modeled time (1 = normal). Errors: SL_EINVAL
 * (not a sim device, factor 0 or above 1000000). Never blocks. */
int sl_sim_set_slowdown(sl_device *dev, unsigned factor);

/* Makes the next reset() fail with SL_ENODEV, as a CUDA context that does not
 * come back (CUDA documents its sticky errors as unrecoverable in-process).
 * Errors: SL_EINVAL (not a sim device). Never blocks. */
int sl_sim_break_next_reset(sl_device *dev);

#endif
