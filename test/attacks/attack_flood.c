/* Floods that held before the attack suite existed, kept as regressions:
 * many idle connections and half-open ones (a partial SP header, then
 * silence) from another tenant, all dropped at once afterwards. The victim
 * keeps training and salusd's descriptors come back to the baseline. */
#include "attack.h"
#include "sl_test.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define N_CONNECTIONS 600

static int flood(void *arg)
{
    const char *path = arg;
    static int fds[N_CONNECTIONS];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int n = 0;
    for (; n < N_CONNECTIONS; n++) {
        fds[n] = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fds[n] < 0 || connect(fds[n], (struct sockaddr *) &sa, sizeof sa) != 0) {
            if (fds[n] >= 0)
                close(fds[n]);
            break;
        }
        if (n % 2) /* half of them start the SP header and stop */
            (void) !write(fds[n], "\0SP\0", 4);
    }
    struct timespec hold = {2, 0};
    nanosleep(&hold, NULL);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return n == N_CONNECTIONS ? 0 : 1;
}

static void idle_and_half_open(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "idle-and-half-open-flood", NULL);
    int rc = sl_attack_as_tenant(flood, (void *) sl_attack_socket_path(&a), 60);
    char detail[96];
    snprintf(detail, sizeof detail, "%d connections, attacker %s", N_CONNECTIONS,
             rc == 0 ? "connected all" : "was refused some");
    assert_true(sl_attack_end(&a, detail));
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(idle_and_half_open)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
