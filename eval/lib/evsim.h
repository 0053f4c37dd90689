/* The discrete-event simulator: salus's real scheduler (sched/) and memory
 * manager (memory/) on a virtual clock, on many simulated GPUs, with the sim
 * backend's cost model (kernels/sim) for device time.
 *
 * What is real and what is modeled. Every decision is taken by the libraries
 * salusd links, called in the order salusd calls them:
 * - admission and lane assignment: sl_mem_admit_ex (waiting sessions come
 *   back through sl_mem_next_admitted after every call that may free
 *   memory, as in server/session.c);
 * - which iteration runs next on a lane: sl_sched_next, at every iteration
 *   boundary of the lane, handed on before any bookkeeping, as in
 *   server/executor.c (kick_lane, sl_exec_iteration_done);
 * - device time charged: the wall time of the iteration (sl_sched_complete),
 *   as the executor charges it;
 * - lanes busy and idle: sl_mem_lane_busy / sl_mem_lane_idle exactly where
 *   the executor marks them (a lane handed straight to the next pick is
 *   never marked idle).
 * What is modeled: the device is one processor-sharing resource per GPU
 * with per-job rate caps (kernels/sim sl_sim_psc: k iterations that each
 * fill the device progress at 1/k of the rate, no free speed-up from
 * concurrency; a job whose solo utilisation u < 1 leaves 1 - u to others,
 * water-filled); an iteration's work is its profile's solo iteration time,
 * or, for a job with an op timeline, each op's launch (through the GPU's
 * one launch path, FIFO over all its streams) issued from its lane's stream
 * followed by its work on the shared device (capped at the op's occupancy:
 * the launch gaps that make a whole iteration under-use the device are
 * then explicit, and a small kernel leaves SMs to others); a client
 * turns a reply into its next request after client_gap_ns. The lane
 * hand-off (sched/lanes.h) and the step dispatcher with the gap filler
 * (sched/steps.h, sched/gaps.h) are the libraries server/executor.c calls;
 * what executor logic is still duplicated here is listed in eval/README.md.
 *
 * One GPU = one salusd: its own scheduler and memory manager, configured as
 * salusd configures them for a device of that capacity (server/server.c
 * memory_init). Jobs reach a GPU through a cluster placement policy
 * (enum sl_eval_placement), a library policy of the simulator: salus itself
 * has none.
 *
 * Determinism: the simulator has no source of randomness and no clock of its
 * own; events at the same virtual time run in the order they were
 * scheduled. The same config and jobs give bit-identical results.
 *
 * Not thread-safe; one simulation runs on the calling thread and allocates
 * what it needs (O(jobs + GPUs)); nothing survives the call. */
#ifndef SL_EVAL_EVSIM_H
#define SL_EVAL_EVSIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One op of an iteration's timeline (op-level execution): launch_ns on the
 * GPU's launch path (one FIFO server per GPU shared by every stream, unless
 * sl_eval_config.private_launches), then work_ns on the device (shared),
 * kernels/sim's model of an op, capped at its occupancy: the share of the
 * SMs it keeps busy alone (kernels/sim/sim.h), what it leaves to others'
 * ops. */
typedef struct sl_eval_op {
    uint64_t launch_ns;
    uint64_t work_ns;
    uint32_t split_max; /* the most parts it splits into (ops.h sl_op_split_max); 0 = 1 */
    double occupancy;   /* (0, 1]; 0 = 1 (fills the device) */
    uint64_t block_ns;  /* one of its thread blocks (kernels/sim); 0 = unknown: never waited for */
} sl_eval_op;

/* What compute partitions (sl_eval_config.part_sms) need of an op beyond
 * sl_eval_op: its work_ns split into compute and memory time on the whole
 * device (the larger is work_ns; both 0: all compute) and its waves
 * (kernels/sim sl_sim_timing.waves; 0 = its occupancy). */
typedef struct sl_eval_op_shape {
    uint64_t compute_ns, memory_ns;
    double waves;
} sl_eval_op_shape;

/* One job of a trace: a training session that runs `iterations` iterations
 * back to back (each request sent when the previous reply arrived), or an
 * inference session whose iterations are requests arriving on their own
 * schedule (request_ns). */
