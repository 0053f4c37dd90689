/* libsalusclient: connection, sessions, tensors, runs. The graph builder is
 * in graph.c. Every call is one synchronous request/reply on the client's
 * REQ socket. The socket's dialer reconnects by itself when salusd goes away
 * and comes back; calls made while no connection exists fail at once with
 * SL_ECONN instead of queueing. */
#include "client_internal.h"
#include "half.h"
#include "sl_nng.h"

#include <errno.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The three spellings of a status code are one set of numbers: the wire's
 * (proto Code), the modules' (SL_E*) and the public API's (SALUS_E*), so
 * codes cross every boundary without translation. */
#define SAME_CODE(sl, salus, wire)                                                                 \
    _Static_assert(SL_##sl == (int) SALUS_##salus && SL_##sl == (int) SALUS__CODE__##wire,         \
                   #sl " differs between sl_error.h, salus.h and salus.proto")
SAME_CODE(OK, OK, OK);
SAME_CODE(EINVAL, EINVAL, INVALID_ARGUMENT);
SAME_CODE(ENOMEM, ENOMEM, HOST_OUT_OF_MEMORY);
SAME_CODE(EEXHAUSTED, EEXHAUSTED, RESOURCE_EXHAUSTED);
SAME_CODE(ENOTFOUND, ENOTFOUND, NOT_FOUND);
SAME_CODE(EPERM, EPERM, PERMISSION_DENIED);
SAME_CODE(EPROTO, EPROTO, PROTOCOL_ERROR);
SAME_CODE(EDEVICE, EDEVICE, DEVICE_ERROR);
SAME_CODE(ENODEV, ENODEV, NO_DEVICE);
SAME_CODE(ESHUTDOWN, ESHUTDOWN, SHUTTING_DOWN);
SAME_CODE(EUNSUPPORTED, EUNSUPPORTED, UNSUPPORTED);
SAME_CODE(ETIMEDOUT, ETIMEDOUT, TIMED_OUT);
SAME_CODE(ECONN, ECONN, TRANSPORT_ERROR);
SAME_CODE(EINTERNAL, EINTERNAL, INTERNAL);
SAME_CODE(ESESSIONLOST, ESESSIONLOST, SESSION_LOST);
SAME_CODE(EDEVICERESET, EDEVICERESET, DEVICE_RESET);
SAME_CODE(EBUSY, EBUSY, BUSY);
_Static_assert(SL_E_COUNT == SALUS__CODE__BUSY + 1,
               "a status code is missing from salus.h or salus.proto");
#undef SAME_CODE

/* Why the calling thread's last salus_connect failed (salus_last_error(NULL)). */
static _Thread_local char connect_error[512];

uint16_t salus_bf16_from_f32(float f)
{
    return sl_bf16_from_f32(f);
}

float salus_f32_from_bf16(uint16_t h)
{
    return sl_f32_from_bf16(h);
}

uint16_t salus_f16_from_f32(float f)
{
    return sl_f16_from_f32(f);
}

float salus_f32_from_f16(uint16_t h)
{
    return sl_f32_from_f16(h);
}

int salus_half_from_f32(int dtype, const float *src, uint16_t *dst, size_t n)
{
    if (dtype != SALUS_BF16 && dtype != SALUS_F16)
        return SL_EINVAL;
    sl_half_from_f32((unsigned) dtype, src, dst, n);
    return SL_OK;
}

int salus_half_to_f32(int dtype, const uint16_t *src, float *dst, size_t n)
{
    if (dtype != SALUS_BF16 && dtype != SALUS_F16)
        return SL_EINVAL;
    sl_half_to_f32((unsigned) dtype, src, dst, n);
    return SL_OK;
}

const char *salus_strerror(int code)
{
    return sl_strerror(code);
}

void salus_free(void *p)
{
    sl_free(p);
}

const char *salus_default_url(void)
{
    static char url[512];
    const char *env = getenv("SALUS_URL");
    const char *dir = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (env && *env)
        snprintf(url, sizeof url, "%s", env);
    else if (dir && *dir &&
             (size_t) snprintf(url, sizeof url, "ipc://%s/salus/salus.sock", dir) < sizeof url &&
             stat(url + 6, &st) == 0)
        ; /* the user's own salusd */
    else
        snprintf(url, sizeof url, "ipc:///run/salus/salus.sock");
    return url;
}

static int from_nng(int rv)
{
    switch (rv) {
    case 0:
        return SL_OK;
    case NNG_ENOMEM:
        return SL_ENOMEM;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
        return SL_EINVAL;
    case NNG_ETIMEDOUT:
        return SL_ETIMEDOUT;
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
        return SL_EPERM; /* TLS: a certificate was refused */
    default:
        return SL_ECONN;
    }
}

static void set_error(salus_client *c, const char *fmt, const char *arg)
{
    snprintf(c->last_error, sizeof c->last_error, fmt, arg);
}

/* Runs one aio step and waits for it. A dropped connection cancels it (see
 * pipe_event), so a call never hangs on a server that is gone. */
static int wait_step(salus_client *c)
{
    if (atomic_load(&c->lost))
        nng_aio_cancel(c->aio);
    nng_aio_wait(c->aio);
    return nng_aio_result(c->aio);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int dial(salus_client *c, const char *url, int flags);

/* Replaces the dialer once calls have found no connection for
 * SL_CLIENT_REDIAL_MS (see there). Replacing one that was merely waiting to
 * retry costs nothing: the new one dials at once. Called under c->lock;
 * NNG's pipe callbacks never take it. */
static void redial_if_stalled(salus_client *c)
{
    int64_t now = now_ms();
    if (!c->down_ms) {
        c->down_ms = now;
        return;
    }
    if (now - c->down_ms < SL_CLIENT_REDIAL_MS)
        return;
    c->down_ms = now;
    nng_dialer old = c->dialer;
    if (dial(c, c->url, NNG_FLAG_NONBLOCK) == SL_OK)
        nng_dialer_close(old);
}

int sl_client_call(salus_client *c, Salus__Request *req, Salus__Reply **out)
{
    nng_msg *msg = NULL;
    int rc, rv;

    pthread_mutex_lock(&c->lock);
    if (atomic_load(&c->pipes) == 0) {
        redial_if_stalled(c);
        set_error(c, "%s", "not connected to salusd (server gone or restarting)");
        rc = SL_ECONN;
        goto out_unlock;
    }
    c->down_ms = 0;
    atomic_store(&c->lost, 0);
    req->seq = ++c->seq;
    size_t len = salus__request__get_packed_size(req);
    if (c->max_message && len > c->max_message) {
        /* salusd's NNG would drop the connection, and every session on it */
        snprintf(c->last_error, sizeof c->last_error,
                 "a request of %zu bytes is larger than salusd accepts (--max-message %llu): "
                 "tensors move in chunks by themselves; send a run's large feeds through shared "
                 "memory (ipc://, SALUS_SHM unset), fewer per run, or raise salusd --max-message",
                 len, (unsigned long long) c->max_message);
        rc = SL_EINVAL;
        goto out_unlock;
    }
    if ((rv = nng_msg_alloc(&msg, len)) != 0) {
        rc = from_nng(rv);
        goto out_unlock;
    }
    salus__request__pack(req, nng_msg_body(msg));
    nng_aio_set_msg(c->aio, msg);
    nng_ctx_send(c->ctx, c->aio);
    if ((rv = wait_step(c)) != 0) {
        nng_msg_free(nng_aio_get_msg(c->aio));
        goto out_lost;
    }
    nng_ctx_recv(c->ctx, c->aio);
    if ((rv = wait_step(c)) != 0)
        goto out_lost;
    msg = nng_aio_get_msg(c->aio);
    Salus__Reply *rep = salus__reply__unpack(NULL, nng_msg_len(msg), nng_msg_body(msg));
    nng_msg_free(msg);
    if (!rep || rep->seq != req->seq) {
        set_error(c, "%s", rep ? "reply out of sequence" : "undecodable reply");
        if (rep)
            salus__reply__free_unpacked(rep, NULL);
        rc = SL_EPROTO;
        goto out_unlock;
    }
    rc = (int) rep->code;
    if (rc != SL_OK) {
        set_error(c, "%s", rep->message && *rep->message ? rep->message : sl_strerror(rc));
        salus__reply__free_unpacked(rep, NULL);
        goto out_unlock;
    }
    c->last_error[0] = '\0';
    *out = rep;
    pthread_mutex_unlock(&c->lock);
    return SL_OK;

out_lost:
    if (rv == NNG_ECANCELED) {
        set_error(c, "%s", "connection to salusd lost while waiting for the reply");
        rc = SL_ECONN;
    } else {
        set_error(c, "transport error: %s", nng_strerror(rv));
        rc = from_nng(rv);
    }
out_unlock:
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* A request whose reply carries no body the caller needs: just its code. */
static int call_no_body(salus_client *c, Salus__Request *req)
{
    Salus__Reply *rep;
    int rc = sl_client_call(c, req, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

static int session_call_no_body(salus_session *s, Salus__Request *req)
{
    Salus__Reply *rep;
    int rc = sl_client_session_call(s, req, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

/* Whether an ipc:// server of uid may be trusted with our requests: root,
 * ourselves, the one SALUS_SERVER_UID names, or the owner of the socket's
 * directory when root made that directory for it (dir_uid). */
static bool server_trusted(const salus_client *c, uint64_t uid)
{
    return uid == 0 || uid == (uint64_t) getuid() || uid == (uint64_t) geteuid() ||
           uid == c->trusted_uid || (c->dir_uid >= 0 && uid == (uint64_t) c->dir_uid);
}

/* The owner of the directory of ipc:// socket path when only root can have
 * given it that directory: the directory is not writable by others, and its
 * parent belongs to root and is not writable by others either (as for
 * `install -d -o salus /run/salus`, salusd --user salus). No other user can
 * create such a directory, so a server running as its owner was put there
 * by root. -1 when that does not hold (e.g. a directory made in /tmp). */
static int64_t socket_dir_owner(const char *path)
{
    char dir[PATH_MAX], real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path || (size_t) (slash - path) >= sizeof dir)
        return -1;
    snprintf(dir, sizeof dir, "%.*s", (int) (slash - path), path);
    if (!realpath(dir, real))
        return -1;
    struct stat st, up;
    char *last = strrchr(real, '/');
    if (!last || last == real || lstat(real, &st) != 0 || !S_ISDIR(st.st_mode) ||
        (st.st_mode & 022))
        return -1;
    *last = '\0';
    if (lstat(real, &up) != 0 || !S_ISDIR(up.st_mode) || up.st_uid != 0 || (up.st_mode & 022))
        return -1;
    return (int64_t) st.st_uid;
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    salus_client *c = arg;
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        uint64_t uid = INT64_MAX; /* unknown */
        /* refused before the pipe is used: no request reaches an impostor */
        if (c->check_uid &&
            (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) != 0 || !server_trusted(c, uid))) {
            atomic_store(&c->refused_uid, (int64_t) (uid & INT64_MAX));
            atomic_store(&c->refused_pipe, (uint32_t) nng_pipe_id(p));
            nng_pipe_close(p);
        }
    } else if (ev == NNG_PIPE_EV_ADD_POST) {
        atomic_fetch_add(&c->pipes, 1);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        /* NNG reports the removal of a pipe closed in ADD_PRE too, though
         * it never came up: counted, it would leave the client "not
         * connected" to every later server */
        if ((uint32_t) nng_pipe_id(p) != atomic_load(&c->refused_pipe))
            atomic_fetch_sub(&c->pipes, 1);
        atomic_store(&c->lost, 1);
        nng_aio_cancel(c->aio);
    }
}

int sl_client_session_call(salus_session *s, Salus__Request *req, Salus__Reply **out)
{
    if (!s->client)
        return SL_ECONN; /* its client was disconnected */
    req->session_id = s->id;
    req->token = s->token;
    return sl_client_call(s->client, req, out);
}

static void close_client(salus_client *c)
{
    /* no pipe callbacks run once the close returns; if NNG 1.5 hangs in it
     * (see sl_nng.h) the client is left behind rather than the caller */
    if (!sl_nng_close_bounded(c->sock, 3))
        return;
    nng_aio_free(c->aio);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->sessions_lock);
    sl_free(c->url);
    sl_free(c);
}

/* Reads a whole PEM file into a NUL-terminated buffer (caller frees). */
static char *read_pem(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(connect_error, sizeof connect_error, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1u << 20; /* certificate chains are kilobytes */
    char *buf = sl_malloc(cap);
    if (buf) {
        size_t n = fread(buf, 1, cap - 1, f);
        buf[n] = '\0';
    }
    fclose(f);
    return buf;
}

/* The host part of "tls+tcp://host:port" ("[v6]" without brackets): the name
 * salusd's certificate must carry, unless SALUS_TLS_SERVER_NAME says. */
static void url_host(const char *url, char *host, size_t len)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    const char *end = p[0] == '[' ? strchr(p, ']') : strrchr(p, ':');
    if (p[0] == '[')
        p++;
    size_t n = end && end >= p ? (size_t) (end - p) : strlen(p);
    snprintf(host, len, "%.*s", (int) n, p);
}

/* TLS for a tls+tcp:// dialer from SALUS_TLS_* (see salus.h). */
static int tls_setup(nng_dialer d, const char *url)
{
    const char *ca = getenv("SALUS_TLS_CA"), *cert = getenv("SALUS_TLS_CERT"),
               *key = getenv("SALUS_TLS_KEY"), *name = getenv("SALUS_TLS_SERVER_NAME");
    if (!ca || !*ca) {
        snprintf(connect_error, sizeof connect_error,
                 "%s: set SALUS_TLS_CA to the CA file that signed salusd's certificate", url);
        return SL_EINVAL;
    }
    if ((cert && *cert) != (key && *key)) {
        snprintf(connect_error, sizeof connect_error,
                 "SALUS_TLS_CERT and SALUS_TLS_KEY go together (a client certificate)");
        return SL_EINVAL;
    }
    char host[256];
    url_host(url, host, sizeof host);
    nng_tls_config *tc;
    int rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_CLIENT);
    if (rv)
        return from_nng(rv);
    char *cert_pem = NULL, *key_pem = NULL;
    int rc = SL_EINVAL;
    if ((rv = nng_tls_config_ca_file(tc, ca)) != 0) {
        snprintf(connect_error, sizeof connect_error, "bad SALUS_TLS_CA %s: %s", ca,
                 nng_strerror(rv));
        goto out_free;
    }
    if ((rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
        (rv = nng_tls_config_server_name(tc, name && *name ? name : host)) != 0)
        goto out_free;
    if (cert && *cert) {
        if (!(cert_pem = read_pem(cert)) || !(key_pem = read_pem(key)))
            goto out_free;
        if ((rv = nng_tls_config_own_cert(tc, cert_pem, key_pem, NULL)) != 0) {
            snprintf(connect_error, sizeof connect_error, "bad SALUS_TLS_CERT/KEY: %s",
                     nng_strerror(rv));
            goto out_free;
        }
    }
    if ((rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tc)) == 0)
        rc = SL_OK;
out_free:
    if (rc && rv && !connect_error[0])
        snprintf(connect_error, sizeof connect_error, "TLS setup failed: %s", nng_strerror(rv));
    sl_free(cert_pem);
    if (key_pem)
        explicit_bzero(key_pem, strlen(key_pem)); /* no private key left in freed memory */
    sl_free(key_pem);
    nng_tls_config_free(tc); /* the dialer holds its own reference */
    return rc;
}

/* Creates and starts c's dialer (TLS configured for tls+tcp://); flags 0
 * waits for the first connection, NNG_FLAG_NONBLOCK does not. A dialer
 * reconnects by itself, unless NNG gave up on it (redial_if_stalled). */
static int dial(salus_client *c, const char *url, int flags)
{
    nng_dialer d;
    int rv = nng_dialer_create(&d, c->sock, url);
    if (rv) {
        snprintf(connect_error, sizeof connect_error, "cannot use %s: %s", url, nng_strerror(rv));
        return rv == NNG_ENOTSUP || rv == NNG_EADDRINVAL ? SL_EINVAL : from_nng(rv);
    }
    int rc = SL_OK;
    if (strncmp(url, "tls+", 4) == 0 && (rc = tls_setup(d, url)) != SL_OK)
        goto out_close;
    (void) nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, 100);
    (void) nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, 1000);
    if ((rv = nng_dialer_start(d, flags)) != 0) {
        snprintf(connect_error, sizeof connect_error, "cannot connect to %s: %s", url,
                 nng_strerror(rv));
        rc = rv == NNG_ECONNREFUSED || rv == NNG_ENOENT ? SL_ECONN : from_nng(rv);
        goto out_close;
    }
    c->dialer = d;
    return SL_OK;
out_close:
    nng_dialer_close(d);
    return rc;
}

