/* Probing for session ids: another user names the victim's session id, and
 * an id that is surely not open, in a request with a guessed token
 * (CreateTensor), in SetSession and in KillSession. Every answer about the
 * victim's id must be the answer about the missing id, code and text, but
 * for the id itself: salusd tells no one which ids are in use. The victim
 * trains on untouched (the frame). */
#include "attack.h"
#include "client_internal.h"
#include "sl_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "session-id-probe"

/* The answer of one request: its code and text with the id replaced. */
typedef struct answer {
    int code;
    char text[512];
} answer;

static void take(answer *a, int code, salus_client *c, uint64_t id)
{
    char id_text[32];
    snprintf(id_text, sizeof id_text, "%llu", (unsigned long long) id);
    const char *t = salus_last_error(c);
    const char *at = strstr(t, id_text);
    a->code = code;
    if (at)
        snprintf(a->text, sizeof a->text, "%.*sID%s", (int) (at - t), t, at + strlen(id_text));
    else
        snprintf(a->text, sizeof a->text, "%s", t);
}

static bool same(const char *what, const answer *victim, const answer *missing)
{
    bool ok = victim->code == missing->code && strcmp(victim->text, missing->text) == 0;
    printf("tenant: %s: victim's id %s '%s', missing id %s '%s'%s\n", what,
           salus_strerror(victim->code), victim->text, salus_strerror(missing->code), missing->text,
           ok ? "" : "  <- tells them apart");
    return ok;
}

static int tenant_probe(const char *url, uint64_t victim)
{
    salus_client *c;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    const uint64_t ids[2] = {victim, victim + (1ull << 40)};
    answer got[3][2];
    for (int k = 0; k < 2; k++) {
        struct salus_session guess = {.client = c, .id = ids[k], .token = 0x5eed5eed5eedull};
        uint64_t t;
        const int64_t dims[] = {4};
        take(&got[0][k], salus_tensor_create(&guess, SALUS_F32, 1, dims, NULL, &t), c, ids[k]);
        take(&got[1][k], salus_set_session(c, ids[k], 1, 5, 0, 0), c, ids[k]);
        take(&got[2][k], salus_kill_session(c, ids[k]), c, ids[k]);
    }
    bool ok = same("CreateTensor with a guessed token", &got[0][0], &got[0][1]);
    ok &= same("SetSession", &got[1][0], &got[1][1]);
    ok &= same("KillSession", &got[2][0], &got[2][1]);
    ok &= got[0][0].code != SALUS_OK && got[1][0].code != SALUS_OK && got[2][0].code != SALUS_OK;
    salus_disconnect(c);
    return ok ? 0 : 1;
}

static void session_id_probe(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, NAME, NULL);
    char id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long) a.victim_session);
    int st = sl_attack_exec_tenant((const char *const[]){"probe", a.srv.url, id, NULL}, 60);
    sl_attack_expect(&a, st == 0,
                     "salusd answered the victim's session id otherwise than a missing one");
    assert_true(sl_attack_end(&a, "CreateTensor, SetSession and KillSession on the victim's id "
                                  "and on a missing one"));
}

int main(int argc, char **argv)
{
    if (sl_attack_tenant_start(argc, argv))
        return argc == 5 && strcmp(argv[2], "probe") == 0
                   ? tenant_probe(argv[3], strtoull(argv[4], NULL, 10))
                   : 3;
    const struct CMUnitTest tests[] = {cmocka_unit_test(session_id_probe)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
