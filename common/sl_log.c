#include "sl_log.h"
#include "sl_error.h"
#include "sl_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int sl_log_level_current = SL_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG"};

int sl_log_set_level(const char *name)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            sl_log_level_current = i;
            return SL_OK;
        }
    }
    return SL_EINVAL;
}

void sl_log_write(int level, const char *id, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = (int) strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t) n, ".%03ldZ %s %s ", ts.tv_nsec / 1000000,
                  level_tags[level < 0   ? 0
                             : level > 3 ? 3
                                         : level],
                  id);
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    len = len < 0 ? 0 : len < (int) sizeof text ? len : (int) sizeof text - 1;
    /* the message may carry a client's words: one call stays one line,
     * and nothing in it reaches a terminal as a control sequence */
    if (n < (int) sizeof line - 1)
        n += (int) sl_escape(line + n, sizeof line - 1 - (size_t) n, text, (size_t) len, 0);
    line[n++] = '\n';
    /* one fwrite per line: stdio locks the stream, so lines never interleave */
    fwrite(line, 1, (size_t) n, stderr);
}