/* SALUS_CONNECT_TIMEOUT_MS, or the default; a bad value is the default. */
static nng_duration connect_timeout_ms(void)
{
    const char *env = getenv("SALUS_CONNECT_TIMEOUT_MS");
    if (!env || !*env)
        return SL_CLIENT_CONNECT_TIMEOUT_MS;
    char *end;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno || *end || v <= 0 || v > INT32_MAX)
        return SL_CLIENT_CONNECT_TIMEOUT_MS;
    return (nng_duration) v;
}

/* rc, or SL_EPERM with the reason when the server's uid was refused. */
static int refused_server(salus_client *c, const char *url, int rc)
{
    int64_t refused = atomic_load(&c->refused_uid);
    if (refused < 0)
        return rc;
    snprintf(connect_error, sizeof connect_error,
             "refusing salusd at %.200s: it runs as uid %lld, not root, you (uid %u) or the "
             "owner of a socket folder root made; another "
             "user may have taken the socket path. If you trust that user, set "
             "SALUS_SERVER_UID=%lld",
             url, (long long) refused, (unsigned) getuid(), (long long) refused);
    return SL_EPERM;
}

int salus_connect(const char *url, salus_client **out)
{
    connect_error[0] = '\0';
    if (!url)
        url = salus_default_url();
    salus_client *c = sl_calloc(1, sizeof *c);
    if (!c)
        return SL_ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->sessions_lock, NULL);
    int rv = nng_req0_open(&c->sock);
    if (rv) {
        pthread_mutex_destroy(&c->lock);
        pthread_mutex_destroy(&c->sessions_lock);
        sl_free(c);
        return from_nng(rv);
    }
    /* A queued or long iteration must never be re-sent: the default 60 s
     * resend would run it twice. A context copies the socket's resend time
     * when it opens, so this comes first (a context left with a finite one
     * also arms a timer per request: one more thread wake-up per call). */
    (void) nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if ((rv = nng_aio_alloc(&c->aio, NULL, NULL)) != 0 || (rv = nng_ctx_open(&c->ctx, c->sock)))
        goto out_close;
    atomic_store(&c->refused_uid, -1);
    c->trusted_uid = 0;
    c->dir_uid = -1;
    if (strncmp(url, "ipc://", 6) == 0) {
        c->check_uid = true;
        c->dir_uid = socket_dir_owner(url + 6);
        const char *trust = getenv("SALUS_SERVER_UID");
        char *end;
        if (trust && *trust) {
            errno = 0;
            unsigned long long v = strtoull(trust, &end, 10);
            if (errno || *end || trust[0] == '-') {
                snprintf(connect_error, sizeof connect_error, "SALUS_SERVER_UID=%.64s is not a uid",
                         trust);
                close_client(c);
                return SL_EINVAL;
            }
            c->trusted_uid = v;
        }
    }
    (void) nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, pipe_event, c);
    (void) nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, pipe_event, c);
    (void) nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_event, c);
    (void) nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, SL_CLIENT_MAX_MSG);
    const char *shm_env = getenv("SALUS_SHM");
    c->local = strncmp(url, "ipc://", 6) == 0 && !(shm_env && strcmp(shm_env, "0") == 0);
    if (c->local &&
        (size_t) snprintf(c->fd_path, sizeof c->fd_path, "%s.fd", url + 6) >= sizeof c->fd_path)
        c->local = false; /* no room for the descriptor socket's path */
    int rc = (c->url = sl_strdup(url)) ? dial(c, url, 0) : SL_ENOMEM;
    if (rc || atomic_load(&c->refused_uid) >= 0) {
        rc = refused_server(c, url, rc);
        close_client(c);
        return rc;
    }

    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Hello hello = SALUS__HELLO__INIT;
    hello.protocol_version = SALUS_PROTOCOL_VERSION;
    hello.client_name = (char *) "libsalusclient";
    req.body_case = SALUS__REQUEST__BODY_HELLO;
    req.hello = &hello;
    Salus__Reply *rep;
    /* a server that accepted the connection but never answers must not
     * hold the caller forever; later calls wait as long as they take */
    nng_duration timeout = connect_timeout_ms();
    int64_t start_ms = now_ms(), waited = 0;
    /* a connection dropped during the handshake (a listener salusd was
     * replacing at that moment closes the connections it could not serve)
     * is retried while the dialer reconnects, briefly */
    for (;;) {
        nng_aio_set_timeout(c->aio, timeout - (nng_duration) waited);
        rc = sl_client_call(c, &req, &rep);
        waited = now_ms() - start_ms;
        if (rc != SL_ECONN || atomic_load(&c->refused_uid) >= 0 ||
            waited + SL_CLIENT_RETRY_MS >= (int64_t) timeout || waited >= SL_CLIENT_RETRY_WINDOW_MS)
            break;
        struct timespec nap = {0, SL_CLIENT_RETRY_MS * 1000000L};
        nanosleep(&nap, NULL);
    }
    nng_aio_set_timeout(c->aio, NNG_DURATION_DEFAULT);
    if (rc && atomic_load(&c->refused_uid) >= 0) {
        rc = refused_server(c, url, rc);
        close_client(c);
        return rc;
    }
    if (rc == SL_ETIMEDOUT)
        snprintf(c->last_error, sizeof c->last_error,
                 "salusd at %.400s did not answer within %d ms (SALUS_CONNECT_TIMEOUT_MS)", url,
                 (int) timeout);
    if (rc) {
        snprintf(connect_error, sizeof connect_error, "%s", c->last_error);
        close_client(c);
        return rc;
    }
    if (rep->body_case == SALUS__REPLY__BODY_HELLO)
        c->max_message = rep->hello->max_message;
    if (rep->body_case == SALUS__REPLY__BODY_HELLO && rep->hello->device)
        snprintf(c->device, sizeof c->device, "%s (policy %s)", rep->hello->device,
                 rep->hello->policy ? rep->hello->policy : "?");
    salus__reply__free_unpacked(rep, NULL);
    *out = c;
    return SL_OK;

