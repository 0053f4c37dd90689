/* Isolation (docs/security.md): ipc:// socket permissions, sessions that
 * belong to their opener's uid, tls+tcp:// with server and client
 * certificates made here, and plain tcp:// only on request.
 *
 * The other-uid tests (test_isolation --uid, meson test isolation-uid) need
 * root: main() forks a helper before anything touches NNG, which drops to
 * nobody:nogroup and runs client requests on command (a fork after NNG
 * started its threads could not use NNG). Without root they exit 77 (SKIP). */
#include "client_internal.h"
#include "salusd_ctl.h"
#include "sl_test.h"
#include "sl_testsupport.h"

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

/* ---- the helper running as nobody ---------------------------------- */

static pid_t helper_pid = -1;
static int helper_cmd = -1, helper_reply = -1;

/* Runs one "steal URL ID TOKEN TENSOR" or "connect URL" and prints a reply
 * line of name=code pairs. */
static void helper_serve(FILE *in, FILE *out)
{
    char line[1024], url[512];
    unsigned long long id, token, tensor;
    while (fgets(line, sizeof line, in)) {
        salus_client *c = NULL;
        if (sscanf(line, "steal %511s %llu %llu %llu", url, &id, &token, &tensor) == 4) {
            int rc = salus_connect(url, &c);
            if (rc) {
                fprintf(out, "uid=%u connect=%d\n", (unsigned) getuid(), rc);
                fflush(out);
                continue;
            }
            struct salus_session stolen = {.client = c, .id = id, .token = token};
            float buf[6] = {0};
            int rd = salus_tensor_read(&stolen, tensor, buf, sizeof buf);
            int wr = salus_tensor_write(&stolen, tensor, buf, sizeof buf);
            int fr = salus_tensor_free(&stolen, tensor);
            Salus__Request req = SALUS__REQUEST__INIT;
            Salus__CloseSession close_msg = SALUS__CLOSE_SESSION__INIT;
            req.body_case = SALUS__REQUEST__BODY_CLOSE_SESSION;
            req.close_session = &close_msg;
            Salus__Reply *rep;
            int cl = sl_client_session_call(&stolen, &req, &rep);
            if (cl == SALUS_OK)
                salus__reply__free_unpacked(rep, NULL);
            int ss = salus_set_session(c, id, 1, 7, 0, 0);
            int po = salus_set_policy(c, "fifo", 0);
            /* its own session works */
            salus_session *own;
            int op = salus_session_open(c, NULL, &own);
            if (op == SALUS_OK) {
                uint64_t t;
                const int64_t dims[] = {4};
                op = salus_tensor_create(own, SALUS_F32, 1, dims, NULL, &t);
                int cl2 = salus_session_close(own);
                if (op == SALUS_OK)
                    op = cl2;
            }
            fprintf(out,
                    "uid=%u connect=0 read=%d write=%d free=%d close=%d setsession=%d policy=%d "
                    "own=%d\n",
                    (unsigned) getuid(), rd, wr, fr, cl, ss, po, op);
            salus_disconnect(c);
        } else if (sscanf(line, "connect %511s", url) == 1) {
            int rc = salus_connect(url, &c);
            fprintf(out, "uid=%u connect=%d\n", (unsigned) getuid(), rc);
            salus_disconnect(c);
        } else {
            fprintf(out, "error=bad-command\n");
        }
        fflush(out);
    }
}

static void helper_start(void)
{
    if (geteuid() != 0)
        return;
    int to_helper[2], from_helper[2];
    if (pipe(to_helper) || pipe(from_helper))
        return;
    pid_t pid = fork();
    if (pid < 0)
        return;
    if (pid == 0) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(to_helper[1]);
        close(from_helper[0]);
        FILE *in = fdopen(to_helper[0], "r"), *out = fdopen(from_helper[1], "w");
        if (!in || !out || setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY) ||
            getuid() != NOBODY)
            _exit(3);
        helper_serve(in, out);
        _exit(0);
    }
    close(to_helper[0]);
    close(from_helper[1]);
    helper_pid = pid;
    helper_cmd = to_helper[1];
    helper_reply = from_helper[0];
}

static void helper_stop(void)
{
    if (helper_pid < 0)
        return;
    close(helper_cmd);
    close(helper_reply);
    (void) sl_test_wait(helper_pid, 5);
}

