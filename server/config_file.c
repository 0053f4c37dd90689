/* The configuration file (config_file.h). */
#include "config_file.h"

#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest file and line read: a configuration, not a data set. */
#define MAX_FILE_BYTES (1 << 20)
#define MAX_LINE 4096
#define MAX_NOTES 512

/* Where each argument of the expanded argv came from (NULL: the command
 * line), and what was applied, in order. */
static char **origins;
/* the argv made, kept until the next call (options point into it);
 * volatile: otherwise only written, and the compiler would drop it */
static char **volatile expanded;
static int n_origins;
static struct note {
    const sl_flag *flag;
    const char *arg;
} notes[MAX_NOTES];
static int n_notes;

/* Frees an earlier call's argv: the file's settings are the arguments
 * with an origin. */
static void forget(void)
{
    for (int i = 0; origins && i < n_origins; i++)
        if (origins[i]) {
            free(expanded[i]);
            free(origins[i]);
        }
    free(origins);
    free(expanded);
    origins = NULL;
    expanded = NULL;
    n_origins = 0;
    n_notes = 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char) *s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char) s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Whether the command line itself gives flag f (--name, --name=..., or
 * its short form). */
static bool on_command_line(int argc, char **argv, const sl_flag *f)
{
    size_t len = strlen(f->name);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0)
            break;
        if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, f->name, len) == 0 &&
            (a[2 + len] == '\0' || a[2 + len] == '='))
            return true;
        if (a[0] == '-' && a[1] != '-' && f->short_opt && a[1] == f->short_opt)
            return true;
    }
    return false;
}

typedef struct setting {
    char *arg;    /* "--key=value" or "--key" */
    char *origin; /* "FILE:LINE" */
    const sl_flag *flag;
} setting;

/* Whether the open file may configure salusd: a regular file or a pipe,
 * owned by root or by salusd's user, that neither group nor others may
 * write. The open descriptor is checked, not the path, so a file swapped
 * in after the check is never read; its directory is not checked, because
 * whatever is renamed or linked into it still has to pass this. */
static bool file_trusted(FILE *f, const char *path, FILE *err)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fprintf(err, "salusd: --config %s: %s\n", path, strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        fprintf(err, "salusd: --config %s: not a regular file\n", path);
        return false;
    }
    uid_t me = geteuid();
    if ((st.st_uid == 0 || st.st_uid == me) && !(st.st_mode & 022))
        return true;
    char owner[64];
    struct passwd *pw = getpwuid(st.st_uid);
    if (pw)
        snprintf(owner, sizeof owner, "%u (%s)", (unsigned) st.st_uid, pw->pw_name);
    else
        snprintf(owner, sizeof owner, "%u", (unsigned) st.st_uid);
    fprintf(err,
            "salusd: --config %s: refusing it: owned by uid %s with mode %04o; a configuration "
            "file must belong to root or to salusd's user (uid %u) and must not be writable by "
            "group or others, since its settings include listeners and operator rights. Fix: "
            "chown root %s && chmod go-w %s\n",
            path, owner, (unsigned) (st.st_mode & 07777), (unsigned) me, path, path);
    return false;
}

/* Whether key reads like a flag name (lowercase letters, digits, dashes):
 * only such a key is repeated in an error, so that a line of a file that
 * is not a configuration is never printed. */
static bool key_printable(const char *key)
{
    size_t n = 0;
    for (; key[n]; n++)
        if (!(islower((unsigned char) key[n]) || isdigit((unsigned char) key[n]) || key[n] == '-'))
            return false;
    return n > 0 && n <= 40;
}

/* Parses the file into settings; 2 after printing an error. Errors name
 * the line and at most its key, never its content: salusd may run with
 * more rights than whoever chose the file. */
