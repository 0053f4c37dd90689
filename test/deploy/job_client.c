/* A salus client run inside Slurm job steps by test_slurm.sh (and by the
 * container test): it reaches salusd through $SALUS_URL and names its job
 * step through $SALUS_JOB, as any libsalusclient program does.
 *
 *   job_client open BYTES...      opens one session per argument, each
 *                                 declaring BYTES persistent bytes, on one
 *                                 connection; prints "open ID" or
 *                                 "refused CODE: why" per session, then the
 *                                 status text salusd shows this user
 *   job_client hold FILE          leaves the step's process tree (setsid,
 *                                 double fork), opens a session and writes
 *                                 "PID ID TOKEN" to FILE; then uses the
 *                                 session every 100 ms until salusd closes
 *                                 it, and writes "lost CODE" to FILE.end
 *                                 (gives up after 300 s)
 *   job_client train STEPS        opens a session declaring nothing, as a
 *                                 first program does, and trains a small
 *                                 model for STEPS steps: prints "trained
 *                                 STEPS", or "refused CODE: why" and
 *                                 exits 1
 *   job_client probe ID TOKEN     tries another job's session, knowing its
 *                                 id and token: prints the codes of a
 *                                 tensor request in it and of a priority
 *                                 change, and whether status shows it
 * Exit status 0 unless the client could not run (connect failed, bad
 * arguments) or, for train, did not train: what salusd answered is in the
 * output for the test to judge. */
#include "client_internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static salus_client *connect_or_die(void)
{
    salus_client *c;
    if (salus_connect(NULL, &c) != SALUS_OK) {
        fprintf(stderr, "job_client: cannot connect to %s: %s\n", salus_default_url(),
                salus_last_error(NULL));
        exit(2);
    }
    return c;
}

static int cmd_open(int argc, char **argv)
{
    salus_client *c = connect_or_die();
    salus_session *s[16];
    int n = 0;
    for (int i = 0; i < argc && n < 16; i++) {
        salus_session_opts o = {.name = "job-client",
                                .persistent_bytes = strtoull(argv[i], NULL, 10),
                                .ephemeral_bytes = 1 << 20};
        int rc = salus_session_open(c, &o, &s[n]);
        if (rc == SALUS_OK)
            printf("open %" PRIu64 "\n", s[n++]->id);
        else
            printf("refused %d: %s\n", rc, salus_last_error(c));
    }
    char *text;
    if (salus_status_text(c, &text) == SALUS_OK) {
        printf("%s\n", text);
        salus_free(text);
    }
    fflush(stdout);
    for (int i = 0; i < n; i++)
        (void) salus_session_close(s[i]);
    salus_disconnect(c);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        _exit(3);
    fputs(text, f);
    fclose(f);
    if (rename(tmp, path) != 0)
        _exit(3);
}

static int cmd_hold(const char *file)
{
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid > 0) { /* the step's process: wait until the holder is in place */
        struct stat st;
        for (int i = 0; i < 300 && stat(file, &st) != 0; i++)
            usleep(100000);
        return stat(file, &st) == 0 ? 0 : 2;
    }
    /* out of the step's process tree and its output, as a daemon a job
     * starts would be (the step waits for every holder of its output) */
    if (setsid() < 0 || fork() != 0)
        _exit(0);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
        _exit(3);
    if (devnull > 2)
        close(devnull);
    salus_client *c = connect_or_die();
    salus_session *s;
    salus_session_opts o = {
        .name = "left-behind", .persistent_bytes = 1 << 20, .ephemeral_bytes = 1 << 20};
    int rc = salus_session_open(c, &o, &s);
    char line[256];
    if (rc != SALUS_OK) {
        snprintf(line, sizeof line, "refused %d %s\n", rc, salus_last_error(c));
        write_file(file, line);
        _exit(1);
    }
    snprintf(line, sizeof line, "%d %" PRIu64 " %" PRIu64 "\n", (int) getpid(), s->id, s->token);
    write_file(file, line);
    char end[4096];
    snprintf(end, sizeof end, "%s.end", file);
    for (int i = 0; i < 3000; i++) {
        uint64_t t;
        rc = salus_tensor_create(s, 0, 1, (int64_t[]){4}, NULL, &t);
        if (rc == SALUS_OK)
            rc = salus_tensor_free(s, t);
        if (rc != SALUS_OK) {
            snprintf(line, sizeof line, "lost %d %s\n", rc, salus_last_error(c));
            write_file(end, line);
            _exit(0);
        }
        usleep(100000);
    }
    write_file(end, "timeout\n");
    _exit(1);
}

static int cmd_probe(const char *id, const char *token)
{
    salus_client *c = connect_or_die();
    /* a handle on someone else's session, as if its id and token leaked */
    salus_session other = {
        .client = c, .id = strtoull(id, NULL, 10), .token = strtoull(token, NULL, 10)};
    pthread_mutex_init(&other.shm_lock, NULL);
    int read_rc = salus_tensor_free(&other, 1);
    printf("tensor %d: %s\n", read_rc, salus_last_error(c));
    int set_rc = salus_set_session(c, other.id, 1, 0, 0, 0);
    printf("set %d: %s\n", set_rc, salus_last_error(c));
    char *text;
    if (salus_status_text(c, &text) == SALUS_OK) {
        printf("visible %d\n", strstr(text, id) != NULL);
        salus_free(text);
    }
    pthread_mutex_destroy(&other.shm_lock);
    salus_disconnect(c);
    return 0;
}

static int cmd_train(long steps)
{
    salus_client *c = connect_or_die();
    salus_session *s;
    salus_session_opts o = {.name = "job-train"};
    int rc = salus_session_open(c, &o, &s);
    if (rc != SALUS_OK) {
        printf("refused %d: %s\n", rc, salus_last_error(c));
        salus_disconnect(c);
        return 1;
    }
    enum { B = 16, D = 32, C = 4 };
    salus_model *m = salus_model_new(1, (const int64_t[]){D});
    salus_optimizer sgd = {.kind = SALUS_SGD, .lr = 0.01f};
    if (!m || salus_model_dense(m, 64) || salus_model_relu(m) || salus_model_dense(m, C))
        rc = SALUS_ENOMEM;
    else
        rc = salus_model_compile(m, s, &sgd, B, B, 7);
    static float x[B * D];
    static int32_t y[B];
    for (int i = 0; i < B * D; i++)
        x[i] = (float) (i % 7) / 7.0f - 0.5f;
    for (int i = 0; i < B; i++)
        y[i] = i % C;
    long done = 0;
    while (rc == SALUS_OK && done < steps && (rc = salus_model_train_step(m, x, y, NULL)) == 0)
        done++;
    if (rc != SALUS_OK)
        printf("refused %d: %s\n", rc, salus_last_error(c));
    else
        printf("trained %ld\n", done);
    salus_model_free(m);
    (void) salus_session_close(s);
    salus_disconnect(c);
    return rc == SALUS_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "open") == 0)
        return cmd_open(argc - 2, argv + 2);
    if (argc == 3 && strcmp(argv[1], "hold") == 0)
        return cmd_hold(argv[2]);
    if (argc == 4 && strcmp(argv[1], "probe") == 0)
        return cmd_probe(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "train") == 0 && atol(argv[2]) > 0)
        return cmd_train(atol(argv[2]));
    fprintf(stderr, "usage: job_client open BYTES... | hold FILE | train STEPS | probe ID TOKEN\n");
    return 2;
}
