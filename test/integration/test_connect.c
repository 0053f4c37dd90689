/* salus_connect is bounded: nobody listening fails at once with
 * SALUS_ECONN; a peer that takes the connection and never answers the Hello
 * fails with SALUS_ETIMEDOUT after SALUS_CONNECT_TIMEOUT_MS (default 15 s).
 * The silent peer is a bare NNG REP socket that never receives. No salusd. */
#include "sl_test.h"
#include "sl_testsupport.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <salus/salus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char url[128];

static int make_dir(void **state)
{
    (void) state;
    if (sl_ts_tempdir("connect", dir, sizeof dir) != SL_OK)
        return -1;
    snprintf(url, sizeof url, "ipc://%s/silent.sock", dir);
    return 0;
}

static int remove_dir(void **state)
{
    (void) state;
    sl_ts_tempdir_remove(dir);
    return 0;
}

/* Connects to url; returns the code and the seconds it took. */
static int connect_timed(double *seconds)
{
    salus_client *c = NULL;
    double t0 = sl_ts_now_s();
    int rc = salus_connect(url, &c);
    *seconds = sl_ts_now_s() - t0;
    if (rc == SALUS_OK)
        salus_disconnect(c);
    else
        assert_true(salus_last_error(NULL)[0] != '\0'); /* it says why */
    return rc;
}

static void nobody_listening_fails_at_once(void **state)
{
    (void) state;
    double s;
    assert_int_equal(connect_timed(&s), SALUS_ECONN);
    assert_true(s < 2.0);
}

static void silent_server_times_out(void **state)
{
    (void) state;
    nng_socket rep;
    assert_int_equal(nng_rep0_open(&rep), 0);
    assert_int_equal(nng_listen(rep, url, NULL, 0), 0);
    double s;

    assert_int_equal(setenv("SALUS_CONNECT_TIMEOUT_MS", "300", 1), 0);
    assert_int_equal(connect_timed(&s), SALUS_ETIMEDOUT);
    fprintf(stderr, "SALUS_CONNECT_TIMEOUT_MS=300: failed after %.2f s: %s\n", s,
            salus_last_error(NULL));
    assert_true(s >= 0.25 && s < 3.0);
    assert_non_null(strstr(salus_last_error(NULL), "did not answer"));

    /* unset (and nonsense) means the default, 15 s */
    assert_int_equal(setenv("SALUS_CONNECT_TIMEOUT_MS", "soon", 1), 0);
    assert_int_equal(connect_timed(&s), SALUS_ETIMEDOUT);
    fprintf(stderr, "default: failed after %.2f s\n", s);
    assert_true(s >= 14.5 && s < 20.0);
    assert_int_equal(unsetenv("SALUS_CONNECT_TIMEOUT_MS"), 0);
    nng_close(rep);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nobody_listening_fails_at_once),
        cmocka_unit_test(silent_server_times_out),
    };
    return cmocka_run_group_tests_name("connect", tests, make_dir, remove_dir);
}