out_close:
    snprintf(connect_error, sizeof connect_error, "cannot open a socket: %s", nng_strerror(rv));
    close_client(c);
    return from_nng(rv);
}

void salus_disconnect(salus_client *c)
{
    if (!c)
        return;
    /* handles outlive their client: detach them so salus_session_close
     * only frees them */
    pthread_mutex_lock(&c->sessions_lock);
    for (salus_session *s = c->sessions; s; s = s->next)
        s->client = NULL;
    c->sessions = NULL;
    pthread_mutex_unlock(&c->sessions_lock);
    close_client(c);
}

const char *salus_last_error(const salus_client *c)
{
    return c ? c->last_error : connect_error;
}

const char *salus_server_device(const salus_client *c)
{
    return c->device;
}

int salus_session_open(salus_client *c, const salus_session_opts *opts, salus_session **out)
{
    salus_session_opts defaults = {0};
    if (!opts)
        opts = &defaults;
    salus_session *s = sl_calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__OpenSession open = SALUS__OPEN_SESSION__INIT;
    Salus__SessionHints hints = SALUS__SESSION_HINTS__INIT;
    hints.name = (char *) (opts->name ? opts->name : "");
    hints.priority = opts->priority;
    hints.weight = opts->weight;
    hints.persistent_bytes = opts->persistent_bytes;
    hints.ephemeral_bytes = opts->ephemeral_bytes;
    hints.expected_total_s = opts->expected_total_s;
    hints.expected_iterations = opts->expected_iterations;
    hints.compute_units = opts->compute_units;
    hints.math_matmul = (Salus__MathMode) opts->math_matmul;
    hints.math_conv = (Salus__MathMode) opts->math_conv;
    hints.wait_for_admission = opts->wait_for_admission != 0;
    open.hints = &hints;
    int job_rc = sl_client_job_from_env(&open.has_job, &open.job_id, &open.step_id);
    if (job_rc) {
        set_error(c, "%s", "SALUS_JOB is not JOB.STEP (two numbers; the Slurm plugin sets it)");
        sl_free(s);
        return job_rc;
    }
    req.body_case = SALUS__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &open;
    Salus__Reply *rep;
    int rc = sl_client_call(c, &req, &rep);
    if (rc) {
        sl_free(s);
        return rc;
    }
    if (rep->body_case != SALUS__REPLY__BODY_OPEN_SESSION) {
        salus__reply__free_unpacked(rep, NULL);
        sl_free(s);
        return SL_EPROTO;
    }
    s->client = c;
    pthread_mutex_init(&s->shm_lock, NULL);
    pthread_mutex_lock(&c->sessions_lock);
    s->next = c->sessions;
    if (s->next)
        s->next->prev = s;
    c->sessions = s;
    pthread_mutex_unlock(&c->sessions_lock);
    s->id = rep->open_session->session_id;
    s->token = rep->open_session->token;
    salus__reply__free_unpacked(rep, NULL);
    *out = s;
    return SL_OK;
}

