/* Tests of the drivers' checked option conversions (eval/lib/cli.h): valid
 * values and both ends of a range, out of range, trailing garbage, empty,
 * white space, signs on integers, past 2^64, inf and nan, open lower
 * bounds, and the one line printed on a rejection; option tables (every
 * kind, order, the shared options, errors) and the report helpers. */
#include "sl_test.h"

#include "cli.h"
#include "sim/profiles.h"
#include "sl_error.h"
#include "workload.h"

#include <float.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

/* stderr goes to a temporary file while a test runs, so that the expected
 * rejections do not clutter the test log and their text can be read. */
static FILE *err_file;
static int saved_stderr = -1;

static int capture(void **state)
{
    (void) state;
    fflush(stderr);
    err_file = tmpfile();
    if (!err_file)
        return -1;
    saved_stderr = dup(STDERR_FILENO);
    return dup2(fileno(err_file), STDERR_FILENO) < 0 ? -1 : 0;
}

static int release(void **state)
{
    (void) state;
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    /* what no test read (a failure's message) goes to the real stderr */
    char buf[4096];
    ssize_t n;
    for (off_t at = 0; (n = pread(fileno(err_file), buf, sizeof buf, at)) > 0; at += n)
        fwrite(buf, 1, (size_t) n, stderr);
    fclose(err_file);
    return 0;
}

/* What was printed on stderr since the last call (its first 511 bytes). */
static const char *printed(void)
{
    static char buf[512];
    int fd = fileno(err_file);
    fflush(stderr);
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    /* fd 2 shares this offset: the next line goes to the start */
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)
        buf[0] = 0;
    return buf;
}

static void test_u64(void **state)
{
    (void) state;
    uint64_t v = 7;
    assert_true(sl_cli_u64("--n", "0", 0, 10, &v));
    assert_int_equal(v, 0);
    assert_true(sl_cli_u64("--n", "10", 0, 10, &v));
    assert_int_equal(v, 10);
    assert_true(sl_cli_u64("--n", "007", 0, 10, &v));
    assert_int_equal(v, 7);
    assert_true(sl_cli_u64("--n", "18446744073709551615", 0, UINT64_MAX, &v));
    assert_true(v == UINT64_MAX);
    assert_string_equal(printed(), "");

    v = 42;
    const char *bad[] = {"11",
                         "",
                         "abc",
                         "12x",
                         " 5",
                         "5 ",
                         "-1",
                         "-0",
                         "+5",
                         "0x5",
                         "1.5",
                         "1e3",
                         "inf",
                         "nan",
                         "\t",
                         "18446744073709551616",
                         "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (sl_cli_u64("--n", bad[i], 0, 10, &v))
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(v, 42); /* untouched */
    }
    printed();
    assert_false(sl_cli_u64("--n", "0", 1, 10, &v)); /* below min */
    assert_int_equal(v, 42);
    printed();
}

static void test_size_uint_seed(void **state)
{
    (void) state;
    size_t z = 3;
    unsigned u = 3;
    uint64_t s = 3;
    assert_true(sl_cli_size("--jobs", "1000000", 1, 1000000, &z));
    assert_int_equal(z, 1000000);
    assert_false(sl_cli_size("--jobs", "1000001", 1, 1000000, &z));
    assert_false(sl_cli_size("--jobs", "0", 1, 1000000, &z));
    assert_int_equal(z, 1000000);
    assert_true(sl_cli_uint("--gpus", "4294967295", 0, UINT32_MAX, &u));
    assert_true(u == UINT32_MAX);
    assert_false(sl_cli_uint("--gpus", "4294967296", 0, UINT32_MAX, &u)); /* no wrap */
    assert_false(sl_cli_uint("--gpus", "-1", 0, UINT32_MAX, &u));
    assert_true(u == UINT32_MAX);
    assert_true(sl_cli_seed("--seed", "0", &s));
    assert_int_equal(s, 0);
    assert_true(sl_cli_seed("--seed", "18446744073709551615", &s));
    assert_true(s == UINT64_MAX);
    assert_false(sl_cli_seed("--seed", "-1", &s)); /* strtoull would wrap it */
    assert_false(sl_cli_seed("--seed", "18446744073709551616", &s));
    assert_false(sl_cli_seed("--seed", "", &s));
    assert_true(s == UINT64_MAX);
    printed();
}

