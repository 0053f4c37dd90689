/* The Prometheus endpoint: `salusd --metrics-listen ADDR` serves GET
 * /metrics in the text exposition format (version 0.0.4) over NNG's HTTP
 * server.
 *
 * What it shows is for operators: every session's name, owner and usage.
 * So the listener binds the loopback address unless ADDR names a host, and
 * the documentation says whoever can reach it sees all tenants' figures.
 *
 * Threads and locks. A scrape runs on an NNG HTTP thread. It copies what
 * it needs under the server lock (O(sessions + lanes + queue), no
 * allocation that grows with anything a client controls beyond
 * --max-sessions records) and formats after releasing it, so a scrape
 * holds the lock about as long as a Status request does. */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stddef.h>

struct sl_server;
typedef struct sl_metrics sl_metrics;

/* Turns ADDR (PORT, :PORT, HOST:PORT or http://HOST:PORT; HOST defaults to
 * 127.0.0.1) into an http:// URL in buf. Errors: SL_EINVAL. */
int sl_metrics_url(const char *addr, char *buf, size_t len);
/* Starts serving srv's metrics at addr. Errors: SL_EINVAL (address),
 * SL_ENOMEM, SL_ECONN (cannot listen; logged). */
int sl_metrics_start(struct sl_server *srv, const char *addr, sl_metrics **out);
/* Stops the listener (waits for a scrape in progress). NULL is fine. */
void sl_metrics_stop(sl_metrics *m);
/* The exposition text of srv now (NUL-terminated, *len without the NUL);
 * free with sl_free. Takes the server lock briefly. Errors: SL_ENOMEM. */
int sl_metrics_render(struct sl_server *srv, char **text, size_t *len);

#endif
