/* Cluster placement policies (placement.h). */
#include "placement.h"

#include "sl_alloc.h"
#include "sl_error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int check_weights(const double *w, size_t n_jobs, size_t n_gpus, const int *out)
{
    if (n_jobs && !out)
        return SL_EINVAL;
    if (n_jobs && n_gpus && !w)
        return SL_EINVAL;
    for (size_t i = 0; i < n_jobs * n_gpus; i++) {
        double x = w[i];
        if (x == SL_PLACE_FORBIDDEN)
            continue;
        if (isnan(x) || isinf(x) || x < 0)
            return SL_EINVAL;
    }
    return SL_OK;
}

static double weight_sum(const double *w, size_t n_jobs, size_t n_gpus, const int *out)
{
    double t = 0;
    for (size_t i = 0; i < n_jobs; i++)
        if (out[i] >= 0)
            t += w[i * n_gpus + (size_t) out[i]];
    return t;
}

/* The Hungarian algorithm in its shortest-augmenting-path form, minimising
 * the cost of assigning each of r rows to a distinct one of c >= r columns
 * (cost(i, j) below). Rows and columns are numbered from 1; column 0 is the
 * virtual start of every search. u and v are the dual potentials: the
 * reduced cost cost(i, j) - u[i] - v[j] stays >= 0 on every pair and is 0
 * on matched pairs, which is what makes the final assignment optimal. Each
 * row is added by a Dijkstra-like search over columns on reduced costs
 * (minv: the cheapest reduced cost seen into each column; way: the column
 * before it on that path), then the path is flipped. O(r^2 c). */
typedef struct hung {
    const double *w;
    size_t n_gpus;
    bool transposed; /* rows are GPUs, columns jobs */
} hung;

/* Maximising weight = minimising its negation; a forbidden pair costs as
 * much as weight 0 (an empty pair) and is dropped from the result, which
 * keeps the matching maximum among allowed pairs since dropping a pair of
 * weight 0 does not change the total. */
static double cost(const hung *h, size_t row, size_t col)
{
    size_t job = h->transposed ? col : row, g = h->transposed ? row : col;
    double x = h->w[job * h->n_gpus + g];
    return x == SL_PLACE_FORBIDDEN ? 0.0 : -x;
}

int sl_place_match(const double *w, size_t n_jobs, size_t n_gpus, int *out, double *total)
{
    int rc = check_weights(w, n_jobs, n_gpus, out);
    if (rc != SL_OK)
        return rc;
    for (size_t i = 0; i < n_jobs; i++)
        out[i] = -1;
    if (total)
        *total = 0;
    if (!n_jobs || !n_gpus)
        return SL_OK;
    hung h = {.w = w, .n_gpus = n_gpus, .transposed = n_jobs > n_gpus};
    size_t r = h.transposed ? n_gpus : n_jobs, c = h.transposed ? n_jobs : n_gpus;
    double *u = sl_calloc(r + 1, sizeof *u), *v = sl_calloc(c + 1, sizeof *v);
    double *minv = sl_calloc(c + 1, sizeof *minv);
    size_t *p = sl_calloc(c + 1, sizeof *p), *way = sl_calloc(c + 1, sizeof *way);
    bool *used = sl_calloc(c + 1, sizeof *used);
    if (!u || !v || !minv || !p || !way || !used) {
        rc = SL_ENOMEM;
        goto out;
    }
    for (size_t i = 1; i <= r; i++) {
        p[0] = i; /* the new row enters at the virtual column 0 */
        size_t j0 = 0;
        for (size_t j = 0; j <= c; j++) {
            minv[j] = INFINITY;
            used[j] = false;
        }
        do {
            used[j0] = true;
            size_t i0 = p[j0], j1 = 0;
            double delta = INFINITY;
            for (size_t j = 1; j <= c; j++) {
                if (used[j])
                    continue;
                double red = cost(&h, i0 - 1, j - 1) - u[i0] - v[j];
                if (red < minv[j]) {
                    minv[j] = red;
                    way[j] = j0;
                }
                if (minv[j] < delta) {
                    delta = minv[j];
                    j1 = j;
                }
            }
            /* shift the potentials so the cheapest frontier column becomes
             * tight, keeping every reduced cost >= 0 */
            for (size_t j = 0; j <= c; j++) {
                if (used[j]) {
                    u[p[j]] += delta;
                    v[j] -= delta;
                } else {
                    minv[j] -= delta;
                }
            }
            j0 = j1;
        } while (p[j0] != 0);
        /* flip the augmenting path back to column 0 */
        do {
            size_t j1 = way[j0];
            p[j0] = p[j1];
            j0 = j1;
        } while (j0 != 0);
    }
    for (size_t j = 1; j <= c; j++) {
        if (!p[j])
            continue;
        size_t job = h.transposed ? j - 1 : p[j] - 1, g = h.transposed ? p[j] - 1 : j - 1;
        if (w[job * n_gpus + g] != SL_PLACE_FORBIDDEN)
            out[job] = (int) g;
    }
    if (total)
        *total = weight_sum(w, n_jobs, n_gpus, out);
out:
    sl_free(u);
    sl_free(v);
    sl_free(minv);
    sl_free(p);
    sl_free(way);
    sl_free(used);
    return rc;
}

