/* salusd-flags: writes the OPTIONS part of salusd.8 from the flag table
 * (flags.h), and checks that the man page, salusd --help and salusd
 * --print-config say what the table says.
 *
 *   salusd-flags man FILE            rewrite FILE's part between the markers
 *   salusd-flags check FILE SALUSD   exit 1, naming each disagreement
 *
 * --help and --print-config are read from a running salusd and parsed
 * here independently of the code that wrote them, so a flag handled
 * outside the table, or an output drawn from elsewhere, shows up. */
#include "flags.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEXT (1 << 20)

static int problems;

static void problem(const char *what, const char *name, const char *detail)
{
    fprintf(stderr, "%s: --%s: %s\n", what, name, detail);
    problems++;
}

/* The whole of stream f (NUL-terminated, the caller frees), or NULL. */
static char *slurp(FILE *f)
{
    char *buf = malloc(MAX_TEXT);
    if (!buf)
        return NULL;
    size_t n = fread(buf, 1, MAX_TEXT - 1, f);
    buf[n] = '\0';
    return buf;
}

static char *read_path(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return NULL;
    }
    char *text = slurp(f);
    fclose(f);
    return text;
}

/* salusd's output for args (a shell fragment of fixed words), or NULL. */
static char *run(const char *salusd, const char *args)
{
    char cmd[4096];
    if (strchr(salusd, '\'')) {
        fprintf(stderr, "salusd-flags: a path with a quote: %s\n", salusd);
        return NULL;
    }
    snprintf(cmd, sizeof cmd, "'%s' %s", salusd, args);
    FILE *p = popen(cmd, "r");
    if (!p) {
        perror(cmd);
        return NULL;
    }
    char *out = slurp(p);
    int rc = pclose(p);
    if (rc != 0) {
        fprintf(stderr, "salusd-flags: %s exited with status %d\n", cmd, rc);
        free(out);
        return NULL;
    }
    return out;
}

/* The generated part, as salusd.8 should hold it. */
static char *generated(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fprintf(f, "%s\n", SL_FLAGS_MAN_BEGIN);
    fprintf(f, ".\\\" Generated from the flag table, server/flags_table.c, by `ninja -C build "
               "update-man`: edit the table, not this part.\n");
    sl_flags_man(f);
    fprintf(f, "%s\n", SL_FLAGS_MAN_END);
    fclose(f);
    return text;
}

/* Where the generated part starts and ends in page (end: past its last
 * line), or false. */
static bool find_part(const char *page, const char **start, const char **end)
{
    const char *b = strstr(page, SL_FLAGS_MAN_BEGIN "\n");
    const char *e = b ? strstr(b, SL_FLAGS_MAN_END "\n") : NULL;
    if (!b || !e || (b != page && b[-1] != '\n'))
        return false;
    *start = b;
    *end = e + strlen(SL_FLAGS_MAN_END "\n");
    return true;
}

static int write_man(const char *path)
{
    char *page = read_path(path), *part = generated();
    const char *start, *end;
    int rc = 1;
    if (!page || !part)
        goto out;
    if (!find_part(page, &start, &end)) {
        fprintf(stderr, "%s: no '%s' ... '%s' lines to replace\n", path, SL_FLAGS_MAN_BEGIN,
                SL_FLAGS_MAN_END);
        goto out;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        goto out;
    }
    fwrite(page, 1, (size_t) (start - page), f);
    fputs(part, f);
    fputs(end, f);
    rc = fclose(f) == 0 ? 0 : 1;
out:
    free(page);
    free(part);
    return rc;
}

static void check_man(const char *path)
{
    char *page = read_path(path), *part = generated();
    const char *start, *end;
    if (!page || !part) {
        problems++;
    } else if (!find_part(page, &start, &end)) {
        fprintf(stderr, "%s: no '%s' ... '%s' lines\n", path, SL_FLAGS_MAN_BEGIN, SL_FLAGS_MAN_END);
        problems++;
    } else if (strlen(part) != (size_t) (end - start) || memcmp(part, start, strlen(part)) != 0) {
        fprintf(stderr,
                "%s: its OPTIONS part is stale; run `ninja -C build update-man` and commit it\n",
                path);
        problems++;
    }
    free(page);
    free(part);
}

/* Copies s with every run of blanks and newlines made one space. */
static void squeeze(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    bool space = false;
    for (size_t i = 0; i < len && n + 2 < cap; i++) {
        if (isspace((unsigned char) s[i])) {
            space = n > 0;
            continue;
        }
        if (space)
            dst[n++] = ' ';
        space = false;
        dst[n++] = s[i];
    }
    dst[n] = '\0';
}

/* The flag an entry line of --help starts: "  -X, --name ARG" or
 * "      --name ARG"; its name into name. */
static bool help_entry(const char *line, char *name, size_t cap, char *shortopt)
{
    *shortopt = 0;
    if (strncmp(line, "  -", 3) == 0 && line[3] != '-' && strncmp(line + 4, ", --", 4) == 0) {
        *shortopt = line[3];
        line += 8;
    } else if (strncmp(line, "      --", 8) == 0) {
        line += 8;
    } else {
        return false;
    }
    size_t n = strspn(line, "abcdefghijklmnopqrstuvwxyz-");
    if (!n || n >= cap)
        return false;
    memcpy(name, line, n);
    name[n] = '\0';
    return true;
}

