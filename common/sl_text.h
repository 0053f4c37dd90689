/* Text: escaping, and parsing what people write in flags.
 *
 * Text from outside (session names, client names, graph and op names,
 * policy names) made safe to print: a terminal must never receive a
 * control character, an escape sequence or a bidirectional override from a
 * client, and one log line must stay one line. */
#ifndef SL_TEXT_H
#define SL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Copies src (len bytes; it may hold NULs) into dst (cap bytes, cap >= 1),
 * escaping what a terminal would act on: C0 controls and DEL as \n, \r, \t,
 * \e or \xHH, bytes that are not valid UTF-8 as \xHH,
 * and the C1 controls and bidirectional formatting characters (U+0080 to
 * U+009F, U+200E/F, U+202A to U+202E, U+2066 to U+2069) as \u{HHHH}. Other
 * UTF-8 passes unchanged. Stops before a sequence that would not fit, so
 * dst is always NUL-terminated and never ends inside an escape or a
 * character. Returns the bytes written (without the NUL). Never fails.
 * With SL_ESCAPE_BACKSLASH a backslash becomes \\ too, so that the escaped
 * text reads back unambiguously (names); without it, text escaped once
 * passes a second time unchanged (whole log lines and reply messages that
 * carry names escaped already). */
#define SL_ESCAPE_BACKSLASH 1u
size_t sl_escape(char *dst, size_t cap, const char *src, size_t len, unsigned flags);
/* Parses a size given by a person: "123", "64K", "512M", "2G", "1T" (binary
 * units; "KiB", "KB" and "K" alike). Errors: SL_EINVAL (not a size, or one
 * past 2^64). */
int sl_parse_size(const char *s, uint64_t *out);
/* Whether sl_escape(flags) would copy src unchanged. */
bool sl_text_is_clean(const char *src, size_t len, unsigned flags);

/* A growable text buffer (documents built piece by piece: JSON, metrics).
 * A zeroed one is empty; p is NUL-terminated once anything was appended,
 * and is the caller's to sl_free. */
typedef struct sl_textbuf {
    char *p;
    size_t len, cap;
    bool failed; /* an allocation failed: appends stopped, check once at the end */
} sl_textbuf;
/* Appends printf-formatted text, growing the buffer (doubling); out of
 * memory sets failed and appends nothing more. Never fails otherwise. */
__attribute__((format(printf, 2, 3))) void sl_textbuf_printf(sl_textbuf *b, const char *fmt, ...);

#endif
