/* libFuzzer target: bytes -> protobuf Request -> the request gate, against one
 * long-lived server embedded in this process (no transport: replies to a
 * NULL request are just freed) on the sim device, which models an H100's
 * timing and never touches memory.
 *
 * Input: a sequence of records [kind, arg, len lo, len hi, payload[len]]
 * (fuzz_common.h): the payload is decoded as a Request and dispatched, with
 * the session id and token of a slot stamped in, or a wrong or another
 * session's token, or with a host allocation failing; a record can also drop
 * a connection. Before the records, every input starts from the same state:
 * slot 0 is a session on connection 1 holding the tensors of fg_tensors (ids
 * 1..8) and graph 9 (x f32[2,3] @ t3 -> relu -> reduce_sum), slot 1 one on
 * connection 2 with hints and tensor 1 (f32[4]) and graph 2 (x f32[4] + t1
 * -> sgd_update of t1); slots 2 and 3 take the sessions the input opens.
 * Each record runs to quiescence (no device work in flight), so an input
 * replays the same way.
 *
 * After the records both connections drop: every session must go within
 * 10 s and the memory manager must be back at its start-up state exactly
 * (no persistent bytes, no lanes). Every reply is packed and decoded again
 * as the transport would (sl_transport_send is wrapped at link time), and
 * an error reply must carry a known code and a message. A violation, a
 * crash, UB, a leak or a hang aborts. */
#include "fuzz_common.h"
#include "gate.h"
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RECORDS 64

static sl_server srv;
static sl_mem_stats baseline;

struct slot {
    uint64_t id, token;
};
static struct slot slots[4];
static unsigned n_opened;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_request: %s\n", what);
    abort();
}

void __real_sl_transport_send(sl_req *req, sl_reply *reply, sl_send_tap tap, void *tap_arg);

/* Every reply, from whichever thread sends it: packed as the transport
 * would, decoded again, and checked. */
void __wrap_sl_transport_send(sl_req *req, sl_reply *reply, sl_send_tap tap, void *tap_arg)
{
    if (reply) {
        const Salus__Reply *m = sl_reply_msg(reply);
        size_t n = salus__reply__get_packed_size(m);
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf)
            die("out of memory");
        if (salus__reply__pack(m, buf) != n)
            die("a reply packed to another size than computed");
        Salus__Reply *back = salus__reply__unpack(NULL, n, buf);
        if (!back)
            die("a reply does not decode");
        if (back->code > SALUS__CODE__BUSY)
            die("a reply with an unknown code");
        if (back->code != SALUS__CODE__OK && (!back->message || !back->message[0]))
            die("an error reply without a message");
        if (back->code != SALUS__CODE__OK && back->body_case != SALUS__REPLY__BODY__NOT_SET)
            die("an error reply with a body");
        salus__reply__free_unpacked(back, NULL);
        free(buf);
    }
    __real_sl_transport_send(req, reply, tap, tap_arg);
}

static bool quiet(void)
{
    pthread_mutex_lock(&srv.lock);
    bool q = sl_exec_idle(&srv.exec) && sl_sender_quiet(&srv.sender) && !srv.exec.steps.parked;
    pthread_mutex_unlock(&srv.lock);
    return q;
}

/* Waits until no device work is in flight; a hang (10 s) aborts. */
static void wait_quiet(void)
{
    struct timespec nap = {0, 20 * 1000};
    for (int i = 0; i < 100000; i++) {
        if (quiet())
            return;
        if (i < 50)
            sched_yield();
        else
            nanosleep(&nap, NULL);
    }
    die("device work still in flight after 10 s");
}

/* Remembers a session the last request opened (slots 2 and 3 alternate). */
static void note_opened(uint64_t before)
{
    pthread_mutex_lock(&srv.lock);
    if (srv.sessions.next_id != before) {
        sl_session *s = sl_map_get(&srv.sessions.table, srv.sessions.next_id);
        if (s) {
            slots[2 + (n_opened++ & 1)] = (struct slot){s->id, s->token};
        }
    }
    pthread_mutex_unlock(&srv.lock);
}

static void dispatch(Salus__Request *m, uint32_t pipe)
{
    uint64_t before = srv.sessions.next_id;
    sl_gate_dispatch(&srv, NULL, m, pipe);
    wait_quiet();
    note_opened(before);
}

/* Dispatches a request built on the stack (through a pack/unpack round
 * trip: the gate takes ownership of an unpacked message). The prelude
 * does not wait in between: each session's requests run in order anyway. */
static void dispatch_built(const Salus__Request *m, uint32_t pipe)
{
    size_t n = salus__request__get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        die("out of memory");
    salus__request__pack(m, buf);
    Salus__Request *u = NULL;
    char why[256];
    (void) sl_decode_request(&srv.decoder, buf, n, &u, why, sizeof why);
    free(buf);
    if (!u)
        die("cannot decode a request it built");
    sl_gate_dispatch(&srv, NULL, u, pipe);
}

