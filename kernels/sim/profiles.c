/* The device profiles. Every hardware figure cites the NVIDIA document it
 * comes from; figures that no datasheet gives are marked ASSUMPTION with the
 * reasoning. Units: FLOP/s, bytes/s, bytes, ns.
 *
 * Conventions used throughout:
 * - Peak FLOP/s are dense figures at boost clock. Datasheets for A100 and
 *   later quote tensor-core figures "with sparsity"; those are halved here.
 *   A precision a GPU does not have is 0: BF16 and TF32 before Ampere
 *   (the P100 and V100 documents list neither), so sim:p100 and sim:v100
 *   refuse bf16 graphs and run f32 matmuls and convolutions in plain FP32
 *   whatever the session's math mode (sim.h, sl_sim_op_prec).
 * - Capacities are the marketed size read as binary units (HBM stacks are
 *   binary-sized; nvidia-smi shows a "16 GB" V100 as ~16 GiB less what the
 *   driver reserves). salusd keeps its own margin below total_bytes.
 * - pcie_bw is what a pinned host<->device copy achieves in one direction.
 *   Datasheets give the link's bidirectional peak (PCIe 3 x16: 32 GB/s, so
 *   16 GB/s each way). ASSUMPTION: a copy achieves 75% of one direction's
 *   peak, the usual ~12 GB/s of PCIe 3 x16 measured by CUDA's bandwidthTest;
 *   the same fraction is applied to PCIe 4 (24 GB/s) and PCIe 5 (48 GB/s).
 * - launch_ns: ASSUMPTION of 5 us per op for every profile: the order of the
 *   per-kernel launch cost NVIDIA measures on V100 in the "Getting Started
 *   with CUDA Graphs" technical blog (a few us per launch), rounded up to
 *   include a framework's per-op dispatch. The same number is the service
 *   time of the device's one launch path (sim.h, sl_sim_psc_submit_ex;
 *   stream.c; eval/lib/evsim.c): every stream of one device shares it, so one
 *   device launches at most one op per launch_ns in all. ASSUMPTION too:
 *   the blog measures kernels launched back to back by one host thread,
 *   i.e. a throughput of one process issuing into one context, which is
 *   what salusd is; several host threads into one context share the
 *   driver's per-context submission path and the GPU's front end, and we
 *   take none of it to run in parallel (no citable per-context figure).
 *   Measured since through salus's own cuda backend on H200s (driver 580,
 *   bench/device_rtt, one-element ops back to back): 3.4-5.0 us per launch
 *   from one thread, which bears the 5 us out; 1.5-2.0 us per launch
 *   device-wide from four threads with a stream each, so the one-path
 *   part is conservative where several host threads launch (docs/gpu.md,
 *   "Measured on an H200"). The profiles keep 5 us and one path.
 * - graph_launch_ns, graph_node_ns: an iteration replayed as one CUDA Graph
 *   (cudaGraphLaunch of an instantiated graph). ASSUMPTION until measured
 *   on a GPU (scripts/run gpu, BENCH graph_replay), from published figures:
 *   - per replay, 5 us on the launch path: one API call into the same
 *     submission path as a kernel launch, so no cheaper than launch_ns is
 *     taken; NVIDIA's "Constant Time Launch for Straight-Line CUDA Graphs"
 *     technical blog (CUDA 12.6) reports a straight-line graph's host
 *     launch cost independent of its node count, and CUDA.jl's graphs
 *     page measures 3.5 us of CPU time to launch an 80-kernel graph;
 *   - per node, 1 us on the device before the node's work, its stream
 *     idle meanwhile: NVIDIA's "Getting Started with CUDA Graphs" blog
 *     (V100, 20 short kernels of 2.9 us) measures 3.4 us per kernel with a
 *     graph against 3.8 us launched back to back from a stream, so about
 *     0.5 us between nodes; CUDA.jl's page runs 80 small kernels in 70 us
 *     as a graph (under 0.9 us each, work included). Rounded up to 1 us.
 *   The per-node cost is taken per stream (a graph's nodes wait for their
 *   predecessor; other streams' graphs proceed), not on the shared path.
 *
 * - threads_per_sm: 2048 for every profile: the maximum number of resident
 *   threads per SM of compute capabilities 6.0 (P100), 7.0 (V100), 8.0
 *   (A100) and 9.0 (H100, H200), CUDA C++ Programming Guide, "Technical
 *   Specifications per Compute Capability". With sm_count it bounds how
 *   many of a small op's threads run at once (occupancy, sim.h).
 *
 * Efficiency factors (achievable fraction of peak) are calibrated, not
 * published; see EFF_COMPUTE_* / EFF_MEM below. */
