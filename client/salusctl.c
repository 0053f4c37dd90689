/* salusctl: command-line control of a running salusd. */
#include "salus/salus.h"

#include <errno.h>
#include <nng/nng.h>
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
            "                                 until interrupted, or N times; while salusd is\n"
            "                                 away (restarting) it shows reconnecting... and\n"
            "                                 tries again, backing off from 0.25 s to 5 s\n"
            "  health                         exit 0 when salusd answers a handshake and a\n"
            "                                 status request within 3 s (liveness and\n"
            "                                 readiness probes), 1 otherwise\n"
            "  policy NAME [--strict]         switch the scheduling policy at run time\n"
            "                                 (operators: root or salusd's user over ipc://,\n"
            "                                 clients of salusd --operator-listen)\n"
            "  partitions [MODE]              without MODE: the compute partitions in force\n"
            "                                 (mode, units online and offline); with MODE,\n"
            "                                 sets them (operators): off, N units (SMs,\n"
            "                                 cores) for high-priority lanes, auto or auto:N\n"
            "                                 (sized from their load), demand (auto while a\n"
            "                                 high-priority job runs)\n"
            "  session ID [--priority P] [--weight W]\n"
            "                                 change a session's priority or fair-share weight\n"
            "                                 (your own within your limits; operators: any)\n"
            "  kill-session ID                close a session (your own; operators: any)\n"
            "  drain                          salusd finishes running iterations and exits\n"
            "                                 (operators)\n"
            "  trace --seconds N -o FILE      record salusd's timeline for N seconds (0.1 to\n"
            "                                 3600, decimals allowed) into FILE (Chrome trace\n"
            "                                 event JSON; - for stdout; operators); exits 1\n"
            "                                 and writes nothing when no event was recorded\n"
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

/* Whether rc says salusd is gone or restarting, rather than refusing:
 * top waits for it to come back. */
static int server_lost(int rc)
{
    return rc == SALUS_ECONN || rc == SALUS_ETIMEDOUT || rc == SALUS_ESHUTDOWN;
}

/* top's state while salusd is away: on the screen (a terminal), a line
 * on stderr (a pipe) or a JSON line in the stream of refreshes. */
static void show_reconnecting(const char *url, int rc, const char *why, unsigned attempt,
                              double retry_s, int tty)
{
    if (json_mode) {
        printf("{\"ok\":false,\"command\":\"top\",\"state\":\"reconnecting\",\"attempt\":%u,"
               "\"retry_s\":%g,\"code\":%d,\"error\":",
               attempt, retry_s, rc);
        json_str(stdout, salus_strerror(rc));
        printf(",\"message\":");
        json_str(stdout, why);
        printf("}\n");
        fflush(stdout);
    } else if (tty) {
        printf("\033[H\033[2Jsalusd at %s: %s\nreconnecting... attempt %u, next in %g s\n", url,
               *why ? why : salus_strerror(rc), attempt, retry_s);
        fflush(stdout);
    } else {
        fprintf(stderr, "salusctl: top: salusd at %s: %s; reconnecting... attempt %u\n", url,
                *why ? why : salus_strerror(rc), attempt);
    }
}

/* Connects again after salusd went away: tries at once, then backs off
 * (0.25 s doubling to 5 s) until it answers. *cp is replaced (NULL while
 * away). Returns SALUS_OK, or the first error that is not salusd's
 * absence (a refusal: the new salusd runs as a user not trusted, another
 * protocol version). */
static int reconnect(salus_client **cp, const char *url, int rc, int tty)
{
    char why[256];
    snprintf(why, sizeof why, "%s", salus_last_error(*cp));
    salus_disconnect(*cp); /* a fresh client: a new salusd's handshake */
    *cp = NULL;
    double backoff = 0.25;
    for (unsigned attempt = 1;; attempt++) {
        show_reconnecting(url, rc, why, attempt, backoff, tty);
        if ((rc = salus_connect(url, cp)) == SALUS_OK)
            return SALUS_OK;
        if (!server_lost(rc))
            return rc;
        snprintf(why, sizeof why, "%s", salus_last_error(NULL));
        sleep_s(backoff);
        backoff = backoff * 2 < 5 ? backoff * 2 : 5;
    }
}

static int cmd_top(salus_client **cp, const char *url, int argc, char **argv, int i)
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
            return usage_error(*cp, "top [--interval S] [--iterations N] [--once]");
    }
    if (!(interval >= 0.05 && interval <= 3600) || n == 0 || n < -1)
        return usage_error(*cp, "top: --interval takes 0.05..3600 s, --iterations N >= 1");
    int tty = !json_mode && isatty(STDOUT_FILENO);
    /* k counts refreshes shown; a refresh lost to a restart is tried
     * again once salusd is back, without the interval's wait */
    int wait = 0;
    for (long k = 0; n < 0 || k < n;) {
        if (wait)
            sleep_s(interval);
        char *text;
        int rc = json_mode ? salus_status_json(*cp, &text) : salus_status_text(*cp, &text);
        if (rc != SALUS_OK) {
            if (!server_lost(rc))
                return fail(*cp, "top", rc);
            if ((rc = reconnect(cp, url, rc, tty)) != SALUS_OK)
                return fail(*cp, "top", rc);
            wait = 0;
            continue;
        }
        if (tty)
            fputs("\033[H\033[2J", stdout); /* home, clear: a refreshing view */
        else if (!json_mode && k)
            fputs("\n", stdout);
        fputs(text, stdout);
        fflush(stdout);
        salus_free(text);
        k++;
        wait = 1;
    }
    return 0;
}

