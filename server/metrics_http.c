/* The metrics endpoint's listener (metrics.h): just enough HTTP/1.1 for a
 * scraper, over NNG streams, so that tcp://, tls+tcp:// and ipc:// (a unix
 * socket) are one code path.
 *
 * Why not NNG's HTTP server: it accepts every connection and waits on each
 * for as long as the peer likes, so idle or slow peers could take all of
 * salusd's descriptors. Here every connection is admitted against a budget
 * of its own (per peer and in all, far below RLIMIT_NOFILE) and lives under
 * a deadline: one for its request to arrive, one for its answer to leave.
 * A connection over the budget is closed as soon as it is accepted, so it
 * costs a descriptor for no longer than that.
 *
 * Threads. Everything runs in NNG's aio callbacks; one lock guards the
 * list of connections. A connection is freed only by its own callback
 * (after unlinking itself under the lock), and sl_metrics_stop closes the
 * streams still listed under the lock and waits for the count to reach
 * zero, so a callback never sees a freed listener. */
#include "metrics.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

/* A scraper's request is a few hundred bytes of headers. */
#define REQUEST_MAX 8192
#define REQUEST_TIMEOUT_MS 10000
#define RESPONSE_TIMEOUT_MS 10000
/* The descriptor budget: a sixteenth of RLIMIT_NOFILE, within these. */
#define CONNECTIONS_MIN 8
#define CONNECTIONS_MAX 64
#define PER_PEER_DIV 8
/* After accept fails (out of descriptors or memory), before trying again. */
#define ACCEPT_BACKOFF_MS 100
/* After a connection was refused, before accepting the next: a refused
 * stream's descriptor is closed later by NNG's reaper thread, so a flood
 * accepted as fast as it arrives holds descriptors for as long as the
 * reaper lags. Paced, the flood waits in the kernel's listen backlog (not
 * salusd's descriptors) and a scrape queued behind it waits a few ms per
 * connection ahead of it. */
#define REFUSAL_PACE_MS 5
#define REFUSAL_LOG_NS (60ull * 1000000000ull)

/* Peer keys: the top two bits say what the rest is. */
#define PEER_UNKNOWN 0ull
#define PEER_UID (1ull << 62)
#define PEER_V4 (2ull << 62)
#define PEER_V6 (3ull << 62)

typedef struct conn {
    struct conn *next, **prev;
    sl_metrics *m;
    nng_stream *stream;
    nng_aio *aio;
    uint64_t peer;
    uint64_t deadline_ns;
    char *answer; /* once the request is in: what is being sent */
    size_t answer_len, sent;
    size_t req_len;
    char req[REQUEST_MAX + 1];
} conn;

struct sl_metrics {
    sl_server *srv;
    nng_stream_listener *listener;
    nng_aio *accept_aio;
    bool accept_backing_off; /* only the accept callback touches it */
    unsigned max_conns, max_per_peer;
    char url[300];
    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t all_gone;
    conn *conns;
    unsigned n_conns;
    bool stopping;
    uint64_t refused, refused_logged, last_refusal_log_ns;
};

/* ---- who a peer is ---- */

/* The uid owning the local socket at the far end of a loopback (or any
 * same-host) TCP connection, asked of the kernel by its four-tuple
 * (sock_diag, the interface ss(8) uses; no privilege needed). All local
 * users share 127.0.0.1, so only the uid tells them apart. */
