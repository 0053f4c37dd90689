/* salusd's flag table (server/flags.h): its entries are consistent, its
 * defaults are the values the server uses when a flag is absent, and
 * parsing (command line and --config file) stores what the flags say and
 * refuses bad values naming the flag, the value and what is allowed. */
#include "sl_test.h"

#include "config_file.h"
#include "decode.h"
#include "flags.h"
#include "scheduler.h"
#include "shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Parses argv (NULL-terminated) into *cfg from the defaults; the error
 * text, if any, into err (the caller frees it). */
static int parse(sl_config *cfg, enum sl_flags_action *action, char **err, const char *first, ...)
{
    static char *argv[64];
    int argc = 0;
    argv[argc++] = "salusd";
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && argc < 63; a = va_arg(ap, const char *))
        argv[argc++] = (char *) a;
    va_end(ap);
    argv[argc] = NULL;
    *cfg = (sl_config) SL_CONFIG_DEFAULTS;
    size_t len;
    FILE *f = open_memstream(err, &len);
    assert_non_null(f);
    int rc = sl_flags_parse(argc, argv, cfg, f, action);
    fclose(f);
    return rc;
}

static void test_table(void **state)
{
    (void) state;
    int last_section = 0;
    for (int i = 0; i < sl_flags_count; i++) {
        const sl_flag *f = &sl_flags[i];
        assert_non_null(f->help);
        size_t len = strlen(f->help);
        if (len == 0 || f->help[len - 1] == '.')
            fail_msg("--%s: help must be a phrase without a final period", f->name);
        if (f->section < last_section || f->section >= sl_flag_sections_count)
            fail_msg("--%s: sections must follow each other in the table", f->name);
        last_section = f->section;
        assert_ptr_equal(sl_flag_find(f->name), f);
        for (int k = 0; k < i; k++)
            if (f->short_opt && f->short_opt == sl_flags[k].short_opt)
                fail_msg("-%c is both --%s and --%s", f->short_opt, f->name, sl_flags[k].name);
        if (f->def && f->def_text)
            fail_msg("--%s: a default as a value or in words, not both", f->name);
        bool takes_arg = f->kind != SL_FLAG_SWITCH && f->kind != SL_FLAG_ACTION;
        if (takes_arg != (f->arg != NULL) && f->action != SL_FLAGS_CONFIG)
            fail_msg("--%s: its argument name does not fit its kind", f->name);
        if (f->kind == SL_FLAG_CUSTOM)
            assert_non_null(f->set);
    }
    assert_int_equal(last_section, sl_flag_sections_count - 1);
    /* the policy's help names every policy there is */
    char names[256];
    snprintf(names, sizeof names, "%s", sl_sched_policy_names());
    const char *help = sl_flag_find("policy")->help;
    for (char *save, *n = strtok_r(names, ",", &save); n; n = strtok_r(NULL, ",", &save))
        if (!strstr(help, n))
            fail_msg("--policy's help does not name the policy %s", n);
}

/* Every default shown is a value its flag accepts, and the one the
 * server takes when the flag is absent. */
static void test_defaults(void **state)
{
    (void) state;
    sl_config base = SL_CONFIG_DEFAULTS;
    char why[256];
    for (int i = 0; i < sl_flags_count; i++) {
        const sl_flag *f = &sl_flags[i];
        if (!f->def)
            continue;
        sl_config cfg = SL_CONFIG_DEFAULTS;
        if (sl_flag_apply(f, &cfg, f->def, why, sizeof why) != SL_OK)
            fail_msg("--%s refuses its own default '%s': %s", f->name, f->def, why);
    }
    struct {
        const char *name;
        uint64_t want;
    } numbers[] = {
        {"idle-timeout", SL_DEFAULT_IDLE_TIMEOUT_MS},
        {"op-part-us", SL_DEFAULT_OP_PART_NS},
        {"max-message", SL_DEFAULT_MAX_MESSAGE},
        {"session-metadata", SL_DEFAULT_SESSION_METADATA},
        {"shm-session-bytes", SL_SHM_DEFAULT_SESSION_BYTES},
        {"max-sessions", SL_DEFAULT_MAX_SESSIONS},
        {"max-tensors-per-session", SL_DEFAULT_MAX_TENSORS},
        {"max-connections-per-user", SL_DEFAULT_MAX_CONNS_PER_USER},
        {"contexts", (uint64_t) base.contexts},
        {"ipc-mode", (uint64_t) base.ipc_mode},
    };
    for (size_t k = 0; k < sizeof numbers / sizeof numbers[0]; k++) {
        const sl_flag *f = sl_flag_find(numbers[k].name);
        sl_config cfg = SL_CONFIG_DEFAULTS;
        assert_sl_ok(sl_flag_apply(f, &cfg, f->def, why, sizeof why));
        uint64_t got = 0;
        if (f->width == sizeof(uint64_t))
            memcpy(&got, (char *) &cfg + f->offset, sizeof got);
        else
            got = *(uint32_t *) ((char *) &cfg + f->offset);
        if (got != numbers[k].want)
            fail_msg("--%s's default %s is %llu, the server's %llu", f->name, f->def,
                     (unsigned long long) got, (unsigned long long) numbers[k].want);
    }
    assert_string_equal(sl_flag_find("device")->def, base.device);
    assert_string_equal(sl_flag_find("policy")->def, base.policy);
    sl_config cfg = SL_CONFIG_DEFAULTS;
    assert_sl_ok(sl_flag_apply(sl_flag_find("gap-margin"), &cfg, "5", why, sizeof why));
    assert_true(cfg.gap_margin > 0.0499 && cfg.gap_margin < 0.0501);
}