/* Sends a command to the helper and reads its reply line (10 s at most). */
static void helper_ask(const char *cmd, char *reply, size_t len)
{
    if (write(helper_cmd, cmd, strlen(cmd)) != (ssize_t) strlen(cmd))
        fail_msg("the nobody helper is gone: %s", strerror(errno));
    size_t n = 0;
    while (n + 1 < len) {
        struct pollfd p = {.fd = helper_reply, .events = POLLIN};
        if (poll(&p, 1, 10000) != 1)
            fail_msg("the nobody helper did not answer '%s' in 10 s", cmd);
        ssize_t got = read(helper_reply, reply + n, 1);
        if (got != 1)
            fail_msg("the nobody helper died");
        if (reply[n++] == '\n')
            break;
    }
    reply[n] = '\0';
}

/* The code after "name=" in a helper reply (-1 if absent). */
static int field(const char *reply, const char *name)
{
    char key[32];
    snprintf(key, sizeof key, "%s=", name);
    for (const char *p = strstr(reply, key); p; p = strstr(p + 1, key))
        if (p == reply || p[-1] == ' ')
            return atoi(p + strlen(key));
    return -1;
}

static void need_root_helper(void)
{
    if (helper_pid < 0) {
        print_message("needs root (to run a client as nobody): skipped\n");
        skip();
    }
}

/* ---- ipc:// ---------------------------------------------------------- */

static mode_t socket_mode(const sl_test_server *srv)
{
    char path[400];
    struct stat st;
    assert_int_equal(stat(sl_ctl_path(srv, "salus.sock", path, sizeof path), &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    return st.st_mode & 07777;
}

static void ipc_socket_gets_the_requested_mode(void **state)
{
    (void) state;
    sl_test_server srv;
    sl_ctl_launch(&srv, NULL);
    assert_int_equal(socket_mode(&srv), 0600);
    sl_ctl_finish(&srv);

    sl_ctl_launch(&srv, (const char *[]){"--ipc-mode", "0660", NULL});
    assert_int_equal(socket_mode(&srv), 0660);
    sl_ctl_finish(&srv);
}

static void other_user_cannot_reach_a_private_socket(void **state)
{
    (void) state;
    need_root_helper();
    sl_test_server srv;
    sl_ctl_launch(&srv, NULL);
    assert_int_equal(chmod(srv.dir, 0711), 0); /* only the socket's own mode keeps it out */
    char cmd[600], reply[512];
    snprintf(cmd, sizeof cmd, "connect %s\n", srv.url);
    helper_ask(cmd, reply, sizeof reply);
    assert_int_equal(field(reply, "uid"), NOBODY);
    assert_int_equal(field(reply, "connect"), SALUS_ECONN);
    sl_ctl_finish(&srv);
}

static void other_user_cannot_use_a_stolen_session(void **state)
{
    (void) state;
    need_root_helper();
    sl_test_server srv;
    sl_ctl_launch(&srv, (const char *[]){"--ipc-mode", "0666", NULL});
    assert_int_equal(chmod(srv.dir, 0711), 0);

    salus_client *c = sl_test_connect(&srv);
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    const float init[6] = {1, 2, 3, 4, 5, 6};
    const int64_t dims[] = {2, 3};
    uint64_t t;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 2, dims, init, &t));

    /* nobody holds the session's id and token: refused for every request */
    char cmd[700], reply[512];
    snprintf(cmd, sizeof cmd, "steal %s %llu %llu %llu\n", srv.url, (unsigned long long) s->id,
             (unsigned long long) s->token, (unsigned long long) t);
    helper_ask(cmd, reply, sizeof reply);
    printf("nobody: %s", reply);
    assert_int_equal(field(reply, "uid"), NOBODY);
    assert_int_equal(field(reply, "connect"), SALUS_OK);
    assert_int_equal(field(reply, "read"), SALUS_EPERM);
    assert_int_equal(field(reply, "write"), SALUS_EPERM);
    assert_int_equal(field(reply, "free"), SALUS_EPERM);
    assert_int_equal(field(reply, "close"), SALUS_EPERM);
    assert_int_equal(field(reply, "setsession"), SALUS_EPERM);
    assert_int_equal(field(reply, "policy"), SALUS_EPERM);
    assert_int_equal(field(reply, "own"), SALUS_OK); /* the server is open to it otherwise */
    assert_true(sl_ctl_log_has(&srv, "another user"));

    /* the owner's session is intact, and usable from another connection of
     * the same user */
    float back[6];
    assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
    assert_memory_equal(back, init, sizeof init);
    salus_client *c2 = sl_test_connect(&srv);
    struct salus_session same_user = *s;
    same_user.client = c2;
    assert_sl_ok(salus_tensor_read(&same_user, t, back, sizeof back));
    salus_disconnect(c2);
    assert_sl_ok(salus_session_close(s));
    salus_disconnect(c);
    sl_ctl_finish(&srv);
}

/* ---- tls+tcp:// ------------------------------------------------------ */