static int read_file(const char *path, FILE *err, setting **out, int *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(err, "salusd: --config %s: %s\n", path, strerror(errno));
        return 2;
    }
    if (!file_trusted(f, path, err)) {
        fclose(f);
        return 2;
    }
    setting *list = NULL;
    int n = 0, cap = 0, lineno = 0, rc = 0;
    long total = 0;
    char line[MAX_LINE + 2];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        total += (long) len;
        if (total > MAX_FILE_BYTES || (len == sizeof line - 1 && line[len - 1] != '\n')) {
            fprintf(err,
                    "salusd: %s:%d: line or file too long (a line holds at most %d "
                    "bytes, the file %d)\n",
                    path, lineno, MAX_LINE, MAX_FILE_BYTES);
            rc = 2;
            break;
        }
        char *s = line, *hash = NULL;
        bool quoted = false;
        for (char *p = s; *p; p++) {
            if (*p == '"')
                quoted = !quoted;
            else if (*p == '#' && !quoted) {
                hash = p;
                break;
            }
        }
        if (hash)
            *hash = '\0';
        s = trim(s);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(err, "salusd: %s:%d: expected 'key = value' (the line is not shown)\n", path,
                    lineno);
            rc = 2;
            break;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = '\0';
            val++;
        }
        const sl_flag *flag = sl_flag_find(key);
        if (!flag || !sl_flag_is_key(flag)) {
            fprintf(err,
                    "salusd: %s:%d: unknown key%s%s%s (the keys are salusd's long flags, "
                    "see salusd --help and salusd --print-config)\n",
                    path, lineno, key_printable(key) ? " '" : "", key_printable(key) ? key : "",
                    key_printable(key) ? "'" : "");
            rc = 2;
            break;
        }
        char *arg;
        if (!flag->arg) {
            if (strcmp(val, "true") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "1") == 0) {
                arg = malloc(strlen(key) + 3);
                if (arg)
                    sprintf(arg, "--%s", key);
            } else if (strcmp(val, "false") == 0 || strcmp(val, "no") == 0 ||
                       strcmp(val, "0") == 0) {
                continue;
            } else {
                fprintf(err, "salusd: %s:%d: '%s' takes true or false\n", path, lineno, key);
                rc = 2;
                break;
            }
        } else {
            if (!*val) {
                fprintf(err, "salusd: %s:%d: '%s' needs a value\n", path, lineno, key);
                rc = 2;
                break;
            }
            arg = malloc(strlen(key) + strlen(val) + 4);
            if (arg)
                sprintf(arg, "--%s=%s", key, val);
        }
        char *origin = malloc(strlen(path) + 24);
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            setting *grown = realloc(list, (size_t) cap * sizeof *list);
            if (!grown) {
                free(arg);
                free(origin);
                rc = 2;
                break;
            }
            list = grown;
        }
        if (!arg || !origin) {
            free(arg);
            free(origin);
            fprintf(err, "salusd: out of memory reading %s\n", path);
            rc = 2;
            break;
        }
        sprintf(origin, "%s:%d", path, lineno);
        list[n++] = (setting){arg, origin, flag};
    }
    if (!rc && ferror(f)) {
        fprintf(err, "salusd: --config %s: read error\n", path);
        rc = 2;
    }
    fclose(f);
    if (rc) {
        for (int k = 0; k < n; k++) {
            free(list[k].arg);
            free(list[k].origin);
        }
        free(list);
        list = NULL;
        n = 0;
    }
    *out = list;
    *n_out = n;
    return rc;
}

