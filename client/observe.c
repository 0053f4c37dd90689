/* Operator calls and their JSON: the status reply for `salusctl --json`
 * (any message, walked through protobuf-c's descriptors, so a field added
 * to the protocol shows up without code here), the partitions, drain,
 * kill-session, and the trace in the Chrome trace event format. */
#include "client_internal.h"
#include "sl_alloc.h"
#include "sl_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A JSON string: quotes, backslashes and control bytes escaped; other
 * bytes as they are (salusd sends valid UTF-8, escaped for terminals). */
static void jstr(sl_textbuf *b, const char *s)
{
    sl_textbuf_printf(b, "\"");
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char) *s;
        if (ch == '"' || ch == '\\')
            sl_textbuf_printf(b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7f)
            sl_textbuf_printf(b, "\\u%04x", ch);
        else
            sl_textbuf_printf(b, "%c", ch);
    }
    sl_textbuf_printf(b, "\"");
}

static void jmessage(sl_textbuf *b, const ProtobufCMessage *m);

static void jvalue(sl_textbuf *b, const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        sl_textbuf_printf(b, "%d", *(const int32_t *) p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        sl_textbuf_printf(b, "%u", *(const uint32_t *) p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        sl_textbuf_printf(b, "%lld", (long long) *(const int64_t *) p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        sl_textbuf_printf(b, "%llu", (unsigned long long) *(const uint64_t *) p);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        sl_textbuf_printf(b, "%.9g", (double) *(const float *) p);
        break;
    case PROTOBUF_C_TYPE_DOUBLE: {
        double d = *(const double *) p;
        if (d != d || d > 1e308 || d < -1e308)
            sl_textbuf_printf(b, "null"); /* JSON has no NaN or infinity */
        else
            sl_textbuf_printf(b, "%.17g", d);
        break;
    }
    case PROTOBUF_C_TYPE_BOOL:
        sl_textbuf_printf(b, "%s", *(const protobuf_c_boolean *) p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *v =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *) p);
        if (v)
            jstr(b, v->name);
        else
            sl_textbuf_printf(b, "%d", *(const int *) p);
        break;
    }
    case PROTOBUF_C_TYPE_STRING:
        jstr(b, *(char *const *) p);
        break;
    case PROTOBUF_C_TYPE_BYTES:
        sl_textbuf_printf(b, "{\"bytes\":%zu}", ((const ProtobufCBinaryData *) p)->len);
        break;
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *) p;
        if (sub)
            jmessage(b, sub);
        else
            sl_textbuf_printf(b, "null");
        break;
    }
    }
}

static size_t type_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    default:
        return 4;
    }
}

static void jmessage(sl_textbuf *b, const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *) m;
    bool first = true;
    sl_textbuf_printf(b, "{");
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *) (base + f->quantifier_offset) != f->id)
                continue;
        }
        sl_textbuf_printf(b, "%s", first ? "" : ",");
        first = false;
        jstr(b, f->name);
        sl_textbuf_printf(b, ":");
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *) (base + f->quantifier_offset);
            const char *arr = *(const char *const *) p;
            sl_textbuf_printf(b, "[");
            for (size_t k = 0; k < n; k++) {
                sl_textbuf_printf(b, "%s", k ? "," : "");
                jvalue(b, f, arr + k * type_size(f->type));
            }
            sl_textbuf_printf(b, "]");
        } else {
            jvalue(b, f, p);
        }
    }
    sl_textbuf_printf(b, "}");
}

static int finish(sl_textbuf *b, char **out)
{
    sl_textbuf_printf(b, "\n");
    if (b->failed || !b->p) {
        sl_free(b->p);
        return SL_ENOMEM;
    }
    *out = b->p;
    return SL_OK;
}

/* A request with no session and the body case given; the reply in *rep. */
static int call(salus_client *c, Salus__Request *req, Salus__Reply__BodyCase want,
                Salus__Reply **rep)
{
    int rc = sl_client_call(c, req, rep);
    if (rc)
        return rc;
    if (want != SALUS__REPLY__BODY__NOT_SET && (*rep)->body_case != want) {
        salus__reply__free_unpacked(*rep, NULL);
        return SL_EPROTO;
    }
    return SL_OK;
}

