/* A training job for the observability tests: an MLP trained with SGD on
 * random data for exactly --iterations iterations through salusd, then
 * (with --hold) it keeps its session open until its stdin closes, so that
 * a scrape or a trace still sees the session and its exact count.
 *
 * --persistent MIB declares (reserves) that much persistent memory at
 * admission, of which the model's tensors use a little.
 *
 * Prints "session ID" once its session is open and "done N" after N
 * iterations (flushed, for the test driving it). */
#include <salus/salus.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *url = NULL, *name = "job";
    long iterations = 100, width = 256, persistent_mib = 0;
    int priority = 0, hold = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            url = argv[++i];
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc)
            iterations = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--width") == 0 && i + 1 < argc)
            width = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--priority") == 0 && i + 1 < argc)
            priority = atoi(argv[++i]);
        else if (strcmp(argv[i], "--persistent") == 0 && i + 1 < argc)
            persistent_mib = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--hold") == 0)
            hold = 1;
        else {
            fprintf(stderr, "usage: obs_client [--url URL] [--name N] [--iterations N] "
                            "[--width W] [--priority P] [--persistent MIB] [--hold]\n");
            return 2;
        }
    }
    if (iterations < 0 || width < 1 || width > 4096 || persistent_mib < 0 ||
        persistent_mib > 1 << 20)
        return 2;
    enum { B = 32, D = 64, C = 10 };
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc) {
        fprintf(stderr, "[%s] connect: %s: %s\n", name, salus_strerror(rc), salus_last_error(NULL));
        return 1;
    }
    salus_session_opts so = {
        .name = name, .priority = priority, .persistent_bytes = (uint64_t) persistent_mib << 20};
    salus_session *s;
    if ((rc = salus_session_open(c, &so, &s))) {
        fprintf(stderr, "[%s] open: %s: %s\n", name, salus_strerror(rc), salus_last_error(c));
        return 1;
    }
    printf("session %llu\n", (unsigned long long) salus_session_id(s));
    fflush(stdout);
    int64_t dims[1] = {D};
    salus_model *m = salus_model_new(1, dims);
    salus_optimizer opt = {.kind = SALUS_SGD, .lr = 0.01f};
    if (!m || salus_model_dense(m, width) || salus_model_relu(m) || salus_model_dense(m, width) ||
        salus_model_relu(m) || salus_model_dense(m, C) ||
        (rc = salus_model_compile(m, s, &opt, B, B, 7))) {
        fprintf(stderr, "[%s] model: %s\n", name, m ? salus_model_error(m) : "out of memory");
        return 1;
    }
    static float x[B * D];
    static int32_t y[B];
    unsigned r = 12345;
    for (int i = 0; i < B * D; i++)
        x[i] = (float) ((r = r * 1103515245u + 12345u) >> 16) / 65536.0f - 0.5f;
    for (int i = 0; i < B; i++)
        y[i] = i % C;
    for (long k = 0; k < iterations; k++) {
        if ((rc = salus_model_train_step(m, x, y, NULL))) {
            fprintf(stderr, "[%s] step %ld: %s: %s\n", name, k, salus_strerror(rc),
                    salus_last_error(c));
            return 1;
        }
    }
    printf("done %ld\n", iterations);
    fflush(stdout);
    if (hold) {
        char line[64];
        while (fgets(line, sizeof line, stdin)) {
        }
    }
    salus_model_free(m);
    salus_session_close(s);
    salus_disconnect(c);
    return 0;
}