static void test_double(void **state)
{
    (void) state;
    double d = -5;
    assert_true(sl_cli_double("--p", "0", 0, 1, &d));
    assert_true(d == 0);
    assert_true(sl_cli_double("--p", "1", 0, 1, &d));
    assert_true(d == 1);
    assert_true(sl_cli_double("--p", "0.25", 0, 1, &d));
    assert_true(d == 0.25);
    assert_true(sl_cli_double("--p", "2.5e-1", 0, 1, &d));
    assert_true(d == 0.25);
    assert_true(sl_cli_double("--p", "0x1p-2", 0, 1, &d));
    assert_true(d == 0.25);
    assert_true(sl_cli_double("--x", "-3", -10, 10, &d));
    assert_true(d == -3);
    assert_true(sl_cli_double("--x", "1e-400", 0, 1, &d)); /* underflow: a finite ~0 */
    assert_true(d >= 0 && d < 1e-300);
    assert_true(sl_cli_double("--x", "1e308", 0, DBL_MAX, &d));
    assert_string_equal(printed(), "");

    d = 42;
    const char *bad[] = {"",      "abc",    "1.5x",     " 0.5",  "0.5 ", "\n",
                         "-0.1",  "1.0001", "inf",      "-inf",  "nan",  "NAN",
                         "1e999", "-1e999", "infinity", "0.5.5", "1,5",  "--"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (sl_cli_double("--p", bad[i], 0, 1, &d))
            fail_msg("accepted \"%s\"", bad[i]);
        assert_true(d == 42);
    }
    /* inf and nan whatever the range */
    assert_false(sl_cli_double("--x", "inf", -DBL_MAX, DBL_MAX, &d));
    assert_false(sl_cli_double("--x", "nan", -DBL_MAX, DBL_MAX, &d));
    assert_false(sl_cli_double("--x", "1e999", -DBL_MAX, DBL_MAX, &d));
    assert_true(d == 42);
    printed();
}

static void test_double_above(void **state)
{
    (void) state;
    double d = 42;
    assert_false(sl_cli_double_above("--t", "0", 0, 10, &d));
    assert_false(sl_cli_double_above("--t", "-0", 0, 10, &d));
    assert_false(sl_cli_double_above("--t", "-1", 0, 10, &d));
    assert_false(sl_cli_double_above("--t", "10.5", 0, 10, &d));
    assert_false(sl_cli_double_above("--t", "nan", 0, 10, &d));
    assert_true(d == 42);
    assert_true(sl_cli_double_above("--t", "1e-9", 0, 10, &d));
    assert_true(d == 1e-9);
    assert_true(sl_cli_double_above("--t", "10", 0, 10, &d));
    assert_true(d == 10);
    assert_false(sl_cli_double_above("--d", "1", 1, 100, &d));
    assert_true(sl_cli_double_above("--d", "1.5", 1, 100, &d));
    assert_true(d == 1.5);
    printed();
}

static void test_messages(void **state)
{
    (void) state;
    size_t z;
    double d;
    sl_cli_init("./build/eval/salus51");
    assert_string_equal(sl_cli_program(), "salus51");
    assert_false(sl_cli_size("--jobs", "abc", 1, 1000000, &z));
    assert_string_equal(printed(), "salus51: --jobs takes an integer 1..1000000, not \"abc\"\n");
    assert_false(sl_cli_size("--jobs", "", 1, 1000000, &z));
    assert_string_equal(printed(), "salus51: --jobs takes an integer 1..1000000, not \"\"\n");
    sl_cli_init("hparam");
    assert_false(sl_cli_double_above("--job-s", "inf", 0, 1e6, &d));
    assert_string_equal(printed(), "hparam: --job-s takes a number in (0, 1e+06], not \"inf\"\n");
    assert_false(sl_cli_double("--p", "2", 0, 1, &d));
    assert_string_equal(printed(), "hparam: --p takes a number in [0, 1], not \"2\"\n");
    /* a control character in the argument never reaches the terminal */
    assert_false(sl_cli_double("--p", "1\x1b[2J", 0, 1, &d));
    assert_string_equal(printed(), "hparam: --p takes a number in [0, 1], not \"1\\e[2J\"\n");

    char *argv[] = {"prog", "--jobs", "3", "extra", NULL};
    assert_true(sl_cli_no_operands(4, argv, 4));
    assert_string_equal(printed(), "");
    assert_false(sl_cli_no_operands(4, argv, 3));
    assert_string_equal(printed(), "hparam: unexpected argument \"extra\"\n");
    sl_cli_init(NULL);
    assert_string_equal(sl_cli_program(), "eval");
}

/* A driver's options for the table tests. */
typedef struct opts {
    size_t jobs;
    unsigned gpus;
    uint64_t n;
    double x, y;
    const char *name;
    bool on, off;
    int tiny_calls;
    char list[32];
} opts;

