/* Half-finished TLS peers: 1000 connections to a tls+tcp:// listener from
 * another tenant, a third hanging up at once, a third sending half of an SP
 * header in the clear, a third completing what TLS they can without a
 * client certificate and sending half of an SP header. NNG 1.5.2 leaks
 * descriptors on the last kind when anonymous clients are allowed; salusd
 * requires client certificates by default, so none of them gets that far.
 * Afterwards a client with a certificate is served and salusd's
 * descriptors are back at the baseline. */
#include "attack.h"
#include "salusd_ctl.h"
#include "sl_test.h"
#include "sl_testsupport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define N_PEERS 1000

static char pki_dir[] = "/tmp/salus-tls-attack-XXXXXX";
static char ca[128], crt[128], key[128], client_crt[128], client_key[128];
static int port;

static bool make_pki(void)
{
    if (!mkdtemp(pki_dir))
        return false;
    snprintf(ca, sizeof ca, "%s/ca.crt", pki_dir);
    snprintf(crt, sizeof crt, "%s/server.crt", pki_dir);
    snprintf(key, sizeof key, "%s/server.key", pki_dir);
    snprintf(client_crt, sizeof client_crt, "%s/client.crt", pki_dir);
    snprintf(client_key, sizeof client_key, "%s/client.key", pki_dir);
    return sl_ts_pki_ca(pki_dir, "ca", "salus-test-ca") == SL_OK &&
           sl_ts_pki_cert(pki_dir, "server", "127.0.0.1", "ca", "127.0.0.1") == SL_OK &&
           sl_ts_pki_cert(pki_dir, "client", "salus-client", "ca", NULL) == SL_OK;
}

static int raw_peer(bool half_header)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t) port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (half_header)
        (void) !write(fd, "\0SP\0", 4);
    close(fd);
    return 0;
}

/* TLS without a client certificate, then half an SP header. */
static int tls_peer(nng_tls_config *cfg, char *url)
{
    nng_stream_dialer *d;
    nng_aio *aio;
    if (nng_stream_dialer_alloc(&d, url) != 0)
        return -1;
    if (nng_aio_alloc(&aio, NULL, NULL) != 0) {
        nng_stream_dialer_free(d);
        return -1;
    }
    (void) nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
    nng_aio_set_timeout(aio, 5000);
    nng_stream_dialer_dial(d, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) == 0) {
        nng_stream *s = nng_aio_get_output(aio, 0);
        char half[4] = {0, 'S', 'P', 0};
        nng_iov iov = {.iov_buf = half, .iov_len = sizeof half};
        (void) nng_aio_set_iov(aio, 1, &iov);
        nng_stream_send(s, aio);
        nng_aio_wait(aio);
        nng_stream_free(s);
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    return 0;
}

static int flood_here(void)
{
    char url[64];
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
    nng_tls_config *cfg;
    if (nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT) != 0)
        return 2;
    (void) nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
    int failed[3] = {0};
    for (int i = 0; i < N_PEERS; i++)
        failed[i % 3] += (i % 3 == 2 ? tls_peer(cfg, url) : raw_peer(i % 3 == 1)) != 0;
    nng_tls_config_free(cfg);
    fprintf(stderr, "attacker: failed %d raw, %d half, %d tls\n", failed[0], failed[1], failed[2]);
    return failed[0] + failed[1] + failed[2] ? 1 : 0;
}

/* NNG's threads do not survive fork: the attacker runs in a fresh image of
 * this program (main's --flood). */
static int flood(void *arg)
{
    (void) arg;
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    execl("/proc/self/exe", "attack_tls", "--flood", port_text, (char *) NULL);
    return 127;
}

static void half_header_tls_peers(void **state)
{
    (void) state;
    const char *name = "tls-half-header-peers";
    if (!sl_attack_may_run(name, make_pki(), "openssl cannot make certificates here"))
        return;
    port = sl_ctl_free_port();
    char url[64];
    snprintf(url, sizeof url, "tls+tcp://127.0.0.1:%d", port);
    sl_attack a;
    sl_attack_begin(&a, name,
                    (const char *const[]){"--listen", url, "--tls-cert", crt, "--tls-key", key,
                                          "--tls-ca", ca, NULL});
    int rc = sl_attack_as_tenant(flood, NULL, 120);
    /* a client with a certificate is still served over TLS */
    setenv("SALUS_TLS_CA", ca, 1);
    setenv("SALUS_TLS_CERT", client_crt, 1);
    setenv("SALUS_TLS_KEY", client_key, 1);
    salus_client *c = NULL;
    int served = salus_connect(url, &c);
    salus_disconnect(c);
    unsetenv("SALUS_TLS_CA");
    unsetenv("SALUS_TLS_CERT");
    unsetenv("SALUS_TLS_KEY");
    char detail[200];
    snprintf(detail, sizeof detail,
             "%d peers (a third hang up, a third half a header in the clear, a third TLS without "
             "a certificate, then half a header): %s; a TLS client afterwards: %s",
             N_PEERS, rc == 0 ? "all connected" : "some refused", salus_strerror(served));
    bool held = sl_attack_end(&a, detail);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", pki_dir);
    (void) !system(cmd);
    assert_int_equal(served, SALUS_OK);
    assert_true(held);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--flood") == 0) {
        port = atoi(argv[2]);
        return flood_here();
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(half_header_tls_peers)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
