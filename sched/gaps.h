/* Op-level gap filling (FIKIT): the decision logic that lets low-priority
 * (lp) ops run in the idle gaps of high-priority (hp) jobs without making an
 * hp iteration wait for more than one lp op, and with a stated bound on the
 * delay they add to hp iterations on average.
 *
 * Model. An hp job alternates between busy (it has iterations queued or
 * running: "pending") and idle. Its idle gap is the time from the completion
 * of one of its iterations that leaves it with nothing pending to the
 * arrival of its next iteration; the caller reports both events. Each hp job
 * records its last SL_GAPS_HISTORY gaps (the empirical distribution of G)
 * and an EWMA of its service time S per iteration (a busy period's length
 * over the iterations it completed: the hp latency without queueing).
 * Each lp op's duration is predicted by an EWMA per (job, op index), falling
 * back to the job's EWMA over all its ops, then to a configured default.
 *
 * Decision, taken by the executor between lp ops (sl_gaps_decide), for an
 * op predicted to take L:
 *  - any hp job pending -> wait. The executor keeps at most one lp op in
 *    flight; since nothing new is issued while hp work is pending, an hp
 *    iteration waits for at most the one lp op already running.
 *  - otherwise, for every idle hp job with recorded gaps, e = now - idle
 *    since, n = recorded gaps longer than e, k = those of them that ended
 *    within (e, e + L + h]: the empirical probability that the job's next
 *    iteration arrives while the op runs, given the gap has lasted e, is
 *    k / n. The op may go when
 *        k / n <= rho,  rho = fit_margin * S / m   (m: mean recorded gap).
 *    Why: an arrival during an op waits at most L, so the op adds at most
 *    rho * L in expectation; the ops issued into one gap start before it
 *    ends and run one after another, so they total at most m + L_max in
 *    expectation, and the expected delay added to the iteration that ends
 *    the gap is at most rho * (m + L_max) = fit_margin * S * (1 + L_max/m):
 *    fit_margin is the expected slow-down of hp iterations from lp ops, as
 *    a share of their latency alone, whatever the gaps' distribution (as
 *    far as the recorded gaps represent it). Regular gaps give k = 0 until
 *    the op would reach the shortest recorded gap, memoryless ones k / n
 *    ~ L / m at every e, so ops of up to about fit_margin * S go at once.
 *    fit_margin 0: only ops no recorded gap would have cut short.
 *    Limit: the promise assumes k / n estimates the risk. When L / m is
 *    well under 1 / n (memoryless gaps, short ops), most windows hold no
 *    recorded gap end and k = 0 understates a risk of ~L / m, and the rule
 *    issues into exactly those windows: the added delay then approaches
 *    that of filling every gap (one op's mean residual), whatever the
 *    margin. A margin above that cost is kept; one below it is not.
 *    n = 0 (idle longer than every recorded gap): past overdue_factor
 *    times the longest recorded gap the job no longer constrains (it
 *    finished, or its client is busy elsewhere); before, wait.
 *    An hp job with no recorded gap yet does not constrain: lp work is not
 *    held back on a guess, and the one-op bound still holds.
 *    With a host margin h (cfg.host_ns): an hp job that went idle less than
 *    h ago makes lp wait (its reply is still on its way out), and the
 *    window above is widened by h (the next request's way in).
 *  - issue when every hp job allows it.
 * The decision only changes when e passes a recorded gap, the host margin
 * or the overdue point: sl_gaps_recheck_at says when.
 *
 * Pure: no I/O, no threads, no clock (now is passed in), no allocation at
 * all (every structure is embedded by the caller). Not thread-safe: the
 * caller serialises calls, under the same lock as the scheduler. */
#ifndef SL_SCHED_GAPS_H
#define SL_SCHED_GAPS_H

#include <stdbool.h>
#include <stdint.h>

/* Gaps recorded per hp job: enough that a risk rho of a few percent is
 * resolved (1/128 < 1 %) and the record follows a change of load within a
 * few seconds of requests; 2 KiB per hp job. */
#define SL_GAPS_HISTORY 128u