int salus_session_close(salus_session *s)
{
    if (!s)
        return SL_OK;
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__CloseSession close = SALUS__CLOSE_SESSION__INIT;
    req.body_case = SALUS__REQUEST__BODY_CLOSE_SESSION;
    req.close_session = &close;
    int rc = session_call_no_body(s, &req);
    salus_client *c = s->client;
    if (c) {
        pthread_mutex_lock(&c->sessions_lock);
        if (s->prev)
            s->prev->next = s->next;
        else if (c->sessions == s)
            c->sessions = s->next;
        if (s->next)
            s->next->prev = s->prev;
        pthread_mutex_unlock(&c->sessions_lock);
    }
    sl_client_shm_fini(s);
    pthread_mutex_destroy(&s->shm_lock);
    sl_free(s);
    return rc;
}

uint64_t salus_session_id(const salus_session *s)
{
    return s->id;
}

int sl_client_desc(int dtype, int ndim, const int64_t *dims, Salus__TensorDesc *desc,
                   int64_t *dims_store)
{
    if (ndim < 0 || ndim > SALUS_MAX_DIMS || (ndim > 0 && !dims) || dtype < 0 ||
        dtype >= SL_DTYPE_COUNT)
        return SL_EINVAL;
    salus__tensor_desc__init(desc);
    desc->dtype = (Salus__DType) dtype;
    desc->n_dims = (size_t) ndim;
    memcpy(dims_store, dims, (size_t) ndim * sizeof *dims);
    desc->dims = dims_store;
    return SL_OK;
}