static struct pki {
    bool made, ok;
    sl_test_server dir; /* only its folder */
    char ca[400], server_crt[400], server_key[400], client_crt[400], client_key[400];
    char rogue_ca[400], rogue_crt[400], rogue_key[400];
} pki;

/* A CA, a server certificate for 127.0.0.1 and a client certificate signed
 * by it, and a rogue CA with its own client certificate. */
static bool make_pki(void)
{
    if (pki.made)
        return pki.ok;
    pki.made = true;
    if (!sl_ts_have_openssl())
        return false;
    sl_ctl_prepare(&pki.dir);
    const char *d = pki.dir.dir;
    pki.ok = sl_ts_pki_ca(d, "ca", "salus-test-ca") == SL_OK &&
             sl_ts_pki_ca(d, "rogue", "rogue-ca") == SL_OK &&
             sl_ts_pki_cert(d, "server", "127.0.0.1", "ca", "127.0.0.1") == SL_OK &&
             sl_ts_pki_cert(d, "client", "salus-client", "ca", NULL) == SL_OK &&
             sl_ts_pki_cert(d, "rclient", "salus-client", "rogue", NULL) == SL_OK;
    sl_ctl_path(&pki.dir, "ca.crt", pki.ca, sizeof pki.ca);
    sl_ctl_path(&pki.dir, "server.crt", pki.server_crt, sizeof pki.server_crt);
    sl_ctl_path(&pki.dir, "server.key", pki.server_key, sizeof pki.server_key);
    sl_ctl_path(&pki.dir, "client.crt", pki.client_crt, sizeof pki.client_crt);
    sl_ctl_path(&pki.dir, "client.key", pki.client_key, sizeof pki.client_key);
    sl_ctl_path(&pki.dir, "rogue.crt", pki.rogue_ca, sizeof pki.rogue_ca);
    sl_ctl_path(&pki.dir, "rclient.crt", pki.rogue_crt, sizeof pki.rogue_crt);
    sl_ctl_path(&pki.dir, "rclient.key", pki.rogue_key, sizeof pki.rogue_key);
    return pki.ok;
}

static void clear_tls_env(void)
{
    unsetenv("SALUS_TLS_CA");
    unsetenv("SALUS_TLS_CERT");
    unsetenv("SALUS_TLS_KEY");
    unsetenv("SALUS_TLS_SERVER_NAME");
}

/* Starts salusd on ipc:// and tls+tcp://127.0.0.1:<free port> (url), with
 * the TLS variables cleared; skips the test when no certificates can be
 * made. */
static void start_tls_server(sl_test_server *srv, char *url, size_t len, bool client_auth)
{
    if (!make_pki()) {
        print_message("openssl is not available: skipped\n");
        skip();
    }
    clear_tls_env();
    snprintf(url, len, "tls+tcp://127.0.0.1:%d", sl_ctl_free_port());
    sl_ctl_prepare(srv);
    const char *args[] = {"--listen",
                          url,
                          "--tls-cert",
                          pki.server_crt,
                          "--tls-key",
                          pki.server_key,
                          client_auth ? "--tls-ca" : "--tls-allow-anonymous",
                          client_auth ? pki.ca : NULL,
                          NULL};
    sl_ctl_start(srv, args);
}

/* Stops what start_tls_server started, checking that salusd exited 0. */
static void stop_tls_server(sl_test_server *srv)
{
    clear_tls_env();
    sl_ctl_finish(srv);
}

/* A session and a tensor round trip over c. */
static void round_trip(salus_client *c)
{
    salus_session *s;
    assert_sl_ok(salus_session_open(c, NULL, &s));
    const float init[4] = {1.5f, -2, 3, 4};
    float back[4];
    const int64_t dims[] = {4};
    uint64_t t;
    assert_sl_ok(salus_tensor_create(s, SALUS_F32, 1, dims, init, &t));
    assert_sl_ok(salus_tensor_read(s, t, back, sizeof back));
    assert_memory_equal(back, init, sizeof init);
    assert_sl_ok(salus_session_close(s));
}

