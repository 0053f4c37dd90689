/* bench/packing: how many inference jobs fit on one device, and how many
 * of them can run at the same time, under the Salus admission rule against
 * an MPS-style one process per job, side by side in one run.
 *
 *   packing [--capacity-gib 16] [--framework-mib 64] [--context-mib 287]
 *           [--batch 1] [--train-batch 32] [--json FILE]
 *
 * Jobs: inference sessions of six models built from their layer tables
 * (bench_models.h): persistent bytes = their parameter tensors, ephemeral
 * = the planned peak of one forward pass (sl_mem_plan over the real tensor
 * sizes and live ranges). Jobs arrive round-robin over the models until the
 * first refusal.
 *
 *   salus: the real memory manager (sl_mem_admit without waiting, then one
 *          sl_mem_alloc per parameter tensor and sl_mem_set_ephemeral with
 *          the planned peak) on the device less one CUDA context (salusd is
 *          one process): persistent + lanes shared by peak + one workspace
 *          per lane. Lanes are shared whenever a job fits one (spread limit
 *          0, the most jobs); a line with salusd's default spread limit
 *          (half the memory) follows.
 *   mps:   one process per job, each holding a CUDA context, its own
 *          workspace, its persistent bytes and its full ephemeral peak.
 *
 * Two counts per side: jobs admitted (resident at once), and jobs that can
 * run at the same time. Under salus a lane runs one iteration at a time,
 * so the jobs sharing a lane take turns: concurrent = lanes. Under MPS
 * every admitted process runs concurrently (memory-wise; compute is shared).
 *
 * Every assumption is printed with its source (or marked as having none).
 * The table varies batch, context and workspace, and includes the row most
 * generous to MPS (no per-process context or workspace at all, while salus
 * keeps its own).
 *
 * Precision: the same mix packed by salus alone (the first configuration)
 * with every tensor's bytes from its dtype (bench_models.h, bm_prec):
 * inference jobs in f32 and in bf16 (weights and activations); training
 * jobs (--train-batch) in f32, in salus's mixed precision (f32 master
 * weights and momentum, bf16 compute, so only the ephemeral memory
 * changes) and in pure bf16 (weights and momentum too; not what salus's
 * precision option does, shown as the bound). Last lines:
 *   BENCH packing_precision bf16_jobs=... f32_jobs=... ratio=... (inference)
 *         inf_bf16=... inf_f32=... train_bf16=... (mixed) train_f32=...
 *         train_ratio=... train_pure_bf16=... train_pure_ratio=...
 *   BENCH packing_generous salus_jobs=... mps_jobs=... ratio=...
 *         salus_concurrent=... mps_concurrent=...
 *   BENCH packing salus_jobs=... mps_jobs=... ratio=... salus_concurrent=...
 *         mps_concurrent=... context_mib=... workspace_mib=... */
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
    uint32_t lanes; /* salus: jobs that can run at the same time */
    uint64_t lane_bytes, persistent, framework;
    int refusal_reason; /* why the first refused Salus job was refused */
    const char *refused_at;
};

/* What each side pays besides the jobs' own bytes. */
struct overhead {
    uint64_t salus_context;   /* salusd's one CUDA context */
    uint64_t salus_workspace; /* per lane */
    uint64_t mps_context;     /* per MPS client process */
    uint64_t mps_workspace;   /* per MPS client process */
    uint64_t spread_limit;    /* salus: lanes stay private below this */
};