/* The most tensor bytes one request or reply of c carries; 0: the server
 * does not take chunks (it predates them), so tensors move whole. */
static uint64_t chunk_bytes(const salus_client *c)
{
    if (!c->max_message)
        return 0;
    uint64_t chunk = c->max_message / 2;
    return (chunk < SL_CLIENT_CHUNK ? chunk : SL_CLIENT_CHUNK) & ~(uint64_t) 3;
}

int salus_tensor_create(salus_session *s, int dtype, int ndim, const int64_t *dims,
                        const void *init, uint64_t *id)
{
    Salus__TensorDesc desc;
    int64_t dims_store[SALUS_MAX_DIMS];
    int rc = sl_client_desc(dtype, ndim, dims, &desc, dims_store);
    if (rc)
        return rc;
    sl_shape shape = {.dtype = (uint8_t) dtype, .ndim = (uint8_t) ndim};
    memcpy(shape.dims, dims, (size_t) ndim * sizeof *dims);
    if (!sl_shape_valid(&shape))
        return SL_EINVAL;
    uint64_t chunk = s->client ? chunk_bytes(s->client) : 0;
    if (init && chunk && sl_shape_bytes(&shape) > chunk) {
        /* too large for one message: created zeroed, then written in chunks */
        uint64_t made;
        if ((rc = salus_tensor_create(s, dtype, ndim, dims, NULL, &made)) != SL_OK)
            return rc;
        if ((rc = salus_tensor_write(s, made, init, sl_shape_bytes(&shape))) != SL_OK) {
            char why[sizeof s->client->last_error];
            snprintf(why, sizeof why, "%s", s->client->last_error);
            (void) salus_tensor_free(s, made);
            snprintf(s->client->last_error, sizeof s->client->last_error, "%s", why);
            return rc;
        }
        *id = made;
        return SL_OK;
    }
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__CreateTensor create = SALUS__CREATE_TENSOR__INIT;
    create.desc = &desc;
    if (init) {
        create.init.data = (uint8_t *) init;
        create.init.len = sl_shape_bytes(&shape);
    }
    req.body_case = SALUS__REQUEST__BODY_CREATE_TENSOR;
    req.create_tensor = &create;
    Salus__Reply *rep;
    if ((rc = sl_client_session_call(s, &req, &rep)) != 0)
        return rc;
    if (rep->body_case == SALUS__REPLY__BODY_CREATE_TENSOR)
        *id = rep->create_tensor->tensor_id;
    else
        rc = SL_EPROTO;
    salus__reply__free_unpacked(rep, NULL);
    return rc;
}

