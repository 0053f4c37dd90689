/* salusctl: command-line control of a running salusd. */
#include "salus/salus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: salusctl [--url URL] [--json] COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  status                         sessions, lanes, memory per class, admission\n"
            "                                 queue, counters, your rights and limits (only\n"
            "                                 operators see other users' sessions)\n"
            "  sessions                       one line per session: running, or waiting for\n"
            "                                 admission and why\n"
            "  top [--interval S] [--iterations N] [--once]\n"
            "                                 status, refreshed every S seconds (default 1)\n"
            "                                 until interrupted, or N times\n"
            "  health                         exit 0 when salusd answers a handshake and a\n"
            "                                 status request within 3 s (liveness and\n"
            "                                 readiness probes), 1 otherwise\n"
            "  policy NAME [--strict]         switch the scheduling policy at run time\n"
            "                                 (operators: root or salusd's user over ipc://,\n"
            "                                 clients of salusd --operator-listen)\n"
            "  partitions MODE                compute partitions: off, N units (SMs, cores)\n"
            "                                 for high-priority lanes, auto or auto:N (sized\n"
            "                                 from their load), demand (auto while a high-\n"
            "                                 priority job runs; operators)\n"
            "  session ID [--priority P] [--weight W]\n"
            "                                 change a session's priority or fair-share weight\n"
            "                                 (your own within your limits; operators: any)\n"
            "  kill-session ID                close a session (your own; operators: any)\n"
            "  drain                          salusd finishes running iterations and exits\n"
            "                                 (operators)\n"
            "  trace --seconds N -o FILE      record salusd's timeline for N seconds into FILE\n"
            "                                 (Chrome trace event JSON; operators)\n"
            "\n"
            "options:\n"
            "  --url URL  server address (default: %s; env SALUS_URL)\n"
            "  --json     machine-readable output: one JSON document per command (top: one\n"
            "             per refresh, a line each); errors as {\"ok\":false,...}\n"
            "  --help     this text\n",
            salus_default_url());
}

static int json_mode;

/* A JSON string literal of s (names come escaped from the server; this
 * only makes them valid JSON). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char) *s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static int fail(salus_client *c, const char *what, int rc)
{
    if (json_mode) {
        printf("{\"ok\":false,\"command\":");
        json_str(stdout, what);
        printf(",\"code\":%d,\"error\":", rc);
        json_str(stdout, salus_strerror(rc));
        printf(",\"message\":");
        json_str(stdout, salus_last_error(c));
        printf("}\n");
    } else {
        fprintf(stderr, "salusctl: %s failed: %s: %s\n", what, salus_strerror(rc),
                salus_last_error(c));
    }
    return 1;
}

static int usage_error(salus_client *c, const char *msg)
{
    (void) c;
    fprintf(stderr, "salusctl: %s\n", msg);
    return 2;
}

static void ok_json(const char *what, const char *extra)
{
    printf("{\"ok\":true,\"command\":\"%s\"%s%s}\n", what, extra ? "," : "", extra ? extra : "");
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t) s, (long) ((s - (double) (time_t) s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int cmd_status(salus_client *c, int sessions_only)
{
    char *text;
    int rc = json_mode       ? salus_status_json(c, &text)
             : sessions_only ? salus_sessions_text(c, &text)
                             : salus_status_text(c, &text);
    if (rc != SALUS_OK)
        return fail(c, sessions_only ? "sessions" : "status", rc);
    fputs(text, stdout);
    salus_free(text);
    return 0;
}

static int cmd_top(salus_client *c, int argc, char **argv, int i)
{
    double interval = 1;
    long n = -1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--once") == 0)
            n = 1;
        else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc)
            n = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--interval") == 0 && i + 1 < argc)
            interval = strtod(argv[++i], NULL);
        else
            return usage_error(c, "top [--interval S] [--iterations N] [--once]");
    }
    if (!(interval >= 0.05 && interval <= 3600) || n == 0 || n < -1)
        return usage_error(c, "top: --interval takes 0.05..3600 s, --iterations N >= 1");
    int tty = !json_mode && isatty(STDOUT_FILENO);
    for (long k = 0; n < 0 || k < n; k++) {
        if (k)
            sleep_s(interval);
        char *text;
        int rc = json_mode ? salus_status_json(c, &text) : salus_status_text(c, &text);
        if (rc != SALUS_OK)
            return fail(c, "top", rc);
        if (tty)
            fputs("\033[H\033[2J", stdout); /* home, clear: a refreshing view */
        else if (!json_mode && k)
            fputs("\n", stdout);
        fputs(text, stdout);
        fflush(stdout);
        salus_free(text);
    }
    return 0;
}