static void test_parse(void **state)
{
    (void) state;
    sl_config cfg;
    enum sl_flags_action action;
    char *err;
    assert_int_equal(parse(&cfg, &action, &err, "-l", "ipc:///tmp/flags-a.sock",
                           "--listen=inproc://b", "--contexts", "12", "-m", "2G", "--no-stepwise",
                           "--idle-timeout", "3", "--ipc-mode", "0640", "--spread-limit", "0",
                           "--gap-margin", "2.5", "-p", "priority", "--max-sessions", "7",
                           "--tenant-limits", "sessions=3", NULL),
                     0);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(action, SL_FLAGS_RUN);
    assert_int_equal(cfg.n_listen, 2);
    assert_string_equal(cfg.listen[1], "inproc://b");
    assert_int_equal(cfg.contexts, 12);
    assert_int_equal(cfg.memory_limit, 2ull << 30);
    assert_true(cfg.no_stepwise && !cfg.no_gap_fill);
    assert_int_equal(cfg.idle_timeout_ms, 3000);
    assert_int_equal(cfg.ipc_mode, 0640);
    assert_true(cfg.spread_set && cfg.spread_limit == 0);
    assert_true(cfg.gap_margin_set && cfg.gap_margin > 0.0249 && cfg.gap_margin < 0.0251);
    assert_string_equal(cfg.policy, "priority");
    assert_int_equal(cfg.max_sessions, 7);
    assert_true(cfg.tenant_limits.has_sessions && cfg.tenant_limits.max_sessions == 3);

    assert_int_equal(parse(&cfg, &action, &err, "--contexts", "x", "--help", NULL), 2);
    free(err);
    assert_int_equal(parse(&cfg, &action, &err, "--no-inplace", "--help", "--bogus", NULL), 0);
    assert_int_equal(action, SL_FLAGS_HELP);
    free(err);
    assert_int_equal(parse(&cfg, &action, &err, "-V", NULL), 0);
    assert_int_equal(action, SL_FLAGS_VERSION);
    free(err);
}

/* Each refusal names the flag, the value given and what is allowed. */
static void test_refusals(void **state)
{
    (void) state;
    struct {
        const char *flag, *value, *says;
    } bad[] = {
        {"--contexts", "0", "an integer from 1 to 65536"},
        {"--contexts", "12x", "an integer from 1 to 65536"},
        {"--idle-timeout", "soon", "an integer from 0 to 86400"},
        {"--ipc-mode", "0999", "an octal mode from 0 to 0777"},
        {"--memory-limit", "0", "a size above 0"},
        {"--max-message", "100", "a size of at least 1K"},
        {"--lane-size", "lots", "a size above 0"},
        {"--policy", "nonesuch", "known: fifo,"},
        {"--partitions", "half", "off, demand, auto, auto:N or N"},
        {"--gap-margin", "100", "0 <= PCT < 100"},
        {"--log-level", "loud", "error, warn, info or debug"},
        {"--tenant-limits", "colour=red", ""},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sl_config cfg;
        enum sl_flags_action action;
        char *err, want[256];
        assert_int_equal(
            parse(&cfg, &action, &err, "--listen", "inproc://x", bad[k].flag, bad[k].value, NULL),
            2);
        snprintf(want, sizeof want, "bad %s '%s': ", bad[k].flag, bad[k].value);
        if (!strstr(err, want) || !strstr(err, bad[k].says))
            fail_msg("%s %s: '%s' lacks '%s' or '%s'", bad[k].flag, bad[k].value, err, want,
                     bad[k].says);
        free(err);
    }
    sl_config cfg;
    enum sl_flags_action action;
    char *err;
    assert_int_equal(parse(&cfg, &action, &err, "--bogus", NULL), 2);
    assert_non_null(strstr(err, "unknown flag '--bogus'"));
    free(err);
    assert_int_equal(parse(&cfg, &action, &err, "--contexts", NULL), 2);
    assert_non_null(strstr(err, "--contexts needs a value (N)"));
    free(err);
    assert_int_equal(parse(&cfg, &action, &err, "--listen", "inproc://x", "stray", NULL), 2);
    assert_non_null(strstr(err, "unexpected argument 'stray'"));
    free(err);
    assert_int_equal(parse(&cfg, &action, &err, "--listen", "tcp://127.0.0.1:1", NULL), 2);
    assert_non_null(strstr(err, "--allow-plain-tcp"));
    free(err);
    /* combinations are checked only for running: --print-config shows them */
    assert_int_equal(
        parse(&cfg, &action, &err, "--listen", "tcp://127.0.0.1:1", "--print-config", NULL), 0);
    assert_int_equal(action, SL_FLAGS_PRINT_CONFIG);
    free(err);
}

