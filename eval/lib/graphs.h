/* Training iterations of published CNNs as op lists, timed op by op with
 * the sim backend's cost model on any device profile: the computed side of
 * the simulator's job profiles (workload.h) and the sim model's validation
 * (bench/sim_models).
 *
 * An iteration is fp32 forward, backward and the SGD update of every
 * parameter, built from the op registry (every op's shapes validated by
 * sl_op_infer) and run on one stream, ops back to back, which is how
 * TensorFlow 1.x runs these models on one GPU. Not modeled (each a few % at
 * most): dropout in VGG's classifier, L2 weight decay, the framework's own
 * per-op overhead beyond launch_ns, the input pipeline. */
#ifndef SL_EVAL_GRAPHS_H
#define SL_EVAL_GRAPHS_H

#include "sim/profiles.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What an op is, for the per-kind breakdown. */
enum sl_eval_op_kind {
    SL_EVAL_CONV_FWD,
    SL_EVAL_CONV_BWD,
    SL_EVAL_BN,
    SL_EVAL_ELEMWISE,
    SL_EVAL_POOL,
    SL_EVAL_FC,
    SL_EVAL_LOSS,
    SL_EVAL_SGD,
    SL_EVAL_KIND_COUNT
};

/* Static name of a kind ("conv_fwd", ...). */
const char *sl_eval_op_kind_name(unsigned kind);

/* How an iteration's ops reach the device, for its solo time:
 * - SERIAL (0, false): each op launched after the op before it completed;
 * - OPS (1, true): op by op, every launch issued without waiting (one host
 *   thread submitting a whole iteration), each op's work when its launch
 *   has ended and the op before it is done;
 * - GRAPH: one replay of the iteration captured as a CUDA Graph: the
 *   profile's graph_launch_ns once, then graph_node_ns before each op's
 *   work (kernels/sim/profiles.h). */
enum sl_eval_launch { SL_EVAL_LAUNCH_SERIAL = 0, SL_EVAL_LAUNCH_OPS = 1, SL_EVAL_LAUNCH_GRAPH = 2 };

/* Static name of a launch mode ("serial", "ops", "graph"). */
const char *sl_eval_launch_name(enum sl_eval_launch launch);

/* One op of the iteration, in issue order. */
typedef struct sl_eval_op_time {
    uint32_t op;        /* op registry id */
    uint8_t kind;       /* enum sl_eval_op_kind */
    uint64_t ns;        /* launch + work, running alone */
    uint64_t launch_ns; /* of ns: on the device's launch path (kernels/sim) */
    uint32_t split_max; /* the most parts it splits into (ops.h sl_op_split_max) */
    double occupancy;   /* share of the SMs it keeps busy alone (kernels/sim), (0, 1] */
    uint64_t block_ns;  /* one of its thread blocks (kernels/sim sl_sim_timing) */
    /* its work split into compute and memory time on the whole device,
     * and its waves (kernels/sim sl_sim_timing.waves): for partitions */
    uint64_t compute_ns, memory_ns;
    double waves;
} sl_eval_op_time;

typedef struct sl_eval_timeline {
    sl_eval_op_time *ops; /* n_ops entries, owned (sl_eval_timeline_fini) */
    size_t n_ops, cap_ops;
    uint64_t iteration_ns; /* sum of ops[].ns */
    uint64_t kind_ns[SL_EVAL_KIND_COUNT];
    uint64_t mem_bound_ns; /* time of ops whose bytes, not flops, decided */
    double flops;          /* charged (after the Winograd rule, kernels/sim/sim.h) */
    uint64_t params;       /* parameter elements (fp32) */
    /* sum of the ops' work_ns (kernels/sim: time on the shared device,
     * without the launch, which goes through the launch path) */
    uint64_t work_ns;
    /* sum of work_ns x occupancy: SM-time the ops occupy */
    double occupied_ns;
    /* the profile's graph replay costs (profiles.h), for SL_EVAL_LAUNCH_GRAPH */
    uint64_t graph_launch_ns, graph_node_ns;
} sl_eval_timeline;

/* Whether model names a network this module builds: "vgg11", "vgg16",
 * "vgg19", "resnet50", "resnet101", "resnet152" (v1, tf_cnn_benchmarks'),
 * "resnet50_v1.5" (NVIDIA's), and the Salus artifact's small networks
 * "vae" (MNIST MLP VAE) and "superres" (ESPCN-style 4x super-resolution,
 * 32x32 inputs), both trained with Adam. */
bool sl_eval_graph_known(const char *model);

/* Builds and times one training iteration of model at batch on profile p.
 * On success *out holds the timeline (sl_eval_timeline_fini frees it).
 * Errors: SL_EINVAL (unknown model, batch < 1, a shape the registry
 * refuses: a bug here), SL_EUNSUPPORTED (the profile cannot time an op),
 * SL_ENOMEM. On error *out is left empty. Never blocks. */