typedef struct sl_gaps_config {
    /* gap_alpha, gap_beta, dev_k: the summary predictor m - k*d of
     * sl_gaps_hp_predicted_gap (an EWMA of the gaps and of their absolute
     * deviation, RFC 6298); a diagnostic, the decision does not use it.
     * gap_alpha also weighs a new sample of the service time S. */
    double gap_alpha;       /* (0, 1] */
    double gap_beta;        /* (0, 1] */
    double dev_k;           /* >= 0 */
    double overdue_factor;  /* >= 1 */
    double op_alpha;        /* weight of a new op duration in its EWMA, (0, 1] */
    uint64_t unknown_op_ns; /* prediction for an op never measured, nor its job */
    /* Host time around each hp iteration kept free of lp ops: its reply's
     * way to the client after completion, its next request's way in before
     * the predicted arrival. Matters where the device is the host's own
     * cores (cpu): there an lp op competes with that work for a core. */
    uint64_t host_ns;
    /* The expected delay lp ops may add to an hp iteration, as a share of
     * its service time alone, [0, 1): rho = fit_margin * S / m above. */
    double fit_margin;
} sl_gaps_config;

/* The defaults: gap_alpha 1/8, gap_beta 1/4 (RFC 6298), dev_k 1,
 * overdue_factor 2, op_alpha 1/4, unknown_op_ns 0 (an unmeasured op is
 * issued into any open gap once, which measures it: at worst it delays one
 * hp arrival by one op, the bound that holds anyway), host_ns 0,
 * fit_margin 0.05 (hp iterations at most 5 % slower than alone on
 * average; FIKIT's middle margin, chosen before any measurement). */
sl_gaps_config sl_gaps_config_default(void);

/* One EWMA: the mean of what it has seen, weighting recent samples. */
typedef struct sl_gaps_ewma {
    double mean_ns;
    uint64_t n; /* samples seen; 0 = no prediction */
} sl_gaps_ewma;

/* One high-priority job, embedded in the caller's session. Private. */
typedef struct sl_gaps_hp {
    double gap_mean_ns, gap_dev_ns; /* the summary predictor */
    uint64_t gaps_seen;
    uint64_t ring[SL_GAPS_HISTORY];   /* the last gaps, oldest at ring[head] when full */
    uint64_t sorted[SL_GAPS_HISTORY]; /* the same, ascending */
    uint32_t n_hist, head;
    double hist_sum_ns;
    sl_gaps_ewma service;   /* S: service time per iteration */
    uint64_t busy_since_ns; /* valid while pending */
    uint32_t busy_done;     /* iterations completed in this busy period */
    uint64_t idle_since_ns; /* valid when idle */
    uint32_t pending;       /* iterations arrived and not completed */
    bool idle;              /* completed at least once and nothing pending */
    struct sl_gaps_hp *prev, *next;
} sl_gaps_hp;

/* One low-priority graph (or job): per-op duration EWMAs in a caller-owned
 * array of n_ops entries (may be NULL / 0: the job-wide EWMA alone). */
typedef struct sl_gaps_lp {
    sl_gaps_ewma job;
    sl_gaps_ewma *ops;
    uint32_t n_ops;
} sl_gaps_lp;

/* The gap filler: the set of hp jobs and the configuration. */
typedef struct sl_gaps {
    sl_gaps_config cfg;
    sl_gaps_hp *first;
    uint32_t n_hp;
    uint32_t n_pending; /* hp jobs with pending > 0 */
} sl_gaps;

/* What sl_gaps_decide concluded. */
typedef enum sl_gaps_decision {
    SL_GAPS_ISSUE_FREE,   /* issue: no hp job constrains (none, all overdue) */
    SL_GAPS_ISSUE_GAP,    /* issue: the op fits every predicted gap */
    SL_GAPS_WAIT_PENDING, /* wait: hp work is pending */
    SL_GAPS_WAIT_GAP,     /* wait: the op does not fit some predicted gap */
} sl_gaps_decision;

/* Initialises g with cfg (NULL = defaults), no hp jobs. Errors: SL_EINVAL
 * for a parameter out of its range (g untouched). Never allocates; there is
 * nothing to finalise. */
int sl_gaps_init(sl_gaps *g, const sl_gaps_config *cfg);

