/* Escaping of outside text (common/sl_text.h), the parsing and layering
 * of tenant limits, and the per-tenant memory quota a new session and its
 * graphs are held to (server/tenants.h). */
#include "reply.h"
#include "sl_error.h"
#include "sl_test.h"
#include "sl_text.h"
#include "tenants.h"

#include <string.h>

static const char *esc(const char *s, unsigned flags)
{
    static char out[256];
    sl_escape(out, sizeof out, s, strlen(s), flags);
    return out;
}

static void escapes_what_a_terminal_acts_on(void **state)
{
    (void) state;
    assert_string_equal(esc("plain name-1", 0), "plain name-1");
    assert_string_equal(esc("a\nb\r\tc", 0), "a\\nb\\r\\tc");
    assert_string_equal(esc("\x1b[2J\x07", 0), "\\e[2J\\x07");
    assert_string_equal(esc("a\\b", 0), "a\\b");
    assert_string_equal(esc("a\\b", SL_ESCAPE_BACKSLASH), "a\\\\b");
    /* UTF-8 passes; C1 controls, bidi overrides and broken bytes do not */
    assert_string_equal(esc("caf\xc3\xa9 \xe2\x9c\x93", 0), "caf\xc3\xa9 \xe2\x9c\x93");
    assert_string_equal(esc("\xc2\x9b"
                            "1m",
                            0),
                        "\\u{009b}1m");
    assert_string_equal(esc("x\xe2\x80\xaey", 0), "x\\u{202e}y");
    assert_string_equal(esc("\xff\xc3", 0), "\\xff\\xc3");
    assert_string_equal(esc("\xc0\xaf", 0), "\\xc0\\xaf"); /* overlong '/' */
    assert_true(sl_text_is_clean("ok \xc3\xa9", 5, 0));
    assert_false(sl_text_is_clean("a\nb", 3, 0));
    /* never cut inside an escape or a character; always terminated */
    char small[5];
    assert_int_equal(sl_escape(small, sizeof small, "ab\ncd", 5, 0), 4);
    assert_string_equal(small, "ab\\n");
    assert_int_equal(sl_escape(small, sizeof small, "ab\xc3\xa9\xc3\xa9", 6, 0), 4);
    assert_string_equal(small, "ab\xc3\xa9");
    assert_int_equal(sl_escape(small, 1, "abc", 3, 0), 0);
    assert_string_equal(small, "");
}

static void parses_sizes(void **state)
{
    (void) state;
    uint64_t v;
    assert_sl_ok(sl_parse_size("512M", &v));
    assert_int_equal(v, 512ull << 20);
    assert_sl_ok(sl_parse_size("2GiB", &v));
    assert_int_equal(v, 2ull << 30);
    assert_sl_err(sl_parse_size("-1", &v), SL_EINVAL);
    assert_sl_err(sl_parse_size("99999999999T", &v), SL_EINVAL);
    assert_sl_err(sl_parse_size("4X", &v), SL_EINVAL);
}

static void limits_layer_default_then_rule(void **state)
{
    (void) state;
    char why[256];
    sl_limits def = {0};
    assert_sl_ok(sl_limits_parse("priority=1,memory=4G", &def, why, sizeof why));
    sl_limit_rule rules[3];
    assert_sl_ok(sl_limit_rule_parse("1000:weight=3,sessions=2", &rules[0], why, sizeof why));
    assert_sl_ok(sl_limit_rule_parse("remote:sessions=1,priority=-1", &rules[1], why, sizeof why));
    assert_sl_ok(sl_limit_rule_parse("1000:sessions=5", &rules[2], why, sizeof why));
    assert_sl_err(sl_limits_parse("prio=1", &def, why, sizeof why), SL_EINVAL);
    assert_non_null(strstr(why, "unknown limit"));
    assert_sl_err(sl_limits_parse("weight=0", &def, why, sizeof why), SL_EINVAL);
    assert_sl_err(sl_limits_parse("sessions=0", &def, why, sizeof why), SL_EINVAL);
    assert_sl_err(sl_limit_rule_parse("no-such-user-here:priority=1", &rules[0], why, sizeof why),
                  SL_EINVAL);
    assert_sl_err(sl_limit_rule_parse("priority=1", &rules[0], why, sizeof why), SL_EINVAL);

    sl_limits l;
    sl_peer alice = {.has_uid = true, .uid = 1000}, bob = {.has_uid = true, .uid = 1001},
            net = {.pipe_id = 7};
    sl_tenants t = {.defaults = &def,
                    .rules = rules,
                    .n_rules = 3,
                    .default_sessions = sl_tenant_default_sessions(1024, 0),
                    .default_memory = sl_tenant_default_memory(8ull << 30, 0)};
    sl_limits_for(&t, &alice, &l);
    assert_int_equal(l.max_priority, 1);
    assert_true(l.max_weight == 3.0);
    assert_int_equal(l.max_sessions, 5); /* the later rule wins */
    assert_int_equal(l.memory, 4ull << 30);
    sl_limits_for(&t, &bob, &l);
    assert_int_equal(l.max_priority, 1);
    assert_true(l.max_weight == SL_TENANT_DEFAULT_WEIGHT);
    assert_int_equal(l.max_sessions, SL_TENANT_DEFAULT_SESSIONS);
    /* without --tenant-limits memory=: the device shared by the expected
     * tenants */
    t.defaults = NULL;
    sl_limits_for(&t, &bob, &l);
    assert_int_equal(l.memory, 2ull << 30);
    t.default_sessions = sl_tenant_default_sessions(2, 0);
    t.default_memory = 0; /* capacity unknown: no quota */
    sl_limits_for(&t, &net, &l);
    assert_int_equal(l.max_priority, -1);
    assert_int_equal(l.max_sessions, 1);
    assert_int_equal(l.memory, 0);
    /* the defaults: a share of the memory each, sessions to match */
    assert_int_equal(sl_tenant_default_sessions(1024, 0), 16);
    assert_int_equal(sl_tenant_default_sessions(1024, 128), 8);
    assert_int_equal(sl_tenant_default_sessions(3, 4), 1);
    assert_int_equal(sl_tenant_default_memory(1000ull << 20, 0), 250ull << 20);
    assert_int_equal(sl_tenant_default_memory(1000ull << 20, 1), 1000ull << 20);
    assert_int_equal(sl_tenant_default_memory(1001, 4) % 256, 0);
    assert_int_not_equal(sl_tenant_key(&alice), sl_tenant_key(&net));
    assert_int_not_equal(sl_tenant_key(&alice), 0);
}