#include "profiles.h"

#include "sl_error.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define GIB (1024ull * 1024ull * 1024ull)
#define TFLOPS 1e12
#define GBPS 1e9

/* Efficiency factors: the fraction of peak that cuDNN/cuBLAS-class kernels
 * sustain on compute-bound ops (convolutions, GEMMs) and that streaming
 * kernels sustain on memory-bound ops (element-wise, batch norm, pooling,
 * optimisers). Protocol (bench/sim_models.c prints every figure):
 * - eff_mem 0.80 for every profile: ASSUMPTION (not fitted), the usual
 *   fraction of HBM peak a well-written streaming kernel reaches. None of
 *   the measured workloads here is dominated by memory-bound ops, so none
 *   can identify it.
 * - eff_compute is fitted per profile on ONE measured row, VGG-16 training,
 *   whose time is ~85% compute-bound convolutions:
 *     P100: 0.63, on the Salus artifact's vgg16 batch-50 iteration
 *           (eval/data/salus-workloads.csv, the paper's P100 testbed);
 *     V100: 0.76, on VGG-16 batch 16, TensorFlow 1.5 on a V100
 *           (u39kun/deep-learning-benchmark).
 *   ResNet-50 on both profiles, and the P100 rows of TensorFlow's own
 *   published benchmarks, are out of sample (bench ratios 0.79 to 1.11).
 *   Volta sustaining a larger fraction of its peak than Pascal agrees with
 *   its larger L1/shared memory and separate integer pipes.
 * - A100, H100, H200: ASSUMPTION, V100's factors (no measured FP32 rows for
 *   them here). Their FP32 figure is strict FP32 on CUDA cores; an f32
 *   matmul or convolution runs at the TF32 figure only where the session's
 *   math mode allows it (sl_op_call.math), as with PyTorch's allow_tf32.
 * - Every precision of a profile: ASSUMPTION, the same eff_compute (no
 *   measured tensor-core rows here), so a compute-bound op's time scales
 *   with the ratio of the peaks: 14.8x from FP32 to BF16 on H100. */
#define EFF_COMPUTE_PASCAL 0.63
#define EFF_COMPUTE_VOLTA_ON 0.76
#define EFF_MEM 0.80

#define LAUNCH_NS 5000u
#define GRAPH_LAUNCH_NS 5000u
#define GRAPH_NODE_NS 1000u
#define THREADS_PER_SM 2048u