static struct slot open_session(uint32_t pipe, Salus__SessionHints *hints)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__OpenSession open = SALUS__OPEN_SESSION__INIT;
    open.hints = hints;
    req.body_case = SALUS__REQUEST__BODY_OPEN_SESSION;
    req.open_session = &open;
    uint64_t before = srv.sessions.next_id;
    dispatch_built(&req, pipe);
    pthread_mutex_lock(&srv.lock);
    sl_session *s =
        srv.sessions.next_id != before ? sl_map_get(&srv.sessions.table, before + 1) : NULL;
    struct slot sl = s ? (struct slot){s->id, s->token} : (struct slot){0, 0};
    pthread_mutex_unlock(&srv.lock);
    if (!s)
        die("the prelude could not open a session");
    return sl;
}

static void on_session(Salus__Request *req, struct slot sl)
{
    req->session_id = sl.id;
    req->token = sl.token;
}

static void create_tensor(struct slot sl, uint32_t pipe, const sl_shape *shape)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__CreateTensor ct = SALUS__CREATE_TENSOR__INIT;
    Salus__TensorDesc desc = SALUS__TENSOR_DESC__INIT;
    int64_t dims[SL_MAX_DIMS];
    memcpy(dims, shape->dims, sizeof dims);
    desc.dtype = (Salus__DType) shape->dtype;
    desc.n_dims = shape->ndim;
    desc.dims = dims;
    ct.desc = &desc;
    uint8_t init[64] = {1, 2, 3, 4};
    if (sl_shape_bytes(shape) <= sizeof init) {
        ct.init.len = sl_shape_bytes(shape);
        ct.init.data = init;
    }
    on_session(&req, sl);
    req.body_case = SALUS__REQUEST__BODY_CREATE_TENSOR;
    req.create_tensor = &ct;
    dispatch_built(&req, pipe);
}

static void register_graph(struct slot sl, uint32_t pipe, Salus__Graph *g)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__RegisterGraph rg = SALUS__REGISTER_GRAPH__INIT;
    rg.graph = g;
    on_session(&req, sl);
    req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req.register_graph = &rg;
    dispatch_built(&req, pipe);
}

/* Connections 1 and 2 of this input: fresh ids every input, as NNG never
 * reuses a pipe id (salusd refuses sessions on a connection it saw close). */
static uint32_t pipe_base;

static uint32_t pipe_of(unsigned which)
{
    return pipe_base + which;
}

static void prelude(void)
{
    pipe_base += 2;
    memset(slots, 0, sizeof slots);
    n_opened = 0;
    slots[0] = open_session(pipe_of(1), NULL);
    for (int i = 0; i < FG_N_TENSORS; i++)
        create_tensor(slots[0], pipe_of(1), &fg_tensors[i]);
    /* graph 9: x f32[2,3] @ t3 f32[3,2] -> relu -> reduce_sum */
    int64_t d23[] = {2, 3}, d4[] = {4};
    Salus__TensorDesc x = SALUS__TENSOR_DESC__INIT;
    x.n_dims = 2;
    x.dims = d23;
    Salus__TensorDesc *inputs[] = {&x};
    uint64_t params[] = {3};
    Salus__Op mm = SALUS__OP__INIT, relu = SALUS__OP__INIT, sum = SALUS__OP__INIT;
    uint32_t mm_in[] = {0, 1}, relu_in[] = {2}, sum_in[] = {3};
    mm.type = (char *) "matmul";
    mm.n_inputs = 2;
    mm.inputs = mm_in;
    relu.type = (char *) "relu";
    relu.n_inputs = 1;
    relu.inputs = relu_in;
    sum.type = (char *) "reduce_sum";
    sum.n_inputs = 1;
    sum.inputs = sum_in;
    Salus__Op *ops[] = {&mm, &relu, &sum};
    Salus__Graph g = SALUS__GRAPH__INIT;
    g.n_inputs = 1;
    g.inputs = inputs;
    g.n_params = 1;
    g.params = params;
    g.n_ops = 3;
    g.ops = ops;
    register_graph(slots[0], pipe_of(1), &g);

    Salus__SessionHints hints = SALUS__SESSION_HINTS__INIT;
    hints.name = (char *) "b";
    hints.persistent_bytes = 64 << 10;
    hints.ephemeral_bytes = 64 << 10;
    slots[1] = open_session(pipe_of(2), &hints);
    create_tensor(slots[1], pipe_of(2), &fg_tensors[0]);
    /* graph 2: x f32[4] + t1 -> sgd_update(t1, lr 0.1) */
    x.n_dims = 1;
    x.dims = d4;
    params[0] = 1;
    Salus__Op add = SALUS__OP__INIT, sgd = SALUS__OP__INIT;
    uint32_t add_in[] = {0, 1}, sgd_in[] = {1, 2};
    float lr[] = {0.1f};
    add.type = (char *) "add";
    add.n_inputs = 2;
    add.inputs = add_in;
    sgd.type = (char *) "sgd_update";
    sgd.n_inputs = 2;
    sgd.inputs = sgd_in;
    sgd.n_fattrs = 1;
    sgd.fattrs = lr;
    Salus__Op *ops_b[] = {&add, &sgd};
    g.n_ops = 2;
    g.ops = ops_b;
    register_graph(slots[1], pipe_of(2), &g);
    wait_quiet();
}

