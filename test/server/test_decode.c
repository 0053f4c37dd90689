/* Request decoding under a budget (server/decode.h): valid requests decode
 * and give every byte back when freed; a request of many tiny elements is
 * refused at its budget; the cap on decoded requests held at once refuses
 * large requests while small ones pass; refusals keep the request's seq;
 * garbage and failed allocations leave nothing held. */
#include "decode.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_test.h"

#include <stdlib.h>
#include <string.h>

/* req, with seq, packed into a buffer the caller frees; scratch (what the
 * request points into) is freed. */
static uint8_t *pack(Salus__Request *req, uint64_t seq, void *scratch, size_t *len)
{
    req->seq = seq;
    *len = salus__request__get_packed_size(req);
    uint8_t *buf = malloc(*len ? *len : 1);
    assert_non_null(buf);
    salus__request__pack(req, buf);
    free(scratch);
    return buf;
}

/* WriteTensor{data: bytes} with seq. */
static uint8_t *write_request(uint64_t seq, size_t bytes, size_t *len)
{
    uint8_t *data = calloc(bytes ? bytes : 1, 1);
    assert_non_null(data);
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__WriteTensor w = SALUS__WRITE_TENSOR__INIT;
    w.tensor_id = 3;
    w.data.data = data;
    w.data.len = bytes;
    req.body_case = SALUS__REQUEST__BODY_WRITE_TENSOR;
    req.write_tensor = &w;
    return pack(&req, seq, data, len);
}

/* RegisterGraph{graph{n ops of type `type` (NULL: empty ops)}} with seq. */
static uint8_t *ops_request(uint64_t seq, size_t n, const char *type, size_t *len)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
    Salus__Graph g = SALUS__GRAPH__INIT;
    Salus__Op op = SALUS__OP__INIT;
    if (type)
        op.type = (char *) type;
    Salus__Op **ops = malloc(n * sizeof *ops);
    assert_non_null(ops);
    for (size_t i = 0; i < n; i++)
        ops[i] = &op;
    g.n_ops = n;
    g.ops = ops;
    rg.graph = &g;
    req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req.register_graph = &rg;
    return pack(&req, seq, ops, len);
}

static void valid_requests_decode_and_give_back(void **state)
{
    (void) state;
    sl_decoder d;
    sl_decoder_init(&d, 0);
    char why[512];
    size_t sizes[] = {0, 100, 100000, 3u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t len;
        uint8_t *buf = write_request(7, sizes[k], &len);
        Salus__Request *m = NULL;
        assert_sl_ok(sl_decode_request(&d, buf, len, &m, why, sizeof why));
        assert_int_equal(m->seq, 7);
        assert_int_equal(m->body_case, SALUS__REQUEST__BODY_WRITE_TENSOR);
        assert_int_equal(m->write_tensor->data.len, sizes[k]);
        /* the bytes come aligned for any element type */
        assert_int_equal((uintptr_t) m->write_tensor->data.data % 16, 0);
        assert_true(atomic_load(&d.held) <= sl_decode_budget(len));
        sl_request_free(m);
        assert_int_equal(atomic_load(&d.held), 0);
        free(buf);
    }
    /* the largest graph allowed fits: 8192 ops of the shortest op name and
     * nothing else, the most decoded bytes per byte sent a valid op has */
    size_t len;
    uint8_t *buf = ops_request(1, 8192, "add", &len);
    Salus__Request *m = NULL;
    assert_sl_ok(sl_decode_request(&d, buf, len, &m, why, sizeof why));
    assert_int_equal(m->register_graph->graph->n_ops, 8192);
    sl_request_free(m);
    free(buf);
    assert_int_equal(atomic_load(&d.held), 0);
}

static void tiny_elements_over_budget(void **state)
{
    (void) state;
    sl_decoder d;
    sl_decoder_init(&d, 0);
    char why[512];
    size_t len;
    /* 512 Ki empty ops: 1 MiB sent, over 60 MiB decoded */
    uint8_t *buf = ops_request(42, 512u << 10, NULL, &len);
    Salus__Request *m = NULL;
    assert_sl_err(sl_decode_request(&d, buf, len, &m, why, sizeof why), SL_EEXHAUSTED);
    assert_null(m);
    assert_non_null(strstr(why, "too many small elements"));
    assert_int_equal(atomic_load(&d.held), 0);
    assert_int_equal(atomic_load(&d.refused), 1);
    assert_int_equal(sl_decode_peek_seq(buf, len), 42);
    free(buf);
}

static void cap_refuses_large_requests_only(void **state)
{
    (void) state;
    sl_decoder d;
    sl_decoder_init(&d, 5u << 20);
    char why[512];
    size_t big_len, small_len;
    uint8_t *big = write_request(1, 3u << 20, &big_len);
    uint8_t *small = write_request(2, 1000, &small_len);
    Salus__Request *held = NULL, *m = NULL;
    assert_sl_ok(sl_decode_request(&d, big, big_len, &held, why, sizeof why));
    /* a second large request would pass the cap while the first is held */
    assert_sl_err(sl_decode_request(&d, big, big_len, &m, why, sizeof why), SL_EEXHAUSTED);
    assert_non_null(strstr(why, "--max-decoding"));
    /* a small one never waits on large ones */
    assert_sl_ok(sl_decode_request(&d, small, small_len, &m, why, sizeof why));
    sl_request_free(m);
    sl_request_free(held);
    assert_int_equal(atomic_load(&d.held), 0);
    assert_sl_ok(sl_decode_request(&d, big, big_len, &m, why, sizeof why));
    sl_request_free(m);
    assert_int_equal(atomic_load(&d.held), 0);
    free(big);
    free(small);
}

static void garbage_and_failed_allocations(void **state)
{
    (void) state;
    sl_decoder d;
    sl_decoder_init(&d, 0);
    char why[512];
    Salus__Request *m = NULL;
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x07, 0x12, 0x40};
    assert_sl_err(sl_decode_request(&d, garbage, sizeof garbage, &m, why, sizeof why), SL_EPROTO);
    assert_int_equal(sl_decode_peek_seq(garbage, sizeof garbage), 0);
    size_t len;
    uint8_t *buf = ops_request(5, 1000, NULL, &len);
    for (long n = 1; n <= 3; n++) {
        sl_alloc_fail_after(n);
        int rc = sl_decode_request(&d, buf, len, &m, why, sizeof why);
        sl_alloc_fail_after(0);
        if (rc == SL_OK)
            sl_request_free(m);
        else
            assert_int_equal(rc, SL_ENOMEM);
        assert_int_equal(atomic_load(&d.held), 0);
    }
    free(buf);
}

SL_TEST_MAIN("decode", NULL, NULL, cmocka_unit_test(valid_requests_decode_and_give_back),
             cmocka_unit_test(tiny_elements_over_budget),
             cmocka_unit_test(cap_refuses_large_requests_only),
             cmocka_unit_test(garbage_and_failed_allocations))
