/* The experiment drivers' options and reports: one table of options per
 * driver parsed here (the flags every driver shares among them), checked
 * conversions of their arguments, and the files and lines every driver
 * writes.
 *
 * Conversions. Every function takes the option as the person wrote it ("--jobs"), its
 * argument (optarg) and an inclusive range, and either stores the value
 * and returns true, or stores nothing, prints one line to stderr and
 * returns false; the caller then exits with status 2. The line names the
 * program (sl_cli_init), the option, the allowed range and the argument
 * (escaped with sl_escape, so that a control character in it cannot reach
 * the terminal):
 *
 *   salus51: --jobs takes an integer 1..1000000, not "abc"
 *   hparam: --job-s takes a number in (0, 1e+06], not "inf"
 *
 * An argument is rejected when it is empty, starts with white space, has
 * anything after the number ("12x", "1.5" for an integer), lies outside
 * the range (after rounding, for a number), or cannot be represented
 * (an integer past 2^64, a number past DBL_MAX). Integers are decimal
 * digits only: no sign (so "-1" is rejected, not wrapped), no "0x".
 * Numbers are what strtod reads ("2", "0.5", "1e3", "0x1p-3"), finite:
 * "inf", "nan" and "1e999" are rejected whatever the range. */
#ifndef SL_EVAL_CLI_H
#define SL_EVAL_CLI_H

#include "graphs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct sl_sim_profile;
struct sl_eval_workload;

/* Names the program in the messages: the last component of argv0 (NULL:
 * "eval"). Call it first in main. */
void sl_cli_init(const char *argv0);
/* The name sl_cli_init set. */
const char *sl_cli_program(void);

/* An integer in [min, max]. */
bool sl_cli_u64(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *out);
bool sl_cli_size(const char *opt, const char *arg, size_t min, size_t max, size_t *out);
bool sl_cli_uint(const char *opt, const char *arg, unsigned min, unsigned max, unsigned *out);
/* A seed: any integer 0..2^64-1. */
bool sl_cli_seed(const char *opt, const char *arg, uint64_t *out);
/* A finite number in [min, max]. */
bool sl_cli_double(const char *opt, const char *arg, double min, double max, double *out);
/* A finite number in (above, max]: above excluded ("times > 0"). */
bool sl_cli_double_above(const char *opt, const char *arg, double above, double max, double *out);

/* Whether getopt left no operand (argv[first..argc) empty: pass optind); if it left
 * one, prints 'PROGRAM: unexpected argument "X"' and returns false. */
bool sl_cli_no_operands(int argc, char **argv, int first);

/* The kernels/sim profile named name (a --gpu value) into *out; if there is
 * none, prints 'PROGRAM: unknown GPU profile NAME' and returns false. */
bool sl_cli_gpu(const char *name, const struct sl_sim_profile **out);

/* ---- Option tables ---- */

/* What an option stores, in the object its entry points at (dst). */
typedef enum sl_cli_kind {
    SL_CLI_SET,     /* no argument: bool, set true */
    SL_CLI_CLEAR,   /* no argument: bool, set false */
    SL_CLI_STR,     /* const char *: the argument itself (argv's, not copied) */
    SL_CLI_SIZE,    /* size_t in [min, max] (sl_cli_size) */
    SL_CLI_UINT,    /* unsigned in [min, max] */
    SL_CLI_U64,     /* uint64_t in [min, max] (both exact in a double) */
    SL_CLI_SEED,    /* uint64_t, any */
    SL_CLI_DOUBLE,  /* double in [min, max] */
    SL_CLI_ABOVE,   /* double in (min, max] */
    SL_CLI_GPU,     /* const sl_sim_profile *: the profile named */
    SL_CLI_CALL,    /* no argument: call(dst, NULL) */
    SL_CLI_CALL_ARG /* call(dst, argument) */
} sl_cli_kind;

/* One option of a driver: --name, applied when it is read, in the order the
 * options are given (so that "--tiny --jobs 5" and "--jobs 5 --tiny" may
 * differ, as a call entry decides). call returns false after printing one
 * line on stderr naming the program and the option. */
typedef struct sl_cli_opt {
    const char *name; /* without the dashes: "jobs" */
    sl_cli_kind kind;
    void *dst;
    double min, max; /* the range of a number */
    bool (*call)(void *dst, const char *arg);
} sl_cli_opt;