static void counts_what_tenants_hold(void **state)
{
    (void) state;
    sl_tenants t = {0};
    assert_sl_ok(sl_tenants_add(&t, 5, 100));
    assert_sl_ok(sl_tenants_add(&t, 5, 50));
    assert_int_equal(sl_tenants_get(&t, 5).sessions, 2);
    assert_int_equal(sl_tenants_get(&t, 5).memory, 150);
    sl_tenants_remove(&t, 5, 100);
    sl_tenants_remove(&t, 5, 50);
    assert_int_equal(sl_tenants_get(&t, 5).sessions, 0);
    assert_int_equal(t.use.count, 0);
    sl_tenants_fini(&t);
}

#define MIB (1ull << 20)

/* A refusal's code and message, for the assertions below. */
static const char *refusal(sl_reply *r)
{
    assert_int_equal(sl_reply_msg(r)->code, SL_EEXHAUSTED);
    return sl_reply_msg(r)->message;
}

static void quota_admits_exactly_what_is_left(void **state)
{
    (void) state;
    sl_limits defaults = {.has_memory = true, .memory = 1 * MIB};
    sl_tenants t = {.defaults = &defaults, .default_sessions = 16};
    sl_peer owner = {.has_uid = true, .uid = 1000};
    uint64_t key = sl_tenant_key(&owner);
    sl_reply *r = sl_reply_new(1);
    assert_non_null(r);
    /* one byte unit more than the quota: refused, saying so without
     * contradicting itself */
    sl_tenant_ask over = {.weight = 1, .persistent = 768 * 1024 + 256, .ephemeral = 256 * 1024};
    assert_false(sl_tenants_admit(&t, &owner, key, 64 * MIB, 1024 * MIB, &over, r));
    const char *why = refusal(r);
    assert_non_null(strstr(why, "memory quota of uid 1000: this session needs 786688 persistent "
                                "+ 262144 ephemeral bytes, more than the 1048576 bytes left"));
    assert_non_null(strstr(why, "--tenant-limits / --user-limits memory="));
    /* needs == left: admitted, and counted for all of it */
    sl_tenant_ask exact = {.weight = 1, .persistent = 768 * 1024, .ephemeral = 256 * 1024};
    assert_true(sl_tenants_admit(&t, &owner, key, 64 * MIB, 1024 * MIB, &exact, r));
    assert_int_equal(exact.charge, 1 * MIB);
    assert_sl_ok(sl_tenants_add(&t, key, exact.charge));
    /* nothing left: the next one is refused, whatever it declares */
    sl_tenant_ask next = {.weight = 1};
    assert_false(sl_tenants_admit(&t, &owner, key, 64 * MIB, 1024 * MIB, &next, r));
    assert_non_null(
        strstr(refusal(r), "memory quota of uid 1000: none of its 1048576 bytes is left"));
    sl_tenants_fini(&t);
    sl_reply_free(r);
}

/* A Slurm step of one shard, with shard_memory = memory limit / 8 as
 * plugstack.conf advises: its quota is exactly one default lane. */
