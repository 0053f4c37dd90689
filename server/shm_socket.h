/* The descriptor socket: how a local client hands salusd its shared-memory
 * segment (salus.proto, AttachShm). Next to every ipc://PATH listener
 * salusd listens on the unix SOCK_SEQPACKET socket PATH.fd, created with
 * the same permissions; one thread serves every such socket with
 * non-blocking I/O, a deadline per connection and a bound on connections
 * (in all and per user), so a client that connects and stalls, or floods,
 * delays only other descriptor hand-overs, never a request or a run. The
 * same thread unmaps the segments sessions let go (sl_shm_retire). */
#ifndef SL_SHM_SOCKET_H
#define SL_SHM_SOCKET_H

#include "config.h"
#include "session.h"
#include "shm.h"

#include <pthread.h>

typedef struct sl_shm_socket sl_shm_socket;

/* Listens next to every ipc:// listener of cfg and starts the thread; lock
 * is the server lock guarding ss, taken only for O(1) checks and installs.
 * plane's retired segments are unmapped by the thread from now on. With no
 * ipc:// listener *out is NULL and nothing starts. A socket that cannot be
 * created is logged and skipped (its clients stay inline). Errors:
 * SL_ENOMEM, SL_EINTERNAL (no thread). */
int sl_shm_socket_start(const sl_config *cfg, pthread_mutex_t *lock, sl_sessions *ss,
                        sl_shm_plane *plane, sl_shm_socket **out);
/* Stops the thread, closes every connection, removes the socket files,
 * unmaps what is retired and frees t; retired segments are unmapped at once
 * from then on. NULL is fine. Call without the server lock. */
void sl_shm_socket_stop(sl_shm_socket *t);

/* Bounds on the socket's connections. */
#define SL_SHM_SOCKET_CONNS 32
#define SL_SHM_SOCKET_CONNS_PER_UID 4
#define SL_SHM_SOCKET_DEADLINE_MS 2000

#endif