/* Registers hp (its contents are overwritten): no prediction, nothing
 * pending. Precondition: hp is not registered. O(1). */
void sl_gaps_hp_add(sl_gaps *g, sl_gaps_hp *hp);
/* Unregisters hp, pending work or not (the session closed). O(1). */
void sl_gaps_hp_remove(sl_gaps *g, sl_gaps_hp *hp);

/* An iteration of hp arrived (queued). When hp was idle, the gap since its
 * last completion is a new sample for its predictor. O(1). */
void sl_gaps_hp_arrival(sl_gaps *g, sl_gaps_hp *hp, uint64_t now);
/* An iteration of hp completed (or failed: it is no longer pending). When it
 * was the last pending one, hp's idle gap starts now. A completion while
 * nothing is pending (its arrival was never reported) is ignored. O(1). */
void sl_gaps_hp_complete(sl_gaps *g, sl_gaps_hp *hp, uint64_t now);

/* Whether any hp job has work pending. O(1). */
bool sl_gaps_hp_pending(const sl_gaps *g);
/* hp's summary prediction g = max(0, m - k*d) (diagnostic); 0 when it has
 * no gap recorded. */
uint64_t sl_gaps_hp_predicted_gap(const sl_gaps *g, const sl_gaps_hp *hp);
/* hp's service time per iteration S (EWMA); 0 before its first. */
uint64_t sl_gaps_hp_service(const sl_gaps_hp *hp);
/* The risk rho = fit_margin * S / m the decision allows hp; 0 before a gap
 * is recorded. */
double sl_gaps_hp_risk(const sl_gaps *g, const sl_gaps_hp *hp);

/* The decision described at the top, for an lp op predicted to take op_ns,
 * at time now. O(number of hp jobs), no side effects. */
sl_gaps_decision sl_gaps_decide(const sl_gaps *g, uint64_t now, uint64_t op_ns);
/* The length of lp op the hp jobs leave room for: over the hp jobs with
 * recorded gaps, the least of max(q, fit_margin * S) - 2 * host_ns (0 when
 * that is none), where q is the longest op the rule admits at the start of
 * a gap (the recorded gap of rank floor(rho * n)) and fit_margin * S the
 * longest a memoryless arrival admits (k / n ~ L / m <= rho). UINT64_MAX
 * when no hp job has recorded gaps. For splitting long ops. */
uint64_t sl_gaps_min_room(const sl_gaps *g);
/* The earliest time after now at which a WAIT_GAP decision may turn: an
 * idle hp job's host margin ends, its gap passes a recorded one, or it
 * becomes overdue. UINT64_MAX when none (no idle hp job with a record). */
uint64_t sl_gaps_recheck_at(const sl_gaps *g, uint64_t now);
/* How long from now until no hp job is within its host margin after a
 * completion (0 = none is): when a WAIT_GAP decision may change first. */
uint64_t sl_gaps_host_wait(const sl_gaps *g, uint64_t now);
/* sl_gaps_decide(...) is one of the two ISSUE outcomes. Always false while
 * any hp job has work pending. */
bool sl_gaps_may_issue_low_op(const sl_gaps *g, uint64_t now, uint64_t op_ns);

/* Binds lp to its per-op array (n_ops entries, zeroed here; NULL allowed)
 * and clears its job-wide EWMA. The array stays the caller's. */
void sl_gaps_lp_init(sl_gaps_lp *lp, sl_gaps_ewma *ops, uint32_t n_ops);
/* Predicted duration of op (its index in the graph): the op's EWMA, else
 * the job's, else cfg.unknown_op_ns. */
uint64_t sl_gaps_lp_predict(const sl_gaps *g, const sl_gaps_lp *lp, uint32_t op);
/* Feeds one measured duration of op (index >= n_ops feeds the job-wide EWMA
 * only). */
void sl_gaps_lp_observe(const sl_gaps *g, sl_gaps_lp *lp, uint32_t op, uint64_t duration_ns);

/* Folds one sample into e with weight alpha (the first sample is taken as
 * is). */
void sl_gaps_ewma_observe(sl_gaps_ewma *e, double alpha, uint64_t sample_ns);

#endif