typedef struct sl_eval_job_spec {
    uint64_t id;               /* unique, nonzero; ties in the scheduler break by it */
    uint64_t arrival_ns;       /* when the session opens (virtual time) */
    uint64_t iterations;       /* > 0 */
    uint64_t iteration_ns;     /* device time of one iteration running alone, > 0 */
    uint64_t persistent_bytes; /* declared P (weights, optimizer state) */
    uint64_t ephemeral_bytes;  /* declared E (planned ephemeral peak), 0 = salusd's default */
    int priority;              /* as the session hint; 0 = normal */
    double weight;             /* fair-share weight; 0 = 1 */
    /* Declares the job's length as the session hints do: expected
     * iterations and expected total device time (iterations x
     * iteration_ns), what srtf ranks by on the device and in the admission
     * queue. Without it srtf sees an unknown length. */
    bool declare_length;
    int workload; /* caller's tag (an index into its workload table), copied out */
    /* Solo device utilisation in (0, 1]; 0 = 1. The fraction of the device
     * an iteration occupies running alone (for an op timeline: sum of
     * work x occupancy over its solo time, pipelined or serial, graphs.h
     * sl_eval_timeline_utilisation_ex). Iterations of several jobs
     * share the device by water-filling (kernels/sim sl_sim_psc): none runs
     * faster than alone, and jobs whose utilisations sum to at most 1 run
     * side by side at full speed. Only for jobs without a timeline (ops
     * NULL): with one, the launches are simulated and each op's work
     * runs at its own occupancy (sl_eval_op), so the under-use this
     * number summarises is already there. */
    double utilisation;
    /* Launch share in [0, 1); 0 = none. The share of an iteration's solo
     * time the launch path is busy with its launches (sum of launches over
     * the solo time, pipelined or serial: graphs.h),
     * for jobs without a timeline: the GPU's launch path is shared by all
     * its jobs (kernels/sim sl_sim_psc_submit_ex), so packed launch-bound
     * jobs cannot together launch faster than one launch per launch_ns.
     * Ignored with a timeline (its launches are simulated) and under
     * private_launches. */
    double launch_share;
    /* Op-level execution: the iteration's ops in issue order (n_ops > 0),
     * borrowed for the run. NULL: the iteration is one op of iteration_ns
     * with no launch cost (at the utilisation above). With a timeline every
     * iteration goes op by op on its lane's stream (slower to simulate);
     * iteration_ns stays what the job declares and what solo_ns counts
     * (normally the ops alone: pipelined, or their sum under serial
     * launches). */
    const sl_eval_op *ops;
    uint32_t n_ops;
    /* NULL, or n_ops entries beside ops (borrowed likewise): each op's
     * shape for compute partitions; without them every op is taken as all
     * compute at its occupancy. */
    const sl_eval_op_shape *op_shapes;
    /* Inference: NULL for training (back to back). Otherwise `iterations`
     * absolute virtual times, one per request: the client issues request i
     * at request_ns[i], or when the reply to request i - 1 has reached it
     * (plus client_gap_ns) if that is later: one request in flight per
     * session, as a salus session runs one iteration at a time. Latency of
     * request i = its iteration's completion - request_ns[i]: client-side
     * waiting, queueing in salusd and device time (a request meant before
     * the session opens waits for it, and that counts). The results carry
     * each job's latency figures, the summary the pooled ones; on_done
     * sees every request. The caller owns the array; it must stay valid
     * during sl_eval_run. */
    const uint64_t *request_ns;
} sl_eval_job_spec;

/* Cluster placement: which GPU's salusd a new job opens its session on. */
enum sl_eval_placement {
    /* the GPU holding the fewest unfinished jobs (admitted or waiting),
     * lowest index on ties: spreads load, ignores memory */
    SL_EVAL_PLACE_LEAST_JOBS = 0,
    /* the lowest-index GPU that admits the job now without waiting, else
     * least-jobs: packs GPUs (a bin-packing first fit on memory) */
    SL_EVAL_PLACE_FIRST_FIT,
};

