/* Device profiles of the sim backend: the published figures of real GPUs
 * (peak FLOP/s per precision, memory bandwidth and capacity, host link) plus
 * the two efficiency factors that turn peaks into achievable rates. Sources
 * are cited next to each figure in profiles.c. No CUDA type appears here. */
#ifndef SL_SIM_PROFILES_H
#define SL_SIM_PROFILES_H

#include <stddef.h>
#include <stdint.h>

/* Arithmetic the cost model can charge an op to. Which ops run on which
 * is sl_sim_op_prec's rule (sim.h). */
enum sl_sim_prec {
    SL_SIM_FP32 = 0,    /* plain FP32 on the CUDA cores (no TF32) */
    SL_SIM_FP16_TC = 1, /* FP16 multiply, FP32 accumulate on tensor cores (P100: packed FP16) */
    SL_SIM_BF16_TC = 2, /* BF16 multiply, FP32 accumulate on tensor cores */
    SL_SIM_TF32_TC = 3, /* f32 operands rounded to TF32 on tensor cores, FP32 accumulate */
    SL_SIM_PREC_COUNT
};

typedef struct sl_sim_profile {
    const char *name;                     /* spec name, lower case: "v100" in "sim:v100" */
    const char *description;              /* "NVIDIA Tesla V100 SXM2 16 GB" */
    double peak_flops[SL_SIM_PREC_COUNT]; /* FLOP/s, dense; 0 = not supported */
    double mem_bw;                        /* device memory, bytes/s (peak) */
    double pcie_bw;                       /* achievable host<->device bytes/s, each direction */
    uint64_t capacity;                    /* device memory, bytes */
    unsigned sm_count;                    /* streaming multiprocessors (occupancy, sim.h) */
    unsigned threads_per_sm;              /* most resident threads per SM (occupancy, sim.h) */
    uint64_t launch_ns;                   /* fixed cost of every op and copy */
    /* One iteration replayed as a CUDA Graph: graph_launch_ns on the
     * device's launch path per replay (one cudaGraphLaunch), then
     * graph_node_ns before each node's work on its stream (the front end
     * resolving the node's dependency), instead of launch_ns per op. */
    uint64_t graph_launch_ns;
    uint64_t graph_node_ns;
    double eff_compute; /* achievable fraction of peak_flops (0, 1] */
    double eff_mem;     /* achievable fraction of mem_bw (0, 1] */
} sl_sim_profile;

/* Finds a profile by name, case-insensitively ("v100", "H100").
 * Errors: SL_EINVAL (name NULL or out NULL), SL_ENOTFOUND. Never blocks. */
int sl_sim_profile_find(const char *name, const sl_sim_profile **out);

/* Number of profiles, and profile i (NULL when i >= count): for listing them
 * in messages and for tests that check every profile. Never blocks. */
unsigned sl_sim_profile_count(void);
const sl_sim_profile *sl_sim_profile_at(unsigned i);

/* Writes the comma-separated profile names ("p100, v100, ...") into buf
 * (always NUL-terminated when len > 0); returns buf. */
char *sl_sim_profile_names(char *buf, size_t len);

#endif