int salus_status_json(salus_client *c, char **json)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep;
    int rc = call(c, &req, SALUS__REPLY__BODY_STATUS, &rep);
    if (rc)
        return rc;
    sl_textbuf b = {0};
    jmessage(&b, &rep->status->base);
    salus__reply__free_unpacked(rep, NULL);
    return finish(&b, json);
}

/* A server string made safe for a terminal (salusd escapes names already;
 * an older or hostile server may not). */
static const char *safe(const char *s, char *buf, size_t len)
{
    if (!s)
        return "";
    sl_escape(buf, len, s, strlen(s), 0);
    return buf;
}

/* "exact/tf32": a session's math for f32 matmuls / convolutions. */
static const char *math_pair(const Salus__SessionStatus *x, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", x->math_matmul == SALUS__MATH_MODE__MATH_TF32 ? "tf32" : "exact",
             x->math_conv == SALUS__MATH_MODE__MATH_TF32 ? "tf32" : "exact");
    return buf;
}

/* "f32,bf16": the dtypes of a session's persistent tensors ("-": none). */
static const char *dtypes_held(const Salus__SessionStatus *x, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < x->n_persistent_by_dtype && at < len; k++) {
        int n = snprintf(buf + at, len - at, "%s%s", k ? "," : "",
                         sl_dtype_name(x->persistent_by_dtype[k]->dtype));
        at += n > 0 ? (size_t) n : 0;
    }
    return buf[0] ? buf : "-";
}

int salus_sessions_text(salus_client *c, char **text)
{
    char e1[256], e2[256];
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    Salus__Reply *rep;
    int rc = call(c, &req, SALUS__REPLY__BODY_STATUS, &rep);
    if (rc)
        return rc;
    const Salus__StatusReply *s = rep->status;
    sl_textbuf b = {0};
    char mm[16], dts[32];
    sl_textbuf_printf(&b, "%13s  %-16s %-12s %5s %4s %10s %10s %9s %8s %11s %12s %-11s %-9s %s\n",
                      "id", "name", "owner", "lane", "prio", "iters", "device s", "wait ms",
                      "switches", "persist MiB", "reserved MiB", "math mm/cv", "dtypes", "state");
    for (size_t i = 0; i < s->n_sessions; i++) {
        const Salus__SessionStatus *x = s->sessions[i];
        sl_textbuf_printf(
            &b,
            "%13llu  %-16.16s %-12.12s %5u %4d %10llu %10.3f %9.2f %8llu %11.1f %12.1f %-11s %-9s "
            "running\n",
            (unsigned long long) x->id, safe(x->name, e1, sizeof e1), safe(x->owner, e2, sizeof e2),
            x->lane, x->priority, (unsigned long long) x->iterations, (double) x->attained_ns / 1e9,
            x->iterations ? (double) x->queue_delay_ns / 1e6 / (double) x->iterations : 0.0,
            (unsigned long long) x->switches, (double) x->persistent_bytes / (1 << 20),
            (double) x->persistent_reserved / (1 << 20), math_pair(x, mm, sizeof mm),
            dtypes_held(x, dts, sizeof dts));
    }
    for (size_t i = 0; i < s->n_queue; i++) {
        const Salus__QueuedSession *q = s->queue[i];
        sl_textbuf_printf(
            &b,
            "%13llu  %-16.16s %-12s %5s %4s %10s %10s %9.2f %8s %11s %12.1f %-11s %-9s "
            "waiting (%s)\n",
            (unsigned long long) q->id, safe(q->name, e1, sizeof e1), "", "-", "-", "-", "-",
            (double) q->waited_ns / 1e6, "-", "-", (double) q->persistent / (1 << 20), "-", "-",
            safe(q->reason, e2, sizeof e2));
    }
    salus__reply__free_unpacked(rep, NULL);
    if (b.failed || !b.p) {
        sl_free(b.p);
        return SL_ENOMEM;
    }
    *text = b.p;
    return SL_OK;
}

