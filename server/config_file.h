/* salusd's configuration file: `--config FILE` holds the same settings as
 * the flags, one `key = value` per line, the keys being the long flags'
 * names (so the flag table, struct option[], is the one list of both and
 * they cannot diverge). `#` starts a comment; values may be "quoted";
 * a flag without a value takes true or false. Repeatable flags (listen,
 * operator-listen, user-limits) may appear on several lines.
 *
 * Flags override the file: the file's settings are applied first, then
 * the command line's; a repeatable flag given on the command line replaces
 * all of the file's lines for it. Errors name the file and line.
 *
 * Used by salusd's main thread during start-up only (state is static). */
#ifndef SL_CONFIG_FILE_H
#define SL_CONFIG_FILE_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

/* Reads --config FILE (if argv has one) and makes *out_argv: argv[0], the
 * file's settings as --key=value, then the rest of argv without --config
 * and --print-config (*print set when that was there). Keys not in opts,
 * or in `skip` (NULL-terminated: help, version, config, ...) are errors.
 * Returns 0, or 2 after printing the error. The strings live until exit. */
int sl_cfgfile_expand(int argc, char **argv, const struct option *opts, const char *const *skip,
                      int *out_argc, char ***out_argv, bool *print);
/* Records an option getopt_long just returned (c, the long index or -1,
 * its argument, the optind after it), for the error origin and
 * --print-config. */
void sl_cfgfile_note(const struct option *opts, int c, int longindex, const char *arg, int optind);
/* "FILE:LINE" of the last option noted when it came from the file, else
 * NULL: a flag's error message is followed by where it was set. */
const char *sl_cfgfile_origin(void);
/* Prints the effective settings in the file's format: every key of opts
 * but those in skip, set ones as `key = value`, the others commented out
 * (their built-in default applies). */
void sl_cfgfile_print(FILE *f, const struct option *opts, const char *const *skip);

#endif