static int write_part(salus_session *s, uint64_t id, const void *data, size_t bytes,
                      uint64_t offset, uint64_t total)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__WriteTensor write = SALUS__WRITE_TENSOR__INIT;
    write.tensor_id = id;
    write.data.data = (uint8_t *) data;
    write.data.len = bytes;
    write.offset = offset;
    write.total_bytes = total;
    req.body_case = SALUS__REQUEST__BODY_WRITE_TENSOR;
    req.write_tensor = &write;
    return session_call_no_body(s, &req);
}

int salus_tensor_write(salus_session *s, uint64_t id, const void *data, size_t bytes)
{
    uint64_t chunk = s->client ? chunk_bytes(s->client) : 0;
    if (!chunk || bytes <= chunk)
        return write_part(s, id, data, bytes, 0, 0);
    int rc = SL_OK;
    for (uint64_t off = 0; off < bytes && rc == SL_OK; off += chunk)
        rc = write_part(s, id, (const uint8_t *) data + off,
                        (size_t) (bytes - off < chunk ? bytes - off : chunk), off, bytes);
    return rc;
}

/* Reads bytes [offset, offset + len) of tensor id into buf (len 0: the
 * whole tensor, which must have `whole` bytes). */
static int read_part(salus_session *s, uint64_t id, void *buf, uint64_t offset, uint64_t len,
                     uint64_t whole)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__ReadTensor read = SALUS__READ_TENSOR__INIT;
    read.tensor_id = id;
    read.offset = offset;
    read.length = len;
    req.body_case = SALUS__REQUEST__BODY_READ_TENSOR;
    req.read_tensor = &read;
    Salus__Reply *rep;
    int rc = sl_client_session_call(s, &req, &rep);
    if (rc)
        return rc;
    const Salus__Tensor *t =
        rep->body_case == SALUS__REPLY__BODY_READ_TENSOR ? rep->read_tensor->tensor : NULL;
    uint64_t tensor_bytes = 0;
    if (t && t->desc) {
        sl_shape shape = {.dtype = (uint8_t) t->desc->dtype,
                          .ndim = (uint8_t) (t->desc->n_dims <= SL_MAX_DIMS ? t->desc->n_dims : 0)};
        for (unsigned i = 0; i < shape.ndim; i++)
            shape.dims[i] = t->desc->dims[i];
        tensor_bytes = sl_shape_valid(&shape) ? sl_shape_bytes(&shape) : 0;
    }
    if (!t) {
        rc = SL_EPROTO;
    } else if ((t->desc && tensor_bytes != whole) || t->data.len != (len ? len : whole)) {
        snprintf(s->client->last_error, sizeof s->client->last_error,
                 "tensor %llu has %llu bytes, buffer has %llu", (unsigned long long) id,
                 (unsigned long long) (t->desc ? tensor_bytes : t->data.len),
                 (unsigned long long) whole);
        rc = SL_EINVAL;
    } else {
        memcpy(buf, t->data.data, t->data.len);
    }
    salus__reply__free_unpacked(rep, NULL);
    return rc;
}