static void load_models_prec(struct model_figures *mf, uint64_t batch, bool training, bm_prec prec)
{
    for (int k = 0; k < BM_N_MODELS; k++) {
        bm_net *n = mf[k].net;
        bm_build_prec(n, k, batch, training, prec);
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

static void load_models(struct model_figures *mf, uint64_t batch)
{
    load_models_prec(mf, batch, false, BM_F32);
}

/* Admits jobs round-robin into a real manager until the first refusal, and
 * counts the MPS processes that fit. */
static struct result pack(const struct model_figures *mf, uint64_t capacity,
                          const struct overhead *o)
{
    struct result r = {0};
    uint64_t salus_capacity = (capacity - o->salus_context) & ~255ull;
    sl_mem_config cfg = {.capacity = salus_capacity,
                         .framework_per_lane = o->salus_workspace,
                         .default_ephemeral = 64ull << 20,
                         .spread_limit = o->spread_limit};
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

    /* MPS: every job holds a context, its own workspace, persistent and its
     * full ephemeral peak (the same static plan: a framework's caching
     * allocator would hold more) */
    uint64_t used = 0;
    for (int i = 0; i < MAX_JOBS; i++) {
        const struct model_figures *f = &mf[i % BM_N_MODELS];
        uint64_t job = f->persistent + f->ephemeral + o->mps_context + o->mps_workspace;
        if (job > capacity - used)
            break;
        used += job;
        r.mps_jobs++;
    }
    return r;
}

static double ratio_of(int a, int b)
{
    return b ? (double) a / b : 0;
}

/* The same job mix packed by salus in each precision (bm_prec): inference
 * in f32 and bf16 (weights and activations), training in f32, in salus's
 * mixed precision (f32 master weights and momentum, bf16 compute) and in
 * pure bf16 (weights and momentum too). */
enum { P_INF_F32, P_INF_BF16, P_TRAIN_F32, P_TRAIN_MIXED, P_TRAIN_BF16, P_N };

struct prec_case {
    const char *name;
    bool training;
    bm_prec prec;
    uint64_t persistent[BM_N_MODELS], ephemeral[BM_N_MODELS];
    struct result r;
};

static void pack_precisions(struct prec_case *pc, struct model_figures *mf, uint64_t capacity,
                            const struct overhead *o, uint64_t inf_batch, uint64_t train_batch)
{
    static const struct {
        const char *name;
        bool training;
        bm_prec prec;
    } cases[P_N] = {
        {"inference f32", false, BM_F32},      {"inference bf16", false, BM_BF16},
        {"training f32", true, BM_F32},        {"training mixed bf16", true, BM_MIXED},
        {"training pure bf16", true, BM_BF16},
    };
    for (int c = 0; c < P_N; c++) {
        pc[c].name = cases[c].name;
        pc[c].training = cases[c].training;
        pc[c].prec = cases[c].prec;
        load_models_prec(mf, cases[c].training ? train_batch : inf_batch, cases[c].training,
                         cases[c].prec);
        for (int k = 0; k < BM_N_MODELS; k++) {
            pc[c].persistent[k] = mf[k].persistent;
            pc[c].ephemeral[k] = mf[k].ephemeral;
        }
        pc[c].r = pack(mf, capacity, o);
    }
    printf("\nprecision: the same job mix under salus's admission, each tensor's bytes from its "
           "dtype\n(inference batch %llu, training batch %llu; persistent / planned ephemeral "
           "peak, MiB)\n",
           (unsigned long long) inf_batch, (unsigned long long) train_batch);
    printf("%-20s", "model");
    for (int c = 0; c < P_N; c++)
        printf(" | %21s", pc[c].name);
    printf("\n");
    for (int k = 0; k < BM_N_MODELS; k++) {
        printf("%-20s", bm_model_names[k]);
        for (int c = 0; c < P_N; c++)
            printf(" | %9.1f / %9.1f", pc[c].persistent[k] / MIB, pc[c].ephemeral[k] / MIB);
        printf("\n");
    }
    printf("%-20s", "jobs admitted");
    for (int c = 0; c < P_N; c++)
        printf(" | %21d", pc[c].r.salus_jobs);
    printf("\n%-20s", "at once (lanes)");
    for (int c = 0; c < P_N; c++)
        printf(" | %21u", pc[c].r.lanes);
    printf("\n");
    printf("inference bf16 / f32: %.2fx jobs. training mixed bf16 / f32: %.2fx (master weights\n"
           "and momentum stay f32, only the ephemeral memory changes); pure bf16 training\n"
           "(weights and momentum in bf16 too, not what salus's precision option does): %.2fx\n",
           ratio_of(pc[P_INF_BF16].r.salus_jobs, pc[P_INF_F32].r.salus_jobs),
           ratio_of(pc[P_TRAIN_MIXED].r.salus_jobs, pc[P_TRAIN_F32].r.salus_jobs),
           ratio_of(pc[P_TRAIN_BF16].r.salus_jobs, pc[P_TRAIN_F32].r.salus_jobs));
}

static void print_assumptions(double capacity_gib, double framework_mib, double context_mib)
{
    printf("assumptions (MPS side and shared):\n"
           "  device %.1f GiB: a 16 GB P100, the GPU of the Salus paper's evaluation.\n"
           "  CUDA context per process: %.0f MiB. Source: pytorch/pytorch pull request 86509\n"
           "    measured a PyTorch process's device memory after CUDA init at 287,047,680 B\n"
           "    with lazy module loading (CUDA_MODULE_LOADING=LAZY; the default on Linux\n"
           "    since CUDA 12.2, NVIDIA CUDA programming guide, 'Lazy Loading') and\n"
           "    666,632,192 B (636 MiB) without. It depends on the kernels a process loads\n"
           "    (framework build, GPU); no source gives a figure for a C client.\n"
           "  MPS client context: each client is charged a full context. Source for the\n"
           "    direction only: NVIDIA MPS docs ('When to Use MPS', 'Reduced on-GPU\n"
           "    context storage'): the pre-Volta MPS server shares one copy of context\n"
           "    storage among its clients; Volta MPS isolates clients more, 'so the\n"
           "    resource reduction is to a much lesser degree'. No published per-client\n"
           "    figure: an assumption; the rows with context 0 bound it.\n"
           "  MPS server's own context: not charged (assumption, generous to MPS).\n"
           "  salusd: one process, one context, charged once.\n"
           "  workspace: %.0f MiB per MPS process and per Salus lane, the same libraries\n"
           "    on both sides. No source for the total: it is salusd's default\n"
           "    --framework-per-lane on cuda. Parts: cuBLAS API reference\n"
           "    (cublasSetWorkspace) recommends 4 MiB before Hopper and 32 MiB on Hopper;\n"
           "    cuDNN's workspace depends on the algorithm chosen per layer (no fixed size,\n"
           "    cudnnGet*WorkspaceSize).\n"
           "  ephemeral: an MPS process holds its job's full planned peak (salus's own\n"
           "    static plan: generous to MPS, a caching allocator holds more).\n",
           capacity_gib, context_mib, framework_mib);
}

int main(int argc, char **argv)
{
    double capacity_gib = 16, framework_mib = 64, context_mib = 287;
    uint64_t batch = 1, train_batch = 32;
    const char *json = NULL;
    static const struct option opts[] = {
        {"capacity-gib", required_argument, NULL, 'c'},
        {"framework-mib", required_argument, NULL, 'f'},
        {"context-mib", required_argument, NULL, 'x'},
        {"batch", required_argument, NULL, 'b'},
        {"train-batch", required_argument, NULL, 't'},
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
        case 'x':
            context_mib = atof(optarg);
            break;
        case 'b':
            batch = strtoull(optarg, NULL, 10);
            break;
        case 't':
            train_batch = strtoull(optarg, NULL, 10);
            break;
        case 'j':
            json = optarg;
            break;
        default:
            fprintf(stderr, "usage: packing [--capacity-gib G] [--framework-mib M] "
                            "[--context-mib M] [--batch N] [--train-batch N] "
                            "[--json FILE]\n");
            return 2;
        }
    }
    uint64_t capacity = (uint64_t) (capacity_gib * 1024 * MIB) & ~255ull;
    uint64_t framework = ((uint64_t) (framework_mib * MIB) + 255) & ~255ull;
    uint64_t context = ((uint64_t) (context_mib * MIB) + 255) & ~255ull;
    if (capacity == 0 || batch == 0 || train_batch == 0 || framework_mib < 0 || context_mib < 0 ||
        framework + context >= capacity) {
        fprintf(stderr, "packing: bad capacity, workspace, context or batch\n");
        return 2;
    }

    struct model_figures mf[BM_N_MODELS];
    for (int k = 0; k < BM_N_MODELS; k++) {
        mf[k].net = malloc(sizeof(bm_net));
        if (!mf[k].net)
            return 1;
    }
    load_models(mf, batch);
    print_assumptions(capacity_gib, framework_mib, context_mib);
    printf("\ninference batch %llu\n", (unsigned long long) batch);
    printf("%-20s %12s %8s %14s %12s %8s\n", "model", "persistent", "tensors", "ephemeral",
           "no reuse", "values");
    for (int k = 0; k < BM_N_MODELS; k++)
        printf("%-20s %8.1f MiB %8zu %10.2f MiB %8.2f MiB %8zu\n", bm_model_names[k],
               mf[k].persistent / MIB, mf[k].n_params, mf[k].ephemeral / MIB, mf[k].naive / MIB,
               mf[k].n_bufs);

    const struct overhead base = {.salus_context = context,
                                  .salus_workspace = framework,
                                  .mps_context = context,
                                  .mps_workspace = framework};
    struct overhead generous = base;
    generous.mps_context = generous.mps_workspace = 0;
    struct overhead spread = base;
    spread.spread_limit = (capacity - context) / 2;
    struct result r = pack(mf, capacity, &base), g = pack(mf, capacity, &generous),
                  sp = pack(mf, capacity, &spread);
    double ratio = ratio_of(r.salus_jobs, r.mps_jobs);
    printf("\nsalus: %d jobs admitted, %u can run at once (lanes): persistent %.0f MiB + lanes "
           "%.1f MiB + workspaces %.0f MiB + context %.0f MiB; job %d refused (%s: %s)\n",
           r.salus_jobs, r.lanes, r.persistent / MIB, r.lane_bytes / MIB, r.framework / MIB,
           context / MIB, r.salus_jobs + 1, r.refused_at, sl_mem_reason_name(r.refusal_reason));
    printf("       with salusd's default spread limit (lanes private up to half the memory): "
           "%d admitted, %u at once\n",
           sp.salus_jobs, sp.lanes);
    printf("mps:   %d jobs admitted, all %d can run at once (each: context + workspace + "
           "persistent + full ephemeral)\n",
           r.mps_jobs, r.mps_jobs);
    printf("mps, most generous (no context, no workspace per process): %d admitted and at "
           "once\n",
           g.mps_jobs);

    /* How the counts move with the batch, the context and the workspace.
     * salus keeps its context and workspace as the row says; the MPS column
     * pays them per process (rows marked * charge MPS nothing at all). */
    printf("\n%6s %8s %10s | %12s %12s | %10s %10s | %8s %8s\n", "batch", "ctx MiB", "ws MiB",
           "salus_jobs", "salus_conc", "mps_jobs", "mps_conc", "jobs_x", "conc_x");
    const uint64_t batches[] = {1, 8, 32};
    const struct {
        double ctx, ws;
        bool mps_free;
    } rows[] = {
        {context_mib, framework_mib, true},
        {0, 0, false},
        {0, 4, false},
        {0, 64, false},
        {287, 4, false},
        {287, 64, false},
        {636, 64, false},
        {287, 256, false},
    };
    for (size_t b = 0; b < 3; b++) {
        load_models(mf, batches[b]);
        for (size_t w = 0; w < sizeof rows / sizeof *rows; w++) {
            uint64_t ctx = (uint64_t) (rows[w].ctx * MIB), ws = (uint64_t) (rows[w].ws * MIB);
            struct overhead ov = {.salus_context = ctx,
                                  .salus_workspace = ws,
                                  .mps_context = rows[w].mps_free ? 0 : ctx,
                                  .mps_workspace = rows[w].mps_free ? 0 : ws};
            struct result x = pack(mf, capacity, &ov);
            printf("%6llu %7.0f%s %10.0f | %12d %12u | %10d %10d | %8.2f %8.2f\n",
                   (unsigned long long) batches[b], rows[w].ctx, rows[w].mps_free ? "*" : " ",
                   rows[w].ws, x.salus_jobs, x.lanes, x.mps_jobs, x.mps_jobs,
                   ratio_of(x.salus_jobs, x.mps_jobs), ratio_of((int) x.lanes, x.mps_jobs));
        }
    }
    printf("(jobs_x, conc_x: salus / mps; * = MPS charged no context and no workspace)\n");
    struct prec_case pc[P_N];
    pack_precisions(pc, mf, capacity, &base, batch, train_batch);
    load_models(mf, batch);

    if (json) {
        FILE *f = fopen(json, "w");
        if (f) {
            fprintf(f,
                    "{\"bench\":\"packing\",\"capacity\":%llu,\"framework_per_lane\":%llu,"
                    "\"context\":%llu,\"batch\":%llu,\"salus_jobs\":%d,\"mps_jobs\":%d,"
                    "\"ratio\":%.3f,\"salus_concurrent\":%u,\"mps_concurrent\":%d,"
                    "\"salus_lane_bytes\":%llu,\"default_spread\":{\"salus_jobs\":%d,"
                    "\"salus_concurrent\":%u},\"generous\":{\"salus_jobs\":%d,\"mps_jobs\":%d,"
                    "\"ratio\":%.3f,\"salus_concurrent\":%u,\"mps_concurrent\":%d},\"models\":[",
                    (unsigned long long) capacity, (unsigned long long) framework,
                    (unsigned long long) context, (unsigned long long) batch, r.salus_jobs,
                    r.mps_jobs, ratio, r.lanes, r.mps_jobs, (unsigned long long) r.lane_bytes,
                    sp.salus_jobs, sp.lanes, g.salus_jobs, g.mps_jobs,
                    ratio_of(g.salus_jobs, g.mps_jobs), g.lanes, g.mps_jobs);
            for (int k = 0; k < BM_N_MODELS; k++)
                fprintf(f, "%s{\"name\":\"%s\",\"persistent\":%llu,\"ephemeral\":%llu}",
                        k ? "," : "", bm_model_names[k], (unsigned long long) mf[k].persistent,
                        (unsigned long long) mf[k].ephemeral);
            fprintf(f, "],\"precision\":{\"train_batch\":%llu,\"cases\":[",
                    (unsigned long long) train_batch);
            for (int c = 0; c < P_N; c++) {
                fprintf(f,
                        "%s{\"name\":\"%s\",\"training\":%s,\"dtype\":\"%s\","
                        "\"salus_jobs\":%d,\"salus_concurrent\":%u,\"models\":[",
                        c ? "," : "", pc[c].name, pc[c].training ? "true" : "false",
                        bm_prec_names[pc[c].prec], pc[c].r.salus_jobs, pc[c].r.lanes);
                for (int k = 0; k < BM_N_MODELS; k++)
                    fprintf(f, "%s{\"name\":\"%s\",\"persistent\":%llu,\"ephemeral\":%llu}",
                            k ? "," : "", bm_model_names[k],
                            (unsigned long long) pc[c].persistent[k],
                            (unsigned long long) pc[c].ephemeral[k]);
                fprintf(f, "]}");
            }
            fprintf(f, "]}}\n");
            fclose(f);
        }
    }
    for (int k = 0; k < BM_N_MODELS; k++)
        free(mf[k].net);
    printf("BENCH packing_generous salus_jobs=%d mps_jobs=%d ratio=%.2f salus_concurrent=%u "
           "mps_concurrent=%d\n",
           g.salus_jobs, g.mps_jobs, ratio_of(g.salus_jobs, g.mps_jobs), g.lanes, g.mps_jobs);
    printf("BENCH packing_precision bf16_jobs=%d f32_jobs=%d ratio=%.2f inf_bf16=%d inf_f32=%d "
           "train_bf16=%d train_f32=%d train_ratio=%.2f train_pure_bf16=%d "
           "train_pure_ratio=%.2f\n",
           pc[P_INF_BF16].r.salus_jobs, pc[P_INF_F32].r.salus_jobs,
           ratio_of(pc[P_INF_BF16].r.salus_jobs, pc[P_INF_F32].r.salus_jobs),
           pc[P_INF_BF16].r.salus_jobs, pc[P_INF_F32].r.salus_jobs, pc[P_TRAIN_MIXED].r.salus_jobs,
           pc[P_TRAIN_F32].r.salus_jobs,
           ratio_of(pc[P_TRAIN_MIXED].r.salus_jobs, pc[P_TRAIN_F32].r.salus_jobs),
           pc[P_TRAIN_BF16].r.salus_jobs,
           ratio_of(pc[P_TRAIN_BF16].r.salus_jobs, pc[P_TRAIN_F32].r.salus_jobs));
    printf("BENCH packing salus_jobs=%d mps_jobs=%d ratio=%.2f salus_concurrent=%u "
           "mps_concurrent=%d context_mib=%.0f workspace_mib=%.0f\n",
           r.salus_jobs, r.mps_jobs, ratio, r.lanes, r.mps_jobs, context_mib, framework_mib);
    return 0;
}
