/* A raw Status request from a test (header only: for tests that see the
 * client library's internals). */
#ifndef SL_TEST_STATUS_CALL_H
#define SL_TEST_STATUS_CALL_H

#include "client_internal.h"
#include "sl_test.h"

/* salusd's status through c; fails the test on error. The caller frees the
 * reply (salus__reply__free_unpacked). */
static inline Salus__Reply *sl_test_status(salus_client *c)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep = NULL;
    assert_sl_ok(sl_client_call(c, &req, &rep));
    assert_int_equal(rep->body_case, SALUS__REPLY__BODY_STATUS);
    return rep;
}

#endif