static bool local_tcp_uid(const nng_sockaddr *peer, const nng_sockaddr *self, uint64_t *uid)
{
    struct {
        struct nlmsghdr nh;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.nh.nlmsg_len = sizeof req;
    req.nh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = ~0u;
    req.r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    /* the socket sought is the peer's: its source is the peer's address */
    if (peer->s_family == NNG_AF_INET && self->s_family == NNG_AF_INET) {
        req.r.sdiag_family = AF_INET;
        req.r.id.idiag_sport = peer->s_in.sa_port;
        req.r.id.idiag_dport = self->s_in.sa_port;
        memcpy(req.r.id.idiag_src, &peer->s_in.sa_addr, 4);
        memcpy(req.r.id.idiag_dst, &self->s_in.sa_addr, 4);
    } else if (peer->s_family == NNG_AF_INET6 && self->s_family == NNG_AF_INET6) {
        req.r.sdiag_family = AF_INET6;
        req.r.id.idiag_sport = peer->s_in6.sa_port;
        req.r.id.idiag_dport = self->s_in6.sa_port;
        memcpy(req.r.id.idiag_src, peer->s_in6.sa_addr, 16);
        memcpy(req.r.id.idiag_dst, self->s_in6.sa_addr, 16);
    } else {
        return false;
    }
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return false;
    struct timeval tv = {.tv_usec = 200000};
    (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    bool found = false;
    if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *) &kernel, sizeof kernel) ==
        (ssize_t) sizeof req) {
        union {
            struct nlmsghdr nh;
            char bytes[1024];
        } ans;
        ssize_t n = recv(fd, &ans, sizeof ans, 0);
        if (n >= (ssize_t) NLMSG_LENGTH(sizeof(struct inet_diag_msg)) &&
            ans.nh.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            const struct inet_diag_msg *msg = NLMSG_DATA(&ans.nh);
            *uid = msg->idiag_uid;
            found = true;
        }
    }
    close(fd);
    return found;
}

/* The key a peer's connections are counted under: its uid over a unix
 * socket or from this host, else its IPv4 address or IPv6 /64. */
static uint64_t peer_key(nng_stream *s)
{
    uint64_t uid;
    if (nng_stream_get_uint64(s, NNG_OPT_IPC_PEER_UID, &uid) == 0)
        return PEER_UID | (uid & 0xffffffffu);
    nng_sockaddr peer, self;
    if (nng_stream_get_addr(s, NNG_OPT_REMADDR, &peer) != 0)
        return PEER_UNKNOWN;
    if (nng_stream_get_addr(s, NNG_OPT_LOCADDR, &self) == 0 && local_tcp_uid(&peer, &self, &uid))
        return PEER_UID | (uid & 0xffffffffu);
    if (peer.s_family == NNG_AF_INET)
        return PEER_V4 | ntohl(peer.s_in.sa_addr);
    if (peer.s_family == NNG_AF_INET6) {
        uint64_t prefix = 0;
        for (int i = 0; i < 8; i++)
            prefix = prefix << 8 | peer.s_in6.sa_addr[i];
        return PEER_V6 | (prefix >> 2);
    }
    return PEER_UNKNOWN;
}

/* ---- one connection ---- */

static void conn_done(void *arg);

/* Unlinks and frees c; called from c's own callback only. */
static void conn_close(conn *c)
{
    sl_metrics *m = c->m;
    pthread_mutex_lock(&m->lock);
    *c->prev = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&m->lock);
    nng_stream_free(c->stream);
    nng_aio_reap(c->aio); /* this is its callback: freed once it returns */
    sl_free(c->answer);
    sl_free(c);
    pthread_mutex_lock(&m->lock);
    m->n_conns--;
    pthread_cond_broadcast(&m->all_gone);
    pthread_mutex_unlock(&m->lock);
}

/* Arms c's aio for what is left of its deadline; false when it has passed. */
static bool arm(conn *c)
{
    uint64_t now = sl_now_ns();
    if (now >= c->deadline_ns)
        return false;
    nng_aio_set_timeout(c->aio, (nng_duration) ((c->deadline_ns - now) / 1000000 + 1));
    return true;
}

static void receive(conn *c)
{
    if (!arm(c)) {
        conn_close(c);
        return;
    }
    nng_iov iov = {.iov_buf = c->req + c->req_len, .iov_len = REQUEST_MAX - c->req_len};
    (void) nng_aio_set_iov(c->aio, 1, &iov);
    nng_stream_recv(c->stream, c->aio);
}

static void send_rest(conn *c)
{
    if (!arm(c)) {
        conn_close(c);
        return;
    }
    nng_iov iov = {.iov_buf = c->answer + c->sent, .iov_len = c->answer_len - c->sent};
    (void) nng_aio_set_iov(c->aio, 1, &iov);
    nng_stream_send(c->stream, c->aio);
}

/* Whether the request's headers are complete (a blank line). */
static bool headers_done(const conn *c)
{
    for (size_t i = 0; i + 1 < c->req_len; i++)
        if (c->req[i] == '\n' &&
            (c->req[i + 1] == '\n' ||
             (c->req[i + 1] == '\r' && i + 2 < c->req_len && c->req[i + 2] == '\n')))
            return true;
    return false;
}

