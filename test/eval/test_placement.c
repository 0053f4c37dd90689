/* Tests of the placement policies (eval/lib/placement.h): the Hungarian
 * matching against exhaustive search on small random matrices (square,
 * rectangular both ways, with forbidden pairs), greedy's bounds, the
 * no-sharing baseline and gang placement on 8-GPU servers. */
#include "sl_test.h"

#include "manager.h"
#include "placement.h"
#include "evsim.h"
#include "workload.h"

#include <stdbool.h>
#include <string.h>

#define MAXN 7

/* The best total over every assignment of jobs to distinct GPUs (or none),
 * by exhaustive search: the reference the matching must equal. */
static double brute(const double *w, size_t nj, size_t ng, size_t job, bool *used)
{
    if (job == nj)
        return 0;
    double best = brute(w, nj, ng, job + 1, used); /* job unmatched */
    for (size_t g = 0; g < ng; g++) {
        double x = w[job * ng + g];
        if (used[g] || x == SL_PLACE_FORBIDDEN)
            continue;
        used[g] = true;
        double t = x + brute(w, nj, ng, job + 1, used);
        used[g] = false;
        if (t > best)
            best = t;
    }
    return best;
}

/* A matching is valid: every GPU used once at most, no forbidden pair, and
 * the total it reports is the sum of its pairs. */
static void check_valid(const double *w, size_t nj, size_t ng, const int *out, double total)
{
    bool used[MAXN] = {false};
    double t = 0;
    for (size_t i = 0; i < nj; i++) {
        if (out[i] < 0)
            continue;
        assert_true((size_t) out[i] < ng);
        assert_false(used[out[i]]);
        used[out[i]] = true;
        assert_true(w[i * ng + (size_t) out[i]] != SL_PLACE_FORBIDDEN);
        t += w[i * ng + (size_t) out[i]];
    }
    assert_true(t == total);
}

static void test_match_optimal(void **state)
{
    (void) state;
    sl_eval_rng r;
    sl_eval_rng_seed(&r, 42);
    for (int trial = 0; trial < 400; trial++) {
        size_t nj = 1 + sl_eval_rng_next(&r) % MAXN, ng = 1 + sl_eval_rng_next(&r) % MAXN;
        double w[MAXN * MAXN];
        for (size_t k = 0; k < nj * ng; k++) {
            double u = sl_eval_rng_uniform(&r);
            /* a fifth forbidden, some exact ties (integer weights) */
            w[k] = u < 0.2 ? SL_PLACE_FORBIDDEN : (double) (sl_eval_rng_next(&r) % 10);
        }
        int out[MAXN], gout[MAXN];
        double total, gtotal;
        bool used[MAXN] = {false};
        double best = brute(w, nj, ng, 0, used);
        assert_sl_ok(sl_place_match(w, nj, ng, out, &total));
        check_valid(w, nj, ng, out, total);
        assert_true(total == best);
        assert_sl_ok(sl_place_greedy(w, nj, ng, gout, &gtotal));
        check_valid(w, nj, ng, gout, gtotal);
        assert_true(gtotal <= best && 2 * gtotal >= best);
    }
}

/* The classic case where greedy loses: taking the heaviest pair blocks two
 * nearly as heavy ones. */
static void test_greedy_suboptimal(void **state)
{
    (void) state;
    const double w[4] = {10, 9, 9, 0};
    int out[2];
    double total;
    assert_sl_ok(sl_place_greedy(w, 2, 2, out, &total));
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    assert_true(total == 10);
    assert_sl_ok(sl_place_match(w, 2, 2, out, &total));
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 0);
    assert_true(total == 18);
}

static void test_invalid(void **state)
{
    (void) state;
    double w[2] = {1, -1};
    int out[2];
    assert_sl_err(sl_place_match(w, 1, 2, out, NULL), SL_EINVAL);
    w[1] = NAN;
    assert_sl_err(sl_place_greedy(w, 1, 2, out, NULL), SL_EINVAL);
    w[1] = INFINITY;
    assert_sl_err(sl_place_match(w, 1, 2, out, NULL), SL_EINVAL);
    assert_sl_err(sl_place_match(NULL, 1, 2, out, NULL), SL_EINVAL);
    /* no GPUs: every job unmatched */
    out[0] = 5;
    assert_sl_ok(sl_place_match(NULL, 1, 0, out, NULL));
    assert_int_equal(out[0], -1);
}