static int cmd_trace(salus_client *c, int argc, char **argv, int i)
{
    double seconds = 0;
    const char *out = NULL;
    for (; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            seconds = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0)
            out = argv[i + 1];
        else
            break;
    }
    if (i != argc || !out || !(seconds > 0 && seconds <= 3600))
        return usage_error(c, "trace --seconds N (0 < N <= 3600) -o FILE");
    FILE *f = strcmp(out, "-") == 0 ? stdout : fopen(out, "w");
    if (!f) {
        fprintf(stderr, "salusctl: cannot write %s: %s\n", out, strerror(errno));
        return 1;
    }
    int rc = salus_trace_start(c);
    if (rc != SALUS_OK) {
        if (f != stdout)
            fclose(f);
        return fail(c, "trace", rc);
    }
    /* progress on stderr: a line a second, rewritten in place on a terminal */
    int tty = isatty(STDERR_FILENO);
    double left = seconds;
    while (left > 0) {
        double step = left < 1 ? left : 1;
        sleep_s(step);
        left -= step;
        fprintf(stderr,
                tty ? "\rsalusctl: tracing %.0f of %.0f s" : "salusctl: tracing %.0f of %.0f s\n",
                seconds - left, seconds);
    }
    if (tty)
        fputc('\n', stderr);
    char *json;
    size_t n;
    if ((rc = salus_trace_stop_json(c, &json, &n)) != SALUS_OK) {
        if (f != stdout)
            fclose(f);
        return fail(c, "trace", rc);
    }
    int bad = fputs(json, f) < 0;
    bad |= f != stdout && fclose(f) != 0;
    salus_free(json);
    if (bad) {
        fprintf(stderr, "salusctl: writing %s failed: %s\n", out, strerror(errno));
        return 1;
    }
    if (json_mode) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"events\":%zu,\"file\":", n);
        printf("{\"ok\":true,\"command\":\"trace\",%s", extra);
        json_str(stdout, out);
        printf("}\n");
    } else {
        fprintf(stderr, "salusctl: %zu events written to %s\n", n, out);
    }
    return 0;
}

static int cmd_session(salus_client *c, int argc, char **argv, int i)
{
    char *end;
    unsigned long long id = i < argc ? strtoull(argv[i++], &end, 10) : 0;
    int set_p = 0, set_w = 0, prio = 0;
    double weight = 0;
    for (; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--priority") == 0)
            set_p = 1, prio = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--weight") == 0)
            set_w = 1, weight = atof(argv[i + 1]);
    }
    if (!id || (!set_p && !set_w) || i != argc)
        return usage_error(c, "session ID --priority P and/or --weight W");
    int rc = salus_set_session(c, id, set_p, prio, set_w, weight);
    if (rc != SALUS_OK)
        return fail(c, "session", rc);
    if (json_mode) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"session\":%llu", id);
        ok_json("session", extra);
    } else {
        printf("session %llu updated\n", id);
    }
    return 0;
}