static void tls_clients_verify_the_server(void **state)
{
    (void) state;
    sl_test_server srv;
    char url[64];
    start_tls_server(&srv, url, sizeof url, false);
    salus_client *c = NULL;

    /* no CA: refused before any connection */
    assert_sl_err(salus_connect(url, &c), SALUS_EINVAL);
    assert_non_null(strstr(salus_last_error(NULL), "SALUS_TLS_CA"));

    setenv("SALUS_TLS_CA", pki.rogue_ca, 1); /* a server we cannot verify */
    int rc = salus_connect(url, &c);
    printf("rogue CA: %s (%s)\n", sl_errname(rc), salus_last_error(NULL));
    assert_int_equal(rc, SALUS_EPERM);

    setenv("SALUS_TLS_CA", pki.ca, 1);
    setenv("SALUS_TLS_SERVER_NAME", "other.example", 1); /* the wrong name */
    assert_int_not_equal(salus_connect(url, &c), SALUS_OK);
    unsetenv("SALUS_TLS_SERVER_NAME");

    assert_sl_ok(salus_connect(url, &c));
    round_trip(c);
    salus_disconnect(c);

    /* plain tcp to the TLS port gets nowhere, and does not hang */
    char plain[64];
    snprintf(plain, sizeof plain, "tcp%s", url + strlen("tls+tcp"));
    double t0 = sl_ts_now_s();
    assert_int_not_equal(salus_connect(plain, &c), SALUS_OK);
    assert_true(sl_ts_now_s() - t0 < 5);
    stop_tls_server(&srv);
}

static void tls_client_certificates_when_the_server_asks(void **state)
{
    (void) state;
    sl_test_server srv;
    char url[64];
    start_tls_server(&srv, url, sizeof url, true);
    salus_client *c = NULL;
    setenv("SALUS_TLS_CA", pki.ca, 1);
    assert_int_not_equal(salus_connect(url, &c), SALUS_OK); /* no certificate */

    setenv("SALUS_TLS_CERT", pki.rogue_crt, 1); /* signed by someone else */
    setenv("SALUS_TLS_KEY", pki.rogue_key, 1);
    assert_int_not_equal(salus_connect(url, &c), SALUS_OK);

    setenv("SALUS_TLS_CERT", pki.client_crt, 1);
    unsetenv("SALUS_TLS_KEY"); /* half a pair */
    assert_sl_err(salus_connect(url, &c), SALUS_EINVAL);

    setenv("SALUS_TLS_KEY", pki.client_key, 1);
    assert_sl_ok(salus_connect(url, &c));
    round_trip(c);
    /* a verified client certificate on an ordinary listener is a tenant,
     * not an operator (operators have a listener of their own) */
    assert_sl_err(salus_set_policy(c, "fifo", 0), SALUS_EPERM);
    salus_disconnect(c);
    stop_tls_server(&srv);
}

/* ---- plain tcp:// ---------------------------------------------------- */

static void plain_tcp_needs_an_explicit_flag(void **state)
{
    (void) state;
    char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", sl_ctl_free_port());
    sl_test_server srv;
    sl_ctl_prepare(&srv);
    sl_ctl_spawn(&srv, (const char *[]){"--listen", url, NULL});
    assert_int_equal(sl_ctl_wait(&srv, 10), 2);
    assert_true(sl_ctl_log_has(&srv, "--allow-plain-tcp"));

    /* tls+tcp:// without a certificate is refused too */
    sl_ctl_spawn(&srv, (const char *[]){"--listen", "tls+tcp://127.0.0.1:1", NULL});
    assert_int_equal(sl_ctl_wait(&srv, 10), 2);
    assert_true(sl_ctl_log_has(&srv, "--tls-cert FILE and --tls-key FILE"));

    sl_ctl_start(&srv, (const char *[]){"--listen", url, "--allow-plain-tcp", NULL});
    assert_true(sl_ctl_log_has(&srv, "unauthenticated and unencrypted"));
    salus_client *c;
    assert_sl_ok(salus_connect(url, &c));
    round_trip(c);
    assert_sl_err(salus_set_policy(c, "fifo", 0), SALUS_EPERM); /* anyone there: no operator */
    salus_disconnect(c);
    sl_ctl_finish(&srv);
}

/* test_isolation: everything a user can check; test_isolation --uid: the
 * tests that need a second user (exit 77, meson's SKIP, without root). */
int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && strcmp(argv[1], "--uid") == 0) {
        helper_start(); /* before anything starts NNG's threads */
        if (helper_pid < 0) {
            printf("needs root, to run a client as nobody: skipped\n");
            return 77;
        }
        const struct CMUnitTest uid_tests[] = {
            cmocka_unit_test(other_user_cannot_reach_a_private_socket),
            cmocka_unit_test(other_user_cannot_use_a_stolen_session),
        };
        int rc = cmocka_run_group_tests_name("isolation-uid", uid_tests, NULL, NULL);
        helper_stop();
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ipc_socket_gets_the_requested_mode),
        cmocka_unit_test(tls_clients_verify_the_server),
        cmocka_unit_test(tls_client_certificates_when_the_server_asks),
        cmocka_unit_test(plain_tcp_needs_an_explicit_flag),
    };
    int rc = cmocka_run_group_tests_name("isolation", tests, NULL, NULL);
    if (pki.made)
        sl_ctl_cleanup(&pki.dir);
    return rc;
}