int sl_cfgfile_expand(int argc, char **argv, FILE *err, int *out_argc, char ***out_argv,
                      bool *print)
{
    const char *path = NULL;
    *print = false;
    forget();
    /* the command line without --config and --print-config */
    char **rest = calloc((size_t) argc + 1, sizeof *rest);
    if (!rest)
        return 2;
    int n_rest = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            while (i < argc)
                rest[n_rest++] = argv[i++];
            break;
        }
        if (strcmp(argv[i], "--print-config") == 0) {
            *print = true;
        } else if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 == argc) {
                fprintf(err, "salusd: --config needs a FILE\n");
                free(rest);
                return 2;
            }
            path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            path = argv[i] + 9;
        } else {
            rest[n_rest++] = argv[i];
        }
    }
    setting *file = NULL;
    int n_file = 0;
    if (path && read_file(path, err, &file, &n_file) != 0) {
        free(rest);
        return 2;
    }
    char **all = calloc((size_t) (n_file + n_rest + 2), sizeof *all);
    origins = calloc((size_t) (n_file + n_rest + 2), sizeof *origins);
    if (!all || !origins) {
        fprintf(err, "salusd: out of memory\n");
        free(all);
        free(origins);
        origins = NULL;
        free(rest);
        return 2; /* the file's strings go with the process */
    }
    int n = 0;
    all[n++] = argv[0];
    for (int k = 0; k < n_file; k++) {
        const sl_flag *flag = file[k].flag;
        if ((flag->traits & SL_FLAG_REPEATABLE) && on_command_line(n_rest, rest, flag)) {
            free(file[k].arg); /* the command line's replace the file's */
            free(file[k].origin);
            continue;
        }
        origins[n] = file[k].origin;
        all[n++] = file[k].arg;
    }
    for (int k = 0; k < n_rest; k++)
        all[n++] = rest[k];
    free(rest);
    free(file); /* its strings live on in all and origins */
    expanded = all;
    n_origins = n;
    *out_argc = n;
    *out_argv = all;
    return 0;
}

void sl_cfgfile_note(const sl_flag *f, const char *arg)
{
    if (n_notes < MAX_NOTES)
        notes[n_notes++] = (struct note){f, arg};
}

const char *sl_cfgfile_origin_of(int index)
{
    return origins && index >= 0 && index < n_origins ? origins[index] : NULL;
}

/* A value as the file writes it: quoted when it has a '#' or outer
 * spaces. */
static void print_value(FILE *f, const char *v)
{
    bool quote = strchr(v, '#') || isspace((unsigned char) v[0]) ||
                 (*v && isspace((unsigned char) v[strlen(v) - 1]));
    fprintf(f, quote ? "\"%s\"" : "%s", v);
}

/* An unset key, commented out with its default. */
static void print_default(FILE *f, const sl_flag *flag)
{
    const char *now = flag->def_now ? flag->def_now() : NULL;
    fprintf(f, "# %s =", flag->name);
    if (now && *now) {
        fputc(' ', f);
        print_value(f, now);
    } else if (flag->def) {
        fputc(' ', f);
        print_value(f, flag->def);
    } else if (flag->kind == SL_FLAG_SWITCH) {
        fprintf(f, " false");
    }
    if (flag->def_text && !(now && *now))
        fprintf(f, "  # default: %s", flag->def_text);
    fputc('\n', f);
}

void sl_cfgfile_print(FILE *f)
{
    fprintf(f, "# salusd configuration (salusd --config FILE); keys are salusd's long flags\n"
               "# (salusd --help), commented-out ones are at the default they show\n");
    for (int i = 0; i < sl_flags_count; i++) {
        const sl_flag *flag = &sl_flags[i];
        if (!sl_flag_is_key(flag))
            continue;
        bool rep = flag->traits & SL_FLAG_REPEATABLE;
        int last = -1;
        for (int k = 0; k < n_notes; k++) {
            if (notes[k].flag != flag)
                continue;
            last = k;
            if (rep) {
                fprintf(f, "%s = ", flag->name);
                print_value(f, notes[k].arg ? notes[k].arg : "true");
                fputc('\n', f);
            }
        }
        if (!rep && last >= 0) {
            fprintf(f, "%s = ", flag->name);
            print_value(f, notes[last].arg ? notes[last].arg : "true");
            fputc('\n', f);
        }
        if (last < 0)
            print_default(f, flag);
    }
}
