/* salusd's listeners: TLS and permission settings, the safe place of
 * ipc:// socket files, and starting a listener (ipc:// ones bound at a
 * temporary name and renamed into place). Why: transport.c's header. The
 * watchdog that replaces them is in watchdog.c. */
#include "transport_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <errno.h>
#include <limits.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/ipc/ipc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

bool sl_url_is_plain_network(const char *url)
{
    static const char *const plain[] = {"tcp://", "tcp4://", "tcp6://",
                                        "ws://",  "ws4://",  "ws6://"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strncmp(url, plain[i], strlen(plain[i])) == 0)
            return true;
    return false;
}

bool sl_url_is_tls(const char *url)
{
    return strncmp(url, "tls+tcp", 7) == 0 || strncmp(url, "wss", 3) == 0;
}

/* Reads a whole PEM file into a NUL-terminated buffer (caller frees). */
static char *read_pem(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        sl_log_err("net.tls", "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1u << 20, n; /* certificate chains are kilobytes */
    char *buf = sl_malloc(cap);
    if (buf) {
        n = fread(buf, 1, cap - 1, f);
        if (n == cap - 1) {
            sl_log_err("net.tls", "%s is larger than 1 MiB: not a PEM file", path);
            sl_free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
        }
    }
    fclose(f);
    return buf;
}

int sl_listen_tls_config(const sl_config *cfg, const char *ca, bool operator, nng_tls_config ** out)
{
    if (!cfg->tls_cert || !cfg->tls_key) {
        sl_log_err("net.tls", "tls+tcp:// needs --tls-cert FILE and --tls-key FILE");
        return SL_EINVAL;
    }
    struct stat st;
    if (stat(cfg->tls_key, &st) == 0 && (st.st_mode & 077))
        sl_log_warn("net.tls", "private key %s is readable by other users (mode %o)", cfg->tls_key,
                    (unsigned) (st.st_mode & 0777));
    char *cert = read_pem(cfg->tls_cert), *key = read_pem(cfg->tls_key);
    nng_tls_config *tc = NULL;
    int rv = NNG_EINVAL; /* unreadable (logged by read_pem) */
    if (!cert || !key)
        goto out_free;
    if ((rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_SERVER)) != 0)
        goto out_free;
    if ((rv = nng_tls_config_own_cert(tc, cert, key, NULL)) != 0) {
        sl_log_err("net.tls", "bad certificate %s or key %s: %s", cfg->tls_cert, cfg->tls_key,
                   nng_strerror(rv));
        goto out_free;
    }
    if (ca) {
        if ((rv = nng_tls_config_ca_file(tc, ca)) != 0) {
            sl_log_err("net.tls", "bad CA file %s: %s", ca, nng_strerror(rv));
            goto out_free;
        }
        rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_REQUIRED);
    } else if (cfg->tls_allow_anonymous && !operator) {
        rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_NONE);
    } else {
        /* anonymous peers reach NNG's handshake code, whose failures NNG
         * 1.5 handles worst: client certificates unless asked otherwise */
        sl_log_err("net.tls", "tls+tcp:// needs --tls-ca FILE (client certificates), or "
                              "--tls-allow-anonymous");
        rv = NNG_EINVAL;
    }
out_free:
    sl_free(cert);
    if (key)
        explicit_bzero(key, strlen(key)); /* no private key left in freed memory */
    sl_free(key);
    if (rv) {
        if (tc)
            nng_tls_config_free(tc);
        return rv == NNG_ENOMEM ? SL_ENOMEM : SL_EINVAL;
    }
    *out = tc;
    return SL_OK;
}

/* Options of one listener before it starts (operator: an operator listener,
 * whose TLS clients must present a certificate --operator-tls-ca signs). */
static int configure_listener(const sl_config *cfg, nng_listener l, const char *url, bool operator)
{
    int rv;
    if (sl_url_is_plain_network(url)) {
        if (!cfg->allow_plain_tcp) {
            sl_log_err(
                "net.plain",
                "refusing to listen on %s: plain tcp is unauthenticated and unencrypted; use "
                "tls+tcp:// (--tls-cert, --tls-key), or --allow-plain-tcp on a trusted "
                "network",
                url);
            return SL_EINVAL;
        }
        sl_log_warn("net.plain",
                    "%s is unauthenticated and unencrypted (--allow-plain-tcp): anyone who can "
                    "reach it can use salusd; trusted networks only",
                    url);
    } else if (sl_url_is_tls(url)) {
        nng_tls_config *tc;
        int rc =
            sl_listen_tls_config(cfg, operator? cfg->operator_tls_ca : cfg->tls_ca, operator, & tc);
        if (rc)
            return rc;
        rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, tc);
        nng_tls_config_free(tc); /* the listener holds its own reference */
        if (rv) {
            sl_log_err("net.tls", "cannot use TLS on %s: %s (NNG TLS engine: %s)", url,
                       nng_strerror(rv), nng_tls_engine_name());
            return SL_EINVAL;
        }
    } else if (strncmp(url, "ipc://", 6) == 0) {
        rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, cfg->ipc_mode);
        if (rv) {
            sl_log_err("net.perm", "cannot set permissions %o on %s: %s", cfg->ipc_mode, url,
                       nng_strerror(rv));
            return SL_EINVAL;
        }
    }
    return SL_OK;
}

