/* Leveled logging with stable message ids.
 *
 * sl_log_info("srv.listen", "listening on %s", url) prints
 *   2026-11-21T23:50:01.123Z INFO  srv.listen listening on ipc:///tmp/salus.sock
 * to stderr. The level is checked before the arguments are formatted, and one
 * call writes one whole line (lines from different threads never interleave).
 * Keep each call's format on one source line so logs stay greppable. */
#ifndef SL_LOG_H
#define SL_LOG_H

enum sl_log_level { SL_LOG_ERR = 0, SL_LOG_WARN, SL_LOG_INFO, SL_LOG_DEBUG };

extern int sl_log_level_current;

/* Sets the level; returns SL_EINVAL for an unknown name. Names: error, warn,
 * info, debug. Not thread-safe against concurrent sl_log_set_level calls. */
int sl_log_set_level(const char *name);

void sl_log_write(int level, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define SL_LOG_AT(level, id, ...)                                                                  \
    do {                                                                                           \
        if ((level) <= sl_log_level_current)                                                       \
            sl_log_write((level), (id), __VA_ARGS__);                                              \
    } while (0)
#define sl_log_err(id, ...) SL_LOG_AT(SL_LOG_ERR, id, __VA_ARGS__)
#define sl_log_warn(id, ...) SL_LOG_AT(SL_LOG_WARN, id, __VA_ARGS__)
#define sl_log_info(id, ...) SL_LOG_AT(SL_LOG_INFO, id, __VA_ARGS__)
#define sl_log_debug(id, ...) SL_LOG_AT(SL_LOG_DEBUG, id, __VA_ARGS__)

#endif
