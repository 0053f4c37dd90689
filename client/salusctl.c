/* salusctl: command-line control of a running salusd. */
#include "salus/salus.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: salusctl [--url URL] COMMAND\n"
            "\n"
            "commands:\n"
            "  status     print sessions, lanes, memory per class and counters\n"
            "\n"
            "options:\n"
            "  --url URL  server address (default: %s; env SALUS_URL)\n"
            "  --help     this text\n",
            salus_default_url());
}

int main(int argc, char **argv)
{
    const char *url = NULL, *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url = argv[++i];
        } else if (!cmd && argv[i][0] != '-') {
            cmd = argv[i];
        } else {
            fprintf(stderr, "salusctl: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!cmd || strcmp(cmd, "status") != 0) {
        fprintf(stderr, "salusctl: %s\n", cmd ? "unknown command" : "no command given");
        usage(stderr);
        return 2;
    }
    salus_client *c;
    int rc = salus_connect(url, &c);
    if (rc) {
        fprintf(stderr, "salusctl: cannot connect: %s\n", salus_strerror(rc));
        return 1;
    }
    char *text;
    rc = salus_status_text(c, &text);
    if (rc) {
        fprintf(stderr, "salusctl: status failed: %s: %s\n", salus_strerror(rc),
                salus_last_error(c));
        salus_disconnect(c);
        return 1;
    }
    fputs(text, stdout);
    salus_free(text);
    salus_disconnect(c);
    return 0;
}
