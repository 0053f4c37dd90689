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

#endif
