/* Escaping of outside text (common/sl_text.h) and the parsing and layering
 * of tenant limits (server/tenants.h). */
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
    sl_limits_for(&def, rules, 3, 1024, &alice, &l);
    assert_int_equal(l.max_priority, 1);
    assert_true(l.max_weight == 3.0);
    assert_int_equal(l.max_sessions, 5); /* the later rule wins */
    assert_int_equal(l.memory, 4ull << 30);
    sl_limits_for(&def, rules, 3, 1024, &bob, &l);
    assert_int_equal(l.max_priority, 1);
    assert_true(l.max_weight == SL_TENANT_DEFAULT_WEIGHT);
    assert_int_equal(l.max_sessions, 1024 / SL_TENANT_DEFAULT_SESSIONS_DIV);
    sl_limits_for(NULL, rules, 3, 2, &net, &l);
    assert_int_equal(l.max_priority, -1);
    assert_int_equal(l.max_sessions, 1);
    assert_int_equal(l.memory, 0);
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

SL_TEST_MAIN("rights", NULL, NULL, cmocka_unit_test(escapes_what_a_terminal_acts_on),
             cmocka_unit_test(parses_sizes), cmocka_unit_test(limits_layer_default_then_rule),
             cmocka_unit_test(counts_what_tenants_hold))