typedef struct sl_eval_config {
    const char *policy; /* a sched/ policy name: "fifo", "srtf", "pack", "fair", ... */
    bool strict;        /* salusd --strict: the paper's non-work-conserving variant */
    unsigned n_gpus;    /* >= 1 */
    /* Device memory of one GPU in bytes (a kernels/sim profile's capacity).
     * salusd manages capacity - capacity/20 of it (server/server.c). */
    uint64_t gpu_bytes;
    /* salusd's memory flags, 0 = its default: --framework-per-lane (the sim
     * device's 64 MiB workspace hint, capped at 1/16), --spread-limit (half
     * the managed memory; spread_set with 0 = always share a lane). */
    uint64_t framework_per_lane;
    uint64_t spread_limit;
    bool spread_set;
    enum sl_eval_placement placement;
    /* From a reply reaching the client to its next request reaching
     * salusd. 0 = at once, in the same event. */
    uint64_t client_gap_ns;
    /* Checks the memory manager's invariants (sl_mem_check) after every
     * admission and release, and that the held memory never exceeds the
     * capacity after every event that changes it: for tests (O(n log n)
     * per check). */
    bool check_memory;
    /* Called when an iteration starts on a lane (NULL = none): gpu, the
     * lane id and its never-reused serial, the job's id and how many of its
     * iterations started before this one. For tests and traces. */
    void (*on_start)(void *arg, unsigned gpu, uint32_t lane, uint64_t lane_serial, uint64_t job_id,
                     uint64_t iteration, uint64_t now_ns);
    void *arg;
    /* Cost of a switch: when a lane starts an iteration of a job other than
     * the one whose iteration it ran last, the iteration's first op (the
     * whole iteration without a timeline, its first step when it goes
     * through the step dispatcher) reaches the device switch_cost_ns +
     * switch_ns_per_byte * bytes later, where bytes is the incoming job's
     * persistent bytes plus the outgoing job's if that job is still
     * running (its state is saved; a finished job's is not). The lane is
     * held meanwhile; the device is not (copies and set-up run beside the
     * SMs). The gap filler is not told: it predicts a step from its work
     * alone, as salusd's does. 0 and 0 = salusd's resident state: free
     * switches. */
    uint64_t switch_cost_ns;
    double switch_ns_per_byte;
    /* Op-level execution beside high-priority jobs (sched/steps.h), as
     * salusd's executor: the gap filler's configuration (NULL = salusd's
     * for a GPU device, sl_gaps_config_default), the part length for split
     * ops (0 = salusd's default), and salusd's ablations --no-gap-fill and
     * --no-stepwise. */
    const struct sl_gaps_config *gaps;
    uint64_t op_part_ns;
    bool no_gap_fill;
    bool no_stepwise;
    /* salusd --no-stream-classes: every lane's stream at normal priority.
     * false (salusd's default): as server/executor.c, high-priority jobs'
     * ops run in the above-normal class, the others' below normal while
     * high-priority jobs exist (kernels/sim sl_sim_psc's classes). */
    bool no_stream_classes;
    /* Measures the host's wall time spent in the lane hand-off and the
     * step dispatcher (the sched/ decisions) into the summary. */
    bool measure_decisions;
    /* Called when an iteration completes (NULL = none): the job, how many
     * of its iterations completed before it, when its request was sent
     * (for an inference job: request_ns[iteration], when it was meant to
     * be) and now. For traces and for counts the results do not hold
     * (e.g. iterations inside a window); an inference job's latency
     * figures are in its result. */
    void (*on_done)(void *arg, unsigned gpu, uint64_t job_id, uint64_t iteration,
                    uint64_t request_ns, uint64_t now_ns);
    /* A horizon: 0 = run until every job completed or was refused; else
     * the run stops at this virtual time, for measurements over a window
     * (e.g. a day of an online service beside training that would go on):
     * jobs not finished by then are reported as they stand (completed
     * false, the iterations and requests completed so far), and device
     * busy and occupied time count up to it. */
    uint64_t until_ns;
    /* Launches without a shared launch path, to show what it costs:
     * every op's launch on its own stream, never waiting for another
     * stream's, and launch_share ignored. false (the default): one launch
     * server per GPU, FIFO over all its streams (op by op), water-filled
     * over jobs' launch shares (whole iterations). */
    bool private_launches;
    /* A whole iteration's launches as one host thread issues them
     * (salusd's executor submits every op of a whole iteration at once,
     * server/executor.c launch()): all reserved on the launch path when
     * it starts, back to back, each op's work starting when its launch
     * has ended and the op before it is done, as kernels/sim's streams
     * time an iteration submitted whole. true in sl_eval_config_default;
     * false (an ablation: --serial-launch): each op launched when the one
     * before it completed. Stepwise ops, which salusd issues one at a
     * time, launch after the op before them either way. */
    bool pipelined_launches;
    /* Graph launches, salusd's on a device whose backend replays captured
     * CUDA Graphs: every iteration of a job with a timeline is one replay,
     * graph_launch_ns on the launch path (the GPU's, FIFO, unless
     * private_launches) when it starts, then each op's work graph_node_ns
     * after the op before it is done (its stream's own, the shared path is
     * not used; ops' launch_ns is ignored). Stepwise low-priority work
     * replays its segments (sched/steps.h), one replay per step. false
     * (the default here): op by op as pipelined_launches says. Whole
     * iterations without a timeline are unaffected (their launch_share
     * says what they ask of the path). */
    bool graph_launches;
    uint64_t graph_launch_ns, graph_node_ns;
    /* Low-priority steps as salusd's (sched/steps.h): segments of at most
     * segment_ns of predicted work (salusd --lp-segment-us; 0 =
     * SL_STEPS_SEGMENT_NS, its default; 1 = one op per step), one per lp
     * lane in flight while no hp work is pending, each into a predicted
     * gap with gap filling; lp_serial (salusd --lp-serial): one step
     * device-wide. A segment's ops run back to back: with graph launches
     * one replay, else each op launched as the one before it ends. */
    uint64_t segment_ns;
    bool lp_serial;
    /* Compute partitions (pdev.h): part_sms the
     * GPU's SMs (its profile's sm_count), 0 = no partitions. With them
     * high-priority jobs' ops run on an online partition of part_online
     * SMs and every other op on the rest, each partition sharing its SMs
     * among its ops (stream classes inside it), ops timed on their
     * partition's SMs (wave quantisation) and the memory bandwidth shared.
     * part_plan non-NULL: the online partition is sized by
     * sched/partition.h from part_online (the online lane's declared need;
     * 0 with an objective in part_plan: searched for at it, each job's
     * ops a kind) and its measured load, at its iterations' boundaries,
     * as salusd sizes it. Partitions plus
     * gap filling: part_spill_block_ns > 0 lets a low-priority op run on
     * the idle online partition, below the high class, when one of its
     * blocks there takes at most that (what a request arriving meanwhile
     * waits); 0 = never. */
    unsigned part_sms;
    unsigned part_online;
    const struct sl_part_plan_config *part_plan;
    uint64_t part_spill_block_ns;
} sl_eval_config;

