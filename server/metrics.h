/* The Prometheus endpoint: `salusd --metrics-listen ADDR` serves GET
 * /metrics in the text exposition format (version 0.0.4): metrics.c renders
 * it, metrics_http.c serves it.
 *
 * What it shows is for operators: every session's usage. So the listener
 * binds the loopback address unless ADDR names a host, can be a unix socket
 * (permissions --metrics-mode, 0600 by default) or require TLS client
 * certificates (https://), and names no one by default: sessions are
 * labelled by id and tenants by a keyed hash, stable while salusd runs;
 * with --metrics-names, by the session's name and the tenant's uid.
 *
 * Connections. The endpoint has a descriptor budget of its own, a
 * sixteenth of RLIMIT_NOFILE between 8 and 64 connections, an eighth of it
 * per peer (a uid for peers on this host, an IPv4 address or IPv6 /64
 * otherwise); a connection over the budget is closed as soon as it is
 * accepted. A request must arrive within 10 s of the connection, and the
 * answer must be taken within 10 s; each connection serves one request.
 *
 * Threads and locks. A scrape runs on an NNG aio thread. It copies what
 * it needs under the server lock (O(sessions + lanes + queue), no
 * allocation that grows with anything a client controls beyond
 * --max-sessions records) and formats after releasing it, so a scrape
 * holds the lock about as long as a Status request does. */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stdbool.h>
#include <stddef.h>

struct sl_server;
typedef struct sl_metrics sl_metrics;

/* Whether ADDR names a unix socket (unix:PATH or an absolute PATH); its
 * path then goes to *path (pointing into addr). */
bool sl_metrics_socket_path(const char *addr, const char **path);
/* Turns ADDR (PORT, :PORT, HOST:PORT, http://HOST:PORT, https://HOST:PORT,
 * unix:PATH or /PATH; HOST defaults to 127.0.0.1) into the NNG stream URL
 * it is served at (tcp://, tls+tcp:// or ipc://) in buf. Errors:
 * SL_EINVAL. */
int sl_metrics_url(const char *addr, char *buf, size_t len);
/* Starts serving srv's metrics at addr, with srv's configuration (TLS
 * files, --metrics-mode). Errors: SL_EINVAL (address, TLS or socket
 * directory; logged), SL_ENOMEM, SL_ECONN (cannot listen; logged). */
int sl_metrics_start(struct sl_server *srv, const char *addr, sl_metrics **out);
/* Stops the listener and closes its connections (waits for a scrape in
 * progress); a unix socket's file is removed. NULL is fine. */
void sl_metrics_stop(sl_metrics *m);
/* The exposition text of srv now (NUL-terminated, *len without the NUL);
 * free with sl_free. Takes the server lock briefly. Errors: SL_ENOMEM. */
int sl_metrics_render(struct sl_server *srv, char **text, size_t *len);

#endif
