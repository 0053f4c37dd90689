/* bench/ephemeral_bind: the per-iteration cost of binding an iteration's
 * ephemeral memory the salus way against allocating it tensor by tensor,
 * side by side in one run.
 *
 *   ephemeral_bind [--rounds 10] [--samples 400] [--iters 32] [--json FILE]
 *
 * Graphs: training iterations (forward, backward, updates) of the MLP
 * 784-256-128-10 at batch 128 and of a CIFAR CNN at batch 64, from their
 * layer tables (bench_models.h): every ephemeral tensor with its size and
 * live range.
 *
 *   A, bind:       what salusd does per iteration. The plan is static
 *                  (sl_mem_plan once, at registration), so binding is one
 *                  add per tensor, address = lane base + planned offset,
 *                  and release is nothing.
 *   B, per-tensor: a best-fit allocator (sl_mem_pool, O(log n)) doing the
 *                  same tensors in the order of their live ranges:
 *                  sl_mem_pool_alloc at first use, sl_mem_pool_free after
 *                  last use (event lists precomputed, as A's plan is).
 *
 * Rounds alternate A B A B on one pinned CPU; a sample is the mean over
 * --iters iterations (one iteration is too short to time alone). Prints
 * medians and p99 of the per-iteration time, and last
 *   BENCH ephemeral bind_ns=... per_tensor_ns=... ratio=...
 * for the MLP (ratio = per_tensor / bind), with the CNN's figures after. */
#include "bench_models.h"
#include "bench_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "pool.h"
#include "sl_error.h"

/* Keeps the compiler from dropping work whose result nobody reads. */
static volatile uint64_t sink;

/* Every iteration's stores must happen: without this the compiler may keep
 * only the last of several identical bindings. Costs no instruction. */
#define ITERATION_DONE() __asm__ volatile("" ::: "memory")

struct graph {
    const char *label;
    bm_net *net;
    size_t n;
    uint64_t *offsets;
    uint64_t peak, naive;
    /* B's schedule: per step, tensors to allocate, then tensors to free */
    uint32_t n_steps;
    uint32_t *alloc_start, *free_start; /* n_steps + 1 entries each */
    uint32_t *alloc_list, *free_list;
    uint64_t *addr;
    sl_mem_pool *pool;
};

static int graph_init(struct graph *g, const char *label, int model, uint64_t batch)
{
    g->label = label;
    g->net = malloc(sizeof(bm_net));
    if (!g->net)
        return -1;
    bm_build(g->net, model, batch, true);
    const bm_net *n = g->net;
    g->n = n->n_bufs;
    g->offsets = calloc(g->n, sizeof(*g->offsets));
    g->addr = calloc(g->n, sizeof(*g->addr));
    sl_plan_result res;
    if (!g->offsets || !g->addr || sl_mem_plan(n->bufs, g->n, 256, g->offsets, &res) != SL_OK)
        return -1;
    g->peak = res.peak;
    g->naive = res.naive;

    g->n_steps = 0;
    for (size_t i = 0; i < g->n; i++)
        if (n->bufs[i].last + 1 > g->n_steps)
            g->n_steps = n->bufs[i].last + 1;
    g->alloc_start = calloc(g->n_steps + 1, sizeof(uint32_t));
    g->free_start = calloc(g->n_steps + 1, sizeof(uint32_t));
    g->alloc_list = calloc(g->n, sizeof(uint32_t));
    g->free_list = calloc(g->n, sizeof(uint32_t));
    if (!g->alloc_start || !g->free_start || !g->alloc_list || !g->free_list)
        return -1;
    /* Counting sort by step, tensor order kept within a step. */
    for (size_t i = 0; i < g->n; i++) {
        g->alloc_start[n->bufs[i].first + 1]++;
        g->free_start[n->bufs[i].last + 1]++;
    }
    for (uint32_t s = 0; s < g->n_steps; s++) {
        g->alloc_start[s + 1] += g->alloc_start[s];
        g->free_start[s + 1] += g->free_start[s];
    }
    uint32_t *fill_a = calloc(g->n_steps, sizeof(uint32_t));
    uint32_t *fill_f = calloc(g->n_steps, sizeof(uint32_t));
    if (!fill_a || !fill_f)
        return -1;
    for (size_t i = 0; i < g->n; i++) {
        uint32_t a = n->bufs[i].first, f = n->bufs[i].last;
        g->alloc_list[g->alloc_start[a] + fill_a[a]++] = (uint32_t) i;
        g->free_list[g->free_start[f] + fill_f[f]++] = (uint32_t) i;
    }
    free(fill_a);
    free(fill_f);
    /* Room for every tensor at once: B never fails for capacity. */
    return sl_mem_pool_create(0, g->naive + 256, 256, &g->pool) == SL_OK ? 0 : -1;
}

