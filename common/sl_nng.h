/* NNG helpers shared by the server and the client library. */
#ifndef SL_NNG_H
#define SL_NNG_H

#include <nng/nng.h>
#include <stdbool.h>

/* nng_close with a deadline. NNG 1.5 (Debian 12's) can hang closing a
 * socket whose pipes go away at the same moment (nanomsg/nng#1543, fixed
 * upstream in 1.7): the close runs on a helper thread, and after `seconds`
 * this returns false and leaves that thread (and the socket) behind, so the
 * caller must not free anything NNG callbacks may still use. Returns true
 * when the socket is closed. May block up to `seconds`. */
bool sl_nng_close_bounded(nng_socket sock, int seconds);

#endif