int sl_eval_timeline_build(const char *model, int64_t batch, const sl_sim_profile *p,
                           sl_eval_timeline *out);

/* As sl_eval_timeline_build; with inference true, one forward pass only
 * (no gradient, no update): a request served at batch `batch`. */
int sl_eval_timeline_build_ex(const char *model, int64_t batch, const sl_sim_profile *p,
                              bool inference, sl_eval_timeline *out);

/* The solo device utilisation of the timeline's iteration with its
 * launches serial: the share of the device it occupies on average running
 * alone,
 *     u = sum(work_i x occupancy_i) / sum(launch_i + work_i)
 * (occupied_ns over iteration_ns): launches leave the SMs to others (they
 * use the launch path, sl_eval_timeline_launch_share), and while an op's work
 * runs it leaves 1 - occupancy_i of the SMs. 1 for an empty timeline.
 * sl_eval_timeline_utilisation_ex gives it over the pipelined time too:
 * the cap of evevsim.h's utilisation for a job run as whole iterations as
 * salusd submits them. */
double sl_eval_timeline_utilisation(const sl_eval_timeline *t);

/* The share of the timeline's serial solo iteration time spent launching,
 *     l = sum(launch_i) / sum(launch_i + work_i)
 * (pipelined, the share is sum(launch_i) over sl_eval_timeline_pipelined_ns)
 * in [0, 1); 0 for an empty timeline. What a job run as whole iterations
 * asks of the GPU's shared launch path (evsim.h launch_share). */
double sl_eval_timeline_launch_share(const sl_eval_timeline *t);

/* The iteration alone when its ops are launched asynchronously, as
 * salusd's cuda backend submits a whole iteration: one host thread launches
 * op after op without waiting (launch i ends at the sum of launches 0..i),
 * and op i's work starts when its launch has ended and op i - 1's work is
 * done. At least max(sum(launch_i), sum(work_i)), at most iteration_ns
 * (the serial launch-then-work charge of kernels/sim and the op-by-op
 * path). 0 for an empty timeline. */
uint64_t sl_eval_timeline_pipelined_ns(const sl_eval_timeline *t);

/* The iteration alone replayed as one CUDA Graph: graph_launch_ns, then
 * graph_node_ns + work_i per op, one after the other. 0 for an empty
 * timeline. */
uint64_t sl_eval_timeline_graph_ns(const sl_eval_timeline *t);

/* Compute partitions: the device's granularity for a partition (CUDA
 * Driver API, "Green Contexts", cuda.h): at least 2 SMs in steps of 2 on
 * compute capability 6.x and 7.x (P100, V100), 4 in steps of 2 on 8.x
 * (A100), 8 in steps of 8 on 9.0 (H100, H200). */
void sl_eval_part_granularity(const sl_sim_profile *p, unsigned *min_sms, unsigned *align);

/* The timeline's iteration alone on sms of p's SMs (launches plus works,
 * kernels/sim's partition model: sl_sim_part_work_ns, the whole bandwidth). */
uint64_t sl_eval_timeline_ns_on(const sl_eval_timeline *t, const sl_sim_profile *p, unsigned sms);
/* As sl_eval_timeline_ns_on, its ops launched as `launch` says. */
uint64_t sl_eval_timeline_ns_on_ex(const sl_eval_timeline *t, const sl_sim_profile *p, unsigned sms,
                                   enum sl_eval_launch launch);
/* The iteration alone on the whole device, launched as `launch` says
 * (serial: iteration_ns), and its utilisation (occupied_ns over it). */
uint64_t sl_eval_timeline_solo_ns(const sl_eval_timeline *t, enum sl_eval_launch launch);
double sl_eval_timeline_utilisation_ex(const sl_eval_timeline *t, enum sl_eval_launch launch);

/* The need an online lane would declare for the timeline: the fewest SMs
 * at the granularity (min_sms, then steps of align) on which its iteration
 * runs within slack (0.02 = 2 %) of its time on the whole device; p's
 * sm_count if none does. What a client that profiled its model once on
 * the device would declare (salusd --partitions auto:N). */
unsigned sl_eval_timeline_need_sms(const sl_eval_timeline *t, const sl_sim_profile *p,
                                   unsigned min_sms, unsigned align, double slack);
/* As sl_eval_timeline_need_sms, on the times of `launch`. */
unsigned sl_eval_timeline_need_sms_ex(const sl_eval_timeline *t, const sl_sim_profile *p,
                                      unsigned min_sms, unsigned align, double slack,
                                      enum sl_eval_launch launch);

/* Frees the timeline's ops; safe on a zeroed timeline. */
void sl_eval_timeline_fini(sl_eval_timeline *t);

#endif
