/* salusctl: command-line control of a running salusd. */
#include "salus/salus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: salusctl [--url URL] COMMAND [ARGS]\n"
            "\n"
            "commands:\n"
            "  status                         sessions, lanes, memory per class, admission\n"
            "                                 queue, counters, your rights and limits (only\n"
            "                                 operators see other users' sessions)\n"
            "  policy NAME [--strict]         switch the scheduling policy at run time\n"
            "                                 (operators: root or salusd's user over ipc://,\n"
            "                                 clients of salusd --operator-listen)\n"
            "  health                         exit 0 when salusd answers a handshake and a\n"
            "                                 status request within 3 s (container probes)\n"
            "  partitions MODE                compute partitions: off, N units (SMs, cores)\n"
            "                                 for high-priority lanes, auto or auto:N (sized\n"
            "                                 from their load; operators)\n"
            "  session ID [--priority P] [--weight W]\n"
            "                                 change a session's priority or fair-share weight\n"
            "                                 (your own within your limits; operators: any)\n"
            "\n"
            "options:\n"
            "  --url URL  server address (default: %s; env SALUS_URL)\n"
            "  --help     this text\n",
            salus_default_url());
}

static int fail(salus_client *c, const char *what, int rc)
{
    fprintf(stderr, "salusctl: %s failed: %s: %s\n", what, salus_strerror(rc), salus_last_error(c));
    salus_disconnect(c);
    return 1;
}

/* A liveness/readiness probe: salusd accepts a connection, speaks our
 * protocol and answers a request, within a short bound of its own so that
 * a probe's timeout is not what ends it. */
static int health(const char *url)
{
    if (!getenv("SALUS_CONNECT_TIMEOUT_MS"))
        setenv("SALUS_CONNECT_TIMEOUT_MS", "3000", 1);
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc != SALUS_OK) {
        fprintf(stderr, "salusctl: unhealthy: %s: %s\n", salus_strerror(rc),
                salus_last_error(NULL));
        return 1;
    }
    char *text;
    if ((rc = salus_status_text(c, &text)) != SALUS_OK)
        return fail(c, "status", rc);
    salus_free(text);
    printf("ok: %s\n", salus_server_device(c));
    salus_disconnect(c);
    return 0;
}

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
    if (strcmp(cmd, "health") == 0)
        return health(url);
    if (strcmp(cmd, "status") && strcmp(cmd, "policy") && strcmp(cmd, "session") &&
        strcmp(cmd, "partitions")) {
        fprintf(stderr, "salusctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc) {
        fprintf(stderr, "salusctl: cannot connect to %s: %s (%s)\n",
                url ? url : salus_default_url(), salus_strerror(rc), salus_last_error(NULL));
        return 1;
    }
    if (strcmp(cmd, "status") == 0) {
        char *text;
        if ((rc = salus_status_text(c, &text)) != SALUS_OK)
            return fail(c, "status", rc);
        fputs(text, stdout);
        salus_free(text);
    } else if (strcmp(cmd, "policy") == 0) {
        if (i == argc) {
            fprintf(stderr, "salusctl: policy needs a name\n");
            salus_disconnect(c);
            return 2;
        }
        const char *name = argv[i++];
        int strict = i < argc && strcmp(argv[i], "--strict") == 0;
        if ((rc = salus_set_policy(c, name, strict)) != SALUS_OK)
            return fail(c, "policy", rc);
        printf("policy: %s%s\n", name, strict ? " (strict)" : "");
    } else if (strcmp(cmd, "partitions") == 0) {
        if (i + 1 != argc) {
            fprintf(stderr, "salusctl: partitions off|auto|auto:N|N\n");
            salus_disconnect(c);
            return 2;
        }
        if ((rc = salus_set_partitions(c, argv[i])) != SALUS_OK)
            return fail(c, "partitions", rc);
        printf("partitions: %s\n", argv[i]);
    } else {
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
        if (!id || (!set_p && !set_w) || i != argc) {
            fprintf(stderr, "salusctl: session ID --priority P and/or --weight W\n");
            salus_disconnect(c);
            return 2;
        }
        if ((rc = salus_set_session(c, id, set_p, prio, set_w, weight)) != SALUS_OK)
            return fail(c, "session", rc);
        printf("session %llu updated\n", id);
    }
    salus_disconnect(c);
    return 0;
}