/* What happened to one job. Times are virtual ns. */
typedef struct sl_eval_job_result {
    uint64_t id;
    int workload;
    unsigned gpu;
    bool completed;       /* ran all its iterations */
    bool refused;         /* refused at admission: can never fit (QUOTA) */
    uint64_t arrival_ns;  /* its spec's */
    uint64_t admitted_ns; /* session admitted (memory) */
    uint64_t start_ns;    /* first iteration started */
    uint64_t finish_ns;   /* last iteration completed */
    uint64_t iterations;  /* completed */
    uint64_t attained_ns; /* device time charged by the scheduler */
    uint64_t solo_ns;     /* iterations * iteration_ns: its length running alone */
    /* Inference jobs (request_ns set), over their completed requests; 0 for
     * training jobs. Percentiles are nearest-rank. */
    double lat_mean_ns;
    uint64_t lat_p50_ns, lat_p99_ns;
    uint64_t switch_ns; /* total switch cost charged to its iterations */
} sl_eval_job_result;

typedef struct sl_eval_summary {
    size_t n_jobs, completed, refused;
    uint64_t makespan_ns;    /* last completion - first arrival */
    double avg_queue_ns;     /* mean over completed jobs of start - arrival */
    double avg_jct_ns;       /* mean of finish - arrival */
    uint64_t p95_jct_ns;     /* nearest-rank 95th percentile */
    uint64_t median_jct_ns;  /* nearest-rank 50th percentile */
    uint64_t events;         /* events processed */
    uint64_t iterations;     /* iterations completed */
    uint64_t lane_switches;  /* sum over jobs of times it took a lane from another job */
    uint64_t max_held_bytes; /* most memory held on one GPU at once (persistent reserved +
                              * lanes + framework) */
    uint64_t capacity_bytes; /* what salusd manages on one GPU */
    uint64_t gpu_busy_ns;    /* summed over GPUs: time with an iteration on the device */
    /* summed over GPUs: the integral of the share of the device in use,
     * min(1, sum of the running ops' caps) (an op's occupancy, a whole
     * iteration's utilisation); gpu_busy_ns counts the same time at 1
     * whenever anything runs (nvidia-smi's "GPU utilisation") */
    double gpu_occupied_ns;
    uint32_t max_admitted;      /* most sessions admitted on one GPU at once */
    uint32_t max_lanes;         /* most lanes on one GPU at once */
    uint64_t memory_violations; /* held > capacity, or sl_mem_check failed (check_memory) */
    /* Every completed request of every inference job, pooled (nearest rank). */
    uint64_t requests;
    double lat_mean_ns;
    uint64_t lat_p50_ns, lat_p99_ns;
    uint64_t switch_ns; /* switch cost charged, summed over jobs */
    /* op-level execution beside high-priority jobs (sched/steps.h) */
    uint64_t lp_steps;         /* low-priority steps issued */
    uint64_t ops_split;        /* ops issued in more than one part */
    uint32_t lp_in_flight_max; /* most low-priority steps on one GPU at once */
    uint64_t decisions;        /* hand-off and dispatch calls timed (measure_decisions) */
    uint64_t decision_wall_ns; /* their host wall time */
    /* compute partitions (part_sms) */
    uint64_t part_spills;  /* low-priority ops run on the idle online partition */
    uint64_t part_resizes; /* online partition resizes (part_plan) */
} sl_eval_summary;