static void test_one_per_gpu(void **state)
{
    (void) state;
    const bool free[4] = {false, true, false, true};
    int out[3];
    assert_sl_ok(sl_place_one_per_gpu(3, free, 4, out));
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], -1);
}

static void test_gang(void **state)
{
    (void) state;
    unsigned take[4];
    bool frag;
    /* best fit on one server: the one with the fewest free that holds 3 */
    const unsigned a[4] = {8, 4, 3, 2};
    assert_sl_ok(sl_place_gang(a, 4, 8, 3, SL_PLACE_PACKED, take, &frag));
    assert_int_equal(take[2], 3);
    assert_int_equal(take[0] + take[1] + take[3], 0);
    /* 12 GPUs packed: one whole server and 4 on a best-fit other */
    assert_sl_ok(sl_place_gang(a, 4, 8, 12, SL_PLACE_PACKED, take, &frag));
    assert_int_equal(take[0], 8);
    assert_int_equal(take[1], 4);
    /* 6 GPUs: 17 free in all but no server holds 6 besides server 0 */
    const unsigned b[4] = {5, 4, 3, 5};
    assert_sl_err(sl_place_gang(b, 4, 8, 6, SL_PLACE_PACKED, take, &frag), SL_EEXHAUSTED);
    assert_true(frag);
    /* relaxed: the fewest servers, largest first */
    assert_sl_ok(sl_place_gang(b, 4, 8, 6, SL_PLACE_RELAXED, take, &frag));
    assert_int_equal(take[0], 5);
    assert_int_equal(take[3], 1);
    assert_int_equal(take[1] + take[2], 0);
    /* capacity, not fragmentation */
    assert_sl_err(sl_place_gang(b, 4, 8, 18, SL_PLACE_RELAXED, take, &frag), SL_EEXHAUSTED);
    assert_false(frag);
    assert_sl_err(sl_place_gang(b, 4, 8, 0, SL_PLACE_RELAXED, take, &frag), SL_EINVAL);
    const unsigned c[1] = {9};
    assert_sl_err(sl_place_gang(c, 1, 8, 1, SL_PLACE_RELAXED, take, &frag), SL_EINVAL);
}

/* The per-GPU memory manager the cluster experiments use is salusd's for
 * that device: capacity less 5 %, and admission refuses what cannot fit. */
static void test_gpu_memory(void **state)
{
    (void) state;
    sl_eval_config cfg = sl_eval_config_default("fair", false, 1, 16ull << 30);
    sl_mem_mgr *m;
    assert_sl_ok(sl_eval_gpu_memory(&cfg, &m));
    sl_mem_stats st;
    sl_mem_get_stats(m, &st);
    assert_int_equal(st.capacity, ((16ull << 30) - (16ull << 30) / 20) & ~(uint64_t) 255);
    int reason;
    uint32_t lane;
    assert_sl_ok(sl_mem_admit_ex(m, 1, 8ull << 30, 1ull << 30, 0, &reason, &lane));
    assert_sl_err(sl_mem_admit_ex(m, 2, 8ull << 30, 1ull << 30, 0, &reason, &lane), SL_EEXHAUSTED);
    sl_mem_mgr_destroy(m);
    cfg.gpu_bytes = 1 << 20;
    assert_sl_err(sl_eval_gpu_memory(&cfg, &m), SL_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_optimal), cmocka_unit_test(test_greedy_suboptimal),
        cmocka_unit_test(test_invalid),       cmocka_unit_test(test_one_per_gpu),
        cmocka_unit_test(test_gang),          cmocka_unit_test(test_gpu_memory),
    };
    return cmocka_run_group_tests_name("eval placement", tests, NULL, NULL);
}