/* A configuration file holding text, and the --config argument naming it. */
typedef struct temp_config {
    char path[32];
    char arg[64];
} temp_config;

static void config_write(temp_config *t, const char *text)
{
    snprintf(t->path, sizeof t->path, "/tmp/salus-flags-XXXXXX");
    int fd = mkstemp(t->path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    close(fd);
    snprintf(t->arg, sizeof t->arg, "--config=%s", t->path);
}

static void test_config_file(void **state)
{
    (void) state;
    temp_config t;
    config_write(&t, "# a comment\n"
                     "contexts = 9\n"
                     "listen = inproc://file\n"
                     "strict = true\n"
                     "no-stepwise = false\n"
                     "device = \"sim:v100\"  # quoted\n");
    sl_config cfg;
    enum sl_flags_action action;
    char *err;
    assert_int_equal(parse(&cfg, &action, &err, t.arg, "--contexts", "10", NULL), 0);
    free(err);
    assert_int_equal(cfg.contexts, 10); /* the command line wins */
    assert_true(cfg.strict && !cfg.no_stepwise);
    assert_string_equal(cfg.device, "sim:v100");
    assert_int_equal(cfg.n_listen, 1);
    assert_string_equal(cfg.listen[0], "inproc://file");
    /* a repeatable flag on the command line replaces the file's */
    assert_int_equal(parse(&cfg, &action, &err, "--config", t.path, "-l", "inproc://cli",
                           "--print-config", NULL),
                     0);
    free(err);
    assert_int_equal(action, SL_FLAGS_PRINT_CONFIG);
    assert_int_equal(cfg.n_listen, 1);
    assert_string_equal(cfg.listen[0], "inproc://cli");
    char *out;
    size_t len;
    FILE *f = open_memstream(&out, &len);
    sl_cfgfile_print(f);
    fclose(f);
    const char *lines[] = {"\ncontexts = 9\n",
                           "\nlisten = inproc://cli\n",
                           "\nstrict = true\n",
                           "\ndevice = sim:v100\n",
                           "\n# no-stepwise = false\n",
                           "\n# policy = fair\n",
                           "\n# idle-timeout = 15\n",
                           "\n# memory-limit =  # default: what the device reports, minus 5%\n",
                           "\n# tls-cert =\n"};
    for (size_t k = 0; k < sizeof lines / sizeof lines[0]; k++)
        if (!strstr(out, lines[k]))
            fail_msg("--print-config lacks '%s':\n%s", lines[k] + 1, out);
    assert_null(strstr(out, "print-config ="));
    assert_null(strstr(out, "help ="));
    free(out);
    unlink(t.path);

    /* the error names the file and line */
    config_write(&t, "policy = srtf\n\nidle-timeout = soon\n");
    assert_int_equal(parse(&cfg, &action, &err, t.arg, NULL), 2);
    char where[64];
    snprintf(where, sizeof where, "%s:3: bad --idle-timeout 'soon'", t.path);
    if (!strstr(err, where))
        fail_msg("'%s' lacks '%s'", err, where);
    free(err);
    unlink(t.path);
    config_write(&t, "help = true\n");
    assert_int_equal(parse(&cfg, &action, &err, t.arg, NULL), 2);
    assert_non_null(strstr(err, "unknown key 'help'"));
    free(err);
    unlink(t.path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),       cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_parse),       cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_config_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