/* Every table flag has one --help entry with its short form, argument,
 * help and default; every entry is a table flag. */
static void check_help(const char *help)
{
    bool seen[256] = {false};
    for (const char *line = help; *line;) {
        const char *next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        char name[64], shortopt;
        if (!help_entry(line, name, sizeof name, &shortopt)) {
            line = next;
            continue;
        }
        /* the entry runs on over lines indented past the flags */
        const char *stop = next;
        while (strncmp(stop, "        ", 8) == 0) {
            const char *nl = strchr(stop, '\n');
            stop = nl ? nl + 1 : stop + strlen(stop);
        }
        static char entry[8192], want[8192];
        squeeze(entry, sizeof entry, line, (size_t) (stop - line));
        const sl_flag *f = sl_flag_find(name);
        if (!f) {
            problem("--help", name, "not in the flag table");
        } else if (seen[f - sl_flags]) {
            problem("--help", name, "listed twice");
        } else {
            seen[f - sl_flags] = true;
            if (shortopt != f->short_opt)
                problem("--help", name, "its short form differs from the table's");
            char head[128];
            snprintf(head, sizeof head, "--%s%s%s ", f->name, f->arg ? " " : "",
                     f->arg ? f->arg : "");
            if (!strstr(entry, head))
                problem("--help", name, "its argument differs from the table's");
            squeeze(want, sizeof want, f->help, strlen(f->help));
            if (!strstr(entry, want))
                problem("--help", name, "its text differs from the table's");
            const char *def = f->def ? f->def : f->def_text;
            if (def) {
                char shown[1024];
                snprintf(shown, sizeof shown, "(default: %s)", def);
                squeeze(want, sizeof want, shown, strlen(shown));
                if (!strstr(entry, want))
                    problem("--help", name, "does not show the table's default");
            }
        }
        line = stop;
    }
    for (int i = 0; i < sl_flags_count; i++)
        if (!seen[i])
            problem("--help", sl_flags[i].name, "missing");
}

/* Every key of the table is one line of --print-config (salusd given
 * only --listen), the others at their default; no other keys. */
static void check_print_config(const char *out)
{
    bool seen[256] = {false};
    for (const char *line = out; *line;) {
        const char *next = strchr(line, '\n');
        size_t len = next ? (size_t) (next - line) : strlen(line);
        next = next ? next + 1 : line + len;
        char text[4096];
        snprintf(text, sizeof text, "%.*s", (int) len, line);
        bool commented = strncmp(text, "# ", 2) == 0;
        const char *key = commented ? text + 2 : text;
        size_t n = strspn(key, "abcdefghijklmnopqrstuvwxyz-");
        line = next;
        if (!n || strncmp(key + n, " =", 2) != 0)
            continue; /* a comment */
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int) n, key);
        const sl_flag *f = sl_flag_find(name);
        if (!f || !sl_flag_is_key(f)) {
            problem("--print-config", name, "not a key of the flag table");
            continue;
        }
        if (seen[f - sl_flags]) {
            problem("--print-config", name, "printed twice");
            continue;
        }
        seen[f - sl_flags] = true;
        if (strcmp(name, "listen") == 0) {
            if (commented || strcmp(key + n, " = ipc:///salus-lint/salus.sock") != 0)
                problem("--print-config", name, "does not show the --listen given");
            continue;
        }
        char want[1024];
        if (f->def)
            snprintf(want, sizeof want, " = %s", f->def);
        else if (f->kind == SL_FLAG_SWITCH)
            snprintf(want, sizeof want, " = false");
        else
            snprintf(want, sizeof want, " =");
        if (f->def_text)
            snprintf(want + strlen(want), sizeof want - strlen(want), "  # default: %s",
                     f->def_text);
        if (!commented || strcmp(key + n, want) != 0)
            problem("--print-config", name, "not commented out at the table's default");
    }
    for (int i = 0; i < sl_flags_count; i++)
        if (sl_flag_is_key(&sl_flags[i]) && !seen[i])
            problem("--print-config", sl_flags[i].name, "missing");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "man") == 0)
        return write_man(argv[2]);
    if (argc != 4 || strcmp(argv[1], "check") != 0) {
        fprintf(stderr, "usage: salusd-flags man FILE | check FILE SALUSD\n");
        return 2;
    }
    check_man(argv[2]);
    char *help = run(argv[3], "--help");
    char *printed = run(argv[3], "--listen ipc:///salus-lint/salus.sock --print-config");
    if (help)
        check_help(help);
    if (printed)
        check_print_config(printed);
    problems += !help + !printed;
    free(help);
    free(printed);
    if (problems)
        fprintf(stderr, "%d disagreement(s) with the flag table (server/flags_table.c)\n",
                problems);
    return problems ? 1 : 0;
}
