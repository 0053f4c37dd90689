/* bench/decode: salusd's request decoding (server/decode.h: an arena per
 * request under a budget) against protobuf-c's own allocator (malloc for
 * every piece), side by side in one run, on the requests of the hot path
 * and of registration:
 *   run    a Run of rtt_op's size: one 64-float feed, one fetch;
 *   graph  a RegisterGraph of a 3-layer MLP's training graph (about 40
 *          ops with attributes).
 * Each round decodes and frees each request `iters` times per side,
 * interleaved; a sample is the mean time of one decode + free. ratio =
 * arena median / malloc median over rounds.
 *
 *   decode [--rounds 10] [--iters 20000] [--json FILE]
 *
 * Last lines:
 *   BENCH decode_run ratio=... arena_ns=... malloc_ns=...
 *   BENCH decode_graph ratio=... arena_ns=... malloc_ns=... */
#include "bench_util.h"
#include "decode.h"
#include "sl_error.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 64
#define GRAPH_OPS 40

static uint8_t *pack(const Salus__Request *req, size_t *len)
{
    *len = salus__request__get_packed_size(req);
    uint8_t *buf = malloc(*len);
    if (buf)
        salus__request__pack(req, buf);
    return buf;
}

static uint8_t *run_request(size_t *len)
{
    static float feed[64];
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Run run = SALUS__RUN__INIT;
    ProtobufCBinaryData feeds[1] = {{sizeof feed, (uint8_t *) feed}};
    uint32_t fetch = 2;
    req.seq = 12345;
    req.session_id = 1ull << 39;
    req.token = 0x123456789abcdefull;
    run.graph_id = 7;
    run.n_feeds = 1;
    run.feeds = feeds;
    run.n_fetches = 1;
    run.fetches = &fetch;
    req.body_case = SALUS__REQUEST__BODY_RUN;
    req.run = &run;
    return pack(&req, len);
}

static uint8_t *graph_request(size_t *len)
{
    static Salus__Op ops[GRAPH_OPS], *op_ptrs[GRAPH_OPS];
    static uint32_t inputs[GRAPH_OPS][3];
    static int64_t iattrs[2] = {0, 1};
    static float fattrs[1] = {0.01f};
    static const char *types[] = {"matmul", "bias_add", "relu", "relu_grad", "sgd_update"};
    for (int i = 0; i < GRAPH_OPS; i++) {
        salus__op__init(&ops[i]);
        ops[i].type = (char *) types[i % 5];
        for (int k = 0; k < 3; k++)
            inputs[i][k] = (uint32_t) (i + k);
        ops[i].n_inputs = 1 + (size_t) (i % 3);
        ops[i].inputs = inputs[i];
        ops[i].n_iattrs = (size_t) (i % 3 == 0) * 2;
        ops[i].iattrs = iattrs;
        ops[i].n_fattrs = i % 5 == 4;
        ops[i].fattrs = fattrs;
        op_ptrs[i] = &ops[i];
    }
    Salus__TensorDesc in = SALUS__TENSOR_DESC__INIT, *ins[1] = {&in};
    int64_t dims[2] = {128, 784};
    in.n_dims = 2;
    in.dims = dims;
    uint64_t params[6] = {1, 2, 3, 4, 5, 6};
    Salus__Graph graph = SALUS__GRAPH__INIT;
    graph.n_inputs = 1;
    graph.inputs = ins;
    graph.n_params = 6;
    graph.params = params;
    graph.n_ops = GRAPH_OPS;
    graph.ops = op_ptrs;
    Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
    rg.graph = &graph;
    Salus__Request req = SALUS__REQUEST__INIT;
    req.seq = 3;
    req.session_id = 1ull << 39;
    req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req.register_graph = &rg;
    return pack(&req, len);
}

/* Mean ns of one decode + free of buf, through the arena or malloc. */
static double time_decode(sl_decoder *d, const uint8_t *buf, size_t len, int iters, bool arena)
{
    char why[256];
    uint64_t t0 = sl_ts_now_ns();
    for (int i = 0; i < iters; i++) {
        if (arena) {
            Salus__Request *m = NULL;
            if (sl_decode_request(d, buf, len, &m, why, sizeof why) != SL_OK) {
                fprintf(stderr, "decode: %s\n", why);
                exit(1);
            }
            sl_request_free(m);
        } else {
            Salus__Request *m = salus__request__unpack(NULL, len, buf);
            if (!m)
                exit(1);
            salus__request__free_unpacked(m, NULL);
        }
    }
    return (double) (sl_ts_now_ns() - t0) / iters;
}

int main(int argc, char **argv)
{
    int rounds = 10, iters = 20000;
    const char *json = NULL;
    static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
                                         {"iters", required_argument, NULL, 'i'},
                                         {"json", required_argument, NULL, 'j'},
                                         {0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'r')
            rounds = atoi(optarg);
        else if (o == 'i')
            iters = atoi(optarg);
        else if (o == 'j')
            json = optarg;
        else {
            fprintf(stderr, "usage: decode [--rounds N] [--iters N] [--json FILE]\n");
            return 2;
        }
    }
    if (rounds < 3 || rounds > MAX_ROUNDS || iters < 100) {
        fprintf(stderr, "decode: --rounds 3..%d, --iters >= 100\n", MAX_ROUNDS);
        return 2;
    }
    bench_pin_cpu0();
    sl_decoder d;
    sl_decoder_init(&d, 0);
    size_t len[2];
    uint8_t *req[2] = {run_request(&len[0]), graph_request(&len[1])};
    if (!req[0] || !req[1])
        return 1;
    const char *names[2] = {"decode_run", "decode_graph"};
    double arena[2][MAX_ROUNDS], plain[2][MAX_ROUNDS];
    for (int k = 0; k < 2; k++) { /* warm-up */
        (void) time_decode(&d, req[k], len[k], iters / 10, true);
        (void) time_decode(&d, req[k], len[k], iters / 10, false);
    }
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            /* alternate which side goes first */
            bool first = r % 2 == 0;
            double a = time_decode(&d, req[k], len[k], iters, first);
            double b = time_decode(&d, req[k], len[k], iters, !first);
            arena[k][r] = first ? a : b;
            plain[k][r] = first ? b : a;
        }
    }
    FILE *f = json ? fopen(json, "w") : NULL;
    if (f)
        fprintf(f, "{");
    for (int k = 0; k < 2; k++) {
        double am = sl_ts_median(arena[k], (size_t) rounds),
               pm = sl_ts_median(plain[k], (size_t) rounds);
        printf("BENCH %s ratio=%.3f arena_ns=%.1f malloc_ns=%.1f bytes=%zu\n", names[k], am / pm,
               am, pm, len[k]);
        if (f)
            fprintf(f, "%s\"%s\": {\"ratio\": %.4f, \"arena_ns\": %.1f, \"malloc_ns\": %.1f}",
                    k ? ", " : "", names[k], am / pm, am, pm);
    }
    if (f) {
        fprintf(f, "}\n");
        fclose(f);
    }
    free(req[0]);
    free(req[1]);
    return 0;
}