/* Seconds from text, all of it ("0.5", not "0.5s"), within [lo, hi]. */
static int parse_seconds(const char *text, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* Whether out can be written, checked before salusd records anything:
 * the file is written only once there is a trace to put in it. */
static int writable(const char *out)
{
    if (access(out, F_OK) == 0)
        return access(out, W_OK) == 0;
    char dir[4096];
    const char *slash = strrchr(out, '/');
    if (!slash)
        return access(".", W_OK | X_OK) == 0;
    size_t len = slash == out ? 1 : (size_t) (slash - out);
    if (len >= sizeof dir) {
        errno = ENAMETOOLONG;
        return 0;
    }
    memcpy(dir, out, len);
    dir[len] = '\0';
    return access(dir, W_OK | X_OK) == 0;
}

/* The shortest trace: a few iterations of a small job; the longest: what
 * salusd's ring holds of a busy device, and then some. */
#define TRACE_MIN_S 0.1
#define TRACE_MAX_S 3600.0

static int cmd_trace(salus_client *c, int argc, char **argv, int i)
{
    double seconds = 0;
    const char *out = NULL, *sec_text = NULL;
    for (; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--seconds") == 0)
            sec_text = argv[i + 1];
        else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0)
            out = argv[i + 1];
        else
            break;
    }
    if (i != argc || !out || !sec_text)
        return usage_error(c, "trace --seconds N -o FILE (N from 0.1 to 3600, decimals allowed)");
    if (parse_seconds(sec_text, TRACE_MIN_S, TRACE_MAX_S, &seconds) != 0) {
        fprintf(stderr,
                "salusctl: trace: --seconds takes a number of seconds from %g to %g "
                "(decimals allowed), not '%s'\n",
                TRACE_MIN_S, TRACE_MAX_S, sec_text);
        return 2;
    }
    int to_stdout = strcmp(out, "-") == 0;
    if (!to_stdout && !writable(out)) {
        fprintf(stderr, "salusctl: cannot write %s: %s\n", out, strerror(errno));
        return 1;
    }
    int rc = salus_trace_start(c);
    if (rc != SALUS_OK)
        return fail(c, "trace", rc);
    /* progress on stderr: a line a second, rewritten in place on a terminal */
    int tty = isatty(STDERR_FILENO);
    double left = seconds;
    while (left > 0) {
        double step = left < 1 ? left : 1;
        sleep_s(step);
        left -= step;
        fprintf(stderr, tty ? "\rsalusctl: tracing %g of %g s" : "salusctl: tracing %g of %g s\n",
                seconds - left, seconds);
    }
    if (tty)
        fputc('\n', stderr);
    char *json;
    size_t n;
    if ((rc = salus_trace_stop_json(c, &json, &n)) != SALUS_OK)
        return fail(c, "trace", rc);
    if (n == 0) {
        /* a trace with nothing in it looks like a trace of an idle device
         * and like a broken recording alike: say which it is instead */
        salus_free(json);
        char msg[256];
        snprintf(msg, sizeof msg,
                 "salusd recorded no events in %g s (no iteration ran to its end, no session "
                 "waited): trace while jobs run, or for longer; %s not written",
                 seconds, to_stdout ? "nothing" : out);
        if (json_mode) {
            printf("{\"ok\":false,\"command\":\"trace\",\"events\":0,\"error\":\"no events\","
                   "\"message\":");
            json_str(stdout, msg);
            printf("}\n");
        } else {
            fprintf(stderr, "salusctl: trace: %s\n", msg);
        }
        return 1;
    }
    FILE *f = to_stdout ? stdout : fopen(out, "w");
    if (!f) {
        fprintf(stderr, "salusctl: cannot write %s: %s\n", out, strerror(errno));
        salus_free(json);
        return 1;
    }
    int bad = fputs(json, f) < 0;
    bad |= !to_stdout && fclose(f) != 0;
    salus_free(json);
    if (bad) {
        fprintf(stderr, "salusctl: writing %s failed: %s\n", out, strerror(errno));
        return 1;
    }
    if (json_mode) {
        char extra[64];
        snprintf(extra, sizeof extra, "\"events\":%zu,\"seconds\":%g,\"file\":", n, seconds);
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

/* The partitions in force: the query form of `partitions`. */
static int cmd_partitions(salus_client *c)
{
    char *text;
    int rc = json_mode ? salus_partitions_json(c, &text) : salus_partitions_text(c, &text);
    if (rc != SALUS_OK)
        return fail(c, "partitions", rc);
    if (json_mode) {
        text[strcspn(text, "\n")] = '\0'; /* one document on one line */
        printf("{\"ok\":true,\"command\":\"partitions\",\"partitions\":%s}\n", text);
    } else
        fputs(text, stdout);
    salus_free(text);
    return 0;
}

/* Runs one command on a connected client (top may replace it: *cp); its
 * exit status. */
static int run(salus_client **cp, const char *url, const char *cmd, int argc, char **argv, int i)
{
    salus_client *c = *cp;
    int rc = 0;
    if (strcmp(cmd, "status") == 0 || strcmp(cmd, "sessions") == 0) {
        if (i != argc)
            return usage_error(c, "status and sessions take no arguments");
        rc = cmd_status(c, strcmp(cmd, "sessions") == 0);
    } else if (strcmp(cmd, "top") == 0) {
        rc = cmd_top(cp, url ? url : salus_default_url(), argc, argv, i);
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
        if (i == argc)
            return cmd_partitions(c);
        if (i + 1 != argc)
            return usage_error(c, "partitions [off|demand|auto|auto:N|N]");
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
    rc = run(&c, url, cmd, argc, argv, i);
    salus_disconnect(c);
    /* NNG reaps a closed connection on its own threads; after top replaced
     * one whose peer had gone, that may still be pending. Let it finish, so
     * that leak checkers see a clean exit. */
    nng_fini();
    return rc;
}
