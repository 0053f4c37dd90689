/* The NNG side of salusd: one REP socket, a fixed pool of contexts (each one
 * request in flight), listeners and their watchdog. It knows nothing of what
 * a request means: it hands each request's bytes to a hook and sends the
 * replies it is given. */
#ifndef SL_TRANSPORT_H
#define SL_TRANSPORT_H

#include "config.h"
#include "reply.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_transport sl_transport;

typedef struct sl_transport_hooks {
    void *arg;
    /* A request arrived on req (body: its bytes, valid during the call).
     * Runs on an NNG callback thread: must not block. The request must be
     * answered exactly once, now or later, with sl_transport_send. */
    void (*request)(void *arg, sl_req *req, const void *body, size_t len);
    /* Connection pipe_id closed (after its last request was handed over).
     * Same thread rules. */
    void (*pipe_gone)(void *arg, uint32_t pipe_id);
    /* Whether connection pipe_id holds state (an open or waiting session)
     * and must not be closed for being idle. Runs on the watchdog thread;
     * may take the server lock briefly, must not block otherwise. NULL:
     * connections never hold state. */
    bool (*pipe_holds)(void *arg, uint32_t pipe_id);
} sl_transport_hooks;

/* Opens the socket, the context pool and every listener of cfg (which must
 * outlive the transport). Errors: SL_EINVAL (bad URL or TLS files),
 * SL_ECONN (listen failed), SL_ENOMEM. */
int sl_transport_start(const sl_config *cfg, const sl_transport_hooks *hooks, sl_transport **out);
/* Stops receiving, closes the socket and waits for every callback, then
 * frees t. Returns false when NNG could not close the socket in time (a
 * known NNG 1.5 hang): t is then left allocated and mute (its callbacks
 * return at once without calling the hooks), so the caller may free what
 * the hooks use. NULL is fine. May block (at most a few seconds). */
bool sl_transport_stop(sl_transport *t);
/* Sees a reply as it leaves: its encoded bytes (len of them), or NULL when
 * it was not encoded (nobody to send to, or no memory). */
typedef void (*sl_send_tap)(void *arg, sl_reply *reply, const void *bytes, size_t len);

/* Sends reply for req (takes ownership of reply) and re-arms req's context;
 * reply NULL re-arms it without answering. req NULL (nobody to answer)
 * just frees reply. tap (may be NULL) sees the reply once, before it is
 * freed. Never blocks; call without the server lock. */
void sl_transport_send(sl_req *req, sl_reply *reply, sl_send_tap tap, void *tap_arg);

/* Sends an already encoded reply (len bytes, copied) for req and re-arms
 * its context. Same rules as sl_transport_send. */
void sl_transport_send_bytes(sl_req *req, const void *bytes, size_t len);

/* The connection req arrived on (never 0). */
uint32_t sl_req_pipe(const sl_req *req);
/* The peer uid of req's connection: true and *uid for ipc://, false for
 * other transports (no peer identity) or req NULL. Never blocks. */
bool sl_req_peer_uid(const sl_req *req, uint64_t *uid);
/* Whether req has operator rights (tenants.h): over ipc:// its peer is
 * root or salusd's effective uid (the --user it switched to); over a
 * network transport it came through an operator listener (cfg
 * listen_operator) and, for TLS, its client's certificate was verified
 * against --operator-tls-ca; over inproc:// it is salusd's own process
 * (an embedding program). Clients of other network listeners never are.
 * req NULL (salusd's own in-process callers) is. Never blocks. */
bool sl_req_is_operator(const sl_req *req);

/* Whether url is a network transport without encryption or authentication
 * (tcp://, ws://, and their 4/6 variants): refused without
 * cfg.allow_plain_tcp. */
bool sl_url_is_plain_network(const char *url);
/* Checks that the directory of ipc:// socket sock_path (absolute) can be
 * trusted: it and every directory above it belong to root or salusd's user
 * (or the --user it will switch to) and cannot be written by others (above the socket's own
 * directory a sticky one such as /tmp is fine). A missing socket directory is created (mode 0700,
 * or 0711 when cfg ipc_mode lets others connect) inside a trusted one. Logs why and returns
 * SL_EINVAL otherwise. */
int sl_ipc_dir_check(const char *sock_path, const sl_config *cfg);

/* Whether url is a TLS transport (tls+tcp://, wss://): needs cfg.tls_cert
 * and cfg.tls_key. */
bool sl_url_is_tls(const char *url);
/* A server TLS configuration from cfg's --tls-cert and --tls-key into *out
 * (the caller frees it with nng_tls_config_free), requiring client
 * certificates that ca signs when ca is given. Without ca, clients need
 * none if cfg allows anonymous ones and operator is false; otherwise
 * (operator: a listener whose clients must always be verified) it is an
 * error. Logs why; errors: SL_EINVAL, SL_ENOMEM. */
struct nng_tls_config;
int sl_listen_tls_config(const sl_config *cfg, const char *ca, bool operator,
                         struct nng_tls_config ** out);

#endif