static void graph_fini(struct graph *g)
{
    free(g->net);
    free(g->offsets);
    free(g->addr);
    free(g->alloc_start);
    free(g->free_start);
    free(g->alloc_list);
    free(g->free_list);
    sl_mem_pool_destroy(g->pool);
}

/* A: one iteration's binding. */
static void bind_iteration(struct graph *g, uint64_t lane_base)
{
    for (size_t i = 0; i < g->n; i++)
        g->addr[i] = lane_base + g->offsets[i];
}

/* B: one iteration allocated tensor by tensor. */
static int per_tensor_iteration(struct graph *g)
{
    const bm_net *n = g->net;
    for (uint32_t s = 0; s < g->n_steps; s++) {
        for (uint32_t k = g->alloc_start[s]; k < g->alloc_start[s + 1]; k++) {
            uint32_t i = g->alloc_list[k];
            if (n->bufs[i].size == 0)
                continue;
            if (sl_mem_pool_alloc(g->pool, n->bufs[i].size, &g->addr[i]) != SL_OK)
                return -1;
        }
        for (uint32_t k = g->free_start[s]; k < g->free_start[s + 1]; k++) {
            uint32_t i = g->free_list[k];
            if (n->bufs[i].size && sl_mem_pool_free(g->pool, g->addr[i]) != SL_OK)
                return -1;
        }
    }
    return 0;
}

static uint64_t checksum(const struct graph *g)
{
    uint64_t x = 0;
    for (size_t i = 0; i < g->n; i++)
        x ^= g->addr[i] + i;
    return x;
}

struct timing {
    double *bind, *per_tensor; /* ns per iteration, all samples */
    size_t n;
};