/* The status reply, for the partitions' two forms. */
static int status_reply(salus_client *c, Salus__Reply **rep)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Status st = SALUS__STATUS__INIT;
    req.body_case = SALUS__REQUEST__BODY_STATUS;
    req.status = &st;
    return call(c, &req, SALUS__REPLY__BODY_STATUS, rep);
}

static const char *plural(unsigned n, const char *unit, char *buf, size_t len)
{
    snprintf(buf, len, "%u %s%s", n, unit && *unit ? unit : "unit", n == 1 ? "" : "s");
    return buf;
}

int salus_partitions_text(salus_client *c, char **text)
{
    Salus__Reply *rep;
    int rc = status_reply(c, &rep);
    if (rc)
        return rc;
    const Salus__StatusReply *s = rep->status;
    const Salus__PartitionsStatus *p = s->partitions_detail;
    char e1[256], e2[256], u1[48], u2[48];
    sl_textbuf b = {0};
    if (!p) {
        /* a salusd from before the field: its one-line description */
        sl_textbuf_printf(&b, "partitions: %s\n", safe(s->partitions, e1, sizeof e1));
    } else {
        sl_textbuf_printf(&b, "mode      %s (%s now)\n", safe(p->mode, e1, sizeof e1),
                          p->on ? "on" : "off");
        if (p->supported)
            sl_textbuf_printf(&b, "device    %s: %s\n", plural(p->units, p->unit, u1, sizeof u1),
                              safe(p->note, e2, sizeof e2));
        else
            sl_textbuf_printf(&b, "device    no compute partitions%s%s\n",
                              p->note && *p->note ? ": " : "", safe(p->note, e2, sizeof e2));
        if (p->declared)
            sl_textbuf_printf(&b, "declared  %s for high-priority lanes\n",
                              plural(p->declared, p->unit, u1, sizeof u1));
        if (p->on) {
            sl_textbuf_printf(&b, "online    %s (high-priority lanes; need %u)\n",
                              plural(p->online, p->unit, u1, sizeof u1), p->need);
            if (p->sizing && !strcmp(p->sizing, "searching"))
                sl_textbuf_printf(&b,
                                  "sizing    searching for the fewest within +%.0f %% of "
                                  "their time on the largest\n",
                                  100 * p->objective);
            else if (p->sizing && !strcmp(p->sizing, "searched"))
                sl_textbuf_printf(&b,
                                  "sizing    need searched at +%.0f %% of their time on the "
                                  "largest\n",
                                  100 * p->objective);
            sl_textbuf_printf(&b, "offline   %s (every other lane)%s\n",
                              plural(p->offline, p->unit, u2, sizeof u2),
                              p->lent ? ", lent to online work" : "");
        }
        if (p->trials)
            sl_textbuf_printf(&b, "guard     sharing tried %llu times, ended %llu\n",
                              (unsigned long long) p->trials, (unsigned long long) p->trials_ended);
        if (p->retry_requests)
            sl_textbuf_printf(&b, "retry     after %llu more high-priority requests\n",
                              (unsigned long long) p->retry_requests);
        if (p->retry_gap_ns)
            sl_textbuf_printf(&b,
                              "retry     once they come every %.2f ms or less often (the "
                              "rate sharing ended at; every %.2f ms now)\n",
                              (double) p->retry_gap_ns / 1e6, (double) p->request_gap_ns / 1e6);
        if (p->sizing && !strcmp(p->sizing, "shared"))
            sl_textbuf_printf(&b,
                              "sizing    shared: high-priority latency as good without "
                              "partitions (need %u, within +%.0f %%)\n",
                              p->need, 100 * p->objective);
        sl_textbuf_printf(&b, "resizes   %llu  spills %llu\n", (unsigned long long) p->resizes,
                          (unsigned long long) p->spills);
    }
    salus__reply__free_unpacked(rep, NULL);
    if (b.failed || !b.p) {
        sl_free(b.p);
        return SL_ENOMEM;
    }
    *text = b.p;
    return SL_OK;
}