/* Runs the jobs on the configured cluster until every job completed or was
 * refused. jobs need not be sorted by arrival. results (n entries, may be
 * NULL) gets one entry per job, in the order of jobs. Jobs of priority > 0
 * under a policy with SL_POLICY_STEPWISE make the others' iterations go op
 * by op, into their gaps with SL_POLICY_GAP_FILL, as in salusd. Errors:
 * SL_EINVAL (an unknown policy, n_gpus 0, gpu_bytes too small for salusd's
 * layout, a job with id 0, a duplicate id, 0 iterations or 0 iteration_ns,
 * ops with n_ops 0, a utilisation outside [0, 1], a negative
 * switch_ns_per_byte, a gap configuration sl_gaps_init refuses), SL_ENOMEM,
 * SL_EINTERNAL (a library broke its contract: a bug). On error *summary and
 * results are unspecified. Never blocks; runs as fast as the host allows. */
int sl_eval_run(const sl_eval_config *cfg, const sl_eval_job_spec *jobs, size_t n,
                sl_eval_job_result *results, sl_eval_summary *summary);

/* The config salusd would run with on a cluster of n_gpus GPUs of gpu_bytes
 * each, under the named policy: every other field zero (salusd's defaults),
 * least-jobs placement, client gap 124 us (the measured one-op round trip
 * of a local client, README bench rtt_op). */
sl_eval_config sl_eval_config_default(const char *policy, bool strict, unsigned n_gpus,
                                      uint64_t gpu_bytes);

/* The memory manager salusd creates on one GPU of cfg (capacity less 5 %,
 * framework per lane, default ephemeral, spread limit: exactly what
 * sl_eval_run gives each GPU), for cluster-level simulators that place jobs
 * themselves and take salusd's admission decision per GPU. Only
 * cfg->gpu_bytes, framework_per_lane, spread_limit and spread_set are read.
 * Errors: SL_EINVAL (cfg or out NULL, gpu_bytes below 64 MiB), those of
 * sl_mem_mgr_create. On success *out is the caller's (sl_mem_mgr_destroy). */
struct sl_mem_mgr;
int sl_eval_gpu_memory(const sl_eval_config *cfg, struct sl_mem_mgr **out);

#endif