static const sl_sim_profile profiles[] = {
    {
        .name = "p100",
        .description = "NVIDIA Tesla P100 SXM2 16 GB (sim)",
        /* NVIDIA Tesla P100 whitepaper (GP100, WP-08019-001), Table 1: FP32
         * 10.6 TFLOPS, FP16 21.2 TFLOPS (packed half2 on CUDA cores; no
         * tensor cores, no BF16, no TF32). */
        .peak_flops = {[SL_SIM_FP32] = 10.6 * TFLOPS, [SL_SIM_FP16_TC] = 21.2 * TFLOPS},
        /* NVIDIA Tesla P100 datasheet: 732 GB/s HBM2 (the launch whitepaper
         * quotes 720 GB/s). */
        .mem_bw = 732 * GBPS,
        /* P100 whitepaper: the host link of an SXM2 P100 is PCIe 3.0 x16. */
        .pcie_bw = 12 * GBPS,
        .capacity = 16 * GIB, /* P100 whitepaper: 16 GB HBM2 */
        .sm_count = 56,       /* P100 whitepaper: 56 of GP100's 60 SMs */
        .threads_per_sm = THREADS_PER_SM,
        .launch_ns = LAUNCH_NS,
        .graph_launch_ns = GRAPH_LAUNCH_NS,
        .graph_node_ns = GRAPH_NODE_NS,
        .eff_compute = EFF_COMPUTE_PASCAL,
        .eff_mem = EFF_MEM,
    },
    {
        .name = "v100",
        .description = "NVIDIA Tesla V100 SXM2 16 GB (sim)",
        /* NVIDIA Tesla V100 datasheet (SXM2 column): FP32 15.7 TFLOPS, tensor
         * 125 TFLOPS (FP16 multiply); Volta has no BF16 and no TF32. */
        .peak_flops = {[SL_SIM_FP32] = 15.7 * TFLOPS, [SL_SIM_FP16_TC] = 125 * TFLOPS},
        .mem_bw = 900 * GBPS, /* V100 datasheet: HBM2 900 GB/s */
        /* V100 datasheet: PCIe 32 GB/s (Gen3 x16, both directions). */
        .pcie_bw = 12 * GBPS,
        .capacity = 16 * GIB, /* V100 datasheet: 16 GB (the 32 GB part is not modeled) */
        .sm_count = 80,       /* NVIDIA Tesla V100 GPU Architecture whitepaper: 80 SMs */
        .threads_per_sm = THREADS_PER_SM,
        .launch_ns = LAUNCH_NS,
        .graph_launch_ns = GRAPH_LAUNCH_NS,
        .graph_node_ns = GRAPH_NODE_NS,
        .eff_compute = EFF_COMPUTE_VOLTA_ON,
        .eff_mem = EFF_MEM,
    },
    {
        .name = "a100",
        .description = "NVIDIA A100 SXM4 40 GB (sim)",
        /* NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 1: FP32
         * 19.5 TFLOPS, TF32 tensor 156 TFLOPS, FP16 and BF16 tensor 312
         * TFLOPS (dense; twice that with sparsity). */
        .peak_flops = {[SL_SIM_FP32] = 19.5 * TFLOPS,
                       [SL_SIM_FP16_TC] = 312 * TFLOPS,
                       [SL_SIM_BF16_TC] = 312 * TFLOPS,
                       [SL_SIM_TF32_TC] = 156 * TFLOPS},
        .mem_bw = 1555 * GBPS, /* A100 whitepaper: 1555 GB/s HBM2 (40 GB) */
        /* A100 whitepaper: PCIe Gen 4 host interface (64 GB/s both ways). */
        .pcie_bw = 24 * GBPS,
        .capacity = 40 * GIB, /* A100 whitepaper: 40 GB HBM2 */
        .sm_count = 108,      /* A100 whitepaper: 108 SMs */
        .threads_per_sm = THREADS_PER_SM,
        .launch_ns = LAUNCH_NS,
        .graph_launch_ns = GRAPH_LAUNCH_NS,
        .graph_node_ns = GRAPH_NODE_NS,
        .eff_compute = EFF_COMPUTE_VOLTA_ON,
        .eff_mem = EFF_MEM,
    },
    {
        .name = "a100-80",
        .description = "NVIDIA A100 SXM4 80 GB (sim)",
        /* NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column): same
         * compute as the 40 GB part; TF32 156 TFLOPS and FP16/BF16 312
         * TFLOPS dense (312 and 624 with sparsity). */
        .peak_flops = {[SL_SIM_FP32] = 19.5 * TFLOPS,
                       [SL_SIM_FP16_TC] = 312 * TFLOPS,
                       [SL_SIM_BF16_TC] = 312 * TFLOPS,
                       [SL_SIM_TF32_TC] = 156 * TFLOPS},
        .mem_bw = 2039 * GBPS, /* A100 datasheet: 2039 GB/s HBM2e */
        .pcie_bw = 24 * GBPS,  /* A100 datasheet: PCIe Gen4 64 GB/s */
        .capacity = 80 * GIB,  /* A100 datasheet: 80 GB HBM2e */
        .sm_count = 108,
        .threads_per_sm = THREADS_PER_SM,
        .launch_ns = LAUNCH_NS,
        .graph_launch_ns = GRAPH_LAUNCH_NS,
        .graph_node_ns = GRAPH_NODE_NS,
        .eff_compute = EFF_COMPUTE_VOLTA_ON,
        .eff_mem = EFF_MEM,
    },
    {
        .name = "h100",
        .description = "NVIDIA H100 SXM5 80 GB (sim)",
        /* NVIDIA H100 Tensor Core GPU datasheet (SXM column): FP32 67
         * TFLOPS; TF32 tensor 989 TFLOPS with sparsity, so 494.5 dense;
         * FP16 and BF16 tensor 1979 TFLOPS with sparsity, so 989.5 dense. */
        .peak_flops = {[SL_SIM_FP32] = 67 * TFLOPS,
                       [SL_SIM_FP16_TC] = 989.5 * TFLOPS,
                       [SL_SIM_BF16_TC] = 989.5 * TFLOPS,
                       [SL_SIM_TF32_TC] = 494.5 * TFLOPS},
        .mem_bw = 3350 * GBPS, /* H100 datasheet: 3.35 TB/s HBM3 */
        .pcie_bw = 48 * GBPS,  /* H100 datasheet: PCIe Gen5 128 GB/s */
        .capacity = 80 * GIB,  /* H100 datasheet: 80 GB */
        /* NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs on the
         * SXM5 H100. */
        .sm_count = 132,
        .threads_per_sm = THREADS_PER_SM,
        .launch_ns = LAUNCH_NS,
        .graph_launch_ns = GRAPH_LAUNCH_NS,
        .graph_node_ns = GRAPH_NODE_NS,
        .eff_compute = EFF_COMPUTE_VOLTA_ON,
        .eff_mem = EFF_MEM,
    },
    {
        .name = "h200",
        .description = "NVIDIA H200 SXM 141 GB (sim)",
        /* NVIDIA H200 Tensor Core GPU datasheet (SXM column): FP32 67
         * TFLOPS; TF32 tensor 989 TFLOPS with sparsity (494.5 dense); FP16
         * and BF16 tensor 1979 TFLOPS with sparsity (989.5 dense). */
        .peak_flops = {[SL_SIM_FP32] = 67 * TFLOPS,
                       [SL_SIM_FP16_TC] = 989.5 * TFLOPS,
                       [SL_SIM_BF16_TC] = 989.5 * TFLOPS,
                       [SL_SIM_TF32_TC] = 494.5 * TFLOPS},
        .mem_bw = 4800 * GBPS, /* H200 datasheet: 4.8 TB/s HBM3e */
        .pcie_bw = 48 * GBPS,  /* H200 datasheet: PCIe Gen5 128 GB/s */
        .capacity = 141 * GIB, /* H200 datasheet: 141 GB HBM3e */
        /* The datasheet gives no SM count; H200 is the GH100 GPU of the H100
         * SXM5 (H100 architecture whitepaper: 132 SMs). */
        .sm_count = 132,
        .threads_per_sm = THREADS_PER_SM,
        .launch_ns = LAUNCH_NS,
        .graph_launch_ns = GRAPH_LAUNCH_NS,
        .graph_node_ns = GRAPH_NODE_NS,
        .eff_compute = EFF_COMPUTE_VOLTA_ON,
        .eff_mem = EFF_MEM,
    },
};

#define N_PROFILES (sizeof profiles / sizeof profiles[0])

int sl_sim_profile_find(const char *name, const sl_sim_profile **out)
{
    if (!name || !out)
        return SL_EINVAL;
    for (unsigned i = 0; i < N_PROFILES; i++)
        if (strcasecmp(profiles[i].name, name) == 0) {
            *out = &profiles[i];
            return SL_OK;
        }
    return SL_ENOTFOUND;
}

unsigned sl_sim_profile_count(void)
{
    return N_PROFILES;
}

const sl_sim_profile *sl_sim_profile_at(unsigned i)
{
    return i < N_PROFILES ? &profiles[i] : NULL;
}

char *sl_sim_profile_names(char *buf, size_t len)
{
    if (!buf || len == 0)
        return buf;
    size_t at = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < N_PROFILES && at < len; i++)
        at += (size_t) snprintf(buf + at, len - at, "%s%s", i ? ", " : "", profiles[i].name);
    return buf;
}
