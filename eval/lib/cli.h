/* Checked conversions of the experiment drivers' option arguments.
 *
 * Every function takes the option as the person wrote it ("--jobs"), its
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
struct sl_sim_profile;
bool sl_cli_gpu(const char *name, const struct sl_sim_profile **out);

#endif
