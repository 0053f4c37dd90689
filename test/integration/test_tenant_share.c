/* Device time is shared between tenants first, then between a tenant's
 * sessions: a tenant with 8 sessions beside a tenant with 1 gets about half
 * the device, not 8/9, under fair, srtf, priority (one class) and pack; a
 * tenant of weight 2 (--user-limits UID:weight=2) gets about two thirds.
 * Real salusd on the cpu backend, each tenant a child process under its own
 * uid (nobody, daemon): needs root, skipped otherwise. The sessions have
 * lanes of their own (memory is plentiful), so this is also the share of
 * lanes and their concurrency. Bounds are generous: behaviour, not timing
 * (bench/tenant_fairness measures the figures). */
#include "sl_test.h"

#include "tenant_load.h"

#include <stdio.h>
#include <string.h>

static const char *self_path;

/* A's share with n_a against n_b sessions under policy (and extra args). */
static double share_of(const char *policy, const char *extra, const char *extra_value, int n_a,
                       int n_b)
{
    const char *salusd = getenv("SALUSD");
    if (!salusd)
        fail_msg("SALUSD is not set");
    const char *args[] = {"--policy", policy, "--memory-limit", "1G", extra, extra_value, NULL};
    double share = 0;
    if (tl_round(self_path, salusd, args, n_a, n_b, 1.5, 3.0, &share) != 0)
        fail_msg("the round under %s failed", policy);
    printf("policy=%s sessions=%d:%d%s%s share=%.3f\n", policy, n_b, n_a, extra ? " " : "",
           extra ? extra_value : "", share);
    return share;
}

static void check_half(const char *policy)
{
    double share = share_of(policy, NULL, NULL, 1, 8);
    /* per session it would be 1/9 */
    if (share < 0.3 || share > 0.7)
        fail_msg("under %s the 1-session tenant got %.3f of the device beside 8 sessions, not "
                 "about half",
                 policy, share);
}

static void test_fair(void **state)
{
    (void) state;
    check_half("fair");
}

static void test_srtf(void **state)
{
    (void) state;
    check_half("srtf");
}

static void test_priority(void **state)
{
    (void) state;
    check_half("priority");
}

static void test_pack(void **state)
{
    (void) state;
    check_half("pack");
}

static void test_weight(void **state)
{
    (void) state;
    char rule[32];
    snprintf(rule, sizeof rule, "%u:weight=2", TL_UID_A);
    double share = share_of("fair", "--user-limits", rule, 1, 8);
    if (share < 0.55 || share > 0.9)
        fail_msg("a tenant of weight 2 got %.3f of the device, not about 2/3", share);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--tenant-child") == 0)
        return tl_child_main(argc, argv);
    if (!tl_can_split()) {
        printf("needs root, to run the tenants as two users: skipped\n");
        return 77;
    }
    self_path = argv[0];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fair), cmocka_unit_test(test_srtf),   cmocka_unit_test(test_priority),
        cmocka_unit_test(test_pack), cmocka_unit_test(test_weight),
    };
    return cmocka_run_group_tests_name("tenant share", tests, NULL, NULL);
}