/* Runs one command on a connected client; its exit status. */
static int run(salus_client *c, const char *cmd, int argc, char **argv, int i)
{
    int rc = 0;
    if (strcmp(cmd, "status") == 0 || strcmp(cmd, "sessions") == 0) {
        if (i != argc)
            return usage_error(c, "status and sessions take no arguments");
        rc = cmd_status(c, strcmp(cmd, "sessions") == 0);
    } else if (strcmp(cmd, "top") == 0) {
        rc = cmd_top(c, argc, argv, i);
    } else if (strcmp(cmd, "trace") == 0) {
        rc = cmd_trace(c, argc, argv, i);
    } else if (strcmp(cmd, "session") == 0) {
        rc = cmd_session(c, argc, argv, i);
    } else if (strcmp(cmd, "health") == 0) {
        /* connected means salusd answered Hello; Status proves its request
         * path (the lock, the sender) works too */
        char *text;
        if ((rc = salus_status_text(c, &text)) != SALUS_OK)
            return fail(c, "health", rc);
        salus_free(text);
        if (json_mode) {
            printf("{\"ok\":true,\"command\":\"health\",\"device\":");
            json_str(stdout, salus_server_device(c));
            printf("}\n");
        } else {
            printf("ok: salusd answers (device %s)\n", salus_server_device(c));
        }
        rc = 0;
    } else if (strcmp(cmd, "policy") == 0) {
        if (i == argc)
            return usage_error(c, "policy needs a name");
        const char *name = argv[i++];
        int strict = i < argc && strcmp(argv[i], "--strict") == 0;
        if ((rc = salus_set_policy(c, name, strict)) != SALUS_OK)
            return fail(c, "policy", rc);
        if (json_mode)
            printf("{\"ok\":true,\"command\":\"policy\",\"policy\":"), json_str(stdout, name),
                printf(",\"strict\":%s}\n", strict ? "true" : "false");
        else
            printf("policy: %s%s\n", name, strict ? " (strict)" : "");
    } else if (strcmp(cmd, "partitions") == 0) {
        if (i + 1 != argc)
            return usage_error(c, "partitions off|demand|auto|auto:N|N");
        if ((rc = salus_set_partitions(c, argv[i])) != SALUS_OK)
            return fail(c, "partitions", rc);
        if (json_mode)
            printf("{\"ok\":true,\"command\":\"partitions\",\"mode\":"), json_str(stdout, argv[i]),
                printf("}\n");
        else
            printf("partitions: %s\n", argv[i]);
    } else if (strcmp(cmd, "kill-session") == 0) {
        char *end = NULL;
        unsigned long long id = i + 1 == argc ? strtoull(argv[i], &end, 10) : 0;
        if (!id || !end || *end)
            return usage_error(c, "kill-session ID");
        if ((rc = salus_kill_session(c, id)) != SALUS_OK)
            return fail(c, "kill-session", rc);
        if (json_mode) {
            char extra[64];
            snprintf(extra, sizeof extra, "\"session\":%llu", id);
            ok_json("kill-session", extra);
        } else {
            printf("session %llu closed\n", id);
        }
    } else { /* drain */
        if (i != argc)
            return usage_error(c, "drain takes no arguments");
        if ((rc = salus_drain(c)) != SALUS_OK)
            return fail(c, "drain", rc);
        if (json_mode)
            ok_json("drain", NULL);
        else
            printf("salusd is draining\n");
    }
    return rc;
}

static const char *const commands[] = {"status",       "sessions",   "top",   "health",
                                       "policy",       "session",    "drain", "trace",
                                       "kill-session", "partitions", NULL};

int main(int argc, char **argv)
{
    const char *url = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            json_mode = 1;
        } else {
            fprintf(stderr, "salusctl: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (i == argc) {
        fprintf(stderr, "salusctl: no command given\n");
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[i++];
    /* --json may also follow the command */
    for (int k = i; k < argc; k++)
        if (strcmp(argv[k], "--json") == 0) {
            json_mode = 1;
            memmove(&argv[k], &argv[k + 1], (size_t) (argc - k - 1) * sizeof *argv);
            argc--;
            k--;
        }
    int known = 0;
    for (const char *const *p = commands; *p; p++)
        known |= strcmp(*p, cmd) == 0;
    if (!known) {
        fprintf(stderr, "salusctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    /* a probe answers within a bound of its own, not the probe's timeout */
    if (strcmp(cmd, "health") == 0 && !getenv("SALUS_CONNECT_TIMEOUT_MS"))
        setenv("SALUS_CONNECT_TIMEOUT_MS", "3000", 1);
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc) {
        if (json_mode) {
            printf("{\"ok\":false,\"command\":");
            json_str(stdout, cmd);
            printf(",\"code\":%d,\"error\":", rc);
            json_str(stdout, salus_strerror(rc));
            printf(",\"message\":");
            json_str(stdout, salus_last_error(NULL));
            printf("}\n");
        } else {
            fprintf(stderr, "salusctl: cannot connect to %s: %s (%s)\n",
                    url ? url : salus_default_url(), salus_strerror(rc), salus_last_error(NULL));
        }
        return 1;
    }
    rc = run(c, cmd, argc, argv, i);
    salus_disconnect(c);
    return rc;
}
