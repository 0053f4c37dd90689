/* salusd's flags: one table (flags_table.c) declares every flag once, with its
 * name, short form, argument, default, help text, section and how it sets
 * the configuration. Everything else is drawn from it: getopt_long's
 * options, the configuration file's keys (config_file.h), --help,
 * --print-config and the OPTIONS part of the man page (salusd.8), which
 * `ninja -C build update-man` regenerates and the flags-reference test
 * checks.
 *
 * Used by salusd's main thread during start-up only, and by the tool that
 * writes the man page. */
#ifndef SL_FLAGS_H
#define SL_FLAGS_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum sl_flag_kind {
    SL_FLAG_SWITCH, /* no argument: sets the bool at offset */
    SL_FLAG_TEXT,   /* a string kept as given, at offset (const char *) */
    SL_FLAG_SIZE,   /* a size (sl_parse_size) of at least min, at offset (uint64_t) */
    SL_FLAG_INT,    /* an integer in [min, max], times scale, at offset (int,
                       uint32_t or uint64_t: width says which) */
    SL_FLAG_CUSTOM, /* set() parses and stores it */
    SL_FLAG_ACTION, /* not a setting: --help, --version, --config, --print-config */
};

/* sl_flag.traits */
#define SL_FLAG_REPEATABLE 1u /* each use adds one (listen URLs, rules) */
#define SL_FLAG_OCTAL 2u      /* SL_FLAG_INT written in octal (a file mode) */

/* What the command line asks salusd to do. */
enum sl_flags_action {
    SL_FLAGS_RUN = 0,
    SL_FLAGS_HELP,
    SL_FLAGS_VERSION,
    SL_FLAGS_CONFIG,       /* --config FILE: taken out before getopt */
    SL_FLAGS_PRINT_CONFIG, /* --print-config */
};

typedef struct sl_flag sl_flag;

/* A custom flag's parser: stores arg in cfg, or returns SL_EINVAL with
 * what is allowed in why (a phrase: "takes off, demand, auto, auto:N or
 * N"). arg lives as long as the process. */
typedef int (*sl_flag_set_fn)(sl_config *cfg, const char *arg, char *why, size_t why_len);

struct sl_flag {
    const char *name; /* the long flag, and the configuration file's key */
    char short_opt;   /* its one-letter form, or 0 */
    enum sl_flag_kind kind;
    const char *arg;  /* its argument's name in the help (SIZE, URL); NULL: none */
    int section;      /* index into sl_flag_sections; a section's flags are adjacent */
    const char *help; /* one paragraph of plain text: what it does */
    /* Its default: a value the flag accepts (shown in --help, the man
     * page and --print-config), or else in words (def_text), or neither
     * (switches are off, text flags unset). def_now, when set, gives
     * the value this host would use (--print-config). */
    const char *def;
    const char *def_text;
    const char *(*def_now)(void);
    unsigned traits;             /* SL_FLAG_REPEATABLE, SL_FLAG_OCTAL */
    size_t offset;               /* the sl_config field of the generic kinds */
    size_t width;                /* its size (SL_FLAG_INT) */
    size_t given;                /* 1 + offset of a bool set whenever the flag is given; 0: none */
    uint64_t min, max, scale;    /* SL_FLAG_SIZE: min; SL_FLAG_INT: range and unit */
    sl_flag_set_fn set;          /* SL_FLAG_CUSTOM */
    enum sl_flags_action action; /* SL_FLAG_ACTION */
};

typedef struct sl_flag_section {
    const char *title;
    const char *intro; /* plain text before its flags, or NULL */
} sl_flag_section;

/* The most flags the table may hold (sl_flags_count <= SL_FLAGS_MAX). */
#define SL_FLAGS_MAX 64

extern const sl_flag sl_flags[];
extern const int sl_flags_count;
extern const sl_flag_section sl_flag_sections[];
extern const int sl_flag_sections_count;

/* The flag named name (a long name), or NULL. */
const sl_flag *sl_flag_find(const char *name);

/* Whether f is a key of the configuration file (every flag but the
 * actions). */
bool sl_flag_is_key(const sl_flag *f);

/* Parses arg (NULL for a switch) as flag f and stores it in cfg. Errors:
 * SL_EINVAL with what the flag allows in why. arg must outlive cfg. */
int sl_flag_apply(const sl_flag *f, sl_config *cfg, const char *arg, char *why, size_t why_len);

/* Parses salusd's command line, the settings of --config FILE first,
 * into cfg (filled with SL_CONFIG_DEFAULTS by the caller). On success
 * *action says what was asked; for SL_FLAGS_RUN and
 * SL_FLAGS_PRINT_CONFIG cfg has a listener (the default one when none
 * was given), and for SL_FLAGS_RUN its flags fit together. Returns 0, or
 * 2 (the exit status of a usage error) after writing the error to err,
 * naming the flag, the value, what it allows and, for a setting from the
 * file, the file and line. argv's strings must outlive cfg. Not
 * reentrant (getopt_long). */
int sl_flags_parse(int argc, char **argv, sl_config *cfg, FILE *err, enum sl_flags_action *action);

/* The default listener: $SALUS_URL, else a socket in a directory of
 * salusd's user's own (the runtime directory, /run/salus for root); ""
 * when there is none (a shared directory such as /tmp would let another
 * user take the name first). A static buffer, valid until the next call. */
const char *sl_flags_default_listen(void);

/* Writes --help: the usage line, then every section and flag, each
 * flag's help wrapped to 80 columns with its default. */
void sl_flags_help(FILE *f);

/* Writes the man page's OPTIONS part (roff, without its .SH line). */
void sl_flags_man(FILE *f);

/* The marker lines that enclose that part in salusd.8. */
#define SL_FLAGS_MAN_BEGIN ".\\\" BEGIN FLAGS"
#define SL_FLAGS_MAN_END ".\\\" END FLAGS"

#endif