static bool tiny(void *dst, const char *arg)
{
    opts *o = dst;
    assert_null(arg);
    o->tiny_calls++;
    o->jobs = 12;
    return true;
}

static bool list(void *dst, const char *arg)
{
    opts *o = dst;
    if (strlen(arg) >= sizeof o->list) {
        fprintf(stderr, "%s: --list is too long\n", sl_cli_program());
        return false;
    }
    strcpy(o->list, arg);
    return true;
}

static const char usage[] = "usage: %s [options]\n";

/* Parses the NULL-ended argv against the test table and common. */
static int parse(char **argv, sl_cli_common *c, opts *o)
{
    const sl_cli_opt table[] = {
        {"jobs", SL_CLI_SIZE, &o->jobs, 1, 100, NULL},
        {"gpus", SL_CLI_UINT, &o->gpus, 1, 8, NULL},
        {"launch-ns", SL_CLI_U64, &o->n, 0, 1e9, NULL},
        {"x", SL_CLI_DOUBLE, &o->x, 0, 1, NULL},
        {"y", SL_CLI_ABOVE, &o->y, 0, 1, NULL},
        {"name", SL_CLI_STR, &o->name, 0, 0, NULL},
        {"on", SL_CLI_SET, &o->on, 0, 0, NULL},
        {"no-off", SL_CLI_CLEAR, &o->off, 0, 0, NULL},
        {"tiny", SL_CLI_CALL, o, 0, 0, tiny},
        {"list", SL_CLI_CALL_ARG, o, 0, 0, list},
    };
    int argc = 0;
    while (argv[argc])
        argc++;
    return sl_cli_parse(argc, argv, usage, c, table, sizeof table / sizeof table[0]);
}

/* Every kind stores what it is given, in the order given. */
static void test_parse_table(void **state)
{
    (void) state;
    opts o = {.off = true};
    sl_cli_common c = sl_cli_common_default(0);
    char *argv[] = {"./drv", "--jobs",   "5",      "--gpus", "3",      "--launch-ns=1000",
                    "--x",   "0.25",     "--y",    "1",      "--name", "n",
                    "--on",  "--no-off", "--list", "a,b",    NULL};
    assert_int_equal(parse(argv, &c, &o), SL_CLI_RUN);
    assert_string_equal(printed(), "");
    assert_int_equal(o.jobs, 5);
    assert_int_equal(o.gpus, 3);
    assert_int_equal(o.n, 1000);
    assert_true(o.x == 0.25 && o.y == 1);
    assert_string_equal(o.name, "n");
    assert_true(o.on);
    assert_false(o.off);
    assert_string_equal(o.list, "a,b");
    assert_string_equal(sl_cli_program(), "drv");

    /* a call applies where it stands: after --jobs it wins, before it not */
    opts p = {0};
    char *late[] = {"drv", "--jobs", "5", "--tiny", NULL};
    assert_int_equal(parse(late, &c, &p), SL_CLI_RUN);
    assert_int_equal(p.jobs, 12);
    char *early[] = {"drv", "--tiny", "--jobs", "5", NULL};
    assert_int_equal(parse(early, &c, &p), SL_CLI_RUN);
    assert_int_equal(p.jobs, 5);
    assert_int_equal(p.tiny_calls, 2);
    /* a unique abbreviation is the option */
    char *abbrev[] = {"drv", "--na", "m", NULL};
    assert_int_equal(parse(abbrev, &c, &p), SL_CLI_RUN);
    assert_string_equal(p.name, "m");
}

/* The shared options: their defaults, only those wanted are options. */
static void test_parse_common(void **state)
{
    (void) state;
    opts o = {0};
    sl_cli_common c = sl_cli_common_default(SL_CLI_WANT_SEED | SL_CLI_WANT_JSON | SL_CLI_WANT_GPU |
                                            SL_CLI_WANT_LAUNCH);
    assert_int_equal(c.seed, 1);
    assert_null(c.json);
    assert_string_equal(c.gpu->name, "p100");
    assert_non_null(c.csv);
    assert_int_equal(c.launch, SL_EVAL_LAUNCH_GRAPH);
    char *argv[] = {"drv",   "--seed", "18446744073709551615", "--json", "out.json",
                    "--gpu", "h100",   "--serial-launch",      NULL};
    assert_int_equal(parse(argv, &c, &o), SL_CLI_RUN);
    assert_true(c.seed == UINT64_MAX);
    assert_string_equal(c.json, "out.json");
    assert_string_equal(c.gpu->name, "h100");
    assert_int_equal(c.launch, SL_EVAL_LAUNCH_SERIAL);
    assert_string_equal(printed(), "");
    char *ops[] = {"drv", "--op-launch", NULL};
    assert_int_equal(parse(ops, &c, &o), SL_CLI_RUN);
    assert_int_equal(c.launch, SL_EVAL_LAUNCH_OPS);

    /* --csv is not wanted here: an unknown option */
    char *csv[] = {"drv", "--csv", "w.csv", NULL};
    assert_int_equal(parse(csv, &c, &o), 2);
    const char *err = printed();
    assert_non_null(strstr(err, "--csv"));
    assert_non_null(strstr(err, "usage: drv [options]\n"));
    /* no common options at all */
    char *seed[] = {"drv", "--seed", "3", NULL};
    assert_int_equal(parse(seed, NULL, &o), 2);
    printed();
}

