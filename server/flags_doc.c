/* The flag table as people read it (flags.h): --help and the man page's
 * OPTIONS part. */
#include "flags.h"

#include <ctype.h>
#include <string.h>

#define HELP_WIDTH 80
#define HELP_TEXT_COL 26

static const char help_head[] =
    "Consolidated GPU execution server: jobs linking libsalusclient submit work one iteration "
    "at a time; salusd keeps their state resident and schedules them. SIZE takes a suffix K, M, "
    "G or T. Every flag but --help, --version, --config and --print-config is also a key of the "
    "configuration file.";

static const char help_tail[] =
    "SIGTERM or SIGINT drains: running iterations finish, queued ones fail with SHUTTING_DOWN, "
    "then salusd exits 0. After a sticky device error salusd resets the device; sessions get "
    "DEVICE_RESET once and re-upload their tensors. If the device cannot be recovered "
    "in-process, salusd drains and exits 3 (restart it). See salusd(8).";

/* Writes text's words from column col on, breaking lines before
 * HELP_WIDTH and starting each further line at column indent. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    bool first = true;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t len = strcspn(p, " ");
        if (!len)
            break;
        if (!first && col + 1 + (int) len > HELP_WIDTH) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (!first) {
            fputc(' ', f);
            col++;
        }
        fwrite(p, 1, len, f);
        col += (int) len;
        p += len;
        first = false;
    }
    fputc('\n', f);
}

/* The default as --help and the man page show it, or NULL. */
static const char *default_of(const sl_flag *flag)
{
    return flag->def ? flag->def : flag->def_text;
}

static void help_flag(FILE *f, const sl_flag *flag)
{
    char head[96], text[1024];
    int n = snprintf(head, sizeof head, "  %c%c%s--%s%s%s", flag->short_opt ? '-' : ' ',
                     flag->short_opt ? flag->short_opt : ' ', flag->short_opt ? ", " : "  ",
                     flag->name, flag->arg ? " " : "", flag->arg ? flag->arg : "");
    fputs(head, f);
    int col = n;
    if (col <= HELP_TEXT_COL - 2) {
        fprintf(f, "%*s", HELP_TEXT_COL - col, "");
    } else {
        fputs("  ", f);
        col += 2;
    }
    if (default_of(flag))
        snprintf(text, sizeof text, "%s (default: %s)", flag->help, default_of(flag));
    else
        snprintf(text, sizeof text, "%s", flag->help);
    wrap(f, text, col < HELP_TEXT_COL ? HELP_TEXT_COL : col, HELP_TEXT_COL);
}

void sl_flags_help(FILE *f)
{
    fprintf(f, "usage: salusd [OPTIONS]\n\n");
    wrap(f, help_head, 0, 0);
    for (int s = 0; s < sl_flag_sections_count; s++) {
        fprintf(f, "\n%s:\n", sl_flag_sections[s].title);
        if (sl_flag_sections[s].intro)
            wrap(f, sl_flag_sections[s].intro, 0, 0);
        for (int i = 0; i < sl_flags_count; i++)
            if (sl_flags[i].section == s)
                help_flag(f, &sl_flags[i]);
    }
    fputc('\n', f);
    wrap(f, help_tail, 0, 0);
}

/* Writes plain text as roff: backslashes escaped, the dashes of words that
 * start with one (flags) as minus signs, and a line start that roff would
 * take for a request guarded. Capitalises the first letter when the first
 * word is an ordinary lower-case word. */
static void roff_text(FILE *f, const char *text, bool capitalise)
{
    size_t first_word = strcspn(text, " ");
    bool plain = first_word > 0;
    for (size_t i = 0; i < first_word; i++)
        plain &= islower((unsigned char) text[i]) || text[i] == '\'' || text[i] == ',';
    if (text[0] == '.' || text[0] == '\'')
        fputs("\\&", f);
    bool flag_word = false;
    for (const char *p = text; *p; p++) {
        if (p == text || p[-1] == ' ' || p[-1] == '(')
            flag_word = *p == '-';
        else if (*p == ' ')
            flag_word = false;
        if (*p == '\\')
            fputs("\\e", f);
        else if (*p == '-' && flag_word)
            fputs("\\-", f);
        else if (p == text && capitalise && plain)
            fputc(toupper((unsigned char) *p), f);
        else
            fputc(*p, f);
    }
}

/* The flag's tag line: .B/.BR with its forms and its argument. */
static void man_tag(FILE *f, const sl_flag *flag)
{
    fprintf(f, ".TP\n");
    fputs(flag->short_opt || flag->arg ? ".BR " : ".B ", f);
    if (flag->short_opt)
        fprintf(f, "\\-%c \", \" ", flag->short_opt);
    fputs("\\-\\-", f);
    for (const char *p = flag->name; *p; p++) {
        if (*p == '-')
            fputs("\\-", f);
        else
            fputc(*p, f);
    }
    if (flag->arg)
        fprintf(f, " \" \\fI%s\\fR\"", flag->arg);
    fputc('\n', f);
}

void sl_flags_man(FILE *f)
{
    for (int s = 0; s < sl_flag_sections_count; s++) {
        fprintf(f, ".SS %s\n", sl_flag_sections[s].title);
        if (sl_flag_sections[s].intro) {
            roff_text(f, sl_flag_sections[s].intro, false);
            fputc('\n', f);
        }
        for (int i = 0; i < sl_flags_count; i++) {
            const sl_flag *flag = &sl_flags[i];
            if (flag->section != s)
                continue;
            man_tag(f, flag);
            roff_text(f, flag->help, true);
            fputc('.', f);
            if (default_of(flag)) {
                fputs(" Default: ", f);
                roff_text(f, default_of(flag), false);
                fputc('.', f);
            }
            fputc('\n', f);
        }
    }
}