static bool url_is_ipc(const char *url)
{
    return strncmp(url, "ipc://", 6) == 0;
}

/* ---- where ipc:// socket files may live ---- */

/* Whether dir (a resolved path, no symlinks) can be trusted: it and every
 * directory above it belong to root or salusd's user (or the one it will
 * switch to, cfg run_uid), and none of them can
 * be written by others (above the socket's own directory, a sticky
 * directory such as /tmp is fine: nobody else can rename our entry in it). */
static bool dir_trusted(const char *dir, const sl_config *cfg, char *why, size_t why_len)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    bool own_dir = true;
    for (;;) {
        struct stat st;
        if (lstat(path, &st) != 0) {
            snprintf(why, why_len, "cannot inspect %s: %s", path, strerror(errno));
            return false;
        }
        if (!S_ISDIR(st.st_mode)) {
            snprintf(why, why_len, "%s is not a directory", path);
            return false;
        }
        if (st.st_uid != 0 && st.st_uid != geteuid() &&
            !(cfg->run_uid_set && st.st_uid == cfg->run_uid)) {
            snprintf(why, why_len, "%s belongs to uid %u, not to root or salusd's user", path,
                     (unsigned) st.st_uid);
            return false;
        }
        if ((st.st_mode & 022) && (own_dir || !(st.st_mode & S_ISVTX))) {
            snprintf(why, why_len, "%s can be written by other users (mode %o)", path,
                     (unsigned) (st.st_mode & 07777));
            return false;
        }
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) {
            if (strcmp(path, "/") == 0)
                return true;
            snprintf(path, sizeof path, "/");
        } else {
            *slash = '\0';
        }
        own_dir = false;
    }
}

int sl_ipc_dir_check(const char *sock_path, const sl_config *cfg)
{
    char dir[PATH_MAX], why[PATH_MAX + 128];
    const char *slash = strrchr(sock_path, '/');
    if (sock_path[0] != '/' || !slash) {
        sl_log_err("net.path", "ipc:// socket %s: give an absolute path", sock_path);
        return SL_EINVAL;
    }
    snprintf(dir, sizeof dir, "%.*s", (int) (slash - sock_path), sock_path);
    if (!dir[0])
        snprintf(dir, sizeof dir, "/");
    char real[PATH_MAX];
    if (!realpath(dir, real)) {
        /* the socket's own folder may be created, inside a trusted one */
        char parent[PATH_MAX];
        const char *up = strrchr(dir, '/');
        if (errno != ENOENT || !up) {
            sl_log_err("net.path", "cannot use %s for ipc:// sockets: %s", dir, strerror(errno));
            return SL_EINVAL;
        }
        snprintf(parent, sizeof parent, "%.*s", up == dir ? 1 : (int) (up - dir), dir);
        if (!realpath(parent, real) || !dir_trusted(real, cfg, why, sizeof why)) {
            sl_log_err("net.path",
                       "refusing to create %s for ipc:// sockets: %s. Use a directory only "
                       "salusd's user can write (e.g. $XDG_RUNTIME_DIR/salus, /run/salus)",
                       dir, real[0] ? why : strerror(errno));
            return SL_EINVAL;
        }
        /* others need only to pass through, and only when they may connect */
        mode_t mode = (cfg->ipc_mode & 077) ? 0711 : 0700;
        if (mkdir(dir, mode) != 0 && errno != EEXIST) {
            sl_log_err("net.path", "cannot create %s: %s", dir, strerror(errno));
            return SL_EINVAL;
        }
        (void) chmod(dir, mode); /* the umask may have taken bits */
        if (!realpath(dir, real)) {
            sl_log_err("net.path", "cannot use %s: %s", dir, strerror(errno));
            return SL_EINVAL;
        }
    }
    if (!dir_trusted(real, cfg, why, sizeof why)) {
        sl_log_err("net.path",
                   "refusing to put an ipc:// socket in %s: %s; another user could put their "
                   "own socket there and receive salus clients. Use a directory only salusd's "
                   "user can write (e.g. $XDG_RUNTIME_DIR/salus, /run/salus)",
                   dir, why);
        return SL_EINVAL;
    }
    return SL_OK;
}

/* Refuses a public path that is something else than a stale socket file: a
 * live socket (another salusd) or any other file. */
