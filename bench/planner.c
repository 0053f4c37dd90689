/* bench/planner: the static ephemeral planner's peak against the naive sum
 * (every ephemeral tensor allocated separately) for the training graphs of
 * the MLP (784-256-128-10) and the CNN (2 conv + pool + dense) of the
 * Fashion-MNIST examples, batch 128, as salusd plans them at registration
 * (server embedded in this process over inproc://), and side by side the
 * peak without in-place execution (salusd --no-inplace). One line per model:
 *   BENCH planner model=mlp planned=... naive=... ratio=... planned_no_inplace=...
 * (goal: ratio <= 0.5) */
#include "fashion_mnist.h"
#include "server.h"
#include "sl_error.h"
#include "sl_log.h"

#include <salus/salus.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *json = argc > 2 && strcmp(argv[1], "--json") == 0 ? argv[2] : NULL;
    sl_server srv = {.cfg = SL_CONFIG_DEFAULTS};
    srv.cfg.listen[srv.cfg.n_listen++] = "inproc://salus-planner";
    srv.cfg.memory_limit = 1ull << 30;
    sl_log_set_level("warn");
    if (sl_server_start(&srv) != SL_OK)
        return 1;
    salus_client *c;
    salus_session *s;
    if (salus_connect("inproc://salus-planner", &c) || salus_session_open(c, NULL, &s))
        return 1;
    FILE *f = json ? fopen(json, "w") : NULL;
    const char *models[] = {"mlp", "cnn"};
    char lines[2][160];
    int status = 0;
    for (int i = 0; i < 2; i++) {
        salus_optimizer opt = {.kind = SALUS_MOMENTUM, .lr = 0.02f, .momentum = 0.9f};
        uint64_t peak, naive, peak_copy = 0, naive_copy;
        salus_model *m = NULL;
        for (int inplace = 0; inplace < 2; inplace++) { /* without first, then as reported */
            salus_model_free(m);
            m = fmnist_model(models[i]);
            pthread_mutex_lock(&srv.lock);
            srv.cfg.no_inplace = !inplace;
            pthread_mutex_unlock(&srv.lock);
            if (salus_model_compile(m, s, &opt, 128, 128, 1) ||
                salus_graph_memory(salus_model_training_graph(m), &peak, &naive)) {
                fprintf(stderr, "planner: %s: %s\n", models[i],
                        salus_model_error(m) ? salus_model_error(m) : salus_last_error(c));
                status = 1;
                break;
            }
            if (!inplace) {
                peak_copy = peak;
                naive_copy = naive;
            }
        }
        if (status) {
            salus_model_free(m);
            continue;
        }
        if (naive_copy != naive)
            fprintf(stderr, "planner: %s: naive differs without in-place (%llu)\n", models[i],
                    (unsigned long long) naive_copy);
        printf("%s training graph, batch 128: planned %.2f MiB, naive %.2f MiB\n", models[i],
               (double) peak / (1 << 20), (double) naive / (1 << 20));
        snprintf(
            lines[i], sizeof lines[i],
            "BENCH planner model=%s planned=%llu naive=%llu ratio=%.3f planned_no_inplace=%llu",
            models[i], (unsigned long long) peak, (unsigned long long) naive,
            (double) peak / (double) naive, (unsigned long long) peak_copy);
        if (f)
            fprintf(f,
                    "%s{\"model\":\"%s\",\"planned\":%llu,\"naive\":%llu,\"ratio\":%.4f,"
                    "\"planned_no_inplace\":%llu}%s",
                    i ? "" : "[", models[i], (unsigned long long) peak, (unsigned long long) naive,
                    (double) peak / (double) naive, (unsigned long long) peak_copy,
                    i ? "]\n" : ",");
        salus_model_free(m);
    }
    if (f)
        fclose(f);
    (void) salus_session_close(s);
    salus_disconnect(c);
    sl_server_stop(&srv);
    for (int i = 0; i < 2 && !status; i++)
        puts(lines[i]);
    return status;
}
