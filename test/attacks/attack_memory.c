/* Memory exhaustion through what salusd keeps or builds for a tenant:
 *   - decode amplification: requests at the size limit made of millions of
 *     tiny elements (empty graph ops, empty feeds, one-byte packed fetches),
 *     which decode to dozens of times their size, sent again and again on
 *     several connections at once. Each must be refused with
 *     RESOURCE_EXHAUSTED while salusd's memory stays within a few messages'
 *     worth of the baseline;
 *   - graph flood: sessions registering graphs of the largest size allowed
 *     until refused. The refusal must come at the session's metadata budget
 *     and name it, memory must stay within the sessions' budgets, and all of
 *     it must come back when the tenant leaves. */
#include "attack.h"
#include "client_internal.h"
#include "hello_pack.h"
#include "salus.pb-c.h"
#include "sl_nng.h"
#include "sl_test.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

/* salusd's default --max-message, for servers whose Hello does not say */
#define DEFAULT_LIMIT (64u << 20)
#define CONNECTIONS 4
#define ROUNDS 3
#define GRAPH_OPS 8192
#define FLOOD_SESSIONS 3
/* salusd's default --session-metadata */
#define SESSION_METADATA (64ull << 20)

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (uint8_t) ((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* A Request of about `target` bytes: seq, then body field `body` holding
 * field `inner` (length-delimited) made of as many copies of elem as fit.
 * inner 0: the copies are the body's own fields. */
static uint8_t *build(size_t target, unsigned body, unsigned inner, const char *elem,
                      size_t elem_len, size_t *out_len)
{
    uint8_t *buf = malloc(target);
    if (!buf)
        return NULL;
    size_t n_elems = (target - 32) / elem_len, content = n_elems * elem_len;
    uint8_t head[64];
    size_t h = 0;
    head[h++] = 0x08; /* seq = 1 */
    head[h++] = 0x01;
    uint8_t inner_head[16];
    size_t ih = 0;
    if (inner) {
        ih = put_varint(inner_head, (uint64_t) inner << 3 | 2);
        ih += put_varint(inner_head + ih, content);
    }
    h += put_varint(head + h, (uint64_t) body << 3 | 2);
    h += put_varint(head + h, ih + content);
    memcpy(buf, head, h);
    memcpy(buf + h, inner_head, ih);
    for (size_t i = 0; i < n_elems; i++)
        memcpy(buf + h + ih + i * elem_len, elem, elem_len);
    *out_len = h + ih + content;
    return buf;
}

typedef struct flood_conn {
    const char *url;
    const uint8_t *msg;
    size_t len;
    int refused, other;
    char last[256];
} flood_conn;

static nng_socket dial(const char *url)
{
    nng_socket sock = NNG_SOCKET_INITIALIZER;
    if (nng_req0_open(&sock) != 0)
        return sock;
    (void) nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    (void) nng_socket_set_ms(sock, NNG_OPT_RECVTIMEO, 60000);
    (void) nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, 1u << 20);
    if (nng_dial(sock, url, NULL, 0) != 0) {
        nng_close(sock);
        sock = (nng_socket) NNG_SOCKET_INITIALIZER;
    }
    return sock;
}

static Salus__Reply *call(nng_socket sock, const void *msg, size_t len)
{
    char *buf;
    size_t n;
    if (nng_send(sock, (void *) msg, len, 0) != 0 || nng_recv(sock, &buf, &n, NNG_FLAG_ALLOC) != 0)
        return NULL;
    Salus__Reply *rep = salus__reply__unpack(NULL, n, (uint8_t *) buf);
    nng_free(buf, n);
    return rep;
}

static void *flood_one(void *arg)
{
    flood_conn *fc = arg;
    nng_socket sock = dial(fc->url);
    for (int r = 0; r < ROUNDS; r++) {
        Salus__Reply *rep = nng_socket_id(sock) > 0 ? call(sock, fc->msg, fc->len) : NULL;
        if (rep && rep->code == SALUS__CODE__RESOURCE_EXHAUSTED && rep->seq == 1) {
            fc->refused++;
        } else {
            fc->other++;
            snprintf(fc->last, sizeof fc->last, "%s",
                     rep ? rep->message : "no reply (connection dropped or salusd gone)");
        }
        if (rep)
            salus__reply__free_unpacked(rep, NULL);
    }
    if (nng_socket_id(sock) > 0)
        (void) sl_nng_close_bounded(sock, 3);
    return NULL;
}

/* The server's --max-message, from its Hello (DEFAULT_LIMIT when it does
 * not say). */
static size_t server_limit(const char *url)
{
    salus_client *c = NULL;
    size_t limit = DEFAULT_LIMIT;
    if (salus_connect(url, &c) == SALUS_OK) {
        nng_socket sock = dial(url);
        uint8_t buf[64];
        size_t n = sl_test_pack_hello(1, buf, sizeof buf);
        Salus__Reply *rep = nng_socket_id(sock) > 0 ? call(sock, buf, n) : NULL;
        if (rep && rep->body_case == SALUS__REPLY__BODY_HELLO && rep->hello->max_message)
            limit = rep->hello->max_message;
        if (rep)
            salus__reply__free_unpacked(rep, NULL);
        if (nng_socket_id(sock) > 0)
            (void) sl_nng_close_bounded(sock, 3);
    }
    salus_disconnect(c);
    return limit;
}

typedef struct decode_attack {
    const char *url;
    size_t limit;
} decode_attack;

/* The attackers use NNG, whose threads a forked child of the test (which
 * runs NNG already) would not have: each starts this program afresh, as
 * the tenant, with its role in argv (see main). */
static int exec_attacker(const char *role, const char *url, size_t limit)
{
    char limit_text[32];
    snprintf(limit_text, sizeof limit_text, "%zu", limit);
    execl("/proc/self/exe", "attack_memory", "--attacker", role, url, limit_text, (char *) NULL);
    fprintf(stderr, "attacker: cannot run /proc/self/exe: %s\n", strerror(errno));
    return 127;
}

static int exec_decode_flood(void *arg)
{
    const decode_attack *da = arg;
    return exec_attacker("decode", da->url, da->limit);
}

static int exec_graph_flood(void *arg)
{
    return exec_attacker("graphs", arg, 0);
}

/* Returns 0 when every request was refused with RESOURCE_EXHAUSTED. */
static int decode_flood(const decode_attack *da)
{
    size_t len[3];
    /* RegisterGraph{graph{ops: empty Op...}}, Run{feeds: empty...},
     * Run{fetches: packed one-byte varints} */
    uint8_t *msgs[3] = {build(da->limit - 1024, 17, 1, "\x1a\x00", 2, &len[0]),
                        build(da->limit - 1024, 19, 0, "\x12\x00", 2, &len[1]),
                        build(da->limit - 1024, 19, 3, "\x01", 1, &len[2])};
    flood_conn fc[CONNECTIONS];
    pthread_t th[CONNECTIONS];
    int rc = 0;
    for (int i = 0; i < CONNECTIONS; i++) {
        if (!msgs[i % 3]) {
            fprintf(stderr, "attacker: out of memory\n");
            return 2;
        }
        fc[i] = (flood_conn){.url = da->url, .msg = msgs[i % 3], .len = len[i % 3]};
        if (pthread_create(&th[i], NULL, flood_one, &fc[i]) != 0)
            return 2;
    }
    for (int i = 0; i < CONNECTIONS; i++) {
        pthread_join(th[i], NULL);
        if (fc[i].other) {
            fprintf(stderr, "attacker: connection %d: %d refused, %d otherwise: %s\n", i,
                    fc[i].refused, fc[i].other, fc[i].last);
            rc = 1;
        }
    }
    for (int i = 0; i < 3; i++)
        free(msgs[i]);
    return rc;
}

static void decode_amplification(void **state)
{
    (void) state;
    sl_attack a;
    sl_attack_begin(&a, "decode-amplification", NULL);
    decode_attack da = {.url = a.srv.url, .limit = server_limit(a.srv.url)};
    /* salusd holds each message as received and at most its decoding budget
     * (its size + 16 MiB + 64 KiB) beside it, for each connection at once */
    a.rss_peak_bound = CONNECTIONS * (2 * (uint64_t) da.limit + (17ull << 20)) + (64ull << 20);
    int rc = sl_attack_as_tenant(exec_decode_flood, &da, 240);
    char detail[160];
    snprintf(detail, sizeof detail, "%d connections x %d requests of %zu MiB of tiny elements: %s",
             CONNECTIONS, ROUNDS, da.limit >> 20,
             rc == 0 ? "all refused with RESOURCE_EXHAUSTED" : "NOT all refused");
    sl_attack_expect(&a, rc == 0, "not every oversized decode was refused");
    bool held = sl_attack_end(&a, detail);
    assert_int_equal(rc, 0);
    assert_true(held);
}

/* RegisterGraph of a chain of GRAPH_OPS relus on a one-element input,
 * built once and sent again and again (each registration is a new graph). */
typedef struct chain {
    Salus__Request req;
    Salus__RegisterGraph rg;
    Salus__Graph graph;
    Salus__TensorDesc in_desc, *in_descs[1];
    int64_t in_dims[1];
    Salus__Op ops[GRAPH_OPS], *op_ptrs[GRAPH_OPS];
    uint32_t inputs[GRAPH_OPS];
} chain;

static void chain_init(chain *ch)
{
    salus__request__init(&ch->req);
    salus__register_graph__init(&ch->rg);
    salus__graph__init(&ch->graph);
    salus__tensor_desc__init(&ch->in_desc);
    ch->in_dims[0] = 1;
    ch->in_desc.dtype = SALUS__DTYPE__F32;
    ch->in_desc.n_dims = 1;
    ch->in_desc.dims = ch->in_dims;
    ch->in_descs[0] = &ch->in_desc;
    ch->graph.n_inputs = 1;
    ch->graph.inputs = ch->in_descs;
    for (uint32_t i = 0; i < GRAPH_OPS; i++) {
        salus__op__init(&ch->ops[i]);
        ch->ops[i].type = (char *) "relu";
        ch->inputs[i] = i; /* value i: the input, then each op's output */
        ch->ops[i].n_inputs = 1;
        ch->ops[i].inputs = &ch->inputs[i];
        ch->op_ptrs[i] = &ch->ops[i];
    }
    ch->graph.n_ops = GRAPH_OPS;
    ch->graph.ops = ch->op_ptrs;
    ch->rg.graph = &ch->graph;
    ch->req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    ch->req.register_graph = &ch->rg;
}

/* Registers graphs of GRAPH_OPS ops in FLOOD_SESSIONS sessions until each
 * is refused; returns 0 when every refusal named the metadata budget and
 * came after at least one graph. */
static int graph_flood(const char *url)
{
    static chain ch;
    chain_init(&ch);
    salus_client *c = NULL;
    if (salus_connect(url, &c) != SALUS_OK)
        return 2;
    int rc = 0;
    for (int k = 0; k < FLOOD_SESSIONS && rc == 0; k++) {
        salus_session *s = NULL;
        if (salus_session_open(c, NULL, &s) != SALUS_OK) {
            rc = 2;
            break;
        }
        int n = 0, err;
        Salus__Reply *rep;
        while ((err = sl_client_session_call(s, &ch.req, &rep)) == SALUS_OK && n < 10000) {
            salus__reply__free_unpacked(rep, NULL);
            n++;
        }
        if (err != SALUS_EEXHAUSTED || !strstr(salus_last_error(c), "--session-metadata") ||
            n < 1) {
            fprintf(stderr, "attacker: session %d: %d graphs, then %s: %s\n", k, n,
                    salus_strerror(err), salus_last_error(c));
            rc = 1;
        } else {
            fprintf(stderr, "attacker: session %d: %d graphs of %d ops, then: %s\n", k, n,
                    GRAPH_OPS, salus_last_error(c));
        }
    }
    salus_disconnect(c); /* leaves: its sessions and graphs go */
    return rc;
}

static void graph_flood_until_refused(void **state)
{
    (void) state;
    sl_attack a;
    /* the sessions declare no device memory, so under the default quota
     * each would take all the tenant may have: the budget tested here is
     * host memory's, so the tenant has no device quota */
    sl_attack_begin(&a, "graph-flood", (const char *[]){"--tenant-limits", "memory=0", NULL});
    a.rss_peak_bound = FLOOD_SESSIONS * SESSION_METADATA + (96ull << 20);
    int rc = sl_attack_as_tenant(exec_graph_flood, (void *) a.srv.url, 240);
    char detail[160];
    snprintf(detail, sizeof detail, "%d sessions registering %d-op graphs: %s", FLOOD_SESSIONS,
             GRAPH_OPS,
             rc == 0 ? "each refused at --session-metadata" : "NOT refused at the budget");
    sl_attack_expect(&a, rc == 0, "graphs were not refused at the budget");
    bool held = sl_attack_end(&a, detail);
    assert_int_equal(rc, 0);
    assert_true(held);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--attacker") == 0) {
        decode_attack da = {.url = argv[3], .limit = (size_t) strtoull(argv[4], NULL, 10)};
        return strcmp(argv[2], "decode") == 0 ? decode_flood(&da) : graph_flood(argv[3]);
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(decode_amplification),
                                       cmocka_unit_test(graph_flood_until_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