static int ipc_path_free(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? SL_OK : SL_ECONN;
    if (!S_ISSOCK(st.st_mode)) {
        sl_log_err("net.listen", "%s exists and is not a socket: not replacing it", path);
        return SL_EINVAL;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return SL_ECONN;
    int rc = connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0 ? SL_ECONN : SL_OK;
    close(fd);
    if (rc)
        sl_log_err("net.listen", "another server already listens on %s", path);
    return rc;
}

/* ---- starting listeners ---- */

/* Creates, configures and starts a listener for url into *l. */
static int start_nng_listener(sl_transport *t, const char *url, bool operator, nng_listener * l)
{
    int rv = nng_listener_create(l, t->sock, url);
    if (rv) {
        sl_log_err("net.listen", "cannot listen on %s: %s", url, nng_strerror(rv));
        return rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? SL_EINVAL : SL_ECONN;
    }
    int rc = configure_listener(t->cfg, *l, url, operator);
    if (rc) {
        nng_listener_close(*l);
        return rc;
    }
    /* NNG binds, then chmods: the umask makes the socket file born with the
     * final permissions, so it is never connectable by others meanwhile */
    bool ipc = url_is_ipc(url);
    mode_t old_mask = ipc ? umask((mode_t) (~t->cfg->ipc_mode & 0777)) : 0;
    rv = nng_listener_start(*l, 0);
    if (ipc)
        umask(old_mask);
    if (rv) {
        sl_log_err("net.listen", "cannot listen on %s: %s", url, nng_strerror(rv));
        nng_listener_close(*l);
        return rv == NNG_EADDRINVAL ? SL_EINVAL : SL_ECONN;
    }
    return SL_OK;
}

/* Starts listener i on its ipc:// path: bound at a fresh temporary name in
 * the same directory, then renamed over the public path in one step. */
static int start_ipc(sl_transport *t, int i, bool first, nng_listener *out)
{
    const char *path = t->cfg->listen[i] + 6;
    int rc;
    if (first &&
        ((rc = sl_ipc_dir_check(path, t->cfg)) != SL_OK || (rc = ipc_path_free(path)) != SL_OK))
        return rc;
    const char *slash = strrchr(path, '/');
    char tmp_url[SL_SUN_PATH_MAX + 6];
    int n = snprintf(tmp_url, sizeof tmp_url, "ipc://%.*s/.%s.%ld.%llu", (int) (slash - path), path,
                     slash + 1, (long) getpid(), (unsigned long long) ++t->bind_seq);
    if (n < 0 || (size_t) n >= sizeof tmp_url) {
        sl_log_err("net.listen", "ipc:// path %s is too long for a socket", path);
        return SL_EINVAL;
    }
    nng_listener l;
    if ((rc = start_nng_listener(t, tmp_url, false, &l)) != SL_OK)
        return rc;
    if (rename(tmp_url + 6, path) != 0) {
        sl_log_err("net.listen", "cannot move %s to %s: %s", tmp_url + 6, path, strerror(errno));
        nng_listener_close(l); /* unlinks the temporary name */
        return SL_ECONN;
    }
    struct stat st;
    t->ipc_inode[i] = lstat(path, &st) == 0 ? st.st_ino : 0;
    snprintf(t->ipc_bound[i], sizeof t->ipc_bound[i], "%s", tmp_url + 6);
    *out = l;
    return SL_OK;
}

/* Starts listener i (a tcp port chosen by the system is kept on a restart:
 * clients know it). */
int sl_listen_start_one(sl_transport *t, int i, bool first, nng_listener *out)
{
    const char *url = t->cfg->listen[i];
    if (url_is_ipc(url))
        return start_ipc(t, i, first, out);
    char bound[256];
    size_t ulen = strlen(url);
    if (!first && t->tcp_port[i] && ulen > 2 && strcmp(url + ulen - 2, ":0") == 0 &&
        (size_t) snprintf(bound, sizeof bound, "%.*s:%d", (int) (ulen - 2), url, t->tcp_port[i]) <
            sizeof bound)
        url = bound;
    int rc = start_nng_listener(t, url, t->cfg->listen_operator[i], out);
    if (rc == SL_OK && nng_listener_get_int(*out, NNG_OPT_TCP_BOUND_PORT, &t->tcp_port[i]) != 0)
        t->tcp_port[i] = 0;
    if (rc == SL_OK) /* who its clients are (transport.c, operator rights) */
        atomic_store(&t->listener_ids[i], (uint32_t) nng_listener_id(*out));
    return rc;
}

int sl_listen_start(sl_transport *t)
{
    for (int i = 0; i < t->cfg->n_listen; i++) {
        int rc = sl_listen_start_one(t, i, true, &t->listeners[i]);
        if (rc != SL_OK)
            return rc;
        t->n_listeners++;
        const char *url = t->cfg->listen[i];
        size_t len = strlen(url);
        if (len > 2 && strcmp(url + len - 2, ":0") == 0 && t->tcp_port[i])
            sl_log_info("net.listen", "listening on %.*s:%d", (int) (len - 2), url, t->tcp_port[i]);
        else
            sl_log_info("net.listen", "listening on %s", url);
    }
    return SL_OK;
}

void sl_listen_fini(sl_transport *t)
{
    for (int i = 0; i < t->n_listeners; i++) {
        const char *url = t->cfg->listen[i];
        struct stat st;
        if (url_is_ipc(url) && t->ipc_inode[i] && lstat(url + 6, &st) == 0 &&
            st.st_ino == t->ipc_inode[i])
            (void) unlink(url + 6);
    }
    t->n_listeners = 0;
    sl_free(t->retired);
    t->retired = NULL;
    t->n_retired = t->cap_retired = 0;
}
