/* Guarded copies: copying from or to memory that a client owns (its
 * shared-memory segment) without letting the client kill the server.
 *
 * A client's segment is checked before salusd maps it (server/shm.c), but
 * the kernel can still fail an access to it (a page it cannot provide), and
 * that arrives as SIGBUS or SIGSEGV in whichever thread copies. A guarded
 * copy turns such a fault, when it hits the copy's own source or
 * destination, into an error for that copy alone; every other fault keeps
 * its previous handling (the handler installed before, or the default
 * action: a core dump, as a bug should). */
#ifndef SL_GUARD_H
#define SL_GUARD_H

#include <stddef.h>

/* Installs the SIGBUS and SIGSEGV handlers, chaining to those installed
 * before; a later call does nothing unless someone replaced them since
 * (then they go back in front of the replacement). sl_dev_open calls it.
 * SL_OK or SL_EINTERNAL (sigaction failed: copies are then unguarded, and
 * a fault kills the process). */
int sl_guard_init(void);

/* memmove(dst, src, n), or SL_EINVAL when a page of [src, src + n) or
 * [dst, dst + n) could not be read or written (dst may then be partly
 * written). Any thread; async-signal-safe it is not. */
int sl_guarded_copy(void *dst, const void *src, size_t n);
/* memset(dst, 0, n) with the same guard. */
int sl_guarded_zero(void *dst, size_t n);

#endif