static int measure(struct graph *g, int rounds, int samples, int iters, struct timing *t)
{
    t->bind = calloc((size_t) rounds * samples, sizeof(double));
    t->per_tensor = calloc((size_t) rounds * samples, sizeof(double));
    if (!t->bind || !t->per_tensor)
        return -1;
    t->n = 0;
    uint64_t lane_base = 1ull << 30;
    /* warm-up: caches, branch predictors, the pool's nodes */
    for (int i = 0; i < 1000; i++) {
        bind_iteration(g, lane_base);
        if (per_tensor_iteration(g))
            return -1;
    }
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < samples; s++) {
            uint64_t t0 = sl_ts_now_ns();
            for (int i = 0; i < iters; i++) {
                bind_iteration(g, lane_base + (uint64_t) i * 256);
                ITERATION_DONE();
            }
            t->bind[t->n + (size_t) s] = (double) (sl_ts_now_ns() - t0) / iters;
        }
        sink ^= checksum(g);
        for (int s = 0; s < samples; s++) {
            uint64_t t0 = sl_ts_now_ns();
            for (int i = 0; i < iters; i++) {
                if (per_tensor_iteration(g))
                    return -1;
                ITERATION_DONE();
            }
            t->per_tensor[t->n + (size_t) s] = (double) (sl_ts_now_ns() - t0) / iters;
        }
        sink ^= checksum(g);
        t->n += (size_t) samples;
        printf("  %s round %2d: bind median %.1f ns, per-tensor median %.1f ns\n", g->label, r,
               sl_ts_median(t->bind + t->n - samples, (size_t) samples),
               sl_ts_median(t->per_tensor + t->n - samples, (size_t) samples));
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rounds = 10, samples = 400, iters = 32;
    const char *json = NULL;
    static const struct option opts[] = {
        {"rounds", required_argument, NULL, 'r'},
        {"samples", required_argument, NULL, 's'},
        {"iters", required_argument, NULL, 'i'},
        {"json", required_argument, NULL, 'j'},
        {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'r':
            rounds = atoi(optarg);
            break;
        case 's':
            samples = atoi(optarg);
            break;
        case 'i':
            iters = atoi(optarg);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            fprintf(stderr, "usage: ephemeral_bind [--rounds N] [--samples N] [--iters N] "
                            "[--json FILE]\n");
            return 2;
        }
    }
    if (rounds < 5 || samples < 10 || iters < 1) {
        fprintf(stderr, "ephemeral_bind: need >= 5 rounds, >= 10 samples, >= 1 iteration\n");
        return 2;
    }
    bench_pin_cpu0();

    struct graph g[2] = {{0}};
    if (graph_init(&g[0], "mlp", BM_MLP_SMALL, 128) || graph_init(&g[1], "cnn", BM_CIFAR_CNN, 64)) {
        fprintf(stderr, "ephemeral_bind: cannot build the graphs\n");
        return 1;
    }
    double med_a[2], med_b[2], p99_a[2], p99_b[2];
    for (int k = 0; k < 2; k++) {
        printf("%s (%s, batch %llu, training): %zu ephemeral tensors over %u steps, planned "
               "peak %.2f MiB of %.2f MiB without reuse\n",
               g[k].label, g[k].net->name, (unsigned long long) g[k].net->batch, g[k].n,
               g[k].n_steps, g[k].peak / 1048576.0, g[k].naive / 1048576.0);
        struct timing t;
        if (measure(&g[k], rounds, samples, iters, &t)) {
            fprintf(stderr, "ephemeral_bind: per-tensor allocation failed\n");
            return 1;
        }
        med_a[k] = sl_ts_median(t.bind, t.n);
        med_b[k] = sl_ts_median(t.per_tensor, t.n);
        p99_a[k] = sl_ts_percentile(t.bind, t.n, 99);
        p99_b[k] = sl_ts_percentile(t.per_tensor, t.n, 99);
        printf("%s: bind median %.1f ns (p99 %.1f), per-tensor median %.1f ns (p99 %.1f) per "
               "iteration: %.1fx\n",
               g[k].label, med_a[k], p99_a[k], med_b[k], p99_b[k], med_b[k] / med_a[k]);
        free(t.bind);
        free(t.per_tensor);
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f, "{\"bench\":\"ephemeral\",\"rounds\":%d,\"samples\":%d,\"iters\":%d", rounds,
                    samples, iters);
            for (int k = 0; k < 2; k++)
                fprintf(f,
                        ",\"%s\":{\"tensors\":%zu,\"peak\":%llu,\"naive\":%llu,\"bind_ns\":%.2f,"
                        "\"bind_p99_ns\":%.2f,\"per_tensor_ns\":%.2f,\"per_tensor_p99_ns\":%.2f,"
                        "\"ratio\":%.2f}",
                        g[k].label, g[k].n, (unsigned long long) g[k].peak,
                        (unsigned long long) g[k].naive, med_a[k], p99_a[k], med_b[k], p99_b[k],
                        med_b[k] / med_a[k]);
            fprintf(f, "}\n");
            fclose(f);
        }
    }
    for (int k = 0; k < 2; k++)
        graph_fini(&g[k]);
    printf("BENCH ephemeral bind_ns=%.1f per_tensor_ns=%.1f ratio=%.1f bind_p99_ns=%.1f "
           "per_tensor_p99_ns=%.1f cnn_bind_ns=%.1f cnn_per_tensor_ns=%.1f cnn_ratio=%.1f\n",
           med_a[0], med_b[0], med_b[0] / med_a[0], p99_a[0], p99_b[0], med_a[1], med_b[1],
           med_b[1] / med_a[1]);
    return 0;
}
