/* bench/tenant_fairness: one tenant with 1 session beside a tenant with 8
 * (each session training the Fashion-MNIST MLP shapes; bench/tenant_load.h),
 * on one salusd, cpu device, under fair, srtf, priority (one class) and
 * pack, each in its rounds interleaved with the others; the one-session
 * tenant's share of the device time the two attain over a window. Shared
 * per session it would be 1/9. Each tenant runs as its own user (nobody,
 * daemon): needs root, exits 77 otherwise. Prints per policy
 *   BENCH tenant_fairness policy=P sessions=8:1 share=MEDIAN min=... max=...
 * and the same figures as JSON.
 *   tenant_fairness --salusd PATH [--rounds 5] [--seconds 5] [--json FILE] */
#include "bench_util.h"
#include "tenant_load.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 50

static const char *const policies[] = {"fair", "srtf", "priority", "pack"};
#define N_POLICIES (sizeof policies / sizeof policies[0])

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--tenant-child") == 0)
        return tl_child_main(argc, argv);
    const char *salusd = NULL, *json = NULL;
    int rounds = 5;
    double seconds = 5, warm = 2;
    static const struct option lo[] = {{"salusd", 1, NULL, 's'},
                                       {"rounds", 1, NULL, 'r'},
                                       {"seconds", 1, NULL, 'S'},
                                       {"json", 1, NULL, 'j'},
                                       {0}};
    for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
        if (c == 's')
            salusd = optarg;
        else if (c == 'r')
            rounds = atoi(optarg);
        else if (c == 'S')
            seconds = atof(optarg);
        else if (c == 'j')
            json = optarg;
        else
            return 2;
    }
    if (!salusd || rounds < 1 || rounds > MAX_ROUNDS || seconds <= 0) {
        fprintf(stderr, "usage: tenant_fairness --salusd PATH [--rounds N] [--seconds S] "
                        "[--json FILE]\n");
        return 2;
    }
    if (!tl_can_split()) {
        printf("tenant_fairness needs root, to run the tenants as two users: skipped\n");
        return 77;
    }
    static double share[N_POLICIES][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        for (size_t k = 0; k < N_POLICIES; k++) {
            size_t p = (k + (size_t) r) % N_POLICIES; /* rotate which goes first */
            const char *args[] = {"--policy", policies[p], "--log-level", "warn", NULL};
            if (tl_round(argv[0], salusd, args, 1, 8, warm, seconds, &share[p][r]) != 0)
                return 1;
            printf("round %d policy=%s share=%.3f\n", r + 1, policies[p], share[p][r]);
            fflush(stdout);
        }
    }
    FILE *f = json ? fopen(json, "w") : NULL;
    if (f)
        fprintf(f,
                "{\"bench\":\"tenant_fairness\",\"sessions\":\"8:1\",\"seconds\":%.1f,"
                "\"rounds\":%d",
                seconds, rounds);
    for (size_t p = 0; p < N_POLICIES; p++) {
        double lo_v = share[p][0], hi_v = share[p][0];
        for (int r = 1; r < rounds; r++) {
            lo_v = share[p][r] < lo_v ? share[p][r] : lo_v;
            hi_v = share[p][r] > hi_v ? share[p][r] : hi_v;
        }
        double med = sl_ts_median(share[p], (size_t) rounds);
        if (f) {
            char key[32];
            snprintf(key, sizeof key, "%s_shares", policies[p]);
            fprintf(f, ",\"%s_share\":%.4f", policies[p], med);
            bench_json_array(f, key, share[p], rounds, "%.4f");
        }
        printf("BENCH tenant_fairness policy=%s sessions=8:1 share=%.3f min=%.3f max=%.3f "
               "rounds=%d seconds=%.0f\n",
               policies[p], med, lo_v, hi_v, rounds, seconds);
    }
    if (f) {
        fputs("}\n", f);
        fclose(f);
    }
    return 0;
}