int salus_partitions_json(salus_client *c, char **json)
{
    Salus__Reply *rep;
    int rc = status_reply(c, &rep);
    if (rc)
        return rc;
    const Salus__StatusReply *s = rep->status;
    sl_textbuf b = {0};
    sl_textbuf_printf(&b, "{\"description\":");
    jstr(&b, s->partitions);
    if (s->partitions_detail) {
        sl_textbuf_printf(&b, ",\"detail\":");
        jmessage(&b, &s->partitions_detail->base);
    }
    sl_textbuf_printf(&b, "}");
    salus__reply__free_unpacked(rep, NULL);
    return finish(&b, json);
}

int salus_drain(salus_client *c)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Drain d = SALUS__DRAIN__INIT;
    req.body_case = SALUS__REQUEST__BODY_DRAIN;
    req.drain = &d;
    Salus__Reply *rep;
    int rc = call(c, &req, SALUS__REPLY__BODY__NOT_SET, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

int salus_kill_session(salus_client *c, uint64_t session_id)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__KillSession k = SALUS__KILL_SESSION__INIT;
    k.target_session = session_id;
    req.body_case = SALUS__REQUEST__BODY_KILL_SESSION;
    req.kill_session = &k;
    Salus__Reply *rep;
    int rc = call(c, &req, SALUS__REPLY__BODY__NOT_SET, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

int salus_trace_start(salus_client *c)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Trace t = SALUS__TRACE__INIT;
    t.start = 1;
    req.body_case = SALUS__REQUEST__BODY_TRACE;
    req.trace = &t;
    Salus__Reply *rep;
    int rc = call(c, &req, SALUS__REPLY__BODY__NOT_SET, &rep);
    if (rc == SL_OK)
        salus__reply__free_unpacked(rep, NULL);
    return rc;
}

static const char *session_name(const Salus__TraceReply *tr, uint64_t id)
{
    for (size_t i = 0; i < tr->n_sessions; i++)
        if (tr->sessions[i]->id == id)
            return tr->sessions[i]->name;
    return "";
}

static double us(const Salus__TraceReply *tr, uint64_t ns)
{
    return ns >= tr->start_ns ? (double) (ns - tr->start_ns) / 1e3
                              : -(double) (tr->start_ns - ns) / 1e3;
}

/* The Chrome trace event format, JSON object form. */
/* The math an op event's op ran with (TraceEvent arg bits 52-57): "tf32"
 * or "exact" for an f32 matmul or convolution, NULL for the others (the
 * session's choice does not touch them). */
static const char *op_math(unsigned op, unsigned dtype, unsigned math)
{
    if (dtype != SL_F32)
        return NULL;
    unsigned bit;
    switch (op) {
    case SL_OP_MATMUL:
    case SL_OP_MATMUL_ACC:
    case SL_OP_BATCH_MATMUL:
        bit = SL_MATH_MATMUL_TF32;
        break;
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
        bit = SL_MATH_CONV_TF32;
        break;
    default:
        return NULL;
    }
    return math & bit ? "tf32" : "exact";
}

static void chrome(sl_textbuf *b, const Salus__TraceReply *tr)
{
    sl_textbuf_printf(
        b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped\":%llu,\"duration_us\":%.3f},",
        (unsigned long long) tr->dropped,
        tr->end_ns > tr->start_ns ? (double) (tr->end_ns - tr->start_ns) / 1e3 : 0.0);
    sl_textbuf_printf(b, "\"traceEvents\":[");
    sl_textbuf_printf(
        b, "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"salusd "
           "lanes\"}},");
    sl_textbuf_printf(
        b, "{\"ph\":\"M\",\"pid\":2,\"name\":\"process_name\",\"args\":{\"name\":\"sessions "
           "waiting\"}}");
    uint32_t seen_lanes[256];
    size_t n_seen = 0;
    for (size_t i = 0; i < tr->n_events; i++) {
        const Salus__TraceEvent *e = tr->events[i];
        if (e->kind == 4 || e->kind == 5)
            continue;
        bool seen = false;
        for (size_t k = 0; k < n_seen && !seen; k++)
            seen = seen_lanes[k] == e->lane;
        if (!seen && n_seen < 256) {
            seen_lanes[n_seen++] = e->lane;
            sl_textbuf_printf(
                b,
                ",{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":"
                "\"lane %u\"}}",
                e->lane, e->lane);
        }
    }
    for (size_t i = 0; i < tr->n_sessions; i++) {
        char label[128];
        snprintf(label, sizeof label, "session %llu %s", (unsigned long long) tr->sessions[i]->id,
                 tr->sessions[i]->name);
        sl_textbuf_printf(
            b, ",{\"ph\":\"M\",\"pid\":2,\"tid\":%llu,\"name\":\"thread_name\",\"args\":{\"name\":",
            (unsigned long long) tr->sessions[i]->id);
        jstr(b, label);
        sl_textbuf_printf(b, "}}");
    }
    for (size_t i = 0; i < tr->n_events; i++) {
        const Salus__TraceEvent *e = tr->events[i];
        const char *name = session_name(tr, e->session);
        char title[160];
        unsigned long long sid = (unsigned long long) e->session;
        switch (e->kind) {
        case 1:
            snprintf(title, sizeof title, "s%llu %s", sid, name);
            sl_textbuf_printf(b, ",{\"ph\":\"X\",\"cat\":\"%s\",\"name\":",
                              e->arg ? "iteration,op_by_op" : "iteration");
            jstr(b, title);
            sl_textbuf_printf(
                b,
                ",\"pid\":1,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"session\":%llu,"
                "\"priority\":%d}}",
                e->lane, us(tr, e->ts_ns), (double) e->dur_ns / 1e3, sid, e->priority);
            break;
        case 2: {
            unsigned op = (unsigned) (e->arg >> 32 & 0xffff), dtype = e->arg >> 52 & 0xf;
            const sl_op_def *def = sl_op_get(op);
            bool gap = e->arg >> 48 & 1;
            const char *math = op_math(op, dtype, e->arg >> 56 & 3);
            sl_textbuf_printf(b,
                              ",{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":1,\"tid\":%u,"
                              "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"session\":%llu,\"priority\":%d,"
                              "\"index\":%llu,\"dtype\":\"%s\"",
                              gap ? "op,gap_fill" : "op", def ? def->name : "op", e->lane,
                              us(tr, e->ts_ns), (double) e->dur_ns / 1e3, sid, e->priority,
                              (unsigned long long) (e->arg & 0xffffffffu), sl_dtype_name(dtype));
            if (math)
                sl_textbuf_printf(b, ",\"math\":\"%s\"", math);
            sl_textbuf_printf(b, "}}");
            break;
        }
        case 3:
            sl_textbuf_printf(
                b,
                ",{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"switch\",\"name\":\"switch\",\"pid\":1,"
                "\"tid\":%u,\"ts\":%.3f,\"args\":{\"from\":%llu,\"to\":%llu}}",
                e->lane, us(tr, e->ts_ns), (unsigned long long) e->arg, sid);
            break;
        case 4:
        case 5:
            sl_textbuf_printf(
                b,
                ",{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":2,\"tid\":%llu,\"ts\":%.3f,"
                "\"dur\":%.3f,\"args\":{\"lane\":%u,\"priority\":%d}}",
                e->kind == 4 ? "admission" : "queued", e->kind == 4 ? "admission wait" : "queued",
                sid, us(tr, e->ts_ns), (double) e->dur_ns / 1e3, e->lane, e->priority);
            break;
        default:
            break;
        }
    }
    sl_textbuf_printf(b, "]}");
}

int salus_trace_stop_json(salus_client *c, char **json, size_t *n_events)
{
    Salus__Request req = SALUS__REQUEST__INIT;
    Salus__Trace t = SALUS__TRACE__INIT;
    req.body_case = SALUS__REQUEST__BODY_TRACE;
    req.trace = &t;
    Salus__Reply *rep;
    int rc = call(c, &req, SALUS__REPLY__BODY_TRACE, &rep);
    if (rc)
        return rc;
    sl_textbuf b = {0};
    chrome(&b, rep->trace);
    if (n_events)
        *n_events = rep->trace->n_events;
    salus__reply__free_unpacked(rep, NULL);
    return finish(&b, json);
}
