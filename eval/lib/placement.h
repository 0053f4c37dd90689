/* Cluster placement policies for the simulator's cluster experiments: which
 * job goes to which GPU (or server). salus itself places nothing (one salusd
 * per device); these are the policies of the cluster
 * schedulers the experiments compare, kept out of the simulators so that a
 * simulator only asks and applies.
 *
 * Matching policies take a caller-supplied weight matrix w (row-major,
 * n_jobs rows x n_gpus columns): w[i * n_gpus + g] is the value of running
 * job i on GPU g (MuxFlow: the pair's predicted normalised throughput), a
 * finite number >= 0, or SL_PLACE_FORBIDDEN where job i must not go to GPU g
 * (it does not fit). Each job gets at most one GPU and each GPU at most one
 * job. The result is out[i] = the GPU of job i, or -1 (unmatched).
 *
 * - sl_place_match: maximum-weight bipartite matching, the Hungarian
 *   algorithm (Kuhn-Munkres with row and column potentials and shortest
 *   augmenting paths, O(r^2 c) for r = min(n_jobs, n_gpus) and
 *   c = max(...)), exact: no other assignment has a larger total weight.
 * - sl_place_greedy: pairs by descending weight, taking a pair when both
 *   ends are still free (ties: lower job, then lower GPU); at least half the
 *   optimum, O(n_jobs n_gpus log(n_jobs n_gpus)).
 * - sl_place_one_per_gpu: ignores the weights: job i gets the i-th GPU that
 *   is free (gpu_free[g]), in index order; jobs beyond the free GPUs stay
 *   unmatched. The no-sharing baseline (one job per device).
 *
 * Gang placement for multi-GPU jobs on servers of equal size:
 * sl_place_gang picks servers for a job of k GPUs from the free GPU counts
 * per server.
 *
 * All functions are pure: no I/O, no globals, deterministic; they allocate
 * scratch memory (sl_alloc) and free it before returning. Thread-safe on
 * distinct arguments. */
#ifndef SL_EVAL_PLACEMENT_H
#define SL_EVAL_PLACEMENT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

/* A pair that must not be matched. */
#define SL_PLACE_FORBIDDEN (-INFINITY)

/* Maximum-weight matching of jobs to GPUs (Hungarian). A forbidden pair is
 * never in the result; the total weight of the result (sum of w over
 * matched pairs) is written to *total when total is not NULL. Errors:
 * SL_EINVAL (w or out NULL with n_jobs, n_gpus > 0; a weight that is NaN,
 * infinite other than SL_PLACE_FORBIDDEN, or negative), SL_ENOMEM. With
 * n_jobs or n_gpus 0 every job is unmatched. */
int sl_place_match(const double *w, size_t n_jobs, size_t n_gpus, int *out, double *total);

/* Greedy matching by descending weight (see above); same contract and
 * errors as sl_place_match. */
int sl_place_greedy(const double *w, size_t n_jobs, size_t n_gpus, int *out, double *total);

/* One job per free GPU, in index order (see above). gpu_free has n_gpus
 * entries. Errors: SL_EINVAL (out or gpu_free NULL with sizes > 0). */
int sl_place_one_per_gpu(size_t n_jobs, const bool *gpu_free, size_t n_gpus, int *out);

/* Locality of a gang placement. */
enum sl_place_locality {
    /* the fewest servers the job can use: one server when k <= per_server
     * (best fit: the server with the fewest free GPUs that still holds k,
     * lowest index on ties), else ceil(k / per_server) servers, all but
     * one wholly free (the study's "locality" constraint) */
    SL_PLACE_PACKED = 0,
    /* any GPUs: servers by descending free count (fewest servers for this
     * free state), lowest index on ties (the study's relaxed locality) */
    SL_PLACE_RELAXED,
};

/* Picks GPUs for a job of k GPUs on n_servers servers of per_server GPUs
 * each, free[s] of them free on server s. On success take[s] is how many
 * GPUs of server s the job gets (summing to k) and the result is SL_OK.
 * SL_EEXHAUSTED: fewer than k GPUs free in all (capacity), or enough in all
 * but not under the locality asked (fragmentation); *frag (may be NULL) is
 * set to true in the second case. Errors: SL_EINVAL (k 0, per_server 0,
 * NULL arrays, a free count above per_server). */
int sl_place_gang(const unsigned *free, size_t n_servers, unsigned per_server, unsigned k,
                  enum sl_place_locality loc, unsigned *take, bool *frag);

#endif