/* Makes c's answer: status line, headers, body (NULL for none). */
static bool answer(conn *c, int status, const char *reason, const char *type, const char *body,
                   size_t body_len, bool head_only)
{
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, reason, type, body_len, status == 405 ? "Allow: GET, HEAD\r\n" : "");
    if (n <= 0 || (size_t) n >= sizeof head)
        return false;
    size_t total = (size_t) n + (head_only ? 0 : body_len);
    c->answer = sl_malloc(total);
    if (!c->answer)
        return false;
    memcpy(c->answer, head, (size_t) n);
    if (!head_only && body_len)
        memcpy(c->answer + n, body, body_len);
    c->answer_len = total;
    c->sent = 0;
    return true;
}

/* The request is in: GET (or HEAD) /metrics gets the exposition text. */
static void respond(conn *c)
{
    c->req[c->req_len] = '\0';
    char method[8] = "", target[256] = "";
    (void) sscanf(c->req, "%7s %255s", method, target);
    bool head = strcmp(method, "HEAD") == 0;
    size_t path_len = strcspn(target, "?");
    bool ok;
    if (strcmp(method, "GET") != 0 && !head) {
        static const char text[] = "only GET and HEAD\n";
        ok = answer(c, 405, "Method Not Allowed", "text/plain", text, sizeof text - 1, false);
    } else if (path_len != 8 || strncmp(target, "/metrics", 8) != 0) {
        static const char text[] = "metrics are at /metrics\n";
        ok = answer(c, 404, "Not Found", "text/plain", text, sizeof text - 1, head);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (sl_metrics_render(c->m->srv, &text, &len) == SL_OK)
            ok = answer(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", text, len, head);
        else
            ok = answer(c, 500, "Internal Server Error", "text/plain", "", 0, head);
        sl_free(text);
    }
    if (!ok) {
        conn_close(c);
        return;
    }
    c->deadline_ns = sl_now_ns() + RESPONSE_TIMEOUT_MS * 1000000ull;
    send_rest(c);
}

static void conn_done(void *arg)
{
    conn *c = arg;
    if (nng_aio_result(c->aio) != 0) { /* timed out, closed, reset */
        conn_close(c);
        return;
    }
    size_t n = nng_aio_count(c->aio);
    if (c->answer) {
        c->sent += n;
        if (c->sent >= c->answer_len)
            conn_close(c);
        else
            send_rest(c);
        return;
    }
    c->req_len += n;
    if (headers_done(c))
        respond(c);
    else if (n == 0 || c->req_len == REQUEST_MAX) /* no request fits: drop it */
        conn_close(c);
    else
        receive(c);
}

/* ---- accepting ---- */

/* Logs refusals at most once a minute (the peers are not to flood the log
 * either). Lock held. */
static void note_refusal(sl_metrics *m, uint64_t peer)
{
    m->refused++;
    uint64_t now = sl_now_ns();
    if (m->last_refusal_log_ns && now - m->last_refusal_log_ns < REFUSAL_LOG_NS)
        return;
    m->last_refusal_log_ns = now;
    sl_log_warn("met.cap",
                "metrics endpoint: %llu connection(s) closed at once over its budget (%u per "
                "peer, %u in all); the latest from %s %llu",
                (unsigned long long) (m->refused - m->refused_logged), m->max_per_peer,
                m->max_conns,
                (peer >> 62) == 1   ? "uid"
                : (peer >> 62) == 0 ? "an unknown peer"
                                    : "address key",
                (unsigned long long) (peer & ~(3ull << 62)));
    m->refused_logged = m->refused;
}

/* Admits s under the budget, or closes it (then false). */
static bool admit(sl_metrics *m, nng_stream *s)
{
    uint64_t peer = peer_key(s);
    conn *c = sl_calloc(1, sizeof *c);
    if (c && nng_aio_alloc(&c->aio, conn_done, c) != 0) {
        sl_free(c);
        c = NULL;
    }
    pthread_mutex_lock(&m->lock);
    unsigned same = 0;
    for (conn *o = m->conns; o; o = o->next)
        same += o->peer == peer;
    bool room = !m->stopping && m->n_conns < m->max_conns && same < m->max_per_peer;
    if (room && c) {
        c->m = m;
        c->stream = s;
        c->peer = peer;
        c->deadline_ns = sl_now_ns() + REQUEST_TIMEOUT_MS * 1000000ull;
        c->next = m->conns;
        c->prev = &m->conns;
        if (m->conns)
            m->conns->prev = &c->next;
        m->conns = c;
        m->n_conns++;
    } else if (!m->stopping && c) {
        note_refusal(m, peer);
    }
    pthread_mutex_unlock(&m->lock);
    if (!room || !c) {
        if (c) {
            nng_aio_free(c->aio);
            sl_free(c);
        }
        nng_stream_free(s);
        return false;
    }
    receive(c);
    return true;
}

static void accept_done(void *arg)
{
    sl_metrics *m = arg;
    int rv = nng_aio_result(m->accept_aio);
    pthread_mutex_lock(&m->lock);
    bool stopping = m->stopping;
    pthread_mutex_unlock(&m->lock);
    if (m->accept_backing_off) {
        m->accept_backing_off = false;
    } else if (rv == 0) {
        if (!admit(m, nng_aio_get_output(m->accept_aio, 0)) && !stopping) {
            m->accept_backing_off = true;
            nng_sleep_aio(REFUSAL_PACE_MS, m->accept_aio);
            return;
        }
    } else if (!stopping && rv != NNG_ECLOSED && rv != NNG_ECANCELED) {
        /* out of descriptors or memory: try again later, never spin */
        m->accept_backing_off = true;
        nng_sleep_aio(ACCEPT_BACKOFF_MS, m->accept_aio);
        return;
    }
    if (!stopping && rv != NNG_ECLOSED && rv != NNG_ECANCELED)
        nng_stream_listener_accept(m->listener, m->accept_aio);
}

/* ---- the address ---- */

bool sl_metrics_socket_path(const char *addr, const char **path)
{
    if (!addr)
        return false;
    if (strncmp(addr, "unix:", 5) == 0) {
        *path = addr + 5;
        return true;
    }
    if (addr[0] == '/') {
        *path = addr;
        return true;
    }
    return false;
}

int sl_metrics_url(const char *addr, char *out, size_t len)
{
    if (!addr || !*addr)
        return SL_EINVAL;
    const char *path;
    if (sl_metrics_socket_path(addr, &path)) {
        int n = snprintf(out, len, "ipc://%s", path);
        return path[0] == '/' && n > 0 && (size_t) n < len ? SL_OK : SL_EINVAL;
    }
    bool tls = strncmp(addr, "https://", 8) == 0;
    if (tls)
        addr += 8;
    else if (strncmp(addr, "http://", 7) == 0)
        addr += 7;
    const char *colon = strrchr(addr, ':');
    const char *port = colon ? colon + 1 : addr;
    size_t host_len = colon ? (size_t) (colon - addr) : 0;
    char *end;
    long p = strtol(port, &end, 10);
    if (!*port || *end || p < 1 || p > 65535 || host_len > 255 || strchr(port, '/'))
        return SL_EINVAL;
    const char *scheme = tls ? "tls+tcp" : "tcp";
    int n = host_len ? snprintf(out, len, "%s://%.*s:%ld", scheme, (int) host_len, addr, p)
                     : snprintf(out, len, "%s://127.0.0.1:%ld", scheme, p);
    return n > 0 && (size_t) n < len ? SL_OK : SL_EINVAL;
}

/* The connection budget: a sixteenth of the descriptor limit, so that
 * tenants keep the rest. */
static unsigned connection_budget(void)
{
    struct rlimit rl;
    rlim_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    rlim_t n = lim / 16;
    if (n < CONNECTIONS_MIN)
        n = CONNECTIONS_MIN;
    if (n > CONNECTIONS_MAX)
        n = CONNECTIONS_MAX;
    return (unsigned) n;
}

/* Listener options: TLS with client certificates, a unix socket's
 * permissions and its directory. */
static int configure(sl_metrics *m, const sl_config *cfg)
{
    int rv;
    if (strncmp(m->url, "tls+tcp://", 10) == 0) {
        const char *ca = cfg->metrics_tls_ca;
        if (!ca) {
            sl_log_err("met.tls", "an https:// --metrics-listen needs --metrics-tls-ca FILE: "
                                  "scrapers must present a certificate");
            return SL_EINVAL;
        }
        nng_tls_config *tc;
        int rc = sl_listen_tls_config(cfg, ca, true, &tc);
        if (rc != SL_OK)
            return rc;
        rv = nng_stream_listener_set_ptr(m->listener, NNG_OPT_TLS_CONFIG, tc);
        nng_tls_config_free(tc); /* the listener holds its own reference */
        if (rv != 0) {
            sl_log_err("met.tls", "cannot use TLS on %s: %s", m->url, nng_strerror(rv));
            return SL_EINVAL;
        }
    } else if (strncmp(m->url, "ipc://", 6) == 0) {
        if (sl_ipc_dir_check(m->url + 6, cfg) != SL_OK)
            return SL_EINVAL;
        if ((rv = nng_stream_listener_set_int(m->listener, NNG_OPT_IPC_PERMISSIONS,
                                              cfg->metrics_mode)) != 0) {
            sl_log_err("met.listen", "cannot set permissions %o on %s: %s", cfg->metrics_mode,
                       m->url, nng_strerror(rv));
            return SL_EINVAL;
        }
    }
    return SL_OK;
}

int sl_metrics_start(sl_server *srv, const char *addr, sl_metrics **out)
{
    sl_metrics *m = sl_calloc(1, sizeof *m);
    if (!m)
        return SL_ENOMEM;
    if (sl_metrics_url(addr, m->url, sizeof m->url) != SL_OK) {
        sl_log_err("met.listen",
                   "--metrics-listen '%s': give PORT, HOST:PORT, http://HOST:PORT, "
                   "https://HOST:PORT, or unix:PATH or an absolute PATH",
                   addr);
        sl_free(m);
        return SL_EINVAL;
    }
    m->srv = srv;
    m->max_conns = connection_budget();
    m->max_per_peer = m->max_conns / PER_PEER_DIV;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->all_gone, NULL);
    int rc = SL_ECONN;
    int rv = nng_stream_listener_alloc(&m->listener, m->url);
    if (rv != 0) {
        sl_log_err("met.listen", "cannot serve metrics at %s: %s", m->url, nng_strerror(rv));
        goto out_free;
    }
    if ((rc = configure(m, &srv->cfg)) != SL_OK)
        goto out_listener;
    rc = SL_ECONN;
    /* a unix socket is born with its final permissions (NNG chmods after
     * binding) */
    bool ipc = strncmp(m->url, "ipc://", 6) == 0;
    mode_t old_mask = ipc ? umask((mode_t) (~srv->cfg.metrics_mode & 0777)) : 0;
    rv = nng_stream_listener_listen(m->listener);
    if (ipc)
        umask(old_mask);
    if (rv != 0) {
        sl_log_err("met.listen", "cannot serve metrics at %s: %s", m->url, nng_strerror(rv));
        goto out_listener;
    }
    if ((rv = nng_aio_alloc(&m->accept_aio, accept_done, m)) != 0) {
        rc = SL_ENOMEM;
        goto out_listener;
    }
    nng_stream_listener_accept(m->listener, m->accept_aio);
    sl_log_info("met.listen", "metrics at %s/metrics (%u connections, %u per peer)", m->url,
                m->max_conns, m->max_per_peer);
    *out = m;
    return SL_OK;

out_listener:
    nng_stream_listener_free(m->listener);
out_free:
    pthread_cond_destroy(&m->all_gone);
    pthread_mutex_destroy(&m->lock);
    sl_free(m);
    return rc;
}

void sl_metrics_stop(sl_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stopping = true;
    pthread_mutex_unlock(&m->lock);
    nng_stream_listener_close(m->listener);
    nng_aio_stop(m->accept_aio);
    pthread_mutex_lock(&m->lock);
    for (conn *c = m->conns; c; c = c->next)
        nng_stream_close(c->stream); /* its callback then frees it */
    while (m->n_conns)
        pthread_cond_wait(&m->all_gone, &m->lock);
    pthread_mutex_unlock(&m->lock);
    nng_aio_free(m->accept_aio);
    nng_stream_listener_free(m->listener);
    pthread_cond_destroy(&m->all_gone);
    pthread_mutex_destroy(&m->lock);
    sl_free(m);
}