/* A rejected value, an operand, a missing argument, an unknown profile:
 * status 2 and what was wrong; --help: status 0. */
static void test_parse_errors(void **state)
{
    (void) state;
    opts o = {.jobs = 9};
    sl_cli_common c = sl_cli_common_default(SL_CLI_WANT_GPU);
    char *bad[] = {"drv", "--jobs", "101", NULL};
    assert_int_equal(parse(bad, &c, &o), 2);
    assert_string_equal(printed(), "drv: --jobs takes an integer 1..100, not \"101\"\n");
    assert_int_equal(o.jobs, 9);
    char *nan_y[] = {"drv", "--y", "0", NULL};
    assert_int_equal(parse(nan_y, &c, &o), 2);
    assert_string_equal(printed(), "drv: --y takes a number in (0, 1], not \"0\"\n");
    char *operand[] = {"drv", "--on", "extra", NULL};
    assert_int_equal(parse(operand, &c, &o), 2);
    assert_string_equal(printed(), "drv: unexpected argument \"extra\"\n");
    char *missing[] = {"drv", "--jobs", NULL};
    assert_int_equal(parse(missing, &c, &o), 2);
    assert_non_null(strstr(printed(), "usage: drv"));
    char *gpu[] = {"drv", "--gpu", "x9000", NULL};
    assert_int_equal(parse(gpu, &c, &o), 2);
    assert_string_equal(printed(), "drv: unknown GPU profile x9000\n");
    char *call[] = {"drv", "--list", "0123456789012345678901234567890123456789", NULL};
    assert_int_equal(parse(call, &c, &o), 2);
    assert_string_equal(printed(), "drv: --list is too long\n");
    char *help[] = {"drv", "--jobs", "4", "--help", NULL};
    assert_int_equal(parse(help, &c, &o), 0);
    assert_string_equal(printed(), "");
}

/* The report's files and error lines. */
static void test_report(void **state)
{
    (void) state;
    sl_cli_init("drv");
    FILE *f = stdout;
    assert_true(sl_cli_create(NULL, &f));
    assert_null(f);
    assert_true(sl_cli_close(NULL, NULL));
    f = NULL;
    assert_false(sl_cli_create("/nonexistent-dir/x.json", &f));
    assert_null(f);
    assert_string_equal(printed(),
                        "drv: cannot write /nonexistent-dir/x.json: No such file or directory\n");
    char path[] = "/tmp/sl-test-cli-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_true(sl_cli_create(path, &f));
    assert_non_null(f);
    fprintf(f, "{}\n");
    assert_true(sl_cli_close(f, path));
    unlink(path);
    assert_int_equal(sl_cli_fail(SL_ENOMEM, "run %d", 3), 1);
    char want[128];
    snprintf(want, sizeof want, "drv: run 3: %s\n", sl_strerror(SL_ENOMEM));
    assert_string_equal(printed(), want);
    sl_cli_common c = sl_cli_common_default(SL_CLI_WANT_CSV);
    c.csv = "/nonexistent-dir/w.csv";
    sl_eval_workload *w;
    size_t n;
    assert_false(sl_cli_workloads(&c, &w, &n));
    assert_non_null(strstr(printed(), "drv: cannot load /nonexistent-dir/w.csv: "));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_u64, capture, release),
        cmocka_unit_test_setup_teardown(test_size_uint_seed, capture, release),
        cmocka_unit_test_setup_teardown(test_double, capture, release),
        cmocka_unit_test_setup_teardown(test_double_above, capture, release),
        cmocka_unit_test_setup_teardown(test_messages, capture, release),
        cmocka_unit_test_setup_teardown(test_parse_table, capture, release),
        cmocka_unit_test_setup_teardown(test_parse_common, capture, release),
        cmocka_unit_test_setup_teardown(test_parse_errors, capture, release),
        cmocka_unit_test_setup_teardown(test_report, capture, release),
    };
    return cmocka_run_group_tests_name("eval cli", tests, NULL, NULL);
}
