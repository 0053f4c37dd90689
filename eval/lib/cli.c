/* The drivers' options and reports (cli.h). */
#include "cli.h"

#include "evsim.h"

#include "sim/profiles.h"
#include "sl_error.h"
#include "sl_text.h"
#include "workload.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SL_EVAL_CSV
#define SL_EVAL_CSV "eval/data/salus-workloads.csv"
#endif

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

const sl_sim_profile *sl_cli_profile(const char *name)
{
    const sl_sim_profile *p;
    if (sl_sim_profile_find(name, &p) != SL_OK)
        abort();
    return p;
}

sl_cli_common sl_cli_common_default(unsigned want)
{
    return (sl_cli_common){.want = want,
                           .seed = 1,
                           .csv = SL_EVAL_CSV,
                           .gpu = sl_cli_profile("p100"),
                           .launch = SL_EVAL_LAUNCH_GRAPH};
}

static bool set_serial(void *dst, const char *arg)
{
    (void) arg;
    ((sl_cli_common *) dst)->launch = SL_EVAL_LAUNCH_SERIAL;
    return true;
}

static bool set_ops(void *dst, const char *arg)
{
    (void) arg;
    ((sl_cli_common *) dst)->launch = SL_EVAL_LAUNCH_OPS;
    return true;
}

void sl_cli_launch_config(const sl_cli_common *c, sl_eval_config *cfg)
{
    cfg->pipelined_launches = c->launch != SL_EVAL_LAUNCH_SERIAL;
    cfg->graph_launches = c->launch == SL_EVAL_LAUNCH_GRAPH;
    cfg->graph_launch_ns = c->gpu->graph_launch_ns;
    cfg->graph_node_ns = c->gpu->graph_node_ns;
}

/* The shared options' entries for common (those it wants). */
static size_t common_opts(sl_cli_common *c, sl_cli_opt *out)
{
    const sl_cli_opt all[] = {
        {"seed", SL_CLI_SEED, &c->seed, 0, 0, NULL},
        {"json", SL_CLI_STR, &c->json, 0, 0, NULL},
        {"gpu", SL_CLI_GPU, &c->gpu, 0, 0, NULL},
        {"csv", SL_CLI_STR, &c->csv, 0, 0, NULL},
        {"serial-launch", SL_CLI_CALL, c, 0, 0, set_serial},
        {"op-launch", SL_CLI_CALL, c, 0, 0, set_ops},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (c->want & (1u << i))
            out[n++] = all[i];
    return n;
}

static bool has_arg(sl_cli_kind k)
{
    return k != SL_CLI_SET && k != SL_CLI_CLEAR && k != SL_CLI_CALL;
}

/* Applies one option; false after printing why not. */
static bool apply(const sl_cli_opt *o, const char *arg)
{
    char opt[64];
    snprintf(opt, sizeof opt, "--%s", o->name);
    switch (o->kind) {
    case SL_CLI_SET:
    case SL_CLI_CLEAR:
        *(bool *) o->dst = o->kind == SL_CLI_SET;
        return true;
    case SL_CLI_STR:
        *(const char **) o->dst = arg;
        return true;
    case SL_CLI_SIZE:
        return sl_cli_size(opt, arg, (size_t) o->min, (size_t) o->max, o->dst);
    case SL_CLI_UINT:
        return sl_cli_uint(opt, arg, (unsigned) o->min, (unsigned) o->max, o->dst);
    case SL_CLI_U64:
        return sl_cli_u64(opt, arg, (uint64_t) o->min, (uint64_t) o->max, o->dst);
    case SL_CLI_SEED:
        return sl_cli_seed(opt, arg, o->dst);
    case SL_CLI_DOUBLE:
        return sl_cli_double(opt, arg, o->min, o->max, o->dst);
    case SL_CLI_ABOVE:
        return sl_cli_double_above(opt, arg, o->min, o->max, o->dst);
    case SL_CLI_GPU:
        return sl_cli_gpu(arg, o->dst);
    case SL_CLI_CALL:
    case SL_CLI_CALL_ARG:
        return o->call(o->dst, arg);
    }
    abort();
}

#define MAX_OPTS 64

int sl_cli_parse(int argc, char **argv, const char *usage, sl_cli_common *common,
                 const sl_cli_opt *opts, size_t n)
{
    sl_cli_init(argv[0]);
    sl_cli_opt all[MAX_OPTS];
    size_t n_all = common ? common_opts(common, all) : 0;
    if (n_all + n >= MAX_OPTS)
        abort();
    memcpy(all + n_all, opts, n * sizeof *opts);
    n_all += n;
    struct option longopts[MAX_OPTS + 1] = {{0}};
    for (size_t i = 0; i < n_all; i++)
        longopts[i] =
            (struct option){all[i].name, has_arg(all[i].kind) ? required_argument : no_argument,
                            NULL, (int) (256 + i)};
    longopts[n_all] = (struct option){"help", no_argument, NULL, 'h'};
    optind = 1;
    for (int ch; (ch = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (ch == 'h') {
            printf(usage, argv[0]);
            return 0;
        }
        if (ch < 256) { /* getopt said why */
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
        if (!apply(&all[ch - 256], optarg))
            return 2;
    }
    return sl_cli_no_operands(argc, argv, optind) ? SL_CLI_RUN : 2;
}

int sl_cli_fail(int rc, const char *what, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(buf, sizeof buf, what, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s: %s\n", program, buf, sl_strerror(rc));
    return 1;
}

bool sl_cli_workloads(const sl_cli_common *common, sl_eval_workload **w, size_t *n)
{
    int rc = sl_eval_workloads_load(common->csv, w, n);
    if (rc == SL_OK)
        return true;
    (void) sl_cli_fail(rc, "cannot load %s", common->csv);
    return false;
}

bool sl_cli_create(const char *path, FILE **out)
{
    if (!path) {
        *out = NULL;
        return true;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s\n", program, path, strerror(errno));
        return false;
    }
    *out = f;
    return true;
}

bool sl_cli_close(FILE *f, const char *path)
{
    if (!f)
        return true;
    bool ok = !ferror(f);
    ok &= fclose(f) == 0;
    if (!ok)
        fprintf(stderr, "%s: cannot write %s\n", program, path);
    return ok;
}
