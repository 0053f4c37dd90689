/* salus's thin layer over cmocka: assertions that print sl_strerror(). */
#ifndef SL_TEST_H
#define SL_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sl_error.h"

/* Asserts that expr returns SL_OK, printing the code's text otherwise. */
#define assert_sl_ok(expr)                                                                         \
    do {                                                                                           \
        int sl_test_rc_ = (expr);                                                                  \
        if (sl_test_rc_ != SL_OK)                                                                  \
            fail_msg("%s returned %s (%s)", #expr, sl_errname(sl_test_rc_),                        \
                     sl_strerror(sl_test_rc_));                                                    \
    } while (0)

/* Asserts that expr returns exactly the error code want. */
#define assert_sl_err(expr, want)                                                                  \
    do {                                                                                           \
        int sl_test_rc_ = (expr);                                                                  \
        if (sl_test_rc_ != (want))                                                                 \
            fail_msg("%s returned %s, expected %s", #expr, sl_errname(sl_test_rc_),                \
                     sl_errname(want));                                                            \
    } while (0)

/* Defines `int fn(void)` that runs one cmocka group and returns how many of
 * its tests failed: the group's name, its setup and teardown (may be NULL),
 * then the tests (cmocka_unit_test(...) and the like). */
#define SL_TEST_GROUP(fn, name, setup, teardown, ...)                                              \
    int fn(void)                                                                                   \
    {                                                                                              \
        const struct CMUnitTest sl_tests_[] = {__VA_ARGS__};                                       \
        return _cmocka_run_group_tests(name, sl_tests_, sizeof sl_tests_ / sizeof sl_tests_[0],    \
                                       setup, teardown);                                           \
    }
/* main() of a program whose tests are one group (as SL_TEST_GROUP). */
#define SL_TEST_MAIN(name, setup, teardown, ...)                                                   \
    SL_TEST_GROUP(main, name, setup, teardown, __VA_ARGS__)

#endif