static void one_shard_step_gets_its_quota_split(void **state)
{
    (void) state;
    const uint64_t lane = 256 * MIB, shard = 256 * MIB;
    sl_jobs jobs = {0};
    assert_sl_ok(sl_jobs_register(
        &jobs, &(sl_job){.job_id = 5, .step_id = 0, .uid = 1000, .memory = shard, .priority = 3}));
    sl_tenants t = {.default_sessions = 16, .jobs = &jobs};
    sl_peer owner = {.has_uid = true, .uid = 1000};
    uint64_t key = sl_job_tenant(5, 0);
    sl_limits lim;
    assert_int_equal(sl_tenants_limits(&t, &owner, key, &lim), SL_QUOTA_STEP);
    assert_int_equal(lim.memory, shard);
    assert_int_equal(lim.max_priority, 3);
    assert_int_equal(sl_tenants_limits(&t, &owner, sl_tenant_key(&owner), &lim), SL_QUOTA_NONE);

    sl_reply *r = sl_reply_new(1);
    assert_non_null(r);
    /* declaring nothing: the placeholder lane is counted for half of the
     * quota, the tensors get the other half, and the step's priority caps */
    sl_tenant_ask ask = {.priority = 10, .weight = 1};
    assert_true(sl_tenants_admit(&t, &owner, key, lane, 2048 * MIB, &ask, r));
    assert_int_equal(ask.persistent, shard / 2);
    assert_int_equal(ask.charge, shard);
    assert_int_equal(ask.priority, 3);
    assert_sl_ok(sl_tenants_add(&t, key, ask.charge));
    /* its graphs may plan up to what it is counted for, and no more */
    assert_true(sl_tenants_room(&t, &owner, key, ask.charge, ask.persistent, shard / 2, r));
    assert_false(sl_tenants_room(&t, &owner, key, ask.charge, ask.persistent, shard / 2 + 256, r));
    const char *why = refusal(r);
    assert_non_null(strstr(why, "memory quota of job 5.0: this graph needs"));
    assert_non_null(strstr(why, "srun --gres=shard:N"));
    /* a second session of the step: the message names the step's quota,
     * not a tenant limit that does not apply to it */
    sl_tenant_ask second = {.weight = 1, .persistent = MIB};
    assert_false(sl_tenants_admit(&t, &owner, key, lane, 2048 * MIB, &second, r));
    why = refusal(r);
    assert_non_null(strstr(why, "memory quota of job 5.0"));
    assert_non_null(strstr(why, "shard_memory"));
    assert_null(strstr(why, "--tenant-limits"));
    sl_tenants_remove(&t, key, ask.charge);

    /* declared persistent bytes, undeclared ephemeral: counted for what
     * the quota has left beside them */
    sl_tenant_ask p_only = {.weight = 1, .persistent = 200 * MIB};
    assert_true(sl_tenants_admit(&t, &owner, key, lane, 2048 * MIB, &p_only, r));
    assert_int_equal(p_only.charge, shard);
    /* a declared ephemeral need that takes the whole quota leaves nothing
     * for tensors (P = 0 would be unbounded): refused, saying why */
    sl_tenant_ask e_only = {.weight = 1, .ephemeral = shard};
    assert_false(sl_tenants_admit(&t, &owner, key, lane, 2048 * MIB, &e_only, r));
    assert_non_null(strstr(refusal(r), "its 268435456 ephemeral bytes take all 268435456"));
    sl_tenants_fini(&t);
    sl_jobs_fini(&jobs);
    sl_reply_free(r);
}

static void session_count_and_clamps(void **state)
{
    (void) state;
    sl_limits defaults = {
        .has_sessions = true, .max_sessions = 1, .has_weight = true, .max_weight = 2};
    sl_tenants t = {.defaults = &defaults, .default_sessions = 16};
    sl_peer owner = {.has_uid = false}; /* remote */
    uint64_t key = sl_tenant_key(&owner);
    sl_reply *r = sl_reply_new(1);
    assert_non_null(r);
    sl_tenant_ask ask = {.priority = 5, .weight = 9, .persistent = MIB};
    assert_true(sl_tenants_admit(&t, &owner, key, 64 * MIB, 1024 * MIB, &ask, r));
    assert_int_equal(ask.priority, SL_TENANT_DEFAULT_PRIORITY);
    assert_true(ask.weight == 2);
    assert_int_equal(ask.persistent, MIB); /* no quota: as declared */
    assert_int_equal(ask.charge, 65 * MIB);
    assert_sl_ok(sl_tenants_add(&t, key, ask.charge));
    assert_false(sl_tenants_admit(&t, &owner, key, 64 * MIB, 1024 * MIB, &ask, r));
    assert_non_null(strstr(refusal(r), "too many sessions for remote: 1 open (its limit 1"));
    sl_tenants_fini(&t);
    sl_reply_free(r);
}

SL_TEST_MAIN("rights", NULL, NULL, cmocka_unit_test(escapes_what_a_terminal_acts_on),
             cmocka_unit_test(parses_sizes), cmocka_unit_test(limits_layer_default_then_rule),
             cmocka_unit_test(counts_what_tenants_hold),
             cmocka_unit_test(quota_admits_exactly_what_is_left),
             cmocka_unit_test(one_shard_step_gets_its_quota_split),
             cmocka_unit_test(session_count_and_clamps))
