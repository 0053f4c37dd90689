/* Checked conversions of option arguments (cli.h). */
#include "cli.h"

#include "sl_text.h"
#include "sim/profiles.h"
#include "sl_error.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *program = "eval";

void sl_cli_init(const char *argv0)
{
    if (!argv0 || !*argv0) {
        program = "eval";
        return;
    }
    const char *slash = strrchr(argv0, '/');
    program = slash && slash[1] ? slash + 1 : argv0;
}

const char *sl_cli_program(void)
{
    return program;
}

/* PROGRAM: OPT takes WHAT, not "ARG" */
static bool reject(const char *opt, const char *what, const char *arg)
{
    char esc[128];
    sl_escape(esc, sizeof esc, arg, strlen(arg), SL_ESCAPE_BACKSLASH);
    fprintf(stderr, "%s: %s takes %s, not \"%s\"\n", program, opt, what, esc);
    return false;
}

bool sl_cli_u64(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out)
{
    char what[96];
    snprintf(what, sizeof what, "an integer %" PRIu64 "..%" PRIu64, min, max);
    if (!isdigit((unsigned char) arg[0]))
        return reject(opt, what, arg); /* empty, space, sign */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (errno || *end || v < min || v > max)
        return reject(opt, what, arg);
    *out = v;
    return true;
}

bool sl_cli_size(const char *opt, const char *arg, size_t min, size_t max, size_t *out)
{
    uint64_t v;
    if (!sl_cli_u64(opt, arg, min, max, &v))
        return false;
    *out = (size_t) v;
    return true;
}

bool sl_cli_uint(const char *opt, const char *arg, unsigned min, unsigned max, unsigned *out)
{
    uint64_t v;
    if (!sl_cli_u64(opt, arg, min, max, &v))
        return false;
    *out = (unsigned) v;
    return true;
}

bool sl_cli_seed(const char *opt, const char *arg, uint64_t *out)
{
    return sl_cli_u64(opt, arg, 0, UINT64_MAX, out);
}

static bool number(const char *opt, const char *arg, double lo, bool lo_open, double max,
                   double *out)
{
    char what[96];
    snprintf(what, sizeof what, "a number in %c%g, %g]", lo_open ? '(' : '[', lo, max);
    if (!arg[0] || isspace((unsigned char) arg[0]))
        return reject(opt, what, arg);
    char *end;
    double v = strtod(arg, &end);
    /* ERANGE: past DBL_MAX gives inf (rejected below); an underflow gives
     * a finite value near 0, which the range decides */
    if (*end || !isfinite(v) || (lo_open ? !(v > lo) : !(v >= lo)) || !(v <= max))
        return reject(opt, what, arg);
    *out = v;
    return true;
}

bool sl_cli_double(const char *opt, const char *arg, double min, double max, double *out)
{
    return number(opt, arg, min, false, max, out);
}

bool sl_cli_double_above(const char *opt, const char *arg, double above, double max, double *out)
{
    return number(opt, arg, above, true, max, out);
}

bool sl_cli_no_operands(int argc, char **argv, int first)
{
    if (first >= argc)
        return true;
    char esc[128];
    sl_escape(esc, sizeof esc, argv[first], strlen(argv[first]), SL_ESCAPE_BACKSLASH);
    fprintf(stderr, "%s: unexpected argument \"%s\"\n", program, esc);
    return false;
}

bool sl_cli_gpu(const char *name, const sl_sim_profile **out)
{
    if (sl_sim_profile_find(name, out) == SL_OK)
        return true;
    char esc[128];
    sl_escape(esc, sizeof esc, name, strlen(name), SL_ESCAPE_BACKSLASH);
    fprintf(stderr, "%s: unknown GPU profile %s\n", program, esc);
    return false;
}
