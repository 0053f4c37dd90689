/* salusd's configuration file: `--config FILE` holds the same settings as
 * the flags, one `key = value` per line, the keys being the long flags'
 * names (flags.h: the flag table is the one list of both, so they cannot
 * diverge). `#` starts a comment; values may be "quoted"; a flag without
 * a value takes true or false. Repeatable flags (listen, operator-listen,
 * user-limits) may appear on several lines.
 *
 * Flags override the file: the file's settings are applied first, then
 * the command line's; a repeatable flag given on the command line replaces
 * all of the file's lines for it. Errors name the file and line, and at
 * most the line's key, never its content.
 *
 * Trust. The file is read only when it belongs to root or to salusd's
 * (effective) user and neither group nor others may write it: its settings
 * include listeners and operator rights. Anything else is refused at once,
 * naming the file, its owner and mode.
 *
 * Used by salusd's main thread during start-up only (state is static). */
#ifndef SL_CONFIG_FILE_H
#define SL_CONFIG_FILE_H

#include "flags.h"

#include <stdbool.h>
#include <stdio.h>

/* Reads --config FILE (if argv has one) and makes *out_argv: argv[0], the
 * file's settings as --key=value, then the rest of argv without --config
 * and --print-config (*print set when that was there). Keys that are not
 * settings of the flag table are errors. Forgets what earlier calls noted.
 * Returns 0, or 2 after writing the error to err. The strings live until
 * exit. */
int sl_cfgfile_expand(int argc, char **argv, FILE *err, int *out_argc, char ***out_argv,
                      bool *print);
/* Records a setting getopt_long just returned (flag f, its argument or
 * NULL), for --print-config. */
void sl_cfgfile_note(const sl_flag *f, const char *arg);
/* "FILE:LINE" of argument index of the expanded argv when it came from
 * the file, else NULL: a flag's error names where it was set. */
const char *sl_cfgfile_origin_of(int index);
/* Prints the effective settings in the file's format, every key of the
 * flag table in its order: the ones noted as `key = value`, the others
 * commented out with their default (`# key = DEFAULT`, or the default in
 * words after a second `#`). */
void sl_cfgfile_print(FILE *f);

#endif