typedef struct edge {
    double w;
    uint32_t job, gpu;
} edge;

static int edge_cmp(const void *a, const void *b)
{
    const edge *x = a, *y = b;
    if (x->w != y->w)
        return x->w > y->w ? -1 : 1;
    if (x->job != y->job)
        return x->job < y->job ? -1 : 1;
    return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
}

int sl_place_greedy(const double *w, size_t n_jobs, size_t n_gpus, int *out, double *total)
{
    int rc = check_weights(w, n_jobs, n_gpus, out);
    if (rc != SL_OK)
        return rc;
    if (n_jobs > UINT32_MAX || n_gpus > UINT32_MAX)
        return SL_EINVAL;
    for (size_t i = 0; i < n_jobs; i++)
        out[i] = -1;
    if (total)
        *total = 0;
    if (!n_jobs || !n_gpus)
        return SL_OK;
    edge *e = sl_calloc(n_jobs * n_gpus, sizeof *e);
    bool *taken = sl_calloc(n_gpus, sizeof *taken);
    if (!e || !taken) {
        sl_free(e);
        sl_free(taken);
        return SL_ENOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_jobs; i++)
        for (size_t g = 0; g < n_gpus; g++)
            if (w[i * n_gpus + g] != SL_PLACE_FORBIDDEN)
                e[n++] = (edge){.w = w[i * n_gpus + g], .job = (uint32_t) i, .gpu = (uint32_t) g};
    qsort(e, n, sizeof *e, edge_cmp);
    for (size_t k = 0; k < n; k++) {
        if (out[e[k].job] >= 0 || taken[e[k].gpu])
            continue;
        out[e[k].job] = (int) e[k].gpu;
        taken[e[k].gpu] = true;
    }
    if (total)
        *total = weight_sum(w, n_jobs, n_gpus, out);
    sl_free(e);
    sl_free(taken);
    return SL_OK;
}

int sl_place_one_per_gpu(size_t n_jobs, const bool *gpu_free, size_t n_gpus, int *out)
{
    if ((n_jobs && !out) || (n_gpus && !gpu_free))
        return SL_EINVAL;
    size_t g = 0;
    for (size_t i = 0; i < n_jobs; i++) {
        while (g < n_gpus && !gpu_free[g])
            g++;
        out[i] = g < n_gpus ? (int) g++ : -1;
    }
    return SL_OK;
}

/* The server with the fewest free GPUs that still holds k, skipping the
 * ones already used; n_servers when none does. */
static size_t best_fit(const unsigned *free, const unsigned *take, size_t n_servers, unsigned k)
{
    size_t best = n_servers;
    for (size_t s = 0; s < n_servers; s++)
        if (!take[s] && free[s] >= k && (best == n_servers || free[s] < free[best]))
            best = s;
    return best;
}

int sl_place_gang(const unsigned *free, size_t n_servers, unsigned per_server, unsigned k,
                  enum sl_place_locality loc, unsigned *take, bool *frag)
{
    if (!k || !per_server || (n_servers && (!free || !take)))
        return SL_EINVAL;
    uint64_t total = 0;
    for (size_t s = 0; s < n_servers; s++) {
        if (free[s] > per_server)
            return SL_EINVAL;
        total += free[s];
        take[s] = 0;
    }
    if (frag)
        *frag = false;
    if (total < k)
        return SL_EEXHAUSTED;
    if (loc == SL_PLACE_RELAXED) {
        /* descending free count: the fewest servers this free state allows */
        unsigned left = k;
        while (left) {
            size_t best = n_servers;
            for (size_t s = 0; s < n_servers; s++)
                if (!take[s] && free[s] && (best == n_servers || free[s] > free[best]))
                    best = s;
            unsigned t = free[best] < left ? free[best] : left;
            take[best] = t;
            left -= t;
        }
        return SL_OK;
    }
    unsigned whole = k / per_server, rest = k % per_server;
    size_t s = 0;
    for (unsigned n = 0; n < whole; n++) {
        while (s < n_servers && free[s] != per_server)
            s++;
        if (s == n_servers)
            break;
        take[s++] = per_server;
        if (n + 1 == whole)
            whole = 0; /* all found */
    }
    size_t r = rest ? best_fit(free, take, n_servers, rest) : 0;
    if (whole || (rest && r == n_servers)) {
        for (size_t i = 0; i < n_servers; i++)
            take[i] = 0;
        if (frag)
            *frag = true;
        return SL_EEXHAUSTED;
    }
    if (rest)
        take[r] = rest;
    return SL_OK;
}
