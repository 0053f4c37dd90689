/* A packed Hello request, for tests that talk to salusd below the client
 * library (a raw NNG socket). Header only: for tests that see the client
 * library's internals. */
#ifndef SL_TEST_HELLO_PACK_H
#define SL_TEST_HELLO_PACK_H

#include "client_internal.h"

#include <stddef.h>
#include <stdint.h>

/* Packs a Hello that speaks protocol version into buf (cap bytes); returns
 * its length, or 0 when it does not fit. */
static inline size_t sl_test_pack_hello(uint32_t version, uint8_t *buf, size_t cap)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Hello hello = SALUS__HELLO__INIT;
    hello.protocol_version = version;
    req.body_case = SALUS__REQUEST__BODY_HELLO;
    req.hello = &hello;
    if (salus__request__get_packed_size(&req) > cap)
        return 0;
    return salus__request__pack(&req, buf);
}

#endif
