/* bench/packing: how many inference jobs fit on one device under the Salus
 * admission rule against an MPS-style rule, side by side in one run.
 *
 *   packing [--capacity-gib 16] [--framework-mib 64] [--batch 1] [--json FILE]
 *
 * Device: 16 GiB, a P100 as in the Salus paper. Jobs: inference sessions of
 * six models built from their layer tables (bench_models.h): persistent
 * bytes = their parameter tensors, ephemeral = the planned peak of one
 * forward pass (sl_mem_plan over the real tensor sizes and live ranges).
 * Jobs arrive round-robin over the models until the first refusal.
 *
 *   salus: the real memory manager (sl_mem_admit without waiting, then one
 *          sl_mem_alloc per parameter tensor and sl_mem_set_ephemeral with
 *          the planned peak): sum of persistent + lanes shared by peak +
 *          one framework workspace per lane.
 *   mps:   an arithmetic model of one process per job on MPS: every job
 *          reserves its own persistent + its own full ephemeral peak + its
 *          own framework workspace; nothing is shared.
 *
 * The framework workspace (cuBLAS/cuDNN) is the same size for a Salus lane
 * and an MPS process (--framework-mib). A table for other batch sizes and
 * workspaces follows the main result; the last line is
 *   BENCH packing salus_jobs=... mps_jobs=... ratio=...
 * for the defaults. */
#include "bench_models.h"
#include "bench_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "manager.h"
#include "sl_error.h"

#define MIB (1024.0 * 1024.0)
#define MAX_JOBS 100000

struct model_figures {
    uint64_t persistent, ephemeral, naive;
    size_t n_params, n_bufs;
    bm_net *net;
};

struct result {
    int salus_jobs, mps_jobs;
    uint32_t lanes;
    uint64_t lane_bytes, persistent, framework;
    int refusal_reason; /* why the first refused Salus job was refused */
    const char *refused_at;
};

static void load_models(struct model_figures *mf, uint64_t batch)
{
    for (int k = 0; k < BM_N_MODELS; k++) {
        bm_net *n = mf[k].net;
        bm_build(n, k, batch, false);
        mf[k].persistent = bm_persistent_bytes(n);
        mf[k].ephemeral = bm_ephemeral_peak(n, &mf[k].naive);
        mf[k].n_params = n->n_params;
        mf[k].n_bufs = n->n_bufs;
        if (!mf[k].ephemeral) {
            fprintf(stderr, "packing: planning %s failed\n", n->name);
            exit(1);
        }
    }
}

/* Admits jobs round-robin into a real manager until the first refusal. */
static struct result pack_salus(const struct model_figures *mf, uint64_t capacity,
                                uint64_t framework)
{
    struct result r = {0};
    sl_mem_config cfg = {
        .capacity = capacity, .framework_per_lane = framework, .default_ephemeral = 64ull << 20};
    sl_mem_mgr *m = NULL;
    if (sl_mem_mgr_create(&cfg, &m) != SL_OK) {
        fprintf(stderr, "packing: cannot create the manager\n");
        exit(1);
    }
    for (int i = 0; i < MAX_JOBS; i++) {
        const struct model_figures *f = &mf[i % BM_N_MODELS];
        uint64_t id = (uint64_t) i + 1, addr;
        int reason = SL_MEM_FITS;
        int rc = sl_mem_admit(m, id, f->persistent, f->ephemeral, false, &reason, NULL);
        r.refused_at = "admit";
        for (size_t t = 0; rc == SL_OK && t < f->n_params; t++) {
            rc = sl_mem_alloc(m, id, f->net->params[t], &addr, &reason);
            r.refused_at = "alloc";
        }
        if (rc == SL_OK) {
            rc = sl_mem_set_ephemeral(m, id, f->ephemeral, NULL, &reason);
            r.refused_at = "register";
        }
        if (rc != SL_OK) {
            r.refusal_reason = reason;
            sl_mem_release(m, id);
            break;
        }
        r.salus_jobs++;
    }
    if (sl_mem_check(m) != SL_OK) {
        fprintf(stderr, "packing: manager invariants broken\n");
        exit(1);
    }
    sl_mem_stats st;
    sl_mem_get_stats(m, &st);
    r.lanes = st.n_lanes;
    r.lane_bytes = st.lanes;
    r.persistent = st.persistent_used;
    r.framework = st.framework;
    sl_mem_mgr_destroy(m);

    /* MPS: every job holds persistent + its full ephemeral + its own
     * workspace. */
    uint64_t used = 0;
    for (int i = 0; i < MAX_JOBS; i++) {
        const struct model_figures *f = &mf[i % BM_N_MODELS];
        uint64_t job = f->persistent + f->ephemeral + framework;
        if (job > capacity - used)
            break;
        used += job;
        r.mps_jobs++;
    }
    return r;
}