int salus_tensor_read(salus_session *s, uint64_t id, void *buf, size_t bytes)
{
    uint64_t chunk = s->client ? chunk_bytes(s->client) : 0;
    if (!chunk || bytes <= chunk)
        return read_part(s, id, buf, 0, 0, bytes);
    int rc = SL_OK;
    for (uint64_t off = 0; off < bytes && rc == SL_OK; off += chunk)
        rc = read_part(s, id, (uint8_t *) buf + off, off, bytes - off < chunk ? bytes - off : chunk,
                       bytes);
    return rc;
}

int salus_tensor_free(salus_session *s, uint64_t id)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__FreeTensor f = SALUS__FREE_TENSOR__INIT;
    f.tensor_id = id;
    req.body_case = SALUS__REQUEST__BODY_FREE_TENSOR;
    req.free_tensor = &f;
    int rc = session_call_no_body(s, &req);
    return rc;
}

int salus_set_policy(salus_client *c, const char *policy, int strict)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__SetPolicy m = SALUS__SET_POLICY__INIT;
    m.policy = (char *) (policy ? policy : "");
    m.strict = strict != 0;
    req.body_case = SALUS__REQUEST__BODY_SET_POLICY;
    req.set_policy = &m;
    int rc = call_no_body(c, &req);
    return rc;
}

int salus_set_partitions(salus_client *c, const char *mode)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__SetPolicy m = SALUS__SET_POLICY__INIT;
    if (!mode || !mode[0])
        return SALUS_EINVAL;
    m.policy = (char *) "";
    m.partitions = (char *) mode;
    req.body_case = SALUS__REQUEST__BODY_SET_POLICY;
    req.set_policy = &m;
    return call_no_body(c, &req);
}

int salus_set_session(salus_client *c, uint64_t session_id, int set_priority, int priority,
                      int set_weight, double weight)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__SetSession m = SALUS__SET_SESSION__INIT;
    m.target_session = session_id;
    m.set_priority = set_priority != 0;
    m.priority = priority;
    m.set_weight = set_weight != 0;
    m.weight = weight;
    req.body_case = SALUS__REQUEST__BODY_SET_SESSION;
    req.set_session = &m;
    int rc = call_no_body(c, &req);
    return rc;
}