/* Every session goes (both connections drop) and memory is as at start. */
static void cleanup(void)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__SetPolicy sp = SALUS__SET_POLICY__INIT;
    sp.policy = (char *) "fair";
    req.body_case = SALUS__REQUEST__BODY_SET_POLICY;
    req.set_policy = &sp;
    dispatch_built(&req, pipe_of(1));
    wait_quiet();
    sl_gate_pipe_gone(&srv, pipe_of(1));
    sl_gate_pipe_gone(&srv, pipe_of(2));
    struct timespec nap = {0, 50 * 1000};
    size_t left = 1;
    for (int i = 0; i < 200000 && left; i++) {
        pthread_mutex_lock(&srv.lock);
        left = srv.sessions.table.count;
        pthread_mutex_unlock(&srv.lock);
        if (left)
            nanosleep(&nap, NULL);
    }
    if (left)
        die("sessions still open 10 s after their connections dropped");
    wait_quiet();
    sl_mem_stats st;
    pthread_mutex_lock(&srv.lock);
    sl_mem_get_stats(srv.mem, &st);
    pthread_mutex_unlock(&srv.lock);
    if (st.persistent_used || st.persistent_reserved != baseline.persistent_reserved ||
        st.lanes != baseline.lanes || st.framework != baseline.framework ||
        st.free != baseline.free || st.n_sessions || st.n_queued) {
        fprintf(stderr,
                "fuzz_request: memory not back at baseline: persistent %llu reserved %llu lanes "
                "%llu framework %llu free %llu (baseline %llu) sessions %u queued %u\n",
                (unsigned long long) st.persistent_used,
                (unsigned long long) st.persistent_reserved, (unsigned long long) st.lanes,
                (unsigned long long) st.framework, (unsigned long long) st.free,
                (unsigned long long) baseline.free, st.n_sessions, st.n_queued);
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void) argc;
    (void) argv;
    const char *level = getenv("SALUS_FUZZ_LOG");
    sl_log_set_level(level && *level ? level : "error");
    srv.cfg = (sl_config) SL_CONFIG_DEFAULTS;
    srv.cfg.device = "sim:h100";
    srv.cfg.memory_limit = 64u << 20;
    srv.cfg.lane_bytes = 1u << 20;
    srv.cfg.contexts = 1;
    srv.cfg.max_sessions = 8;
    srv.cfg.max_tensors_per_session = 16;
    if (sl_server_start(&srv) != SL_OK)
        die("cannot start the embedded server");
    sl_mem_get_stats(srv.mem, &baseline);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    prelude();
    for (int n = 0; n < MAX_RECORDS && size >= 4; n++) {
        unsigned kind = data[0], arg = data[1];
        size_t len = (size_t) data[2] | (size_t) data[3] << 8;
        data += 4;
        size -= 4;
        if (len > size)
            len = size;
        const uint8_t *payload = data;
        data += len;
        size -= len;
        uint32_t pipe = pipe_of(kind & FR_PIPE_BIT ? 2 : 1);
        if ((kind & 7) == FR_PIPE_GONE) {
            sl_gate_pipe_gone(&srv, pipe_of((arg & 1) + 1));
            wait_quiet();
            continue;
        }
        Salus__Request *m = NULL;
        char why[256];
        if (sl_decode_request(&srv.decoder, payload, len, &m, why, sizeof why) != SL_OK)
            continue; /* the gate answers these itself */
        struct slot sl = slots[arg & 3];
        switch (kind & 7) {
        case FR_STAMP:
            on_session(m, sl);
            break;
        case FR_CROSS:
            m->session_id = sl.id;
            m->token = slots[(arg >> 2) & 3].token;
            break;
        case FR_BAD_TOKEN:
            m->session_id = sl.id;
            m->token = sl.token + 1;
            break;
        case FR_OOM: {
            on_session(m, sl);
            uint64_t before = srv.sessions.next_id;
            sl_alloc_fail_after((long) (arg >> 2) + 1);
            sl_gate_dispatch(&srv, NULL, m, pipe);
            sl_alloc_fail_after(0);
            wait_quiet();
            note_opened(before);
            continue;
        }
        default:
            break;
        }
        dispatch(m, pipe);
    }
    cleanup();
    return 0;
}