int main(int argc, char **argv)
{
    double capacity_gib = 16, framework_mib = 64;
    uint64_t batch = 1;
    const char *json = NULL;
    static const struct option opts[] = {
        {"capacity-gib", required_argument, NULL, 'c'},
        {"framework-mib", required_argument, NULL, 'f'},
        {"batch", required_argument, NULL, 'b'},
        {"json", required_argument, NULL, 'j'},
        {0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'c':
            capacity_gib = atof(optarg);
            break;
        case 'f':
            framework_mib = atof(optarg);
            break;
        case 'b':
            batch = strtoull(optarg, NULL, 10);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            fprintf(stderr, "usage: packing [--capacity-gib G] [--framework-mib M] [--batch N] "
                            "[--json FILE]\n");
            return 2;
        }
    }
    uint64_t capacity = (uint64_t) (capacity_gib * 1024 * MIB) & ~255ull;
    uint64_t framework = ((uint64_t) (framework_mib * MIB) + 255) & ~255ull;
    if (capacity == 0 || batch == 0 || framework >= capacity) {
        fprintf(stderr, "packing: bad capacity, workspace or batch\n");
        return 2;
    }

    struct model_figures mf[BM_N_MODELS];
    for (int k = 0; k < BM_N_MODELS; k++) {
        mf[k].net = malloc(sizeof(bm_net));
        if (!mf[k].net)
            return 1;
    }
    load_models(mf, batch);
    printf("device %.1f GiB, framework workspace %.0f MiB per Salus lane / MPS process, "
           "inference batch %llu\n",
           capacity_gib, framework_mib, (unsigned long long) batch);
    printf("%-20s %12s %8s %14s %12s %8s\n", "model", "persistent", "tensors", "ephemeral",
           "no reuse", "values");
    for (int k = 0; k < BM_N_MODELS; k++)
        printf("%-20s %8.1f MiB %8zu %10.2f MiB %8.2f MiB %8zu\n", bm_model_names[k],
               mf[k].persistent / MIB, mf[k].n_params, mf[k].ephemeral / MIB, mf[k].naive / MIB,
               mf[k].n_bufs);

    struct result r = pack_salus(mf, capacity, framework);
    double ratio = r.mps_jobs ? (double) r.salus_jobs / r.mps_jobs : 0;
    printf("\nsalus: %d jobs in %u lane(s): persistent %.0f MiB + lanes %.1f MiB + framework "
           "%.0f MiB; job %d refused (%s: %s)\n",
           r.salus_jobs, r.lanes, r.persistent / MIB, r.lane_bytes / MIB, r.framework / MIB,
           r.salus_jobs + 1, r.refused_at, sl_mem_reason_name(r.refusal_reason));
    printf("mps:   %d jobs (each: persistent + full ephemeral + own workspace)\n", r.mps_jobs);

    /* Context: how the ratio moves with the batch and the workspace. */
    printf("\n%8s %14s %12s %10s %8s\n", "batch", "workspace MiB", "salus_jobs", "mps_jobs",
           "ratio");
    const uint64_t batches[] = {1, 8, 32};
    const double workspaces[] = {0, 64, 256};
    for (size_t b = 0; b < 3; b++) {
        load_models(mf, batches[b]);
        for (size_t w = 0; w < 3; w++) {
            uint64_t fw = (uint64_t) (workspaces[w] * MIB);
            struct result x = pack_salus(mf, capacity, fw);
            printf("%8llu %14.0f %12d %10d %8.2f\n", (unsigned long long) batches[b], workspaces[w],
                   x.salus_jobs, x.mps_jobs, x.mps_jobs ? (double) x.salus_jobs / x.mps_jobs : 0);
        }
    }
    load_models(mf, batch);

    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"packing\",\"capacity\":%llu,\"framework_per_lane\":%llu,"
                    "\"batch\":%llu,\"salus_jobs\":%d,\"mps_jobs\":%d,\"ratio\":%.3f,"
                    "\"salus_lanes\":%u,\"salus_lane_bytes\":%llu,\"models\":[",
                    (unsigned long long) capacity, (unsigned long long) framework,
                    (unsigned long long) batch, r.salus_jobs, r.mps_jobs, ratio, r.lanes,
                    (unsigned long long) r.lane_bytes);
            for (int k = 0; k < BM_N_MODELS; k++)
                fprintf(f, "%s{\"name\":\"%s\",\"persistent\":%llu,\"ephemeral\":%llu}",
                        k ? "," : "", bm_model_names[k], (unsigned long long) mf[k].persistent,
                        (unsigned long long) mf[k].ephemeral);
            fprintf(f, "]}\n");
            fclose(f);
        }
    }
    for (int k = 0; k < BM_N_MODELS; k++)
        free(mf[k].net);
    printf("BENCH packing salus_jobs=%d mps_jobs=%d ratio=%.2f\n", r.salus_jobs, r.mps_jobs, ratio);
    return 0;
}
