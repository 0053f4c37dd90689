/* Escaping of outside text, sizes, and a growable text buffer (sl_text.h). */
#include "sl_text.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The code point of the UTF-8 sequence at s (n bytes left) and its length
 * in *used; -1 when the bytes there are not valid UTF-8 (overlong forms,
 * surrogates and values past U+10FFFF included). */
static long utf8_decode(const unsigned char *s, size_t n, size_t *used)
{
    unsigned char c = s[0];
    size_t k;
    long cp, min;
    if (c < 0x80) {
        *used = 1;
        return c;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
        cp = c & 0x1f;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        cp = c & 0x0f;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return -1;
    }
    if (n < k)
        return -1;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *used = k;
    return cp;
}

/* Characters a terminal or a text viewer acts on rather than shows. */
static bool unprintable(long cp)
{
    return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x200e || cp == 0x200f ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* The escape of one character or byte into esc; its length. */
static size_t escape_one(long cp, unsigned char byte, bool valid, char esc[16])
{
    if (!valid)
        return (size_t) snprintf(esc, 16, "\\x%02x", byte);
    switch (cp) {
    case '\n':
        return (size_t) snprintf(esc, 16, "\\n");
    case '\r':
        return (size_t) snprintf(esc, 16, "\\r");
    case '\t':
        return (size_t) snprintf(esc, 16, "\\t");
    case 0x1b:
        return (size_t) snprintf(esc, 16, "\\e");
    case '\\':
        return (size_t) snprintf(esc, 16, "\\\\");
    default:
        break;
    }
    if (cp < 0x80)
        return (size_t) snprintf(esc, 16, "\\x%02x", (unsigned) cp);
    return (size_t) snprintf(esc, 16, "\\u{%04lx}", cp);
}

size_t sl_escape(char *dst, size_t cap, const char *src, size_t len, unsigned flags)
{
    const unsigned char *s = (const unsigned char *) src;
    size_t out = 0, i = 0;
    while (i < len) {
        size_t used = 1;
        long cp = utf8_decode(s + i, len - i, &used);
        bool valid = cp >= 0;
        char esc[16];
        const char *piece = src + i;
        size_t n = used;
        if (!valid || unprintable(cp) || (cp == '\\' && (flags & SL_ESCAPE_BACKSLASH))) {
            n = escape_one(cp, s[i], valid, esc);
            piece = esc;
            used = valid ? used : 1;
        }
        if (out + n + 1 > cap)
            break;
        memcpy(dst + out, piece, n);
        out += n;
        i += used;
    }
    dst[out] = '\0';
    return out;
}

bool sl_text_is_clean(const char *src, size_t len, unsigned flags)
{
    const unsigned char *s = (const unsigned char *) src;
    for (size_t i = 0; i < len;) {
        size_t used = 1;
        long cp = utf8_decode(s + i, len - i, &used);
        if (cp < 0 || unprintable(cp) || (cp == '\\' && (flags & SL_ESCAPE_BACKSLASH)))
            return false;
        i += used;
    }
    return true;
}

int sl_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return SL_EINVAL;
    uint64_t mult = 1;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        mult = 1ull << 10;
        break;
    case 'm':
    case 'M':
        mult = 1ull << 20;
        break;
    case 'g':
    case 'G':
        mult = 1ull << 30;
        break;
    case 't':
    case 'T':
        mult = 1ull << 40;
        break;
    default:
        return SL_EINVAL;
    }
    if (*end && end[1] && !((end[1] == 'i' || end[1] == 'B') && (!end[2] || end[2] == 'B')))
        return SL_EINVAL;
    return sl_mul_ok(v, mult, out) ? SL_OK : SL_EINVAL;
}

void sl_textbuf_printf(sl_textbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = b->p ? vsnprintf(b->p + b->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t) n < room) {
            b->len += (size_t) n;
            return;
        }
        if (b->failed)
            return;
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (n >= 0 && cap - b->len <= (size_t) n)
            cap *= 2;
        char *q = sl_reallocarray(b->p, cap, 1);
        if (!q) {
            b->failed = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}