/* The options every driver takes some of, with their defaults
 * (sl_cli_common_default). want says which the driver takes: SL_CLI_WANT_*
 * bits; the others are not options of that driver and keep their
 * defaults. */
enum {
    SL_CLI_WANT_SEED = 1u << 0,   /* --seed S: the random streams' seed, 1 */
    SL_CLI_WANT_JSON = 1u << 1,   /* --json FILE: the figures as JSON; none */
    SL_CLI_WANT_GPU = 1u << 2,    /* --gpu PROFILE: the kernels/sim profile, p100 */
    SL_CLI_WANT_CSV = 1u << 3,    /* --csv FILE: the Salus workloads, eval/data's */
    SL_CLI_WANT_SERIAL = 1u << 4, /* --serial-launch: each op launched after the
                                   * one before it completed */
    SL_CLI_WANT_OPS = 1u << 5,    /* --op-launch: op by op, an iteration's launches
                                   * back to back without waiting */
    /* the launch modes together (launch, graph replays by default) */
    SL_CLI_WANT_LAUNCH = SL_CLI_WANT_SERIAL | SL_CLI_WANT_OPS,
};
typedef struct sl_cli_common {
    unsigned want;
    uint64_t seed;
    const char *json; /* NULL: no JSON */
    const char *csv;
    const struct sl_sim_profile *gpu;
    /* how an iteration reaches the device (graphs.h): SL_EVAL_LAUNCH_GRAPH,
     * one replay of a captured CUDA Graph, as salusd's cuda backend submits
     * an iteration, unless --op-launch or --serial-launch (the last given
     * wins) */
    enum sl_eval_launch launch;
} sl_cli_common;

/* Sets cfg's launch model from common->launch and common->gpu's costs:
 * pipelined_launches unless serial, graph_launches with the profile's
 * replay and node costs for a graph. segment_ns is left as it is. */
struct sl_eval_config;
void sl_cli_launch_config(const sl_cli_common *common, struct sl_eval_config *cfg);

/* The defaults above, for a driver that takes the options in want. */
sl_cli_common sl_cli_common_default(unsigned want);

/* The value sl_cli_parse returns when the driver is to run. */
#define SL_CLI_RUN (-1)

/* Parses argv (getopt_long: long options only, "--name=value" or "--name
 * value", unique abbreviations accepted) against common's wanted options,
 * the n entries of opts, and --help. Calls sl_cli_init(argv[0]) first.
 * usage is a printf format with one %s (the program as invoked): --help
 * prints it on stdout and the result is 0; an unknown option or a missing
 * argument prints getopt's line and the usage on stderr, a rejected
 * argument or an operand one line, and the result is 2; otherwise every option has been applied and
 * the result is SL_CLI_RUN. Either way main returns the result unless it is SL_CLI_RUN. Uses
 * getopt's global state (optind is reset here): one parse at a time. An entry of an unknown kind,
 * or more than 64 options, is a programming error (abort). */
int sl_cli_parse(int argc, char **argv, const char *usage, sl_cli_common *common,
                 const sl_cli_opt *opts, size_t n);

/* The profile named name, for a driver's default: aborts when there is
 * none (a built-in name: a programming error). */
const struct sl_sim_profile *sl_cli_profile(const char *name);

/* ---- Reports ---- */

/* Prints 'PROGRAM: WHAT: ERROR' on stderr (what a printf format, error
 * sl_strerror(rc)) and returns 1, the status main exits with. */
int sl_cli_fail(int rc, const char *what, ...) __attribute__((format(printf, 2, 3)));

/* Loads common->csv (workload.h sl_eval_workloads_load) into *w, *n. On
 * error prints 'PROGRAM: cannot load CSV: ERROR' and returns false. */
bool sl_cli_workloads(const sl_cli_common *common, struct sl_eval_workload **w, size_t *n);

/* Opens path for writing into *out (NULL path: *out = NULL, nothing to
 * write). On error prints 'PROGRAM: cannot write PATH: ERROR' and returns
 * false, *out untouched. */
bool sl_cli_create(const char *path, FILE **out);
/* Closes a file sl_cli_create opened (NULL: nothing); false, with a line
 * on stderr, when a write to it failed. */
bool sl_cli_close(FILE *f, const char *path);

#endif
